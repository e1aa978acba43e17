//! zpage-syscalls: system calls on region memory, for the front ends that
//! run inside someone else's program (the preload library, the Python
//! package).
//!
//! With zpage's SIGBUS fault mode the kernel cannot fault an evicted page
//! in for a system call: `read(2)` into one, `write(2)` from one, a futex
//! word on one all fail with `EFAULT` (and a datagram received into one is
//! lost). The wrappers here stand in for the C library's functions: they
//! find the memory a call reads or writes that lies in regions and pin it
//! for the call (restored, kept resident until the call returns), so the
//! kernel sees ordinary memory. Memory too large to pin (more than half the
//! budget, more than [`MAX_SPANS`] buffers) is restored instead and the call
//! retried on `EFAULT`; a call that still fails prints a line naming it and
//! fails with `EFAULT`. The kernel never reads or writes wrong bytes: it
//! fails the call.
//!
//! One implementation, two ways in:
//!
//! - the preload library (`LD_PRELOAD`, `zpage run`) exports the C names and
//!   calls [`calls`]' functions with `dlsym(RTLD_NEXT)`'s function;
//! - [`inproc`] rewrites the GOT entries of the loaded objects, for a front
//!   end loaded into a program already running (the Python package).
//!
//! Both make their entry points from one list ([`for_each_wrapped_call!`]):
//! `read`, `write`, `pread(64)`, `pwrite(64)`, `readv`, `writev`, `preadv`,
//! `pwritev`, `send`, `sendto`, `sendmsg`, `recv`, `recvfrom`, `recvmsg`,
//! the fortified `__read_chk`, `__pread64_chk`, `__recv_chk`,
//! `__fread_chk`, `fread`, `fwrite` and their `_unlocked` forms (the C
//! library's stdio calls the kernel from inside, where no other wrapper
//! sees it), `poll`, `ppoll`, `select`, `epoll_wait`, `getrandom`, and
//! `syscall(SYS_futex, ...)`. Not covered: the C library's calls to itself
//! (its mutexes and condition variables issue `futex` directly), io_uring,
//! `syscall()` numbers other than `SYS_futex` (a line on stderr names such a
//! call when it fails with `EFAULT` on region memory), and, in process,
//! calls that reach the C library through no GOT entry (`dlsym`: ctypes).
//!
//! The wrappers run on any thread and in program signal handlers: they
//! allocate nothing on the way to the call (the spans live in a fixed array
//! on the stack), look regions up through the region layer's lock-free
//! table, and pin through `zpage_region::pin_range`.
#![allow(unsafe_code)]

pub mod calls;
mod guard;
pub mod inproc;
mod real;
mod spans;
pub mod trap;

pub use guard::{
    chunked, errno, guarded, needs_pieces, set_errno, stderr_line, Continue, Policy, CHUNK_BYTES,
};
pub use real::{Real, Scope};
pub use spans::{Spans, MAX_SPANS};
