//! The program's signal actions and masks, as they meet zpage's SIGBUS and
//! SIGSYS.
//!
//! **`sigaction(SIGBUS)` and `signal(SIGBUS)`.**
//! zpage resolves faults on evicted pages in its SIGBUS handler. A program
//! that installs its own SIGBUS handler (CPython's faulthandler, crash
//! reporters, JVMs) would put it in front and die at the first evicted page.
//! So once zpage's handler is installed (the budget starts with the first
//! region) the program's action is recorded as the one zpage chains to for
//! faults that are not its own, and zpage's handler stays installed; the
//! program reads back the action it set, as without zpage. Before that the
//! program's action goes to the kernel, and the handler chains to it when
//! it is installed. zpage's own calls (inside an interposer) always go
//! straight to the C library.
//!
//! **Masks that block SIGBUS.** A thread that faults while SIGBUS is blocked
//! is killed by the kernel, handler or not (it resets the action to the
//! default and delivers it). Programs block every signal routinely: jemalloc
//! makes its background threads with all signals blocked (Debian's
//! redis-server died of it when such a thread read an evicted extent), and
//! handlers are installed with a full `sa_mask`. So while the library is
//! active, `pthread_sigmask`, `sigprocmask` and the `sa_mask` of other
//! signals' actions never block SIGBUS; every other signal is blocked as
//! asked. Blocking SIGBUS only ever deferred a `kill(SIGBUS)` from another
//! process; a fault's SIGBUS cannot be deferred, so nothing a program could
//! rely on changes. The limit: masks set without the C library's wrappers
//! (a raw `rt_sigprocmask`, `clone3` with a signal mask, glibc's own
//! internal blocking around `fork` and `posix_spawn`) are not seen; a raw
//! `rt_sigprocmask` whose set lies in region memory is served by the
//! system-call trap, which keeps both signals unblocked too.
//!
//! **SIGSYS** is zpage's as well once its system-call trap is installed
//! (crate `zpage-syscalls`, module `trap`): the same rules apply to it, and
//! the program's own SIGSYS action (a program with a seccomp filter of its
//! own) receives the traps that are not zpage's.
#![allow(unsafe_code)]

use crate::real;
use crate::state;
use libc::c_int;

fn active() -> bool {
    state::get().is_some()
}

/// The chain of `sig` if zpage's handler for it is installed: the program's
/// action for it is then recorded there instead of replacing zpage's.
fn chain_of(sig: c_int) -> Option<&'static zpage_region::SignalChain> {
    if !active() {
        return None;
    }
    match sig {
        libc::SIGBUS if zpage_region::sigbus_handler_installed() => {
            Some(zpage_region::sigbus_chain())
        }
        libc::SIGSYS if zpage_syscalls::trap::installed() => Some(&zpage_syscalls::trap::CHAIN),
        _ => None,
    }
}

/// # Safety
/// `sigaction(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let ours = crate::sys::inside();
    if let Some(chain) = chain_of(sig).filter(|_| !ours) {
        // What the program set last (or what was there before zpage).
        let previous = if act.is_null() {
            chain.chained()
        } else {
            // SAFETY: the caller passes a valid action.
            chain.chain_to(unsafe { &*act })
        };
        if !old.is_null() {
            // SAFETY: the caller passes a valid out pointer.
            unsafe { *old = previous };
        }
        return 0;
    }
    let mut unblocked: libc::sigaction;
    let mut act = act;
    if !ours && active() && !act.is_null() {
        // SAFETY: the caller passes a valid action; it is copied, not changed.
        unblocked = unsafe { *act };
        if without_ours(&mut unblocked.sa_mask) {
            act = &unblocked;
        }
    }
    match real::sigaction() {
        // SAFETY: the C library's sigaction with the caller's arguments (its
        // mask without SIGBUS).
        Some(f) => unsafe { f(sig, act, old) },
        None => {
            crate::sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// `signal(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    let ours = crate::sys::inside();
    if let Some(chain) = chain_of(sig).filter(|_| !ours) {
        // SAFETY: a zeroed sigaction is valid; BSD semantics as glibc's signal().
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        return chain.chain_to(&act).sa_sigaction;
    }
    match real::signal() {
        // SAFETY: the C library's signal with the caller's arguments.
        Some(f) => unsafe { f(sig, handler) },
        None => libc::SIG_ERR,
    }
}

/// Takes SIGBUS and SIGSYS out of `set`; true if either was there.
fn without_ours(set: &mut libc::sigset_t) -> bool {
    let mut changed = false;
    for sig in [libc::SIGBUS, libc::SIGSYS] {
        // SAFETY: a valid, initialised set.
        unsafe {
            if libc::sigismember(set, sig) == 1 {
                libc::sigdelset(set, sig);
                changed = true;
            }
        }
    }
    changed
}

type MaskFn = unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;

/// How a mask function reports failure.
#[derive(Clone, Copy)]
enum Reports {
    /// `pthread_sigmask`: the error number is the result.
    ErrorNumber,
    /// `sigprocmask`: -1 and `errno`.
    Errno,
}

/// Calls the C library's mask function with SIGBUS and SIGSYS taken out of a set that
/// blocks (`SIG_BLOCK`, `SIG_SETMASK`); unblocking goes through as asked.
/// With the system-call trap installed, the call is made from its
/// trampoline instead (the filter traps blocking masks, and this one is
/// already safe), taking out the C library's own two signals as its
/// functions do.
///
/// # Safety
/// `set` and `old` are null or valid, as for `sigprocmask(2)`.
unsafe fn set_mask(
    real: MaskFn,
    reports: Reports,
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    let mut copy: libc::sigset_t;
    let mut set = set;
    if active() && !set.is_null() && how != libc::SIG_UNBLOCK {
        // SAFETY: the caller passes a valid set; it is copied, not changed.
        copy = unsafe { *set };
        if without_ours(&mut copy) {
            set = &copy;
        }
    }
    if !zpage_syscalls::trap::installed() {
        // SAFETY: the C library's function with valid arguments.
        return unsafe { real(how, set, old) };
    }
    let mut local: libc::sigset_t;
    if !set.is_null() {
        // SAFETY: a valid set; copied.
        local = unsafe { *set };
        // SIGCANCEL and SIGSETXID, which glibc's functions never let a
        // program block.
        for sig in [32, 33] {
            // SAFETY: a valid, initialised set.
            unsafe { libc::sigdelset(&mut local, sig) };
        }
        set = &local;
    }
    // SAFETY: valid sets (or null); the kernel reads and writes 8 bytes.
    let r = unsafe {
        zpage_region::far::syscall(
            libc::SYS_rt_sigprocmask,
            [how as i64, set as i64, old as i64, 8, 0, 0],
        )
    };
    match (r, reports) {
        (0, _) => 0,
        (e, Reports::ErrorNumber) => -e as c_int,
        (e, Reports::Errno) => {
            crate::sys::set_errno(-e as c_int);
            -1
        }
    }
}

/// # Safety
/// `pthread_sigmask(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    match real::pthread_sigmask() {
        // SAFETY: the caller's arguments, valid by this function's contract.
        Some(f) => unsafe { set_mask(f, Reports::ErrorNumber, how, set, old) },
        None => libc::ENOSYS,
    }
}

/// # Safety
/// `sigprocmask(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> c_int {
    match real::sigprocmask() {
        // SAFETY: the caller's arguments, valid by this function's contract.
        Some(f) => unsafe { set_mask(f, Reports::Errno, how, set, old) },
        None => {
            crate::sys::set_errno(libc::ENOSYS);
            -1
        }
    }
}
