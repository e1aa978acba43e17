//! Pausing eviction ([`EvictionGate`]): for the instant of a fork (the
//! budget-wide pause the fork prepare hook sets), for one region while
//! `restore_all` holds it resident ([`EvictionHold`]), and budget-wide while
//! a process calls `exec` with its strings in region memory (the exec hold,
//! owned by that process: if the `exec` succeeds nobody gives it back, and
//! the reclaimer drops it once the holder no longer shares the budget's
//! memory, see [`EvictionGate::drop_stale_exec_hold`]).
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
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// A budget's eviction pause and its count of evictions in flight.
#[derive(Debug, Default)]
pub struct EvictionGate {
    /// Set by the fork prepare hook: no eviction until the parent's (or
    /// child's) hook clears it.
    fork_pause: AtomicBool,
    /// 0, or the process whose `exec` holds eviction off: the process
    /// itself, or a `vfork()` child running in its memory.
    exec_holder: AtomicI32,
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
        self.fork_paused() || hold.is_held() || self.exec_held()
    }

    /// A fork is being prepared, or a process calls `exec`: nothing is
    /// evicted anywhere in the budget, and faults go over it rather than
    /// wait for room.
    pub fn budget_paused(&self) -> bool {
        self.fork_paused() || self.exec_held()
    }

    /// A process calls `exec`: nothing is evicted anywhere in the budget.
    pub fn exec_held(&self) -> bool {
        self.exec_holder.load(Ordering::SeqCst) != 0
    }

    /// Holds eviction off for this process's `exec` (waiting while another
    /// live process holds it): no eviction starts after this returns.
    pub fn hold_for_exec(&self) {
        let me = sys::getpid();
        loop {
            let holder = self.exec_holder.load(Ordering::SeqCst);
            let free = holder == 0 || holder == me || !sys::shares_memory_with(holder);
            if free
                && self
                    .exec_holder
                    .compare_exchange(holder, me, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                break;
            }
            sys::sleep_ns(100_000);
        }
        while self.evicting.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    /// Gives back this process's exec hold (its `exec` failed).
    pub fn release_exec_hold(&self) {
        let me = sys::getpid();
        let _ = self
            .exec_holder
            .compare_exchange(me, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The reclaimer's look: drops an exec hold whose process no longer
    /// shares the budget's memory (its `exec` succeeded, or it died).
    /// Returns whether a hold remains.
    pub fn drop_stale_exec_hold(&self) -> bool {
        let holder = self.exec_holder.load(Ordering::SeqCst);
        if holder == 0 {
            return false;
        }
        if holder == sys::getpid() || sys::shares_memory_with(holder) {
            return true;
        }
        let _ = self
            .exec_holder
            .compare_exchange(holder, 0, Ordering::SeqCst, Ordering::SeqCst);
        false
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
