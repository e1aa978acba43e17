//! The shared state of a region and the fault resolution path.
//!
//! [`Inner::resolve`] runs in three contexts: the SIGBUS handler of the
//! faulting thread (default mode), the handler thread (`FaultMode::HandlerThread`)
//! and ordinary API calls (`prefault`, `pin`, `advise_willneed`). It is written
//! to be async-signal-safe in all of them: it allocates nothing, takes no lock
//! (only compare-and-swap on the page's state word and on a worker slot),
//! makes only system calls that are async-signal-safe (ioctl, madvise,
//! nanosleep, futex, sched_yield, clock_gettime), and never panics on a
//! reachable path (indices are checked by the caller against the region size).
//!
//! Waiting: a thread that finds the page owned by someone else (EVICTING,
//! COMPRESSING, RESTORING) yields and looks again. The owner is always another
//! thread that is not blocked on us: the reclaimer never touches region memory,
//! and a restoring thread holds nothing another thread waits for.

use crate::config::{AgingPolicy, FaultMode};
use crate::slots::WorkerSlots;
use crate::state::*;
use crate::stats::Counters;
use crate::sys::{self, Errno, Mapping};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

static ZERO_PAGE: [u8; sys::PAGE] = [0; sys::PAGE];

const WAS_ACTIVE: u8 = 1;
const QUICK_ONCE: u8 = 2;
/// Bits 2-7 of the history byte count activations (saturating at 63): a page
/// activated more than once is protected over one activated once, and loses
/// one activation each time it is demoted.
pub const ACT_ONE: u8 = 4;

/// Where a restore request comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    /// The faulting thread's SIGBUS handler.
    Signal,
    /// The handler thread: the faulting thread sleeps in the kernel until woken.
    Thread,
    /// An API call (prefault / pin / willneed): nobody is waiting.
    Api,
}

/// Bounded multi-producer single-consumer ring of "page became resident"
/// records, from the fault path to the reclaimer. A record is
/// `(page + 1) | gen << 32 | activate << 63`; 0 means empty.
#[derive(Debug)]
pub struct AdmitRing {
    slots: Box<[AtomicU64]>,
    tail: AtomicUsize,
    head: AtomicUsize,
}

impl AdmitRing {
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.next_power_of_two().max(1024);
        AdmitRing {
            slots: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
        }
    }

    pub fn encode(page: usize, gen: u32, activate: bool) -> u64 {
        (page as u64 + 1) | ((gen as u64 & 0x7fff_ffff) << 32) | ((activate as u64) << 63)
    }

    pub fn decode(v: u64) -> (usize, u32, bool) {
        (
            ((v & 0xffff_ffff) - 1) as usize,
            ((v >> 32) & 0x7fff_ffff) as u32,
            v >> 63 == 1,
        )
    }

    /// Producer side (async-signal-safe). Waits only if the ring is full,
    /// which needs the consumer to fall a whole ring behind.
    pub fn push(&self, v: u64) {
        let pos = self.tail.fetch_add(1, Ordering::AcqRel);
        let slot = &self.slots[pos & (self.slots.len() - 1)];
        while slot
            .compare_exchange(0, v, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            sys::yield_now();
        }
    }

    /// True if nothing is waiting at the consumer's position.
    pub fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        self.slots[head & (self.slots.len() - 1)].load(Ordering::Acquire) == 0
    }

    /// Consumer side (the reclaimer only).
    pub fn pop(&self) -> Option<u64> {
        let head = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[head & (self.slots.len() - 1)];
        let v = slot.load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        slot.store(0, Ordering::Release);
        self.head.store(head + 1, Ordering::Relaxed);
        Some(v)
    }
}

/// Clean eviction candidates, oldest first, that faulting threads evict
/// themselves (MOVE out, free the slot: no compression, no allocation). A
/// page MOVEd out by the thread that runs the region on this CPU costs a
/// local TLB flush; the same MOVE from the reclaimer on the other CPU costs
/// this CPU an interrupt (a TLB shootdown, several microseconds in this VM)
/// per page, because scattered pages cannot be moved in one batch. Records
/// are `AdmitRing::encode(page, gen, false)`. The reclaimer (under its lock)
/// appends; any thread takes from the front with one compare-and-swap.
#[derive(Debug)]
pub struct VictimQueue {
    slots: Box<[AtomicU64]>,
    /// Next position to take.
    head: AtomicUsize,
    /// Next position to fill.
    tail: AtomicUsize,
}

impl VictimQueue {
    pub fn new(capacity: usize) -> Self {
        VictimQueue {
            slots: (0..capacity.max(1)).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Takes the oldest candidate (async-signal-safe).
    pub fn take(&self) -> Option<u64> {
        let n = self.slots.len();
        loop {
            let head = self.head.load(Ordering::Acquire);
            if head == self.tail.load(Ordering::Acquire) {
                return None;
            }
            if self
                .head
                .compare_exchange(
                    head,
                    head.wrapping_add(1),
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // The producer wrote the slot before publishing the tail, and
                // does not reuse it until we have emptied it.
                let v = self.slots[head % n].swap(0, Ordering::AcqRel);
                if v != 0 {
                    return Some(v);
                }
            }
        }
    }

    /// Appends candidates (reclaimer only); returns those that did not fit,
    /// in their order.
    pub fn put(&self, recs: Vec<u64>) -> Vec<u64> {
        let n = self.slots.len();
        let mut tail = self.tail.load(Ordering::Relaxed);
        for (i, &v) in recs.iter().enumerate() {
            let slot = &self.slots[tail % n];
            // Full, or a taker claimed this slot and has not emptied it yet.
            if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= n
                || slot.load(Ordering::Acquire) != 0
            {
                return recs[i..].to_vec();
            }
            slot.store(v, Ordering::Release);
            tail = tail.wrapping_add(1);
            self.tail.store(tail, Ordering::Release);
        }
        Vec::new()
    }

    pub fn len(&self) -> usize {
        self.tail
            .load(Ordering::Acquire)
            .wrapping_sub(self.head.load(Ordering::Acquire))
            .min(self.slots.len())
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn free_slots(&self) -> usize {
        self.capacity() - self.len()
    }
}

/// Everything the fault path, the reclaimer and the API share.
#[derive(Debug)]
pub struct Inner {
    pub region: Mapping,
    pub staging: Mapping,
    pub pages: usize,
    pub staging_pages: usize,
    /// The region's uffd (faults, MOVE back in).
    pub uffd: i32,
    /// The staging area's uffd (MOVE out; no events, so discarding staging
    /// slots with MADV_DONTNEED raises nothing).
    pub sfd: i32,
    pub mode: FaultMode,
    pub aging: AgingPolicy,
    pub budget_pages: usize,
    pub high_pages: usize,
    pub low_pages: usize,
    pub staging_target: usize,
    pub active_max: usize,
    /// A refault this many evictions or fewer after the page's eviction is
    /// quick. The reclaimer sets it from how full the active queues are:
    /// the whole budget while they are empty (learn a new hot set fast, a
    /// wrong activation displaces nothing), down to a quarter of it when
    /// full (a wrong activation then costs a hot page its place).
    pub activate_distance: AtomicU32,
    pub state: Box<[AtomicU64]>,
    pub gen: Box<[AtomicU32]>,
    pub evicted_at: Box<[AtomicU32]>,
    /// Per-page refault history: WAS_ACTIVE, QUICK_ONCE.
    pub history: Box<[AtomicU8]>,
    pub eviction_clock: AtomicU32,
    pub slot_bits: Box<[AtomicU64]>,
    pub store: zpage_store::Store,
    pub workers: WorkerSlots,
    pub admits: AdmitRing,
    /// Clean candidates that faulting threads evict themselves.
    pub victims: VictimQueue,
    /// A fault found the victim queue half empty and kicked the reclaimer;
    /// cleared once a refill has filled it at least halfway (one kick per
    /// refill, none while dirty pages block the refill).
    pub refill_wanted: AtomicBool,
    /// Candidates a fault took but could not evict (no longer clean): back
    /// to the reclaimer's queue.
    pub returned: AdmitRing,
    /// Pages whose first write after a restore made the store's copy stale
    /// (the reclaimer frees those copies).
    pub dirtied: AdmitRing,
    /// Restore pages write-protected and track their first write (CLEAN).
    pub track_writes: bool,
    pub resident: AtomicUsize,
    pub staged: AtomicUsize,
    pub pinned: AtomicUsize,
    pub kick: AtomicU32,
    /// The reclaimer is (about to be) asleep on `kick`.
    pub reclaimer_idle: AtomicBool,
    /// Futex word the reclaimer bumps when it made room under the budget.
    pub room: AtomicU32,
    /// Faults waiting on `room`.
    pub room_waiters: AtomicU32,
    pub stop: AtomicBool,
    pub counters: Counters,
    pub owner_pid: i32,
    pub lost: AtomicBool,
    pub unmapped: Mutex<Option<String>>,
    pub is_unmapped: AtomicBool,
    /// Serialises everything that stores into or removes from `keep`, and
    /// staging slot allocation (the reclaimer, advise_cold, the fork hook).
    pub reclaim_lock: Mutex<()>,
    /// Odd while the event thread is reading and applying events.
    pub event_seq: AtomicU64,
    /// Installs (COPY / ZEROPAGE / MOVE into the region) in flight. With
    /// `event_seq` this forms a Dekker pair: an install starts only while no
    /// event is being read, and the event thread reads only when no install is
    /// in flight. So no page can be installed from our (now stale) copy after a
    /// program-side MADV_DONTNEED has been acknowledged and before its pages
    /// are marked discarded.
    pub installs: AtomicUsize,
    /// Set by the fork prepare hook: no eviction until the parent hook clears it.
    pub fork_pause: AtomicBool,
    /// Set by `restore_all`: no eviction until `resume_eviction`.
    pub hold: AtomicBool,
    /// Evictions in flight; with `paused()` a Dekker pair, so whoever sets a
    /// pause and then waits for this to reach zero knows no eviction can
    /// start after it (without taking a lock: `restore_all` may run in a
    /// signal handler).
    pub evicting: AtomicUsize,
}

impl Inner {
    /// Eviction is paused (fork in progress, or `restore_all`).
    pub fn paused(&self) -> bool {
        self.fork_pause.load(Ordering::SeqCst) || self.hold.load(Ordering::SeqCst)
    }

    /// Announces an eviction; false (and nothing announced) if paused.
    pub fn begin_evict(&self) -> bool {
        self.evicting.fetch_add(1, Ordering::SeqCst);
        if self.paused() {
            self.evicting.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub fn end_evict(&self) {
        self.evicting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sets a pause flag and waits until no eviction is in flight.
    pub fn pause(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        while self.evicting.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    pub fn admits_empty(&self) -> bool {
        self.admits.is_empty()
    }

    pub fn page_addr(&self, page: usize) -> usize {
        self.region.addr(page)
    }

    pub fn slot_addr(&self, slot: usize) -> usize {
        self.staging.addr(slot)
    }

    /// Takes a free staging slot (callers hold `reclaim_lock`).
    pub fn alloc_slot(&self, hint: &mut usize) -> Option<usize> {
        let words = self.slot_bits.len();
        for i in 0..words {
            let w = (*hint + i) % words;
            let cur = self.slot_bits[w].load(Ordering::Acquire);
            if cur == u64::MAX {
                continue;
            }
            let bit = (!cur).trailing_zeros() as usize;
            let slot = w * 64 + bit;
            if slot >= self.staging_pages {
                continue;
            }
            let prev = self.slot_bits[w].fetch_or(1 << bit, Ordering::AcqRel);
            if prev & (1 << bit) == 0 {
                *hint = w;
                return Some(slot);
            }
        }
        None
    }

    /// Gives a staging slot back (any thread, async-signal-safe).
    pub fn free_slot(&self, slot: usize) {
        self.slot_bits[slot / 64].fetch_and(!(1u64 << (slot % 64)), Ordering::AcqRel);
    }

    fn wait_events_applied(&self) {
        while self.event_seq.load(Ordering::SeqCst) & 1 == 1 {
            sys::yield_now();
        }
    }

    /// Runs one install ioctl under the install/event protocol, retrying
    /// `EAGAIN` (events pending) after letting the event thread through.
    fn install(&self, mut f: impl FnMut() -> Result<(), Errno>) -> Result<(), Errno> {
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
                Err(Errno(libc::EAGAIN)) => {
                    sys::yield_now();
                }
                r => return r,
            }
        }
    }

    /// Before a fault makes one more page resident. At the high watermark
    /// the faulting thread evicts clean pages itself (see [`VictimQueue`]):
    /// a read-mostly program keeps its budget without the reclaimer moving
    /// pages, and the TLB flush is local while the reclaimer sleeps. (Leaving
    /// the work to the reclaimer whenever it is busy measured slower on the
    /// bench's 2 GiB replay: 76k against 91k random reads/s.) Only at the
    /// hard limit does a fault wait for the reclaimer.
    fn make_room(&self) {
        if self.paused() {
            return;
        }
        let mut tries = 0;
        while tries < 4 && self.resident.load(Ordering::Acquire) >= self.high_pages {
            let Some(rec) = self.victims.take() else {
                break;
            };
            tries += 1;
            if !self.evict_clean_now(rec) {
                self.returned.push(rec);
            }
        }
        if self.track_writes
            && self.victims.len() < self.victims.capacity() / 2
            && !self.refill_wanted.swap(true, Ordering::AcqRel)
        {
            self.kick_reclaimer();
        }
        self.throttle();
    }

    /// Over the hard limit: wake the reclaimer and sleep until it made room
    /// (bounded at 100 ms, after which the fault proceeds over budget rather
    /// than stall forever, e.g. when everything resident is pinned).
    fn throttle(&self) {
        if self.resident.load(Ordering::Acquire) < self.budget_pages || self.paused() {
            return;
        }
        let t0 = sys::now_ns();
        Counters::bump(&self.counters.throttles);
        self.room_waiters.fetch_add(1, Ordering::SeqCst);
        while self.resident.load(Ordering::SeqCst) >= self.budget_pages
            && !self.stop.load(Ordering::Relaxed)
            && sys::now_ns() - t0 < 100_000_000
        {
            let seq = self.room.load(Ordering::SeqCst);
            if self.resident.load(Ordering::SeqCst) < self.budget_pages {
                break;
            }
            self.kick_reclaimer();
            sys::futex_wait(&self.room, seq, 1_000_000);
        }
        self.room_waiters.fetch_sub(1, Ordering::SeqCst);
        self.counters
            .throttle_ns
            .fetch_add(sys::now_ns() - t0, Ordering::Relaxed);
    }

    /// Evicts a CLEAN candidate on the calling thread: MOVE it out (so a
    /// racing access faults and waits, and nothing can write it meanwhile:
    /// it is write-protected), drop the moved page (the store's entry is
    /// exact), done. Async-signal-safe. False if the page is not a clean,
    /// unpinned resident page of this admission any more.
    fn evict_clean_now(&self, rec: u64) -> bool {
        if !self.begin_evict() {
            return false;
        }
        let evicted = self.evict_clean_now_unpaused(rec);
        self.end_evict();
        evicted
    }

    fn evict_clean_now_unpaused(&self, rec: u64) -> bool {
        let (page, gen, _) = AdmitRing::decode(rec);
        let st = &self.state[page];
        let s = st.load(Ordering::Acquire);
        if tag(s) != RESIDENT
            || s & (CLEAN | COPY) != (CLEAN | COPY)
            || s & DISCARD != 0
            || pins(s) != 0
            || self.gen[page].load(Ordering::Acquire) & 0x7fff_ffff != gen
        {
            return false;
        }
        let mut hint = page / 64;
        let Some(slot) = self.alloc_slot(&mut hint) else {
            return false;
        };
        let claimed = with_tag(s, EVICTING);
        if !self.claim(page, s, claimed) {
            self.free_slot(slot);
            return false;
        }
        let src = self.page_addr(page);
        let dst = self.slot_addr(slot);
        match sys::uffd_move(self.sfd, dst, src, sys::PAGE, 0) {
            Ok(_) | Err((_, sys::PAGE)) => {
                let clock = self.eviction_clock.fetch_add(1, Ordering::AcqRel);
                self.evicted_at[page].store(clock, Ordering::Relaxed);
                let _ = sys::discard(dst, sys::PAGE);
                self.free_slot(slot);
                if !self.claim(page, claimed, with_tag(s, STORED) & !(COPY | CLEAN)) {
                    // The program discarded the range meanwhile: zeros; the
                    // entry is stale (the reclaimer frees it).
                    st.store(empty(s) | COPY, Ordering::Release);
                    self.dirtied.push(AdmitRing::encode(page, 0, false));
                }
                self.resident.fetch_sub(1, Ordering::AcqRel);
                Counters::bump(&self.counters.evictions);
                Counters::bump(&self.counters.clean_evictions);
                Counters::bump(&self.counters.sync_evictions);
                true
            }
            Err((Errno(libc::ENOENT), _)) => {
                // Discarded by the program: zeros; the entry is stale.
                self.free_slot(slot);
                st.store(empty(s) | COPY, Ordering::Release);
                self.dirtied.push(AdmitRing::encode(page, 0, false));
                self.resident.fetch_sub(1, Ordering::AcqRel);
                Counters::bump(&self.counters.holes);
                true
            }
            Err(_) => {
                self.free_slot(slot);
                self.publish(page, s);
                false
            }
        }
    }

    /// Reclaimer side: wake throttled faults if there is room now.
    pub fn signal_room(&self) {
        if self.room_waiters.load(Ordering::SeqCst) != 0
            && self.resident.load(Ordering::SeqCst) < self.budget_pages
        {
            self.room.fetch_add(1, Ordering::SeqCst);
            sys::futex_wake_all(&self.room);
        }
    }

    /// Wakes the reclaimer. The futex syscall is made only when it sleeps
    /// (`reclaimer_idle`): the counter bump alone makes its next wait return
    /// at once, so a busy reclaimer costs the fault path no system call.
    pub fn kick_reclaimer(&self) {
        self.kick.fetch_add(1, Ordering::SeqCst);
        if self.reclaimer_idle.load(Ordering::SeqCst) {
            sys::futex_wake(&self.kick);
        }
    }

    fn admitted(&self, page: usize, activate: bool) {
        let g = self.gen[page]
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        self.admits.push(AdmitRing::encode(page, g, activate));
        if self.resident.load(Ordering::Relaxed) > self.high_pages {
            self.kick_reclaimer();
        }
    }

    /// The refault-distance test, with a second-chance filter: a quick
    /// refault activates a page that was active before or that refaulted
    /// quickly last time too; a first quick refault only marks it. A cold
    /// page that happens to come back soon once does not displace the hot set
    /// (without access bits the active queue cannot tell its members apart,
    /// so every wrong activation costs a hot page its place).
    fn refault_activates(&self, page: usize) -> bool {
        let now = self.eviction_clock.load(Ordering::Relaxed);
        let then = self.evicted_at[page].load(Ordering::Relaxed);
        let quick = now.wrapping_sub(then) <= self.activate_distance.load(Ordering::Relaxed);
        let h = &self.history[page];
        let prev = h.load(Ordering::Relaxed);
        let activate = quick && prev & (WAS_ACTIVE | QUICK_ONCE) != 0;
        let count = prev & !(WAS_ACTIVE | QUICK_ONCE);
        let next = match (quick, activate) {
            (true, true) => WAS_ACTIVE | count.saturating_add(ACT_ONE).min(0xfc),
            (true, false) => prev | QUICK_ONCE,
            // A slow refault: forget the quick one, spend one activation.
            (false, _) => {
                let c = count.saturating_sub(ACT_ONE);
                if c == 0 {
                    0
                } else {
                    c | WAS_ACTIVE
                }
            }
        };
        h.store(next, Ordering::Relaxed);
        if activate {
            Counters::bump(&self.counters.activations);
        }
        activate
    }

    /// Maps zeros at `page`. `Ok(true)` if we mapped them, `Ok(false)` if the
    /// page was already present.
    fn fill_zero(&self, page: usize, write: bool) -> Result<bool, Errno> {
        let addr = self.page_addr(page);
        let r = self.install(|| {
            if write {
                sys::uffd_copy(self.uffd, addr, ZERO_PAGE.as_ptr(), 0)
            } else {
                sys::uffd_zeropage(self.uffd, addr, 0)
            }
        });
        match r {
            Ok(()) => Ok(true),
            Err(Errno(libc::EEXIST)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Makes the page at index `page` present with its right contents.
    /// Returns `Err` only when the mapping is gone (munmap in flight, process
    /// exiting); the access then fails the way it would without zpage.
    /// `wp`: the fault is a write to a present, write-protected page (or, for
    /// `Ctx::Api`, the caller needs the page writable by the kernel).
    pub fn resolve(&self, page: usize, write: bool, wp: bool, ctx: Ctx) -> Result<(), Errno> {
        let t0 = sys::now_ns();
        let r = self.resolve_inner(page, write, wp, ctx);
        if ctx != Ctx::Api {
            Counters::bump(&self.counters.faults);
            self.counters.record_fault_ns(sys::now_ns() - t0);
        }
        r
    }

    fn resolve_inner(&self, page: usize, write: bool, mut wp: bool, ctx: Ctx) -> Result<(), Errno> {
        let st = &self.state[page];
        let mut throttled = ctx == Ctx::Api;
        loop {
            let s = st.load(Ordering::Acquire);
            match tag(s) {
                RESIDENT if wp && s & CLEAN != 0 => {
                    // First write since the restore: lift the protection; the
                    // store's copy is stale from now on.
                    if !self.claim(page, s, with_tag(s, RESTORING)) {
                        continue;
                    }
                    let addr = self.page_addr(page);
                    match self.install(|| sys::uffd_writeprotect(self.uffd, addr, false)) {
                        Ok(()) => {
                            self.publish(page, with_tag(s, RESIDENT) & !CLEAN);
                            Counters::bump(&self.counters.first_writes);
                            self.dirtied.push(AdmitRing::encode(page, 0, false));
                        }
                        Err(e) => {
                            self.publish(page, with_tag(s, RESIDENT));
                            return Err(e);
                        }
                    }
                    if ctx != Ctx::Api {
                        return Ok(());
                    }
                    // An API caller also needs the page present: look again.
                    wp = false;
                }
                EMPTY | RESIDENT => {
                    if tag(s) == EMPTY && !throttled {
                        self.make_room();
                        throttled = true;
                        continue;
                    }
                    // Claim, so the reclaimer cannot move the page out between
                    // our look and our fill.
                    if !self.claim(page, s, with_tag(s, RESTORING)) {
                        continue;
                    }
                    let filled = match self.fill_zero(page, write) {
                        Ok(f) => f,
                        Err(e) => {
                            self.publish(page, with_tag(s, tag(s)));
                            return Err(e);
                        }
                    };
                    // Zeros are right for a page we never held (EMPTY) and for
                    // one the program discarded (RESIDENT in our books, absent);
                    // after a fill no discard is pending. A page that was
                    // present keeps its flags (a pending DISCARD included).
                    if filled {
                        self.publish(page, with_tag(s, RESIDENT) & !(DISCARD | CLEAN));
                    } else {
                        self.publish(page, with_tag(s, tag(s)));
                    }
                    if filled {
                        Counters::bump(&self.counters.zero_fills);
                    }
                    if tag(s) == EMPTY {
                        self.resident.fetch_add(1, Ordering::AcqRel);
                        self.admitted(page, false);
                    }
                    if ctx == Ctx::Thread && !filled {
                        let _ = sys::uffd_wake(self.uffd, self.page_addr(page), sys::PAGE);
                    }
                    return Ok(());
                }
                STAGED => {
                    if !self.claim(page, s, with_slot(s, RESTORING, slot(s))) {
                        continue;
                    }
                    match self.restore_staged(page, s) {
                        Err(Errno(libc::ECANCELED)) => continue,
                        r => return r,
                    }
                }
                STORED => {
                    if !throttled {
                        self.make_room();
                        throttled = true;
                        continue;
                    }
                    if !self.claim(page, s, with_tag(s, RESTORING)) {
                        continue;
                    }
                    match self.restore_stored(page, s) {
                        Err(Errno(libc::ECANCELED)) => continue,
                        r => return r,
                    }
                }
                _ => {
                    // EVICTING / COMPRESSING / RESTORING: owned by another thread.
                    sys::yield_now();
                }
            }
        }
    }

    /// Moves the page's state word from `seen` to `next` if no other thread
    /// changed it since `seen` was read: how every thread takes a page for
    /// itself (and hands it on) without a lock.
    pub fn claim(&self, page: usize, seen: u64, next: u64) -> bool {
        self.state[page]
            .compare_exchange(seen, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Publishes the end of a claim: `new`, plus a DISCARD the event thread
    /// may have set meanwhile (the program's zap of this page is then still
    /// pending, and whatever is installed now must not outlive it).
    pub fn publish(&self, page: usize, new: u64) {
        let st = &self.state[page];
        let mut cur = st.load(Ordering::Acquire);
        loop {
            match st.compare_exchange(
                cur,
                new | (cur & DISCARD),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// The install closure's check: has the event thread discarded this page
    /// while we held it?
    fn discarded(&self, page: usize) -> bool {
        self.state[page].load(Ordering::Acquire) & DISCARD != 0
    }

    /// Drops a staged page's data (its range was discarded by the program).
    pub fn drop_staged(&self, slot: usize) {
        let _ = sys::discard(self.slot_addr(slot), sys::PAGE);
        self.free_slot(slot);
        self.staged.fetch_sub(1, Ordering::AcqRel);
        self.resident.fetch_sub(1, Ordering::AcqRel);
        Counters::bump(&self.counters.discarded);
    }

    fn restore_staged(&self, page: usize, s: u64) -> Result<(), Errno> {
        let st = &self.state[page];
        let slot = slot(s);
        let dst = self.page_addr(page);
        let src = self.slot_addr(slot);
        let r = self.install(|| {
            if self.discarded(page) {
                return Err(Errno(libc::ECANCELED));
            }
            match sys::uffd_move(self.uffd, dst, src, sys::PAGE, 0) {
                Ok(_) => Ok(()),
                Err((_, n)) if n == sys::PAGE => Ok(()),
                Err((e, _)) => Err(e),
            }
        });
        match r {
            Ok(()) => {}
            Err(Errno(libc::ECANCELED)) => {
                self.drop_staged(slot);
                st.store(empty(s), Ordering::Release);
                return Err(Errno(libc::ECANCELED));
            }
            Err(Errno(libc::EBUSY)) => {
                // The staged page is shared with a child (fork): copy it
                // instead, then drop our copy.
                match self.copy_in(page, dst, src as *const u8, 0) {
                    Ok(()) => {
                        let _ = sys::discard(src, sys::PAGE);
                    }
                    Err(Errno(libc::ECANCELED)) => {
                        self.drop_staged(slot);
                        st.store(empty(s), Ordering::Release);
                        return Err(Errno(libc::ECANCELED));
                    }
                    Err(e) => {
                        self.publish(page, with_slot(s, STAGED, slot));
                        return Err(e);
                    }
                }
            }
            Err(Errno(libc::EEXIST)) => {
                sys::fatal("zpage: staged page's destination is already mapped; refusing to guess its contents\n")
            }
            Err(e) => {
                self.publish(page, with_slot(s, STAGED, slot));
                return Err(e);
            }
        }
        self.free_slot(slot);
        self.staged.fetch_sub(1, Ordering::AcqRel);
        let activate = self.refault_activates(page);
        // Installed before any discard event was read: a later zap empties
        // it, and the next fault fills zeros; so publishing RESIDENT is right
        // even if DISCARD was set meanwhile.
        // MOVE maps the page writable: its store copy (if any) is stale now.
        self.publish(page, with_tag(s, RESIDENT) & !CLEAN);
        Counters::bump(&self.counters.trial_hits);
        self.admitted(page, activate);
        Ok(())
    }

    /// Puts a page the reclaimer could not store back into the region.
    /// `s` is the state it holds (COMPRESSING with the slot).
    pub fn put_back(&self, page: usize, s: u64) {
        let st = &self.state[page];
        let slot = slot(s);
        let dst = self.page_addr(page);
        let src = self.slot_addr(slot);
        let r = self.install(|| {
            if self.discarded(page) {
                return Err(Errno(libc::ECANCELED));
            }
            match sys::uffd_move(self.uffd, dst, src, sys::PAGE, 0) {
                Ok(_) => Ok(()),
                Err((_, n)) if n == sys::PAGE => Ok(()),
                Err((Errno(libc::EBUSY), _)) => sys::uffd_copy(self.uffd, dst, src as *const u8, 0),
                Err((e, _)) => Err(e),
            }
        });
        match r {
            Ok(()) => {
                let _ = sys::discard(src, sys::PAGE);
                self.free_slot(slot);
                self.staged.fetch_sub(1, Ordering::AcqRel);
                self.publish(page, with_tag(s, RESIDENT) & !CLEAN);
            }
            Err(Errno(libc::ECANCELED)) => {
                self.drop_staged(slot);
                st.store(empty(s), Ordering::Release);
            }
            Err(_) => {
                // Leave it staged; a fault takes it back.
                self.publish(page, with_slot(s, STAGED, slot));
            }
        }
    }

    fn copy_in(&self, page: usize, dst: usize, src: *const u8, mode: u64) -> Result<(), Errno> {
        let r = self.install(|| {
            if self.discarded(page) {
                return Err(Errno(libc::ECANCELED));
            }
            sys::uffd_copy(self.uffd, dst, src, mode)
        });
        match r {
            Err(Errno(libc::EEXIST)) => sys::fatal(
                "zpage: evicted page's address is already mapped; refusing to guess its contents\n",
            ),
            r => r,
        }
    }

    fn restore_stored(&self, page: usize, s: u64) -> Result<(), Errno> {
        let st = &self.state[page];
        let dst = self.page_addr(page);
        let r = self.workers.with(|w, buf| {
            // May run in the SIGBUS handler: a load that spins instead of parking.
            match self.store.load_without_parking(w, page as u64, buf) {
                Ok(()) => {}
                Err(zpage_store::StoreError::NotFound(_)) => {
                    sys::fatal("zpage: a page marked stored has no entry in the store\n")
                }
                Err(_) => sys::fatal(
                    "zpage: a stored page failed to load or decompress; refusing to hand back wrong bytes\n",
                ),
            }
            self.copy_in(page, dst, buf.as_ptr(), if self.track_writes { sys::COPY_MODE_WP } else { 0 })
        });
        match r {
            Ok(()) => {}
            Err(Errno(libc::ECANCELED)) => {
                // Discarded by the program: the entry is stale (COPY), the page is zero.
                Counters::bump(&self.counters.discarded);
                st.store(empty(s) | COPY, Ordering::Release);
                return Err(Errno(libc::ECANCELED));
            }
            Err(e) => {
                self.publish(page, with_tag(s, STORED));
                return Err(e);
            }
        }
        self.resident.fetch_add(1, Ordering::AcqRel);
        let activate = self.refault_activates(page);
        // The store keeps its entry (zswap's non-exclusive load); with write
        // tracking the page is mapped write-protected and stays CLEAN until
        // its first write, so evicting it again needs no compression.
        let clean = if self.track_writes { CLEAN } else { 0 };
        self.publish(page, with_tag(s, RESIDENT) | COPY | clean);
        Counters::bump(&self.counters.restores);
        self.admitted(page, activate);
        Ok(())
    }

    /// How many times the page was activated (decayed by slow refaults and
    /// demotions).
    pub fn activations(&self, page: usize) -> u8 {
        self.history[page].load(Ordering::Relaxed) / ACT_ONE
    }

    /// Takes one activation from a demoted page; it stays marked as having
    /// been active, so one quick refault brings it back.
    pub fn spend_activation(&self, page: usize) {
        let h = &self.history[page];
        let cur = h.load(Ordering::Relaxed);
        if cur >= 2 * ACT_ONE {
            h.store(cur - ACT_ONE, Ordering::Relaxed);
        }
    }

    /// Removes the store's entry for a page that no longer needs it (restored
    /// or discarded). Caller holds `reclaim_lock`.
    pub fn drop_stale_copy(&self, page: usize) {
        let st = &self.state[page];
        let s = st.load(Ordering::Acquire);
        if s & COPY != 0
            && s & CLEAN == 0
            && matches!(tag(s), EMPTY | RESIDENT)
            && st
                .compare_exchange(s, s & !COPY, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.store.remove(page as u64);
        }
    }
}
