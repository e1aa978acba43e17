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

pub const PAGE: usize = 4096;

// ---- userfaultfd uapi (checked against shared/notes/userfaultfd.md §3.2) ----
pub const UFFD_API: u64 = 0xAA;
pub const UFFD_USER_MODE_ONLY: i32 = 1;
pub const UFFDIO_API: u64 = 0xc018_aa3f;
pub const UFFDIO_REGISTER: u64 = 0xc020_aa00;
pub const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
pub const UFFDIO_WAKE: u64 = 0x8010_aa02;
pub const UFFDIO_COPY: u64 = 0xc028_aa03;
pub const UFFDIO_ZEROPAGE: u64 = 0xc020_aa04;
pub const UFFDIO_MOVE: u64 = 0xc028_aa05;
pub const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
pub const COPY_MODE_WP: u64 = 2;
pub const PAGEFAULT_FLAG_WP: u64 = 1 << 1;
pub const USERFAULTFD_IOC_NEW: u64 = 0xaa00;

pub const FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub const FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
pub const FEATURE_SIGBUS: u64 = 1 << 7;
pub const FEATURE_MOVE: u64 = 1 << 16;

pub const REGISTER_MODE_MISSING: u64 = 1;
pub const REGISTER_MODE_WP: u64 = 2;

pub const EVENT_PAGEFAULT: u8 = 0x12;
pub const EVENT_REMAP: u8 = 0x14;
pub const EVENT_REMOVE: u8 = 0x15;
pub const EVENT_UNMAP: u8 = 0x16;
pub const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}

#[repr(C)]
struct UffdioMove {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

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
        len: PAGE as u64,
        mode,
        copy: 0,
    };
    ioctl(fd, UFFDIO_COPY, &mut copy)
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `UFFDIO_WRITEPROTECT` of one page: `protect` or lift the protection
/// (which also wakes a handler-thread-mode waiter).
pub fn uffd_writeprotect(fd: i32, addr: usize, protect: bool) -> Result<(), Errno> {
    let mut wp = UffdioWriteprotect {
        range: UffdioRange {
            start: addr as u64,
            len: PAGE as u64,
        },
        mode: protect as u64,
    };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp)
}

/// `UFFDIO_ZEROPAGE` of one page.
pub fn uffd_zeropage(fd: i32, dst: usize, mode: u64) -> Result<(), Errno> {
    let mut zero = UffdioZeropage {
        range: UffdioRange {
            start: dst as u64,
            len: PAGE as u64,
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

/// Reads pending `uffd_msg`s from a non-blocking uffd into `out`; returns how many.
pub fn uffd_read(fd: i32, out: &mut [UffdMsg]) -> Result<usize, Errno> {
    let mut raw = [0u8; 32 * 16];
    let want = out.len().min(16) * 32;
    // SAFETY: `raw` is a live buffer of at least `want` bytes.
    let n = unsafe { libc::read(fd, raw.as_mut_ptr().cast(), want) };
    if n < 0 {
        return Err(Errno::last());
    }
    let count = n as usize / 32;
    for (i, msg) in out.iter_mut().take(count).enumerate() {
        let m = &raw[i * 32..i * 32 + 32];
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

/// Writes `msg` to stderr and aborts: for the few states the signal handler
/// cannot recover from without handing back wrong bytes.
pub fn fatal(msg: &str) -> ! {
    // SAFETY: write(2) and abort(3) are async-signal-safe; `msg` is a live buffer.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::abort()
    }
}

/// Forces a private page back to exclusive ownership after `fork()` (so that
/// `UFFDIO_MOVE` stops failing with `EBUSY`) without changing its contents:
/// an atomic add of zero is a write fault (copy-on-write break) whose store is
/// the value already there, atomic with respect to any concurrent store.
///
/// # Safety
/// `addr` must be 8-byte aligned and inside a live read-write mapping. If the
/// page is absent the access faults and is resolved by the region's handler.
pub unsafe fn touch_write(addr: usize) {
    // LLVM turns an idempotent atomic RMW (fetch_add(0)) into a fenced load,
    // which does not break copy-on-write; spell the locked add out.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: guaranteed by the caller; `lock add [addr], 0` writes the value
    // already there, atomically with respect to every other store.
    unsafe {
        std::arch::asm!("lock add qword ptr [{0}], 0", in(reg) addr, options(nostack));
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: guaranteed by the caller; AtomicU64 has the alignment of u64.
        let word = unsafe { &*(addr as *const std::sync::atomic::AtomicU64) };
        let v = word.load(std::sync::atomic::Ordering::Relaxed);
        let _ = word.compare_exchange(
            v,
            v,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::Relaxed,
        );
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
        let len = pages * PAGE;
        let base = mmap_anon(len)? as usize;
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

    pub fn addr(&self, page: usize) -> usize {
        self.base + page * PAGE
    }

    /// The page at index `page`, which the caller knows to be present and not
    /// concurrently modified (a staging slot it owns).
    pub fn page(&self, page: usize) -> &[u8; PAGE] {
        assert!(page < self.len / PAGE);
        // SAFETY: in bounds of a live mapping owned by self, page-aligned; the
        // staging protocol gives the caller exclusive ownership of the slot, so
        // nothing writes it while the reference lives.
        unsafe { &*(self.addr(page) as *const [u8; PAGE]) }
    }

    /// See [`touch_write`].
    pub fn touch_write(&self, page: usize) {
        assert!(page < self.len / PAGE);
        // SAFETY: in bounds of a live read-write mapping owned by self, aligned.
        unsafe { touch_write(self.addr(page)) }
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
        if !self.leak.load(std::sync::atomic::Ordering::Acquire) {
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

/// Blocks every asynchronous signal in the calling thread until the guard
/// drops: code that holds store locks must not be interrupted by a program
/// signal handler that touches region memory (its fault would wait on those
/// locks). SIGBUS, SIGSEGV, SIGILL, SIGFPE stay deliverable.
pub struct SignalGuard {
    old: libc::sigset_t,
}

impl std::fmt::Debug for SignalGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalGuard")
    }
}

impl SignalGuard {
    pub fn block_async() -> SignalGuard {
        // SAFETY: sigset_t values initialised by sigfillset/sigemptyset; the
        // old mask is written into our own struct.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut set);
            for sig in [
                libc::SIGBUS,
                libc::SIGSEGV,
                libc::SIGILL,
                libc::SIGFPE,
                libc::SIGTRAP,
            ] {
                libc::sigdelset(&mut set, sig);
            }
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut old);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SignalGuard { old }
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved at construction.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

/// `getpid`.
pub fn getpid() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::getpid() }
}
