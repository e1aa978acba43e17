//! The reclaim lock: serialises a budget's reclaimer with `advise_cold`,
//! `recompress_now`, the fork hooks and region teardown. It guards no data
//! (page states are claimed by compare-and-swap); it keeps two of them from
//! working on the same budget's queues and pages at once.
//!
//! The reclaimer drains the fault path's rings only while it holds this
//! lock, so a thread that holds one must never wait for a ring to drain: it
//! would wait on itself. [`held_by_this_thread`] tells the fault path so,
//! from a thread-local count the guards keep (const-initialised, no
//! destructor: read in a signal handler without allocating).

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard};

thread_local! {
    /// Reclaim locks (of any budget) the calling thread holds.
    static HELD: Cell<u32> = const { Cell::new(0) };
}

/// True if the calling thread holds a budget's reclaim lock.
/// Async-signal-safe.
pub fn held_by_this_thread() -> bool {
    HELD.with(|held| held.get() != 0)
}

/// A budget's reclaim lock.
#[derive(Debug, Default)]
pub struct ReclaimLock(Mutex<()>);

/// The lock, held until dropped.
#[derive(Debug)]
pub struct ReclaimGuard<'a> {
    _guard: MutexGuard<'a, ()>,
}

impl ReclaimLock {
    /// Takes the lock. A holder that panicked leaves nothing half-done
    /// behind it (it guards no data), so a poisoned lock is taken as is.
    pub fn lock(&self) -> ReclaimGuard<'_> {
        let guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        HELD.with(|held| held.set(held.get() + 1));
        ReclaimGuard { _guard: guard }
    }
}

impl Drop for ReclaimGuard<'_> {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get() - 1));
    }
}
