//! fork(): a child must never read zeros for evicted pages.
//!
//! A child made by `fork()` inherits the regions' mappings but not their
//! userfaultfd registration (`EVENT_FORK` needs `CAP_SYS_PTRACE`, and a child
//! could not resolve its faults through the parent's uffd anyway). So a
//! `pthread_atfork` prepare hook pauses eviction on every budget and restores
//! every page of every region before the fork, waiting for restores other
//! threads have in flight (a page another thread is still decompressing
//! would otherwise be copied into the child as an empty entry, zeros): the
//! child gets plain memory with the full contents. The parent hook resumes
//! eviction; the parent's pages are now shared copy-on-write, which
//! `UFFDIO_MOVE` refuses with `EBUSY`, and eviction makes them exclusive
//! again (`MADV_POPULATE_WRITE`, see `evict.rs`).
//!
//! Cost: a fork briefly makes every region resident. `posix_spawn` and
//! `vfork` (what `std::process::Command` uses) run no atfork hooks and copy
//! nothing, so spawning programs costs nothing. Raw `clone()` without
//! `CLONE_VM` bypasses the hook: a child that then touches a page that was
//! evicted gets a message naming it and dies (the page keeps its poison
//! marker), never zeros.
#![allow(unsafe_code)]

use crate::fault::{self, Access, Ctx};
use crate::page::Tag;
use crate::sys;
use crate::table;
use std::sync::atomic::Ordering;
use std::sync::Once;

static INSTALL: Once = Once::new();

extern "C" fn prepare() {
    // A program handler interrupting us while we hold a page could wait on it.
    let _signals = sys::SignalGuard::block_async();
    let pid = sys::getpid();
    table::for_each(|core| {
        if core.owner_pid != pid {
            return;
        }
        // No eviction can start after this returns.
        core.budget.pause(&core.budget.fork_pause);
        for page in 0..core.page_count() {
            loop {
                let s = core.pages[page].load();
                match s.tag() {
                    Tag::Empty | Tag::Resident => break,
                    Tag::Staged | Tag::Stored | Tag::Evicting | Tag::Compressing => {
                        if fault::resolve(core, page, Access::READ, Ctx::Api).is_err() {
                            break;
                        }
                    }
                    // Another thread is restoring it: wait until it is in.
                    Tag::Restoring => sys::yield_now(),
                }
            }
        }
    });
}

extern "C" fn parent() {
    let pid = sys::getpid();
    table::for_each(|core| {
        if core.owner_pid == pid {
            core.budget.fork_pause.store(false, Ordering::SeqCst);
            core.budget.kick_reclaimer();
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
