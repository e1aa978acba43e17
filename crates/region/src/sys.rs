//! Raw system interface: mmap, madvise, userfaultfd ioctls, futex, clocks.
//!
//! Every function here is a thin wrapper over one system call. None of them
//! allocates or takes a lock, so all of them may be called from the SIGBUS
//! handler (see `signal.rs`). Errors come back as [`Errno`], read from the
//! thread's `errno` right after the call; the signal handler saves and restores
//! `errno` around its work so the interrupted code never sees ours.
//!
//! The userfaultfd calls are in `sys/uffd.rs` (re-exported here); their
//! ioctl numbers and struct layouts are in `uffd_abi.rs`.
#![allow(unsafe_code)]

use std::ffi::c_void;

/// An `errno` value from a failed system call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    fn last() -> Errno {
        Errno(last_errno())
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// The calling thread's `errno`.
pub fn last_errno() -> i32 {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno` (the signal handler restores it on exit).
pub fn set_errno(value: i32) {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value }
}

pub use zpage_codec::PAGE_SIZE;

pub use crate::uffd_abi::*;

mod uffd;
pub use uffd::*;

/// `madvise` advice that faults a range in for writing (breaking copy-on-write)
/// from the kernel, without touching it from user space (Linux 5.14).
pub const MADV_POPULATE_WRITE: i32 = 23;

fn ioctl<T>(fd: i32, request: u64, arg: &mut T) -> Result<(), Errno> {
    // SAFETY: `arg` is a live, exclusively borrowed struct whose layout matches
    // the one the kernel expects for `request` (checked in the notes, §3.2).
    let rc = unsafe { libc::ioctl(fd, request as _, arg as *mut T as *mut c_void) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `MADV_POPULATE_WRITE` of one page: the kernel write-faults it in (a
/// copy-on-write break after `fork()` makes it exclusive again, so
/// `UFFDIO_MOVE` accepts it) without user space touching the page. An absent
/// or write-protected page fails with `EFAULT` instead of raising a signal.
///
/// Made with `syscall(2)`, not `madvise(3)`: under the preload library the
/// program's `madvise` is interposed, and its `MADV_POPULATE_*` restores
/// the range first, which would wait on the very page being evicted.
pub fn populate_write(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: populating (not discarding) a range of our own mapping; the
    // kernel keeps the contents.
    let rc = unsafe { libc::syscall(libc::SYS_madvise, addr, len, MADV_POPULATE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// Whether the page at `addr` is mapped (`mincore`): false if the call fails.
pub fn page_present(addr: usize) -> bool {
    let mut present = [0u8; 1];
    mincore(addr, &mut present).is_ok() && present[0] & 1 != 0
}

/// `poll` one fd for input with a timeout; true if readable.
pub fn poll_in(fd: i32, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    rc > 0 && pfd.revents & libc::POLLIN != 0
}

/// Private anonymous read-write mapping of `len` bytes.
pub fn mmap_anon(len: usize) -> Result<*mut u8, Errno> {
    // SAFETY: a fresh anonymous mapping chosen by the kernel; touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p.cast())
    }
}

/// A shared read-write mapping of the first `len` bytes of `file`.
pub fn mmap_shared_file(file: &std::fs::File, len: usize) -> Result<*mut u8, Errno> {
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh mapping chosen by the kernel of a file this process
    // opened read-write; it touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(Errno::last())
    } else {
        Ok(p.cast())
    }
}

/// A private anonymous mapping of `len` bytes at exactly `addr` with
/// protection `prot` (`MAP_NORESERVE`). `noreplace`: fail with `EEXIST`
/// where something is mapped already; otherwise replace what is there.
pub fn map_fixed(addr: usize, len: usize, prot: i32, noreplace: bool) -> Result<(), Errno> {
    let fixed = if noreplace {
        libc::MAP_FIXED_NOREPLACE
    } else {
        libc::MAP_FIXED
    };
    // SAFETY: maps fresh anonymous memory at a range of the far reservation
    // zpage owns (or, with `noreplace`, where nothing is mapped).
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    if p as usize != addr {
        // A kernel that ignores MAP_FIXED_NOREPLACE put it elsewhere.
        // SAFETY: the mapping just made, unused.
        unsafe { libc::munmap(p, len) };
        return Err(Errno(libc::EEXIST));
    }
    Ok(())
}

/// `mprotect`.
pub fn protect(addr: usize, len: usize, prot: i32) -> Result<(), Errno> {
    // SAFETY: changes the protection of a range the caller owns.
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `munmap`.
///
/// # Safety
/// `[addr, addr+len)` must be a mapping this crate owns that nothing refers to any more.
pub unsafe fn munmap(addr: *mut u8, len: usize) -> Result<(), Errno> {
    // SAFETY: guaranteed by the caller.
    let rc = unsafe { libc::munmap(addr.cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `madvise` with advice that does not discard data (NOHUGEPAGE, HUGEPAGE, ...).
pub fn madvise_keep(addr: usize, len: usize, advice: i32) -> Result<(), Errno> {
    debug_assert!(advice != libc::MADV_DONTNEED && advice != libc::MADV_FREE);
    // SAFETY: non-destructive advice on a range of our own mappings.
    let rc = unsafe { libc::madvise(addr as *mut c_void, len, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `mincore` of `pages.len()` pages from `addr`: bit 0 of each byte says
/// whether that page is mapped now. Async-signal-safe, allocates nothing.
pub fn mincore(addr: usize, pages: &mut [u8]) -> Result<(), Errno> {
    // SAFETY: `addr` is page-aligned (callers pass region page addresses)
    // and `pages` has one byte per page of the range.
    let rc = unsafe {
        libc::mincore(
            addr as *mut c_void,
            pages.len() * PAGE_SIZE,
            pages.as_mut_ptr(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `MADV_DONTNEED` on part of the staging area: frees pages whose contents
/// have already been compressed or copied elsewhere.
pub fn discard(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: callers pass only staging slots whose data is no longer needed;
    // the staging area is private to this crate and nothing holds references into it.
    let rc = unsafe { libc::madvise(addr as *mut c_void, len, libc::MADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `MADV_DONTNEED` on many ranges with one `process_madvise` (the staging
/// area's batched discards): the pages crate's, which the pool's page heap
/// uses too. Async-signal-safe.
pub use zpage_pages::{discard_ranges, DISCARD_RANGES_MAX};

/// `close`.
pub fn close(fd: i32) {
    // SAFETY: closing an fd we own.
    unsafe {
        libc::close(fd);
    }
}

/// Duplicates `fd` to a number >= `min` with close-on-exec, closing the original.
/// Keeps the uffd away from low-numbered fds that programs close or reuse.
pub fn dup_high(fd: i32, min: i32) -> i32 {
    // SAFETY: fcntl on an fd we own.
    let hi = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if hi >= 0 {
        close(fd);
        hi
    } else {
        fd
    }
}

/// True while `fd` is open.
pub fn fd_is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only reads the descriptor flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// `sched_yield`.
pub fn yield_now() {
    // SAFETY: no arguments.
    unsafe {
        libc::sched_yield();
    }
}

/// Sleeps `ns` nanoseconds (async-signal-safe).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    };
    // SAFETY: valid timespec, null remainder.
    unsafe {
        libc::nanosleep(&ts, std::ptr::null_mut());
    }
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO; async-signal-safe).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `FUTEX_WAIT` on `word` while it equals `expected`, at most `timeout_ns`.
pub fn futex_wait(word: &std::sync::atomic::AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as _,
        tv_nsec: (timeout_ns % 1_000_000_000) as _,
    };
    // SAFETY: `word` is a live, aligned u32; the timespec is valid for the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// `FUTEX_WAKE` one waiter on `word` (async-signal-safe).
pub fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: `word` is a live, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            1,
        );
    }
}

/// `FUTEX_WAKE` every waiter on `word`.
pub fn futex_wake_all(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: `word` is a live, aligned u32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

/// `dup3(fd, target, O_CLOEXEC)`: puts `fd`'s file at descriptor `target`
/// (closing what was there), then closes `fd`.
pub fn replace_fd(fd: i32, target: i32) -> Result<(), Errno> {
    // SAFETY: descriptors we own; dup3 has no memory arguments.
    let rc = unsafe { libc::dup3(fd, target, libc::O_CLOEXEC) };
    let result = if rc < 0 { Err(Errno::last()) } else { Ok(()) };
    close(fd);
    result
}

/// Whether each page of `[addr, addr + pages * PAGE_SIZE)` has any entry
/// in this process's page table (present, swapped, or a marker such as an
/// evicted page's poison marker), from `/proc/self/pagemap` bits 63 and 62,
/// given to `each` with the page's index, for `pages` pages. Allocates
/// nothing (the fork child hook calls it).
pub fn page_table_entries(
    addr: usize,
    pages: usize,
    mut each: impl FnMut(usize, bool),
) -> Result<(), Errno> {
    let path = b"/proc/self/pagemap\0";
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    let mut words = [0u64; 512];
    let mut done = 0;
    let mut result = Ok(());
    while done < pages {
        let n = (pages - done).min(words.len());
        let offset = ((addr / PAGE_SIZE + done) * 8) as libc::off_t;
        // SAFETY: reads at most `n` words into our own array.
        let got = unsafe { libc::pread(fd, words.as_mut_ptr().cast(), n * 8, offset) };
        if got != (n * 8) as isize {
            result = Err(Errno::last());
            break;
        }
        for (i, word) in words[..n].iter().enumerate() {
            each(done + i, word & (3 << 62) != 0);
        }
        done += n;
    }
    close(fd);
    result
}

/// `getuid`.
pub fn getuid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::getuid() }
}

/// `unlink` of a path (async-signal-safe: an exit hook may call it).
pub fn unlink(path: &std::ffi::CStr) {
    // SAFETY: a NUL-terminated path.
    unsafe {
        libc::unlink(path.as_ptr());
    }
}

/// Registers `hook` to run at normal process exit (`atexit`).
pub fn at_exit(hook: extern "C" fn()) {
    // SAFETY: registers a function that lives for the whole program.
    unsafe {
        libc::atexit(hook);
    }
}

/// True if this process shares its memory with process `pid`: a `vfork()`
/// (or `posix_spawn`) child of it, which runs in its parent's memory until
/// it calls `exec`, so the regions there are the parent's own and their
/// faults can be resolved as a thread of the parent would. `kcmp(KCMP_VM)`;
/// async-signal-safe.
pub fn shares_memory_with(pid: i32) -> bool {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp compares two processes' kernel objects; it reads no
    // memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            getpid() as libc::c_long,
            pid as libc::c_long,
            KCMP_VM,
            0 as libc::c_long,
            0 as libc::c_long,
        ) == 0
    }
}

/// `getpid`.
pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::getpid() }
}

/// This process's resident memory in bytes (`/proc/self/statm`'s second
/// field, the count `VmRSS` shows), read into a stack buffer: no
/// allocation, so zpage's threads may call it with any allocator.
pub fn resident_bytes() -> Result<u64, Errno> {
    let path = b"/proc/self/statm\0";
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    let mut text = [0u8; 128];
    // SAFETY: reads at most the array's length into our own array.
    let got = unsafe { libc::pread(fd, text.as_mut_ptr().cast(), text.len(), 0) };
    let result = if got <= 0 {
        Err(Errno::last())
    } else {
        statm_resident_pages(&text[..got as usize])
            .map(|pages| pages * PAGE_SIZE as u64)
            .ok_or(Errno(libc::EINVAL))
    };
    close(fd);
    result
}

/// Reads a file (one of `/proc`) from start to end in 4 KiB pieces into a
/// stack buffer, handing each piece to `each`: no allocation, so zpage's
/// threads may call it with any allocator. `path` ends with a NUL.
pub fn read_in_pieces(path: &[u8], mut each: impl FnMut(&[u8])) -> Result<(), Errno> {
    assert_eq!(
        path.last(),
        Some(&0),
        "read_in_pieces: the path must end with a NUL"
    );
    // SAFETY: a NUL-terminated path (checked); the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Errno::last());
    }
    let mut piece = [0u8; 4096];
    let result = loop {
        // SAFETY: reads at most the array's length into our own array.
        let got = unsafe { libc::read(fd, piece.as_mut_ptr().cast(), piece.len()) };
        match got {
            0 => break Ok(()),
            n if n > 0 => each(&piece[..n as usize]),
            _ => {
                let e = Errno::last();
                if e.0 != libc::EINTR {
                    break Err(e);
                }
            }
        }
    };
    close(fd);
    result
}

/// The second field of a `statm` line (pages resident).
pub fn statm_resident_pages(text: &[u8]) -> Option<u64> {
    let mut fields = text.split(|&b| b == b' ');
    fields.next()?;
    let field = fields.next()?;
    let digits = field.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    Some(
        field[..digits]
            .iter()
            .fold(0u64, |n, &b| n * 10 + u64::from(b - b'0')),
    )
}

#[cfg(test)]
mod tests;
