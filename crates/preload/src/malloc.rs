//! The `malloc` family.
//!
//! glibc's `malloc` grows its heap with `brk` and makes its large chunks
//! with its own internal `mmap`, both out of any interposer's sight: small
//! objects (CPython's, a C program's, a runtime's off-heap data) would stay
//! plain memory. So when the program's allocator is the C library's and
//! zpage is configured, the family is served by mimalloc (statically
//! linked, the `libmimalloc-sys` crate), which takes its memory with
//! `mmap`: the memory-map interposer places it in the arena, so objects of
//! every size are compressed memory. A program that brings its own
//! allocator (Debian's Redis links jemalloc, and calls jemalloc's own
//! `malloc_usable_size` and `mallctl` on what `malloc` returned, so every
//! call of the family must reach the same allocator) keeps it: its mappings
//! reach the arena the same way.
//!
//! Pointers are told apart by where they come from, whoever frees them:
//! zpage's private heap (`alloc::owns`), mimalloc's memory
//! (`mi_is_in_heap_region`), and anything else is the next allocator's
//! (the C library's, for what it allocated before the first call here).
//!
//! zpage's own threads never reach the program's allocator: their calls
//! (the C library's thread-local destructor registration, zstd's contexts,
//! DNS lookups) are served from zpage's private heap (`alloc::c_malloc`).
//!
//! While the next `malloc` is being looked up (the first call in the
//! process, before any thread is started in practice), a call made by the
//! lookup itself goes to glibc's `__libc_malloc` family instead.
#![allow(unsafe_code)]

use crate::alloc;
use crate::real;
use libc::{c_int, c_void, size_t};
use libmimalloc_sys as mi;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

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

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const NEXT: u8 = 2;
/// Which allocator serves the program: decided at the first call.
static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// mimalloc when zpage is configured (its budget variable is set), serves
/// system calls with the trap (not `wrappers`), and the program's allocator
/// is the C library's; the next allocator otherwise.
fn uses_mimalloc() -> bool {
    match CHOICE.load(Ordering::Acquire) {
        MIMALLOC => return true,
        NEXT => return false,
        _ => {}
    }
    if LOOKING_UP.load(Ordering::Acquire) {
        // The lookup's own allocations: the C library's.
        return false;
    }
    // SAFETY: getenv with a NUL-terminated name; it allocates nothing.
    let configured =
        unsafe { !libc::getenv(crate::config::BUDGET_ENV_C.as_ptr().cast()).is_null() };
    // Under `wrappers` the C library's own system calls on evicted memory
    // fail: its heap's objects (what it hands to those calls) stay plain.
    // SAFETY: as above.
    let wrappers = unsafe {
        let v = libc::getenv(crate::config::SYSCALLS_ENV_C.as_ptr().cast());
        !v.is_null() && std::ffi::CStr::from_ptr(v).to_bytes() == b"wrappers"
    };
    let next_is_libc = match next_allocator!(malloc) {
        Some(f) => f as usize == __libc_malloc as *const () as usize,
        None => return false,
    };
    let choice = if configured && !wrappers && next_is_libc {
        // SAFETY: setting an option before mimalloc's first allocation.
        // (Transparent huge pages are off in its build: `no_thp`.)
        unsafe { mi::mi_option_set(mi::mi_option_large_os_pages, 0) };
        MIMALLOC
    } else {
        NEXT
    };
    match CHOICE.compare_exchange(UNDECIDED, choice, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => choice == MIMALLOC,
        Err(decided) => decided == MIMALLOC,
    }
}

/// True if mimalloc allocated `p`.
fn mimalloc_owns(p: *mut c_void) -> bool {
    // SAFETY: a lookup in mimalloc's segment map; any pointer value is
    // accepted.
    CHOICE.load(Ordering::Acquire) == MIMALLOC && unsafe { mi::mi_is_in_heap_region(p) }
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

fn next_usable_size(p: *mut c_void) -> size_t {
    match real::malloc_usable_size() {
        // SAFETY: an allocation of the next allocator (or null).
        Some(f) => unsafe { f(p) },
        None => 0,
    }
}

/// The entry points the dynamic loader calls (`malloc`, `calloc`,
/// `realloc`: its `__rtld_malloc` family) hand their return address on, so
/// that the loader's own allocations are served from zpage's private heap
/// (see [`crate::loader`]). A naked function reads it where the call put
/// it (the top of the stack on x86-64, the link register on AArch64) and
/// jumps on with it as one more argument, leaving the stack as the caller
/// made it.
macro_rules! with_caller {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty => $inner:ident, $x86_reg:literal, $arm_reg:literal) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $x86_reg, ", [rsp]"), "jmp {0}", sym $inner)
        }
        $(#[$doc])*
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $arm_reg, ", x30"), "b {0}", sym $inner)
        }
        $(#[$doc])*
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: the caller keeps the function's contract; no return
            // address here, so nothing counts as the loader's.
            unsafe { $inner($($arg,)* 0) }
        }
    };
}

with_caller! {
    /// # Safety
    /// `malloc(3)`'s contract.
    fn malloc(n: size_t) -> *mut c_void => malloc_from, "rsi", "x1"
}
with_caller! {
    /// # Safety
    /// `calloc(3)`'s contract.
    fn calloc(n: size_t, m: size_t) -> *mut c_void => calloc_from, "rdx", "x2"
}
with_caller! {
    /// # Safety
    /// `realloc(3)`'s contract.
    fn realloc(p: *mut c_void, n: size_t) -> *mut c_void => realloc_from, "rdx", "x2"
}

/// Whether zpage's private heap serves a call made from `caller`: on
/// zpage's threads and inside its own code, for the dynamic loader, and
/// for the C library's stdio buffers (module `stdio`).
fn private_for(caller: usize) -> bool {
    alloc::serves_this_thread()
        || (caller != 0 && (crate::loader::contains(caller) || crate::stdio::allocates(caller)))
}

/// `malloc` called from `caller`.
///
/// # Safety
/// `malloc(3)`'s contract.
unsafe extern "C" fn malloc_from(n: size_t, caller: usize) -> *mut c_void {
    if private_for(caller) {
        return alloc::c_malloc(n, 1).cast();
    }
    if uses_mimalloc() {
        // SAFETY: mimalloc's malloc.
        return unsafe { mi::mi_malloc(n) };
    }
    // SAFETY: the next allocator, `malloc`'s contract.
    unsafe { next_malloc(n) }
}

/// `calloc` called from `caller`.
///
/// # Safety
/// `calloc(3)`'s contract.
unsafe extern "C" fn calloc_from(n: size_t, m: size_t, caller: usize) -> *mut c_void {
    if private_for(caller) {
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
    if uses_mimalloc() {
        // SAFETY: mimalloc's calloc (it checks the overflow).
        return unsafe { mi::mi_calloc(n, m) };
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
    if p.is_null() {
        return;
    }
    if alloc::owns(p.cast()) {
        // SAFETY: a live block of zpage's heap (free's contract).
        return unsafe { alloc::c_free(p.cast()) };
    }
    if mimalloc_owns(p) {
        // SAFETY: a live block of mimalloc's.
        return unsafe { mi::mi_free(p) };
    }
    // SAFETY: neither zpage's nor mimalloc's: the next allocator's.
    unsafe { next_free(p) }
}

/// `realloc` called from `caller`.
///
/// # Safety
/// `realloc(3)`'s contract.
unsafe extern "C" fn realloc_from(p: *mut c_void, n: size_t, caller: usize) -> *mut c_void {
    if alloc::owns(p.cast()) || (p.is_null() && private_for(caller)) {
        // SAFETY: null or a live block of zpage's heap (realloc's contract).
        return unsafe { alloc::c_realloc(p.cast(), n) }.cast();
    }
    if p.is_null() {
        // SAFETY: same contract.
        return unsafe { malloc_from(n, caller) };
    }
    if mimalloc_owns(p) {
        // SAFETY: a live block of mimalloc's.
        return unsafe { mi::mi_realloc(p, n) };
    }
    if uses_mimalloc() {
        // A block the C library made before mimalloc served the program:
        // moved into mimalloc's memory.
        // SAFETY: mimalloc's malloc; `p` is a live block of the C library's
        // of `usable` bytes.
        unsafe {
            let q = mi::mi_malloc(n);
            if !q.is_null() {
                let usable = next_usable_size(p);
                std::ptr::copy_nonoverlapping(p as *const u8, q as *mut u8, usable.min(n));
                next_free(p);
            }
            return q;
        }
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
    if uses_mimalloc() {
        // SAFETY: mimalloc's aligned malloc (the caller checked `align`).
        return unsafe { mi::mi_malloc_aligned(n, align) };
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
    aligned(zpage_codec::PAGE_SIZE, n)
}

/// # Safety
/// `pvalloc(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pvalloc(n: size_t) -> *mut c_void {
    let page = zpage_codec::PAGE_SIZE;
    aligned(page, n.next_multiple_of(page).max(page))
}

/// # Safety
/// `malloc_usable_size(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> size_t {
    if p.is_null() {
        return 0;
    }
    if alloc::owns(p.cast()) {
        // SAFETY: a live block of zpage's heap.
        return unsafe { alloc::c_usable_size(p.cast()) };
    }
    if mimalloc_owns(p) {
        // SAFETY: a live block of mimalloc's.
        return unsafe { mi::mi_usable_size(p) };
    }
    next_usable_size(p)
}
