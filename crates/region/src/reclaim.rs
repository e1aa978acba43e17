//! Eviction, compression and the background reclaimer.
//!
//! Eviction takes a page with `UFFDIO_MOVE` into the staging area (a second
//! mapping registered with its own uffd, because MOVE's destination must be
//! registered). MOVE transfers the physical page under both page-table locks,
//! so a write racing with it lands in the page being moved, and any access
//! after it faults: no write can be lost. The page then waits in staging,
//! uncompressed; compression reads it there, stores it, and frees the slot
//! with `MADV_DONTNEED` (the staging uffd has no events, so that raises none).
//!
//! `EBUSY` from MOVE means the page is shared copy-on-write (after `fork()`):
//! the reclaimer makes it exclusive again with an atomic add of zero to one of
//! its words (a write fault whose store is the value already there, atomic
//! with any concurrent store) and retries later. A racing program access
//! cannot be lost because the page stays mapped and in our books as resident
//! throughout.
//!
//! The reclaimer runs when resident memory passes the high watermark (or when
//! a fault kicks it at the hard limit) and evicts down to the low watermark.

use crate::config::AgingPolicy;
use crate::inner::{AdmitRing, Inner};
use crate::state::*;
use crate::stats::Counters;
use crate::sys::{self, Errno};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use zpage_store::{CompressionTrigger, StoreOutcome, Worker};

/// Why a page is being compressed (Zircon's triggers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Eager,
    Pressure,
}

/// Result of trying to take one page out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evict {
    /// Now STAGED in this slot.
    Staged(usize),
    /// Not resident any more: its record is stale.
    Skipped,
    /// The page was absent: the program discarded it; it is EMPTY now.
    Hole,
    /// No staging slot free.
    NoSlot,
    /// Pinned, held by another thread for a moment, events pending, shared
    /// after fork, or another transient error: try later.
    Retry,
    /// Eviction is paused (fork, restore_all).
    Paused,
}

/// Moves one resident page into staging. Caller holds `reclaim_lock`.
pub fn evict_one(inner: &Inner, page: usize, hint: &mut usize) -> Evict {
    if !inner.begin_evict() {
        return Evict::Paused;
    }
    let r = evict_one_inner(inner, page, hint);
    inner.end_evict();
    r
}

fn evict_one_inner(inner: &Inner, page: usize, hint: &mut usize) -> Evict {
    let st = &inner.state[page];
    let s = st.load(Ordering::Acquire);
    match tag(s) {
        // Resident, but another thread holds it for a moment (a first write
        // lifting the write protection, an eviction by a fault): its record
        // must stay queued, or the page would never be evicted again.
        RESTORING | EVICTING => return Evict::Retry,
        RESIDENT if pins(s) != 0 => return Evict::Retry,
        RESIDENT => {}
        _ => return Evict::Skipped,
    }
    let Some(slot) = inner.alloc_slot(hint) else {
        return Evict::NoSlot;
    };
    if !inner.claim(page, s, with_tag(s, EVICTING)) {
        inner.free_slot(slot);
        return Evict::Retry;
    }
    let src = inner.page_addr(page);
    let dst = inner.slot_addr(slot);
    match sys::uffd_move(inner.sfd, dst, src, sys::PAGE, 0) {
        Ok(_) | Err((_, sys::PAGE)) => {
            let clock = inner.eviction_clock.fetch_add(1, Ordering::AcqRel);
            inner.evicted_at[page].store(clock, Ordering::Relaxed);
            inner.staged.fetch_add(1, Ordering::AcqRel);
            Counters::bump(&inner.counters.evictions);
            let claimed = with_tag(s, EVICTING);
            if !inner.claim(page, claimed, with_slot(s, STAGED, slot)) {
                // The program discarded the range while we moved it (DISCARD).
                inner.drop_staged(slot);
                st.store(empty(s), Ordering::Release);
                return Evict::Hole;
            }
            Evict::Staged(slot)
        }
        Err((Errno(libc::ENOENT), _)) => {
            // Resident in our books but no page there: the program discarded
            // it (MADV_DONTNEED). Its contents are zeros.
            inner.free_slot(slot);
            inner.resident.fetch_sub(1, Ordering::AcqRel);
            st.store(empty(s), Ordering::Release);
            inner.drop_stale_copy(page);
            Counters::bump(&inner.counters.holes);
            Evict::Hole
        }
        Err((Errno(libc::EBUSY), _)) => {
            inner.free_slot(slot);
            inner.publish(page, s);
            // Shared after fork: take exclusive ownership back; MOVE works next time.
            inner.region.touch_write(page);
            Counters::bump(&inner.counters.ebusy_fixes);
            Evict::Retry
        }
        Err(_) => {
            inner.free_slot(slot);
            inner.publish(page, s);
            Evict::Retry
        }
    }
}

/// Staging slots whose pages are stored, waiting to be freed together: one
/// `MADV_DONTNEED` (and one TLB flush) per run of adjacent slots.
#[derive(Debug, Default)]
pub struct Freed {
    slots: Vec<usize>,
}

impl Freed {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Frees the slots and accounts the memory as gone.
    pub fn flush(&mut self, inner: &Inner) {
        if self.slots.is_empty() {
            return;
        }
        self.slots.sort_unstable();
        let mut i = 0;
        while i < self.slots.len() {
            let mut j = i + 1;
            while j < self.slots.len() && self.slots[j] == self.slots[j - 1] + 1 {
                j += 1;
            }
            let _ = sys::discard(inner.slot_addr(self.slots[i]), (j - i) * sys::PAGE);
            i = j;
        }
        for &slot in &self.slots {
            inner.free_slot(slot);
        }
        let n = self.slots.len();
        inner.staged.fetch_sub(n, Ordering::AcqRel);
        inner.resident.fetch_sub(n, Ordering::AcqRel);
        self.slots.clear();
        inner.signal_room();
    }
}

/// Compresses the staged page `page` in `slot`. Caller holds `reclaim_lock`
/// and must `flush` `freed` soon. Returns false if the page left staging
/// meanwhile (a fault took it back).
pub fn compress_one(
    inner: &Inner,
    w: &mut Worker,
    page: usize,
    slot: usize,
    trigger: Trigger,
    freed: &mut Freed,
) -> bool {
    let st = &inner.state[page];
    let s = st.load(Ordering::Acquire);
    if tag(s) != STAGED || crate::state::slot(s) != slot {
        return false;
    }
    if !inner.claim(page, s, with_slot(s, COMPRESSING, slot)) {
        return false;
    }
    if s & CLEAN != 0 {
        // Unwritten since its restore: the store's entry is still exact.
        if !finish_stored(inner, page, s, with_tag(s, STORED) & !(COPY | CLEAN), freed) {
            return false;
        }
        Counters::bump(&inner.counters.clean_evictions);
        return true;
    }
    let data = inner.staging.page(slot);
    let trig = match trigger {
        Trigger::Eager => CompressionTrigger::Eager,
        Trigger::Pressure => CompressionTrigger::MemoryPressure,
    };
    match inner.store.store_with_trigger(w, page as u64, data, trig) {
        Ok(StoreOutcome::SameFilled | StoreOutcome::Compressed { .. } | StoreOutcome::Raw) => {
            if !finish_stored(inner, page, s, with_tag(s, STORED) & !COPY, freed) {
                return false;
            }
            Counters::bump(&inner.counters.compressions);
            Counters::bump(match trigger {
                Trigger::Eager => &inner.counters.eager_compressions,
                Trigger::Pressure => &inner.counters.pressure_compressions,
            });
            true
        }
        Ok(StoreOutcome::Rejected(_)) | Err(_) => {
            // Could not store (pool limit, codec error): put the page back
            // where it was (Zircon keeps failed pages resident too).
            Counters::bump(&inner.counters.compress_failures);
            inner.put_back(page, with_slot(s, COMPRESSING, slot));
            false
        }
    }
}

/// Ends the compression of `page` (held COMPRESSING in the slot of `s`):
/// publishes `stored` and queues the slot to be freed. If the program
/// discarded the page meanwhile, drops the staged copy and the store's now
/// stale entry instead, and returns false.
fn finish_stored(inner: &Inner, page: usize, s: u64, stored: u64, freed: &mut Freed) -> bool {
    let slot = crate::state::slot(s);
    if !inner.claim(page, with_slot(s, COMPRESSING, slot), stored) {
        inner.drop_staged(slot);
        inner.state[page].store(empty(s) | COPY, Ordering::Release);
        inner.drop_stale_copy(page);
        return false;
    }
    freed.slots.push(slot);
    true
}

/// What an attempt to stage one page achieved.
enum Staging {
    /// The page left the region (staged, or found discarded).
    Progress,
    /// Not now; its record is back in a queue (or dropped if stale).
    NoProgress,
    /// Eviction must stop this round (paused, or staging full and stuck).
    Stop,
}

/// The background reclaimer's private state.
pub struct Reclaimer {
    inner: Arc<Inner>,
    worker: Worker,
    /// Resident pages in admission order, as (page, gen) records.
    inactive: VecDeque<u64>,
    /// Pages whose refault distance showed them to be in use, activated once
    /// (demoted first: a cold page activated by a chance quick refault)...
    active_once: VecDeque<u64>,
    /// ... and activated again after a demotion (the hot set proper).
    active_repeat: VecDeque<u64>,
    /// Staged pages in eviction order: (page, slot).
    staged: VecDeque<(usize, usize)>,
    hint: usize,
}

impl std::fmt::Debug for Reclaimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reclaimer")
            .field("inactive", &self.inactive.len())
            .field("active_once", &self.active_once.len())
            .field("active_repeat", &self.active_repeat.len())
            .field("staged", &self.staged.len())
            .finish()
    }
}

impl Reclaimer {
    pub fn new(inner: Arc<Inner>, worker: Worker) -> Self {
        Reclaimer {
            inner,
            worker,
            inactive: VecDeque::new(),
            active_once: VecDeque::new(),
            active_repeat: VecDeque::new(),
            staged: VecDeque::new(),
            hint: 0,
        }
    }

    /// The record still stands for a resident page of that admission. A page
    /// another thread holds for a moment (RESTORING: a first write lifting
    /// the write protection; EVICTING: a fault evicting it) may be resident
    /// when it is released, so its record is kept: dropping it would leave
    /// the page resident with no record, never evicted again.
    /// (`evict_one` answers `Retry` for it, and the record goes back.)
    fn valid(&self, rec: u64) -> bool {
        let (page, gen, _) = AdmitRing::decode(rec);
        let s = self.inner.state[page].load(Ordering::Acquire);
        matches!(tag(s), RESIDENT | RESTORING | EVICTING)
            && (self.inner.gen[page].load(Ordering::Acquire) & 0x7fff_ffff) == gen
    }

    fn drain(&mut self) {
        let inner = Arc::clone(&self.inner);
        while let Some(rec) = inner.dirtied.pop() {
            inner.drop_stale_copy(AdmitRing::decode(rec).0);
        }
        while let Some(rec) = inner.returned.pop() {
            self.inactive.push_front(rec);
        }
        while let Some(rec) = inner.admits.pop() {
            let (page, _, activate) = AdmitRing::decode(rec);
            // A restored page's store entry is stale unless the page is
            // CLEAN (write tracking): free stale ones now.
            inner.drop_stale_copy(page);
            if activate && inner.aging == AgingPolicy::Refault {
                if inner.activations(page) >= 2 {
                    self.active_repeat.push_back(rec);
                } else {
                    self.active_once.push_back(rec);
                }
            } else {
                self.inactive.push_back(rec);
            }
        }
        while self.active_len() > inner.active_max {
            let Some(rec) = self.take_active() else { break };
            self.inactive.push_back(rec);
        }
        let fill = self.active_len().min(inner.active_max) as u64;
        let budget = inner.budget_pages as u64;
        let distance = budget - 3 * budget * fill / (4 * inner.active_max as u64);
        inner
            .activate_distance
            .store(distance.max(1) as u32, Ordering::Relaxed);
        // Drop stale records so the queues stay bounded by the page count.
        if self.inactive.len() > 2 * inner.pages + 1024 {
            let inactive = std::mem::take(&mut self.inactive);
            self.inactive = inactive.into_iter().filter(|&r| self.valid(r)).collect();
        }
    }

    fn active_len(&self) -> usize {
        self.active_once.len() + self.active_repeat.len()
    }

    /// Demotes the oldest page activated once; only when there is none, the
    /// oldest page activated repeatedly, which spends one activation.
    fn take_active(&mut self) -> Option<u64> {
        let inner = Arc::clone(&self.inner);
        loop {
            let (rec, repeat) = match self.active_once.pop_front() {
                Some(rec) => (rec, false),
                None => (self.active_repeat.pop_front()?, true),
            };
            if !self.valid(rec) {
                continue;
            }
            if repeat {
                inner.spend_activation(AdmitRing::decode(rec).0);
            }
            Counters::bump(&inner.counters.demotions);
            return Some(rec);
        }
    }

    /// Queues the next clean candidates for faulting threads to evict.
    fn refill_victims(&mut self) {
        let inner = Arc::clone(&self.inner);
        if !inner.track_writes || inner.paused() {
            return;
        }
        let want = inner.victims.free_slots();
        let mut recs = Vec::with_capacity(want);
        // A dirty page at the front needs compressing: the refill stops
        // there (a round takes it out when memory passes the high
        // watermark), so a refill costs nothing while the front is dirty.
        while recs.len() < want {
            let Some(rec) = self.inactive.pop_front() else {
                break;
            };
            if !self.valid(rec) {
                continue;
            }
            let s = inner.state[AdmitRing::decode(rec).0].load(Ordering::Acquire);
            if tag(s) == RESIDENT && s & CLEAN != 0 && pins(s) == 0 {
                recs.push(rec);
            } else {
                self.inactive.push_front(rec);
                break;
            }
        }
        for rec in inner.victims.put(recs).into_iter().rev() {
            self.inactive.push_front(rec);
        }
        // Faults may ask again once this refill has been used up; one that
        // stopped short (dirty pages at the front) is not asked for again
        // until a round has taken those out, so faults stop waking us for
        // nothing.
        if inner.victims.len() >= inner.victims.capacity() / 2 {
            inner.refill_wanted.store(false, Ordering::Release);
        }
    }

    /// Moves `page` into staging the reclaimer's way, keeping its record
    /// where it belongs when that cannot be done now.
    fn stage_page(&mut self, page: usize) -> Staging {
        let inner = Arc::clone(&self.inner);
        let record = || AdmitRing::encode(page, inner.gen[page].load(Ordering::Acquire), false);
        match evict_one(&inner, page, &mut self.hint) {
            Evict::Staged(slot) => {
                self.staged.push_back((page, slot));
                Staging::Progress
            }
            Evict::Hole => Staging::Progress,
            Evict::NoSlot => {
                // Put the victim back at the front and make room.
                self.inactive.push_front(record());
                if self.compress_staged(0) == 0 {
                    Staging::Stop
                } else {
                    Staging::NoProgress
                }
            }
            Evict::Retry => {
                self.inactive.push_back(record());
                Staging::NoProgress
            }
            Evict::Skipped => Staging::NoProgress,
            Evict::Paused => {
                self.inactive.push_front(record());
                Staging::Stop
            }
        }
    }

    fn next_victim(&mut self) -> Option<usize> {
        loop {
            let rec = match self.inactive.pop_front() {
                Some(r) => r,
                None => match self.inner.victims.take() {
                    Some(r) => r,
                    None => self.take_active()?,
                },
            };
            if self.valid(rec) {
                return Some(AdmitRing::decode(rec).0);
            }
        }
    }

    fn compress_staged(&mut self, keep_staged: usize) -> usize {
        let mut done = 0;
        let mut freed = Freed::default();
        while self.inner.staged.load(Ordering::Acquire) - freed.len() > keep_staged {
            let Some((page, slot)) = self.staged.pop_front() else {
                break;
            };
            if compress_one(
                &self.inner,
                &mut self.worker,
                page,
                slot,
                Trigger::Pressure,
                &mut freed,
            ) {
                done += 1;
            }
            if freed.len() >= 64 {
                freed.flush(&self.inner);
            }
        }
        freed.flush(&self.inner);
        done
    }

    /// One round: brings resident memory down to the low watermark.
    pub fn round(&mut self) {
        let inner = Arc::clone(&self.inner);
        let _g = inner.reclaim_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.drain();
        if inner.paused() {
            return;
        }
        let resident = inner.resident.load(Ordering::Acquire);
        if resident <= inner.low_pages {
            return;
        }
        let to_free = resident - inner.low_pages;
        let staged_now = inner.staged.load(Ordering::Acquire);
        let want_staged = inner.staging_target;
        // Move enough pages out that, after compressing `to_free` of the
        // oldest staged pages, `want_staged` remain on trial.
        let mut to_move = (to_free + want_staged).saturating_sub(staged_now);
        let mut attempts = 0usize;
        while to_move > 0 && attempts < 4 * (to_free + want_staged) + 64 {
            attempts += 1;
            let Some(page) = self.next_victim() else {
                break;
            };
            match self.stage_page(page) {
                Staging::Progress => to_move -= 1,
                Staging::NoProgress => {}
                Staging::Stop => break,
            }
        }
        self.refill_victims();
        let resident = inner.resident.load(Ordering::Acquire);
        let excess = resident.saturating_sub(inner.low_pages);
        let staged = inner.staged.load(Ordering::Acquire);
        self.compress_staged(staged.saturating_sub(excess).min(want_staged));
    }

    /// The thread body.
    pub fn run(mut self) {
        loop {
            if self.inner.stop.load(Ordering::Acquire) {
                break;
            }
            let kick = self.inner.kick.load(Ordering::Acquire);
            let resident = self.inner.resident.load(Ordering::Acquire);
            if self.inner.paused() {
                self.sleep(kick);
                continue;
            }
            if resident > self.inner.high_pages
                || (resident > self.inner.low_pages && self.kicked(kick))
            {
                self.round();
                continue;
            }
            // Keep the admission queue drained and the victim queue full
            // even when no round is needed.
            let refill = self.inner.refill_wanted.load(Ordering::Acquire);
            if refill || !self.inner.admits_empty() {
                let inner = Arc::clone(&self.inner);
                let _g = inner.reclaim_lock.lock().unwrap_or_else(|e| e.into_inner());
                self.drain();
                if refill {
                    self.refill_victims();
                }
            }
            self.sleep(kick);
        }
    }

    /// Sleeps until kicked (or 2 ms). `reclaimer_idle` is set before the
    /// counter is re-checked by the futex, so a kick either sees the flag
    /// and wakes us, or bumped the counter before our wait, which then
    /// returns at once.
    fn sleep(&self, seen: u32) {
        self.inner.reclaimer_idle.store(true, Ordering::SeqCst);
        sys::futex_wait(&self.inner.kick, seen, 2_000_000);
        self.inner.reclaimer_idle.store(false, Ordering::SeqCst);
    }

    fn kicked(&self, seen: u32) -> bool {
        // A kick counter that moved since the last wait means a fault hit the
        // hard limit or crossed the high watermark.
        let _ = seen;
        self.inner.resident.load(Ordering::Acquire) >= self.inner.budget_pages
    }
}
