//! `sigaction(SIGBUS)` and `signal(SIGBUS)` from the program.
//!
//! zpage resolves faults on evicted pages in its SIGBUS handler. A program
//! that installs its own SIGBUS handler (CPython's faulthandler, crash
//! reporters, JVMs) would put it in front and die at the first evicted page.
//! So while the library is active the program's action is recorded as the
//! one zpage chains to for faults that are not its own, and zpage's handler
//! stays installed; the program reads back the action it set, as without
//! zpage. Other signals go through unchanged.
#![allow(unsafe_code)]

use crate::real;
use crate::state;
use libc::c_int;

fn active() -> bool {
    state::get().is_some() && !state::FORKED_CHILD.load(std::sync::atomic::Ordering::Relaxed)
}

/// # Safety
/// `sigaction(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    if sig == libc::SIGBUS && active() {
        // What the program set last (or what was there before zpage).
        let previous = if act.is_null() {
            zpage_region::chained_sigbus()
        } else {
            // SAFETY: the caller passes a valid action.
            zpage_region::chain_sigbus_to(unsafe { &*act })
        };
        if !old.is_null() {
            // SAFETY: the caller passes a valid out pointer.
            unsafe { *old = previous };
        }
        return 0;
    }
    match real::sigaction() {
        // SAFETY: the C library's sigaction with the caller's arguments.
        Some(f) => unsafe { f(sig, act, old) },
        None => {
            crate::sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `signal(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if sig == libc::SIGBUS && active() {
        // SAFETY: a zeroed sigaction is valid; BSD semantics as glibc's signal().
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        return zpage_region::chain_sigbus_to(&act).sa_sigaction;
    }
    match real::signal() {
        // SAFETY: the C library's signal with the caller's arguments.
        Some(f) => unsafe { f(sig, handler) },
        None => libc::SIG_ERR,
    }
}
