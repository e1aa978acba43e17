//! Metrics that programs using zpage regions publish, one file per process:
//! `DIR/zpage-<pid>.prom` in the text format, every series labelled `pid`
//! and `comm` and named `zpage_region_*`, `zpage_tier_*` or
//! `zpage_process_*`, written to a temporary name and renamed into place
//! every few seconds. The exporter reads every such file on each scrape,
//! checks it, and merges the families of all processes (one HELP and TYPE
//! per family). The contract is written down in `docs/process-metrics.md`.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::text_format::{self, Family};

/// Environment variable naming the directory (writer and exporter alike).
pub const METRICS_DIR_ENV: &str = "ZPAGE_METRICS_DIR";
/// A file not rewritten for this long is stale: its process stopped publishing.
pub const STALE_AFTER: Duration = Duration::from_secs(60);
/// Larger files are refused (a process's regions fit in far less).
pub const MAX_FILE_BYTES: u64 = 4 << 20;
/// Name prefixes a process's series may use.
pub const ALLOWED_PREFIXES: [&str; 3] = ["zpage_region_", "zpage_tier_", "zpage_process_"];

/// The directory in effect: `$ZPAGE_METRICS_DIR`; else `/run/zpage` for
/// root; else `$XDG_RUNTIME_DIR/zpage`; else `/tmp/zpage-<uid>`.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(METRICS_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let uid = crate::sys::effective_uid();
    if uid == 0 {
        return PathBuf::from("/run/zpage");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => Path::new(&runtime).join("zpage"),
        None => PathBuf::from(format!("/tmp/zpage-{uid}")),
    }
}

/// Why a file was left out of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skipped {
    /// Its process no longer exists (killed before it could remove the file).
    Gone,
    /// Its process lives but has not rewritten the file for [`STALE_AFTER`].
    Stale,
    /// It breaks the contract (malformed, too large, outside the namespaces,
    /// another PID or comm, a type conflicting with another file's, not a
    /// regular file).
    Rejected,
}

impl Skipped {
    /// Every reason, in the order the exporter reports them.
    pub const ALL: [Skipped; 3] = [Skipped::Gone, Skipped::Stale, Skipped::Rejected];

    /// The `state` label of `zpage_exporter_process_files`.
    pub fn label(self) -> &'static str {
        match self {
            Skipped::Gone => "gone",
            Skipped::Stale => "stale",
            Skipped::Rejected => "rejected",
        }
    }
}

/// What one scrape of the directory found.
#[derive(Debug, Default)]
pub struct ProcessMetrics {
    /// The merged families of every accepted file.
    pub families: Vec<Family>,
    /// Files merged.
    pub files_merged: u64,
    /// Files skipped: which, why, and what exactly was wrong.
    pub skipped: Vec<(PathBuf, Skipped, String)>,
}

impl ProcessMetrics {
    /// Files skipped for `reason`.
    pub fn count(&self, reason: Skipped) -> u64 {
        self.skipped.iter().filter(|(_, r, _)| *r == reason).count() as u64
    }
}

fn pid_of(path: &Path) -> Option<u32> {
    path.file_name()?
        .to_str()?
        .strip_prefix("zpage-")?
        .strip_suffix(".prom")?
        .parse()
        .ok()
}

/// The process's name, or `None` when it no longer exists.
fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// Checks one file's families against the contract; returns why not.
fn check(families: &[Family], pid: u32, comm: &str) -> Result<(), String> {
    for family in families {
        if !ALLOWED_PREFIXES.iter().any(|p| family.name.starts_with(p)) {
            return Err(format!(
                "family {} is outside the {} namespaces",
                family.name,
                ALLOWED_PREFIXES.join(", ")
            ));
        }
        for sample in &family.samples {
            if sample.label("pid") != Some(pid.to_string().as_str()) {
                return Err(format!(
                    "{} has pid label {:?}, the file name says {pid}",
                    sample.name,
                    sample.label("pid")
                ));
            }
            match sample.label("comm") {
                Some(c) if c == comm => {}
                Some(c) => {
                    return Err(format!(
                        "{} has comm {c:?} but process {pid} is {comm:?} (the PID was reused)",
                        sample.name
                    ))
                }
                None => return Err(format!("{} has no comm label", sample.name)),
            }
        }
    }
    Ok(())
}

/// Merges `incoming` into `merged`; refuses (and changes nothing) when a
/// family's type differs from the one already merged.
fn merge(merged: &mut Vec<Family>, incoming: Vec<Family>) -> Result<(), String> {
    for family in &incoming {
        if let Some(existing) = merged.iter().find(|m| m.name == family.name) {
            if existing.kind != family.kind {
                return Err(format!(
                    "family {} is a {} here but a {} in another process's file",
                    family.name, family.kind, existing.kind
                ));
            }
        }
    }
    for family in incoming {
        match merged.iter_mut().find(|m| m.name == family.name) {
            Some(existing) => {
                if existing.help.is_none() {
                    existing.help = family.help;
                }
                existing.samples.extend(family.samples);
            }
            None => merged.push(family),
        }
    }
    Ok(())
}

/// Reads and checks one file. It is opened without following a symbolic
/// link and without waiting on a FIFO, and read only up to
/// [`MAX_FILE_BYTES`]: the directory may hold what another user put there.
fn read_one(path: &Path, pid: u32, now: SystemTime) -> Result<Vec<Family>, (Skipped, String)> {
    let rejected = |why: String| (Skipped::Rejected, why);
    let Some(comm) = comm_of(pid) else {
        return Err((Skipped::Gone, format!("process {pid} no longer exists")));
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => rejected("a symbolic link (not followed)".into()),
            _ => rejected(e.to_string()),
        })?;
    let meta = file.metadata().map_err(|e| rejected(e.to_string()))?;
    if !meta.is_file() {
        return Err(rejected("not a regular file".into()));
    }
    // Only the process's own user (or root) speaks for it.
    let runs_as = std::fs::metadata(format!("/proc/{pid}")).map(|m| m.uid());
    if let Ok(runs_as) = runs_as {
        if meta.uid() != runs_as && meta.uid() != 0 {
            return Err(rejected(format!(
                "owned by uid {} but process {pid} runs as uid {runs_as}",
                meta.uid()
            )));
        }
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(rejected(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let age = meta
        .modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default();
    if age > STALE_AFTER {
        return Err((
            Skipped::Stale,
            format!(
                "not rewritten for {} s (limit {} s): process {pid} stopped publishing",
                age.as_secs(),
                STALE_AFTER.as_secs()
            ),
        ));
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| rejected(e.to_string()))?;
    let families = text_format::parse(&text).map_err(rejected)?;
    check(&families, pid, &comm).map_err(rejected)?;
    Ok(families)
}

/// Reads every `zpage-<pid>.prom` in `dir`. A missing directory is not an
/// error (no process publishes); an unreadable one is reported as skipped.
pub fn read_dir(dir: &Path) -> ProcessMetrics {
    let mut result = ProcessMetrics::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return result,
        Err(e) => {
            result
                .skipped
                .push((dir.to_path_buf(), Skipped::Rejected, e.to_string()));
            return result;
        }
    };
    let mut files: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter_map(|path| pid_of(&path).map(|pid| (pid, path)))
        .collect();
    files.sort();
    let now = SystemTime::now();
    for (pid, path) in files {
        let merged = read_one(&path, pid, now).and_then(|families| {
            merge(&mut result.families, families).map_err(|why| (Skipped::Rejected, why))
        });
        match merged {
            Ok(()) => result.files_merged += 1,
            Err((reason, why)) => result.skipped.push((path, reason, why)),
        }
    }
    result
}
