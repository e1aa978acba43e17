//! The figures one process run under `zpage run` leaves behind: the preload
//! library writes one [`ProcessReport`] per process, as a JSON file, into the
//! directory `zpage run` names in [`REPORT_DIR_ENV`]; `zpage run` reads them
//! all back and prints the summary. Both sides use this one type, so the
//! file's format lives in one place (the `zpage` binary reads it without
//! linking the preload library's interposers).

use crate::counters::{LatencySummary, RegionStats, StatKind, LATENCY_BUCKETS};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable naming the directory reports go to.
pub const REPORT_DIR_ENV: &str = "ZPAGE_RUN_REPORT_DIR";

/// Version of the file format; a reader refuses other versions.
pub const REPORT_VERSION: u32 = 1;

/// What one process did under the preload library.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessReport {
    /// [`REPORT_VERSION`].
    pub version: u32,
    pub pid: i32,
    /// The program (`/proc/self/exe`).
    pub program: String,
    /// False when the preload library ran the process without zpage (bad
    /// configuration, no userfaultfd); `inactive_reason` says why.
    pub active: bool,
    pub inactive_reason: Option<String>,
    /// The process's budget (each process has its own).
    pub budget_bytes: u64,
    pub codec: String,
    /// Mappings placed in regions, and the most bytes of regions live at once.
    pub regions_made: u64,
    pub region_bytes_peak: u64,
    /// Large private anonymous mappings left as plain memory, and why.
    pub fallback: FallbackCounts,
    /// Peak resident set of the process (sampled from `/proc/self/statm`).
    pub peak_rss_bytes: u64,
    /// The most, at any sample, of resident memory plus the uncompressed size
    /// of what zpage held evicted, less the pool's memory: an estimate of
    /// what the process would have had resident without zpage.
    pub unconstrained_peak_estimate_bytes: u64,
    /// At exit: compressed bytes and the pool's memory for them.
    pub compressed_bytes: u64,
    pub pool_bytes: u64,
    /// The most pages held evicted at any sample.
    pub peak_stored_pages: u64,
    /// The most memory the compressed pool took at any sample.
    #[serde(default)]
    pub peak_pool_bytes: u64,
    /// zpage's own heap at its largest sample: bytes of its live
    /// allocations (the pool's handle and zspage tables, the aging lists,
    /// the codecs' contexts) and bytes of it resident.
    #[serde(default)]
    pub own_heap_peak_bytes: u64,
    #[serde(default)]
    pub own_heap_resident_peak_bytes: u64,
    pub fault_count: u64,
    pub fault_ns: u64,
    pub restore_count: u64,
    pub zero_fill_count: u64,
    pub eviction_count: u64,
    pub compression_count: u64,
    pub throttle_count: u64,
    pub throttle_ns: u64,
    /// Faults that went over the budget because pages could not leave,
    /// and the most bytes the budget held over its limit then.
    #[serde(default)]
    pub overshoot_count: u64,
    #[serde(default)]
    pub overshoot_peak_bytes: u64,
    /// The process's memory max (`--memory-max`; 0: none): a limit on its
    /// whole resident memory, [`ProcessReport::peak_rss_bytes`] included.
    #[serde(default)]
    pub memory_max_bytes: u64,
    /// Looks of the memory max (about one a millisecond) that found the
    /// process's resident memory over it, and the most it was over then.
    #[serde(default)]
    pub memory_max_over_count: u64,
    #[serde(default)]
    pub memory_max_over_peak_bytes: u64,
    /// With an automatic budget (`--budget auto`): its stall target in
    /// parts per million of wall time (0: a fixed budget), the budget in
    /// effect when the process ended, the lowest it set, and the time the
    /// process's threads lost to restores and waits for room.
    #[serde(default)]
    pub auto_budget_stall_target_ppm: u64,
    #[serde(default)]
    pub auto_budget_final_bytes: u64,
    #[serde(default)]
    pub auto_budget_lowest_bytes: u64,
    #[serde(default)]
    pub stall_ns: u64,
    /// Fault latencies in log2 buckets of nanoseconds (see [`LatencySummary`]).
    pub fault_latency_log2_buckets: Vec<u64>,
    /// System calls whose buffers lay in regions (pinned for the call), and
    /// those retried after `EFAULT` (buffers too large to pin).
    pub syscalls_pinned: u64,
    pub syscalls_retried: u64,
    /// System calls on region memory the seccomp trap served (made by the C
    /// library itself, by other libraries, or raw).
    #[serde(default)]
    pub syscalls_trapped: u64,
    /// File pages given back (`--file-pages-every`): passes made, and the
    /// most resident bytes one pass found in the mappings it gave back.
    #[serde(default)]
    pub file_page_passes: u64,
    #[serde(default)]
    pub file_pages_peak_pass_bytes: u64,
    /// `fork()`s made by this process.
    pub forks: u64,
    /// The tier below RAM (`--backing`), when the process's budget had one.
    #[serde(default)]
    pub tier: Option<TierReport>,
    /// Every event counter of the process's regions, summed, by its name in
    /// [`RegionStats::FIELDS`] (trial hits, activations, demotions, clean
    /// evictions...): the fields above are the ones the summary prints.
    #[serde(default)]
    pub region_counters: BTreeMap<String, u64>,
}

/// What a process's tier below RAM did, and whether it was up at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierReport {
    /// Pages written to it.
    pub written_pages: u64,
    /// Pages read back from it (faults it served).
    pub read_pages: u64,
    /// Writes it refused or failed (those pages stayed in memory).
    pub write_failures: u64,
    /// Reads that failed (each a page reported lost).
    pub read_failures: u64,
    /// Pages it held at the end.
    pub held_pages: u64,
    /// Why it was down at the end (`None`: up).
    pub down_cause: Option<String>,
}

impl TierReport {
    /// The report of a tier's figures.
    pub fn of(stats: &zpage_store::TierStats) -> TierReport {
        TierReport {
            written_pages: stats.puts,
            read_pages: stats.gets,
            write_failures: stats.put_fail_full + stats.put_fail_io + stats.put_fail_unavailable,
            read_failures: stats.get_failures(),
            held_pages: stats.pages,
            down_cause: match stats.available {
                true => None,
                false => Some(stats.down_cause.clone().unwrap_or_else(|| "down".into())),
            },
        }
    }
}

/// Large private anonymous mappings (at or above the size threshold) that
/// stayed plain memory, by reason; bytes are summed over them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FallbackCounts {
    /// Made plain after the fact: part unmapped, moved in place, re-protected,
    /// or mapped over with `MAP_FIXED`; their contents were restored first.
    pub ejected_mappings: u64,
    pub ejected_bytes: u64,
    /// Never placed: no free region slot (`MAX_REGIONS`) or a region failed.
    pub refused_mappings: u64,
    pub refused_bytes: u64,
}

impl ProcessReport {
    /// An empty report for this process.
    pub fn new(pid: i32, program: String) -> ProcessReport {
        ProcessReport {
            version: REPORT_VERSION,
            pid,
            program,
            fault_latency_log2_buckets: vec![0; LATENCY_BUCKETS],
            ..ProcessReport::default()
        }
    }

    /// Adds a region's event counters (gauges are the caller's).
    pub fn add_region_counters(&mut self, stats: &RegionStats) {
        self.fault_count += stats.fault_count;
        self.fault_ns += stats.fault_ns;
        self.restore_count += stats.restore_count + stats.trial_hit_count;
        self.zero_fill_count += stats.zero_fill_count;
        self.eviction_count += stats.eviction_count;
        self.compression_count += stats.compression_count;
        self.throttle_count += stats.throttle_count;
        self.throttle_ns += stats.throttle_ns;
        self.overshoot_count += stats.overshoot_count;
        self.overshoot_peak_bytes = self.overshoot_peak_bytes.max(stats.overshoot_peak_bytes);
        self.add_buckets(&stats.fault_latency.log2_buckets);
        let counters = RegionStats::FIELDS
            .iter()
            .zip(stats.values())
            .filter(|(field, _)| field.kind == StatKind::Counter);
        for (field, value) in counters {
            *self
                .region_counters
                .entry(field.name.to_owned())
                .or_default() += value;
        }
    }

    fn add_buckets(&mut self, buckets: &[u64]) {
        if self.fault_latency_log2_buckets.len() < buckets.len() {
            self.fault_latency_log2_buckets.resize(buckets.len(), 0);
        }
        for (sum, n) in self.fault_latency_log2_buckets.iter_mut().zip(buckets) {
            *sum += n;
        }
    }

    /// The fault latency summary.
    pub fn fault_latency(&self) -> LatencySummary {
        LatencySummary::from_log2_buckets(
            self.fault_count,
            self.fault_ns,
            self.fault_latency_log2_buckets.clone(),
        )
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report always serializes")
    }

    /// A report from JSON; an error names what is wrong.
    pub fn from_json(text: &str) -> Result<ProcessReport, String> {
        let report: ProcessReport =
            serde_json::from_str(text).map_err(|e| format!("not a zpage process report: {e}"))?;
        if report.version != REPORT_VERSION {
            return Err(format!(
                "process report version {} (this zpage reads version {REPORT_VERSION}): use the zpage and preload library of one build",
                report.version
            ));
        }
        Ok(report)
    }

    /// The file this report goes to in `dir`.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(format!("process-{}.json", self.pid))
    }

    /// Every report in `dir`, oldest process first (by pid order of
    /// writing is not kept; sorted by pid). Files that are not reports are
    /// an error naming the file.
    pub fn read_dir(dir: &Path) -> Result<Vec<ProcessReport>, String> {
        let mut reports = Vec::new();
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("reading {}: {e}", dir.display()))?
                .path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            reports.push(
                ProcessReport::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            );
        }
        reports.sort_by_key(|r| r.pid);
        Ok(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_json() {
        let mut r = ProcessReport::new(42, "/bin/true".into());
        r.active = true;
        r.budget_bytes = 1 << 20;
        let mut stats = RegionStats {
            fault_count: 3,
            fault_ns: 3000,
            ..RegionStats::default()
        };
        stats.fault_latency.log2_buckets = vec![0; LATENCY_BUCKETS];
        stats.fault_latency.log2_buckets[9] = 3;
        r.add_region_counters(&stats);
        r.add_region_counters(&stats);
        let back = ProcessReport::from_json(&r.to_json()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.fault_count, 6);
        assert_eq!(back.fault_latency().p99_ns, 1024);
        assert_eq!(back.fault_latency().mean_ns, 1000);
    }

    #[test]
    fn another_version_is_refused_with_the_fix() {
        let mut r = ProcessReport::new(1, String::new());
        r.version = 99;
        let e = ProcessReport::from_json(&serde_json::to_string(&r).unwrap()).unwrap_err();
        assert!(e.contains("same build") || e.contains("one build"), "{e}");
        assert!(ProcessReport::from_json("{").is_err());
    }
}
