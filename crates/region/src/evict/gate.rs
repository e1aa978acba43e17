//! Pausing eviction ([`EvictionGate`]): for the instant of a fork (the
//! budget-wide pause the fork prepare hook sets), and for one region while
//! `restore_all` holds it resident ([`EvictionHold`]).
//!
//! The count of evictions in flight and the pause flags form a Dekker pair,
//! so every access to them is sequentially consistent: an eviction counts
//! itself in and then looks at the flags; a pauser sets its flag and then
//! waits for the count to reach zero. Whoever pauses knows, once that wait
//! ends, that no eviction can start after it, without a lock
//! (`restore_all` may run in a signal handler).
//!
//! Async-signal-safe: atomics and `sched_yield` only.

use crate::sys;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A budget's eviction pause and its count of evictions in flight.
#[derive(Debug, Default)]
pub struct EvictionGate {
    /// Set by the fork prepare hook: no eviction until the parent's (or
    /// child's) hook clears it.
    fork_pause: AtomicBool,
    /// Evictions in flight.
    evicting: AtomicUsize,
}

/// One region's pause, set by `restore_all` until `resume_eviction`.
#[derive(Debug, Default)]
pub struct EvictionHold(AtomicBool);

impl EvictionHold {
    pub fn is_held(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Eviction of the region resumes.
    pub fn release(&self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// An eviction in flight: counted until dropped.
#[derive(Debug)]
pub struct Evicting<'a>(&'a EvictionGate);

impl Drop for Evicting<'_> {
    fn drop(&mut self) {
        self.0.evicting.fetch_sub(1, Ordering::SeqCst);
    }
}

impl EvictionGate {
    /// Announces an eviction from the region `hold` belongs to; `None` (and
    /// nothing announced) if eviction is paused.
    pub fn enter<'a>(&'a self, hold: &EvictionHold) -> Option<Evicting<'a>> {
        self.evicting.fetch_add(1, Ordering::SeqCst);
        let evicting = Evicting(self);
        (!self.paused(hold)).then_some(evicting)
    }

    /// Eviction from the region `hold` belongs to is paused (a fork in
    /// progress, or `restore_all`).
    pub fn paused(&self, hold: &EvictionHold) -> bool {
        self.fork_paused() || hold.is_held()
    }

    /// A fork is being prepared: nothing is evicted anywhere in the budget.
    pub fn fork_paused(&self) -> bool {
        self.fork_pause.load(Ordering::SeqCst)
    }

    /// Holds one region resident: no eviction of it starts after this
    /// returns.
    pub fn hold(&self, hold: &EvictionHold) {
        Self::pause(&hold.0, &self.evicting);
    }

    /// The fork prepare hook: no eviction starts after this returns.
    pub fn pause_for_fork(&self) {
        Self::pause(&self.fork_pause, &self.evicting);
    }

    /// The fork's parent or child hook: eviction resumes.
    pub fn resume_after_fork(&self) {
        self.fork_pause.store(false, Ordering::SeqCst);
    }

    fn pause(flag: &AtomicBool, evicting: &AtomicUsize) {
        flag.store(true, Ordering::SeqCst);
        while evicting.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }
}
