//! What the fork hooks (`fork.rs`) share with the fault path: the resolve
//! gate the prepare hook closes ([`ForkGate`]), the forking thread's pass
//! through it ([`in_fork_hook`]), and a budget's state in a child that took
//! it over ([`ForkedChild`]).
//!
//! The gate is a Dekker pair (resolutions in flight and the closed flag),
//! so every access to them is sequentially consistent: a resolution counts
//! itself in and then looks at the gate; the prepare hook closes the gate
//! and then waits for the count to reach zero. No page is half restored at
//! the instant of a fork.
//!
//! Async-signal-safe: atomics, `sched_yield` and const-initialised
//! thread-locals without destructors only.

use crate::sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

thread_local! {
    /// Set on the forking thread from prepare to the parent's or child's
    /// hook: its own faults (the allocator's memory may lie in a region)
    /// pass the gate it closed. Const-initialised, no destructor: read in
    /// the signal handler without allocating.
    static IN_FORK_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// True on the thread running the fork hooks, between prepare and the
/// parent's or child's hook.
pub fn in_fork_hook() -> bool {
    IN_FORK_HOOK.with(|f| f.get())
}

/// Marks the calling thread as the one running the fork hooks (or no longer).
pub fn set_in_fork_hook(on: bool) {
    IN_FORK_HOOK.with(|f| f.set(on));
}

/// A budget's resolve gate.
#[derive(Debug, Default)]
pub struct ForkGate {
    /// Fault resolutions in flight.
    resolving: AtomicUsize,
    /// Closed by the fork prepare hook for as long as the fork takes.
    closed: AtomicBool,
}

/// A resolution in flight: counted until dropped.
#[derive(Debug)]
pub struct Resolving<'a>(&'a ForkGate);

impl Drop for Resolving<'_> {
    fn drop(&mut self) {
        self.0.resolving.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ForkGate {
    pub const fn new() -> ForkGate {
        ForkGate {
            resolving: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Enters a fault resolution; waits while a fork is being prepared.
    /// The gate is closed only by the fork prepare hook, which never waits
    /// on the calling thread: zpage's own threads (the reclaimer may fault
    /// on the program allocator's memory while the prepare hook waits for
    /// it) and the forking thread pass at once.
    pub fn enter(&self) -> Resolving<'_> {
        if crate::threads::on_zpage_thread() || in_fork_hook() {
            self.resolving.fetch_add(1, Ordering::SeqCst);
            return Resolving(self);
        }
        loop {
            self.resolving.fetch_add(1, Ordering::SeqCst);
            let resolving = Resolving(self);
            if !self.closed.load(Ordering::SeqCst) {
                return resolving;
            }
            drop(resolving);
            while self.closed.load(Ordering::SeqCst) {
                sys::yield_now();
            }
        }
    }

    /// Closes the gate and waits until no resolution is in flight.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        while self.resolving.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
    }

    pub fn open(&self) {
        self.closed.store(false, Ordering::SeqCst);
    }
}

/// Which process a budget's regions belong to, and, in a child made by
/// `fork()` that took the budget over, that child's own accounting: its
/// threads stayed in the parent, so faults resolve from the child's
/// copy-on-write copy of the pool, never free a blob, and drop clean pages
/// the child restored to stay within the budget (`fork/child.rs`).
#[derive(Debug)]
pub struct ForkedChild {
    /// The process whose regions these are: the creator, or a child made
    /// by `fork()` once its hook took the budget over.
    owner_pid: AtomicI32,
    /// Set in a child that took the budget over.
    taken_over: AtomicBool,
    /// Pages the child restored and still holds (its own budget).
    restored: AtomicUsize,
    /// Where the child's search for a clean page to drop goes on.
    hand: AtomicUsize,
    /// Non-zero when the child could not take the budget over (the errno
    /// of the failed call): its faults end the process with it.
    setup_errno: AtomicI32,
}

impl ForkedChild {
    /// A budget made by process `pid`.
    pub fn new(pid: i32) -> ForkedChild {
        ForkedChild {
            owner_pid: AtomicI32::new(pid),
            taken_over: AtomicBool::new(false),
            restored: AtomicUsize::new(0),
            hand: AtomicUsize::new(0),
            setup_errno: AtomicI32::new(0),
        }
    }

    /// The process these regions belong to.
    pub fn owner_pid(&self) -> i32 {
        self.owner_pid.load(Ordering::Acquire)
    }

    /// True in a forked child that took the budget over.
    pub fn is_child(&self) -> bool {
        self.taken_over.load(Ordering::Acquire)
    }

    /// The child hook: the calling process (`pid`) takes the budget over.
    pub fn take_over(&self, pid: i32) {
        self.taken_over.store(true, Ordering::SeqCst);
        self.restored.store(0, Ordering::SeqCst);
        self.hand.store(0, Ordering::SeqCst);
        self.owner_pid.store(pid, Ordering::Release);
    }

    /// The child could not take the budget over: `errno` of the failed call.
    pub fn setup_failed(&self, errno: i32) {
        self.setup_errno.store(errno, Ordering::SeqCst);
    }

    /// The errno that kept the child from taking the budget over, or 0.
    pub fn setup_errno(&self) -> i32 {
        self.setup_errno.load(Ordering::Acquire)
    }

    /// Pages the child restored and still holds.
    pub fn restored(&self) -> usize {
        self.restored.load(Ordering::Acquire)
    }

    pub fn count_restored(&self) {
        self.restored.fetch_add(1, Ordering::AcqRel);
    }

    pub fn count_dropped(&self) {
        self.restored.fetch_sub(1, Ordering::AcqRel);
    }

    /// The search position, advanced by one (the value before).
    pub fn advance_hand(&self) -> usize {
        self.hand.fetch_add(1, Ordering::AcqRel)
    }

    /// Moves the search position from `seen` to `next`, unless another
    /// fault moved it meanwhile.
    pub fn move_hand(&self, seen: usize, next: usize) {
        let _ = self
            .hand
            .compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed);
    }
}
