//! `execve` and its relatives, `poll`, `ppoll`, `select`, `epoll_wait` and
//! `getrandom`: more calls whose memory may lie in regions.
//!
//! The `exec` family runs in a `vfork()` child (CPython's `subprocess`,
//! `posix_spawn`), where nothing may be allocated or locked and pinning is
//! pointless (the process image is replaced): the path, every argument and
//! every environment string are read first, which restores any evicted page
//! they lie in, and the call is retried if the kernel still meets one
//! (`EFAULT` comes before `exec` replaces anything).
#![allow(unsafe_code)]

use crate::io::{guarded_call, Spans};
use crate::real;
use crate::sys;
use libc::{c_char, c_int, c_void, size_t, ssize_t};

/// Reads a C string byte by byte (restoring evicted pages it lies in).
///
/// # Safety
/// `s` is null or a valid NUL-terminated string.
unsafe fn touch_str(s: *const c_char) {
    if s.is_null() {
        return;
    }
    let mut i = 0;
    // SAFETY: per the contract, every byte up to the NUL is readable.
    while unsafe { std::ptr::read_volatile(s.add(i)) } != 0 {
        i += 1;
    }
}

/// Reads a NULL-terminated array of C strings and the strings.
///
/// # Safety
/// `v` is null or a valid NULL-terminated array of valid strings.
unsafe fn touch_vec(v: *const *const c_char) {
    if v.is_null() {
        return;
    }
    let mut i = 0;
    loop {
        // SAFETY: per the contract.
        let s = unsafe { std::ptr::read_volatile(v.add(i)) };
        if s.is_null() {
            return;
        }
        // SAFETY: per the contract.
        unsafe { touch_str(s) };
        i += 1;
    }
}

/// Runs an exec call after touching its memory, again while it fails with
/// `EFAULT` (a few times).
///
/// # Safety
/// The exec call's own contract for `path`, `argv`, `envp`.
unsafe fn exec_with(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    mut call: impl FnMut() -> c_int,
) -> c_int {
    let mut r = -1;
    for _ in 0..8 {
        // SAFETY: the caller's contract.
        unsafe {
            touch_str(path);
            touch_vec(argv);
            touch_vec(envp);
        }
        r = call();
        if sys::errno() != libc::EFAULT {
            return r;
        }
    }
    r
}

/// # Safety
/// `execve(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        exec_with(path, argv, envp, || match real::execve() {
            Some(f) => f(path, argv, envp),
            None => libc::syscall(libc::SYS_execve, path, argv, envp) as c_int,
        })
    }
}

/// # Safety
/// `execv(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        exec_with(path, argv, std::ptr::null(), || match real::execv() {
            Some(f) => f(path, argv),
            None => -1,
        })
    }
}

/// # Safety
/// `execvp(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        exec_with(file, argv, std::ptr::null(), || match real::execvp() {
            Some(f) => f(file, argv),
            None => -1,
        })
    }
}

/// # Safety
/// `execvpe(3)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        exec_with(file, argv, envp, || match real::execvpe() {
            Some(f) => f(file, argv, envp),
            None => -1,
        })
    }
}

/// # Safety
/// `poll(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    let mut s = Spans::new();
    s.add(
        fds as usize,
        n as usize * std::mem::size_of::<libc::pollfd>(),
    );
    guarded_call("poll", &s, || match real::poll() {
        // SAFETY: the C library's poll with the caller's arguments.
        Some(f) => unsafe { f(fds, n, timeout) as isize },
        None => -1,
    }) as c_int
}

/// # Safety
/// `ppoll(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    let mut s = Spans::new();
    s.add(
        fds as usize,
        n as usize * std::mem::size_of::<libc::pollfd>(),
    );
    s.add(timeout as usize, std::mem::size_of::<libc::timespec>());
    s.add(mask as usize, std::mem::size_of::<libc::sigset_t>());
    guarded_call("ppoll", &s, || match real::ppoll() {
        // SAFETY: the C library's ppoll with the caller's arguments.
        Some(f) => unsafe { f(fds, n, timeout, mask) as isize },
        None => -1,
    }) as c_int
}

/// # Safety
/// `select(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    let mut s = Spans::new();
    for set in [r, w, e] {
        s.add(set as usize, std::mem::size_of::<libc::fd_set>());
    }
    s.add(t as usize, std::mem::size_of::<libc::timeval>());
    guarded_call("select", &s, || match real::select() {
        // SAFETY: the C library's select with the caller's arguments.
        Some(f) => unsafe { f(n, r, w, e, t) as isize },
        None => -1,
    }) as c_int
}

/// # Safety
/// `epoll_wait(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(
    fd: c_int,
    events: *mut libc::epoll_event,
    n: c_int,
    timeout: c_int,
) -> c_int {
    let mut s = Spans::new();
    s.add(
        events as usize,
        n.max(0) as usize * std::mem::size_of::<libc::epoll_event>(),
    );
    guarded_call("epoll_wait", &s, || match real::epoll_wait() {
        // SAFETY: the C library's epoll_wait with the caller's arguments.
        Some(f) => unsafe { f(fd, events, n, timeout) as isize },
        None => -1,
    }) as c_int
}

/// # Safety
/// `getrandom(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, n: size_t, flags: libc::c_uint) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded_call("getrandom", &s, || match real::getrandom() {
        // SAFETY: the C library's getrandom with the caller's arguments.
        Some(f) => unsafe { f(buf, n, flags) },
        None => -1,
    })
}
