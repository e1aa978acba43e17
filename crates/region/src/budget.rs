//! A budget: what every region drawing on it shares. One resident limit,
//! one compressed store, one staging area, one reclaimer and one aging
//! policy across all of them, and one userfaultfd (so one event thread).
//! A [`crate::Region`] made with [`crate::Region::new`] has a budget of its
//! own; [`crate::Region::with_budget`] draws on a [`Budget`] the caller made
//! (a whole process under `zpage run`, a program with many buffers).
//!
//! Everything here that the fault path calls is async-signal-safe: atomics,
//! futexes, ioctls and `madvise` only.

use crate::aging::AgingClock;
use crate::config::{AgingPolicy, BudgetConfig, FaultMode};
use crate::region_core::RegionCore;
use crate::error::RegionError;
use crate::queues::{Record, Ring, VictimQueue};
use crate::sys::{self, Errno, Mapping, PAGE_SIZE};
use crate::tier_reader::TierReader;
use crate::workers::WorkerSlots;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use zpage_store::{PageRef, PageStore, PageStoreConfig};

/// A userfaultfd zpage owns. Closed on drop, unless the program closed it
/// first (the number may belong to someone else by then).
#[derive(Debug)]
pub struct Uffd {
    fd: i32,
    lost: AtomicBool,
}

impl Uffd {
    pub fn fd(&self) -> i32 {
        self.fd
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::Release);
    }
}

impl Drop for Uffd {
    fn drop(&mut self) {
        if !self.is_lost() {
            sys::close(self.fd);
        }
    }
}

fn uffd_unavailable(e: Errno, mode: FaultMode) -> RegionError {
    RegionError::UffdUnavailable {
        errno: e.to_string(),
        fix: match mode {
            FaultMode::Sigbus => "zpage needs userfaultfd(2) with UFFD_USER_MODE_ONLY (Linux >= 5.11, CONFIG_USERFAULTFD=y; not blocked by seccomp)",
            FaultMode::HandlerThread => "FaultMode::HandlerThread traps kernel-mode faults and so needs CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1, or read-write access to /dev/userfaultfd; or use FaultMode::Sigbus, which needs no privilege",
        },
    }
}

/// Creates a uffd with `features`; `kernel_faults` asks for one that traps
/// kernel-mode accesses too (privileged).
fn make_uffd(features: u64, kernel_faults: bool, mode: FaultMode) -> Result<Uffd, RegionError> {
    let base_flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let fd = if kernel_faults {
        match sys::userfaultfd(base_flags) {
            Ok(fd) => fd,
            Err(e) => sys::userfaultfd_dev(base_flags).map_err(|_| uffd_unavailable(e, mode))?,
        }
    } else {
        sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY)
            .map_err(|e| uffd_unavailable(e, mode))?
    };
    // Owned from here: an early return closes it.
    let uffd = Uffd {
        fd: sys::dup_high(fd, 512),
        lost: AtomicBool::new(false),
    };
    match sys::uffd_api(uffd.fd, features) {
        Ok(_) => Ok(uffd),
        Err(e) => {
            // Learn what is there, for the error message.
            let available = match sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY) {
                Ok(probe) => {
                    let available = sys::uffd_api(probe, 0).unwrap_or(0);
                    sys::close(probe);
                    available
                }
                Err(_) => 0,
            };
            if features & !available != 0 {
                Err(RegionError::FeaturesMissing {
                    missing: features & !available,
                    available,
                })
            } else {
                Err(RegionError::sys("UFFDIO_API", e))
            }
        }
    }
}

/// In a forked child: puts a fresh userfaultfd with `features` at `uffd`'s
/// descriptor number. The inherited descriptor names the parent's context:
/// ioctls on it would act on the parent's memory.
fn replace_uffd(uffd: &Uffd, features: u64) -> Result<(), Errno> {
    let fd = sys::userfaultfd(libc::O_CLOEXEC | libc::O_NONBLOCK | sys::UFFD_USER_MODE_ONLY)?;
    if let Err(e) = sys::uffd_api(fd, features) {
        sys::close(fd);
        return Err(e);
    }
    sys::replace_fd(fd, uffd.fd)?;
    uffd.lost.store(false, Ordering::Release);
    Ok(())
}

/// The staging area: pages moved out of regions wait here uncompressed (on
/// trial, or until compressed), and clean pages wait here until their memory
/// is discarded in a batch (one TLB flush for many pages). A slot is free in
/// the bitmap only once its memory is discarded, so a MOVE into a free slot
/// always finds it empty.
#[derive(Debug)]
pub struct Staging {
    mapping: Mapping,
    /// MOVE's destination must be registered with the uffd the ioctl is made
    /// on; this one has no events, so discarding slots raises none.
    pub uffd: Uffd,
    bits: Box<[AtomicU64]>,
    /// Where the next allocation starts looking: consecutive evictions get
    /// adjacent slots, so a discard batch is a few long runs (one `madvise`
    /// and one TLB flush each) rather than many single pages.
    cursor: AtomicUsize,
    /// Slots whose page is no longer needed, waiting to be discarded.
    discards: Ring,
    pending: AtomicUsize,
    /// Held by the one thread discarding (the ring has one consumer).
    discarding: AtomicBool,
    /// Slots taken (staged pages, and slots waiting to be discarded).
    in_use: AtomicUsize,
}

/// Pool shards of a budget's store: the reclaimer's stores and frees take
/// one shard's write lock at a time, so a load waits for a writer one time
/// in four. Each shard keeps its own partly filled zspages (a few MiB at
/// most, whatever the pool's size).
const POOL_SHARDS: usize = 4;

/// Discard batches at least this large (one `process_madvise` and one TLB
/// flush for the runs of adjacent slots in it).
const DISCARD_BATCH: usize = 64;
const _: () = assert!(4 * DISCARD_BATCH <= sys::DISCARD_RANGES_MAX);

impl Staging {
    fn new(slots: usize) -> Result<Staging, RegionError> {
        let slots = slots.div_ceil(64) * 64;
        let mapping = Mapping::new(slots).map_err(|e| RegionError::sys("mmap(staging)", e))?;
        let uffd = make_uffd(
            sys::FEATURE_SIGBUS | sys::FEATURE_MOVE,
            false,
            FaultMode::Sigbus,
        )?;
        sys::uffd_register(
            uffd.fd(),
            mapping.base(),
            mapping.len(),
            sys::REGISTER_MODE_MISSING,
        )
        .map_err(|e| RegionError::sys("UFFDIO_REGISTER(staging)", e))?;
        Ok(Staging {
            mapping,
            uffd,
            bits: (0..slots / 64).map(|_| AtomicU64::new(0)).collect(),
            cursor: AtomicUsize::new(0),
            discards: Ring::new(4 * DISCARD_BATCH),
            pending: AtomicUsize::new(0),
            discarding: AtomicBool::new(false),
            in_use: AtomicUsize::new(0),
        })
    }

    pub fn addr(&self, slot: usize) -> usize {
        self.mapping.addr(slot)
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// In a forked child: a fresh userfaultfd on the staging area at the
    /// descriptor number of the parent's (whose context is the parent's).
    fn take_over_in_child(&self) -> Result<(), Errno> {
        replace_uffd(&self.uffd, sys::FEATURE_SIGBUS | sys::FEATURE_MOVE)?;
        sys::uffd_register(
            self.uffd.fd(),
            self.mapping.base(),
            self.mapping.len(),
            sys::REGISTER_MODE_MISSING,
        )?;
        // A discard the parent had under way at the fork has no thread here.
        self.discarding.store(false, Ordering::Release);
        Ok(())
    }

    /// The uncompressed page in `slot` (its owner reads it while it holds the page).
    pub fn page(&self, slot: usize) -> &[u8; PAGE_SIZE] {
        self.mapping.page(slot)
    }

    /// Takes a free slot (any thread; async-signal-safe).
    pub fn alloc(&self) -> Option<usize> {
        let words = self.bits.len();
        let start = self.cursor.load(Ordering::Relaxed) % (words * 64);
        for i in 0..=words {
            let w = (start / 64 + i) % words;
            let mut cur = self.bits[w].load(Ordering::Acquire);
            // In the starting word, look at and after the cursor's bit first.
            let from = if i == 0 { start % 64 } else { 0 };
            loop {
                let free = !cur & (u64::MAX << from);
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros() as usize;
                match self.bits[w].compare_exchange(
                    cur,
                    cur | (1 << bit),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.in_use.fetch_add(1, Ordering::AcqRel);
                        let slot = w * 64 + bit;
                        self.cursor.store(slot + 1, Ordering::Relaxed);
                        return Some(slot);
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        None
    }

    /// Gives back a slot whose memory is already empty (a MOVE into it failed).
    pub fn free_unused(&self, slot: usize) {
        self.bits[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::AcqRel);
        self.in_use.fetch_sub(1, Ordering::AcqRel);
    }

    /// Gives back a slot after a MOVE into it failed. The slot should be
    /// empty; if a page sits there anyway (a MOVE that failed after moving,
    /// see `sys::move_page`), it is discarded first, or every later MOVE
    /// into the slot would fail with `EEXIST`. Async-signal-safe.
    pub fn free_after_failed_move(&self, slot: usize) {
        if sys::page_present(self.addr(slot)) {
            let _ = sys::discard(self.addr(slot), PAGE_SIZE);
        }
        self.free_unused(slot);
    }

    /// Queues `slot` to be discarded with others; when enough are waiting,
    /// discards them now. Async-signal-safe.
    pub fn discard_later(&self, slot: usize, budget_resident: &AtomicUsize) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if !self.discards.try_push(slot as u64 + 1) {
            // The queue is full (its consumer is busy): this one goes alone.
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let _ = sys::discard(self.addr(slot), PAGE_SIZE);
            self.free_unused(slot);
            budget_resident.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        if self.pending.load(Ordering::Acquire) >= DISCARD_BATCH {
            self.discard_pending(budget_resident);
        }
    }

    /// Discards every queued slot and frees it; returns how many. Only one
    /// thread discards at a time; another caller returns 0 at once.
    /// Async-signal-safe (no allocation: slots are sorted in a stack array).
    pub fn discard_pending(&self, budget_resident: &AtomicUsize) -> usize {
        if self.discarding.swap(true, Ordering::AcqRel) {
            return 0;
        }
        let mut total = 0;
        let timed = crate::profile::start();
        loop {
            let mut batch = [0u32; 4 * DISCARD_BATCH];
            let mut n = 0;
            while n < batch.len() {
                match self.discards.pop() {
                    Some(v) => {
                        batch[n] = (v - 1) as u32;
                        n += 1;
                    }
                    None => break,
                }
            }
            if n == 0 {
                break;
            }
            let batch = &mut batch[..n];
            batch.sort_unstable();
            let mut ranges = [(0usize, 0usize); 4 * DISCARD_BATCH];
            let mut runs = 0;
            let mut i = 0;
            while i < n {
                let mut j = i + 1;
                while j < n && batch[j] == batch[j - 1] + 1 {
                    j += 1;
                }
                ranges[runs] = (self.addr(batch[i] as usize), (j - i) * PAGE_SIZE);
                runs += 1;
                i = j;
            }
            sys::discard_ranges(&ranges[..runs]);
            for &slot in batch.iter() {
                self.free_unused(slot as usize);
            }
            self.pending.fetch_sub(n, Ordering::AcqRel);
            budget_resident.fetch_sub(n, Ordering::AcqRel);
            total += n;
        }
        self.discarding.store(false, Ordering::Release);
        if total > 0 {
            crate::profile::end(crate::profile::Part::DiscardPerSlot, timed, total as u64);
        }
        total
    }
}

/// The limits in pages, computed once from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub budget_pages: usize,
    pub high_pages: usize,
    pub low_pages: usize,
    /// Staged pages kept on trial (0 with FIFO aging: it compresses at once).
    pub staging_target: usize,
    /// Pages the reclaimer moves out in one burst while faults wait.
    pub burst_pages: usize,
    /// Faults wait when the pages mapped in regions (resident less staged)
    /// reach this: the budget less the trial set and one burst, so that a
    /// burst moved to staging lets them go on with the budget kept.
    pub mapped_limit: usize,
}

/// The longest burst of evictions made while faults wait (see `reclaim.rs`):
/// a burst of N pages holds the faulting threads about 1.7 µs x N.
const MAX_BURST_PAGES: usize = 256;

static NEXT_BUDGET_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Everything the regions of one budget, its reclaimer and its event thread share.
#[derive(Debug)]
pub struct Shared {
    /// Tells budgets apart in published metrics.
    pub id: u64,
    pub limits: Limits,
    pub mode: FaultMode,
    pub keep_clean_copies: bool,
    /// The writeback rate limit (pages per second).
    pub writeback_pages_per_sec: u32,
    /// Cold recompression, when the budget has a cold codec.
    pub cold: Option<crate::cold::ColdConfig>,
    pub store: PageStore,
    /// Shared blobs of identical pages (`BudgetConfig::dedup`); `None`: off.
    pub(crate) dedup: Option<crate::dedup::Dedup>,
    /// The regions' userfaultfd (every region of the budget is registered on it).
    pub uffd: Uffd,
    pub staging: Staging,
    pub workers: WorkerSlots,
    /// Reads back pages from a tier that cannot be read in a signal handler
    /// (a network tier); `None` when the tier can be (or there is none).
    pub tier_reader: Option<Arc<TierReader>>,
    pub clock: AgingClock,
    /// "Page became resident" records, from the fault path to the reclaimer.
    pub admits: Ring,
    /// Victims a fault took but could not evict (no longer clean): back to the reclaimer.
    pub returned: Ring,
    /// Compressed copies given up on the fault path (a restore, a write
    /// after a restore, a discard): freed by the reclaimer, since freeing
    /// takes the pool's lock and may give memory back to the allocator.
    pub freed_refs: Ring,
    /// An admission or returned record did not fit in its ring: the
    /// reclaimer rebuilds its queues from the pages themselves.
    pub records_lost: AtomicBool,
    /// Clean candidates that faulting threads evict themselves.
    pub victims: VictimQueue,
    /// A fault found the victim queue half empty and kicked the reclaimer.
    pub refill_wanted: AtomicBool,
    /// Pages resident in the budget's regions plus pages occupying staging slots.
    pub resident: AtomicUsize,
    /// Pages of every live region of the budget (bounds the reclaimer's queues).
    pub region_pages: AtomicUsize,
    pub kick: AtomicU32,
    /// The reclaimer is (about to be) asleep on `kick`.
    pub reclaimer_idle: AtomicBool,
    /// Futex word the reclaimer bumps when it made room under the budget.
    pub room: AtomicU32,
    pub room_waiters: AtomicU32,
    /// The reclaimer is moving a burst of pages out: faults wait until it
    /// is done, so that no MOVE of the burst interrupts their CPUs.
    pub bursting: AtomicBool,
    pub stop: AtomicBool,
    /// Set by the fork prepare hook: no eviction until the parent hook clears it.
    pub fork_pause: AtomicBool,
    /// Evictions in flight; with the pause flags a Dekker pair, so whoever
    /// sets a pause and then waits for this to reach zero knows no eviction
    /// can start after it (without a lock: `restore_all` may run in a signal
    /// handler).
    pub evicting: AtomicUsize,
    /// Odd while the event thread is reading and applying events.
    pub event_seq: AtomicU64,
    /// When the event thread last read a `REMOVE` event (`sys::now_ns`):
    /// until some time after, a zap it announced may still be on its way
    /// (see `evict::ZAP_SETTLE_NS`).
    pub last_remove_ns: AtomicU64,
    /// Installs (COPY / ZEROPAGE / MOVE into a region) in flight. With
    /// `event_seq` this forms a Dekker pair: an install starts only while no
    /// event is being read, and the event thread reads only when no install is
    /// in flight. So no page can be installed from a stale copy after a
    /// program-side `MADV_DONTNEED` has been acknowledged and before its pages
    /// are marked discarded.
    pub installs: AtomicUsize,
    /// Serialises the reclaimer's work with `advise_cold` and region teardown
    /// (taken through [`Shared::lock_reclaim`]).
    reclaim_lock: Mutex<()>,
    /// The process whose regions these are: the creator, or a child made by
    /// `fork()` once its hook took the budget over (module `fork`).
    owner_pid: AtomicI32,
    /// Fault resolutions in flight, and the gate the fork prepare hook closes
    /// to let them drain (a Dekker pair, as `evicting` with the pause flags):
    /// no page is half restored at the instant of a fork.
    pub resolving: AtomicUsize,
    pub fork_gate: AtomicBool,
    /// Set in a child made by `fork()` that took the budget over: its
    /// threads stayed in the parent, so faults resolve from the child's
    /// copy-on-write copy of the pool, never free a blob, and drop clean
    /// pages the child restored to stay within the budget.
    pub forked_child: AtomicBool,
    /// Pages a forked child restored and still holds (its own budget).
    pub child_restored: AtomicUsize,
    /// Where a forked child's search for a clean page to drop goes on.
    pub child_hand: AtomicUsize,
    /// Non-zero when a forked child could not take the budget over (the
    /// errno of the failed call): its faults end the process with it.
    pub child_setup_errno: AtomicI32,
}

impl Shared {
    fn new(config: &BudgetConfig) -> Result<Shared, RegionError> {
        config.validate()?;
        let budget_pages = config.budget_bytes / PAGE_SIZE;
        let staging_target = match config.aging {
            AgingPolicy::Fifo => 0,
            AgingPolicy::Refault => budget_pages * config.staging_pct as usize / 100,
        };
        let burst_pages = (budget_pages / 64).clamp(1, MAX_BURST_PAGES);
        let limits = Limits {
            budget_pages,
            high_pages: budget_pages * config.high_watermark_pct as usize / 100,
            low_pages: budget_pages * config.low_watermark_pct as usize / 100,
            staging_target,
            burst_pages,
            mapped_limit: budget_pages
                .saturating_sub(staging_target + burst_pages)
                .max(1),
        };
        let features = crate::event::FEATURES | sys::FEATURE_MOVE | sys::FEATURE_POISON;
        let uffd = match config.mode {
            FaultMode::Sigbus => make_uffd(features | sys::FEATURE_SIGBUS, false, config.mode)?,
            FaultMode::HandlerThread => make_uffd(features, true, config.mode)?,
        };
        // Room for the trial set, one round's worth of pages in flight, and
        // the discard batches.
        let staging = Staging::new(
            staging_target + (limits.high_pages - limits.low_pages) + 8 * DISCARD_BATCH + 1024,
        )?;
        let store = PageStore::new(PageStoreConfig {
            codec: config.codec.clone(),
            recompress_codec: config.cold_codec.clone(),
            threshold: config.threshold,
            pool: config.pool,
            max_pool_bytes: config.max_pool_bytes,
            pool_shards: POOL_SHARDS,
            tier: config.tier.clone(),
            ..PageStoreConfig::default()
        })?;
        let nworkers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            * 4
            + 8;
        let workers = (0..nworkers)
            .map(|_| store.worker())
            .collect::<Result<Vec<_>, _>>()?;
        let tier_reader = config
            .tier
            .as_ref()
            .filter(|tier| !tier.reads_are_async_signal_safe())
            .map(|tier| Arc::new(TierReader::new(Arc::clone(tier), nworkers)));
        Ok(Shared {
            tier_reader,
            id: NEXT_BUDGET_ID.fetch_add(1, Ordering::Relaxed),
            limits,
            mode: config.mode,
            keep_clean_copies: config.keep_clean_copies,
            writeback_pages_per_sec: config.writeback_pages_per_sec,
            cold: config.cold_codec.as_ref().map(|_| crate::cold::ColdConfig {
                at_eviction: config.cold_at_eviction,
                after: config.cold_after,
                pages_per_sec: config.cold_pages_per_sec,
            }),
            workers: WorkerSlots::new(workers),
            store,
            dedup: config.dedup.then(crate::dedup::Dedup::new),
            uffd,
            staging,
            clock: AgingClock::new(config.aging, budget_pages),
            admits: Ring::new(budget_pages * 2),
            returned: Ring::new(4096),
            freed_refs: Ring::new(budget_pages),
            records_lost: AtomicBool::new(false),
            victims: VictimQueue::new((budget_pages / 16).clamp(16, 8192)),
            refill_wanted: AtomicBool::new(false),
            resident: AtomicUsize::new(0),
            region_pages: AtomicUsize::new(0),
            kick: AtomicU32::new(0),
            reclaimer_idle: AtomicBool::new(false),
            room: AtomicU32::new(0),
            room_waiters: AtomicU32::new(0),
            bursting: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            fork_pause: AtomicBool::new(false),
            evicting: AtomicUsize::new(0),
            event_seq: AtomicU64::new(0),
            last_remove_ns: AtomicU64::new(0),
            installs: AtomicUsize::new(0),
            reclaim_lock: Mutex::new(()),
            owner_pid: AtomicI32::new(sys::getpid()),
            resolving: AtomicUsize::new(0),
            fork_gate: AtomicBool::new(false),
            forked_child: AtomicBool::new(false),
            child_restored: AtomicUsize::new(0),
            child_hand: AtomicUsize::new(0),
            child_setup_errno: AtomicI32::new(0),
        })
    }

    /// The process these regions belong to.
    pub fn owner_pid(&self) -> i32 {
        self.owner_pid.load(Ordering::Acquire)
    }

    /// A forked child's hook takes the budget over.
    pub(crate) fn set_owner_pid(&self, pid: i32) {
        self.owner_pid.store(pid, Ordering::Release);
    }

    /// A forked child that took the budget over (no reclaimer, no frees).
    pub fn in_forked_child(&self) -> bool {
        self.forked_child.load(Ordering::Acquire)
    }

    /// Enters a fault resolution; waits while a fork is being prepared.
    /// Async-signal-safe: the gate is closed only by the fork prepare hook,
    /// which never waits on the thread calling this.
    pub fn enter_resolve(&self) {
        if sys::on_zpage_thread() || crate::fork::in_fork_hook() {
            // The reclaimer may fault on the program allocator's memory
            // while the prepare hook waits for it, and the forking thread
            // on its own: the gate is for the program's threads.
            self.resolving.fetch_add(1, Ordering::SeqCst);
            return;
        }
        loop {
            self.resolving.fetch_add(1, Ordering::SeqCst);
            if !self.fork_gate.load(Ordering::SeqCst) {
                return;
            }
            self.resolving.fetch_sub(1, Ordering::SeqCst);
            while self.fork_gate.load(Ordering::SeqCst) {
                sys::yield_now();
            }
        }
    }

    pub fn leave_resolve(&self) {
        self.resolving.fetch_sub(1, Ordering::SeqCst);
    }

    /// Closes the resolve gate and waits until no resolution is in flight.
    pub(crate) fn close_resolve_gate(&self) {
        self.fork_gate.store(true, Ordering::SeqCst);
        while self.resolving.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    /// The fork child hook's part: fresh userfaultfds at the parent's
    /// descriptor numbers (the regions are registered on it by the caller),
    /// and the state the parent's threads had in flight cleared.
    pub(crate) fn take_over_in_child(&self) -> Result<(), Errno> {
        self.installs.store(0, Ordering::SeqCst);
        replace_uffd(
            &self.uffd,
            crate::event::FEATURES | sys::FEATURE_MOVE | sys::FEATURE_POISON | sys::FEATURE_SIGBUS,
        )?;
        self.staging.take_over_in_child()
    }

    /// Eviction of `core`'s pages is paused (fork in progress, or `restore_all`).
    pub fn paused(&self, core: &RegionCore) -> bool {
        self.fork_pause.load(Ordering::SeqCst) || core.held()
    }

    /// Announces an eviction; false (and nothing announced) if paused.
    pub fn begin_evict(&self, core: &RegionCore) -> bool {
        self.evicting.fetch_add(1, Ordering::SeqCst);
        if self.paused(core) {
            self.evicting.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub fn end_evict(&self) {
        self.evicting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Takes the lock that serialises the reclaimer's work with `advise_cold`,
    /// the fork hooks and region teardown. A holder that panicked leaves
    /// nothing half-done behind the lock (it guards no data: page states
    /// are claimed by compare-and-swap), so a poisoned lock is taken as is.
    pub fn lock_reclaim(&self) -> MutexGuard<'_, ()> {
        self.reclaim_lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets a pause flag and waits until no eviction is in flight.
    pub fn pause(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        while self.evicting.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    pub fn wait_events_applied(&self) {
        while self.event_seq.load(Ordering::SeqCst) & 1 == 1 {
            sys::yield_now();
        }
    }

    /// Runs one install ioctl under the install/event protocol, retrying
    /// `EAGAIN` (events pending) after letting the event thread through.
    pub fn install(&self, mut f: impl FnMut() -> Result<(), Errno>) -> Result<(), Errno> {
        loop {
            self.installs.fetch_add(1, Ordering::SeqCst);
            if self.event_seq.load(Ordering::SeqCst) & 1 == 1 {
                self.installs.fetch_sub(1, Ordering::SeqCst);
                self.wait_events_applied();
                continue;
            }
            let r = f();
            self.installs.fetch_sub(1, Ordering::SeqCst);
            match r {
                Err(Errno(libc::EAGAIN)) => sys::yield_now(),
                r => return r,
            }
        }
    }

    /// Wakes the reclaimer. The futex system call is made only when it sleeps
    /// (`reclaimer_idle`): the counter bump alone makes its next wait return
    /// at once, so a busy reclaimer costs the fault path no system call.
    pub fn kick_reclaimer(&self) {
        if self.in_forked_child() {
            return;
        }
        self.kick.fetch_add(1, Ordering::SeqCst);
        if self.reclaimer_idle.load(Ordering::SeqCst) {
            sys::futex_wake(&self.kick);
        }
    }

    /// Whether a fault must wait before it makes one more page resident:
    /// the budget is full, or the pages mapped in regions reached
    /// [`Limits::mapped_limit`]. Async-signal-safe.
    pub fn over_limit(&self) -> bool {
        let resident = self.resident.load(Ordering::SeqCst);
        resident >= self.limits.budget_pages
            || resident.saturating_sub(self.staging.in_use()) >= self.limits.mapped_limit
            || self.bursting.load(Ordering::SeqCst)
    }

    /// Reclaimer side: wake throttled faults if there is room now.
    pub fn signal_room(&self) {
        if self.room_waiters.load(Ordering::SeqCst) != 0 && !self.over_limit() {
            self.room.fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(&self.room);
        }
    }

    /// Gives up one page slot's reference: frees what it names unless other
    /// pages share it (dedup). Off the fault path only (it takes the dedup
    /// table's lock and the pool's); the fault path uses [`Shared::free_later`].
    pub fn release(&self, page_ref: PageRef) {
        if self.in_forked_child() {
            // The child's pool is its copy-on-write copy of the parent's:
            // left as it is (see `Shared::forked_child`).
            return;
        }
        if self.dedup.as_ref().is_none_or(|d| d.release(page_ref)) {
            self.store.free(page_ref);
        }
    }

    /// [`Shared::release`] for many references (emptied).
    pub fn release_many(&self, refs: &mut Vec<PageRef>) {
        if self.in_forked_child() {
            refs.clear();
            return;
        }
        if let Some(dedup) = &self.dedup {
            refs.retain(|r| dedup.release(*r));
        }
        self.store.free_many(refs);
    }

    /// Whether other page slots share the blob `page_ref` names.
    pub fn is_shared(&self, page_ref: PageRef) -> bool {
        self.dedup.as_ref().is_some_and(|d| d.is_shared(page_ref))
    }

    /// Hands a compressed copy given up on the fault path to the reclaimer,
    /// which frees it. Async-signal-safe. A full ring waits for the
    /// reclaimer to drain it: the caller holds nothing the reclaimer waits
    /// for (it never waits on a page another thread holds, and it drains
    /// this ring even while a fork pauses eviction).
    pub fn free_later(&self, page_ref: PageRef) {
        if self.in_forked_child() {
            return;
        }
        while !self.freed_refs.try_push(page_ref.to_raw()) {
            self.kick_reclaimer();
            sys::yield_now();
        }
    }

    /// Queues a record for the reclaimer, or flags the loss (and returns
    /// false). Async-signal-safe.
    pub fn queue_record(&self, ring: &Ring, record: Record) -> bool {
        let queued = ring.try_push_record(record);
        if !queued {
            self.records_lost.store(true, Ordering::Release);
        }
        queued
    }

    /// Records that a page of `core` became resident: its record goes to the
    /// reclaimer's queues.
    pub fn admitted(&self, core: &RegionCore, page: usize, activate: bool) {
        let gen = core.pages[page].aging.admit();
        if self.in_forked_child() {
            // No reclaimer here: the child's own budget is kept by its faults.
            return;
        }
        if !self.queue_record(&self.admits, Record::new(core.id(), page, gen, activate)) {
            self.kick_reclaimer();
        } else if self.resident.load(Ordering::Relaxed) > self.limits.high_pages {
            // Between two bursts the reclaimer's only work for these faults
            // is draining their records (and the copies they gave up): woken
            // once per `ADMITS_PER_WAKE` of them, it drains them beside the
            // faults rather than during the next burst, while they wait;
            // woken for each, it cost each fault a `futex_wake` and an
            // interrupt (5% of the faulting thread's time under `perf`).
            // Otherwise the count alone tells it the program faults.
            if self.admits.len() >= ADMITS_PER_WAKE {
                self.kick_reclaimer();
            } else {
                self.kick.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// Budget-wide figures for a stats snapshot.
    pub fn resident_pages(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }
}

/// Pages admitted (queued for the reclaimer) per wake of a sleeping
/// reclaimer while the program faults above the high watermark.
const ADMITS_PER_WAKE: usize = 128;

/// The owner of a budget's threads: they stop when the last [`Budget`] handle
/// and the last region drawing on it are gone.
#[derive(Debug)]
pub(crate) struct Owner {
    pub shared: Arc<Shared>,
    threads: Mutex<Vec<sys::ZpageThread>>,
    /// The process the threads run in (a forked child has none of them).
    threads_pid: i32,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = &self.shared;
        shared.stop.store(true, Ordering::Release);
        if let Some(reader) = &shared.tier_reader {
            reader.stop();
        }
        shared.kick_reclaimer();
        sys::futex_wake(&shared.kick);
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        if self.threads_pid == sys::getpid() {
            for thread in threads {
                thread.join();
            }
        } else {
            // A forked child: the threads stayed in the parent.
            for thread in threads {
                std::mem::forget(thread);
            }
        }
    }
}

/// A resident budget that many regions draw on: one limit, one compressed
/// pool, one reclaimer and one aging policy across them. Cheap to clone
/// (clones share the budget). See the module documentation.
#[derive(Clone, Debug)]
pub struct Budget {
    pub(crate) owner: Arc<Owner>,
}

impl Budget {
    /// Makes a budget and starts its reclaimer and event thread.
    pub fn new(config: BudgetConfig) -> Result<Budget, RegionError> {
        crate::signal::install().map_err(|e| RegionError::sys("sigaction(SIGBUS)", e))?;
        crate::fork::install();
        let shared = Arc::new(Shared::new(&config)?);
        let owner = Arc::new(Owner {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
            threads_pid: sys::getpid(),
        });
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            sys::spawn_blocking_signals(name, body).map_err(|e| RegionError::Sys {
                call: "spawn",
                errno: e.to_string(),
            })
        };
        let reclaimer = crate::reclaim::Reclaimer::new(Arc::clone(&shared))?;
        let mut threads = owner.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.push(spawn("zpage-reclaim", Box::new(move || reclaimer.run()))?);
        let events = Arc::clone(&shared);
        threads.push(spawn(
            "zpage-events",
            Box::new(move || crate::event::run(events)),
        )?);
        if let Some(reader) = &shared.tier_reader {
            let reader = Arc::clone(reader);
            threads.push(spawn("zpage-tier-read", Box::new(move || reader.run()))?);
        }
        drop(threads);
        if std::env::var_os(crate::metrics::METRICS_DIR_ENV).is_some() {
            // Asked for by the environment; a failure to publish does not
            // stop the program from getting its memory.
            let _ = crate::metrics::publish_metrics();
        }
        Ok(Budget { owner })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// The budget in bytes.
    pub fn budget_bytes(&self) -> usize {
        self.shared().limits.budget_pages * PAGE_SIZE
    }

    /// Bytes every region of the budget holds resident now (with staged pages).
    pub fn resident_bytes(&self) -> usize {
        self.shared().resident_pages() * PAGE_SIZE
    }

    /// The budget's compressed store counters.
    pub fn store_stats(&self) -> zpage_store::StoreStats {
        let _signals = sys::SignalGuard::block_async();
        self.shared().store.stats()
    }
}
