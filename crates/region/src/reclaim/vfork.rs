//! The reclaimer's side of a `vfork()` child's requests (module
//! `fork::vfork`): this thread holds the userfaultfd the child closed, and
//! keeps running while the parent's vforking thread is suspended.

use crate::fault::{self, Access, Ctx};
use crate::shared::Shared;
use crate::sys::Errno;
use crate::table;

/// How often the reclaimer looks at an exec hold (a kick, such as a
/// `vfork()` child's request, wakes it sooner).
pub(super) const EXEC_HOLD_LOOK_NS: u64 = 200_000;

/// Resolves the fault a `vfork()` child of the owner asks about, if one
/// waits.
pub(super) fn serve_vfork_child(budget: &Shared) {
    budget.vfork().serve(|addr, access| {
        let access = Access {
            write: access.write,
            protection: access.protection,
        };
        table::at_address(addr, |core, page| {
            fault::resolve(core, page, access, Ctx::Api)
        })
        .unwrap_or(Err(Errno(libc::ENOENT)))
    });
}
