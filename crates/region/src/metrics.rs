//! Publishing a process's region figures for `zpage exporter`: one
//! Prometheus text file per process, rewritten every few seconds and removed
//! at exit (the contract is `docs/process-metrics.md`). Families and help
//! come from the one figure list ([`crate::region_stat_fields!`]): gauges
//! keep their names, counters end in `_total` and times are in seconds.
//!
//! Off unless asked: [`publish_metrics`] (or `ZPAGE_METRICS_DIR` set in the
//! environment when the first budget is made) starts the one publisher
//! thread of the process. It blocks asynchronous signals, like zpage's other
//! threads.

use crate::counters::{RegionStats, StatKind, LATENCY_BUCKETS};
use crate::error::RegionError;
use crate::sys;
use crate::table;
use std::ffi::CString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// How often the file is rewritten (the exporter skips files older than 60 s).
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// The environment variable naming the directory (shared with the exporter).
pub const METRICS_DIR_ENV: &str = "ZPAGE_METRICS_DIR";

/// The directory the contract names: `$ZPAGE_METRICS_DIR`, else `/run/zpage`
/// for root, else `$XDG_RUNTIME_DIR/zpage`, else `/tmp/zpage-<uid>`.
pub fn default_metrics_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(METRICS_DIR_ENV) {
        return PathBuf::from(dir);
    }
    let uid = sys::getuid();
    if uid == 0 {
        return PathBuf::from("/run/zpage");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
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

/// The Prometheus name of a figure: counters end in `_total`, nanoseconds
/// become seconds.
fn family(name: &str, kind: StatKind) -> (String, f64) {
    match kind {
        StatKind::Gauge => (format!("zpage_region_{name}"), 1.0),
        StatKind::Counter => {
            if let Some(base) = name.strip_suffix("_ns") {
                (format!("zpage_region_{base}_seconds_total"), 1e-9)
            } else {
                let base = name.strip_suffix("_count").unwrap_or(name);
                (format!("zpage_region_{base}_total"), 1.0)
            }
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
        let (name, scale) = family(field.name, field.kind);
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

/// Writes the file once: to a temporary name, then renamed over the real one.
fn write_once(path: &Path) -> std::io::Result<()> {
    let text = render(std::process::id(), &comm(), &sample_regions());
    let tmp = path.with_file_name(format!(".zpage-{}.prom.tmp", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The file being published, for the exit hook.
static PUBLISHED: OnceLock<CString> = OnceLock::new();
static PUBLISHER: Mutex<Option<PathBuf>> = Mutex::new(None);

extern "C" fn remove_at_exit() {
    if let Some(path) = PUBLISHED.get() {
        sys::unlink(path);
    }
}

/// Starts publishing this process's region figures in the contract's
/// directory ([`default_metrics_dir`]); returns the file's path. Once per
/// process: later calls return the same path.
pub fn publish_metrics() -> Result<PathBuf, RegionError> {
    publish_metrics_to(&default_metrics_dir())
}

/// [`publish_metrics`] into `dir` (created if missing).
pub fn publish_metrics_to(dir: &Path) -> Result<PathBuf, RegionError> {
    let mut publisher = PUBLISHER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = publisher.as_ref() {
        return Ok(path.clone());
    }
    let io = |call: &'static str, e: std::io::Error| RegionError::Sys {
        call,
        errno: format!("{e} ({})", dir.display()),
    };
    std::fs::create_dir_all(dir).map_err(|e| io("create the metrics directory", e))?;
    let path = dir.join(format!("zpage-{}.prom", std::process::id()));
    write_once(&path).map_err(|e| io("write the metrics file", e))?;
    let exit_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        RegionError::InvalidConfig(format!("metrics path {} holds a NUL byte", path.display()))
    })?;
    if PUBLISHED.set(exit_path).is_ok() {
        sys::at_exit(remove_at_exit);
    }
    let thread_path = path.clone();
    crate::threads::spawn_blocking_signals(
        "zpage-metrics",
        Box::new(move || loop {
            std::thread::sleep(PUBLISH_EVERY);
            // A failed write (disk full, directory removed) is retried next time.
            let _ = write_once(&thread_path);
        }),
    )
    .map_err(|e| io("spawn the metrics publisher", e))?;
    *publisher = Some(path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_follow_the_contract() {
        let mut stats = RegionStats {
            fault_count: 3,
            fault_ns: 3_000,
            resident_bytes: 4096,
            ..RegionStats::default()
        };
        stats.fault_latency.count = 3;
        stats.fault_latency.log2_buckets = vec![0; LATENCY_BUCKETS];
        stats.fault_latency.log2_buckets[9] = 3;
        let text = render(
            42,
            "a \"quoted\" name",
            &[RegionSample {
                region: 1,
                budget: 7,
                stats,
            }],
        );
        let labels = r#"pid="42",comm="a \"quoted\" name",region="1",budget="7""#;
        assert!(
            text.contains(&format!("zpage_region_fault_total{{{labels}}} 3\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "zpage_region_fault_seconds_total{{{labels}}} 0.000003\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("zpage_region_resident_bytes{{{labels}}} 4096\n")),
            "{text}"
        );
        assert!(
            text.contains("# TYPE zpage_region_eviction_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE zpage_region_resident_bytes gauge\n"),
            "{text}"
        );
        assert!(text.contains(&format!(
            "zpage_region_fault_duration_seconds_count{{{labels}}} 3\n"
        )));
        // Every family is zpage_region_ or zpage_process_, typed before its samples.
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap().to_string());
            } else if !line.starts_with('#') {
                let name = line.split('{').next().unwrap();
                assert!(
                    name.starts_with("zpage_region_") || name.starts_with("zpage_process_"),
                    "{line}"
                );
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                    .unwrap_or(name);
                assert!(typed.contains(family), "{line} before its TYPE");
            }
        }
    }
}
