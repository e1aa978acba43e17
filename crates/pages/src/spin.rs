//! The lock of zpage's own heaps: this crate's page heap and the preload
//! library's private heap (the allocator of zpage's threads).
//!
//! Both are taken where a futex-based lock is out of place: inside the
//! program's `malloc` and `mmap` calls, from fork hooks, and by threads
//! that must not park on a lock the program's allocator might hold. Their
//! critical sections are short (a few list operations, or one dlmalloc
//! call), so waiting is spinning, then `sched_yield`: no system call but
//! that one, no allocation, nothing to register.
//!
//! Not reentrant: a thread that takes it again while holding it spins
//! forever. A forked child whose parent had another thread holding it
//! inherits it held; each heap resets it in its child hook
//! ([`SpinLock::force_unlock`]).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// A value behind a spin lock.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: `value` is reached only through `with` and `get_unlocked`; the
// first holds the lock, the second's caller promises no other thread runs.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> std::fmt::Debug for SpinLock<T> {
    // The value is not shown: reading it would take the lock.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("locked", &self.locked.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Spins before yielding the CPU: a holder on another CPU is usually done
/// within this many pause instructions.
const SPINS_BEFORE_YIELD: u32 = 64;

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> SpinLock<T> {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value under the lock. `f` must not take this lock
    /// again.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        self.lock();
        // SAFETY: the lock is held, so no other thread reaches the value.
        let result = f(unsafe { &mut *self.value.get() });
        self.unlock();
        result
    }

    /// Takes the lock and keeps it after the call returns (a fork's prepare
    /// hook, so that the child does not inherit it taken by a thread it
    /// does not have). Give it back with [`SpinLock::unlock`].
    pub fn lock(&self) {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                // sched_yield, async-signal-safe.
                std::thread::yield_now();
            }
        }
    }

    /// Gives back a lock this thread took with [`SpinLock::lock`].
    pub fn unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// In a forked child, which has one thread: frees the lock whoever
    /// held it in the parent.
    pub fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }

    /// The value without the lock.
    ///
    /// # Safety
    /// No other thread may run (a forked child's hook), and the caller
    /// must not hold a reference from [`SpinLock::with`].
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_unlocked(&self) -> &mut T {
        // SAFETY: the caller's promise: nothing else reaches the value.
        unsafe { &mut *self.value.get() }
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;

    #[test]
    fn threads_add_under_the_lock_and_lose_no_increment() {
        static COUNT: SpinLock<u64> = SpinLock::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100_000 {
                        COUNT.with(|c| *c += 1);
                    }
                });
            }
        });
        assert_eq!(COUNT.with(|c| *c), 400_000);
    }

    #[test]
    fn a_lock_held_past_the_call_blocks_until_unlocked() {
        let lock = SpinLock::new(0u32);
        lock.lock();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| lock.with(|v| *v));
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!waiter.is_finished(), "the lock was taken while held");
            lock.unlock();
            assert_eq!(waiter.join().unwrap(), 0);
        });
    }
}
