//! The reclaim lock: serialises a budget's reclaimer with `advise_cold`,
//! `recompress_now`, the fork hooks and region teardown. It guards no data
//! (page states are claimed by compare-and-swap); it keeps two of them from
//! working on the same budget's queues and pages at once.

use std::sync::{Mutex, MutexGuard};

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
        ReclaimGuard { _guard: guard }
    }
}
