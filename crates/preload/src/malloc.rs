//! The `malloc` family, for large allocations.
//!
//! glibc's `malloc` makes its large chunks with its own internal `mmap`,
//! which no interposer sees, and grows them with its internal `mremap`. So
//! allocations at or above the size threshold are served here, each by a
//! region of its own (page-aligned, so `free` tells ours apart with one test
//! of the pointer's low bits before looking it up); everything smaller, and
//! everything while the library is inactive, goes to the next allocator
//! in the dynamic linker's order (`dlsym(RTLD_NEXT)`): the C library's, or
//! one the program links as a shared library (Debian's Redis links
//! jemalloc, and calls jemalloc's own `malloc_usable_size` and `mallctl` on
//! what `malloc` returned, so every call of the family must reach the same
//! allocator). The mappings that allocator makes reach the `mmap`
//! interposer. While the next `malloc` is being looked up (the first call
//! in the process, before any thread is started in practice), a call made
//! by the lookup itself goes to glibc's `__libc_malloc` family instead.
//!
//! zpage's own threads never reach the program's allocator: their calls
//! (the C library's thread-local destructor registration, zstd's contexts,
//! DNS lookups) are served from zpage's private heap (`alloc::c_malloc`),
//! and `free` and `realloc` recognise its blocks by address on any thread.
#![allow(unsafe_code)]

use crate::alloc;
use crate::mm::{copy_nonzero_pages, next_munmap};
use crate::real;
use crate::state::{self, Made};
use crate::sys::{self, Inside};
use libc::{c_int, c_void, size_t};
use std::sync::atomic::{AtomicBool, Ordering};
use zpage_codec::PAGE_SIZE;

extern "C" {
    fn __libc_malloc(n: size_t) -> *mut c_void;
    fn __libc_calloc(n: size_t, m: size_t) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, n: size_t) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(a: size_t, n: size_t) -> *mut c_void;
}

/// True while the first call looks the next allocator up.
static LOOKING_UP: AtomicBool = AtomicBool::new(false);

/// The next allocator's function, or `None` while it is being looked up
/// (or if there is none, which a process with a C library cannot have).
macro_rules! next_allocator {
    ($name:ident) => {{
        if real::slot::$name.load(Ordering::Acquire) != 0 {
            real::$name()
        } else if LOOKING_UP.swap(true, Ordering::AcqRel) {
            None
        } else {
            let f = real::$name();
            LOOKING_UP.store(false, Ordering::Release);
            f
        }
    }};
}

/// # Safety
/// `malloc(3)`'s contract.
unsafe fn next_malloc(n: size_t) -> *mut c_void {
    // SAFETY: the caller keeps malloc's contract.
    unsafe {
        match next_allocator!(malloc) {
            Some(f) => f(n),
            None => __libc_malloc(n),
        }
    }
}

/// # Safety
/// `free(3)`'s contract.
unsafe fn next_free(p: *mut c_void) {
    // SAFETY: the caller keeps free's contract.
    unsafe {
        match next_allocator!(free) {
            Some(f) => f(p),
            None => __libc_free(p),
        }
    }
}

/// A region for an allocation of `n` bytes, if it should and can have one.
fn place(n: usize, align: usize) -> Option<*mut c_void> {
    let state = state::placing()?;
    if n < state.config.min_mapping_bytes || align > PAGE_SIZE {
        return None;
    }
    let _inside = Inside::enter();
    state.place(n, true).map(|base| base as *mut c_void)
}

/// The size of the region allocation at `p`, if `p` is one.
fn ours(p: *mut c_void) -> Option<usize> {
    if p.is_null() || !(p as usize).is_multiple_of(PAGE_SIZE) || sys::inside() {
        return None;
    }
    let state = state::get()?;
    if !state.may_overlap(p as usize, 1) {
        return None;
    }
    let _inside = Inside::enter();
    state
        .len_of(p as usize, Made::ByMalloc)
        .or_else(|| state.plain_allocation(p as usize, false))
}

/// Frees the region allocation at `p`; false if `p` is not one.
fn free_ours(p: *mut c_void) -> bool {
    if p.is_null() || !(p as usize).is_multiple_of(PAGE_SIZE) || sys::inside() {
        return false;
    }
    let Some(state) = state::get() else {
        return false;
    };
    if !state.may_overlap(p as usize, 1) {
        return false;
    }
    let _inside = Inside::enter();
    match state.take_exact(p as usize, Made::ByMalloc) {
        Some(placed) => {
            let (base, len) = (placed.base, placed.len);
            state.release(placed);
            next_munmap(base as *mut c_void, len);
            true
        }
        None => match state.plain_allocation(p as usize, true) {
            Some(len) => {
                next_munmap(p, len);
                true
            }
            None => false,
        },
    }
}

/// # Safety
/// `malloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn malloc(n: size_t) -> *mut c_void {
    if alloc::serves_this_thread() {
        return alloc::c_malloc(n, 1).cast();
    }
    if let Some(p) = place(n, 1) {
        return p;
    }
    // SAFETY: the next allocator, `malloc`'s contract.
    unsafe { next_malloc(n) }
}

/// # Safety
/// `calloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: size_t, m: size_t) -> *mut c_void {
    if alloc::serves_this_thread() {
        let Some(total) = n.checked_mul(m) else {
            return std::ptr::null_mut();
        };
        let p = alloc::c_malloc(total, 1);
        if !p.is_null() {
            // SAFETY: a fresh block of `total` bytes.
            unsafe { std::ptr::write_bytes(p, 0, total) };
        }
        return p.cast();
    }
    if let Some(total) = n.checked_mul(m) {
        // A fresh region reads as zeros.
        if let Some(p) = place(total, 1) {
            return p;
        }
    }
    // SAFETY: the next allocator (it checks the overflow itself).
    unsafe {
        match next_allocator!(calloc) {
            Some(f) => f(n, m),
            None => __libc_calloc(n, m),
        }
    }
}

/// # Safety
/// `free(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    if alloc::owns(p.cast()) {
        // SAFETY: a live block of zpage's heap (free's contract).
        return unsafe { alloc::c_free(p.cast()) };
    }
    if !free_ours(p) {
        // SAFETY: not ours, so the next allocator's.
        unsafe { next_free(p) }
    }
}

/// # Safety
/// `realloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, n: size_t) -> *mut c_void {
    if alloc::owns(p.cast()) || (p.is_null() && alloc::serves_this_thread()) {
        // SAFETY: null or a live block of zpage's heap (realloc's contract).
        return unsafe { alloc::c_realloc(p.cast(), n) }.cast();
    }
    if p.is_null() {
        // SAFETY: same contract.
        return unsafe { malloc(n) };
    }
    if let Some(len) = ours(p) {
        if n == 0 {
            free_ours(p);
            return std::ptr::null_mut();
        }
        let min = state::get().map_or(usize::MAX, |s| s.config.min_mapping_bytes);
        if n <= len && n >= min / 2 {
            return p;
        }
        let q = if n >= min { place(n, 1) } else { None };
        let (q, fresh) = match q {
            Some(q) => (q, true),
            // SAFETY: the C library's allocator.
            None => (unsafe { next_malloc(n) }, false),
        };
        if q.is_null() {
            return q;
        }
        let keep = len.min(n);
        if fresh {
            // SAFETY: both ranges are live for `keep` bytes and distinct.
            unsafe { copy_nonzero_pages(p as usize, q as usize, keep) };
        } else {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, keep) };
        }
        free_ours(p);
        return q;
    }
    if let Some(q) = place(n, 1) {
        // A C library chunk growing past the threshold moves into a region.
        let usable = match real::malloc_usable_size() {
            // SAFETY: `p` is a live C library allocation.
            Some(f) => unsafe { f(p) },
            None => 0,
        };
        if usable > 0 {
            // SAFETY: `p` is valid for `usable` bytes, `q` for `n`; distinct.
            unsafe { copy_nonzero_pages(p as usize, q as usize, usable.min(n)) };
            // SAFETY: the C library's allocation, no longer used.
            unsafe { next_free(p) };
            return q;
        }
        free_ours(q);
    }
    // SAFETY: the next allocator's allocation and allocator.
    unsafe {
        match next_allocator!(realloc) {
            Some(f) => f(p, n),
            None => __libc_realloc(p, n),
        }
    }
}

fn aligned(align: size_t, n: size_t) -> *mut c_void {
    if alloc::serves_this_thread() {
        return alloc::c_malloc(n, align).cast();
    }
    if let Some(p) = place(n, align) {
        return p;
    }
    // SAFETY: the next allocator (it checks the alignment).
    unsafe {
        match next_allocator!(memalign) {
            Some(f) => f(align, n),
            None => __libc_memalign(align, n),
        }
    }
}

/// # Safety
/// `posix_memalign(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: size_t, n: size_t) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let p = aligned(align, n);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid out pointer.
    unsafe { *out = p };
    0
}

/// # Safety
/// `aligned_alloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: size_t, n: size_t) -> *mut c_void {
    aligned(align, n)
}

/// # Safety
/// `memalign(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn memalign(align: size_t, n: size_t) -> *mut c_void {
    aligned(align, n)
}

/// # Safety
/// `valloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn valloc(n: size_t) -> *mut c_void {
    aligned(PAGE_SIZE, n)
}

/// # Safety
/// `pvalloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(n: size_t) -> *mut c_void {
    aligned(PAGE_SIZE, n.next_multiple_of(PAGE_SIZE).max(PAGE_SIZE))
}

/// # Safety
/// `malloc_usable_size(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if alloc::owns(p.cast()) {
        // SAFETY: a live block of zpage's heap.
        return unsafe { alloc::c_usable_size(p.cast()) };
    }
    if let Some(len) = ours(p) {
        return len;
    }
    match real::malloc_usable_size() {
        // SAFETY: a C library allocation (or null).
        Some(f) => unsafe { f(p) },
        None => 0,
    }
}
