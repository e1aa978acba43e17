//! `poll`, `ppoll`, `select`, `epoll_wait` and `getrandom`: more calls
//! whose memory may lie in regions.
//!
//! Not the `exec` family: it runs in `vfork()` children (CPython's
//! `subprocess`, `posix_spawn`) that have usually closed every descriptor,
//! the userfaultfd included, so an evicted argument string cannot be
//! restored there; `execve` fails with `EFAULT` (see the README).
#![allow(unsafe_code)]

use crate::io::{guarded_call, Spans};
use crate::real;
use libc::{c_int, c_void, size_t, ssize_t};

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
