//! A global allocator that forwards every call to the system allocator and
//! counts, per thread, the calls each thread makes; for tests that prove a
//! path allocates nothing (a region's fault path runs in a signal handler
//! that may have interrupted `malloc`, where allocating could deadlock).
//!
//! A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOCATOR: zpage_testsupport::alloc::PerThreadCounter =
//!     zpage_testsupport::alloc::PerThreadCounter;
//! ```
//!
//! and reads [`calls_here`] around the code under test, or wraps it in
//! [`calls_during`]. Counting is per thread, so the test harness's other
//! threads (reporting other tests, running them in parallel) neither count
//! nor get counted. A binary that forgot to install it would count nothing
//! and prove nothing: the first reading checks that a `Box` is counted and
//! panics otherwise.
//!
//! For a path that ends the process before control comes back (a page that
//! cannot be restored aborts), [`alarm`] makes every call the thread makes
//! write [`ALLOCATION_ALARM`] to standard error at once, for the parent
//! process to look for.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// What [`alarm`] writes to standard error on each allocator call.
pub const ALLOCATION_ALARM: &str = "ALLOCATION ON THE FAULT PATH";

/// The counting allocator; see the module documentation.
#[derive(Debug)]
pub struct PerThreadCounter;

thread_local! {
    // Const-initialised and without destructors: reading them from inside
    // the allocator never allocates, and they stay readable while a thread's
    // other locals are torn down.
    static CALLS: Cell<u64> = const { Cell::new(0) };
    static ALARMED: Cell<bool> = const { Cell::new(false) };
}

fn note_call() {
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
    if ALARMED.try_with(Cell::get).unwrap_or(false) {
        for part in [ALLOCATION_ALARM.as_bytes(), b"\n"] {
            // SAFETY: write(2) of a static buffer; it cannot allocate.
            unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
        }
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; counting touches only const thread-locals, which never allocate.
unsafe impl GlobalAlloc for PerThreadCounter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_call();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_call();
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_call();
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_call();
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Panics unless [`PerThreadCounter`] is the global allocator (checked once
/// per process, by counting a `Box`).
fn check_installed() {
    static CHECKED: AtomicBool = AtomicBool::new(false);
    if CHECKED.load(Ordering::Acquire) {
        return;
    }
    let before = CALLS.with(Cell::get);
    drop(std::hint::black_box(Box::new(0u64)));
    assert!(
        CALLS.with(Cell::get) > before,
        "the counting allocator is not installed: add \
         `#[global_allocator] static ALLOCATOR: zpage_testsupport::alloc::PerThreadCounter = \
         zpage_testsupport::alloc::PerThreadCounter;` to the test binary"
    );
    CHECKED.store(true, Ordering::Release);
}

/// How many allocator calls (allocations, reallocations and frees) the
/// calling thread has made so far.
pub fn calls_here() -> u64 {
    check_installed();
    CALLS.with(Cell::get)
}

/// Runs `f` and returns its result with the number of allocator calls the
/// calling thread made during it.
pub fn calls_during<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = calls_here();
    let result = f();
    (result, CALLS.with(Cell::get) - before)
}

/// While `on`, every allocator call of the calling thread writes
/// [`ALLOCATION_ALARM`] to standard error as it happens (for a path that
/// ends the process, where no count could be read afterwards).
pub fn alarm(on: bool) {
    check_installed();
    ALARMED.with(|a| a.set(on));
}
