//! The process's report: sampled peaks while it runs, one JSON file at exit.

use crate::state::{self, FORKED_CHILD, INACTIVE};
use std::sync::atomic::Ordering;
use zpage_region::run_report::{ProcessReport, REPORT_DIR_ENV};

/// How often resident memory and the evicted pages are sampled.
const SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_millis(50);

/// Resident bytes of this process (`/proc/self/statm`, second field).
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * zpage_codec::PAGE_SIZE as u64)
}

/// The kernel's high-water mark of this process's resident set
/// (`VmHWM` in `/proc/self/status`): exact where sampling can miss a
/// short peak.
pub fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// Starts the sampling thread (asynchronous signals blocked: the program's
/// handlers never run on it).
pub fn start_sampler() {
    let _ = zpage_region::spawn_blocking_signals(
        "zpage-sample",
        Box::new(|| loop {
            if FORKED_CHILD.load(Ordering::Relaxed) {
                return;
            }
            if let Some(state) = state::get() {
                state.sample();
            }
            std::thread::sleep(SAMPLE_PERIOD);
        }),
    );
}

fn program() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The report of this process now.
pub fn current() -> ProcessReport {
    let pid = std::process::id() as i32;
    let mut r = match state::get() {
        Some(state) => {
            state.sample();
            state.report()
        }
        None => {
            let mut r = ProcessReport::new(pid, String::new());
            r.inactive_reason = INACTIVE.get().cloned();
            r
        }
    };
    r.peak_rss_bytes = r.peak_rss_bytes.max(peak_resident_bytes());
    r.pid = pid;
    r.program = program();
    r
}

/// At exit: writes the report into the directory `zpage run` named.
pub extern "C" fn write_at_exit() {
    if FORKED_CHILD.load(Ordering::Relaxed) {
        return;
    }
    let Some(dir) = std::env::var_os(REPORT_DIR_ENV) else {
        return;
    };
    let _inside = crate::sys::Inside::enter();
    let dir = std::path::PathBuf::from(dir);
    let report = current();
    let path = report.path_in(&dir);
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, report.to_json()).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}
