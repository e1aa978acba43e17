//! Lock-free queues between the fault path and the reclaimer ([`Queues`],
//! one set per budget), and the record that names a page in them.
//!
//! Producers on the fault path run in signal handlers: pushing is a
//! compare-and-swap and a store, no allocation, no lock, and never a wait: a
//! full ring refuses, and the producer deals with the overflow itself (see
//! the callers), because the consumer may be waiting for the producer's own
//! thread. The consumer is the reclaimer, holding its budget's reclaim lock.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use zpage_store::PageRef;

// ---- Record ----------------------------------------------------------------
//
// ```text
//  63  62         48 47        42 41       32 31                       0
// +---+-------------+------------+-----------+--------------------------+
// | a | generation  | incarnation|  region   |         page + 1         |
// +---+-------------+------------+-----------+--------------------------+
// ```
// `a`: the admission activates the page. Zero is never a record (page + 1).

const PAGE_BITS: u32 = 32;
const REGION_SHIFT: u32 = PAGE_BITS;
pub const REGION_BITS: u32 = 10;
const INCARNATION_SHIFT: u32 = REGION_SHIFT + REGION_BITS;
pub const INCARNATION_BITS: u32 = 6;
const GEN_SHIFT: u32 = INCARNATION_SHIFT + INCARNATION_BITS;
const GEN_BITS: u32 = 15;
const ACTIVATE_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const _: () = assert!(
    ACTIVATE_SHIFT == 63,
    "the record layout above no longer fills one word"
);

/// Pages a region may have (records name `page + 1` in 32 bits).
pub const MAX_REGION_PAGES: usize = (1 << PAGE_BITS) - 1;

/// Names a region in records: its entry in the region table and that
/// entry's incarnation (bumped each time the entry is reused, so a record
/// made for an earlier region never reaches a later one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionId {
    pub index: u16,
    pub incarnation: u8,
}

/// One page of one region, at one admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record(u64);

impl Record {
    pub fn new(region: RegionId, page: usize, gen: u32, activate: bool) -> Record {
        debug_assert!(page < MAX_REGION_PAGES);
        Record(
            (page as u64 + 1)
                | (u64::from(region.index) << REGION_SHIFT)
                | (u64::from(region.incarnation) << INCARNATION_SHIFT)
                | ((u64::from(gen) & ((1 << GEN_BITS) - 1)) << GEN_SHIFT)
                | (u64::from(activate) << ACTIVATE_SHIFT),
        )
    }

    fn from_raw(raw: u64) -> Option<Record> {
        (raw != 0).then_some(Record(raw))
    }

    pub fn page(self) -> usize {
        ((self.0 & ((1 << PAGE_BITS) - 1)) - 1) as usize
    }

    pub fn region(self) -> RegionId {
        RegionId {
            index: ((self.0 >> REGION_SHIFT) & ((1 << REGION_BITS) - 1)) as u16,
            incarnation: ((self.0 >> INCARNATION_SHIFT) & ((1 << INCARNATION_BITS) - 1)) as u8,
        }
    }

    /// True if `gen` (a page's current generation) is this record's.
    pub fn is_generation(self, gen: u32) -> bool {
        (self.0 >> GEN_SHIFT) & ((1 << GEN_BITS) - 1) == u64::from(gen) & ((1 << GEN_BITS) - 1)
    }

    pub fn activate(self) -> bool {
        self.0 >> ACTIVATE_SHIFT == 1
    }
}

/// A bounded multi-producer, single-consumer ring of non-zero words.
#[derive(Debug)]
pub struct Ring {
    slots: Box<[AtomicU64]>,
    tail: AtomicUsize,
    head: AtomicUsize,
}

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        let cap = capacity.next_power_of_two().max(1024);
        Ring {
            slots: (0..cap).map(|_| AtomicU64::new(0)).collect(),
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
        }
    }

    /// Producer side (async-signal-safe, never waits): false if the ring is
    /// full, and the value was not queued (the caller handles the overflow).
    #[must_use]
    pub fn try_push(&self, value: u64) -> bool {
        debug_assert!(value != 0);
        let cap = self.slots.len();
        let mut tail = self.tail.load(Ordering::Acquire);
        loop {
            // The consumer empties a slot before it moves `head` past it, so
            // a position less than a ring ahead of `head` is free.
            if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= cap {
                return false;
            }
            match self.tail.compare_exchange_weak(
                tail,
                tail.wrapping_add(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => tail = actual,
            }
        }
        self.slots[tail & (cap - 1)].store(value, Ordering::Release);
        true
    }

    /// How many values are queued or being queued (a snapshot).
    pub fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).wrapping_sub(head)
    }

    /// True if nothing is waiting at the consumer's position.
    pub fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        self.slots[head & (self.slots.len() - 1)].load(Ordering::Acquire) == 0
    }

    /// Consumer side (one thread at a time: callers hold the reclaim lock).
    pub fn pop(&self) -> Option<u64> {
        let head = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[head & (self.slots.len() - 1)];
        let value = slot.load(Ordering::Acquire);
        if value == 0 {
            return None;
        }
        slot.store(0, Ordering::Release);
        self.head.store(head.wrapping_add(1), Ordering::Release);
        Some(value)
    }

    #[must_use]
    pub fn try_push_record(&self, record: Record) -> bool {
        self.try_push(record.0)
    }

    pub fn pop_record(&self) -> Option<Record> {
        self.pop().and_then(Record::from_raw)
    }
}

/// Eviction candidates, oldest first, that faulting threads take themselves.
/// The reclaimer (one thread, under its lock) appends; any thread takes from
/// the front with one compare-and-swap.
#[derive(Debug)]
pub struct VictimQueue {
    slots: Box<[AtomicU64]>,
    /// Next position to take.
    head: AtomicUsize,
    /// Next position to fill.
    tail: AtomicUsize,
}

impl VictimQueue {
    pub fn new(capacity: usize) -> VictimQueue {
        VictimQueue {
            slots: (0..capacity.max(1)).map(|_| AtomicU64::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    /// Takes the oldest candidate (async-signal-safe).
    pub fn take(&self) -> Option<Record> {
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
                if let Some(record) =
                    Record::from_raw(self.slots[head % n].swap(0, Ordering::AcqRel))
                {
                    return Some(record);
                }
            }
        }
    }

    /// Appends candidates (reclaimer only); returns those that did not fit,
    /// in their order.
    pub fn put(&self, records: Vec<Record>) -> Vec<Record> {
        let n = self.slots.len();
        let mut tail = self.tail.load(Ordering::Relaxed);
        for (i, record) in records.iter().enumerate() {
            let slot = &self.slots[tail % n];
            // Full, or a taker claimed this slot and has not emptied it yet.
            if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= n
                || slot.load(Ordering::Acquire) != 0
            {
                return records[i..].to_vec();
            }
            slot.store(record.0, Ordering::Release);
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

/// The most admission records queued between two drains.
const MAX_ADMITS: usize = 1 << 18;
/// The most freed compressed copies queued between two drains.
const MAX_FREED: usize = 1 << 17;
/// The most discarded pages' records queued between two drains (16 MiB of
/// pages; a `free` of more leaves the rest to the aging).
const DISCARDED_RECORDS: usize = 4096;

/// The queues of one budget, from its fault path (any thread, in signal
/// handlers) to its reclaimer.
#[derive(Debug)]
pub struct Queues {
    /// "Page became resident" records.
    admits: Ring,
    /// Victims a fault took but could not evict (no longer clean).
    returned: Ring,
    /// Resident pages the program discarded (from the event thread): the
    /// reclaimer looks at them first, so a page the kernel zaps leaves the
    /// budget at once rather than when the aging reaches it, as freed
    /// memory leaves a memory cgroup at once. A record that does not fit is
    /// dropped: the page leaves when the aging reaches it.
    discarded: Ring,
    /// Compressed copies given up on the fault path (a restore, a write
    /// after a restore, a discard): freed by the reclaimer, since freeing
    /// takes the pool's lock and may give memory back to the allocator.
    freed_refs: Ring,
    /// An admission or returned record did not fit in its ring: the
    /// reclaimer rebuilds its queues from the pages themselves.
    records_lost: AtomicBool,
    /// Clean candidates that faulting threads evict themselves.
    victims: VictimQueue,
    /// A fault found the victim queue half empty and asked for a refill.
    refill_wanted: AtomicBool,
}

impl Queues {
    /// Queues sized for a budget of `budget_pages`.
    ///
    /// The rings need room for what faults queue between two drains by the
    /// reclaimer (it drains at every wake, at least every few
    /// milliseconds), not for the whole budget: sized by the budget alone,
    /// they were 36 MiB of zpage's own memory in every process at
    /// `zpage run`'s default budget (a quarter of a 24 GiB machine). Capped,
    /// they hold a quarter of a million admissions (about a second of one
    /// thread faulting without a drain) and half as many freed copies; an
    /// admission that does not fit makes the reclaimer rebuild its queues
    /// from the pages, and a freed copy that does not fit waits for a drain.
    pub fn new(budget_pages: usize) -> Queues {
        Queues {
            admits: Ring::new((budget_pages * 2).min(MAX_ADMITS)),
            returned: Ring::new(4096),
            discarded: Ring::new(DISCARDED_RECORDS),
            freed_refs: Ring::new(budget_pages.min(MAX_FREED)),
            records_lost: AtomicBool::new(false),
            victims: VictimQueue::new((budget_pages / 16).clamp(16, 8192)),
            refill_wanted: AtomicBool::new(false),
        }
    }

    // ---- Producers (the fault path; async-signal-safe, never wait) ----

    /// Queues the record of a page that became resident; false (and the
    /// loss flagged) if the ring is full.
    pub fn admit(&self, record: Record) -> bool {
        self.queue(&self.admits, record)
    }

    /// Gives a victim a fault could not evict back to the reclaimer; false
    /// (and the loss flagged) if the ring is full.
    pub fn return_victim(&self, record: Record) -> bool {
        self.queue(&self.returned, record)
    }

    fn queue(&self, ring: &Ring, record: Record) -> bool {
        let queued = ring.try_push_record(record);
        if !queued {
            self.records_lost.store(true, Ordering::Release);
        }
        queued
    }

    /// Names a resident page the program discarded (the event thread);
    /// false, and nothing else, if the ring is full.
    pub fn discarded(&self, record: Record) -> bool {
        self.discarded.try_push_record(record)
    }

    /// Hands a reference given up on the fault path to the reclaimer;
    /// false if the ring is full (the reference was not queued).
    #[must_use]
    pub fn hand_over_freed(&self, page_ref: PageRef) -> bool {
        self.freed_refs.try_push(page_ref.to_raw())
    }

    /// Admission records waiting (a snapshot).
    pub fn admits_waiting(&self) -> usize {
        self.admits.len()
    }

    /// The clean candidates faulting threads take from.
    pub fn victims(&self) -> &VictimQueue {
        &self.victims
    }

    /// Asks the reclaimer for a refill of the victim queue when it is less
    /// than half full; true if this call is the one that asked (the caller
    /// then wakes the reclaimer).
    pub fn ask_for_refill(&self) -> bool {
        self.victims.len() < self.victims.capacity() / 2
            && !self.refill_wanted.swap(true, Ordering::AcqRel)
    }

    // ---- The consumer (the reclaimer, holding the reclaim lock) ----

    /// Whether records were lost since the last call (and the flag cleared).
    pub fn take_records_lost(&self) -> bool {
        self.records_lost.swap(false, Ordering::AcqRel)
    }

    pub fn pop_freed(&self) -> Option<PageRef> {
        self.freed_refs.pop().and_then(PageRef::from_raw)
    }

    pub fn pop_returned(&self) -> Option<Record> {
        self.returned.pop_record()
    }

    pub fn pop_discarded(&self) -> Option<Record> {
        self.discarded.pop_record()
    }

    pub fn pop_admitted(&self) -> Option<Record> {
        self.admits.pop_record()
    }

    /// Drops every queued record (the reclaimer rebuilds its queues from the
    /// pages themselves).
    pub fn clear_records(&self) {
        while self.admits.pop().is_some() {}
        while self.returned.pop().is_some() {}
        while self.discarded.pop().is_some() {}
    }

    /// Whether admissions, given-up references or discarded pages wait to
    /// be taken in.
    pub fn has_work(&self) -> bool {
        !self.admits.is_empty() || !self.freed_refs.is_empty() || !self.discarded.is_empty()
    }

    /// Whether a fault asked for a refill of the victim queue.
    pub fn refill_wanted(&self) -> bool {
        self.refill_wanted.load(Ordering::Acquire)
    }

    /// After a refill: faults may ask again once it has been used up.
    pub fn refilled(&self) {
        if self.victims.len() >= self.victims.capacity() / 2 {
            self.refill_wanted.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let region = RegionId {
            index: (1 << REGION_BITS) - 1,
            incarnation: (1 << INCARNATION_BITS) - 1,
        };
        let r = Record::new(region, MAX_REGION_PAGES - 1, 0x1234_5678, true);
        assert_eq!(r.page(), MAX_REGION_PAGES - 1);
        assert_eq!(r.region(), region);
        assert!(r.is_generation(0x1234_5678));
        assert!(!r.is_generation(0x1234_5679));
        assert!(r.activate());
        let zero = Record::new(
            RegionId {
                index: 0,
                incarnation: 0,
            },
            0,
            0,
            false,
        );
        assert_ne!(zero.0, 0);
        assert_eq!(Record::from_raw(zero.0), Some(zero));
    }

    #[test]
    fn a_large_budget_does_not_make_large_rings() {
        // zpage run's default budget on a 24 GiB machine: 6 GiB.
        let q = Queues::new((6usize << 30) / 4096);
        let slots = q.admits.slots.len() + q.freed_refs.slots.len() + q.returned.slots.len();
        assert!(slots * 8 <= 4 << 20, "{slots} slots");
        let small = Queues::new(1024);
        assert_eq!(small.admits.slots.len(), 2048);
    }

    #[test]
    fn rings_keep_order_and_refuse_when_full() {
        let ring = Ring::new(1);
        assert_eq!(ring.slots.len(), 1024);
        for v in 1..=1024u64 {
            assert!(ring.try_push(v));
        }
        assert!(!ring.try_push(1025), "a full ring refuses");
        assert_eq!(ring.len(), 1024);
        assert_eq!(ring.pop(), Some(1));
        assert_eq!(ring.len(), 1023);
        assert!(ring.try_push(1025));
        for v in 2..=1025u64 {
            assert_eq!(ring.pop(), Some(v));
        }
        assert!(ring.is_empty());
        assert_eq!(ring.len(), 0);
        assert_eq!(ring.pop(), None);
    }

    #[test]
    fn rings_lose_nothing_between_threads() {
        let ring = std::sync::Arc::new(Ring::new(1));
        let producers: Vec<_> = (0..3u64)
            .map(|t| {
                let ring = std::sync::Arc::clone(&ring);
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        while !ring.try_push(t << 32 | (i + 1)) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 3];
        let mut got = 0;
        while got < 60_000 {
            match ring.pop() {
                Some(v) => {
                    let (t, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                    assert_eq!(i, seen[t] + 1, "each producer's values arrive in order");
                    seen[t] = i;
                    got += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
    }
}
