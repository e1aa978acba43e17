//! Locales: what `setlocale`, `newlocale` and `duplocale` allocate comes
//! from zpage's private heap, never from compressed memory.
//!
//! A locale loaded from files (`C.UTF-8`, `en_US.UTF-8`: every locale but
//! the built-in `C`/`POSIX`) lives in structures the C library allocates
//! with `malloc` when the program selects it. `pthread_create` starts the
//! new thread with every signal blocked, and that thread reads the current
//! locale's character-class tables (glibc's `__ctype_init`) before it
//! restores its signal mask. Were that memory evicted, the thread's fault
//! would come with SIGBUS blocked, and the kernel kills the process (the
//! JVM, which calls `setlocale(LC_ALL, "")`, died so at its first threads
//! under `zpage run`). These few KiB stay resident in zpage's heap instead;
//! `freelocale` and a later `setlocale` free them through `free`, which
//! tells the private heap's blocks by address.
#![allow(unsafe_code)]

use crate::alloc::PrivateScope;
use crate::real;
use libc::{c_char, c_int, locale_t};

/// # Safety
/// `setlocale(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn setlocale(category: c_int, locale: *const c_char) -> *mut c_char {
    let Some(f) = real::setlocale() else {
        return std::ptr::null_mut();
    };
    let _private = PrivateScope::enter();
    // SAFETY: the C library's function with the caller's arguments.
    unsafe { f(category, locale) }
}

/// # Safety
/// `newlocale(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn newlocale(mask: c_int, locale: *const c_char, base: locale_t) -> locale_t {
    let Some(f) = real::newlocale() else {
        crate::sys::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    let _private = PrivateScope::enter();
    // SAFETY: the C library's function with the caller's arguments.
    unsafe { f(mask, locale, base) }
}

/// # Safety
/// `duplocale(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn duplocale(locale: locale_t) -> locale_t {
    let Some(f) = real::duplocale() else {
        crate::sys::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    let _private = PrivateScope::enter();
    // SAFETY: the C library's function with the caller's argument.
    unsafe { f(locale) }
}
