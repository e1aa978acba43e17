//! The whole machine: every process the user may read, ranked by the memory
//! compression would save (a `smem`-like view).

use crate::analysis::{analyze_source, AnalyzeOptions, Progress};
use crate::image::{all_pids, PageSource, ProcessSource};
use crate::{AnalyzeError, Result};
use serde::Serialize;
use zpage_codec::{CodecSpec, RejectThreshold, PAGE_SIZE};
use zpage_pool::PoolKind;

/// One process's anonymous memory and what compression would make of it.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    /// PID.
    pub pid: u32,
    /// Command name.
    pub command: String,
    /// Resident private anonymous memory (what swap could compress).
    pub anonymous_bytes: u64,
    /// Pages of one repeated word.
    pub same_filled_pages: u64,
    /// Memory the pool would use for it.
    pub compressed_memory_bytes: u64,
    /// `anonymous_bytes / compressed_memory_bytes` (`None` when nothing is
    /// stored compressed: same-filled pages only).
    pub ratio: Option<f64>,
    /// `anonymous_bytes - compressed_memory_bytes`.
    pub saved_bytes: u64,
}

/// Every readable process, largest saving first.
#[derive(Clone, Debug, Serialize)]
pub struct MachineScan {
    /// The codec used.
    pub codec: String,
    /// The pool used.
    pub pool: String,
    /// Processes, largest saving first.
    pub processes: Vec<ProcessSummary>,
    /// Processes whose memory could not be read.
    pub skipped_processes: u64,
    /// Their PIDs.
    pub skipped_pids: Vec<u32>,
    /// Kernel threads, left out: they have no user memory.
    pub kernel_threads: u64,
    /// Why, for the first one skipped (they share a reason in practice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_reason: Option<String>,
    /// Sum of `anonymous_bytes`.
    pub total_anonymous_bytes: u64,
    /// Sum of `saved_bytes`.
    pub total_saved_bytes: u64,
}

impl MachineScan {
    fn skip(&mut self, pid: u32, why: &AnalyzeError) {
        self.skipped_processes += 1;
        self.skipped_pids.push(pid);
        self.skipped_reason.get_or_insert_with(|| why.to_string());
    }
}

/// Analyses every process but this one with `codec` and `pool` (sizes only,
/// no latency), reading at most `max_pages_per_process` pages of each.
pub fn scan_machine(
    codec: &CodecSpec,
    pool: PoolKind,
    threshold: RejectThreshold,
    max_pages_per_process: Option<u64>,
    progress: &mut dyn FnMut(Progress),
) -> Result<MachineScan> {
    let options = AnalyzeOptions {
        codecs: vec![codec.clone()],
        pools: vec![pool],
        threshold,
        decompress_rounds: 0,
        ..AnalyzeOptions::default()
    };
    let pids: Vec<u32> = all_pids()?
        .into_iter()
        .filter(|&pid| pid != std::process::id())
        .collect();
    progress(Progress::Phase {
        name: "processes".into(),
        total: pids.len() as u64,
    });
    let mut scan = MachineScan {
        codec: codec.to_string(),
        pool: pool.name().to_string(),
        processes: Vec::new(),
        skipped_processes: 0,
        skipped_pids: Vec::new(),
        kernel_threads: 0,
        skipped_reason: None,
        total_anonymous_bytes: 0,
        total_saved_bytes: 0,
    };
    for (done, pid) in pids.into_iter().enumerate() {
        progress(Progress::Advance { done: done as u64 });
        let mut image = match ProcessSource::open(pid, max_pages_per_process) {
            Ok(image) => image,
            Err(AnalyzeError::KernelThread { .. }) => {
                scan.kernel_threads += 1;
                continue;
            }
            // Exited (or exiting) meanwhile: nothing to report.
            Err(AnalyzeError::NoSuchProcess { .. } | AnalyzeError::Zombie { .. }) => continue,
            Err(error) => {
                scan.skip(pid, &error);
                continue;
            }
        };
        if image.total_pages() == 0 {
            continue; // holds no data
        }
        let analysis = match analyze_source(&mut image, &options, &mut |_| {}) {
            Ok(analysis) => analysis,
            // Exited while being read.
            Err(AnalyzeError::NoSuchProcess { .. } | AnalyzeError::Zombie { .. }) => continue,
            Err(error @ AnalyzeError::ProcessUnreadable { .. }) => {
                scan.skip(pid, &error);
                continue;
            }
            Err(error) => return Err(error),
        };
        // A codec that could not be measured on so little memory (zstd-dict
        // without enough pages to train on) has no pool figure to rank by.
        let Some(memory) = analysis.pools.first().map(|p| p.memory_used_bytes) else {
            continue;
        };
        let command = match image.source() {
            crate::Source::Process { command, .. } => command,
            crate::Source::File { .. } => String::new(),
        };
        let anonymous_bytes = analysis.pages * PAGE_SIZE as u64;
        let summary = ProcessSummary {
            pid,
            command,
            anonymous_bytes,
            same_filled_pages: analysis.same_filled_pages,
            compressed_memory_bytes: memory,
            ratio: (memory > 0 && anonymous_bytes > 0)
                .then(|| anonymous_bytes as f64 / memory as f64),
            saved_bytes: anonymous_bytes.saturating_sub(memory),
        };
        scan.total_anonymous_bytes += summary.anonymous_bytes;
        scan.total_saved_bytes += summary.saved_bytes;
        scan.processes.push(summary);
    }
    scan.processes
        .sort_by(|a, b| b.saved_bytes.cmp(&a.saved_bytes).then(a.pid.cmp(&b.pid)));
    Ok(scan)
}
