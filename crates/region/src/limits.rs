//! A budget's limits in pages, and the count of resident pages they limit.
//!
//! The budget itself may change while it runs: [`BudgetLimit`] holds it in
//! atomics, and every reader takes a [`Limits`] snapshot computed from one
//! look at them, with the watermarks, the trial set and the burst size in
//! the proportions the configuration gave. Two things set it: the budget's
//! owner (`Budget::set_budget_bytes`, a later automatic budget) and the
//! memory max (`memory_max.rs`), which caps it at what the process's other
//! memory leaves; the smaller holds. It never rises above the configured
//! budget, which the staging area and the reclaimer's rings were sized
//! for, nor falls below the smallest budget ([`MIN_BUDGET_BYTES`]).
//!
//! Everything here is async-signal-safe (atomics and arithmetic): the fault
//! path reads the limits at every fault that makes a page resident.

use crate::config::{AgingPolicy, BudgetConfig, MIN_BUDGET_BYTES};
use crate::sys::PAGE_SIZE;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The limits in pages at one moment (a snapshot of [`BudgetLimit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// The smallest budget in pages.
pub const MIN_BUDGET_PAGES: usize = MIN_BUDGET_BYTES / PAGE_SIZE;

/// What the configuration fixes: the proportions of the limits.
#[derive(Clone, Copy, Debug)]
struct Shape {
    high_pct: usize,
    low_pct: usize,
    /// 0 with FIFO aging.
    staging_pct: usize,
}

impl Limits {
    fn of(budget_pages: usize, shape: Shape) -> Limits {
        let staging_target = budget_pages * shape.staging_pct / 100;
        let burst_pages = (budget_pages / 64).clamp(1, MAX_BURST_PAGES);
        Limits {
            budget_pages,
            high_pages: budget_pages * shape.high_pct / 100,
            low_pages: budget_pages * shape.low_pct / 100,
            staging_target,
            burst_pages,
            mapped_limit: budget_pages
                .saturating_sub(staging_target + burst_pages)
                .max(1),
        }
    }
}

/// A budget that may change while it runs (see the module documentation).
#[derive(Debug)]
pub struct BudgetLimit {
    shape: Shape,
    /// The configured budget: the most it may be.
    capacity_pages: usize,
    /// What the budget's owner asks for.
    wanted_pages: AtomicUsize,
    /// What the memory max leaves (`usize::MAX` without one).
    cap_pages: AtomicUsize,
}

impl BudgetLimit {
    /// The limits of a budget configured with `config` (already validated).
    pub fn new(config: &BudgetConfig) -> BudgetLimit {
        let capacity_pages = (config.budget_bytes / PAGE_SIZE).max(MIN_BUDGET_PAGES);
        BudgetLimit {
            shape: Shape {
                high_pct: config.high_watermark_pct as usize,
                low_pct: config.low_watermark_pct as usize,
                staging_pct: match config.aging {
                    AgingPolicy::Fifo => 0,
                    AgingPolicy::Refault => config.staging_pct as usize,
                },
            },
            capacity_pages,
            wanted_pages: AtomicUsize::new(capacity_pages),
            cap_pages: AtomicUsize::new(usize::MAX),
        }
    }

    /// The budget in pages now: what the owner wants, within what the
    /// memory max leaves, never below the smallest budget.
    pub fn budget_pages(&self) -> usize {
        self.wanted_pages
            .load(Ordering::Acquire)
            .min(self.cap_pages.load(Ordering::Acquire))
            .max(MIN_BUDGET_PAGES)
    }

    /// The limits now.
    pub fn now(&self) -> Limits {
        Limits::of(self.budget_pages(), self.shape)
    }

    /// The limits at the configured budget, the largest they can be (what
    /// the staging area and the rings are sized for).
    pub fn at_capacity(&self) -> Limits {
        Limits::of(self.capacity_pages, self.shape)
    }

    /// The owner asks for a budget of `pages`, held within the smallest
    /// budget and the configured one; returns what it asks for after that.
    pub fn set_wanted_pages(&self, pages: usize) -> usize {
        let pages = pages.clamp(MIN_BUDGET_PAGES, self.capacity_pages);
        self.wanted_pages.store(pages, Ordering::Release);
        pages
    }

    /// Raises what the owner asks for so that `resident` pages sit at the
    /// low watermark, within the configured budget (an automatic budget
    /// making room for a growing program). Async-signal-safe: one atomic.
    pub fn raise_wanted_for(&self, resident: usize) {
        let pages = resident
            .saturating_mul(100)
            .div_ceil(self.shape.low_pct.max(1))
            .min(self.capacity_pages);
        self.wanted_pages.fetch_max(pages, Ordering::AcqRel);
    }

    /// What the budget's owner (or the automatic budget) asks for, in pages.
    pub fn wanted_pages(&self) -> usize {
        self.wanted_pages.load(Ordering::Acquire)
    }

    /// The memory max leaves room for `pages` (`usize::MAX`: no cap).
    pub fn set_cap_pages(&self, pages: usize) {
        self.cap_pages.store(pages, Ordering::Release);
    }
}

/// Pages resident in a budget's regions plus pages occupying its staging
/// slots (staged, or waiting to be discarded): it falls only when memory is
/// really given back. Async-signal-safe.
#[derive(Debug, Default)]
pub struct Resident(AtomicUsize);

impl Resident {
    pub fn add(&self, pages: usize) {
        self.0.fetch_add(pages, Ordering::AcqRel);
    }

    pub fn sub(&self, pages: usize) {
        self.0.fetch_sub(pages, Ordering::AcqRel);
    }

    /// The count now.
    pub fn pages(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// The count for the room handshake between throttled faults and the
    /// reclaimer (`reclaim::wake`): sequentially consistent, as the
    /// waiters' count it pairs with.
    pub fn pages_for_room(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(budget_bytes: usize, aging: AgingPolicy) -> BudgetLimit {
        let mut config = BudgetConfig::new(budget_bytes);
        config.aging = aging;
        BudgetLimit::new(&config)
    }

    #[test]
    fn the_limits_follow_the_budget_in_the_configured_proportions() {
        let l = limit(64 << 20, AgingPolicy::Refault);
        let full = l.now();
        assert_eq!(full, l.at_capacity());
        assert_eq!(full.budget_pages, 16384);
        assert_eq!(full.high_pages, 16384 * 97 / 100);
        assert_eq!(full.low_pages, 16384 * 93 / 100);
        assert_eq!(full.staging_target, 163);
        assert_eq!(full.burst_pages, 256);
        assert_eq!(full.mapped_limit, 16384 - 163 - 256);

        assert_eq!(l.set_wanted_pages(4096), 4096);
        let quarter = l.now();
        assert_eq!(quarter.budget_pages, 4096);
        assert_eq!(quarter.high_pages, 4096 * 97 / 100);
        assert_eq!(quarter.low_pages, 4096 * 93 / 100);
        assert_eq!(quarter.staging_target, 40);
        assert_eq!(quarter.burst_pages, 64);
        assert_eq!(quarter.mapped_limit, 4096 - 40 - 64);
        // The capacity stays what the structures were sized for.
        assert_eq!(l.at_capacity(), full);

        let fifo = limit(64 << 20, AgingPolicy::Fifo);
        assert_eq!(fifo.now().staging_target, 0);
        fifo.set_wanted_pages(1000);
        assert_eq!(fifo.now().staging_target, 0);
    }

    #[test]
    fn the_budget_stays_between_the_smallest_and_the_configured() {
        let l = limit(64 << 20, AgingPolicy::Refault);
        assert_eq!(l.set_wanted_pages(1 << 30), 16384);
        assert_eq!(l.budget_pages(), 16384);
        assert_eq!(l.set_wanted_pages(3), MIN_BUDGET_PAGES);
        assert_eq!(l.budget_pages(), MIN_BUDGET_PAGES);
        let tiny = l.now();
        assert!(tiny.low_pages < tiny.high_pages && tiny.high_pages <= tiny.budget_pages);
        assert!(tiny.mapped_limit >= 1 && tiny.burst_pages >= 1);
    }

    #[test]
    fn the_smaller_of_what_is_wanted_and_what_the_memory_max_leaves_holds() {
        let l = limit(64 << 20, AgingPolicy::Refault);
        l.set_cap_pages(8192);
        assert_eq!(l.budget_pages(), 8192);
        l.set_wanted_pages(2048);
        assert_eq!(l.budget_pages(), 2048);
        l.set_wanted_pages(16384);
        assert_eq!(l.budget_pages(), 8192);
        // A memory max that leaves less than the smallest budget: the
        // smallest (the excess is the memory max's to report).
        l.set_cap_pages(0);
        assert_eq!(l.budget_pages(), MIN_BUDGET_PAGES);
        l.set_cap_pages(usize::MAX);
        assert_eq!(l.budget_pages(), 16384);
    }
}
