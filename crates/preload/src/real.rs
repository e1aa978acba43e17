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

use libc::{c_int, c_void, off_t, size_t};

real_functions! {
    mmap: fn(a: *mut c_void, l: size_t, p: c_int, f: c_int, fd: c_int, o: off_t) -> *mut c_void;
    munmap: fn(a: *mut c_void, l: size_t) -> c_int;
    mremap: fn(a: *mut c_void, o: size_t, n: size_t, f: c_int, na: *mut c_void) -> *mut c_void;
    mprotect: fn(a: *mut c_void, l: size_t, p: c_int) -> c_int;
    madvise: fn(a: *mut c_void, l: size_t, adv: c_int) -> c_int;
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
    sigaltstack: fn(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int;
    pthread_attr_setstack: fn(attr: *mut libc::pthread_attr_t, addr: *mut c_void, size: size_t) -> c_int;
    swapcontext: fn(o: *mut libc::ucontext_t, u: *const libc::ucontext_t) -> c_int;
    setcontext: fn(u: *const libc::ucontext_t) -> c_int;
    mlock: fn(a: *const c_void, l: size_t) -> c_int;
    mlock2: fn(a: *const c_void, l: size_t, f: libc::c_uint) -> c_int;
    munlock: fn(a: *const c_void, l: size_t) -> c_int;
    mlockall: fn(f: c_int) -> c_int;
    munlockall: fn() -> c_int;
    posix_spawn: fn(pid: *mut libc::pid_t, path: *const libc::c_char, a: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut libc::c_char, envp: *const *mut libc::c_char) -> c_int;
    posix_spawnp: fn(pid: *mut libc::pid_t, file: *const libc::c_char, a: *const libc::posix_spawn_file_actions_t, attr: *const libc::posix_spawnattr_t, argv: *const *mut libc::c_char, envp: *const *mut libc::c_char) -> c_int;
    posix_spawn_file_actions_init: fn(a: *mut libc::posix_spawn_file_actions_t) -> c_int;
    posix_spawn_file_actions_addopen: fn(a: *mut libc::posix_spawn_file_actions_t, fd: c_int, path: *const libc::c_char, oflag: c_int, mode: libc::mode_t) -> c_int;
    posix_spawn_file_actions_addclose: fn(a: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int;
    posix_spawn_file_actions_adddup2: fn(a: *mut libc::posix_spawn_file_actions_t, fd: c_int, newfd: c_int) -> c_int;
    posix_spawn_file_actions_addchdir_np: fn(a: *mut libc::posix_spawn_file_actions_t, path: *const libc::c_char) -> c_int;
    posix_spawn_file_actions_addfchdir_np: fn(a: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int;
    posix_spawn_file_actions_addclosefrom_np: fn(a: *mut libc::posix_spawn_file_actions_t, from: c_int) -> c_int;
    system: fn(command: *const libc::c_char) -> c_int;
    execve: fn(path: *const libc::c_char, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> c_int;
    execv: fn(path: *const libc::c_char, argv: *const *const libc::c_char) -> c_int;
    execvp: fn(file: *const libc::c_char, argv: *const *const libc::c_char) -> c_int;
    execvpe: fn(file: *const libc::c_char, argv: *const *const libc::c_char, envp: *const *const libc::c_char) -> c_int;
    popen: fn(command: *const libc::c_char, mode: *const libc::c_char) -> *mut libc::FILE;
    setlocale: fn(category: c_int, locale: *const libc::c_char) -> *mut libc::c_char;
    newlocale: fn(mask: c_int, locale: *const libc::c_char, base: libc::locale_t) -> libc::locale_t;
    duplocale: fn(locale: libc::locale_t) -> libc::locale_t;
}
