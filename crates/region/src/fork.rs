//! fork(): the child must not read zeros for evicted pages.
//!
//! A child made by `fork()` inherits the region's mapping but not its
//! userfaultfd registration (`EVENT_FORK` needs `CAP_SYS_PTRACE`, and a child
//! could not resolve its faults through the parent's uffd anyway), so pages
//! zpage holds evicted would read as zeros there. A `pthread_atfork` prepare
//! hook therefore pauses eviction and restores every page of every region
//! before the fork; the child gets plain memory with the full contents. The
//! parent hook resumes eviction; the parent's pages are now shared
//! copy-on-write, which `UFFDIO_MOVE` refuses with `EBUSY`, and the reclaimer
//! makes them exclusive again (see reclaim.rs).
//!
//! Cost: a fork briefly makes the whole region resident. `posix_spawn` and
//! `vfork` (what `std::process::Command` uses) run no atfork hooks and copy
//! nothing, so spawning programs costs nothing. Raw `clone()` without
//! `CLONE_VM` bypasses the hook and is not supported.
#![allow(unsafe_code)]

use crate::signal;
use std::sync::atomic::Ordering;
use std::sync::Once;

static INSTALL: Once = Once::new();

extern "C" fn prepare() {
    let pid = crate::sys::getpid();
    signal::for_each_region(|inner| {
        if inner.owner_pid != pid {
            return;
        }
        // No eviction can start after this returns.
        inner.pause(&inner.fork_pause);
        let _ = crate::region::restore_all(inner);
    });
}

extern "C" fn parent() {
    let pid = crate::sys::getpid();
    signal::for_each_region(|inner| {
        if inner.owner_pid == pid {
            inner.fork_pause.store(false, Ordering::SeqCst);
            inner.kick_reclaimer();
        }
    });
}

/// Registers the hooks once per process.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registers two extern "C" functions that live for the whole
        // program; pthread_atfork has no other preconditions.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), None);
        }
    });
}
