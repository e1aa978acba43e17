//! The budget's reclaimer: one thread per budget that keeps resident memory
//! (every region's mapped pages plus the staging area) within the budget.
//! It takes victims from the aging policy, across every region of the
//! budget, compresses staged pages beyond the trial set, frees references
//! the fault path gave up, and keeps the queue of clean victims that
//! faulting threads drop themselves.
//!
//! **Bursts.** Taking a page out (`UFFDIO_MOVE`) flushes its TLB entry on
//! every CPU that runs a thread of the process, and interrupting a CPU that
//! runs one costs the sender about 9 µs on a VM: 10.2 µs a page against
//! 1.1-1.3 µs when the program's threads sleep (`move_cost` bench).
//! Scattered victims cannot share a flush. So while the program faults,
//! pages go out while its faults wait: a fault waits once the pages mapped
//! in regions reach `Limits::mapped_limit` (the budget less the trial set
//! and one burst); the reclaimer then moves up to `Limits::burst_pages`
//! victims to staging with the faults' CPUs asleep, lets them go on, and
//! compresses the burst while they run. A fault that arrives during a burst
//! waits for it too (`wake::ReclaimSignal::bursting`). Bursts stop while
//! `BACKLOG_BURSTS` bursts wait to be compressed; faults that wait with the
//! budget full of staged pages wait for compression. With the `fault_cost`
//! bench this took the MOVE from 7-8 µs to 2.3 µs a page, and the faults'
//! own signal delivery from 5.5 to 3.8 µs (fewer interrupts on their CPU).
//!
//! When the program does not fault (resident memory unchanged and no kick
//! for `PROGRAM_IDLE_AFTER`), a round brings resident memory from above the
//! high watermark down to the low one, as a budget lowered or pages made
//! resident by the API need.
//!
//! Why faulting threads drop clean pages themselves (with clean copies
//! kept): a clean page needs no compression, and from the faulting thread
//! the flush is local while the reclaimer sleeps.
//!
//! **A second compressor.** Compression is most of the reclaimer's CPU, and
//! while faults wait for room the program's CPUs are idle: on a machine
//! with two CPUs a large batch of staged pages is shared with a second
//! thread (`reclaim/helper.rs`), inside the reclaimer's critical section.
//! GNU sort at a fifth of its peak went from 39-43 s to 29-33 s with it.
//!
//! With a tier below RAM and a pool cap, it also writes the oldest
//! compressed pages back to the tier (`reclaim/writeback.rs`).
//!
//! The thread blocks asynchronous signals (see `threads::spawn_blocking_signals`)
//! and reaches region memory only through ioctls; should it fault on region
//! memory all the same (a program whose allocator lies in regions without
//! the preload library), the fault resolves on it without waiting on
//! itself (the argument at the top of `fault.rs`).

use crate::aging::{Aging, Standing};
use crate::cold::{Cold, Tokens};
use crate::error::RegionError;
use crate::evict::{self, Evict, Trigger};
use crate::file_pages::FilePages;
use crate::page::Tag;
use crate::queues::Record;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::table;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use zpage_store::Worker;

mod compaction;
mod eager;
mod helper;
#[cfg(test)]
pub(crate) mod hook;
pub(crate) mod lock;
mod vfork;
pub(crate) mod wake;
mod writeback;

pub use eager::compress_now;

/// Where a record stands, looked up in its region.
fn standing(record: Record) -> Standing {
    table::with_region(record.region(), |core| {
        let Some(slot) = core.pages.get(record.page()) else {
            return Standing::Stale;
        };
        if !record.is_generation(slot.aging.gen.load(Ordering::Acquire)) {
            return Standing::Stale;
        }
        let s = slot.load();
        match s.tag() {
            Tag::Resident if s.pins() == 0 => Standing::Evictable,
            // A page another thread holds for a moment (a first write lifting
            // the protection, a fault evicting it) may be resident when it is
            // released: its record must stay, or it would never be evicted again.
            Tag::Resident | Tag::Restoring | Tag::Evicting => Standing::Busy,
            _ => Standing::Stale,
        }
    })
    .unwrap_or(Standing::Stale)
}

/// True if the record is a clean, unpinned resident page (a victim a
/// faulting thread can drop without compressing).
fn clean(record: Record) -> bool {
    table::with_region(record.region(), |core| {
        let s = core.pages[record.page()].load();
        s.tag() == Tag::Resident && s.clean() && s.pins() == 0 && !s.discarded()
    })
    .unwrap_or(false)
}

fn with_page_aging(
    record: Record,
    f: &mut dyn FnMut(&crate::aging::PageAging, &crate::counters::Counters),
) {
    table::with_region(record.region(), |core| {
        if let Some(slot) = core.pages.get(record.page()) {
            f(&slot.aging, &core.counters);
        }
    });
}

/// The reclaimer's private state.
pub struct Reclaimer {
    budget: Arc<Shared>,
    worker: Worker,
    aging: Aging,
    /// Staged pages in eviction order, with their slots.
    staged: VecDeque<(Record, usize)>,
    /// Pages compressed, oldest first: writeback candidates (kept only with
    /// a tier below RAM).
    compressed: VecDeque<Record>,
    writeback_tokens: Tokens,
    /// Cold recompression, when the budget has a cold codec.
    cold: Option<Cold>,
    /// When the tier's upkeep (garbage collection ahead of need) last ran.
    tier_upkeep: Instant,
    /// The process's file pages given back, when the budget asks for it.
    file_pages: Option<FilePages>,
    /// When the pool's fragmentation was last checked.
    compaction_check: Instant,
    /// The kick counter at the last look.
    last_kick: u32,
    /// Resident pages at the last look.
    last_resident: usize,
    /// When either last changed.
    last_activity: Instant,
    /// Attempts in a row that moved no page with the budget full.
    empty_attempts: u32,
    /// Set when pages could not leave only because the writeback's rate
    /// limit had no room: when it will have.
    writeback_resumes: Option<Instant>,
    /// The second compressor (started by [`Reclaimer::run`] on a machine
    /// with a second CPU).
    helper: Option<helper::Helper>,
}

/// Bursts stop while this many bursts' worth of moved pages wait to be
/// compressed: more would fill the budget with staged pages, and faults
/// would then wait for all of them; fewer leaves a second faulting thread
/// waiting on compression while the other CPU could run it.
const BACKLOG_BURSTS: usize = 4;

/// With no fault for this long the program counts as idle, and a round
/// (rather than bursts) brings resident memory to the low watermark. Two
/// looks a few microseconds apart can see the same resident count while
/// the program faults (a fault and a compression cancel out).
const PROGRAM_IDLE_AFTER: std::time::Duration = std::time::Duration::from_millis(2);

/// While pages cannot leave, the reclaimer looks again this often (or at a
/// kick): the pool drains as pages are restored, pins are released.
const STUCK_RETRY_NS: u64 = 20_000_000;

/// Consecutive attempts that moved nothing, with the budget full, before
/// the budget counts as stuck. One empty attempt proves little: the victim
/// list may be empty until the next refill, or its pages busy for a moment
/// (a fault restoring them); marking the budget stuck then would let faults
/// go over it and put the reclaimer to sleep while it could still work.
const EMPTY_ATTEMPTS_BEFORE_STUCK: u32 = 8;

/// How long the reclaimer sleeps while woken faults have room but have not
/// run yet: a fault that is over the limit again kicks it sooner.
const ROOM_TAKEN_WAIT_NS: u64 = 200_000;
impl std::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("queued", &self.aging.len())
            .field("staged", &self.staged.len())
            .finish()
    }
}

impl Reclaimer {
    pub fn new(budget: Arc<Shared>) -> Result<Self, RegionError> {
        let worker = budget.store().worker()?;
        let aging = Aging::new(
            budget.clock().policy(),
            budget.limits().budget_pages,
            budget.limits().staging_target,
        );
        Ok(Reclaimer {
            cold: Cold::new(&budget),
            file_pages: budget.file_pages_every().map(FilePages::every),
            writeback_tokens: Tokens::new(budget.writeback_pages_per_sec()),
            budget,
            worker,
            aging,
            staged: VecDeque::new(),
            compressed: VecDeque::new(),
            tier_upkeep: Instant::now(),
            compaction_check: Instant::now(),
            last_kick: 0,
            last_resident: 0,
            empty_attempts: 0,
            writeback_resumes: None,
            last_activity: Instant::now(),
            helper: None,
        })
    }

    /// Takes in what the fault path queued.
    fn drain(&mut self) {
        let budget = Arc::clone(&self.budget);
        let queues = budget.queues();
        if queues.take_records_lost() {
            self.rebuild();
        }
        let mut freed = Vec::new();
        while let Some(page_ref) = queues.pop_freed() {
            freed.push(page_ref);
        }
        budget.release_many(&mut freed);
        budget.staging().discard_pending(budget.resident());
        while let Some(record) = queues.pop_returned() {
            self.aging.retry_first(record);
        }
        // Discarded pages first: gone already (zapped), they leave as
        // holes at no cost; a page still mapped waits its turn again.
        while let Some(record) = queues.pop_discarded() {
            self.aging.retry_first(record);
        }
        let limits = budget.limits();
        self.aging
            .set_budget(limits.budget_pages, limits.staging_target);
        while let Some(record) = queues.pop_admitted() {
            let mut activations = 0;
            with_page_aging(record, &mut |aging, _| activations = aging.activations());
            self.aging.admit(record, activations);
        }
        self.aging
            .rebalance(budget.clock(), &mut standing, &mut with_page_aging);
        self.aging
            .prune(2 * budget.region_pages() + 1024, &mut standing);
    }

    /// A ring overflowed and records were lost: start the queues again from
    /// the pages themselves (every resident page, inactive, in page order).
    fn rebuild(&mut self) {
        let budget = Arc::clone(&self.budget);
        self.aging = Aging::new(
            budget.clock().policy(),
            budget.limits().budget_pages,
            budget.limits().staging_target,
        );
        budget.queues().clear_records();
        table::for_each(|core| {
            if !std::ptr::eq(&*core.budget, &*budget) {
                return;
            }
            for (page, slot) in core.touched_pages().iter().enumerate() {
                if slot.load().tag() == Tag::Resident {
                    let gen = slot.aging.gen.load(Ordering::Acquire);
                    self.aging
                        .admit(Record::new(core.id(), page, gen, false), 0);
                }
            }
        });
    }

    /// Queues the next clean candidates for faulting threads to drop.
    fn refill_victims(&mut self) {
        let budget = Arc::clone(&self.budget);
        if !budget.keeps_clean_copies() || budget.evictions().budget_paused() {
            return;
        }
        // A dirty page at the front needs compressing: the refill stops
        // there (a round takes it out when memory passes the high
        // watermark), so a refill costs nothing while the front is dirty.
        let taken = self.aging.take_front_while(
            budget.queues().victims().free_slots(),
            &mut standing,
            &mut clean,
        );
        for record in budget.queues().victims().put(taken).into_iter().rev() {
            self.aging.retry_first(record);
        }
        budget.queues().refilled();
    }

    /// Takes one page out; true if it left its region.
    fn take_out(&mut self, record: Record) -> Option<bool> {
        let outcome = table::with_region(record.region(), |core: &RegionCore| {
            evict::evict(core, record.page())
        })?;
        match outcome {
            Evict::Staged(slot) => {
                self.staged.push_back((record, slot));
                Some(true)
            }
            Evict::Dropped | Evict::Hole => Some(true),
            Evict::NoSlot => {
                self.aging.retry_first(record);
                // Make room in staging: compress the oldest staged pages.
                if self.compress_staged(0) == 0 {
                    self.budget
                        .staging()
                        .discard_pending(self.budget.resident());
                    return None;
                }
                Some(false)
            }
            Evict::Retry => {
                self.aging.retry_later(record);
                Some(false)
            }
            Evict::Stale => Some(false),
            Evict::Paused => {
                self.aging.retry_first(record);
                Some(false)
            }
        }
    }

    /// Compresses the oldest staged pages until at most `keep` remain;
    /// returns how many were stored. A large batch is shared with the
    /// second compressor (module `helper`).
    fn compress_staged(&mut self, keep: usize) -> usize {
        let mut done = 0;
        let batch = self.staged.len().saturating_sub(keep);
        if batch >= helper::SHARED_BATCH_MIN && self.helper.is_some() {
            done = self.compress_shared(batch);
        }
        while self.staged.len() > keep {
            if !self.may_compress_next() {
                break;
            }
            let Some((record, slot)) = self.staged.pop_front() else {
                break;
            };
            if self.compress_one(record, slot) {
                done += 1;
            }
        }
        self.budget
            .staging()
            .discard_pending(self.budget.resident());
        self.budget.signal_room();
        done
    }

    /// Shares the oldest `batch` staged pages with the second compressor;
    /// returns how many were stored. What neither thread started goes back
    /// to the front of the staged pages.
    fn compress_shared(&mut self, batch: usize) -> usize {
        let Some(helper) = &self.helper else {
            return 0;
        };
        helper.post(self.staged.drain(..batch));
        let mut done = 0;
        while self.may_compress_next() {
            let Some((record, slot)) = self.helper.as_ref().and_then(|h| h.take()) else {
                break;
            };
            if self.compress_one(record, slot) {
                done += 1;
            }
        }
        let Some((rest, stored)) = self.helper.as_ref().map(|h| h.finish()) else {
            return done;
        };
        for staged in rest.into_iter().rev() {
            self.staged.push_front(staged);
        }
        done += stored.len();
        for record in stored {
            self.note_stored(record);
        }
        done
    }

    /// Whether the next staged page is compressed now: not when a burst
    /// would let waiting faults go on sooner. The pool grows as pages are
    /// compressed: with a memory max the budget shrinks with it.
    fn may_compress_next(&mut self) -> bool {
        self.budget.look_at_memory_max();
        self.budget.look_at_auto_budget();
        !self.burst_would_release_faults()
    }

    /// Compresses one staged page; true if it was stored.
    fn compress_one(&mut self, record: Record, slot: usize) -> bool {
        let worker = &mut self.worker;
        let stored = table::with_region(record.region(), |core| {
            evict::compress(core, record.page(), slot, worker, Trigger::Pressure)
        }) == Some(true);
        if stored {
            self.note_stored(record);
        }
        stored
    }

    /// The reclaimer's bookkeeping of a page stored (by either compressor):
    /// a cold candidate, and with a tier a writeback candidate.
    fn note_stored(&mut self, record: Record) {
        if let Some(cold) = &mut self.cold {
            cold.compressed(record, 2 * self.budget.region_pages() + 1024);
        }
        if self.budget.store().tier().is_some() {
            self.compressed.push_back(record);
            // Stale records (pages restored since) are dropped from
            // the front as it is used; this bounds the rest.
            let bound = 2 * self.budget.region_pages() + 1024;
            while self.compressed.len() > bound {
                self.compressed.pop_front();
            }
        }
    }

    /// Staged pages beyond the trial set: moved out, not yet compressed.
    /// (Pages shared with the second compressor and not yet stored count:
    /// they are staged until they are.)
    fn backlog(&self) -> usize {
        let shared = self.helper.as_ref().map_or(0, |h| h.pending());
        (self.staged.len() + shared).saturating_sub(self.budget.limits().staging_target)
    }

    /// Faults wait on the pages mapped in regions while the budget itself
    /// has room, and less than `BACKLOG_BURSTS` bursts wait to be
    /// compressed: moving a burst out would let them go on.
    fn burst_would_release_faults(&self) -> bool {
        let budget = &self.budget;
        budget.reclaim_signal().faults_waiting()
            && budget.resident().pages() < budget.limits().budget_pages
            && self.backlog() < BACKLOG_BURSTS * budget.limits().burst_pages
    }

    /// A burst: while faults wait (their threads run on no CPU, so a MOVE
    /// interrupts none of them: 1.2 µs a page instead of 10, the `move_cost`
    /// figures in the crate's README), moves up to `burst_pages` victims to staging and lets
    /// the faults go on, then compresses what is staged while they run.
    fn burst(&mut self) {
        self.drained(|this, budget| {
            if budget.evictions().budget_paused() {
                return;
            }
            let limits = budget.limits();
            if !this.pages_can_leave() {
                return;
            }
            budget.reclaim_signal().begin_burst();
            let moved = this.move_victims(limits.burst_pages, &|| {
                budget.resident().pages() < limits.budget_pages
            });
            budget.reclaim_signal().end_burst();
            this.note_progress(moved);
            budget.signal_room();
            this.refill_victims();
            this.write_back();
            this.compress_staged(limits.staging_target);
            this.compact_if_fragmented();
        });
    }

    /// Runs `work` holding the reclaim lock, once the queues the fault path
    /// and the event thread fill are drained: every piece of the
    /// reclaimer's work starts from them.
    fn drained<T>(&mut self, work: impl FnOnce(&mut Self, &Shared) -> T) -> T {
        let budget = Arc::clone(&self.budget);
        let _g = budget.lock_reclaim();
        self.drain();
        work(self, &budget)
    }

    /// Whether pages could leave now: not while the pool is at its cap and
    /// writing back to the tier (if there is one) does not bring it under.
    /// Nothing is then moved out only to be put back. When the writeback's
    /// rate limit is what holds the pool at its cap, pages leave again once
    /// it allows: the reclaimer waits for that and faults keep waiting for
    /// room (a rate limit bounds the tier's writes, not the budget). Else
    /// the budget is marked stuck: faults stop waiting and go over it.
    fn pages_can_leave(&mut self) -> bool {
        self.writeback_resumes = None;
        if self.budget.store().refusing_stores() {
            let rate_limited = self.write_back();
            if self.budget.store().refusing_stores() {
                match rate_limited {
                    Some(wait) => self.writeback_resumes = Some(Instant::now() + wait),
                    None => self.budget.reclaim_signal().set_stuck(true),
                }
                return false;
            }
        }
        true
    }

    /// After an attempt to move pages out that could not: waits (or until
    /// a kick) for the writeback's rate limit, or, with the budget stuck,
    /// looks again in a while rather than in a loop.
    fn wait_while_pages_cannot_leave(&mut self, kick: u32) {
        let signal = self.budget.reclaim_signal();
        if signal.stuck() {
            signal.sleep(kick, STUCK_RETRY_NS);
        } else if let Some(resumes) = self.writeback_resumes.take() {
            let wait = resumes.saturating_duration_since(Instant::now());
            signal.sleep(kick, (wait.as_nanos() as u64).clamp(1, STUCK_RETRY_NS));
        }
    }

    /// After moving pages out: none moved, several attempts in a row, while
    /// faults would wait means every resident page is pinned or held, or
    /// cannot move (stuck until one moves again).
    fn note_progress(&mut self, moved: usize) {
        let budget = &self.budget;
        if moved > 0 {
            self.empty_attempts = 0;
            budget.reclaim_signal().set_stuck(false);
        } else if budget.over_limit() {
            // Faults wait (the budget full, or the pages mapped at their
            // limit) and nothing could leave: without this, those faults
            // would each wait out their bound while the reclaimer tried
            // again in a loop.
            self.empty_attempts = self.empty_attempts.saturating_add(1);
            if self.empty_attempts >= EMPTY_ATTEMPTS_BEFORE_STUCK {
                budget.reclaim_signal().set_stuck(true);
            }
        }
    }

    /// Moves up to `count` victims out while `go_on` holds (and at most
    /// four tries a page: victims may be busy or gone); returns how many
    /// left their regions.
    fn move_victims(&mut self, count: usize, go_on: &dyn Fn() -> bool) -> usize {
        let mut moved = 0;
        for _ in 0..4 * count + 64 {
            if moved >= count || !go_on() {
                break;
            }
            let Some(record) = self.aging.next_victim(&mut standing, &mut with_page_aging) else {
                break;
            };
            match self.take_out(record) {
                Some(true) => moved += 1,
                Some(false) => {}
                None => break,
            }
        }
        moved
    }

    /// One round: brings resident memory down to the low watermark.
    pub fn round(&mut self) {
        self.drained(|this, budget| {
            if budget.evictions().budget_paused() {
                return;
            }
            let limits = budget.limits();
            let resident = budget.resident().pages();
            if resident > limits.low_pages && this.pages_can_leave() {
                let to_free = resident - limits.low_pages;
                // Move enough pages out that, after compressing the oldest
                // staged pages, `staging_target` remain on trial.
                let to_move = (to_free + limits.staging_target).saturating_sub(this.staged.len());
                let moved = this.move_victims(to_move, &|| true);
                this.note_progress(moved);
            }
            this.refill_victims();
            this.write_back();
            let resident = budget.resident().pages();
            let excess = resident.saturating_sub(limits.low_pages);
            let keep = this
                .staged
                .len()
                .saturating_sub(excess)
                .min(limits.staging_target);
            this.compress_staged(keep);
            this.compact_if_fragmented();
        });
    }

    /// Compresses staged pages until `keep` remain; returns how many.
    fn compress_backlog(&mut self, keep: usize) -> usize {
        self.drained(|this, _| {
            this.write_back();
            this.compress_staged(keep)
        })
    }

    /// The thread body.
    pub fn run(mut self) {
        helper::warm_thread_locals(&self.budget);
        self.helper = helper::Helper::start(&self.budget);
        loop {
            if self.budget.reclaim_signal().stopping() {
                break;
            }
            #[cfg(test)]
            crate::reclaim::hook::run_hooks(&self.budget);
            self.budget.look_at_memory_max();
            self.budget.look_at_auto_budget();
            if let Some(file_pages) = &mut self.file_pages {
                // Under pressure only, as a memory cgroup reclaims file
                // pages only at its limit: the budget (capped by a memory
                // max) nearly full.
                file_pages.look(self.budget.resident().pages() >= self.budget.limits().low_pages);
            }
            let kick = self.budget.reclaim_signal().kicks();
            vfork::serve_vfork_child(&self.budget);
            if self.budget.evictions().drop_stale_exec_hold() {
                // A process runs `exec` with strings in region memory: no
                // page leaves until the kernel has copied them.
                self.budget
                    .reclaim_signal()
                    .sleep(kick, vfork::EXEC_HOLD_LOOK_NS);
                continue;
            }
            let resident = self.budget.resident().pages();
            if self.budget.evictions().budget_paused() {
                // No eviction while a fork is prepared, but the queues keep
                // being drained: the prepare hook's restores fill them.
                self.drained(|_, _| ());
                self.sleep(kick);
                continue;
            }
            let limits = self.budget.limits();
            // Resident memory grows only by faults: unchanged, with no kick,
            // for `PROGRAM_IDLE_AFTER`, means the program is not faulting.
            if kick != self.last_kick || resident != self.last_resident {
                self.last_activity = Instant::now();
            }
            let faults_active = self.last_activity.elapsed() < PROGRAM_IDLE_AFTER;
            self.last_kick = kick;
            self.last_resident = resident;
            if self.budget.reclaim_signal().faults_waiting() && !self.budget.over_limit() {
                // The waiting faults were woken and have room, but their
                // threads have not run yet (on a busy machine that can take
                // a time slice). Another burst would only move pages out
                // that nobody waits for, and spinning here would take the
                // CPU they need: compress the backlog, else recompress a
                // batch of cold pages (a program that always faults would
                // otherwise never leave time for it), else sleep until a
                // fault kicks (it does before it waits again).
                self.budget.signal_room();
                if self.compress_backlog(limits.staging_target) == 0
                    && !self.cold_batch(crate::cold::BATCH)
                {
                    self.budget.reclaim_signal().sleep(kick, ROOM_TAKEN_WAIT_NS);
                }
                continue;
            }
            if self.budget.reclaim_signal().faults_waiting() {
                // Faults wait: a burst lets them go on; with the budget full
                // of staged pages, compressing them does.
                if self.burst_would_release_faults() {
                    self.burst();
                } else if self.compress_backlog(0) == 0 {
                    // Nothing staged, and the budget full of mapped pages.
                    self.round();
                }
                self.wait_while_pages_cannot_leave(kick);
                if let Some(cold) = &mut self.cold {
                    cold.train_if_wanted(&self.budget, &mut self.worker);
                }
                continue;
            }
            if faults_active && resident > limits.high_pages {
                // While the program faults, pages go out in bursts while
                // its faults wait (see `burst`); meanwhile, compress what is
                // staged (training the cold codec's dictionary when it is
                // wanted), then sleep.
                if self.compress_backlog(limits.staging_target) > 0 {
                    continue;
                }
                if let Some(cold) = &mut self.cold {
                    cold.train_if_wanted(&self.budget, &mut self.worker);
                }
                let seen = self.budget.reclaim_signal().kicks();
                self.last_kick = seen;
                self.sleep(seen);
                continue;
            }
            if resident > limits.high_pages
                || (resident > limits.low_pages && resident >= limits.budget_pages)
            {
                // A busy reclaimer does not recompress: pages with no quick
                // reuse already go out with the cold codec (once its
                // dictionary is trained), and those that kept the fast one
                // are the likeliest to come back soon.
                self.round();
                if let Some(cold) = &mut self.cold {
                    cold.train_if_wanted(&self.budget, &mut self.worker);
                }
                self.wait_while_pages_cannot_leave(kick);
                continue;
            }
            if self.budget.reclaim_signal().stuck() && resident < limits.budget_pages {
                // Back under the budget (pages freed or restored elsewhere).
                self.budget.reclaim_signal().set_stuck(false);
            }
            if let Some(tier) = self.budget.store().tier() {
                if self.tier_upkeep.elapsed() >= std::time::Duration::from_millis(100) {
                    self.tier_upkeep = Instant::now();
                    tier.maintain();
                }
            }
            if self.writeback_wanted() {
                let budget = Arc::clone(&self.budget);
                let _g = budget.lock_reclaim();
                self.write_back();
            }
            // Keep the queues drained and the victim queue full even when no
            // round is needed.
            let refill = self.budget.queues().refill_wanted();
            if refill || self.budget.queues().has_work() {
                self.drained(|this, _| {
                    if refill {
                        this.refill_victims();
                    }
                });
            }
            self.compact_if_fragmented();
            // Last, when nothing else is wanted: a batch of cold
            // recompression; straight back for more (the loop looks at
            // resident memory first) while more pages are cold.
            if !self.cold_batch(crate::cold::BATCH) {
                self.sleep(kick);
            }
        }
    }

    /// One batch of cold recompression, when the budget has a cold codec;
    /// true when more pages are cold.
    fn cold_batch(&mut self, pages: usize) -> bool {
        let Some(cold) = &mut self.cold else {
            return false;
        };
        let budget = Arc::clone(&self.budget);
        let _g = budget.lock_reclaim();
        cold.pass(&budget, &mut self.worker, pages)
    }

    /// Sleeps until kicked (or 2 ms); returns at once if a kick came after
    /// `seen` was read (see `wake::ReclaimSignal`).
    fn sleep(&self, seen: u32) {
        self.budget.reclaim_signal().sleep(seen, 2_000_000);
    }
}
