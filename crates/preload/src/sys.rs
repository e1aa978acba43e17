//! Raw system calls (no interposer sees them) and the thread's re-entrancy
//! flag.
#![allow(unsafe_code)]

use std::cell::Cell;

/// `mmap(2)` as a raw system call.
pub fn raw_mmap(
    addr: *mut libc::c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    offset: libc::off_t,
) -> *mut libc::c_void {
    // SAFETY: the kernel validates every argument; a failure is returned as
    // -1 with errno set, which is MAP_FAILED.
    unsafe {
        libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, offset) as *mut libc::c_void
    }
}

/// `mprotect(2)` as a raw system call; 0 or -1 with `errno`.
pub fn raw_mprotect(addr: usize, len: usize, prot: i32) -> i32 {
    // SAFETY: the kernel validates every argument.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as i32 }
}

/// `madvise(2)` as a raw system call; 0 or -1 with `errno`.
pub fn raw_madvise(addr: usize, len: usize, advice: i32) -> i32 {
    // SAFETY: the kernel validates every argument; advice that discards
    // data is the caller's decision.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as i32 }
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    zpage_syscalls::errno()
}

/// `munmap(2)` as a raw system call.
pub fn raw_munmap(addr: *mut libc::c_void, len: usize) -> i32 {
    // SAFETY: as above; unmapping is the caller's decision.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as i32 }
}

pub use zpage_syscalls::{set_errno, stderr_line};

thread_local! {
    /// Set while the thread runs zpage's own code from an interposer: the
    /// calls that code makes (its regions' mmaps, its reads) go straight
    /// to the C library.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// True while the calling thread is inside zpage.
pub fn inside() -> bool {
    INSIDE.with(|c| c.get())
}

/// Marks the thread as inside zpage until dropped; blocks asynchronous
/// signals meanwhile (a program handler that calls `write` or `malloc`
/// could otherwise wait on a lock this thread holds). The region crate's
/// guard does the blocking: the same set its own threads block, kept in the
/// guard on the stack (nothing allocated inside the program's `malloc`), the
/// old mask restored on drop after the flag.
pub struct Inside {
    was: bool,
    _signals: zpage_region::SignalGuard,
}

impl Inside {
    pub fn enter() -> Inside {
        let signals = zpage_region::SignalGuard::block_async();
        let was = INSIDE.with(|c| c.replace(true));
        Inside {
            was,
            _signals: signals,
        }
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        // The guard, a field, restores the signal mask after this.
        INSIDE.with(|c| c.set(self.was));
    }
}
