//! The wrapped functions: the list (one line each: the C signature and the
//! memory the call reads or writes) and, made from it, one guarded function
//! per entry that a front end's entry point calls with the C library's
//! function.

use crate::guard::{chunked, guarded, needs_pieces, set_errno, Continue, Policy};
use crate::spans::Spans;

/// Calls `$callback!` with the list of wrapped functions, each as
/// `name(arg: type, ...) -> type => |spans| { what the call touches };`,
/// so that every front end makes its entry points from the one list.
///
/// Not in the list: `syscall` (variadic; [`crate::syscall`]) and the
/// in-process `dlopen` (module `inproc`).
#[macro_export]
macro_rules! for_each_wrapped_call {
    ($($callback:tt)+) => {
        $($callback)+! {
            read(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, IfRegularFile(fd));
            write(fd: ::libc::c_int, buf: *const ::libc::c_void, n: ::libc::size_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, Always);
            pread(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, o: ::libc::off_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, IfRegularFile(fd), o);
            pread64(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, o: ::libc::off64_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, IfRegularFile(fd), o);
            pwrite(fd: ::libc::c_int, buf: *const ::libc::c_void, n: ::libc::size_t, o: ::libc::off_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, Always, o);
            pwrite64(fd: ::libc::c_int, buf: *const ::libc::c_void, n: ::libc::size_t, o: ::libc::off64_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, Always, o);
            readv(fd: ::libc::c_int, iov: *const ::libc::iovec, n: ::libc::c_int) -> ::libc::ssize_t
                // SAFETY: the call's contract: `iov` is valid for `n` entries.
                => |s| { unsafe { s.add_iovecs(iov, n.max(0) as usize) }; };
            writev(fd: ::libc::c_int, iov: *const ::libc::iovec, n: ::libc::c_int) -> ::libc::ssize_t
                // SAFETY: as for readv.
                => |s| { unsafe { s.add_iovecs(iov, n.max(0) as usize) }; };
            preadv(fd: ::libc::c_int, iov: *const ::libc::iovec, n: ::libc::c_int, o: ::libc::off_t) -> ::libc::ssize_t
                // SAFETY: as for readv.
                => |s| { unsafe { s.add_iovecs(iov, n.max(0) as usize) }; };
            pwritev(fd: ::libc::c_int, iov: *const ::libc::iovec, n: ::libc::c_int, o: ::libc::off_t) -> ::libc::ssize_t
                // SAFETY: as for readv.
                => |s| { unsafe { s.add_iovecs(iov, n.max(0) as usize) }; };
            send(fd: ::libc::c_int, buf: *const ::libc::c_void, n: ::libc::size_t, flags: ::libc::c_int) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, Always);
            sendto(fd: ::libc::c_int, buf: *const ::libc::c_void, n: ::libc::size_t, flags: ::libc::c_int, addr: *const ::libc::sockaddr, alen: ::libc::socklen_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); s.add(addr as usize, alen as usize); };
            sendmsg(fd: ::libc::c_int, m: *const ::libc::msghdr, flags: ::libc::c_int) -> ::libc::ssize_t
                // SAFETY: the call's contract: `m` is a valid message header.
                => |s| { unsafe { s.add_msghdr(m) }; };
            recv(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, flags: ::libc::c_int) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); } pieces(buf, n, 1, Never);
            recvfrom(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, flags: ::libc::c_int, addr: *mut ::libc::sockaddr, alen: *mut ::libc::socklen_t) -> ::libc::ssize_t
                => |s| {
                    s.add(buf as usize, n);
                    if !alen.is_null() {
                        s.add_array(alen, 1);
                        // SAFETY: the call's contract: a valid length pointer.
                        s.add(addr as usize, unsafe { *alen } as usize);
                    }
                };
            recvmsg(fd: ::libc::c_int, m: *mut ::libc::msghdr, flags: ::libc::c_int) -> ::libc::ssize_t
                // SAFETY: as for sendmsg.
                => |s| { unsafe { s.add_msghdr(m) }; };
            __read_chk(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, buflen: ::libc::size_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n.min(buflen)); };
            __pread64_chk(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, o: ::libc::off64_t, buflen: ::libc::size_t) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n.min(buflen)); };
            __recv_chk(fd: ::libc::c_int, buf: *mut ::libc::c_void, n: ::libc::size_t, buflen: ::libc::size_t, flags: ::libc::c_int) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n.min(buflen)); };
            fread(ptr: *mut ::libc::c_void, size: ::libc::size_t, count: ::libc::size_t, stream: *mut ::libc::FILE) -> ::libc::size_t
                => |s| { s.add(ptr as usize, size.saturating_mul(count)); } pieces(ptr, count, size, Always);
            fwrite(ptr: *const ::libc::c_void, size: ::libc::size_t, count: ::libc::size_t, stream: *mut ::libc::FILE) -> ::libc::size_t
                => |s| { s.add(ptr as usize, size.saturating_mul(count)); } pieces(ptr, count, size, Always);
            fread_unlocked(ptr: *mut ::libc::c_void, size: ::libc::size_t, count: ::libc::size_t, stream: *mut ::libc::FILE) -> ::libc::size_t
                => |s| { s.add(ptr as usize, size.saturating_mul(count)); } pieces(ptr, count, size, Always);
            fwrite_unlocked(ptr: *const ::libc::c_void, size: ::libc::size_t, count: ::libc::size_t, stream: *mut ::libc::FILE) -> ::libc::size_t
                => |s| { s.add(ptr as usize, size.saturating_mul(count)); } pieces(ptr, count, size, Always);
            __fread_chk(ptr: *mut ::libc::c_void, ptrlen: ::libc::size_t, size: ::libc::size_t, count: ::libc::size_t, stream: *mut ::libc::FILE) -> ::libc::size_t
                => |s| { s.add(ptr as usize, size.saturating_mul(count).min(ptrlen)); };
            poll(fds: *mut ::libc::pollfd, n: ::libc::nfds_t, timeout: ::libc::c_int) -> ::libc::c_int
                => |s| { s.add_array(fds, n as usize); };
            ppoll(fds: *mut ::libc::pollfd, n: ::libc::nfds_t, timeout: *const ::libc::timespec, mask: *const ::libc::sigset_t) -> ::libc::c_int
                => |s| { s.add_array(fds, n as usize); s.add_array(timeout, 1); s.add_array(mask, 1); };
            select(n: ::libc::c_int, r: *mut ::libc::fd_set, w: *mut ::libc::fd_set, e: *mut ::libc::fd_set, t: *mut ::libc::timeval) -> ::libc::c_int
                => |s| { s.add_array(r, 1); s.add_array(w, 1); s.add_array(e, 1); s.add_array(t, 1); };
            epoll_wait(fd: ::libc::c_int, events: *mut ::libc::epoll_event, n: ::libc::c_int, timeout: ::libc::c_int) -> ::libc::c_int
                => |s| { s.add_array(events, n.max(0) as usize); };
            getrandom(buf: *mut ::libc::c_void, n: ::libc::size_t, flags: ::libc::c_uint) -> ::libc::ssize_t
                => |s| { s.add(buf as usize, n); };
        }
    };
}

/// The value a function returns when it fails without running.
pub trait Failure {
    const FAILED: Self;
}
impl Failure for isize {
    const FAILED: isize = -1;
}
impl Failure for i32 {
    const FAILED: i32 = -1;
}
/// `fread`/`fwrite`: nothing transferred.
impl Failure for usize {
    const FAILED: usize = 0;
}

/// Makes, for each listed function, `signature::name` (its C type) and
/// `name(policy, real, args...)`: the call with its memory in regions
/// pinned.
#[doc(hidden)]
#[macro_export]
macro_rules! define_guarded_calls {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => |$s:ident| $spans:block $(pieces $pieces:tt)? ; )*) => {
        /// The C type of each wrapped function.
        #[allow(non_camel_case_types)]
        pub mod signature {
            $( pub type $name = unsafe extern "C" fn($($ty),*) -> $ret; )*
        }

        /// Names of the wrapped functions.
        pub const NAMES: &[&str] = &[$( stringify!($name) ),*];

        $( $crate::define_guarded_call!($name ($($arg : $ty),*) -> $ret, |$s| $spans, $($pieces)?); )*
    };
}

/// One function of [`define_guarded_calls`]: with a `pieces(buffer, count,
/// unit, continue[, offset])` clause, a call on a large buffer is made in
/// pieces ([`crate::chunked`]).
#[doc(hidden)]
#[macro_export]
macro_rules! define_guarded_call {
    ($name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, |$s:ident| $spans:block,
     ($buf:ident, $count:ident, $unit:expr, $go_on:ident $(($fd:ident))? $(, $offset:ident)?)) => {
        $crate::define_guarded_call!(@fn $name ($($arg : $ty),*) -> $ret, |$s| $spans, call, policy, {
            if needs_pieces(policy, $buf as usize, $count, $unit) {
                let (start, unit) = ($buf as usize, $unit);
                let piece = |done: usize, $count: usize| {
                    let $buf = (start + done * unit) as _;
                    $( let $offset = $offset + (done * unit) as ::libc::off_t; )?
                    call($($arg),*)
                };
                return chunked(policy, stringify!($name), (start, $count, unit), Continue::$go_on $(($fd))?, piece) as $ret;
            }
        });
    };
    ($name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, |$s:ident| $spans:block, ) => {
        $crate::define_guarded_call!(@fn $name ($($arg : $ty),*) -> $ret, |$s| $spans, call, policy, {});
    };
    (@fn $name:ident ($($arg:ident : $ty:ty),*) -> $ret:ty, |$s:ident| $spans:block, $call:ident, $policy:ident, $pieces:block) => {
        #[doc = concat!("`", stringify!($name), "` with its memory in regions pinned for the call; `real` is the C library's function (none: fails with `ENOSYS`).")]
        ///
        /// # Safety
        /// The C function's contract.
        #[allow(clippy::too_many_arguments, unused_mut)]
        pub unsafe fn $name<P: Policy>($policy: &P, real: Option<signature::$name>, $($arg: $ty),*) -> $ret {
            let Some(real) = real else {
                set_errno(libc::ENOSYS);
                return <$ret as Failure>::FAILED;
            };
            // SAFETY: the C library's function with the caller's arguments
            // (or, made in pieces, a part of the caller's buffer).
            let $call = |$($arg: $ty),*| unsafe { real($($arg),*) as isize };
            $pieces
            let mut $s = Spans::new();
            $spans
            const RAW: Option<$crate::calls::RawForm> = $crate::calls::raw_form(stringify!($name));
            let raw = RAW.map(|(nr, extra)| {
                let mut args = [0i64; 6];
                for (slot, value) in args.iter_mut().zip([$($arg as i64),*]) {
                    *slot = value;
                }
                if let Some((i, value)) = extra {
                    args[i] = value;
                }
                (nr, args)
            });
            guarded($policy, stringify!($name), &$s, raw, || $call($($arg),*)) as $ret
        }
    };
}

for_each_wrapped_call!(crate::define_guarded_calls);

/// A system call number and, at most, one argument of a fixed value
/// (index, value) past the function's own.
#[doc(hidden)]
pub type RawForm = (i64, Option<(usize, i64)>);

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The system call a wrapped function makes, when it is exactly one call
/// with the function's arguments in order (and at most one more, fixed):
/// with the system-call trap installed, a wrapper whose buffers it pinned
/// makes that call from the trampoline itself, instead of through the C
/// library, where the filter would trap it again and pin the same pages a
/// second time. Evaluated at compile time, per wrapped function.
#[doc(hidden)]
pub const fn raw_form(name: &str) -> Option<RawForm> {
    const FORMS: [(&str, RawForm); 18] = [
        ("read", (libc::SYS_read, None)),
        ("write", (libc::SYS_write, None)),
        ("pread", (libc::SYS_pread64, None)),
        ("pread64", (libc::SYS_pread64, None)),
        ("pwrite", (libc::SYS_pwrite64, None)),
        ("pwrite64", (libc::SYS_pwrite64, None)),
        ("readv", (libc::SYS_readv, None)),
        ("writev", (libc::SYS_writev, None)),
        // No address: the two arguments past the four given are zero.
        ("send", (libc::SYS_sendto, None)),
        ("sendto", (libc::SYS_sendto, None)),
        ("sendmsg", (libc::SYS_sendmsg, None)),
        ("recv", (libc::SYS_recvfrom, None)),
        ("recvfrom", (libc::SYS_recvfrom, None)),
        ("recvmsg", (libc::SYS_recvmsg, None)),
        ("poll", (libc::SYS_poll, None)),
        // The kernel's signal set is 8 bytes.
        ("ppoll", (libc::SYS_ppoll, Some((4, 8)))),
        ("epoll_wait", (libc::SYS_epoll_wait, None)),
        ("getrandom", (libc::SYS_getrandom, None)),
    ];
    let mut i = 0;
    while i < FORMS.len() {
        if same(FORMS[i].0, name) {
            return Some(FORMS[i].1);
        }
        i += 1;
    }
    None
}

/// The C type of `syscall(3)` as the wrappers declare it: the variadic
/// arguments as six fixed ones (on x86-64 and AArch64 they are passed alike,
/// and reading one the caller did not pass reads an unused register).
pub type SyscallFn = unsafe extern "C" fn(
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
    libc::c_long,
) -> libc::c_long;

/// Futex operations whose second word (`uaddr2`, the fifth argument) the
/// kernel touches too.
fn futex_second_word(op: libc::c_long) -> bool {
    matches!(
        op as libc::c_int & libc::FUTEX_CMD_MASK,
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
/// # Safety
/// `syscall(2)`'s contract; `real` is the C library's `syscall`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn syscall<P: Policy>(
    policy: &P,
    real: Option<SyscallFn>,
    nr: libc::c_long,
    args: [libc::c_long; 6],
) -> libc::c_long {
    let [a, b, c, d, e, f] = args;
    let call = || -> isize {
        (match real {
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
        return guarded(policy, "futex", &s, Some((nr, args)), call) as libc::c_long;
    }
    let r = call();
    if r == -1 && crate::guard::errno() == libc::EFAULT && !policy.passes_through() {
        let hit = args
            .iter()
            .find(|&&p| p > 4096 && policy.in_region(p as usize, 1));
        if let Some(p) = hit {
            let _inside = policy.enter();
            let message = format!(
                "zpage: syscall({nr}) failed with EFAULT and its argument {p:#x} points into zpage memory: zpage restores buffers only for the calls it wraps; this call may have met an evicted page\n"
            );
            crate::guard::stderr_line(&message);
            set_errno(libc::EFAULT);
        }
    }
    r as libc::c_long
}
