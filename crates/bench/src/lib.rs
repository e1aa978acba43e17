//! zpage-bench: the workloads behind `zpage bench` and `zpage demo`, the
//! latency histograms they report, and the runner that replays the same
//! workload against the kernel's zram and zswap inside a memory cgroup.
//!
//! A *workload* ([`WorkloadSpec`]) fills memory from a [`DataSource`] and
//! then runs *phases* (pattern × read/write) of timed touches over it. The
//! same spec runs on a zpage region (in this process) and on plain anonymous
//! memory in a child process confined to a memory cgroup whose limit equals
//! the budget ([`kernel`]), so the two see the same pages and the same access
//! sequence, timed the same way.

mod error;

pub mod capture;
pub mod dataset;
pub mod histogram;
pub mod kernel;
pub mod pattern;
pub mod report;
pub mod rng;
pub mod workload;

pub use dataset::DataSource;
pub use error::BenchError;
pub use histogram::LatencyHistogram;
pub use pattern::{Op, Pattern, TouchPlan};
pub use report::BenchResult;
pub use workload::{Memory, MemoryProbe, Observer, Phase, WorkloadKind, WorkloadSpec};

/// Page size the workloads assume (x86-64 and arm64 base pages).
pub const PAGE_SIZE: usize = 4096;

static STOP_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks running workloads to stop at their next progress check (Ctrl-C handler).
pub fn request_stop() {
    STOP_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// True once [`request_stop`] was called.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(std::sync::atomic::Ordering::Relaxed)
}
