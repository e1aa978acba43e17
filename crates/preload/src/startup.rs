//! Starting the library: reading its configuration, installing the
//! system-call trap and the fork hooks, and making the state regions are
//! placed from (the budget itself starts with the first placement).
//!
//! It runs once, on the thread running the constructors, before the
//! program's `main`: from this library's constructor, or earlier, from the
//! first `mmap` a constructor of a library loaded after this one makes
//! ([`ensure_started`]).

use crate::{alloc, config, io, real, report, state, stdio, sys};
use std::sync::atomic::{AtomicU8, Ordering};

extern "C" fn fork_prepare() {
    if let Some(state) = state::get() {
        state.forks.fetch_add(1, Ordering::Relaxed);
    }
    state::lock_for_fork();
    alloc::lock_for_fork();
}

extern "C" fn fork_parent() {
    alloc::unlock_after_fork();
    state::unlock_after_fork();
}

extern "C" fn fork_child() {
    state::FORKED_CHILD.store(true, Ordering::Relaxed);
    alloc::after_fork_in_child();
    state::unlock_after_fork();
}

fn inactive(why: String, print: bool) {
    if print {
        sys::stderr_line(&format!("zpage: {why}; the program runs without zpage\n"));
    }
    let _ = state::INACTIVE.set(why);
}

/// Where the start is: [`NOT_STARTED`], [`STARTING`] (on this thread: the
/// constructors run on one thread, and the start's own calls pass through)
/// or [`STARTED`]. It runs once: from the library's constructor, or from
/// the first `mmap` that comes before it.
static START_STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
const NOT_STARTED: u8 = 0;
const STARTING: u8 = 1;
const STARTED: u8 = 2;

/// Starts the library if nothing has yet. The interposed `mmap` calls it
/// first: the C library's loader runs the constructors of libraries loaded
/// after this one (those the program links to) before this library's, so
/// an allocator's constructor (jemalloc's, in Redis) maps its first memory
/// before this library's constructor runs. Started there, that memory goes
/// to the arena instead of staying plain for good (3-5 MiB of Redis's at
/// a memory max, 8 MiB mapped).
pub fn ensure_started() {
    if START_STATE.load(Ordering::Acquire) == STARTED {
        return;
    }
    if START_STATE
        .compare_exchange(NOT_STARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        start_now();
        START_STATE.store(STARTED, Ordering::Release);
    }
}

/// The library's constructor.
pub extern "C" fn start() {
    ensure_started();
}

fn start_now() {
    let _inside = sys::Inside::enter();
    real::resolve();
    io::resolve();
    stdio::look_up();
    // Registered before the budget (started with the first region)
    // registers the region layer's own hooks:
    // prepare hooks run in reverse order, so the region layer quiesces its
    // budgets (waiting on zpage's threads, which allocate) before these
    // take the private heap's and the region list's locks; child hooks run
    // in order, so the heap is usable again when the region layer's child
    // hook allocates.
    // SAFETY: registers functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    match config::from_env(|k| std::env::var(k).ok()) {
        Ok(None) => inactive(
            format!(
                "{} is not set (zpage run sets it; alone, set it to a budget in bytes)",
                config::BUDGET_ENV
            ),
            false,
        ),
        Err(why) => inactive(why, true),
        Ok(Some(config)) => {
            // Before any region: the trap reserves the range regions are
            // placed in.
            let trapped = match config.syscalls {
                config::Syscalls::Trap => zpage_syscalls::trap::install().map(|_| ()),
                config::Syscalls::Wrappers => Ok(()),
            };
            match trapped {
                Err(why) => inactive(
                    format!(
                        "system calls on compressed memory cannot be served ({why}); {}=wrappers serves only the C library's wrapped functions",
                        config::SYSCALLS_ENV
                    ),
                    true,
                ),
                Ok(()) => {
                    if let Err(why) = state::start(config) {
                        inactive(why, true);
                    }
                }
            }
        }
    }
    // SAFETY: registers a function that lives as long as the process.
    unsafe {
        libc::atexit(report::write_at_exit);
    }
}
