//! System calls on region memory.
//!
//! With zpage's SIGBUS fault mode the kernel cannot fault an evicted page
//! in for a system call: `read(2)` into one, `write(2)` from one, a futex
//! word on one all fail with `EFAULT` (and a datagram received into one is
//! lost). These wrappers of the C library's calls find the buffers that lie
//! in regions (one comparison against the regions' address window for the
//! rest) and pin them for the call's duration: restored, and kept resident
//! until the call returns, so the kernel sees ordinary memory. Buffers too
//! large to pin (more than half the budget) are restored instead and the
//! call retried on `EFAULT`; a call that still fails prints a line naming
//! it. Covered: `read`, `pread`, `readv`, `preadv`, `write`, `pwrite`,
//! `writev`, `pwritev`, `send`, `sendto`, `sendmsg`, `recv`, `recvfrom`,
//! `recvmsg`, `syscall(SYS_futex, ...)`, and (module `exec`) `poll`,
//! `ppoll`, `select`, `epoll_wait` and `getrandom`. Not
//! covered (see the crate
//! docs): glibc's internal calls (its own mutexes and condition variables
//! issue `futex` directly), io_uring, other raw `syscall()` numbers; those
//! get `EFAULT`, and `syscall()` prints a line naming the call.
#![allow(unsafe_code)]

use crate::real;
use crate::state;
use crate::sys::{self, Inside};
use libc::{c_int, c_long, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::atomic::Ordering;

/// Retries of a call whose buffers could not be pinned.
const RETRIES: usize = 8;

/// Spans a call's buffers are pinned in, at most (more iovecs than this
/// are restored and retried instead, see [`guarded`]).
const MAX_SPANS: usize = 16;

/// Spans of memory a call reads or writes, in a small fixed array: these
/// wrappers run on zpage's own threads too (their futexes) and in the
/// program's signal handlers (CPython's faulthandler writes from one, on an
/// alternate stack of a few KiB), so they allocate nothing and keep their
/// stack use to a few hundred bytes.
pub struct Spans {
    spans: [(usize, usize); MAX_SPANS],
    len: usize,
    overflow: bool,
}

impl Spans {
    pub fn new() -> Spans {
        Spans {
            spans: [(0, 0); MAX_SPANS],
            len: 0,
            overflow: false,
        }
    }

    pub fn add(&mut self, addr: usize, len: usize) {
        if len == 0 {
            return;
        }
        if self.len == MAX_SPANS {
            self.overflow = true;
            return;
        }
        self.spans[self.len] = (addr, len);
        self.len += 1;
    }

    fn as_slice(&self) -> &[(usize, usize)] {
        &self.spans[..self.len]
    }

    /// The iovec array and every buffer it names.
    ///
    /// # Safety
    /// `iov` is valid for `n` entries (what the call itself requires).
    unsafe fn add_iovecs(&mut self, iov: *const iovec, n: usize) {
        if iov.is_null() {
            return;
        }
        self.add(iov as usize, n * std::mem::size_of::<iovec>());
        for i in 0..n {
            // SAFETY: per the contract.
            let v = unsafe { &*iov.add(i) };
            self.add(v.iov_base as usize, v.iov_len);
        }
    }

    /// A message header and everything it names.
    ///
    /// # Safety
    /// `m` is a valid msghdr (what the call itself requires).
    unsafe fn add_msghdr(&mut self, m: *const msghdr) {
        if m.is_null() {
            return;
        }
        self.add(m as usize, std::mem::size_of::<msghdr>());
        // SAFETY: per the contract.
        let h = unsafe { &*m };
        self.add(h.msg_name as usize, h.msg_namelen as usize);
        self.add(h.msg_control as usize, h.msg_controllen);
        // SAFETY: per the contract.
        unsafe { self.add_iovecs(h.msg_iov, h.msg_iovlen) };
    }
}

/// [`guarded`] for the other modules' wrappers.
pub fn guarded_call(name: &str, spans: &Spans, call: impl FnMut() -> isize) -> isize {
    guarded(name, spans, call)
}

/// The state, if some span may lie in a region.
fn involved(
    state: Option<&'static state::State>,
    spans: &[(usize, usize)],
) -> Option<&'static state::State> {
    let state = state?;
    spans
        .iter()
        .any(|&(a, l)| state.overlaps(a, l))
        .then_some(state)
}

/// Runs `call` with every span that lies in a region pinned, or restored
/// and retried on `EFAULT` when pinning is refused.
fn guarded(name: &str, spans: &Spans, mut call: impl FnMut() -> isize) -> isize {
    let candidate = if sys::inside() || state::FORKED_CHILD.load(Ordering::Relaxed) {
        None
    } else {
        state::get()
    };
    let Some(state) = involved(candidate, spans.as_slice()) else {
        if spans.overflow {
            return retried(name, spans, call, candidate);
        }
        return call();
    };
    let pinned = !spans.overflow && {
        let _inside = Inside::enter();
        let mut done = 0;
        for &(a, l) in spans.as_slice() {
            if zpage_region::pin_range(a, l).is_err() {
                break;
            }
            done += 1;
        }
        if done < spans.len {
            for &(a, l) in &spans.as_slice()[..done] {
                let _ = zpage_region::unpin_range(a, l);
            }
            false
        } else {
            true
        }
    };
    if pinned {
        state.pinned_calls.fetch_add(1, Ordering::Relaxed);
        let r = call();
        let saved = sys::errno();
        {
            let _inside = Inside::enter();
            for &(a, l) in spans.as_slice() {
                let _ = zpage_region::unpin_range(a, l);
            }
        }
        sys::set_errno(saved);
        return r;
    }
    retried(name, spans, call, Some(state))
}

/// The call with its buffers restored first, retried on `EFAULT` (the
/// reclaimer may take a page out again before the kernel reaches it).
fn retried(
    name: &str,
    spans: &Spans,
    mut call: impl FnMut() -> isize,
    state: Option<&'static state::State>,
) -> isize {
    let Some(state) = state else {
        return call();
    };
    for attempt in 0..RETRIES {
        {
            let _inside = Inside::enter();
            for &(a, l) in spans.as_slice() {
                let _ = zpage_region::prefault_range(a, l);
            }
        }
        let r = call();
        if r != -1 || sys::errno() != libc::EFAULT {
            return r;
        }
        // Not ours to retry if none of its buffers is zpage's (the overflow
        // case, where some were not recorded, always retries).
        if !spans.overflow && involved(Some(state), spans.as_slice()).is_none() {
            return r;
        }
        if attempt + 1 < RETRIES {
            state.retried_calls.fetch_add(1, Ordering::Relaxed);
        }
    }
    // Formatted into a stack buffer: no allocation on this path.
    let mut line = [0u8; 160];
    let text = b"zpage: a wrapped call kept failing with EFAULT on zpage memory (buffers larger than half the budget, or more than 15 iovecs); raise --budget: ";
    let n = text.len().min(line.len());
    line[..n].copy_from_slice(&text[..n]);
    sys::stderr_line(std::str::from_utf8(&line[..n]).unwrap_or(""));
    sys::stderr_line(name);
    sys::stderr_line("()\n");
    sys::set_errno(libc::EFAULT);
    -1
}

macro_rules! next {
    ($name:ident, $fallback:expr, $($arg:expr),*) => {
        match real::$name() {
            // SAFETY: the C library's function with the caller's arguments.
            Some(f) => unsafe { f($($arg),*) },
            None => $fallback,
        }
    };
}

fn raw(nr: c_long, a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> isize {
    // SAFETY: a raw system call with the caller's arguments (used only if the
    // C library's function cannot be found).
    unsafe { libc::syscall(nr, a, b, c, d, e, f) as isize }
}

/// # Safety
/// `read(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("read", &s, || {
        next!(
            read,
            raw(libc::SYS_read, fd as usize, buf as usize, n, 0, 0, 0),
            fd,
            buf,
            n
        )
    })
}

/// # Safety
/// `write(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("write", &s, || {
        next!(
            write,
            raw(libc::SYS_write, fd as usize, buf as usize, n, 0, 0, 0),
            fd,
            buf,
            n
        )
    })
}

/// # Safety
/// `pread(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, o: off_t) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("pread", &s, || {
        next!(
            pread,
            raw(
                libc::SYS_pread64,
                fd as usize,
                buf as usize,
                n,
                o as usize,
                0,
                0
            ),
            fd,
            buf,
            n,
            o
        )
    })
}

/// # Safety
/// `pread(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, o: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pread(fd, buf, n, o) }
}

/// # Safety
/// `pwrite(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, o: off_t) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("pwrite", &s, || {
        next!(
            pwrite,
            raw(
                libc::SYS_pwrite64,
                fd as usize,
                buf as usize,
                n,
                o as usize,
                0,
                0
            ),
            fd,
            buf,
            n,
            o
        )
    })
}

/// # Safety
/// `pwrite(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, o: off_t) -> ssize_t {
    // SAFETY: same contract.
    unsafe { pwrite(fd, buf, n, o) }
}

/// # Safety
/// `readv(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_iovecs(iov, n.max(0) as usize) };
    guarded("readv", &s, || {
        next!(
            readv,
            raw(
                libc::SYS_readv,
                fd as usize,
                iov as usize,
                n as usize,
                0,
                0,
                0
            ),
            fd,
            iov,
            n
        )
    })
}

/// # Safety
/// `writev(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_iovecs(iov, n.max(0) as usize) };
    guarded("writev", &s, || {
        next!(
            writev,
            raw(
                libc::SYS_writev,
                fd as usize,
                iov as usize,
                n as usize,
                0,
                0,
                0
            ),
            fd,
            iov,
            n
        )
    })
}

/// # Safety
/// `preadv(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, n: c_int, o: off_t) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_iovecs(iov, n.max(0) as usize) };
    guarded("preadv", &s, || {
        next!(
            preadv,
            raw(
                libc::SYS_preadv,
                fd as usize,
                iov as usize,
                n as usize,
                o as usize,
                0,
                0
            ),
            fd,
            iov,
            n,
            o
        )
    })
}

/// # Safety
/// `pwritev(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, n: c_int, o: off_t) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_iovecs(iov, n.max(0) as usize) };
    guarded("pwritev", &s, || {
        next!(
            pwritev,
            raw(
                libc::SYS_pwritev,
                fd as usize,
                iov as usize,
                n as usize,
                o as usize,
                0,
                0
            ),
            fd,
            iov,
            n,
            o
        )
    })
}

/// # Safety
/// `send(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("send", &s, || {
        next!(
            send,
            raw(
                libc::SYS_sendto,
                fd as usize,
                buf as usize,
                n,
                flags as usize,
                0,
                0
            ),
            fd,
            buf,
            n,
            flags
        )
    })
}

/// # Safety
/// `sendto(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    s.add(addr as usize, alen as usize);
    guarded("sendto", &s, || {
        next!(
            sendto,
            raw(
                libc::SYS_sendto,
                fd as usize,
                buf as usize,
                n,
                flags as usize,
                addr as usize,
                alen as usize
            ),
            fd,
            buf,
            n,
            flags,
            addr,
            alen
        )
    })
}

/// # Safety
/// `sendmsg(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, m: *const msghdr, flags: c_int) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_msghdr(m) };
    guarded("sendmsg", &s, || {
        next!(
            sendmsg,
            raw(
                libc::SYS_sendmsg,
                fd as usize,
                m as usize,
                flags as usize,
                0,
                0,
                0
            ),
            fd,
            m,
            flags
        )
    })
}

/// # Safety
/// `recv(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    guarded("recv", &s, || {
        next!(
            recv,
            raw(
                libc::SYS_recvfrom,
                fd as usize,
                buf as usize,
                n,
                flags as usize,
                0,
                0
            ),
            fd,
            buf,
            n,
            flags
        )
    })
}

/// # Safety
/// `recvfrom(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    let mut s = Spans::new();
    s.add(buf as usize, n);
    if !alen.is_null() {
        s.add(alen as usize, std::mem::size_of::<socklen_t>());
        // SAFETY: the call's own contract: a valid length pointer.
        s.add(addr as usize, unsafe { *alen } as usize);
    }
    guarded("recvfrom", &s, || {
        next!(
            recvfrom,
            raw(
                libc::SYS_recvfrom,
                fd as usize,
                buf as usize,
                n,
                flags as usize,
                addr as usize,
                alen as usize
            ),
            fd,
            buf,
            n,
            flags,
            addr,
            alen
        )
    })
}

/// # Safety
/// `recvmsg(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, m: *mut msghdr, flags: c_int) -> ssize_t {
    let mut s = Spans::new();
    // SAFETY: the call's own contract.
    unsafe { s.add_msghdr(m) };
    guarded("recvmsg", &s, || {
        next!(
            recvmsg,
            raw(
                libc::SYS_recvmsg,
                fd as usize,
                m as usize,
                flags as usize,
                0,
                0,
                0
            ),
            fd,
            m,
            flags
        )
    })
}

/// Futex operations whose second word (`uaddr2`, the fifth argument) the
/// kernel touches too.
fn futex_second_word(op: c_long) -> bool {
    matches!(
        op as c_int & libc::FUTEX_CMD_MASK,
        libc::FUTEX_REQUEUE
            | libc::FUTEX_CMP_REQUEUE
            | libc::FUTEX_WAKE_OP
            | libc::FUTEX_CMP_REQUEUE_PI
            | libc::FUTEX_WAIT_REQUEUE_PI
    )
}

/// `syscall(3)`: `SYS_futex` gets its words pinned; any other number goes
/// through unchanged, and if it fails with `EFAULT` while an argument points
/// into a region, a line on stderr names the call (zpage does not know its
/// buffers, so an evicted page there could be the cause).
///
/// The variadic arguments are declared as six fixed ones: on x86-64 and
/// AArch64 they are passed alike, and reading one the caller did not pass
/// reads an unused register.
///
/// # Safety
/// `syscall(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    let call = || -> isize {
        (match real::syscall() {
            // SAFETY: the C library's syscall with the caller's arguments.
            Some(sc) => unsafe { sc(nr, a, b, c, d, e, f) },
            // SAFETY: as above, straight to the kernel.
            None => unsafe { libc::syscall(nr, a, b, c, d, e, f) },
        }) as isize
    };
    if nr == libc::SYS_futex {
        let mut s = Spans::new();
        s.add(a as usize, 4);
        if futex_second_word(b) {
            s.add(e as usize, 4);
        }
        return guarded("futex", &s, call) as c_long;
    }
    let r = call();
    if r == -1 && sys::errno() == libc::EFAULT && !sys::inside() {
        if let Some(state) = state::get() {
            let saved = sys::errno();
            let args = [a, b, c, d, e, f];
            let hit = args
                .iter()
                .find(|&&p| p > 4096 && state.overlaps(p as usize, 1));
            if let Some(p) = hit {
                let message = format!(
                    "zpage: syscall({nr}) failed with EFAULT and its argument {p:#x} points into zpage memory: zpage restores buffers only for the calls its library wraps (see the preload library's README); this call may have met an evicted page\n"
                );
                sys::stderr_line(&message);
            }
            sys::set_errno(saved);
        }
    }
    r as c_long
}
