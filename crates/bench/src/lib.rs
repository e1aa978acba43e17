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

pub mod dataset;
pub mod histogram;
pub mod kernel;
pub mod pattern;
pub mod redis_load;
pub mod report;
pub mod rng;
pub mod trace;
pub mod workload;
pub mod zpage_tier;

/// Re-exported so the CLI can derive `Serialize` for its own summaries.
pub use serde;

pub use dataset::DataSource;
pub use error::BenchError;
pub use histogram::LatencyHistogram;
pub use pattern::{Op, Pattern, TouchPlan};
pub use report::BenchResult;
pub use workload::{Memory, MemoryProbe, Observer, Phase, WorkloadKind, WorkloadSpec};
pub use zpage_region::{AgingPolicy, CodecSpec, FaultMode};
pub use zpage_tier::{run_zpage_tier, ZpageOptions};

/// Page size the workloads assume (the project's one page size).
pub use zpage_region::PAGE_SIZE;

static STOP_REQUESTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Asks running workloads to stop at their next progress check (Ctrl-C handler).
pub fn request_stop() {
    STOP_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// True once [`request_stop`] was called.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(std::sync::atomic::Ordering::Relaxed)
}

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP_REQUESTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes Ctrl-C (SIGINT) and SIGTERM request a stop instead of killing the
/// process, so runs end cleanly and the machine's swap state is restored. The
/// handler resets itself: a second Ctrl-C kills as usual.
pub fn install_interrupt_handler() -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; we
        // then set a handler that only performs an atomic store.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Aborts the whole process if still armed after a time limit: tests that
/// drive regions must fail, never hang CI, if a fault path ever livelocks.
#[derive(Debug)]
pub struct Watchdog {
    disarmed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    /// Arms a watchdog for `what`, aborting after `limit`.
    pub fn arm(limit: std::time::Duration, what: &'static str) -> Watchdog {
        let disarmed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&disarmed);
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                if start.elapsed() > limit {
                    eprintln!("watchdog: {what} still running after {limit:?}: aborting");
                    std::process::abort();
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        Watchdog { disarmed }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarmed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
