//! Publishing a process's region figures for `zpage exporter`: one
//! Prometheus text file per process, rewritten every few seconds and removed
//! at exit (the contract is `docs/process-metrics.md`). Families and help
//! come from the one figure list ([`crate::region_stat_fields!`]), and for
//! the tier below RAM of a budget, from the tier's ([`TierStats::FIELDS`]):
//! gauges keep their names, counters end in `_total` and times are in
//! seconds.
//!
//! Started by [`publish_metrics`], or by `ZPAGE_METRICS_DIR` set in the
//! environment when the first budget is made (`zpage run` sets it unless
//! `--no-metrics`; a program using the library, the C API or the Python
//! package asks for it): the one publisher thread of the process. It blocks
//! asynchronous signals, like zpage's other threads.
//!
//! The writer may run inside someone else's program, as root, in a
//! directory another user chose: it refuses a directory another user could
//! write, reaches its files through the directory it opened and checked,
//! and creates each one new and private (0600) before renaming it into
//! place, so no name another user planted is ever followed.

use crate::counters::{RegionStats, StatKind, LATENCY_BUCKETS};
use crate::error::RegionError;
use crate::sys;
use crate::table;
use std::ffi::CString;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use zpage_store::{TierFieldKind, TierStats};

/// How often the file is rewritten (the exporter skips files older than 60 s).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// The environment variable naming the directory (shared with the exporter).
pub const METRICS_DIR_ENV: &str = "ZPAGE_METRICS_DIR";

/// The directory the contract names: `$ZPAGE_METRICS_DIR`, else `/run/zpage`
/// for root, else `$XDG_RUNTIME_DIR/zpage`, else `/tmp/zpage-<uid>`.
pub fn default_metrics_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(METRICS_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let uid = sys::getuid();
    if uid == 0 {
        return PathBuf::from("/run/zpage");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(runtime) => PathBuf::from(runtime).join("zpage"),
        None => PathBuf::from(format!("/tmp/zpage-{uid}")),
    }
}

/// One region's figures and the labels that tell it apart.
#[derive(Clone, Debug)]
pub struct RegionSample {
    /// The region's table index in this process.
    pub region: u16,
    /// The budget it draws on (a number unique in the process).
    pub budget: u64,
    /// Its figures.
    pub stats: RegionStats,
}

/// The Prometheus name of a figure `prefix` + `name`, and the factor to
/// its unit: counters end in `_total`, nanoseconds become seconds.
fn family(prefix: &str, name: &str, kind: StatKind) -> (String, f64) {
    let (base, scale) = match name.strip_suffix("_ns") {
        Some(base) => (format!("{base}_seconds"), 1e-9),
        None => (name.to_string(), 1.0),
    };
    match kind {
        StatKind::Gauge => (format!("{prefix}{base}"), scale),
        StatKind::Counter => {
            let base = base.strip_suffix("_count").unwrap_or(&base);
            (format!("{prefix}{base}_total"), scale)
        }
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the figures of `samples` in the text exposition format, every
/// sample labelled with `pid` and `comm`.
pub fn render(pid: u32, comm: &str, samples: &[RegionSample]) -> String {
    let mut out = String::new();
    let process = format!("pid=\"{pid}\",comm=\"{}\"", escape_label(comm));
    let labels =
        |s: &RegionSample| format!("{process},region=\"{}\",budget=\"{}\"", s.region, s.budget);
    let _ = writeln!(
        out,
        "# HELP zpage_process_regions Regions live in the process."
    );
    let _ = writeln!(out, "# TYPE zpage_process_regions gauge");
    let _ = writeln!(out, "zpage_process_regions{{{process}}} {}", samples.len());
    for (i, field) in RegionStats::FIELDS.iter().enumerate() {
        let (name, scale) = family("zpage_region_", field.name, field.kind);
        let help = field.help.split_whitespace().collect::<Vec<_>>().join(" ");
        let kind = match field.kind {
            StatKind::Gauge => "gauge",
            StatKind::Counter => "counter",
        };
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for sample in samples {
            let value = sample.stats.values()[i] as f64 * scale;
            let _ = writeln!(out, "{name}{{{}}} {value}", labels(sample));
        }
    }
    render_tiers(&mut out, &process, samples);
    let name = "zpage_region_fault_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time spent resolving faults, from handler entry to the page being mapped."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for sample in samples {
        let latency = &sample.stats.fault_latency;
        let mut cumulative = 0u64;
        for bucket in 0..LATENCY_BUCKETS {
            cumulative += latency.log2_buckets.get(bucket).copied().unwrap_or(0);
            let le = (1u64 << (bucket + 1)) as f64 * 1e-9;
            let _ = writeln!(
                out,
                "{name}_bucket{{{},le=\"{le:e}\"}} {cumulative}",
                labels(sample)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{},le=\"+Inf\"}} {}",
            labels(sample),
            latency.count
        );
        let _ = writeln!(
            out,
            "{name}_sum{{{}}} {}",
            labels(sample),
            sample.stats.fault_ns as f64 * 1e-9
        );
        let _ = writeln!(out, "{name}_count{{{}}} {}", labels(sample), latency.count);
    }
    out
}

/// The figures of the tier below RAM of each budget `samples` draw on (the
/// regions of a budget share its tier, so it is published once, labelled
/// with `budget`), named from the tier's list ([`TierStats::FIELDS`]), and
/// whether it takes writes. Nothing when no budget has a tier.
fn render_tiers(out: &mut String, process: &str, samples: &[RegionSample]) {
    let mut tiers: Vec<(u64, Vec<Option<u64>>, bool)> = Vec::new();
    for sample in samples {
        if let Some(tier) = &sample.stats.store.tier {
            if !tiers.iter().any(|(budget, ..)| *budget == sample.budget) {
                tiers.push((sample.budget, tier.values(), tier.available));
            }
        }
    }
    if tiers.is_empty() {
        return;
    }
    let fields = TierStats::FIELDS;
    for (first, field) in fields.iter().enumerate() {
        // A family's figures are published together, under its first.
        if fields[..first].iter().any(|f| f.family == field.family) {
            continue;
        }
        let members: Vec<usize> = (first..fields.len())
            .filter(|&i| fields[i].family == field.family)
            .collect();
        let kind = match field.kind {
            TierFieldKind::Gauge => StatKind::Gauge,
            TierFieldKind::Counter => StatKind::Counter,
        };
        let (name, scale) = family("zpage_tier_", field.family, kind);
        let one_line = |help: &str| help.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = match field.cause {
            None => one_line(field.help),
            Some(_) => {
                let causes: Vec<String> = members
                    .iter()
                    .map(|&i| {
                        let cause = fields[i].cause.unwrap_or_default();
                        format!("{cause}: {}", one_line(fields[i].help))
                    })
                    .collect();
                format!("By cause. {}", causes.join(" "))
            }
        };
        let kind = match kind {
            StatKind::Gauge => "gauge",
            StatKind::Counter => "counter",
        };
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (budget, values, _) in &tiers {
            for &i in &members {
                // A figure this kind of tier does not have (no file to
                // measure, say) is left out, not published as 0.
                let Some(value) = values[i] else { continue };
                let cause = fields[i]
                    .cause
                    .map(|cause| format!(",cause=\"{cause}\""))
                    .unwrap_or_default();
                let value = value as f64 * scale;
                let _ = writeln!(
                    out,
                    "{name}{{{process},budget=\"{budget}\"{cause}}} {value}"
                );
            }
        }
    }
    let name = "zpage_tier_up";
    let _ = writeln!(
        out,
        "# HELP {name} Whether the tier takes writes (1), or is down after a failure (0: pages stay in memory, and it is tried again now and then)."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (budget, _, available) in &tiers {
        let _ = writeln!(
            out,
            "{name}{{{process},budget=\"{budget}\"}} {}",
            u8::from(*available)
        );
    }
}

/// The figures of every live region of this process.
pub fn sample_regions() -> Vec<RegionSample> {
    let pid = sys::getpid();
    let mut samples = Vec::new();
    table::for_each(|core| {
        if core.owner_pid() == pid {
            samples.push(RegionSample {
                region: core.id().index,
                budget: core.budget.id(),
                stats: core.stats(),
            });
        }
    });
    samples
}

fn comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default()
}

/// Why a metrics directory is not used: another user could plant a
/// symbolic link or a file where zpage writes, or read and replace its
/// figures.
fn refuse(dir: &Path, problem: String) -> RegionError {
    let error = RegionError::Sys {
        call: "use the metrics directory",
        errno: format!(
            "{}: {problem}; remove it (a new one is made, mode 0700), or set {METRICS_DIR_ENV} to a directory only you can write",
            dir.display()
        ),
    };
    // The budget that starts publishing from the environment (preload,
    // Python) cannot report it; a directory someone else controls is worth
    // one line on stderr, once.
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        // Not eprintln!, which panics when stderr fails.
        let _ = writeln!(std::io::stderr(), "zpage: not publishing metrics: {error}");
    }
    error
}

/// Opens `dir`, making it (mode 0700) if it is missing, and checks that
/// only this user (or root) can write it: not a symbolic link, owned by
/// this user or root, not writable by group or others. Returns it open:
/// files reached through the descriptor are in the directory checked, even
/// if its path is renamed or replaced meanwhile.
fn open_checked_dir(dir: &Path) -> Result<File, RegionError> {
    let io = |call: &'static str, e: std::io::Error| RegionError::Sys {
        call,
        errno: format!("{e} ({})", dir.display()),
    };
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
    };
    let opened = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| io("create the metrics directory's parent", e))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                // Made meanwhile by someone else: the checks below decide.
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(io("create the metrics directory", e))
                }
                _ => open(),
            }
        }
        other => other,
    };
    let dir_file = match opened {
        Ok(file) => file,
        // O_NOFOLLOW|O_DIRECTORY says ELOOP or ENOTDIR for a link.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let link = std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            return Err(refuse(
                dir,
                if link {
                    "is a symbolic link"
                } else {
                    "is not a directory"
                }
                .into(),
            ));
        }
        Err(e) => return Err(io("open the metrics directory", e)),
    };
    let meta = dir_file
        .metadata()
        .map_err(|e| io("stat the metrics directory", e))?;
    let me = sys::getuid();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(refuse(
            dir,
            format!(
                "is owned by uid {}, not by you (uid {me}) or root",
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refuse(
            dir,
            format!(
                "is writable by group or others (mode {:04o})",
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(dir_file)
}

/// Removes the file process `pid` published in `dir`, if the process is
/// gone: a process that ended without its exit hook (an `exec` replaced
/// it, `_exit`, a signal) leaves it behind. For `zpage run`, which knows
/// its processes from their reports. Only a regular file is removed, never
/// through a symbolic link.
pub fn remove_published_if_gone(dir: &Path, pid: u32) {
    if Path::new("/proc").join(pid.to_string()).exists() {
        return;
    }
    let path = dir.join(published_name(pid));
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
        let _ = std::fs::remove_file(&path);
    }
}

/// The name process `pid` publishes under.
fn published_name(pid: u32) -> String {
    format!("zpage-{pid}.prom")
}

/// Where the process publishes: the directory and the two names in it.
struct Target {
    dir: PathBuf,
    temporary: String,
    published: String,
}

impl Target {
    fn new(dir: &Path) -> Target {
        let pid = std::process::id();
        Target {
            dir: dir.to_path_buf(),
            temporary: format!(".zpage-{pid}.prom.tmp"),
            published: published_name(pid),
        }
    }

    /// Writes the file once: a new private file (0600, `O_CREAT|O_EXCL|
    /// O_NOFOLLOW`), renamed over the published name, so a scrape never
    /// reads half a file and no name another user made is ever followed.
    ///
    /// The directory is opened and checked each time, and the files are
    /// reached through that descriptor as `/proc/self/fd/N/NAME` (resolved
    /// from the open directory, not its path: the `openat` std does not
    /// offer, in a module that stays free of `unsafe`). It is closed again:
    /// a program that closes descriptors it did not open cannot make zpage
    /// write through a number it reused, and sees none of zpage's between
    /// writes.
    fn write_once(&self) -> Result<(), RegionError> {
        let dir = open_checked_dir(&self.dir)?;
        let base = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let (temporary, published) = (base.join(&self.temporary), base.join(&self.published));
        let text = render(std::process::id(), &comm(), &sample_regions());
        let create = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&temporary)
        };
        let written = match create() {
            // Left by a write that failed half-way: removing a name never
            // follows it, whatever it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&temporary).and_then(|()| create())
            }
            other => other,
        }
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&temporary, &published));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.map_err(|e| RegionError::Sys {
            call: "write the metrics file",
            errno: format!("{e} ({})", self.dir.join(&self.published).display()),
        })
    }
}

/// The file being published and the process publishing it, for the exit
/// hook (a forked child inherits the hook, and must leave its parent's file).
static PUBLISHED: OnceLock<(u32, CString)> = OnceLock::new();
static PUBLISHER: Mutex<Option<PathBuf>> = Mutex::new(None);

extern "C" fn remove_at_exit() {
    if let Some((pid, path)) = PUBLISHED.get() {
        if *pid == std::process::id() {
            sys::unlink(path);
        }
    }
}

/// Starts publishing this process's region figures in the contract's
/// directory ([`default_metrics_dir`]); returns the file's path. Once per
/// process: later calls return the same path.
pub fn publish_metrics() -> Result<PathBuf, RegionError> {
    publish_metrics_to(&default_metrics_dir())
}

/// [`publish_metrics`] into `dir`: made (mode 0700) if missing, refused if
/// another user could write it (see `docs/process-metrics.md`).
pub fn publish_metrics_to(dir: &Path) -> Result<PathBuf, RegionError> {
    let mut publisher = PUBLISHER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = publisher.as_ref() {
        return Ok(path.clone());
    }
    let target = Target::new(dir);
    target.write_once()?;
    let path = dir.join(&target.published);
    let exit_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        RegionError::InvalidConfig(format!("metrics path {} holds a NUL byte", path.display()))
    })?;
    let first = PUBLISHED.set((std::process::id(), exit_path)).is_ok();
    crate::threads::spawn_blocking_signals(
        "zpage-metrics",
        Box::new(move || {
            // The exit hook is registered here, not by the caller: a budget
            // may start inside the C library's own `atexit` (its list grows
            // with `calloc`, which under the preload library can map the
            // first memory, which starts the budget), whose lock `atexit`
            // would then wait on forever. This thread waits for it instead.
            if first {
                sys::at_exit(remove_at_exit);
            }
            loop {
                std::thread::sleep(PUBLISH_EVERY);
                // A failed write (disk full, the directory refused) is retried
                // next time; a directory removed meanwhile is made again.
                let _ = target.write_once();
            }
        }),
    )
    .map_err(|e| RegionError::Sys {
        call: "spawn the metrics publisher",
        errno: e.to_string(),
    })?;
    *publisher = Some(path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests;
