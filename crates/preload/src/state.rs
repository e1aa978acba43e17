//! The process's zpage state: its budget, its arena (the one region every
//! private anonymous mapping of the program is placed in, module `arena`)
//! and the figures for its report.
//!
//! Every operation on the arena runs inside [`Inside`] (asynchronous
//! signals blocked, so a program handler calling `free` or `write` cannot
//! wait on a lock its own thread holds).

use crate::arena::Arena;
use crate::config::Config;
use crate::sys::{self, Inside};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use zpage_region::run_report::{ProcessReport, TierReport};
use zpage_region::{Budget, BudgetConfig, RedisConfig, TierFile};

#[derive(Debug)]
pub struct State {
    pub config: Config,
    /// The budget and its arena, started with the first mapping placed,
    /// not when the library loads: a process that never maps memory (most
    /// short-lived children: shells, `python -c` of little) gets none of
    /// zpage's threads and no userfaultfd among its descriptors. `None`
    /// once starting failed.
    started: OnceLock<Option<(Budget, Arena)>>,
    pub pid: i32,
    /// The process's counters for its report.
    pub retired: Mutex<ProcessReport>,
    pub peak_rss: AtomicU64,
    pub peak_estimate: AtomicU64,
    pub peak_stored: AtomicU64,
    pub peak_pool: AtomicU64,
    pub peak_heap_in_use: AtomicU64,
    pub peak_heap_resident: AtomicU64,
    pub refused: AtomicU64,
    pub refused_bytes: AtomicU64,
    pub pinned_calls: AtomicU64,
    pub retried_calls: AtomicU64,
    pub forks: AtomicU64,
    /// `mlockall(MCL_FUTURE)` is in force: new memory stays plain (locked
    /// memory must be resident; module `stacks`).
    pub lock_future: AtomicBool,
}

static STATE: OnceLock<State> = OnceLock::new();
/// The exit status of a process whose budget could not start under a
/// memory max (`zpage run`'s own failures end with it too).
const MEMORY_MAX_START_FAILED: i32 = 125;
/// Set in a child made by `fork()`: it places nothing new in the arena
/// (its mappings are plain). The arena it inherited is its own (the region
/// layer's fork hook hands it over).
pub static FORKED_CHILD: AtomicBool = AtomicBool::new(false);
/// Why the library is not active, for the report.
pub static INACTIVE: OnceLock<String> = OnceLock::new();

/// The fork prepare hook's part: take the arena's lock, so the child never
/// inherits it held by a thread that does not exist there.
pub fn lock_for_fork() {
    if let Some(arena) = get().and_then(State::arena_if_started) {
        arena.lock_for_fork();
    }
}

/// The parent's and child's part: give it back.
pub fn unlock_after_fork() {
    if let Some(arena) = get().and_then(State::arena_if_started) {
        arena.unlock_after_fork();
    }
}

/// The state, if the library is active in this process.
pub fn get() -> Option<&'static State> {
    STATE.get()
}

/// The state, if new mappings may be placed (active, not a forked child,
/// not under `mlockall(MCL_FUTURE)`).
pub fn placing() -> Option<&'static State> {
    if FORKED_CHILD.load(Ordering::Relaxed) || sys::inside() {
        return None;
    }
    STATE
        .get()
        .filter(|s| !s.lock_future.load(Ordering::Acquire))
}

/// Sets the library up; the budget and the arena start with the first
/// mapping (see [`State::arena`]).
pub fn start(config: Config) -> Result<(), String> {
    let state = State {
        config,
        started: OnceLock::new(),
        pid: std::process::id() as i32,
        retired: Mutex::new(ProcessReport::new(0, String::new())),
        peak_rss: AtomicU64::new(0),
        peak_estimate: AtomicU64::new(0),
        peak_stored: AtomicU64::new(0),
        peak_pool: AtomicU64::new(0),
        peak_heap_in_use: AtomicU64::new(0),
        peak_heap_resident: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        refused_bytes: AtomicU64::new(0),
        pinned_calls: AtomicU64::new(0),
        retried_calls: AtomicU64::new(0),
        forks: AtomicU64::new(0),
        lock_future: AtomicBool::new(false),
    };
    STATE
        .set(state)
        .map_err(|_| "zpage's preload library started twice".to_string())
}

impl State {
    /// The arena, started on first use with the budget. If it cannot start,
    /// the program is told once and runs on with plain memory (every
    /// placement is then counted as refused). The caller is inside zpage.
    pub fn arena(&self) -> Option<&Arena> {
        self.started
            .get_or_init(|| {
                let started = Budget::new(per_process(&self.config.budget))
                    .map_err(|e| format!("could not start its budget: {e}"))
                    .and_then(|budget| Arena::new(&budget).map(|arena| (budget, arena)));
                match started {
                    Ok(started) => {
                        crate::report::start_sampler();
                        Some(started)
                    }
                    Err(why) if self.config.budget.memory_max_bytes.is_some() => {
                        // Plain memory would not hold the limit: a limit
                        // that cannot be held ends the process, as a
                        // container's would, rather than go unenforced.
                        sys::stderr_line(&format!(
                            "zpage: {why}; with a memory max the program cannot run on plain memory: ending it\n"
                        ));
                        // SAFETY: ends the process at once; nothing of it is used after.
                        unsafe { libc::_exit(MEMORY_MAX_START_FAILED) }
                    }
                    Err(why) => {
                        sys::stderr_line(&format!(
                            "zpage: {why}; the program runs on with plain memory\n"
                        ));
                        None
                    }
                }
            })
            .as_ref()
            .map(|(_, arena)| arena)
    }

    /// The arena if it has started.
    pub fn arena_if_started(&self) -> Option<&Arena> {
        self.started.get().and_then(Option::as_ref).map(|(_, a)| a)
    }

    fn started_budget(&self) -> Option<&Budget> {
        self.started.get().and_then(Option::as_ref).map(|(b, _)| b)
    }

    /// True if `[addr, addr + len)` touches the arena (no lock; a signal
    /// handler may ask).
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        len > 0
            && self
                .arena_if_started()
                .is_some_and(|a| a.overlaps(addr, len))
    }

    /// Counts a mapping the arena could not take (it stays plain memory).
    pub fn count_refused(&self, len: usize) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.refused_bytes.fetch_add(len as u64, Ordering::Relaxed);
    }

    /// The process's report now.
    pub fn report(&self) -> ProcessReport {
        let mut r = self
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(arena) = self.arena_if_started() {
            r.add_region_counters(&arena.region().stats());
            r.regions_made = 1;
            r.region_bytes_peak = arena.usage().1 as u64;
        }
        let store = self
            .started_budget()
            .map(Budget::store_stats)
            .unwrap_or_default();
        r.pid = self.pid;
        r.active = true;
        r.budget_bytes = self.config.budget_bytes as u64;
        r.codec = self.config.codec_name.clone();
        r.fallback.refused_mappings = self.refused.load(Ordering::Relaxed);
        r.fallback.refused_bytes = self.refused_bytes.load(Ordering::Relaxed);
        r.compressed_bytes = store.contents.compressed_bytes;
        r.pool_bytes = store.contents.pool_memory_used_bytes;
        r.peak_rss_bytes = self.peak_rss.load(Ordering::Relaxed);
        r.unconstrained_peak_estimate_bytes = self.peak_estimate.load(Ordering::Relaxed);
        r.peak_stored_pages = self.peak_stored.load(Ordering::Relaxed);
        r.peak_pool_bytes = self.peak_pool.load(Ordering::Relaxed);
        r.own_heap_peak_bytes = self.peak_heap_in_use.load(Ordering::Relaxed);
        r.own_heap_resident_peak_bytes = self.peak_heap_resident.load(Ordering::Relaxed);
        r.syscalls_pinned = self.pinned_calls.load(Ordering::Relaxed);
        r.syscalls_retried = self.retried_calls.load(Ordering::Relaxed);
        r.syscalls_trapped = zpage_syscalls::trap::trapped_calls();
        r.forks = self.forks.load(Ordering::Relaxed);
        let file_pages = zpage_region::file_page_figures();
        r.file_page_passes = file_pages.passes;
        r.file_pages_peak_pass_bytes = file_pages.peak_pass_bytes;
        r.tier = store.tier.as_ref().map(TierReport::of);
        if let Some(max) = self.started_budget().and_then(Budget::memory_max_status) {
            r.memory_max_over_count = max.over_count;
            r.memory_max_over_peak_bytes = max.over_peak_bytes;
        }
        r.memory_max_bytes = self.config.budget.memory_max_bytes.unwrap_or(0);
        if let Some(budget) = self.started_budget() {
            if let Some(auto) = budget.auto_budget_status() {
                r.auto_budget_stall_target_ppm = u64::from(auto.target_ppm);
                r.auto_budget_final_bytes = budget.budget_bytes() as u64;
                r.auto_budget_lowest_bytes = auto.lowest_pages * zpage_codec::PAGE_SIZE as u64;
                r.stall_ns = auto.stall_ns;
            }
        }
        r
    }

    /// One sample of resident memory and what is held evicted.
    pub fn sample(&self) {
        let _inside = Inside::enter();
        let rss = crate::report::resident_bytes();
        let store = self
            .started_budget()
            .map(Budget::store_stats)
            .unwrap_or_default();
        let stored = store.contents.stored_pages;
        let evicted_bytes = stored * zpage_codec::PAGE_SIZE as u64;
        let estimate = (rss + evicted_bytes).saturating_sub(store.contents.pool_memory_used_bytes);
        self.peak_rss.fetch_max(rss, Ordering::Relaxed);
        self.peak_estimate
            .fetch_max(estimate.max(rss), Ordering::Relaxed);
        self.peak_stored.fetch_max(stored, Ordering::Relaxed);
        self.peak_pool
            .fetch_max(store.contents.pool_memory_used_bytes, Ordering::Relaxed);
        let heap = crate::alloc::usage();
        self.peak_heap_in_use
            .fetch_max(heap.in_use_bytes, Ordering::Relaxed);
        self.peak_heap_resident
            .fetch_max(heap.resident_bytes, Ordering::Relaxed);
    }
}

/// The budget as this process starts it. Every process of a `zpage run`
/// has its own budget and tier, so a backing file is per process: `PATH`
/// becomes `PATH.PID` (a block device or a Redis server is used as named).
/// A program under `zpage run` never drops its budget, and may be killed,
/// so the file is unlinked once open, its space given back when the
/// process ends however it ends, unless `keep_backing` keeps it (then named
/// by its PID, and `PATH.PID.N` for the programs it `exec`s later).
fn per_process(config: &BudgetConfig) -> BudgetConfig {
    use std::os::unix::fs::FileTypeExt;
    let mut config = config.clone();
    let Some(backing) = config.backing.clone() else {
        return config;
    };
    let is_device = std::fs::metadata(&backing).is_ok_and(|m| m.file_type().is_block_device());
    if RedisConfig::is_redis_url(&backing) || is_device {
        return config;
    }
    let pid = std::process::id();
    config.backing = Some(format!("{backing}.{pid}"));
    if config.backing_options.file != TierFile::Kept {
        config.backing_options.file = TierFile::UnlinkedWhenOpened;
    } else {
        // The program this process ran before an `exec` may have kept
        // `PATH.PID` already (every process starts its budget at its first
        // allocation): the next free `PATH.PID.N` then. The tier's own
        // exclusive create stays the guard against any other file.
        let taken = |path: &str| std::fs::symlink_metadata(path).is_ok();
        if let Some(free) = (1..1000)
            .map(|n| format!("{backing}.{pid}.{n}"))
            .find(|path| !taken(path))
            .filter(|_| config.backing.as_deref().is_some_and(taken))
        {
            config.backing = Some(free);
        }
    }
    config
}
