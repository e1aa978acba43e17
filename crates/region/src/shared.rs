//! What the regions of one budget, its reclaimer, its event thread and the
//! fork hooks share ([`Shared`]). Each protocol between them is a part with
//! private fields, in the module that owns it, whose documentation states
//! the protocol and the orderings it needs:
//!
//! | part | module | what it is |
//! |---|---|---|
//! | [`BudgetLimit`], [`Resident`] | `limits` | the budget in pages (it may change while it runs), and the resident count it limits |
//! | [`Staging`] | `staging` | the staging area: slot allocator, batched discards, its own userfaultfd |
//! | [`Queues`] | `queues` | the rings from the fault path to the reclaimer, and the victim queue back |
//! | [`ReclaimSignal`] | `reclaim/wake` | the reclaimer's kick, the throttled faults' room, bursts, stop |
//! | [`ReclaimLock`] | `reclaim/lock` | what serialises the reclaimer with `advise_cold`, the fork hooks and teardown |
//! | [`EvictionGate`] | `evict/gate` | pausing eviction for a fork or `restore_all` |
//! | [`InstallGate`] | `event/gate` | the install/event protocol with the event thread |
//! | [`ForkGate`], [`ForkedChild`] | `fork/state` | the resolve gate the fork prepare hook closes; a forked child's own budget |
//! | [`VforkHelp`] | `fork/vfork` | a `vfork()` child's requests to the reclaimer, and its `exec`'s eviction hold |
//! | [`Uffd`] | `uffd` | the regions' userfaultfd |
//! | [`MemoryMax`] | `memory_max` | the limit on the process's resident memory, and what its looks found |
//!
//! What is left here is what needs several parts at once: the budget's
//! limit check, giving references up, waking the reclaimer. Everything
//! here the fault path calls is async-signal-safe: atomics, futexes,
//! ioctls and `madvise` only.

use crate::aging::AgingClock;
use crate::auto_budget::{AutoBudget, AutoBudgetStatus};
use crate::config::{BudgetConfig, ColdConfig, FaultMode};
use crate::dedup::Dedup;
use crate::error::RegionError;
use crate::event::gate::InstallGate;
use crate::evict::gate::EvictionGate;
use crate::fork::state::{ForkGate, ForkedChild};
use crate::fork::vfork::VforkHelp;
use crate::limits::{BudgetLimit, Limits, Resident};
use crate::memory_max::{MemoryMax, MemoryMaxStatus};
use crate::queues::Queues;
use crate::reclaim::lock::{self, ReclaimGuard, ReclaimLock};
use crate::reclaim::wake::ReclaimSignal;
use crate::staging::Staging;
use crate::sys::{self, Errno};
use crate::threads;
use crate::tier_reader::TierReader;
use crate::trace::FaultTrace;
use crate::uffd::Uffd;
use crate::workers::WorkerSlots;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use zpage_store::{PageRef, PageStore, PageStoreConfig};

/// Pool shards of a budget's store: one per CPU, 2 to 4.
///
/// The reclaimer's stores and frees take one shard's write lock at a time,
/// so with N shards a load waits for a writer one time in N; but no more
/// threads can write at once than there are CPUs to run them. Each shard
/// keeps its own partly filled zspages, about half a zspage per size class
/// (2 MiB or so, whatever the pool's size), which no compaction frees: on
/// two CPUs, two shards instead of four lowered the suite's user-mode peaks
/// at a quarter budget by 3-5 MiB (node 0.65-0.66x of the plain peak to
/// 0.61x, the JVM 0.80x to 0.77-0.78x) at the same wall times; one shard
/// saved little more and made CPython's runs slower.
fn pool_shards(cpus: usize) -> usize {
    cpus.clamp(2, 4)
}

/// Event features asked for on the regions' uffd (no privilege needed).
const EVENT_FEATURES: u64 =
    sys::FEATURE_EVENT_REMOVE | sys::FEATURE_EVENT_UNMAP | sys::FEATURE_EVENT_REMAP;

static NEXT_BUDGET_ID: AtomicU64 = AtomicU64::new(1);

/// Everything the regions of one budget, its reclaimer and its event thread share.
#[derive(Debug)]
pub struct Shared {
    /// Tells budgets apart in published metrics.
    id: u64,
    limits: BudgetLimit,
    /// The limit on the process's resident memory, when there is one.
    memory_max: Option<MemoryMax>,
    /// The automatic budget's controller, when the budget finds itself.
    auto: Option<AutoBudget>,
    mode: FaultMode,
    keep_clean_copies: bool,
    /// The writeback rate limit (pages per second).
    writeback_pages_per_sec: u32,
    /// Cold recompression, when the budget has a cold codec.
    cold: Option<ColdConfig>,
    /// How often the process's file pages are given back (`None`: never).
    file_pages_every: Option<std::time::Duration>,
    store: PageStore,
    /// Shared blobs of identical pages (`BudgetConfig::dedup`); `None`: off.
    dedup: Option<Dedup>,
    /// The regions' userfaultfd (every region of the budget is registered on it).
    uffd: Uffd,
    staging: Staging,
    workers: WorkerSlots,
    /// Reads back pages from a tier that cannot be read in a signal handler
    /// (a network tier); `None` when the tier can be (or there is none).
    tier_reader: Option<Arc<TierReader>>,
    clock: AgingClock,
    queues: Queues,
    resident: Resident,
    /// Pages of every live region of the budget (bounds the reclaimer's queues).
    region_pages: AtomicUsize,
    reclaim_signal: ReclaimSignal,
    reclaim_lock: ReclaimLock,
    evictions: EvictionGate,
    installs: InstallGate,
    fork_gate: ForkGate,
    child: ForkedChild,
    vfork: VforkHelp,
    /// The record of faults, when one is asked for.
    trace: Option<FaultTrace>,
}

impl Shared {
    pub fn new(config: &BudgetConfig) -> Result<Shared, RegionError> {
        config.check()?;
        let tier = config.open_tier()?;
        let limits = BudgetLimit::new(config);
        let sized_for = limits.at_capacity();
        let memory_max = config.memory_max_bytes.map(MemoryMax::new);
        if let Some(max) = &memory_max {
            max.check_start()?;
        }
        let features = EVENT_FEATURES | sys::FEATURE_MOVE | sys::FEATURE_POISON;
        let uffd = match config.mode {
            FaultMode::Sigbus => Uffd::new(features | sys::FEATURE_SIGBUS, false, config.mode)?,
            FaultMode::HandlerThread => Uffd::new(features, true, config.mode)?,
        };
        // Room for the trial set and one round's worth of pages in flight.
        let staging =
            Staging::new(sized_for.staging_target + (sized_for.high_pages - sized_for.low_pages))?;
        // Read once: it looks at the process's CPU affinity and cgroup.
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let store = PageStore::new(PageStoreConfig {
            codec: config.codec.clone(),
            recompress_codec: config.cold_codec_in_effect(),
            threshold: config.threshold,
            pool: config.pool,
            max_pool_bytes: config.max_pool_bytes,
            pool_shards: pool_shards(cpus),
            tier: tier.clone(),
            ..PageStoreConfig::default()
        })?;
        let nworkers = cpus * 4 + 8;
        let workers = (0..nworkers)
            .map(|_| store.worker())
            .collect::<Result<Vec<_>, _>>()?;
        let tier_reader = tier
            .as_ref()
            .filter(|tier| !tier.reads_are_async_signal_safe())
            .map(|tier| Arc::new(TierReader::new(Arc::clone(tier), nworkers)));
        Ok(Shared {
            tier_reader,
            id: NEXT_BUDGET_ID.fetch_add(1, Ordering::Relaxed),
            limits,
            memory_max,
            auto: config
                .auto_stall_ppm
                .map(|ppm| AutoBudget::new(ppm, sys::now_ns())),
            mode: config.mode,
            keep_clean_copies: config.keep_clean_copies,
            writeback_pages_per_sec: config.writeback_pages_per_sec,
            cold: ColdConfig::of(config),
            file_pages_every: config.file_pages_every,
            workers: WorkerSlots::new(workers),
            store,
            dedup: config.dedup.then(Dedup::new),
            uffd,
            staging,
            clock: AgingClock::new(config.aging, sized_for.budget_pages),
            queues: Queues::new(sized_for.budget_pages),
            resident: Resident::default(),
            region_pages: AtomicUsize::new(0),
            reclaim_signal: ReclaimSignal::default(),
            reclaim_lock: ReclaimLock::default(),
            evictions: EvictionGate::default(),
            installs: InstallGate::default(),
            fork_gate: ForkGate::default(),
            child: ForkedChild::new(sys::getpid()),
            vfork: VforkHelp::default(),
            trace: FaultTrace::open(config)?,
        })
    }

    // ---- What the budget was made with ----

    /// The record of faults, when one is asked for (module `trace`).
    pub fn fault_trace(&self) -> Option<&FaultTrace> {
        self.trace.as_ref()
    }

    /// Tells budgets apart in published metrics.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The limits now (the budget may change while it runs: read them
    /// once per decision). Async-signal-safe.
    pub fn limits(&self) -> Limits {
        self.limits.now()
    }

    /// The budget as configured: the most it may be, what pins are limited
    /// against.
    pub fn configured_budget_pages(&self) -> usize {
        self.limits.at_capacity().budget_pages
    }

    /// Asks for a budget of `pages` (held within the smallest budget and
    /// the configured one; a memory max may hold it lower still); returns
    /// the budget asked for after that. A lower budget wakes the reclaimer
    /// to bring resident memory under it; a higher one wakes the faults
    /// waiting for room. Async-signal-safe.
    pub fn set_budget_pages(&self, pages: usize) -> usize {
        let wanted = self.limits.set_wanted_pages(pages);
        self.kick_reclaimer();
        self.signal_room();
        wanted
    }

    /// Whether the budget has a memory max.
    pub fn has_memory_max(&self) -> bool {
        self.memory_max.is_some()
    }

    /// The memory max's look at the process's resident memory, if one is
    /// due (the reclaimer's, about once a millisecond): caps the budget at
    /// what the rest of the process leaves, and wakes faults waiting for
    /// room if that cap rose. True if it looked.
    pub fn look_at_memory_max(&self) -> bool {
        let Some(max) = &self.memory_max else {
            return false;
        };
        let before = self.limits.budget_pages();
        let pool = self.store.pool_memory_used_bytes();
        let Some(pool_share) = max.look(sys::now_ns(), &self.limits, &self.resident, pool) else {
            return false;
        };
        if self.store.tier().is_some() {
            // With somewhere for the oldest pages to go, the pool makes
            // room too: capped at its share, it is written back as it nears
            // it, and evictions past it wait for the writeback.
            self.store.cap_pool_at(pool_share);
        }
        if self.limits.budget_pages() > before {
            self.signal_room();
        }
        true
    }

    /// Whether the program's stalls are timed (for the automatic budget).
    pub fn times_stalls(&self) -> bool {
        self.auto.is_some()
    }

    /// Counts time a program thread lost to a restore or a wait for room,
    /// for the automatic budget. Async-signal-safe.
    pub fn note_stall(&self, ns: u64) {
        if let Some(auto) = &self.auto {
            auto.add_stall(ns);
        }
    }

    /// A first touch of `pages` fresh pages: under an automatic budget the
    /// program grows, and its new pages are no reason to evict the ones it
    /// holds (they would come back at a cost the controller did not
    /// choose), so the budget rises to keep them below its low watermark,
    /// where fault-around goes on. Only the controller's looks lower it.
    /// Not in a forked child, whose room is its own (`fork::child`).
    /// Async-signal-safe.
    pub fn make_room_for_growth(&self, pages: usize) {
        if self.auto.is_some() && !self.in_forked_child() {
            self.limits
                .raise_wanted_for(self.resident.pages().saturating_add(pages));
        }
    }

    /// The automatic budget's look, if one is due (the reclaimer's): sets
    /// the budget from the last interval's stall; wakes faults waiting for
    /// room if it rose.
    pub fn look_at_auto_budget(&self) {
        let Some(auto) = &self.auto else {
            return;
        };
        if auto.look(sys::now_ns(), &self.limits, self.resident.pages()) == Some(true) {
            self.signal_room();
        }
    }

    /// What the automatic budget saw (`None` when the budget is fixed).
    pub fn auto_budget_status(&self) -> Option<AutoBudgetStatus> {
        self.auto.as_ref().map(|auto| auto.status(sys::now_ns()))
    }

    /// What the memory max's looks found (`None` without one).
    pub fn memory_max_status(&self) -> Option<MemoryMaxStatus> {
        self.memory_max.as_ref().map(|max| max.status(&self.limits))
    }

    pub fn mode(&self) -> FaultMode {
        self.mode
    }

    pub fn keeps_clean_copies(&self) -> bool {
        self.keep_clean_copies
    }

    /// The writeback rate limit (pages per second).
    pub fn writeback_pages_per_sec(&self) -> u32 {
        self.writeback_pages_per_sec
    }

    /// Cold recompression, when the budget has a cold codec.
    pub fn cold(&self) -> Option<ColdConfig> {
        self.cold
    }

    pub fn file_pages_every(&self) -> Option<std::time::Duration> {
        self.file_pages_every
    }

    // ---- Its parts ----

    pub fn store(&self) -> &PageStore {
        &self.store
    }

    /// The regions' userfaultfd.
    pub fn uffd(&self) -> &Uffd {
        &self.uffd
    }

    pub fn staging(&self) -> &Staging {
        &self.staging
    }

    /// The fault path's preallocated decompression workers.
    pub fn workers(&self) -> &WorkerSlots {
        &self.workers
    }

    /// The tier reader thread's request slots, for a tier that cannot be
    /// read in a signal handler.
    pub fn tier_reader(&self) -> Option<&Arc<TierReader>> {
        self.tier_reader.as_ref()
    }

    pub fn clock(&self) -> &AgingClock {
        &self.clock
    }

    pub fn queues(&self) -> &Queues {
        &self.queues
    }

    pub fn resident(&self) -> &Resident {
        &self.resident
    }

    pub fn reclaim_signal(&self) -> &ReclaimSignal {
        &self.reclaim_signal
    }

    pub fn evictions(&self) -> &EvictionGate {
        &self.evictions
    }

    pub fn installs(&self) -> &InstallGate {
        &self.installs
    }

    pub fn fork_gate(&self) -> &ForkGate {
        &self.fork_gate
    }

    pub fn vfork(&self) -> &VforkHelp {
        &self.vfork
    }

    pub fn child(&self) -> &ForkedChild {
        &self.child
    }

    /// Whether deduplication is on (the reclaimer's compressions consult it).
    pub(crate) fn dedup(&self) -> Option<&Dedup> {
        self.dedup.as_ref()
    }

    // ---- The regions drawing on it ----

    /// Pages of the budget's regions that ever left EMPTY grew by `pages`
    /// (a region's touched mark, `RegionCore::touch`). Async-signal-safe.
    pub fn add_region_pages(&self, pages: usize) {
        self.region_pages.fetch_add(pages, Ordering::AcqRel);
    }

    /// A region whose touched mark was `pages` no longer draws on the budget.
    pub fn remove_region_pages(&self, pages: usize) {
        self.region_pages.fetch_sub(pages, Ordering::AcqRel);
    }

    /// Pages of every live region of the budget that ever left EMPTY: the
    /// most pages the reclaimer's records can name, whatever the regions'
    /// sizes (a region as large as the preload library's arena is mostly
    /// never touched).
    pub fn region_pages(&self) -> usize {
        self.region_pages.load(Ordering::Relaxed)
    }

    // ---- Across parts ----

    /// The process these regions belong to.
    pub fn owner_pid(&self) -> i32 {
        self.child.owner_pid()
    }

    /// A forked child that took the budget over (no reclaimer, no frees).
    pub fn in_forked_child(&self) -> bool {
        self.child.is_child()
    }

    /// The fork child hook's part: fresh userfaultfds at the parent's
    /// descriptor numbers (the regions are registered on it by the caller).
    pub(crate) fn replace_uffds_in_child(&self) -> Result<(), Errno> {
        self.uffd.replace_in_child(
            EVENT_FEATURES | sys::FEATURE_MOVE | sys::FEATURE_POISON | sys::FEATURE_SIGBUS,
        )?;
        self.staging.take_over_in_child()
    }

    /// Takes the lock that serialises the reclaimer's work with
    /// `advise_cold`, the fork hooks and region teardown.
    pub fn lock_reclaim(&self) -> ReclaimGuard<'_> {
        self.reclaim_lock.lock()
    }

    /// Wakes the reclaimer (none in a forked child).
    pub fn kick_reclaimer(&self) {
        if self.in_forked_child() {
            return;
        }
        self.reclaim_signal.kick();
    }

    /// Whether a fault must wait before it makes one more page resident:
    /// the budget is full, or the pages mapped in regions reached
    /// [`Limits::mapped_limit`], or a burst is under way. Async-signal-safe.
    pub fn over_limit(&self) -> bool {
        let limits = self.limits.now();
        let resident = self.resident.pages_for_room();
        resident >= limits.budget_pages
            || resident.saturating_sub(self.staging.in_use()) >= limits.mapped_limit
            || self.reclaim_signal.bursting()
    }

    /// Reclaimer side: wake throttled faults if there is room now.
    pub fn signal_room(&self) {
        self.reclaim_signal.announce_room(|| !self.over_limit());
    }

    /// Gives up one page slot's reference: frees what it names unless other
    /// pages share it (dedup). Off the fault path only (it takes the dedup
    /// table's lock and the pool's); the fault path uses [`Shared::free_later`].
    pub fn release(&self, page_ref: PageRef) {
        if self.in_forked_child() {
            // The child's pool is its copy-on-write copy of the parent's:
            // left as it is (see `fork::state::ForkedChild`).
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
    /// which frees it (freeing takes the pool's lock and may give memory
    /// back to the allocator). Async-signal-safe. False when the ring is
    /// full and the calling thread may not wait for the reclaimer to drain
    /// it: the caller then keeps the copy in the page's slot, where the
    /// page's next eviction, or its region's end, gives it up
    /// (`evict::give_up_copy`).
    ///
    /// A program thread that holds no reclaim lock waits: it holds nothing
    /// the reclaimer waits for (the reclaimer never waits on a page another
    /// thread holds, and drains this ring even while a fork pauses
    /// eviction). zpage's own threads do not (the reclaimer is the ring's
    /// only consumer, and would wait on itself), nor does a thread that
    /// holds a reclaim lock (the drain needs it: the fork hooks,
    /// `advise_cold`, region teardown); either gets here only by faulting
    /// on region memory while it holds zpage's state (when that can happen:
    /// the top of `fault.rs`).
    #[must_use]
    pub fn free_later(&self, page_ref: PageRef) -> bool {
        if self.in_forked_child() {
            // The child frees nothing (see `fork::state::ForkedChild`).
            return true;
        }
        while !self.queues.hand_over_freed(page_ref) {
            if !Shared::thread_may_wait_for_reclaimer() {
                return false;
            }
            self.kick_reclaimer();
            sys::yield_now();
        }
        true
    }

    /// Whether the calling thread may wait on the reclaimer for as long as
    /// it takes: not one of zpage's threads (the reclaimer would wait on
    /// itself), nor one holding a reclaim lock (the reclaimer needs it).
    /// Async-signal-safe.
    pub fn thread_may_wait_for_reclaimer() -> bool {
        !threads::on_zpage_thread() && !lock::held_by_this_thread()
    }

    /// Budget-wide figures for a stats snapshot.
    pub fn resident_pages(&self) -> usize {
        self.resident.pages()
    }
}
