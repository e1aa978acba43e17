//! The C library's own functions behind the interposers, looked up with
//! `dlsym(RTLD_NEXT)` when the library starts or at first use (so another
//! interposer loaded after this one still sees the calls). If a lookup
//! fails, the calls go to the kernel directly. The `malloc` family goes to
//! the next allocator the same way (see `malloc.rs`).
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;

macro_rules! real_functions {
    ($( $name:ident : fn($($arg:ident : $ty:ty),*) -> $ret:ty ; )*) => {
        #[allow(non_upper_case_globals)]
        pub mod slot {
            use std::sync::atomic::AtomicUsize;
            $( pub static $name: AtomicUsize = AtomicUsize::new(0); )*
        }

        /// Looks every function up (from the library's constructor).
        pub fn resolve() {
            $(
                // SAFETY: a NUL-terminated name; RTLD_NEXT is valid in a
                // shared object.
                let p = unsafe {
                    libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr().cast())
                };
                slot::$name.store(p as usize, Ordering::Release);
            )*
        }

        $(
            /// The next definition of the function (looked up now if it
            /// was not yet), if there is one.
            #[allow(dead_code)]
            pub fn $name() -> Option<unsafe extern "C" fn($($ty),*) -> $ret> {
                let mut p = slot::$name.load(Ordering::Acquire);
                if p == 0 {
                    // SAFETY: as in `resolve`.
                    p = unsafe {
                        libc::dlsym(libc::RTLD_NEXT, concat!(stringify!($name), "\0").as_ptr().cast())
                    } as usize;
                    slot::$name.store(p, Ordering::Release);
                }
                // SAFETY: a non-null address dlsym returned for this name,
                // whose C signature is the one declared here.
                (p != 0).then(|| unsafe {
                    std::mem::transmute::<usize, unsafe extern "C" fn($($ty),*) -> $ret>(p)
                })
            }
        )*
    };
}

use libc::{c_int, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

real_functions! {
    mmap: fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void;
    munmap: fn(a: *mut c_void, l: size_t) -> c_int;
    mremap: fn(a: *mut c_void, o: size_t, n: size_t, f: c_int, na: *mut c_void) -> *mut c_void;
    mprotect: fn(a: *mut c_void, l: size_t, p: c_int) -> c_int;
    madvise: fn(a: *mut c_void, l: size_t, adv: c_int) -> c_int;
    read: fn(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t;
    write: fn(fd: c_int, b: *const c_void, n: size_t) -> ssize_t;
    pread: fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t;
    pwrite: fn(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t;
    pread64: fn(fd: c_int, b: *mut c_void, n: size_t, o: off_t) -> ssize_t;
    pwrite64: fn(fd: c_int, b: *const c_void, n: size_t, o: off_t) -> ssize_t;
    readv: fn(fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    writev: fn(fd: c_int, v: *const iovec, n: c_int) -> ssize_t;
    preadv: fn(fd: c_int, v: *const iovec, n: c_int, o: off_t) -> ssize_t;
    pwritev: fn(fd: c_int, v: *const iovec, n: c_int, o: off_t) -> ssize_t;
    send: fn(fd: c_int, b: *const c_void, n: size_t, f: c_int) -> ssize_t;
    sendto: fn(fd: c_int, b: *const c_void, n: size_t, f: c_int, a: *const sockaddr, al: socklen_t) -> ssize_t;
    sendmsg: fn(fd: c_int, m: *const msghdr, f: c_int) -> ssize_t;
    recv: fn(fd: c_int, b: *mut c_void, n: size_t, f: c_int) -> ssize_t;
    recvfrom: fn(fd: c_int, b: *mut c_void, n: size_t, f: c_int, a: *mut sockaddr, al: *mut socklen_t) -> ssize_t;
    recvmsg: fn(fd: c_int, m: *mut msghdr, f: c_int) -> ssize_t;
    sigaction: fn(s: c_int, a: *const libc::sigaction, o: *mut libc::sigaction) -> c_int;
    signal: fn(s: c_int, h: libc::sighandler_t) -> libc::sighandler_t;
    pthread_sigmask: fn(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int;
    sigprocmask: fn(how: c_int, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> c_int;
    malloc_usable_size: fn(p: *mut c_void) -> size_t;
    malloc: fn(n: size_t) -> *mut c_void;
    calloc: fn(n: size_t, m: size_t) -> *mut c_void;
    realloc: fn(p: *mut c_void, n: size_t) -> *mut c_void;
    free: fn(p: *mut c_void) -> ();
    memalign: fn(a: size_t, n: size_t) -> *mut c_void;
    poll: fn(f: *mut libc::pollfd, n: libc::nfds_t, t: c_int) -> c_int;
    ppoll: fn(f: *mut libc::pollfd, n: libc::nfds_t, t: *const libc::timespec, m: *const libc::sigset_t) -> c_int;
    select: fn(n: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *mut libc::timeval) -> c_int;
    epoll_wait: fn(fd: c_int, ev: *mut libc::epoll_event, n: c_int, t: c_int) -> c_int;
    getrandom: fn(b: *mut c_void, n: size_t, f: libc::c_uint) -> ssize_t;
    syscall: fn(n: libc::c_long, a: libc::c_long, b: libc::c_long, c: libc::c_long, d: libc::c_long, e: libc::c_long, f: libc::c_long) -> libc::c_long;
}
