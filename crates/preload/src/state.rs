//! The process's zpage state: its budget, the regions the library made and
//! the figures for its report.
//!
//! Regions are kept in a list sorted by address behind one lock; every
//! operation on it runs inside [`Inside`] (asynchronous signals blocked, so
//! a program handler calling `free` or `write` cannot wait on a lock its own
//! thread holds).

use crate::config::Config;
use crate::sys::{self, Inside};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use zpage_region::run_report::{ProcessReport, TierReport};
use zpage_region::{Budget, BudgetConfig, RedisConfig, Region, TierFile};

/// One region the library made: for a mapping (`mmap`) or an allocation (`malloc`).
#[derive(Debug)]
pub struct Placed {
    pub base: usize,
    pub len: usize,
    pub region: Region,
    /// Made for a `malloc` allocation: if it is made plain memory, `free`
    /// must still recognise it (see [`State::plain`]).
    pub from_malloc: bool,
}

/// Which regions a lookup by base address may find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Made {
    /// Only regions made for a `malloc` family allocation.
    ByMalloc,
    /// Any region.
    Either,
}

#[derive(Debug)]
pub struct State {
    pub config: Config,
    /// Started when the first region is made, not when the library loads:
    /// a process that never places memory in a region (most short-lived
    /// children: shells, `python -c`) gets none of zpage's threads and no
    /// userfaultfd among its descriptors. `None` once starting failed.
    budget: OnceLock<Option<Budget>>,
    pub pid: i32,
    pub regions: Mutex<Vec<Placed>>,
    /// `malloc` allocations whose region was made plain memory (the program
    /// re-protected or unmapped part of one): `free` unmaps them, never
    /// hands them to the C library's allocator, which did not make them.
    pub plain: Mutex<Vec<(usize, usize)>>,
    /// Lowest and highest addresses any region ever covered: a quick
    /// "certainly not ours" test for pointers outside.
    pub low: AtomicUsize,
    pub high: AtomicUsize,
    /// Figures of regions already gone, and the process's counters.
    pub retired: Mutex<ProcessReport>,
    pub live_bytes: AtomicUsize,
    pub peak_bytes: AtomicUsize,
    pub peak_rss: AtomicU64,
    pub peak_estimate: AtomicU64,
    pub peak_stored: AtomicU64,
    pub ejected: AtomicU64,
    pub ejected_bytes: AtomicU64,
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
/// Set in a child made by `fork()`: it places nothing new in regions (the
/// budget's reclaimer stayed with the parent). The regions it inherited are
/// its own (the region layer's fork hook hands them over), or plain memory
/// when their budget restored every page before the fork.
pub static FORKED_CHILD: AtomicBool = AtomicBool::new(false);
/// Why the library is not active, for the report.
pub static INACTIVE: OnceLock<String> = OnceLock::new();

/// A region a forked child did not take over is the parent's: its memory
/// is plain here (every page was restored before the fork and the child
/// has no userfaultfd registration for it), and dropping it would take
/// locks another thread of the parent may have held at the fork. It is
/// left alone.
fn forget_in_child(placed: Placed) {
    std::mem::forget(placed.region);
}

thread_local! {
    /// The list's lock, held by the thread that forks from the prepare hook
    /// to the parent's or child's hook, so the child never inherits it held
    /// by a thread that does not exist there.
    static HELD_FOR_FORK: std::cell::RefCell<Option<MutexGuard<'static, Vec<Placed>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The fork prepare hook's part: take the list's lock.
pub fn lock_for_fork() {
    if let Some(state) = STATE.get() {
        let guard = state.lock();
        HELD_FOR_FORK.with(|h| *h.borrow_mut() = Some(guard));
    }
}

/// The parent's and child's part: give it back.
pub fn unlock_after_fork() {
    HELD_FOR_FORK.with(|h| drop(h.borrow_mut().take()));
}

/// The state, if the library is active in this process.
pub fn get() -> Option<&'static State> {
    STATE.get()
}

/// The state, if new regions may be made (active and not a forked child).
pub fn placing() -> Option<&'static State> {
    if FORKED_CHILD.load(Ordering::Relaxed) || sys::inside() {
        return None;
    }
    STATE
        .get()
        .filter(|s| !s.lock_future.load(Ordering::Acquire))
}

/// Sets the library up; the budget itself starts with the first region
/// (see [`State::budget`]).
pub fn start(config: Config) -> Result<(), String> {
    let report = ProcessReport::new(0, String::new());
    let state = State {
        config,
        budget: OnceLock::new(),
        pid: std::process::id() as i32,
        regions: Mutex::new(Vec::new()),
        plain: Mutex::new(Vec::new()),
        low: AtomicUsize::new(usize::MAX),
        high: AtomicUsize::new(0),
        retired: Mutex::new(report),
        live_bytes: AtomicUsize::new(0),
        peak_bytes: AtomicUsize::new(0),
        peak_rss: AtomicU64::new(0),
        peak_estimate: AtomicU64::new(0),
        peak_stored: AtomicU64::new(0),
        ejected: AtomicU64::new(0),
        ejected_bytes: AtomicU64::new(0),
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
    pub fn lock(&self) -> MutexGuard<'_, Vec<Placed>> {
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True if `[addr, addr + len)` may touch a region (cheap, no lock).
    pub fn may_overlap(&self, addr: usize, len: usize) -> bool {
        addr < self.high.load(Ordering::Acquire)
            && addr.saturating_add(len.max(1)) > self.low.load(Ordering::Acquire)
    }

    /// True if `[addr, addr + len)` touches a region. Takes the list's lock
    /// only if it is free (a signal handler may interrupt its holder) and
    /// otherwise asks the region table, which takes none.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        if len == 0 || !self.may_overlap(addr, len) {
            return false;
        }
        let end = addr.saturating_add(len);
        match self.regions.try_lock() {
            Ok(regions) => {
                let i = regions.partition_point(|p| p.base + p.len <= addr);
                i < regions.len() && regions[i].base < end
            }
            Err(_) => zpage_region::overlaps_any_region(addr, len),
        }
    }

    /// The budget, started on first use. If it cannot start, the program
    /// is told once and runs on with plain memory (every placement is then
    /// counted as refused). The caller is inside zpage.
    fn budget(&self) -> Option<&Budget> {
        self.budget
            .get_or_init(|| {
                match Budget::new(per_process(&self.config.budget)) {
                    Ok(budget) => {
                        crate::report::start_sampler();
                        Some(budget)
                    }
                    Err(e) => {
                        sys::stderr_line(&format!(
                            "zpage: could not start its budget: {e}; the program runs on with plain memory\n"
                        ));
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The budget if it has started.
    fn started_budget(&self) -> Option<&Budget> {
        self.budget.get().and_then(Option::as_ref)
    }

    /// Makes a region of `len` bytes; `None` (counted) if none can be made.
    /// The caller is inside zpage.
    pub fn place(&self, len: usize, from_malloc: bool) -> Option<usize> {
        let made = match self.budget() {
            Some(budget) => Region::with_budget(budget, len).ok(),
            None => None,
        };
        match made {
            Some(region) => {
                let (base, len) = (region.as_ptr() as usize, region.len());
                let mut regions = self.lock();
                let at = regions.partition_point(|p| p.base < base);
                regions.insert(
                    at,
                    Placed {
                        base,
                        len,
                        region,
                        from_malloc,
                    },
                );
                drop(regions);
                self.low.fetch_min(base, Ordering::AcqRel);
                self.high.fetch_max(base + len, Ordering::AcqRel);
                let live = self.live_bytes.fetch_add(len, Ordering::AcqRel) + len;
                self.peak_bytes.fetch_max(live, Ordering::AcqRel);
                self.retired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .regions_made += 1;
                Some(base)
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.refused_bytes.fetch_add(len as u64, Ordering::Relaxed);
                None
            }
        }
    }

    /// Takes out of the list every region overlapping `[addr, addr + len)`.
    pub fn take_overlapping(&self, addr: usize, len: usize) -> Vec<Placed> {
        if !self.may_overlap(addr, len) {
            return Vec::new();
        }
        let end = addr.saturating_add(len);
        let mut regions = self.lock();
        let mut taken = Vec::new();
        let i = regions.partition_point(|p| p.base + p.len <= addr);
        while i < regions.len() && regions[i].base < end {
            taken.push(regions.remove(i));
        }
        drop(regions);
        taken
    }

    /// The region starting exactly at `base`, taken out of the list;
    /// with `Made::ByMalloc`, only one the `malloc` family made. A pointer
    /// `malloc` returned can be the first byte of a region `mmap` made for
    /// the allocator below (a jemalloc extent): `free` of that pointer must
    /// not take the allocator's whole mapping.
    pub fn take_exact(&self, base: usize, made: Made) -> Option<Placed> {
        if !self.may_overlap(base, 1) {
            return None;
        }
        let mut regions = self.lock();
        let i = Self::exact(&regions, base, made)?;
        Some(regions.remove(i))
    }

    fn exact(regions: &[Placed], base: usize, made: Made) -> Option<usize> {
        let i = regions.partition_point(|p| p.base < base);
        let placed = regions.get(i)?;
        (placed.base == base && (made == Made::Either || placed.from_malloc)).then_some(i)
    }

    /// Puts a region taken out with `take_*` back in the list.
    pub fn put_back(&self, placed: Placed) {
        let mut regions = self.lock();
        let at = regions.partition_point(|p| p.base < placed.base);
        regions.insert(at, placed);
    }

    /// The length of the plain-memory allocation at `base` (see `plain`),
    /// taken out of the list if `take`.
    pub fn plain_allocation(&self, base: usize, take: bool) -> Option<usize> {
        let mut plain = self.plain.lock().unwrap_or_else(|e| e.into_inner());
        let i = plain.iter().position(|&(b, _)| b == base)?;
        let len = plain[i].1;
        if take {
            plain.swap_remove(i);
        }
        Some(len)
    }

    /// The length of the region starting exactly at `base` (see
    /// [`State::take_exact`] for `made`).
    pub fn len_of(&self, base: usize, made: Made) -> Option<usize> {
        if !self.may_overlap(base, 1) {
            return None;
        }
        let regions = self.lock();
        Self::exact(&regions, base, made).map(|i| regions[i].len)
    }

    fn retire_counters(&self, placed: &Placed) {
        self.live_bytes.fetch_sub(placed.len, Ordering::AcqRel);
        if !FORKED_CHILD.load(Ordering::Relaxed) {
            let stats = placed.region.stats();
            self.retired
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .add_region_counters(&stats);
        }
    }

    /// Gives a region up whose whole range the caller is about to unmap.
    pub fn release(&self, placed: Placed) {
        self.retire_counters(&placed);
        if !placed.region.belongs_to_this_process() {
            forget_in_child(placed);
            return;
        }
        placed.region.release_for_unmap();
    }

    /// Turns a region into plain memory with the same contents (the program
    /// did something to it a region cannot follow). Counted.
    pub fn eject(&self, placed: Placed) {
        self.retire_counters(&placed);
        if placed.from_malloc {
            self.plain
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((placed.base, placed.len));
        }
        self.ejected.fetch_add(1, Ordering::Relaxed);
        self.ejected_bytes
            .fetch_add(placed.len as u64, Ordering::Relaxed);
        if !placed.region.belongs_to_this_process() {
            // A forked child whose budget the parent restored whole before
            // the fork: the child's copy is plain memory already.
            forget_in_child(placed);
            return;
        }
        if let Err((region, e)) = placed.region.into_plain_memory() {
            // Never hand the program a range whose evicted pages are lost:
            // a page that cannot come back ends the process, named.
            let _ = region;
            let message = format!(
                "zpage: cannot restore region {:#x}+{:#x} before the program changes it: {e}\n",
                placed.base, placed.len
            );
            sys::stderr_line(&message);
            // SAFETY: abort has no preconditions.
            unsafe { libc::abort() };
        }
    }

    /// The process's report now.
    pub fn report(&self) -> ProcessReport {
        let mut r = self
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let regions = self.lock();
        for placed in regions.iter() {
            r.add_region_counters(&placed.region.stats());
        }
        drop(regions);
        let store = self
            .started_budget()
            .map(Budget::store_stats)
            .unwrap_or_default();
        r.pid = self.pid;
        r.active = true;
        r.budget_bytes = self.config.budget_bytes as u64;
        r.codec = self.config.codec_name.clone();
        r.region_bytes_peak = self.peak_bytes.load(Ordering::Relaxed) as u64;
        r.fallback.ejected_mappings = self.ejected.load(Ordering::Relaxed);
        r.fallback.ejected_bytes = self.ejected_bytes.load(Ordering::Relaxed);
        r.fallback.refused_mappings = self.refused.load(Ordering::Relaxed);
        r.fallback.refused_bytes = self.refused_bytes.load(Ordering::Relaxed);
        r.compressed_bytes = store.contents.compressed_bytes;
        r.pool_bytes = store.contents.pool_memory_used_bytes;
        r.peak_rss_bytes = self.peak_rss.load(Ordering::Relaxed);
        r.unconstrained_peak_estimate_bytes = self.peak_estimate.load(Ordering::Relaxed);
        r.peak_stored_pages = self.peak_stored.load(Ordering::Relaxed);
        r.syscalls_pinned = self.pinned_calls.load(Ordering::Relaxed);
        r.syscalls_retried = self.retried_calls.load(Ordering::Relaxed);
        r.syscalls_trapped = zpage_syscalls::trap::trapped_calls();
        r.forks = self.forks.load(Ordering::Relaxed);
        r.tier = store.tier.as_ref().map(TierReport::of);
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
    }
}

/// The budget as this process starts it. Every process of a `zpage run`
/// has its own budget and tier, so a backing file is per process: `PATH`
/// becomes `PATH.PID` (a block device or a Redis server is used as named).
/// A program under `zpage run` never drops its budget, and may be killed,
/// so the file is unlinked once open, its space given back when the
/// process ends however it ends, unless `keep_backing` keeps it (then named
/// by its PID).
fn per_process(config: &BudgetConfig) -> BudgetConfig {
    use std::os::unix::fs::FileTypeExt;
    let mut config = config.clone();
    let Some(backing) = config.backing.as_deref() else {
        return config;
    };
    let is_device = std::fs::metadata(backing).is_ok_and(|m| m.file_type().is_block_device());
    if RedisConfig::is_redis_url(backing) || is_device {
        return config;
    }
    config.backing = Some(format!("{backing}.{}", std::process::id()));
    if config.backing_options.file != TierFile::Kept {
        config.backing_options.file = TierFile::UnlinkedWhenOpened;
    }
    config
}
