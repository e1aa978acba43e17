//! The aging policy: which resident pages go out first. Everything the policy
//! decides lives in this module (changing the policy touches this file only):
//! what it remembers per page ([`PageAging`]), what a refault teaches it
//! ([`on_refault`], run by the faulting thread), what an eviction stamps
//! ([`on_evicted`]), and the queues the reclaimer picks victims from
//! ([`Aging`]).
//!
//! The kernel exposes no accessed bits here, so the policy works from what
//! user space sees: faults.
//!
//! - **Refault distance** (as `mm/workingset.c`): each eviction stamps the
//!   page with an eviction clock; a refault whose distance is under a
//!   threshold is *quick*. A quick refault activates a page that was active
//!   before or refaulted quickly last time too (a first quick refault only
//!   marks it: cold pages that come back soon by chance do not displace the
//!   hot set). Active pages are protected: victims come from the *inactive*
//!   queue (admission order) first.
//! - **A threshold that follows the active queues' fill**: the whole budget
//!   while they are empty (a new hot set is learnt within a few refaults per
//!   page, and a wrong activation displaces nothing), down to a quarter of it
//!   when they are full (a wrong activation then costs a hot page its place,
//!   so the evidence must be stronger).
//! - **Active queues held to two thirds of the budget**: the inactive queue
//!   keeps a third at least, where a working set the policy has not learnt
//!   yet gets its reuse. Without accessed bits the policy never sees active
//!   pages go cold: with active queues that could take nearly the whole
//!   budget, a phase's hot set stayed long after the program moved on, and
//!   the next phase churned through what was left (CPython under `zpage
//!   run` at a fifth of its peak restored 2.0M pages where the kernel swapped
//!   in 0.58M; with a third kept inactive, 0.64M). The kernel keeps half its
//!   small LRU lists inactive (`inactive_is_low` in `mm/vmscan.c`); at a
//!   half, CPython measured the same and redis 14% more restores than at
//!   two thirds.
//! - **Two active queues**: pages activated once, and pages activated again
//!   after a demotion. Demotions take the oldest page activated once first (a
//!   cold page activated by chance), a repeatedly activated one only when
//!   there is none, and that one spends an activation.
//! - **The codec of a page's copy** (with a cold codec configured): pages
//!   with no quick reuse in their history go straight to the cold codec
//!   ([`wants_cold_codec`]).
//! - **Trial eviction** (the reclaimer's side): evicted pages wait
//!   uncompressed in staging for a while; a touch brings one back cheaply and
//!   counts as a quick refault.
//!
//! [`AgingPolicy::Fifo`] evicts in admission order (the baseline).
//!
//! The per-page functions are async-signal-safe: relaxed atomics only.

use crate::config::AgingPolicy;
use crate::counters::Counters;
use crate::queues::Record;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

const WAS_ACTIVE: u8 = 1;
const QUICK_ONCE: u8 = 2;
/// Bits 2-7 of the history byte count activations (saturating at 63).
const ACT_ONE: u8 = 4;

/// What the policy remembers of one page.
#[derive(Debug, Default)]
#[repr(C)]
pub struct PageAging {
    /// Admission generation: a queue record of an older admission is stale.
    pub gen: AtomicU32,
    /// The eviction clock when the page last went out.
    evicted_at: AtomicU32,
    /// WAS_ACTIVE, QUICK_ONCE and the activation count.
    history: AtomicU8,
}

impl PageAging {
    /// Starts a new admission; returns its generation (for the record).
    pub fn admit(&self) -> u32 {
        self.gen.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }

    /// How many times the page was activated (decayed by slow refaults and demotions).
    pub fn activations(&self) -> u8 {
        self.history.load(Ordering::Relaxed) / ACT_ONE
    }

    /// Takes one activation from a demoted page; it stays marked as having
    /// been active, so one quick refault brings it back.
    fn spend_activation(&self) {
        let cur = self.history.load(Ordering::Relaxed);
        if cur >= 2 * ACT_ONE {
            self.history.store(cur - ACT_ONE, Ordering::Relaxed);
        }
    }
}

/// The policy's budget-wide clock and threshold, shared with faulting threads.
#[derive(Debug)]
pub struct AgingClock {
    policy: AgingPolicy,
    eviction_clock: AtomicU32,
    /// A refault this many evictions or fewer after the page's eviction is quick.
    activate_distance: AtomicU32,
}

impl AgingClock {
    pub fn new(policy: AgingPolicy, budget_pages: usize) -> AgingClock {
        AgingClock {
            policy,
            eviction_clock: AtomicU32::new(1 << 31),
            activate_distance: AtomicU32::new(budget_pages.clamp(1, u32::MAX as usize) as u32),
        }
    }

    pub fn policy(&self) -> AgingPolicy {
        self.policy
    }
}

/// Stamps a page that just went out. Async-signal-safe.
pub fn on_evicted(clock: &AgingClock, page: &PageAging) {
    let now = clock.eviction_clock.fetch_add(1, Ordering::AcqRel);
    page.evicted_at.store(now, Ordering::Relaxed);
}

/// The refault-distance test with a second-chance filter, run when an evicted
/// page comes back: true if the page is to be activated. Async-signal-safe.
pub fn on_refault(clock: &AgingClock, page: &PageAging) -> bool {
    if clock.policy == AgingPolicy::Fifo {
        return false;
    }
    let now = clock.eviction_clock.load(Ordering::Relaxed);
    let then = page.evicted_at.load(Ordering::Relaxed);
    let quick = now.wrapping_sub(then) <= clock.activate_distance.load(Ordering::Relaxed);
    let prev = page.history.load(Ordering::Relaxed);
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
    page.history.store(next, Ordering::Relaxed);
    activate
}

/// Whether the page's next compressed copy takes the budget's cold codec:
/// it has shown no quick reuse (never refaulted, or refaulted slowly, and
/// never active), so its copy is expected to stay compressed long and the
/// memory the stronger codec saves outweighs its slower decode. A page with
/// quick reuse keeps the fast codec, so the faults that recur pay the fast
/// decode. Under [`AgingPolicy::Fifo`] no history is kept: every page takes
/// the cold codec. Async-signal-safe.
pub fn wants_cold_codec(page: &PageAging) -> bool {
    page.history.load(Ordering::Relaxed) & (WAS_ACTIVE | QUICK_ONCE) == 0
}

/// A staged page touched again: a trial-eviction hit counts as a quick refault.
pub fn on_trial_hit(clock: &AgingClock, page: &PageAging) -> bool {
    on_refault(clock, page)
}

/// Runs a closure on the aging data of the page a record names and on its
/// region's counters (when the record's region still exists).
pub type PageOf<'a> = dyn FnMut(Record, &mut dyn FnMut(&PageAging, &Counters)) + 'a;

/// What the reclaimer learns when it looks a record up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// A resident page of that admission, unpinned and free to take.
    Evictable,
    /// Resident, but not evictable now (pinned, or held by another thread for
    /// a moment): keep its record.
    Busy,
    /// Not resident any more, or a later admission: drop the record.
    Stale,
}

/// The share of the budget the active queues may hold, in thirds (see the
/// module's documentation for why two).
const ACTIVE_THIRDS: usize = 2;

/// Most pages the active queues may hold: two thirds of the budget, and
/// never so many that the staging target and a minimum inactive share
/// (a 64th of the budget, 16 pages at least) do not fit beside them.
fn active_max(budget_pages: usize, staging_target: usize) -> usize {
    let inactive_min = (budget_pages / 64).max(16);
    (budget_pages * ACTIVE_THIRDS / 3)
        .min(budget_pages.saturating_sub(staging_target + inactive_min))
        .max(1)
}

/// The reclaimer's queues (owned by the reclaimer thread).
#[derive(Debug)]
pub struct Aging {
    policy: AgingPolicy,
    /// Resident pages in admission order.
    inactive: VecDeque<Record>,
    /// Pages whose refault distance showed them to be in use, activated once
    /// (demoted first: a cold page activated by a chance quick refault)...
    active_once: VecDeque<Record>,
    /// ... and activated again after a demotion (the hot set proper).
    active_repeat: VecDeque<Record>,
    /// Most active pages kept (see [`active_max`]).
    active_max: usize,
    budget_pages: usize,
}

impl Aging {
    pub fn new(policy: AgingPolicy, budget_pages: usize, staging_target: usize) -> Aging {
        Aging {
            policy,
            inactive: VecDeque::new(),
            active_once: VecDeque::new(),
            active_repeat: VecDeque::new(),
            active_max: active_max(budget_pages, staging_target),
            budget_pages,
        }
    }

    /// The budget changed (it may while it runs): the active queues' share
    /// and the quick-refault threshold follow it.
    pub fn set_budget(&mut self, budget_pages: usize, staging_target: usize) {
        if budget_pages != self.budget_pages {
            self.active_max = active_max(budget_pages, staging_target);
            self.budget_pages = budget_pages;
        }
    }

    /// Records a page that became resident; `activations` is its history's
    /// count (read by the caller from the page).
    pub fn admit(&mut self, record: Record, activations: u8) {
        if record.activate() && self.policy == AgingPolicy::Refault {
            if activations >= 2 {
                self.active_repeat.push_back(record);
            } else {
                self.active_once.push_back(record);
            }
        } else {
            self.inactive.push_back(record);
        }
    }

    /// A record to try again soon (a victim that could not be taken now).
    pub fn retry_first(&mut self, record: Record) {
        self.inactive.push_front(record);
    }

    /// A record to try again later.
    pub fn retry_later(&mut self, record: Record) {
        self.inactive.push_back(record);
    }

    /// Demotes pages over the active limit and moves the quick-refault
    /// threshold with the active queues' fill.
    pub fn rebalance(
        &mut self,
        clock: &AgingClock,
        standing: &mut dyn FnMut(Record) -> Standing,
        page_of: &mut PageOf<'_>,
    ) {
        while self.active_len() > self.active_max {
            let Some(record) = self.demote(standing, page_of) else {
                break;
            };
            self.inactive.push_back(record);
        }
        let fill = self.active_len().min(self.active_max) as u64;
        let budget = self.budget_pages as u64;
        let distance = budget - 3 * budget * fill / (4 * self.active_max as u64);
        clock
            .activate_distance
            .store(distance.clamp(1, u32::MAX as u64) as u32, Ordering::Relaxed);
    }

    fn active_len(&self) -> usize {
        self.active_once.len() + self.active_repeat.len()
    }

    /// The oldest page activated once; only when there is none, the oldest
    /// page activated repeatedly, which spends one activation.
    fn demote(
        &mut self,
        standing: &mut dyn FnMut(Record) -> Standing,
        page_of: &mut PageOf<'_>,
    ) -> Option<Record> {
        loop {
            let (record, repeat) = match self.active_once.pop_front() {
                Some(record) => (record, false),
                None => (self.active_repeat.pop_front()?, true),
            };
            if standing(record) == Standing::Stale {
                continue;
            }
            page_of(record, &mut |aging, counters| {
                Counters::bump(&counters.demotion_count);
                if repeat {
                    aging.spend_activation();
                }
            });
            return Some(record);
        }
    }

    /// The next page to evict: the oldest inactive one; when none is left,
    /// or every one left is busy, the oldest active one (demoted). Stale
    /// records are dropped on the way; busy ones go to the back.
    ///
    /// Busy inactive pages (pinned by a system call, or held for a moment)
    /// must not hide the active ones: a single pinned page alone in the
    /// inactive queue made the reclaimer find no victim while thousands of
    /// active pages were resident, and the budget was marked stuck (node
    /// under `zpage run` passed its budget by 50-80 MiB so).
    pub fn next_victim(
        &mut self,
        standing: &mut dyn FnMut(Record) -> Standing,
        page_of: &mut PageOf<'_>,
    ) -> Option<Record> {
        let mut busy_seen = 0;
        loop {
            let inactive = if busy_seen < self.inactive.len() {
                self.inactive.pop_front()
            } else {
                None
            };
            let record = match inactive {
                Some(record) => record,
                None => self.demote(standing, page_of)?,
            };
            match standing(record) {
                Standing::Evictable => return Some(record),
                Standing::Stale => {}
                Standing::Busy => {
                    self.inactive.push_back(record);
                    busy_seen += 1;
                }
            }
        }
    }

    /// Takes evictable records from the front of the inactive queue while
    /// `take` accepts them (clean pages for faulting threads to drop); stops
    /// at the first it refuses.
    pub fn take_front_while(
        &mut self,
        max: usize,
        standing: &mut dyn FnMut(Record) -> Standing,
        take: &mut dyn FnMut(Record) -> bool,
    ) -> Vec<Record> {
        let mut taken = Vec::with_capacity(max);
        while taken.len() < max {
            let Some(record) = self.inactive.pop_front() else {
                break;
            };
            match standing(record) {
                Standing::Stale => continue,
                Standing::Evictable if take(record) => taken.push(record),
                _ => {
                    self.inactive.push_front(record);
                    break;
                }
            }
        }
        taken
    }

    /// Drops stale records once the queues grow past `limit` (records of
    /// pages that left through other paths accumulate otherwise).
    pub fn prune(&mut self, limit: usize, standing: &mut dyn FnMut(Record) -> Standing) {
        if self.inactive.len() + self.active_len() <= limit {
            return;
        }
        for queue in [
            &mut self.inactive,
            &mut self.active_once,
            &mut self.active_repeat,
        ] {
            queue.retain(|&record| standing(record) != Standing::Stale);
        }
    }

    /// Records held (for stats and tests).
    pub fn len(&self) -> usize {
        self.inactive.len() + self.active_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::RegionId;

    fn record(page: usize) -> Record {
        let region = RegionId {
            index: 0,
            incarnation: 0,
        };
        Record::new(region, page, 0, page >= 100)
    }

    /// The next victim's page when page 1 is busy (pinned) and every other
    /// page evictable.
    fn next_with_page_one_busy(aging: &mut Aging) -> Option<usize> {
        let mut standing = |r: Record| {
            if r.page() == 1 {
                Standing::Busy
            } else {
                Standing::Evictable
            }
        };
        let mut page_of = |_: Record, _: &mut dyn FnMut(&PageAging, &Counters)| {};
        aging
            .next_victim(&mut standing, &mut page_of)
            .map(|r| r.page())
    }

    #[test]
    fn busy_inactive_pages_do_not_hide_the_active_ones() {
        let mut aging = Aging::new(AgingPolicy::Refault, 1000, 10);
        // Page 1 inactive and pinned; pages 100-102 active and evictable.
        aging.admit(record(1), 0);
        for page in 100..103 {
            aging.admit(record(page), 0);
        }
        let victims: Vec<Option<usize>> = (0..3)
            .map(|_| next_with_page_one_busy(&mut aging))
            .collect();
        assert_eq!(victims, vec![Some(100), Some(101), Some(102)]);
        // Only the busy page is left: no victim, and its record is kept.
        assert_eq!(next_with_page_one_busy(&mut aging), None);
        assert_eq!(aging.len(), 1);
    }

    #[test]
    fn the_active_queues_hold_two_thirds_of_the_budget_at_most() {
        let (budget, staging) = (3000, 10);
        let mut aging = Aging::new(AgingPolicy::Refault, budget, staging);
        for page in 100..100 + budget {
            aging.admit(record(page), 0);
        }
        let clock = AgingClock::new(AgingPolicy::Refault, budget);
        let mut standing = |_: Record| Standing::Evictable;
        let mut page_of = |_: Record, _: &mut dyn FnMut(&PageAging, &Counters)| {};
        aging.rebalance(&clock, &mut standing, &mut page_of);
        assert_eq!(aging.active_len(), 2000);
        assert_eq!(aging.inactive.len(), 1000);
        // The oldest activations were demoted, in their order.
        assert_eq!(aging.inactive.front().map(|r| r.page()), Some(100));
        // A small budget keeps its minimum inactive share and staging.
        assert_eq!(active_max(40, 10), 14);
    }

    #[test]
    fn an_evictable_inactive_page_goes_before_the_active_ones() {
        let mut aging = Aging::new(AgingPolicy::Refault, 1000, 10);
        aging.admit(record(100), 0);
        aging.admit(record(2), 0);
        aging.admit(record(1), 0);
        assert_eq!(next_with_page_one_busy(&mut aging), Some(2));
    }
}
