//! A budget's limits in pages, computed once from its configuration, and
//! the count of resident pages they limit.

use crate::config::{AgingPolicy, BudgetConfig};
use crate::sys::PAGE_SIZE;
use std::sync::atomic::{AtomicUsize, Ordering};

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

impl Limits {
    /// The limits of a budget configured with `config` (already validated).
    pub fn new(config: &BudgetConfig) -> Limits {
        let budget_pages = config.budget_bytes / PAGE_SIZE;
        let staging_target = match config.aging {
            AgingPolicy::Fifo => 0,
            AgingPolicy::Refault => budget_pages * config.staging_pct as usize / 100,
        };
        let burst_pages = (budget_pages / 64).clamp(1, MAX_BURST_PAGES);
        Limits {
            budget_pages,
            high_pages: budget_pages * config.high_watermark_pct as usize / 100,
            low_pages: budget_pages * config.low_watermark_pct as usize / 100,
            staging_target,
            burst_pages,
            mapped_limit: budget_pages
                .saturating_sub(staging_target + burst_pages)
                .max(1),
        }
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
