//! Kernel mode of `zpage run`: one unmodified program in a fresh memory
//! cgroup limited to a budget, its cold pages swapped out to compressed
//! swap (zram with a chosen algorithm, lz4 by default, or zswap in front of
//! a swap file), and the machine put back as it was when the program ends,
//! fails, or is killed.
//!
//! ```no_run
//! use zpage_kernel::run::{run, RunOptions};
//! let mut command = std::process::Command::new("sort");
//! command.arg("/usr/share/dict/words");
//! let outcome = run(command, &RunOptions::new(64 << 20))?;
//! println!("exit {:?}, peak {} bytes", outcome.exit, outcome.cgroup_peak_bytes);
//! # Ok::<(), zpage_kernel::KernelError>(())
//! ```
//!
//! While the program runs, every signal the supervising process is sent
//! that a supervisor passes on ([`crate::supervise::is_forwarded`]: SIGTERM,
//! SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT...) goes to
//! the program (a terminal's Ctrl-C already reaches it directly), and the
//! supervisor waits for it to end, then restores the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::machine::{MachineGuard, OtherSwap, SwapBackend, CGROUP_PREFIX, CGROUP_SWAPPINESS};
use crate::memcg::{self, CgroupCounters, CgroupVersion, MemoryCgroup};
use crate::supervise::SignalForwarding;
use crate::sys::ChildEnd;
use crate::zram::{MmStat, ZramDevice};
use crate::{procfs, zswap, KernelError, Result};

/// The smallest budget accepted: below it a program cannot even start
/// without the kernel's OOM killer stepping in.
pub const MIN_BUDGET_BYTES: u64 = 4 << 20;

/// The algorithm kernel mode compresses with unless told otherwise.
pub const DEFAULT_ZRAM_ALGORITHM: &str = "lz4";

/// How kernel mode runs a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// RAM the program's cgroup may use; the rest is swapped out (bytes).
    pub budget_bytes: u64,
    /// Where swapped-out pages go.
    pub backend: SwapBackend,
    /// Size of the swap area; `None` for [`default_swap_bytes`].
    pub swap_bytes: Option<u64>,
    /// Directory for the swap file of a zswap backend (default /var/tmp).
    pub scratch_dir: PathBuf,
    /// How often the cgroup, zram and zswap figures are sampled while the program runs.
    pub sample_every: Duration,
    /// Whether swap areas already active stay on during the run.
    pub other_swap: OtherSwap,
    /// zram's `mem_limit`: the most RAM its compressed pool may take
    /// (`None`: no limit). With the cgroup's limit, a limit on the
    /// program's whole memory (`zpage run --memory-max`): zram's pool is
    /// not charged to the cgroup. zram only.
    pub zram_mem_limit_bytes: Option<u64>,
}

impl RunOptions {
    /// zram with lz4, a default-sized swap area, other swap left on, sampled every 50 ms.
    pub fn new(budget_bytes: u64) -> RunOptions {
        RunOptions {
            budget_bytes,
            backend: SwapBackend::Zram(DEFAULT_ZRAM_ALGORITHM.into()),
            swap_bytes: None,
            // Not /tmp: often a tmpfs, which cannot hold a swap file.
            scratch_dir: PathBuf::from("/var/tmp"),
            sample_every: Duration::from_millis(50),
            other_swap: OtherSwap::KeepOn,
            zram_mem_limit_bytes: None,
        }
    }

    /// The swap area size in effect.
    pub fn effective_swap_bytes(&self) -> Result<u64> {
        match self.swap_bytes {
            Some(bytes) => Ok(bytes),
            None => Ok(default_swap_bytes(
                self.budget_bytes,
                procfs::mem_total_bytes()?,
            )),
        }
    }
}

/// The swap area kernel mode makes unless told: eight times the budget (a
/// program that swaps out more than that spends its time faulting), at
/// least 256 MiB, at most half the machine's RAM (compressed swap lives in
/// RAM; zram's table alone costs about 0.4% of its size).
pub fn default_swap_bytes(budget_bytes: u64, mem_total_bytes: u64) -> u64 {
    budget_bytes
        .saturating_mul(8)
        .max(256 << 20)
        .min((mem_total_bytes / 2).max(256 << 20))
}

/// Whether kernel mode can be set up here with `options`: `Ok` when it can,
/// else [`KernelError::KernelModeUnavailable`] listing every missing piece
/// and what to do about it. Changes nothing on the machine.
pub fn check_available(options: &RunOptions) -> Result<()> {
    let mut reasons = Vec::new();
    if !crate::is_root() {
        reasons.push("it needs root (cgroups, swapon, zram): run as root".to_string());
    }
    if let Err(e) = memcg::memory_controller() {
        reasons.push(e.to_string());
    }
    if options.budget_bytes < MIN_BUDGET_BYTES {
        reasons.push(format!(
            "a budget of {} bytes is below the {} MiB a program needs to start: give a larger budget",
            options.budget_bytes,
            MIN_BUDGET_BYTES >> 20
        ));
    }
    match &options.backend {
        SwapBackend::Zram(algorithm) => {
            let devices = ZramDevice::list().unwrap_or_default();
            let control = Path::new("/sys/class/zram-control/hot_add").exists();
            match devices.first() {
                None if !control => reasons.push(KernelError::ZramModuleNotLoaded.to_string()),
                None => {}
                Some(device) => match device.algorithms() {
                    Ok(offered) if !offered.iter().any(|a| a == algorithm) => {
                        reasons.push(format!(
                            "zram does not offer {algorithm:?} (it offers: {}): pick one of those with --codec",
                            offered.join(" ")
                        ))
                    }
                    Ok(_) => {}
                    Err(e) => reasons.push(e.to_string()),
                },
            }
            // Its own device, added and removed again: an unused zram0 is
            // the one a zram-generator or zram-tools set-up expects.
            if !control && !devices.is_empty() {
                reasons.push(
                    "the kernel cannot add a zram device (no /sys/class/zram-control/hot_add), and kernel mode uses only a device it adds: use --kernel-swap zswap".into(),
                );
            }
        }
        SwapBackend::Zswap(_) if options.zram_mem_limit_bytes.is_some() => {
            reasons.push("a limit on zram's pool (mem_limit) is set with zswap: use zram".into())
        }
        SwapBackend::Zswap(compressor) => match zswap::parameters() {
            Err(e) => reasons.push(e.to_string()),
            Ok(_) => {
                let offered = zswap::available_compressors().unwrap_or_default();
                if !offered.iter().any(|c| c == compressor) {
                    reasons.push(format!(
                        "zswap compressor {compressor:?} is not registered with the kernel (registered: {}): pick one of those",
                        offered.join(" ")
                    ));
                }
                if !options.scratch_dir.is_dir() {
                    reasons.push(format!(
                        "{} is not a directory for the swap file: give an existing directory on ext4/xfs",
                        options.scratch_dir.display()
                    ));
                }
            }
        },
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(KernelError::KernelModeUnavailable {
            reason: reasons.join("; "),
        })
    }
}

/// How the program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildExit {
    /// It exited with this code.
    Code(i32),
    /// This signal killed it.
    Signal(i32),
}

impl ChildExit {
    /// The status a shell reports: the code, or 128 + the signal.
    pub fn shell_status(self) -> i32 {
        match self {
            ChildExit::Code(code) => code,
            ChildExit::Signal(signal) => 128 + signal,
        }
    }

    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ChildExit::Code(0)
    }
}

/// Compressed-swap figures at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressedSample {
    /// Uncompressed bytes stored (zram `orig_data_size`, meminfo `Zswapped`).
    pub original_bytes: u64,
    /// Compressed bytes (zram `compr_data_size`, meminfo `Zswap`).
    pub compressed_bytes: u64,
    /// RAM the compressed store takes, allocator overhead included (zram
    /// `mem_used_total`; for zswap the same as `compressed_bytes`).
    pub memory_used_bytes: u64,
}

/// What kernel mode measured of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// How the program ended.
    pub exit: ChildExit,
    /// Swap backend, e.g. "zram-lz4".
    pub backend: String,
    /// The cgroup's RAM limit (bytes).
    pub budget_bytes: u64,
    /// zram's `mem_limit`, when one was set (bytes).
    #[serde(default)]
    pub zram_mem_limit_bytes: Option<u64>,
    /// Size of the swap area made for the run (bytes).
    pub swap_area_bytes: u64,
    /// Cgroup interface used.
    pub cgroup_version: CgroupVersion,
    /// Wall-clock time from start to exit (seconds).
    pub wall_seconds: f64,
    /// CPU time in user mode (seconds, from wait4).
    pub user_seconds: f64,
    /// CPU time in the kernel (seconds, from wait4).
    pub system_seconds: f64,
    /// Peak resident set of the program (wait4's ru_maxrss; bytes).
    pub max_rss_bytes: u64,
    /// Peak RAM charged to the cgroup, page cache included (v1
    /// memory.max_usage_in_bytes, v2 memory.peak; bytes).
    pub cgroup_peak_bytes: u64,
    /// Highest swap use of the cgroup (v2 memory.swap.peak, else the highest sample; bytes).
    pub swap_peak_bytes: u64,
    /// The cgroup's swap use at the last sample before the program ended
    /// (bytes). For a killed program that sample may fall inside its exit,
    /// while the kernel is already freeing its memory.
    pub swap_last_bytes: u64,
    /// Highest RAM + swap of the cgroup in one sample: an estimate of the
    /// program's own footprint, had it not been compressed (bytes).
    pub footprint_peak_bytes: u64,
    /// Highest RAM the compressed store took (zram `mem_used_max` of the
    /// run's own device, or the highest sample of `mem_used_total`; zswap:
    /// the highest sample of meminfo `Zswap`, machine-wide; bytes). With
    /// `cgroup_peak_bytes` it bounds what the run held at its peak.
    pub compressed_memory_peak_bytes: u64,
    /// Compressed store at the sample with the most data in it ("at peak").
    pub compressed_at_peak: CompressedSample,
    /// Compressed store at the last sample before the program ended ("at end";
    /// after the exit the kernel frees it).
    pub compressed_at_end: CompressedSample,
    /// Where the compressed figures come from: "zram mm_stat" (the run's own
    /// device) or "meminfo Zswap/Zswapped" (machine-wide).
    pub compressed_source: String,
    /// Pages swapped in during the run.
    pub swap_ins: u64,
    /// Pages swapped out during the run.
    pub swap_outs: u64,
    /// "cgroup" (memory.stat pswpin/pswpout) or "machine" (/proc/vmstat deltas:
    /// other programs swapping at the same time are counted too).
    pub swap_counts_scope: String,
    /// Major faults (the cgroup's memory.stat pgmajfault when present, else wait4's).
    pub major_faults: u64,
    /// Minor faults of the program (wait4).
    pub minor_faults: u64,
    /// OOM kills inside the cgroup (the budget plus swap area was too small).
    pub oom_kills: u64,
    /// How many samples were taken and how far apart.
    pub samples: u64,
    /// Sampling interval (milliseconds).
    pub sample_every_ms: u64,
}

/// Running peaks over the samples.
#[derive(Debug, Default)]
struct Tracker {
    samples: u64,
    usage_peak: u64,
    swap_peak: u64,
    swap_last: u64,
    footprint_peak: u64,
    compressed_memory_peak: u64,
    at_peak: CompressedSample,
    at_end: CompressedSample,
}

impl Tracker {
    /// Adds one sample; `still_running` says the program was seen alive
    /// after it was taken (a sample taken while it exits sees its memory
    /// already freed, so it is not the "end").
    fn add(
        &mut self,
        counters: &CgroupCounters,
        compressed: CompressedSample,
        still_running: bool,
    ) {
        self.samples += 1;
        let swap = counters.swap_bytes.unwrap_or(0);
        self.usage_peak = self.usage_peak.max(counters.usage_bytes);
        self.swap_peak = self.swap_peak.max(swap);
        self.footprint_peak = self.footprint_peak.max(counters.usage_bytes + swap);
        self.compressed_memory_peak = self
            .compressed_memory_peak
            .max(compressed.memory_used_bytes);
        if compressed.original_bytes >= self.at_peak.original_bytes {
            self.at_peak = compressed.clone();
        }
        if still_running {
            self.swap_last = swap;
            self.at_end = compressed;
        }
    }
}

/// The compressed store now: the run's zram device, or zswap (machine-wide).
fn compressed_now(zram: Option<&ZramDevice>) -> CompressedSample {
    match zram {
        Some(device) => device
            .mm_stat()
            .map(|m: MmStat| CompressedSample {
                original_bytes: m.orig_data_size,
                compressed_bytes: m.compr_data_size,
                memory_used_bytes: m.mem_used_total,
            })
            .unwrap_or_default(),
        None => {
            let meminfo = procfs::meminfo().ok();
            let compressed = meminfo.as_ref().and_then(|m| m.z_swap).unwrap_or(0);
            CompressedSample {
                original_bytes: meminfo.as_ref().and_then(|m| m.z_swapped).unwrap_or(0),
                compressed_bytes: compressed,
                memory_used_bytes: compressed,
            }
        }
    }
}

/// True while `pid` exists and has not exited (a zombie has).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The state follows the command name, which is in parentheses and may hold spaces.
            let after = &stat[stat.rfind(')')? + 1..];
            after
                .split_whitespace()
                .next()
                .map(|state| state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

/// Samples the cgroup and the compressed store on a thread of its own, so
/// the figures cover the whole run whatever the caller does meanwhile.
#[derive(Debug)]
struct Sampler {
    stop: Arc<AtomicBool>,
    tracker: Arc<Mutex<Tracker>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(
        cgroup: &MemoryCgroup,
        zram: Option<ZramDevice>,
        pid: i32,
        every: Duration,
    ) -> Result<Sampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let dir = cgroup.dir().to_path_buf();
        let version = cgroup.version();
        let thread = std::thread::Builder::new()
            .name("zpage-run-sampler".into())
            .spawn({
                let stop = Arc::clone(&stop);
                let tracker = Arc::clone(&tracker);
                move || {
                    crate::sys::block_forwarded_signals_in_this_thread();
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(counters) = memcg::read_counters(&dir, version) {
                            let compressed = compressed_now(zram.as_ref());
                            let still_running = running(pid);
                            if let Ok(mut tracker) = tracker.lock() {
                                tracker.add(&counters, compressed, still_running);
                            }
                        }
                        std::thread::sleep(every);
                    }
                }
            })
            .map_err(|e| KernelError::io("thread", "start the sampler", e))?;
        Ok(Sampler {
            stop,
            tracker,
            thread: Some(thread),
        })
    }

    /// Stops sampling and returns the figures.
    fn stop(&mut self) -> Tracker {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.tracker
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

static RUN_SERIAL: AtomicU32 = AtomicU32::new(0);

/// A program running in kernel mode. Dropping it without [`KernelRun::wait`]
/// kills the program, then restores the machine.
#[derive(Debug)]
pub struct KernelRun {
    // Fields drop in order: forwarding off, the cgroup (and anything left in
    // it) gone, then the machine restored.
    forwarding: Option<SignalForwarding>,
    child: Child,
    cgroup: Option<MemoryCgroup>,
    guard: MachineGuard,
    pid: i32,
    reaped: Option<ChildEnd>,
    started: Instant,
    vmstat_before: BTreeMap<String, u64>,
    sampler: Sampler,
    options: RunOptions,
    swap_area_bytes: u64,
    zram: Option<ZramDevice>,
}

impl KernelRun {
    /// Takes the machine (waiting for another kernel-state user to finish),
    /// sets up the swap backend and the cgroup, and starts `command` inside
    /// it. Anything set up is undone if a later step fails.
    pub fn start(mut command: Command, options: &RunOptions) -> Result<KernelRun> {
        check_available(options)?;
        let swap_area_bytes = options.effective_swap_bytes()?;
        let controller = memcg::memory_controller()?;
        let mut guard = MachineGuard::take(&options.scratch_dir, options.other_swap)?;
        guard.set_up(&options.backend, swap_area_bytes)?;
        let zram = match options.backend {
            SwapBackend::Zram(_) => guard.zram_device().cloned(),
            SwapBackend::Zswap(_) => None,
        };
        if let (Some(device), Some(limit)) = (&zram, options.zram_mem_limit_bytes) {
            device.set_mem_limit(limit)?;
        }
        let name = format!(
            "{CGROUP_PREFIX}run-{}-{}",
            std::process::id(),
            RUN_SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let cgroup =
            MemoryCgroup::create(&controller, &name, options.budget_bytes, CGROUP_SWAPPINESS)?;
        crate::sys::join_cgroup_at_exec(&mut command, &cgroup.procs_path())
            .map_err(|e| KernelError::io(cgroup.procs_path(), "open", e))?;
        let vmstat_before = procfs::vmstat()?;
        let started = Instant::now();
        let program = format!("{:?}", command.get_program());
        // Held from before the start, so a signal sent meanwhile reaches the program.
        let held = crate::supervise::hold_signals(&mut command)
            .map_err(|e| KernelError::io("sigprocmask", "hold signals", e))?;
        let child = command.spawn().map_err(|e| KernelError::Command {
            command: program,
            detail: format!("cannot start it: {e}"),
            fix:
                "check that the program exists and is executable (give its path, or put it on PATH)"
                    .into(),
        })?;
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        let forwarding = held
            .forward_to(pid)
            .map_err(|e| KernelError::io("sigaction", "install signal forwarding", e))?;
        let sampler = Sampler::start(&cgroup, zram.clone(), pid, options.sample_every)?;
        Ok(KernelRun {
            forwarding: Some(forwarding),
            child,
            cgroup: Some(cgroup),
            guard,
            pid,
            reaped: None,
            started,
            vmstat_before,
            sampler,
            options: options.clone(),
            swap_area_bytes,
            zram,
        })
    }

    /// The program's process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The program's process, for its piped stdin/stdout/stderr. Do not
    /// wait for it through this handle: [`KernelRun::wait`] reaps it.
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The cgroup's directory.
    /// The zram device the run added for its swap (`zram3`), with a zram
    /// backend.
    pub fn zram_device_name(&self) -> Option<String> {
        self.zram.as_ref().map(|device| device.name())
    }

    pub fn cgroup_dir(&self) -> Option<&Path> {
        self.cgroup.as_ref().map(|c| c.dir())
    }

    /// Reaps the program if it has ended: `true` once it has.
    pub fn poll(&mut self) -> Result<bool> {
        if self.reaped.is_some() {
            return Ok(true);
        }
        match crate::sys::try_reap(self.pid) {
            Ok(Some(end)) => {
                self.reaped = Some(end);
                Ok(true)
            }
            Ok(None) => Ok(false),
            Err(e) => Err(KernelError::io(format!("pid {}", self.pid), "wait for", e)),
        }
    }

    /// Waits for the program to end (sampling as it runs), tears down the
    /// cgroup (killing anything the program left in it) and the swap
    /// backend, restores the machine and checks it equals the state found.
    /// A restore that fails is an error even when the program succeeded.
    pub fn wait(mut self) -> Result<RunOutcome> {
        while !self.poll()? {
            std::thread::sleep(self.options.sample_every);
        }
        let wall_seconds = self.started.elapsed().as_secs_f64();
        let Some(end) = self.reaped else {
            unreachable!("poll returns true only once the program is reaped")
        };
        self.forwarding = None;
        let tracker = self.sampler.stop();
        let final_counters = self
            .cgroup
            .as_ref()
            .and_then(|c| c.counters().ok())
            .unwrap_or_default();
        let version = self
            .cgroup
            .as_ref()
            .map_or(CgroupVersion::V1, MemoryCgroup::version);
        let vmstat_after = procfs::vmstat().unwrap_or_default();
        // The device's own peak, which no 50 ms sample can miss; read
        // before the device is removed.
        let zram_peak = self
            .zram
            .as_ref()
            .and_then(|device| device.mm_stat().ok())
            .map_or(0, |m| m.mem_used_max);
        self.cgroup = None;
        self.guard.restore()?;

        let delta = |key: &str| {
            vmstat_after
                .get(key)
                .unwrap_or(&0)
                .saturating_sub(*self.vmstat_before.get(key).unwrap_or(&0))
        };
        let (swap_ins, swap_outs, swap_counts_scope) =
            match (final_counters.swap_ins, final_counters.swap_outs) {
                (Some(ins), Some(outs)) => (ins, outs, "cgroup"),
                _ => (delta("pswpin"), delta("pswpout"), "machine"),
            };
        let exit = match (end.code, end.signal) {
            (_, Some(signal)) => ChildExit::Signal(signal),
            (Some(code), None) => ChildExit::Code(code),
            (None, None) => ChildExit::Code(-1),
        };
        Ok(RunOutcome {
            exit,
            backend: self.options.backend.name(),
            budget_bytes: self.options.budget_bytes,
            zram_mem_limit_bytes: self.options.zram_mem_limit_bytes,
            swap_area_bytes: self.swap_area_bytes,
            cgroup_version: version,
            wall_seconds,
            user_seconds: end.user_micros as f64 / 1e6,
            system_seconds: end.system_micros as f64 / 1e6,
            max_rss_bytes: end.max_rss_bytes,
            cgroup_peak_bytes: final_counters.peak_bytes.unwrap_or(tracker.usage_peak),
            swap_peak_bytes: final_counters
                .swap_peak_bytes
                .unwrap_or(0)
                .max(tracker.swap_peak),
            swap_last_bytes: tracker.swap_last,
            footprint_peak_bytes: tracker.footprint_peak,
            compressed_memory_peak_bytes: tracker.compressed_memory_peak.max(zram_peak),
            compressed_at_peak: tracker.at_peak.clone(),
            compressed_at_end: tracker.at_end.clone(),
            compressed_source: match self.zram {
                Some(_) => "zram mm_stat".into(),
                None => "meminfo Zswap/Zswapped".into(),
            },
            swap_ins,
            swap_outs,
            swap_counts_scope: swap_counts_scope.into(),
            major_faults: final_counters.major_faults.unwrap_or(end.major_faults),
            minor_faults: end.minor_faults,
            oom_kills: final_counters.oom_kills.unwrap_or(0),
            samples: tracker.samples,
            sample_every_ms: self.options.sample_every.as_millis() as u64,
        })
    }
}

impl Drop for KernelRun {
    fn drop(&mut self) {
        if self.reaped.is_none() {
            crate::sys::send_signal(self.pid, libc::SIGKILL);
            while let Ok(None) = crate::sys::try_reap(self.pid) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Runs `command` in kernel mode to its end: [`KernelRun::start`] then
/// [`KernelRun::wait`].
pub fn run(command: Command, options: &RunOptions) -> Result<RunOutcome> {
    KernelRun::start(command, options)?.wait()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_swap_is_eight_budgets_within_bounds() {
        let gib = 1u64 << 30;
        assert_eq!(default_swap_bytes(64 << 20, 24 * gib), 512 << 20);
        assert_eq!(default_swap_bytes(8 << 20, 24 * gib), 256 << 20);
        assert_eq!(default_swap_bytes(4 * gib, 24 * gib), 12 * gib);
        assert_eq!(default_swap_bytes(u64::MAX, 24 * gib), 12 * gib);
    }

    #[test]
    fn shell_status_of_a_signal_death_is_128_plus_the_signal() {
        assert_eq!(ChildExit::Signal(9).shell_status(), 137);
        assert_eq!(ChildExit::Code(3).shell_status(), 3);
        assert!(ChildExit::Code(0).success());
        assert!(!ChildExit::Signal(15).success());
    }

    #[test]
    fn a_budget_too_small_is_refused_with_the_reason() {
        let error = check_available(&RunOptions::new(4096))
            .unwrap_err()
            .to_string();
        assert!(error.contains("give a larger budget"), "{error}");
    }
}
