//! System calls on region memory: the preload library's entry points for
//! the wrappers of `zpage-syscalls` (one list, shared with the Python
//! package's in-process installation). Each exported C name finds the
//! call's memory that lies in the library's regions and pins it for the
//! call; see that crate for what is covered and what is not.
//!
//! Not the `exec` family: it runs in `vfork()` children (CPython's
//! `subprocess`, `posix_spawn`) that have usually closed every descriptor,
//! the userfaultfd included, so an evicted argument string cannot be
//! restored there; `execve` fails with `EFAULT` (see the README).
#![allow(unsafe_code)]

use crate::state;
use crate::sys::{self, Inside};
use std::sync::atomic::Ordering;
use zpage_syscalls::{Policy, Real, Scope};

/// The library's rules: zpage's own calls go straight through; the
/// library's regions are zpage's memory (in a forked child too: it restores
/// its evicted pages itself).
struct Preload;

impl Policy for Preload {
    type Inside = Inside;
    fn passes_through(&self) -> bool {
        sys::inside() || state::get().is_none()
    }
    fn in_region(&self, addr: usize, len: usize) -> bool {
        state::get().is_some_and(|s| s.overlaps(addr, len))
    }
    fn enter(&self) -> Inside {
        Inside::enter()
    }
    fn count_pinned(&self) {
        if let Some(s) = state::get() {
            s.pinned_calls.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn count_retried(&self) {
        if let Some(s) = state::get() {
            s.retried_calls.fetch_add(1, Ordering::Relaxed);
        }
    }
    const ADVICE: &'static str = "raise --budget";
}

/// Exports each listed function under its C name, forwarding to the next
/// definition (`dlsym(RTLD_NEXT)`).
macro_rules! define_preload_entry_points {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => |$s:ident| $spans:block $(pieces $pieces:tt)? ; )*) => {
        #[allow(non_upper_case_globals)]
        mod real_of {
            use super::{Real, Scope};
            $( pub static $name: Real = Real::new(concat!(stringify!($name), "\0"), Scope::Next); )*
        }

        /// Looks every wrapped function up (from the library's constructor:
        /// a wrapper called later, from a signal handler too, only reads
        /// its slot).
        pub fn resolve() {
            $( real_of::$name.resolve(); )*
            REAL_SYSCALL.resolve();
        }

        $(
            /// # Safety
            /// The C function's contract.
            #[no_mangle]
            #[allow(clippy::too_many_arguments)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the slot holds the next definition of this C
                // function, whose type the list declares; the caller keeps
                // the function's contract.
                unsafe {
                    zpage_syscalls::calls::$name(
                        &Preload,
                        real_of::$name.function::<zpage_syscalls::calls::signature::$name>(),
                        $($arg),*
                    )
                }
            }
        )*
    };
}

zpage_syscalls::for_each_wrapped_call!(define_preload_entry_points);

static REAL_SYSCALL: Real = Real::new("syscall\0", Scope::Next);

/// `syscall(3)` (see `zpage_syscalls::calls::syscall`): `SYS_futex` gets
/// its words pinned; other numbers go through, with a line on stderr if one
/// fails with `EFAULT` on region memory.
///
/// # Safety
/// `syscall(2)`'s contract.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    nr: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
    d: libc::c_long,
    e: libc::c_long,
    f: libc::c_long,
) -> libc::c_long {
    // SAFETY: the slot holds the C library's syscall, of the declared type;
    // the caller keeps its contract.
    unsafe {
        zpage_syscalls::calls::syscall(
            &Preload,
            REAL_SYSCALL.function::<zpage_syscalls::calls::SyscallFn>(),
            nr,
            [a, b, c, d, e, f],
        )
    }
}
