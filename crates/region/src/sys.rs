//! Raw system interface: mmap, madvise, userfaultfd ioctls, futex, clocks.
//!
//! Every function here is a thin wrapper over one system call. None of them
//! allocates or takes a lock, so all of them may be called from the SIGBUS
//! handler (see `signal.rs`). Errors come back as [`Errno`], read from the
//! thread's `errno` right after the call; the signal handler saves and restores
//! `errno` around its work so the interrupted code never sees ours.
//!
//! The ioctl numbers and struct layouts are those checked on the target kernel
//! (6.18) in `shared/notes/userfaultfd.md` §3.2; the system headers predate
//! `UFFDIO_MOVE`, so they are spelled out here.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// `madvise` advice that faults a range in for writing (breaking copy-on-write)
/// from the kernel, without touching it from user space (Linux 5.14).
pub const MADV_POPULATE_WRITE: i32 = 23;

/// One 32-byte `uffd_msg`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdMsg {
    pub event: u8,
    /// Page faults: flags; remove/unmap: start; remap: from.
    pub a: u64,
    /// Page faults: address; remove/unmap: end; remap: to.
    pub b: u64,
    /// Remap: len.
    pub c: u64,
}

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

/// `userfaultfd(flags)`; returns the fd.
pub fn userfaultfd(flags: i32) -> Result<i32, Errno> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        Err(Errno::last())
    } else {
        Ok(fd as i32)
    }
}

/// `open("/dev/userfaultfd")` + `USERFAULTFD_IOC_NEW(flags)`.
pub fn userfaultfd_dev(flags: i32) -> Result<i32, Errno> {
    let path = b"/dev/userfaultfd\0";
    // SAFETY: path is NUL-terminated.
    let dev = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if dev < 0 {
        return Err(Errno::last());
    }
    // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value.
    let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW as _, flags as libc::c_ulong) };
    let err = Errno::last();
    close(dev);
    if fd < 0 {
        Err(err)
    } else {
        Ok(fd)
    }
}

/// `UFFDIO_API` handshake; returns the features the kernel supports.
pub fn uffd_api(fd: i32, features: u64) -> Result<u64, Errno> {
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_API, &mut api)?;
    Ok(api.features)
}

/// `UFFDIO_REGISTER`; returns the ioctls allowed on the range.
pub fn uffd_register(fd: i32, start: usize, len: usize, mode: u64) -> Result<u64, Errno> {
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut reg)?;
    Ok(reg.ioctls)
}

/// `UFFDIO_UNREGISTER`.
pub fn uffd_unregister(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut range = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_UNREGISTER, &mut range)
}

/// `UFFDIO_WAKE` (handler-thread mode, after `EEXIST`).
pub fn uffd_wake(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut range = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_WAKE, &mut range)
}

/// `UFFDIO_COPY` of one page from `src` (any readable memory) to `dst`.
pub fn uffd_copy(fd: i32, dst: usize, src: *const u8, mode: u64) -> Result<(), Errno> {
    let mut copy = UffdioCopy {
        dst: dst as u64,
        src: src as u64,
        len: PAGE_SIZE as u64,
        mode,
        copy: 0,
    };
    ioctl(fd, UFFDIO_COPY, &mut copy)
}

/// `UFFDIO_WRITEPROTECT` of one page: `protect` or lift the protection
/// (which also wakes a handler-thread-mode waiter).
pub fn uffd_writeprotect(fd: i32, addr: usize, protect: bool) -> Result<(), Errno> {
    let mut wp = UffdioWriteprotect {
        range: UffdioRange {
            start: addr as u64,
            len: PAGE_SIZE as u64,
        },
        mode: protect as u64,
    };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp)
}

/// `UFFDIO_POISON` of `len` bytes: accesses fault with SIGBUS until the
/// range is filled again (`UFFDIO_COPY` replaces the marker) or discarded.
/// An evicted page carries one so that it can never read as zeros, even if
/// the program closes the userfaultfd and the range is unregistered.
pub fn uffd_poison(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut poison = UffdioPoison {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: 0,
        updated: 0,
    };
    ioctl(fd, UFFDIO_POISON, &mut poison)
}

/// `MADV_POPULATE_WRITE` of one page: the kernel write-faults it in (a
/// copy-on-write break after `fork()` makes it exclusive again, so
/// `UFFDIO_MOVE` accepts it) without user space touching the page. An absent
/// or write-protected page fails with `EFAULT` instead of raising a signal.
pub fn populate_write(addr: usize, len: usize) -> Result<(), Errno> {
    // SAFETY: populating (not discarding) a range of our own mapping; the
    // kernel keeps the contents.
    let rc = unsafe { libc::madvise(addr as *mut c_void, len, MADV_POPULATE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// `UFFDIO_ZEROPAGE` of one page.
pub fn uffd_zeropage(fd: i32, dst: usize, mode: u64) -> Result<(), Errno> {
    let mut zero = UffdioZeropage {
        range: UffdioRange {
            start: dst as u64,
            len: PAGE_SIZE as u64,
        },
        mode,
        zeropage: 0,
    };
    ioctl(fd, UFFDIO_ZEROPAGE, &mut zero)
}

/// `UFFDIO_MOVE` of `len` bytes; returns the bytes moved, or the errno with
/// the bytes moved before the failure (the kernel may move a prefix).
pub fn uffd_move(
    fd: i32,
    dst: usize,
    src: usize,
    len: usize,
    mode: u64,
) -> Result<usize, (Errno, usize)> {
    let mut mv = UffdioMove {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode,
        moved: 0,
    };
    match ioctl(fd, UFFDIO_MOVE, &mut mv) {
        Ok(()) => Ok(mv.moved.max(0) as usize),
        Err(e) => Err((e, mv.moved.max(0) as usize)),
    }
}

/// `UFFDIO_MOVE` of one page from `src` to `dst`, judged by where the page
/// ended up rather than by the ioctl's answer alone.
///
/// Linux 6.18 can fail a MOVE that did move the page: when the source is the
/// shared zero page and a write replaces it with a private copy during the
/// MOVE, the ioctl returns `EEXIST` with no bytes counted, though the page
/// now sits at `dst` and `src` is empty (a page restored by a read fault is
/// the zero page, and the program's write often follows at once). Taken at
/// its word, that answer loses the page: the caller keeps it as if still
/// mapped, and the next MOVE finds nothing to move. So after a failure the
/// two addresses are looked at (`mincore`): the source gone and the
/// destination present means moved. Async-signal-safe (two system calls).
pub fn move_page(fd: i32, dst: usize, src: usize) -> Result<(), Errno> {
    match uffd_move(fd, dst, src, PAGE_SIZE, 0) {
        Ok(_) | Err((_, PAGE_SIZE)) => Ok(()),
        Err((e, _)) => {
            if !page_present(src) && page_present(dst) {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Whether the page at `addr` is mapped (`mincore`): false if the call fails.
pub fn page_present(addr: usize) -> bool {
    let mut present = [0u8; 1];
    mincore(addr, &mut present).is_ok() && present[0] & 1 != 0
}

/// Reads pending `uffd_msg`s from a non-blocking uffd into `out`; returns how many.
pub fn uffd_read(fd: i32, out: &mut [UffdMsg]) -> Result<usize, Errno> {
    let mut raw = [0u8; UFFD_MSG_BYTES * 16];
    let want = out.len().min(16) * UFFD_MSG_BYTES;
    // SAFETY: `raw` is a live buffer of at least `want` bytes.
    let n = unsafe { libc::read(fd, raw.as_mut_ptr().cast(), want) };
    if n < 0 {
        return Err(Errno::last());
    }
    let count = n as usize / UFFD_MSG_BYTES;
    for (i, msg) in out.iter_mut().take(count).enumerate() {
        let m = &raw[i * UFFD_MSG_BYTES..(i + 1) * UFFD_MSG_BYTES];
        let word = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&m[o..o + 8]);
            u64::from_ne_bytes(b)
        };
        *msg = UffdMsg {
            event: m[0],
            a: word(8),
            b: word(16),
            c: word(24),
        };
    }
    Ok(count)
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

/// Most ranges one `process_madvise` call of [`discard_ranges`] hands the
/// kernel (its iovec array is on the stack; more ranges take more calls).
pub const DISCARD_RANGES_MAX: usize = 256;

/// `process_madvise`'s "the calling thread's process" (Linux 6.15+): no
/// pidfd to open, and none to reopen in a forked child.
const PIDFD_SELF_THREAD: libc::c_int = -10000;

/// Whether [`discard_ranges`] still tries `process_madvise`: cleared once
/// the kernel refuses it, so that an older kernel costs one failed call, not
/// one a batch.
static BATCHED: AtomicBool = AtomicBool::new(true);

/// `MADV_DONTNEED` on many ranges of the staging area at once, with one
/// `process_madvise` call: the kernel flushes the TLB once for the lot
/// instead of once a range, and a flush interrupts every CPU running a
/// thread of the process (0.72 against 10.08 µs a one-page range with a
/// thread running on the other CPU: the crate documentation's table). A
/// kernel without it (before 6.15), or a partial advice, falls back to one
/// `madvise` a range (advising a range twice is harmless). Async-signal-safe.
pub fn discard_ranges(ranges: &[(usize, usize)]) {
    for batch in ranges.chunks(DISCARD_RANGES_MAX) {
        discard_batch(batch);
    }
}

/// [`discard_ranges`] for at most [`DISCARD_RANGES_MAX`] ranges.
fn discard_batch(ranges: &[(usize, usize)]) {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; DISCARD_RANGES_MAX];
    let mut total = 0;
    for (slot, &(addr, len)) in iov.iter_mut().zip(ranges) {
        *slot = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: len,
        };
        total += len;
    }
    if ranges.len() > 1 && BATCHED.load(Ordering::Relaxed) {
        // SAFETY: the iovecs name staging ranges whose data is no longer
        // needed (as for `discard`); the kernel only reads the array.
        let done = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF_THREAD,
                iov.as_ptr(),
                ranges.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if done == total as i64 {
            return;
        }
        // EPERM: a seccomp filter that allows `madvise` but not this.
        if done < 0
            && matches!(
                Errno::last().0,
                libc::EBADF | libc::ENOSYS | libc::EINVAL | libc::EPERM
            )
        {
            BATCHED.store(false, Ordering::Relaxed);
        }
    }
    for &(addr, len) in ranges {
        let _ = discard(addr, len);
    }
}

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

/// A message for the few states the fault path cannot recover from without
/// handing back wrong bytes, built without allocating (the fault path may be
/// interrupting `malloc`): text and numbers are appended to a fixed buffer,
/// then written to stderr and the process aborts.
pub struct Fatal {
    buf: [u8; 768],
    len: usize,
}

impl Fatal {
    /// Starts the message with `zpage: `.
    pub fn new() -> Fatal {
        Fatal {
            buf: [0; 768],
            len: 0,
        }
        .text("zpage: ")
    }

    /// Appends `s` (truncated if the buffer is full).
    pub fn text(mut self, s: &str) -> Fatal {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        self
    }

    /// Appends `value` in decimal.
    pub fn dec(self, mut value: u64) -> Fatal {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.text(std::str::from_utf8(&digits[i..]).unwrap_or("?"))
    }

    /// Appends `value` as `0x...` hexadecimal.
    pub fn hex(self, value: u64) -> Fatal {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for (i, digit) in digits[2..].iter_mut().enumerate() {
            let nibble = (value >> (60 - 4 * i)) & 0xf;
            *digit = b"0123456789abcdef"[nibble as usize];
        }
        self.text(std::str::from_utf8(&digits).unwrap_or("?"))
    }

    /// The message so far (for tests).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    /// Writes the message and a newline to stderr, and goes on.
    pub fn print(self) {
        let this = self.text("\n");
        // SAFETY: write(2) is async-signal-safe; the buffer is live.
        unsafe { libc::write(2, this.buf.as_ptr().cast(), this.len) };
    }

    /// Writes the message and a newline to stderr and aborts.
    pub fn abort(self) -> ! {
        let this = self.text("\n");
        // SAFETY: write(2) and abort(3) are async-signal-safe; the buffer is live.
        unsafe {
            libc::write(2, this.buf.as_ptr().cast(), this.len);
            libc::abort()
        }
    }
}

impl Default for Fatal {
    fn default() -> Self {
        Fatal::new()
    }
}

impl std::fmt::Debug for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A private anonymous mapping owned by this crate, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    base: usize,
    len: usize,
    leak: std::sync::atomic::AtomicBool,
}

impl Mapping {
    /// Maps `pages` pages read-write with transparent huge pages disabled
    /// (userfaultfd resolves in 4 KiB pages; a THP would be split by the first
    /// MOVE anyway).
    pub fn new(pages: usize) -> Result<Mapping, Errno> {
        let len = pages * PAGE_SIZE;
        Mapping::at(mmap_anon(len)? as usize, len)
    }

    /// As [`Mapping::new`], in the far range when this process reserved it
    /// (`crate::far`): region memory the program sees, recognisable by its
    /// address.
    pub fn new_for_region(pages: usize) -> Result<Mapping, Errno> {
        let len = pages * PAGE_SIZE;
        match crate::far::take(len) {
            Some(base) => Mapping::at(base, len),
            None => Mapping::new(pages),
        }
    }

    fn at(base: usize, len: usize) -> Result<Mapping, Errno> {
        let m = Mapping {
            base,
            len,
            leak: std::sync::atomic::AtomicBool::new(false),
        };
        madvise_keep(base, len, libc::MADV_NOHUGEPAGE)?;
        Ok(m)
    }

    pub fn base(&self) -> usize {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn pages(&self) -> usize {
        self.len / PAGE_SIZE
    }

    pub fn addr(&self, page: usize) -> usize {
        self.base + page * PAGE_SIZE
    }

    /// The page at index `page`, which the caller knows to be present and not
    /// concurrently modified (a staging slot it owns).
    pub fn page(&self, page: usize) -> &[u8; PAGE_SIZE] {
        assert!(page < self.pages());
        // SAFETY: in bounds of a live mapping owned by self, page-aligned; the
        // staging protocol gives the caller exclusive ownership of the slot, so
        // nothing writes it while the reference lives.
        unsafe { &*(self.addr(page) as *const [u8; PAGE_SIZE]) }
    }

    /// The whole mapping as bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: live mapping owned by self; its contents as seen by the
        // program never change under zpage (evict/restore preserve bytes).
        unsafe { std::slice::from_raw_parts(self.base as *const u8, self.len) }
    }

    /// Leaves the address range alone on drop (the program unmapped or
    /// moved part of it; something else may live there now).
    pub fn leak_on_drop(&self) {
        self.leak.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.leak.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if crate::far::contains(self.base) {
            crate::far::give_back(self.base, self.len);
        } else {
            // SAFETY: we own the mapping and this is its last use.
            let _ = unsafe { munmap(self.base as *mut u8, self.len) };
        }
    }
}

/// The bytes of `m`, mutably, for as long as `_exclusive` (the owner's
/// exclusive borrow, proof that no other reference into `m` exists) lives.
pub(crate) fn exclusive_bytes<'a, T>(m: &Mapping, _exclusive: &'a mut T) -> &'a mut [u8] {
    // SAFETY: live mapping; the caller owns `m` and holds `&mut` of its owner,
    // so no other slice of the mapping is live for 'a (see Region::as_mut_slice).
    unsafe { std::slice::from_raw_parts_mut(m.base() as *mut u8, m.len()) }
}

/// Signals that report a fault of the instruction being executed; they must
/// stay deliverable everywhere (blocked, the kernel kills the process).
const SYNCHRONOUS_SIGNALS: [i32; 6] = [
    libc::SIGBUS,
    // A seccomp filter's trap (crate `zpage-syscalls`): it reports the
    // system call the thread is making, and blocked, the kernel kills.
    libc::SIGSYS,
    libc::SIGSEGV,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGTRAP,
];

/// Blocks every asynchronous signal in the calling thread until the guard
/// drops. Code that holds a page claimed, or a store lock, runs under one: a
/// program signal handler interrupting it could touch that page (or fault
/// into a load that needs that lock) and wait forever on its own thread.
/// The synchronous signals stay deliverable.
pub struct SignalGuard {
    old: libc::sigset_t,
}

impl std::fmt::Debug for SignalGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalGuard")
    }
}

/// The set of asynchronous signals (all but [`SYNCHRONOUS_SIGNALS`]).
fn asynchronous_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is initialised by sigfillset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sig in SYNCHRONOUS_SIGNALS {
            libc::sigdelset(&mut set, sig);
        }
        set
    }
}

/// `rt_sigprocmask` of the kernel's 64-signal set (the first word of a
/// `sigset_t`), made from the far range's trampoline when it is reserved:
/// zpage's system-call filter traps the program's blocking masks (to keep
/// SIGBUS and SIGSYS deliverable), and zpage's own, which block neither,
/// need no trap. Async-signal-safe (one system call).
fn set_mask(how: i32, set: &libc::sigset_t, old: Option<&mut libc::sigset_t>) {
    let old = old.map_or(0, |o| o as *mut libc::sigset_t as i64);
    // SAFETY: `set` and `old` are live sigset_t values; the kernel reads and
    // writes their first 8 bytes.
    unsafe {
        crate::far::syscall(
            libc::SYS_rt_sigprocmask,
            [
                how as i64,
                set as *const libc::sigset_t as i64,
                old,
                8,
                0,
                0,
            ],
        );
    }
}

impl SignalGuard {
    pub fn block_async() -> SignalGuard {
        let set = asynchronous_signals();
        // SAFETY: a zeroed sigset_t is an empty set; the kernel writes the
        // old mask into it.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        set_mask(libc::SIG_BLOCK, &set, Some(&mut old));
        SignalGuard { old }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        set_mask(libc::SIG_SETMASK, &self.old, None);
    }
}

/// Spawns one of zpage's own threads with every asynchronous signal blocked
/// for its whole life, so that the program's handlers (timers, SIGCHLD, a
/// runtime's thread-suspension signals) never run on it: it holds locks and
/// claimed pages that such a handler could wait on. The mask is inherited at
/// creation, so it is in force before the thread runs a single instruction.
pub fn spawn_blocking_signals(
    name: &str,
    body: Box<dyn FnOnce() + Send>,
) -> std::io::Result<ZpageThread> {
    struct Start {
        name: std::ffi::CString,
        body: Box<dyn FnOnce() + Send>,
    }
    extern "C" fn start(arg: *mut c_void) -> *mut c_void {
        // First, before anything on this thread can allocate: the C
        // library's first thread-local destructor registration (Rust's
        // runtime makes one) allocates through `calloc`, and under the
        // preload library zpage's threads allocate from zpage's own heap.
        ZPAGE_THREAD.with(|t| t.set(true));
        // SAFETY: `arg` is the Box made by spawn_blocking_signals, handed
        // over to this thread alone.
        let start = unsafe { Box::from_raw(arg.cast::<Start>()) };
        // SAFETY: sets this thread's name from a NUL-terminated string of
        // at most 15 bytes (longer names are cut by the kernel).
        unsafe { libc::prctl(libc::PR_SET_NAME, start.name.as_ptr()) };
        let body = start.body;
        // A panic must not unwind out of an `extern "C"` function: it is
        // reported by the panic hook and the thread ends.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        std::ptr::null_mut()
    }
    let name = std::ffi::CString::new(name)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let arg = Box::into_raw(Box::new(Start { name, body }));
    let _blocked_while_spawning = SignalGuard::block_async();
    let mut thread: libc::pthread_t = 0;
    // SAFETY: `start` has pthread's start-routine type and takes ownership
    // of `arg` only if the thread is created.
    let rc = unsafe { libc::pthread_create(&mut thread, std::ptr::null(), start, arg.cast()) };
    if rc != 0 {
        // SAFETY: not handed to any thread: reclaimed here.
        drop(unsafe { Box::from_raw(arg) });
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(ZpageThread { thread })
}

/// One of zpage's threads ([`spawn_blocking_signals`]), to be joined.
#[derive(Debug)]
pub struct ZpageThread {
    thread: libc::pthread_t,
}

impl ZpageThread {
    /// Waits for the thread to end.
    pub fn join(self) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: a thread made by pthread_create and joined once (join
        // consumes the handle, whose Drop would detach it).
        unsafe { libc::pthread_join(this.thread, std::ptr::null_mut()) };
    }
}

impl Drop for ZpageThread {
    /// A handle let go without joining detaches its thread (as Rust's
    /// `JoinHandle` does), so its resources go when it ends.
    fn drop(&mut self) {
        // SAFETY: a thread made by pthread_create, neither joined nor
        // detached before.
        unsafe { libc::pthread_detach(self.thread) };
    }
}

thread_local! {
    /// Set on zpage's own threads. Const-initialised with no destructor, so
    /// reading it allocates nothing (async-signal-safe).
    static ZPAGE_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on one of zpage's own threads.
pub fn on_zpage_thread() -> bool {
    ZPAGE_THREAD.with(|t| t.get())
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

/// True if the calling thread blocks `signal`.
#[cfg(test)]
pub fn blocks_signal(signal: i32) -> bool {
    // SAFETY: reads the current mask into a zeroed sigset_t.
    unsafe {
        let mut cur: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
        libc::sigismember(&cur, signal) == 1
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_ranges_empties_exactly_the_ranges_given() {
        let mapping = Mapping::new(16).unwrap();
        let page = |p: usize| mapping.addr(p) as *mut u8;
        for p in 0..16 {
            // SAFETY: inside the mapping just made, which nothing else uses.
            unsafe { page(p).write_volatile(p as u8 + 1) };
        }
        let ranges = [
            (mapping.addr(1), PAGE_SIZE),
            (mapping.addr(4), 3 * PAGE_SIZE),
            (mapping.addr(15), PAGE_SIZE),
        ];
        discard_ranges(&ranges);
        for p in 0..16 {
            let emptied = p == 1 || (4..7).contains(&p) || p == 15;
            // SAFETY: as above.
            let byte = unsafe { page(p).read_volatile() };
            assert_eq!(byte, if emptied { 0 } else { p as u8 + 1 }, "page {p}");
        }
        // Kernels from 6.15 take the batch in one call.
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release.split(|c: char| !c.is_ascii_digit());
        let major: u32 = numbers.next().unwrap().parse().unwrap();
        let minor: u32 = numbers.next().unwrap().parse().unwrap();
        if (major, minor) >= (6, 15) {
            assert!(
                BATCHED.load(Ordering::Relaxed),
                "process_madvise refused on {release}"
            );
        }
    }

    #[test]
    fn discard_ranges_takes_more_ranges_than_one_call_can() {
        let pages = 2 * DISCARD_RANGES_MAX + 20;
        let mapping = Mapping::new(pages).unwrap();
        let page = |p: usize| mapping.addr(p) as *mut u8;
        for p in 0..pages {
            // SAFETY: inside the mapping just made, which nothing else uses.
            unsafe { page(p).write_volatile(1) };
        }
        // Every other page: one range each, more than one call's worth.
        let ranges: Vec<(usize, usize)> = (0..pages)
            .step_by(2)
            .map(|p| (mapping.addr(p), PAGE_SIZE))
            .collect();
        assert!(ranges.len() > DISCARD_RANGES_MAX);
        discard_ranges(&ranges);
        for p in 0..pages {
            // SAFETY: as above.
            let byte = unsafe { page(p).read_volatile() };
            assert_eq!(byte, (p % 2) as u8, "page {p}");
        }
    }

    /// A MOVE racing with a write that replaces the zero page at its source
    /// by a private copy (what a read fault restored as the zero page sees
    /// when the program writes it next): Linux 6.18 answers `EEXIST` to
    /// some of these after moving the page. `move_page` must say moved.
    #[test]
    fn move_page_reports_a_move_the_kernel_answers_with_eexist() {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::AtomicUsize;
        const PAGES: usize = 1024;
        const ROUNDS: usize = 150;
        let fd = userfaultfd(libc::O_CLOEXEC | UFFD_USER_MODE_ONLY).unwrap();
        // SIGBUS: the writer's access to a page moved away fails (EFAULT)
        // instead of waiting for a fault reader this test does not have.
        uffd_api(fd, FEATURE_MOVE | FEATURE_SIGBUS).unwrap();
        let src = Mapping::new(PAGES).unwrap();
        let dst = Mapping::new(PAGES).unwrap();
        for m in [&src, &dst] {
            uffd_register(fd, m.base(), m.len(), REGISTER_MODE_MISSING).unwrap();
        }
        // Writes through /proc/self/mem take the write fault (and its copy
        // of the zero page) in the kernel, with no signal to handle.
        let mem = std::fs::OpenOptions::new()
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        let (src_base, dst_base) = (src.base(), dst.base());
        let ready = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let mut failure = None;
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for round in 0..ROUNDS {
                    while ready.load(Ordering::Acquire) != round * (PAGES + 1) {
                        if stop.load(Ordering::Acquire) {
                            return;
                        }
                        std::hint::spin_loop();
                    }
                    for page in 0..PAGES {
                        let addr = src_base + page * PAGE_SIZE;
                        uffd_zeropage(fd, addr, 0).unwrap();
                        ready.fetch_add(1, Ordering::AcqRel);
                        let _ = mem.write_at(&[1], addr as u64);
                    }
                }
            });
            'rounds: for round in 0..ROUNDS {
                for page in 0..PAGES {
                    while ready.load(Ordering::Acquire) <= round * (PAGES + 1) + page {
                        std::hint::spin_loop();
                    }
                    let (from, to) = (src_base + page * PAGE_SIZE, dst_base + page * PAGE_SIZE);
                    let moved = move_page(fd, to, from);
                    if moved != Ok(()) || !page_present(to) || page_present(from) {
                        failure = Some((round, page, moved, page_present(from), page_present(to)));
                        break 'rounds;
                    }
                }
                // The last write may still be under way: let it end, then
                // empty both sides for the next round.
                std::thread::sleep(std::time::Duration::from_millis(1));
                discard(src_base, src.len()).unwrap();
                discard(dst_base, dst.len()).unwrap();
                ready.fetch_add(1, Ordering::AcqRel);
            }
            stop.store(true, Ordering::Release);
        });
        close(fd);
        assert_eq!(
            failure, None,
            "(round, page, move_page's answer, source present, destination present)"
        );
    }

    #[test]
    fn fatal_messages_format_numbers_without_allocating() {
        let message = Fatal::new()
            .text("page ")
            .dec(1234)
            .text(" at ")
            .hex(0xdead_beef);
        assert_eq!(message.as_str(), "zpage: page 1234 at 0x00000000deadbeef");
        assert_eq!(Fatal::new().dec(0).as_str(), "zpage: 0");
        assert_eq!(
            Fatal::new().dec(u64::MAX).as_str(),
            "zpage: 18446744073709551615"
        );
    }

    #[test]
    fn zpage_threads_block_asynchronous_signals() {
        let blocked = spawn_blocking_signals(
            "zpage-test",
            Box::new(|| {
                assert!(blocks_signal(libc::SIGALRM));
                assert!(blocks_signal(libc::SIGCHLD));
                assert!(!blocks_signal(libc::SIGBUS));
                assert!(!blocks_signal(libc::SIGSEGV));
            }),
        )
        .unwrap();
        blocked.join();
        assert!(
            !blocks_signal(libc::SIGALRM),
            "the spawning thread's mask is restored"
        );
    }
}
