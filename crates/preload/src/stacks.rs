//! Stacks in region memory, and memory the program locks.
//!
//! **Stacks.** The kernel writes a signal's frame on the stack the thread
//! runs on (or its alternate signal stack) and reads it back at
//! `sigreturn`; with a page of that stack evicted, delivery fails and the
//! kernel kills the thread's process with SIGSEGV, before any handler of
//! zpage's can run. A program that runs on memory it allocated (a
//! `malloc`ed `sigaltstack`, coroutines made with `makecontext` on
//! `malloc`ed stacks, `pthread_attr_setstack`) would die at its first
//! signal or fault there. So such a stack is pinned, resident over the
//! budget if need be, as soon as zpage sees it: at `sigaltstack` (the
//! previous one of the thread unpinned), at `pthread_attr_setstack`, and
//! when a context is first switched to (`swapcontext`, `setcontext`: the
//! stack `makecontext` gave it). Not seen: stacks switched to without
//! these functions (hand-written assembly, Boost.Context), and a raw
//! `sigaltstack` system call whose stack lies in a region while its
//! `stack_t` does not.
//!
//! **`mlock`, `mlock2`, `mlockall`.** Locked memory must stay resident:
//! `mlock` of region memory pins the range over the budget (`munlock` of
//! the same range unpins it); `mlockall(MCL_CURRENT)` restores every
//! region and stops its eviction, `MCL_FUTURE` places no new memory in
//! regions; `munlockall` undoes both. The budget is then exceeded as the
//! program asked (the regions' resident bytes show it).
#![allow(unsafe_code)]

use crate::real;
use crate::state;
use crate::sys::{self, Inside};
use libc::{c_int, c_void, size_t};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// Ranges pinned here, each once: stacks, and `mlock`ed ranges.
static PINNED: Mutex<Vec<(usize, usize, Why)>> = Mutex::new(Vec::new());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Why {
    Stack,
    Locked,
}

thread_local! {
    /// The thread's alternate signal stack, when zpage pinned it.
    static ALTSTACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// The state, for a call of the program's on memory that may be a region's.
fn program_call(addr: usize, len: usize) -> Option<&'static state::State> {
    let s = state::get()?;
    (!sys::inside() && len > 0 && s.overlaps(addr, len)).then_some(s)
}

/// Pins `[addr, addr + len)` over the budget and records it; false if it
/// is not region memory or could not be pinned.
fn pin(addr: usize, len: usize, why: Why) -> bool {
    if program_call(addr, len).is_none() {
        return false;
    }
    let _inside = Inside::enter();
    let mut pinned = PINNED.lock().unwrap_or_else(|e| e.into_inner());
    if pinned
        .iter()
        .any(|&(a, l, w)| a == addr && l == len && w == why)
    {
        return false;
    }
    match zpage_region::pin_range_over_budget(addr, len) {
        Ok(()) => {
            pinned.push((addr, len, why));
            true
        }
        Err(e) => {
            sys::stderr_line(&format!(
                "zpage: could not keep {len} bytes at {addr:#x} resident ({e}); a signal delivered there may end the program\n"
            ));
            false
        }
    }
}

/// Unpins what [`pin`] recorded for exactly this range.
fn unpin(addr: usize, len: usize, why: Why) {
    let _inside = Inside::enter();
    let mut pinned = PINNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = pinned
        .iter()
        .position(|&(a, l, w)| a == addr && l == len && w == why)
    {
        pinned.swap_remove(i);
        let _ = zpage_region::unpin_range(addr, len);
    }
}

/// # Safety
/// `sigaltstack(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    let new = if ss.is_null() {
        None
    } else {
        // SAFETY: the caller passes a valid stack_t.
        let s = unsafe { *ss };
        (s.ss_flags & libc::SS_DISABLE == 0).then_some((s.ss_sp as usize, s.ss_size))
    };
    let pinned_new = new.is_some_and(|(a, l)| pin(a, l, Why::Stack));
    let r = match real::sigaltstack() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(ss, old) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    };
    let saved = zpage_syscalls::errno();
    if r == 0 && !ss.is_null() {
        let previous = ALTSTACK.with(|c| {
            c.replace(if pinned_new {
                new.unwrap_or((0, 0))
            } else {
                (0, 0)
            })
        });
        if previous.1 != 0 && Some(previous) != new {
            unpin(previous.0, previous.1, Why::Stack);
        }
    } else if pinned_new {
        if let Some((a, l)) = new {
            unpin(a, l, Why::Stack);
        }
    }
    sys::set_errno(saved);
    r
}

/// # Safety
/// `pthread_attr_setstack(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pthread_attr_setstack(
    attr: *mut libc::pthread_attr_t,
    addr: *mut c_void,
    size: size_t,
) -> c_int {
    // The thread runs on it for its whole life: pinned for good.
    pin(addr as usize, size, Why::Stack);
    match real::pthread_attr_setstack() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(attr, addr, size) },
        None => libc::ENOSYS,
    }
}

/// Pins the stack a context will run on (what `makecontext` gave it).
///
/// # Safety
/// `ucp` is a valid context.
unsafe fn pin_context_stack(ucp: *const libc::ucontext_t) {
    if ucp.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let stack = unsafe { (*ucp).uc_stack };
    if !stack.ss_sp.is_null() && stack.ss_size > 0 {
        pin(stack.ss_sp as usize, stack.ss_size, Why::Stack);
    }
}

/// # Safety
/// `swapcontext(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn swapcontext(
    oucp: *mut libc::ucontext_t,
    ucp: *const libc::ucontext_t,
) -> c_int {
    // SAFETY: the caller passes a valid context.
    unsafe { pin_context_stack(ucp) };
    match real::swapcontext() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(oucp, ucp) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `setcontext(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn setcontext(ucp: *const libc::ucontext_t) -> c_int {
    // SAFETY: the caller passes a valid context.
    unsafe { pin_context_stack(ucp) };
    match real::setcontext() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(ucp) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `mlock(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn mlock(addr: *const c_void, len: size_t) -> c_int {
    let pinned = pin(addr as usize, len, Why::Locked);
    let r = match real::mlock() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(addr, len) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    };
    if r != 0 && pinned {
        let saved = zpage_syscalls::errno();
        unpin(addr as usize, len, Why::Locked);
        sys::set_errno(saved);
    }
    r
}

/// # Safety
/// `mlock2(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn mlock2(addr: *const c_void, len: size_t, flags: libc::c_uint) -> c_int {
    let pinned = pin(addr as usize, len, Why::Locked);
    let r = match real::mlock2() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(addr, len, flags) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    };
    if r != 0 && pinned {
        let saved = zpage_syscalls::errno();
        unpin(addr as usize, len, Why::Locked);
        sys::set_errno(saved);
    }
    r
}

/// # Safety
/// `munlock(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn munlock(addr: *const c_void, len: size_t) -> c_int {
    unpin(addr as usize, len, Why::Locked);
    match real::munlock() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(addr, len) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `mlockall(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    if let Some(s) = state::get().filter(|_| !sys::inside()) {
        let _inside = Inside::enter();
        if flags & libc::MCL_FUTURE != 0 {
            s.lock_future.store(true, Ordering::Release);
        }
        if flags & libc::MCL_CURRENT != 0 {
            if let Some(arena) = s.arena_if_started() {
                if let Err(e) = arena.region().restore_all() {
                    sys::stderr_line(&format!(
                        "zpage: mlockall could not restore every page of the arena: {e}\n"
                    ));
                }
            }
        }
    }
    match real::mlockall() {
        // SAFETY: the C library's function with the caller's arguments.
        Some(f) => unsafe { f(flags) },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `munlockall(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn munlockall() -> c_int {
    let r = match real::munlockall() {
        // SAFETY: the C library's function.
        Some(f) => unsafe { f() },
        None => {
            sys::set_errno(libc::ENOSYS);
            -1
        }
    };
    if let Some(s) = state::get().filter(|_| !sys::inside()) {
        let saved = zpage_syscalls::errno();
        let _inside = Inside::enter();
        s.lock_future.store(false, Ordering::Release);
        if let Some(arena) = s.arena_if_started() {
            arena.region().resume_eviction();
        }
        let locked: Vec<(usize, usize)> = PINNED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|&&(_, _, w)| w == Why::Locked)
            .map(|&(a, l, _)| (a, l))
            .collect();
        for (a, l) in locked {
            unpin(a, l, Why::Locked);
        }
        sys::set_errno(saved);
    }
    r
}
