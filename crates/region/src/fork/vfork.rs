//! A `vfork()` child's faults, served by its parent's reclaimer when the
//! child closed its copy of the userfaultfd ([`VforkHelp`]), and the
//! eviction hold its `exec` needs (in `evict::gate`).
//!
//! A `vfork()` (or `posix_spawn`) child runs in its parent's memory until it
//! calls `exec` or exits: the regions there are the parent's, and so are
//! the budget's threads, which keep running (only the vforking thread is
//! suspended). While the child's copy of the budget's userfaultfd is open,
//! it resolves its faults itself, as a thread of the parent would
//! (`RegionCore::vfork_child_can_resolve`). Spawn libraries close every
//! descriptor before `exec` (Python's `subprocess` with `close_fds=True`,
//! its default): such a child asks the parent's reclaimer, which holds the
//! descriptor, to restore the page, and waits for the answer.
//!
//! Its `exec` needs the pages holding the path, `argv` and `envp` resident
//! until the kernel has copied them: the exec hold of `evict::gate` keeps
//! the reclaimer from moving them out again meanwhile.
//!
//! **Protocol.** One request at a time, in `state`: `IDLE`, then `CLAIMED`
//! by a child, which fills in the address and access and moves it to
//! `REQUESTED` and kicks the reclaimer; the reclaimer resolves, stores the
//! result and moves it to `DONE`; the child reads the result and moves it
//! back to `IDLE`. Each side stores its own words before the state and
//! reads the other's after it (SeqCst throughout), and sleeps on `state`
//! with a futex that compares it, so no wakeup is lost. The futexes are
//! private: a `vfork()` child shares its parent's memory, so they are the
//! same futex words for both.
//!
//! Async-signal-safe: the child's side runs in its SIGBUS or SIGSYS
//! handler and uses atomics, futexes, `kcmp` and `nanosleep` only.

use crate::sys::{self, Errno};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};

/// The faulting access a child asks about (`fault::Access`'s two bits:
/// this module stays below the fault path, which it serves).
#[derive(Clone, Copy, Debug)]
pub struct PageAccess {
    pub write: bool,
    pub protection: bool,
}

const IDLE: u32 = 0;
const CLAIMED: u32 = 1;
const REQUESTED: u32 = 2;
const DONE: u32 = 3;

/// How long a child sleeps between looks while it waits (a kick wakes the
/// reclaimer; this only bounds a missed wakeup of the child).
const WAIT_NS: u64 = 1_000_000;

/// A child gives up (and ends with a message) after waiting this long for
/// a reclaimer that does not answer: the budget is being torn down.
const GIVE_UP_NS: u64 = 30_000_000_000;

/// What a `vfork()` child of the budget's owner shares with its reclaimer.
#[derive(Debug, Default)]
pub struct VforkHelp {
    state: AtomicU32,
    addr: AtomicUsize,
    write: AtomicBool,
    protection: AtomicBool,
    /// 0, or the errno of the reclaimer's resolution.
    errno: AtomicI32,
}

impl VforkHelp {
    // ---- The child's side ----

    /// Asks the reclaimer to resolve the fault at `addr` and waits for its
    /// answer. `kick` wakes the reclaimer; `stopping` says the budget is
    /// going away (its reclaimer will not answer).
    pub fn ask(
        &self,
        addr: usize,
        access: PageAccess,
        kick: &dyn Fn(),
        stopping: &dyn Fn() -> bool,
    ) -> Result<(), Errno> {
        let started = sys::now_ns();
        let gave_up = || stopping() || sys::now_ns() - started > GIVE_UP_NS;
        // Another child of another of the parent's threads may be asking.
        while let Err(seen) =
            self.state
                .compare_exchange(IDLE, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
        {
            if gave_up() {
                return Err(Errno(libc::ETIMEDOUT));
            }
            sys::futex_wait(&self.state, seen, WAIT_NS);
        }
        self.addr.store(addr, Ordering::SeqCst);
        self.write.store(access.write, Ordering::SeqCst);
        self.protection.store(access.protection, Ordering::SeqCst);
        self.state.store(REQUESTED, Ordering::SeqCst);
        kick();
        loop {
            let seen = self.state.load(Ordering::SeqCst);
            if seen == DONE {
                break;
            }
            if gave_up() {
                // Taken back only if the reclaimer has not started on it.
                if self
                    .state
                    .compare_exchange(REQUESTED, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    sys::futex_wake_all(&self.state);
                    return Err(Errno(libc::ETIMEDOUT));
                }
            }
            sys::futex_wait(&self.state, seen, WAIT_NS);
        }
        let errno = self.errno.load(Ordering::SeqCst);
        self.state.store(IDLE, Ordering::SeqCst);
        sys::futex_wake_all(&self.state);
        match errno {
            0 => Ok(()),
            e => Err(Errno(e)),
        }
    }

    // ---- The reclaimer's side ----

    /// Serves a child's request, if one waits, with `resolve`.
    pub fn serve(&self, resolve: impl FnOnce(usize, PageAccess) -> Result<(), Errno>) {
        if self.state.load(Ordering::SeqCst) != REQUESTED {
            return;
        }
        let addr = self.addr.load(Ordering::SeqCst);
        let access = PageAccess {
            write: self.write.load(Ordering::SeqCst),
            protection: self.protection.load(Ordering::SeqCst),
        };
        // Started only if the child has not given up meanwhile.
        if self
            .state
            .compare_exchange(REQUESTED, CLAIMED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        let errno = match resolve(addr, access) {
            Ok(()) => 0,
            Err(Errno(e)) => e,
        };
        self.errno.store(errno, Ordering::SeqCst);
        self.state.store(DONE, Ordering::SeqCst);
        sys::futex_wake_all(&self.state);
    }
}
