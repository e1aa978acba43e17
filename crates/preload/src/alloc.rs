//! The memory allocator of the library's own Rust code.
//!
//! The library runs inside the program's `malloc`, `mmap` and `free` calls.
//! glibc's `malloc` holds its arena lock while it calls `mmap`, and a runtime
//! with its own allocator (jemalloc in Redis, V8) holds its own; if zpage's
//! code called the C library's `malloc` from there it could wait forever on a
//! lock its own thread holds. So Rust code in this library allocates from a
//! private dlmalloc heap whose memory comes from raw `mmap` system calls,
//! which no interposer (ours included) sees.
//!
//! One lock guards the heap (zpage allocates rarely: region bookkeeping,
//! reports). It is a spin-then-yield flag rather than a pthread mutex so a
//! forked child can reset it (see [`after_fork_in_child`]).
#![allow(unsafe_code)]

use dlmalloc::{Allocator, Dlmalloc};
use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// Pages straight from the kernel.
struct RawPages;

// SAFETY: the methods below return fresh private anonymous mappings (or
// null), free only what they were given, and report what mmap guarantees
// (zeroed memory, 4 KiB pages).
unsafe impl Allocator for RawPages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let p = crate::sys::raw_mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            (std::ptr::null_mut(), 0, 0)
        } else {
            (p.cast(), size, 0)
        }
    }

    fn remap(&self, ptr: *mut u8, oldsize: usize, newsize: usize, can_move: bool) -> *mut u8 {
        let flags = if can_move { libc::MREMAP_MAYMOVE } else { 0 };
        let p = crate::sys::raw_mremap(ptr.cast(), oldsize, newsize, flags);
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }

    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        crate::sys::raw_mremap(ptr.cast(), oldsize, newsize, 0) != libc::MAP_FAILED
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        crate::sys::raw_munmap(ptr.cast(), size) == 0
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        zpage_codec::PAGE_SIZE
    }
}

/// The library's global allocator.
pub struct PrivateHeap {
    locked: AtomicBool,
    heap: UnsafeCell<Dlmalloc<RawPages>>,
}

// SAFETY: `heap` is only touched by the thread that holds `locked`.
unsafe impl Sync for PrivateHeap {}

impl PrivateHeap {
    pub const fn new() -> PrivateHeap {
        PrivateHeap {
            locked: AtomicBool::new(false),
            heap: UnsafeCell::new(Dlmalloc::new_with_allocator(RawPages)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Dlmalloc<RawPages>) -> R) -> R {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins > 64 {
                // SAFETY: no arguments.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the flag gives this thread sole access until released.
        let r = f(unsafe { &mut *self.heap.get() });
        self.locked.store(false, Ordering::Release);
        r
    }
}

impl Default for PrivateHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: dlmalloc implements the GlobalAlloc contract for the layouts it is
// given; every call runs under the heap's lock.
unsafe impl GlobalAlloc for PrivateHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { h.malloc(layout.size(), layout.align()) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { h.calloc(layout.size(), layout.align()) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { h.free(ptr, layout.size(), layout.align()) })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|h| unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) })
    }
}

#[global_allocator]
pub static HEAP: PrivateHeap = PrivateHeap::new();

/// Taken by the fork prepare hook so the child never inherits the heap
/// locked by a thread that does not exist there.
pub fn lock_for_fork() {
    while HEAP
        .locked
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::hint::spin_loop();
    }
}

/// The parent's side of [`lock_for_fork`].
pub fn unlock_after_fork() {
    HEAP.locked.store(false, Ordering::Release);
}

/// The child's side of [`lock_for_fork`].
pub fn after_fork_in_child() {
    HEAP.locked.store(false, Ordering::Release);
}
