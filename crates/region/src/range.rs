//! Address ranges that may lie in any region of this process: for front ends
//! that see only pointers (the preload library's system call wrappers), not
//! [`crate::Region`] handles.
//!
//! Lookups go through the lock-free region table, so they take no lock a
//! thread they interrupt could hold; the pin and prefault paths block
//! asynchronous signals while they hold a page (as the region's own API does).

use crate::error::RegionError;
use crate::fault::{self, Access, Ctx};
use crate::region::{pin_pages, unpin_pages, PinLimit};
use crate::sys;
use crate::table::{self, pages_in};

/// Makes every region page of `[addr, addr + len)` present and writable
/// (restored or zero-filled), as [`crate::Region::prefault`] does; the
/// reclaimer may take them out again later (see [`pin_range`]).
pub fn prefault_range(addr: usize, len: usize) -> Result<(), RegionError> {
    let mut result = Ok(());
    let _signals = crate::threads::SignalGuard::block_async();
    table::for_each(|core| {
        let Some(range) = pages_in(core, addr, len) else {
            return;
        };
        let owner = core.owner_pid() == sys::getpid();
        for page in range.filter(|&p| !core.foreign.contains(p)) {
            if let Err(e) = fault::resolve_from(core, page, Access::WRITABLE, Ctx::Api, owner) {
                result = Err(RegionError::sys("prefault", e));
                return;
            }
        }
    });
    result
}

/// Pins every region page of `[addr, addr + len)` (see
/// [`crate::Region::pin`]): all or nothing, undone by [`unpin_range`] with
/// the same range. Fails with [`RegionError::PinExceedsBudget`] when the
/// budget's pinned pages would pass half the budget.
pub fn pin_range(addr: usize, len: usize) -> Result<(), RegionError> {
    pin_range_limited(addr, len, PinLimit::HalfBudget)
}

/// As [`pin_range`], with no limit: the pages stay resident over the budget
/// if need be. For memory the kernel must reach at any moment: a stack that
/// signals are delivered on (`sigaltstack`, a coroutine's), pages the
/// program `mlock`ed.
pub fn pin_range_over_budget(addr: usize, len: usize) -> Result<(), RegionError> {
    pin_range_limited(addr, len, PinLimit::None)
}

fn pin_range_limited(addr: usize, len: usize, limit: PinLimit) -> Result<(), RegionError> {
    let mut result = Ok(());
    let mut pinned: [Option<(usize, usize)>; 8] = [None; 8];
    let mut spans = 0;
    table::for_each(|core| {
        if result.is_err() {
            return;
        }
        let Some(range) = pages_in(core, addr, len) else {
            return;
        };
        if spans == pinned.len() {
            result = Err(RegionError::InvalidConfig(format!(
                "a range may be pinned across at most {} regions",
                pinned.len()
            )));
            return;
        }
        match pin_pages(core, range, limit) {
            Ok(()) => {
                pinned[spans] = Some((core.mapping.base(), core.mapping.len()));
                spans += 1;
            }
            Err(e) => result = Err(e),
        }
    });
    if result.is_err() {
        for (base, size) in pinned.iter().flatten() {
            let (s, e) = (addr.max(*base), addr.saturating_add(len).min(base + size));
            let _ = unpin_range(s, e - s);
        }
    }
    result
}

/// Undoes one [`pin_range`] of the same range.
pub fn unpin_range(addr: usize, len: usize) -> Result<(), RegionError> {
    let mut result = Ok(());
    table::for_each(|core| {
        if let Some(range) = pages_in(core, addr, len) {
            if let Err(e) = unpin_pages(core, range) {
                result = Err(e);
            }
        }
    });
    result
}

/// Holds the evictions of every budget with a region in this process off
/// until dropped (the exec hold of `evict::gate`): for `exec`, whose path, `argv`
/// and `envp` may lie in region memory and must stay resident until the
/// kernel has copied them. If the `exec` succeeds, the guard is never
/// dropped: the reclaimer sees the holder gone from its memory and lets
/// go. Async-signal-safe (the system-call trap takes it in its handler).
pub fn hold_evictions_for_exec() -> ExecHold {
    table::for_each(|core| core.budget.evictions().hold_for_exec());
    ExecHold(())
}

/// See [`hold_evictions_for_exec`].
#[must_use]
#[derive(Debug)]
pub struct ExecHold(());

impl Drop for ExecHold {
    /// The `exec` failed: evictions resume, and the reclaimer, which looks
    /// at a hold every `EXEC_HOLD_LOOK_NS`, is woken now rather than then.
    fn drop(&mut self) {
        table::for_each(|core| {
            core.budget.evictions().release_exec_hold();
            core.budget.kick_reclaimer();
        });
    }
}
