//! The SIGSYS handler: a system call the filter trapped is served with the
//! memory it names pinned (restored if evicted, kept resident for the
//! call), re-issued from zpage's trampoline, and its result returned to
//! the program in `rax`, as if the call had run.
//!
//! **Async-signal-safety argument.** The handler runs on the thread that
//! made the call, at any point of the program (inside `malloc`, inside
//! another signal handler, in a `vfork()` child). It
//! - allocates nothing: the spans it pins live in a fixed array on its
//!   stack ([`Pins`]), and messages are built in a fixed buffer
//!   (`zpage_region::Fatal`);
//! - pins through `zpage_region::pin_range`, which looks regions up in the
//!   lock-free region table and restores pages as the SIGBUS handler does
//!   (its own argument is at the top of the region crate's `fault.rs`),
//!   blocking asynchronous signals while it holds a page;
//! - reads the program's memory only where a region page is pinned (so it
//!   cannot fault) or through `process_vm_readv` (which fails instead of
//!   faulting on a bad pointer, as the kernel would have);
//! - makes system calls only through the trampoline (never trapped again)
//!   or the C library's async-signal-safe functions;
//! - saves and restores `errno`.
//!
//! It is installed with `SA_NODEFER` and an empty mask: a program signal
//! handler may interrupt a re-issued call that blocks (its `EINTR` is the
//! call's, as without zpage) and make trapped calls of its own.

use super::filter::TRAP_MARKER;
use super::table::{self, Arg, Len};
use zpage_region::{far, Fatal, SignalChain, PAGE_SIZE};

/// `si_code` of a seccomp trap.
const SYS_SECCOMP: i32 = 1;
/// Spans pinned for one call, at most (a call's own arguments and, for an
/// iovec array, its buffers).
const MAX_PINS: usize = 64;
/// A buffer larger than this is moved in pieces of this size, each pinned
/// for its part: a pin larger than half the budget is refused.
pub const PIECE_BYTES: usize = 1 << 20;
/// A string the kernel reads is at most a path (`PATH_MAX`) long, or an
/// argument string; scanning stops after this many bytes.
const MAX_STRING: usize = 128 * 1024;

/// Where SIGSYS signals that are not zpage's traps go (the program's own
/// seccomp traps, a `kill(SIGSYS)`).
pub static CHAIN: SignalChain = SignalChain::new();

/// The probe's address: in the far range, never a region's (the
/// trampoline's reserved pages).
pub const PROBE_ADDR: usize = far::TRAMPOLINE_ADDR + PAGE_SIZE;
/// `futex_requeue(2)` (Linux 6.7), which the libc crate does not name.
const SYS_FUTEX_REQUEUE: i64 = 456;

/// What a trapped probe answers (an errno no `uname` gives).
pub const PROBE_ANSWER: i64 = -(libc::ENOTRECOVERABLE as i64);

/// The spans pinned for one call.
struct Pins {
    spans: [(usize, usize); MAX_PINS],
    len: usize,
}

/// Why memory could not be pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    /// More spans than [`MAX_PINS`].
    TooMany,
    /// The budget would have more than half its pages pinned.
    Budget,
}

/// True if any byte of the span lies in a live region of this process.
fn in_region(addr: usize, len: usize) -> bool {
    len > 0
        && far::contains(addr)
        && zpage_region::overlaps_any_region(addr, len.min(usize::MAX - addr))
}

impl Pins {
    const fn new() -> Pins {
        Pins {
            spans: [(0, 0); MAX_PINS],
            len: 0,
        }
    }

    /// Pins the region pages of `[addr, addr + len)` (nothing outside
    /// regions).
    fn pin(&mut self, addr: usize, len: usize) -> Result<(), Refused> {
        if !in_region(addr, len) {
            return Ok(());
        }
        if self.len == MAX_PINS {
            return Err(Refused::TooMany);
        }
        zpage_region::pin_range(addr, len).map_err(|_| Refused::Budget)?;
        self.spans[self.len] = (addr, len);
        self.len += 1;
        Ok(())
    }

    /// Undoes every pin.
    fn release(&mut self) {
        for &(addr, len) in &self.spans[..self.len] {
            let _ = zpage_region::unpin_range(addr, len);
        }
        self.len = 0;
    }
}

impl Drop for Pins {
    fn drop(&mut self) {
        self.release();
    }
}

/// Copies `out.len()` bytes of the program's memory at `addr` without
/// faulting: pinned region memory is read directly; anything else through
/// `process_vm_readv`, which fails where the kernel would have (a bad
/// pointer gives `None`, as it gives the program `EFAULT`).
fn copy_in(addr: usize, out: &mut [u8]) -> Option<()> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: out.len(),
    };
    // SAFETY: both iovecs are on this stack frame; the kernel writes at most
    // `out.len()` bytes into `out` and reads the program's memory, failing
    // on a bad address.
    let got = unsafe {
        far::syscall(
            libc::SYS_process_vm_readv,
            [
                libc::getpid() as i64,
                &local as *const _ as i64,
                1,
                &remote as *const _ as i64,
                1,
                0,
            ],
        )
    };
    (got == out.len() as i64).then_some(())
}

/// A plain value of the program's memory: in a region, pinned first (it
/// stays pinned with the call's other spans) and read; elsewhere through
/// [`copy_in`].
fn read_value<T: Copy + Default>(pins: &mut Pins, addr: usize) -> Result<Option<T>, Refused> {
    let size = std::mem::size_of::<T>();
    if in_region(addr, size) {
        pins.pin(addr, size)?;
        // SAFETY: the bytes lie in pinned region pages (mapped, readable);
        // the read is unaligned-safe.
        return Ok(Some(unsafe { std::ptr::read_unaligned(addr as *const T) }));
    }
    let mut value = T::default();
    // SAFETY: `value` is a plain `Copy` type; its bytes are overwritten
    // whole by copy_in or left as the default.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut((&mut value as *mut T).cast::<u8>(), size) };
    Ok(copy_in(addr, bytes).map(|()| value))
}

/// Writes a plain value into the program's memory: in a region, pinned and
/// written; elsewhere through `process_vm_writev`, which fails where the
/// kernel would have (`false`).
fn write_value<T: Copy>(pins: &mut Pins, addr: usize, value: T) -> Result<bool, Refused> {
    let size = std::mem::size_of::<T>();
    if in_region(addr, size) {
        pins.pin(addr, size)?;
        // SAFETY: the bytes lie in pinned region pages, mapped read-write.
        unsafe { std::ptr::write_unaligned(addr as *mut T, value) };
        return Ok(true);
    }
    let local = libc::iovec {
        iov_base: &value as *const T as *mut libc::c_void,
        iov_len: size,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: size,
    };
    // SAFETY: iovecs on this frame; the kernel writes `size` bytes at
    // `addr` or fails.
    let w = unsafe {
        far::syscall(
            libc::SYS_process_vm_writev,
            [
                libc::getpid() as i64,
                &local as *const _ as i64,
                1,
                &remote as *const _ as i64,
                1,
                0,
            ],
        )
    };
    Ok(w == size as i64)
}

/// The length of the NUL-terminated string at `addr`, its pages pinned as
/// they are scanned (through the NUL).
fn pin_string(pins: &mut Pins, addr: usize) -> Result<usize, Refused> {
    if !in_region(addr, 1) {
        return Ok(0);
    }
    let mut at = addr;
    while at - addr < MAX_STRING {
        let page_end = (at | (PAGE_SIZE - 1)) + 1;
        pins.pin(at, page_end - at)?;
        // SAFETY: [at, page_end) lies in a region page pinned just now: it
        // is mapped and stays so while pinned.
        let chunk = unsafe { std::slice::from_raw_parts(at as *const u8, page_end - at) };
        if let Some(nul) = chunk.iter().position(|&b| b == 0) {
            return Ok(at + nul + 1 - addr);
        }
        at = page_end;
        if !in_region(at, 1) {
            break;
        }
    }
    Ok(at - addr)
}

/// The byte length a `Len` gives for this call's arguments (a length the
/// call reads from memory is pinned with its other spans).
fn len_of(pins: &mut Pins, len: Len, args: &[i64; 6]) -> Result<usize, Refused> {
    Ok(match len {
        Len::Fixed(n) => n,
        Len::Arg(i) => args[i as usize] as usize,
        Len::ArgTimes(i, n) => (args[i as usize] as usize).saturating_mul(n),
        Len::ArgPlus(i, n) => (args[i as usize] as usize).saturating_add(n),
        Len::AtArg(i) => match args[i as usize] as usize {
            0 => 0,
            p => read_value::<u32>(pins, p)?.unwrap_or(0) as usize,
        },
    })
}

/// Pins an iovec array and the buffers it names, in order, as far as they
/// can be pinned; returns how many entries were pinned whole.
fn pin_iovecs(pins: &mut Pins, iov: usize, count: usize) -> Result<usize, Refused> {
    pins.pin(iov, count.saturating_mul(16))?;
    let mut done = 0;
    while done < count {
        let Some(v) = read_value::<[usize; 2]>(pins, iov + 16 * done)? else {
            break;
        };
        if pins.pin(v[0], v[1]).is_err() {
            break;
        }
        done += 1;
    }
    Ok(done)
}

/// `struct msghdr` (x86-64): name, name length, iovecs, their count,
/// control, its length, flags.
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct MsgHdr {
    name: usize,
    namelen: u32,
    _pad: u32,
    iov: usize,
    iovlen: usize,
    control: usize,
    controllen: usize,
    flags: i32,
    _pad2: u32,
}
const _: () = assert!(std::mem::size_of::<MsgHdr>() == std::mem::size_of::<libc::msghdr>());

/// Pins one message header and everything it names; every buffer or none.
fn pin_msghdr(pins: &mut Pins, at: usize) -> Result<(), Refused> {
    pins.pin(at, std::mem::size_of::<MsgHdr>())?;
    let Some(m) = read_value::<MsgHdr>(pins, at)? else {
        return Ok(());
    };
    pins.pin(m.name, m.namelen as usize)?;
    pins.pin(m.control, m.controllen)?;
    if pin_iovecs(pins, m.iov, m.iovlen)? < m.iovlen {
        return Err(Refused::TooMany);
    }
    Ok(())
}

/// Ends the process: a call whose memory cannot be served.
fn cannot_serve(name: &str, why: Refused, args: &[i64; 6]) -> ! {
    let why = match why {
        Refused::TooMany => {
            "it names more buffers in compressed memory than zpage pins for one call"
        }
        Refused::Budget => "more than half of the budget is pinned already (raise --budget)",
    };
    Fatal::new()
        .text("cannot serve the system call ")
        .text(name)
        .text("() (arguments ")
        .hex(args[0] as u64)
        .text(", ")
        .hex(args[1] as u64)
        .text(", ")
        .hex(args[2] as u64)
        .text("): its memory lies in compressed regions and cannot be kept resident for it: ")
        .text(why)
        .text("; ending the process rather than let the call fail or lose data")
        .abort()
}

/// Pins what the table says the call's arguments name.
fn pin_arguments(
    pins: &mut Pins,
    nr: i64,
    call: &table::Call,
    args: &mut [i64; 6],
) -> Result<(), Refused> {
    for i in 0..6 {
        let p = args[i] as usize;
        match call.args[i] {
            Arg::N => {}
            Arg::Buf(len) => {
                let n = len_of(pins, len, args)?;
                pins.pin(p, n)?
            }
            Arg::Str => {
                pin_string(pins, p)?;
            }
            Arg::Unknown => pins.pin(p, PAGE_SIZE)?,
            Arg::Iovec(c) => {
                let count = args[c as usize].max(0) as usize;
                let done = pin_iovecs(pins, p, count)?;
                if done < count {
                    // The buffers that fit: a short transfer, as the kernel
                    // may make anyway; the program's loop carries on.
                    if done == 0 {
                        return Err(Refused::Budget);
                    }
                    args[c as usize] = done as i64;
                }
            }
            Arg::Msghdr => pin_msghdr(pins, p)?,
            Arg::Mmsghdr(c) => {
                let count = args[c as usize].max(0) as usize;
                pins.pin(p, count.saturating_mul(64))?;
                for k in 0..count {
                    pin_msghdr(pins, p + 64 * k)?;
                }
            }
            Arg::Special => pin_special(pins, nr, i, args)?,
        }
    }
    Ok(())
}

/// The arguments whose meaning depends on another one.
fn pin_special(pins: &mut Pins, nr: i64, i: usize, args: &[i64; 6]) -> Result<(), Refused> {
    let p = args[i] as usize;
    match nr {
        libc::SYS_futex => {
            let cmd = args[1] as i32 & libc::FUTEX_CMD_MASK;
            let waits = matches!(
                cmd,
                libc::FUTEX_WAIT
                    | libc::FUTEX_WAIT_BITSET
                    | libc::FUTEX_LOCK_PI
                    | libc::FUTEX_LOCK_PI2
                    | libc::FUTEX_WAIT_REQUEUE_PI
            );
            let second_word = matches!(
                cmd,
                libc::FUTEX_REQUEUE
                    | libc::FUTEX_CMP_REQUEUE
                    | libc::FUTEX_WAKE_OP
                    | libc::FUTEX_CMP_REQUEUE_PI
                    | libc::FUTEX_WAIT_REQUEUE_PI
            );
            match i {
                0 => pins.pin(p, 4),
                3 if waits => pins.pin(p, 16),
                4 if second_word => pins.pin(p, 4),
                _ => Ok(()),
            }
        }
        libc::SYS_ioctl => {
            let cmd = args[1] as u32;
            // _IOC_SIZE for ioctls that encode a direction; one page for
            // the old ones that do not (TCGETS and the like).
            let size = if cmd >> 30 != 0 {
                ((cmd >> 16) & 0x3fff) as usize
            } else {
                PAGE_SIZE
            };
            pins.pin(p, size)
        }
        libc::SYS_fcntl => match args[1] as i32 {
            libc::F_GETLK
            | libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_OFD_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW => pins.pin(p, std::mem::size_of::<libc::flock>()),
            // F_GETOWN_EX, F_SETOWN_EX, F_GET_RW_HINT, F_SET_RW_HINT and
            // their file forms.
            15 | 16 | 1035..=1038 => pins.pin(p, 16),
            _ => Ok(()),
        },
        libc::SYS_rt_sigprocmask => pins.pin(p, 8),
        libc::SYS_select | libc::SYS_pselect6 => match i {
            1..=3 => pins.pin(p, (args[0].max(0) as usize).div_ceil(64) * 8),
            5 => {
                // {const sigset_t *, size_t}
                let set = read_value::<usize>(pins, p)?.unwrap_or(0);
                pins.pin(set, 8)
            }
            _ => Ok(()),
        },
        libc::SYS_mincore => pins.pin(p, (args[1] as usize).div_ceil(PAGE_SIZE)),
        libc::SYS_prctl => match (i, args[0] as i32) {
            (1, libc::PR_SET_NAME | libc::PR_GET_NAME) => pins.pin(p, 16),
            _ => pins.pin(p, PAGE_SIZE),
        },
        libc::SYS_seccomp => {
            // struct sock_fprog { unsigned short len; struct sock_filter *filter; }
            let Some([len, filter]) = read_value::<[usize; 2]>(pins, p)? else {
                return Ok(());
            };
            pins.pin(filter, (len & 0xffff) * 8)
        }
        libc::SYS_futex_waitv | SYS_FUTEX_REQUEUE => {
            let count = if nr == SYS_FUTEX_REQUEUE {
                2
            } else {
                args[1].max(0) as usize
            };
            // struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 _; }
            pins.pin(p, count.saturating_mul(24))?;
            for k in 0..count {
                let Some([_, uaddr, _]) = read_value::<[u64; 3]>(pins, p + 24 * k)? else {
                    break;
                };
                pins.pin(uaddr as usize, 8)?;
            }
            Ok(())
        }
        _ => pins.pin(p, PAGE_SIZE),
    }
}

/// Moves a large buffer in pieces, each pinned for its part: `read`,
/// `write`, `pread64`, `pwrite64`. Writes go on until done or short; reads
/// go on for regular files only (a pipe or a socket gives what it has: a
/// short read, as the kernel may give anyway).
fn in_pieces(nr: i64, args: [i64; 6]) -> i64 {
    let (buf, count) = (args[1] as usize, args[2] as usize);
    let positional = nr == libc::SYS_pread64 || nr == libc::SYS_pwrite64;
    let reading = nr == libc::SYS_read || nr == libc::SYS_pread64;
    let go_on = !reading || regular_file(args[0]);
    let mut done = 0usize;
    while done < count {
        let piece = PIECE_BYTES.min(count - done);
        let mut pins = Pins::new();
        if pins.pin(buf + done, piece).is_err() {
            cannot_serve(table::lookup(nr as u32).name, Refused::Budget, &args);
        }
        let mut a = args;
        a[1] = (buf + done) as i64;
        a[2] = piece as i64;
        if positional {
            a[3] = args[3] + done as i64;
        }
        // SAFETY: the program's own call on a part of its buffer, pinned.
        let r = unsafe { far::syscall(nr, a) };
        drop(pins);
        if r < 0 {
            return if done == 0 { r } else { done as i64 };
        }
        done += r as usize;
        if (r as usize) < piece || !go_on {
            break;
        }
    }
    done as i64
}

fn regular_file(fd: i64) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat writes one struct stat into a buffer on this stack.
    let r = unsafe { far::syscall(libc::SYS_fstat, [fd, st.as_mut_ptr() as i64, 0, 0, 0, 0]) };
    // SAFETY: zero-initialised, written by the kernel on success.
    r == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// `rt_sigprocmask` with a set in region memory: served on the mask the
/// handler's return restores (re-issued inside the handler, it would be
/// undone by that return). SIGBUS and SIGSYS stay unblocked: blocked, the
/// kernel kills the process at zpage's next fault or trap.
fn sigprocmask(args: &[i64; 6], uc: &mut libc::ucontext_t) -> i64 {
    let (how, set, old) = (args[0] as i32, args[1] as usize, args[2] as usize);
    if args[3] != 8 {
        return -(libc::EINVAL as i64);
    }
    let mut pins = Pins::new();
    if let Err(why) = pins.pin(set, 8).and_then(|_| pins.pin(old, 8)) {
        cannot_serve("rt_sigprocmask", why, args);
    }
    // SAFETY: the first word of the saved mask is the kernel's 64-signal set
    // that sigreturn restores.
    let current = unsafe { &mut *(&mut uc.uc_sigmask as *mut libc::sigset_t).cast::<u64>() };
    let new = if set == 0 {
        None
    } else {
        match read_value::<u64>(&mut pins, set) {
            Ok(Some(v)) => Some(v),
            Ok(None) => return -(libc::EFAULT as i64),
            Err(why) => cannot_serve("rt_sigprocmask", why, args),
        }
    };
    if old != 0 {
        match write_value(&mut pins, old, *current) {
            Ok(true) => {}
            Ok(false) => return -(libc::EFAULT as i64),
            Err(why) => cannot_serve("rt_sigprocmask", why, args),
        }
    }
    if let Some(new) = new {
        let kept = |s: i32| 1u64 << (s - 1);
        let never =
            kept(libc::SIGKILL) | kept(libc::SIGSTOP) | kept(libc::SIGBUS) | kept(libc::SIGSYS);
        *current = match how {
            libc::SIG_BLOCK => *current | new,
            libc::SIG_UNBLOCK => *current & !new,
            libc::SIG_SETMASK => new,
            _ => return -(libc::EINVAL as i64),
        } & !never;
    }
    0
}

/// `rt_sigaction` of SIGBUS or SIGSYS: zpage's handlers stay installed and
/// the program's action is recorded as the one they chain to, as the
/// preload library does for the C library's `sigaction` (a `posix_spawn`
/// child resets every handler to the default before its `exec`, and that
/// `exec` is zpage's to serve). zpage's own installations (the action is
/// its handler) and SIGBUS actions set before zpage's handler is
/// installed go to the kernel.
fn sigaction(args: &[i64; 6]) -> i64 {
    let sig = args[0] as i32;
    if args[3] != 8 {
        return -(libc::EINVAL as i64);
    }
    let mut pins = Pins::new();
    // The kernel's struct sigaction: handler, flags, restorer, mask.
    let new = match args[1] as usize {
        0 => None,
        at => match read_value::<[u64; 4]>(&mut pins, at) {
            Ok(Some(v)) => Some(v),
            Ok(None) => return -(libc::EFAULT as i64),
            Err(why) => cannot_serve("rt_sigaction", why, args),
        },
    };
    let own = |h: u64| {
        h as usize == on_sigsys as *const () as usize || zpage_region::is_sigbus_handler(h as usize)
    };
    let to_kernel = (sig == libc::SIGBUS && !zpage_region::sigbus_handler_installed())
        || new.is_some_and(|n| own(n[0]));
    if to_kernel {
        if let Err(why) = pins.pin(args[2] as usize, 32) {
            cannot_serve("rt_sigaction", why, args);
        }
        // SAFETY: the call as made, its structures pinned.
        return unsafe { far::syscall(libc::SYS_rt_sigaction, *args) };
    }
    let chain = if sig == libc::SIGBUS {
        zpage_region::sigbus_chain()
    } else {
        &CHAIN
    };
    let previous = match new {
        Some([handler, flags, _, _]) => {
            // SAFETY: a zeroed sigaction is a valid empty value.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = handler as usize;
            action.sa_flags = flags as i32;
            chain.chain_to(&action)
        }
        None => chain.chained(),
    };
    if args[2] != 0 {
        let old = [
            previous.sa_sigaction as u64,
            previous.sa_flags as u32 as u64,
            previous.sa_restorer.map_or(0, |f| f as usize as u64),
            0,
        ];
        match write_value(&mut pins, args[2] as usize, old) {
            Ok(true) => {}
            Ok(false) => return -(libc::EFAULT as i64),
            Err(why) => cannot_serve("rt_sigaction", why, args),
        }
    }
    0
}

/// `execve`/`execveat`: the path, and every `argv` and `envp` string
/// touched into memory (restored, if evicted, by the SIGBUS handler) just
/// before the call, which is made with the program's signal mask. Eviction
/// is held off meanwhile (`zpage_region::hold_evictions_for_exec`): the
/// kernel copies the strings before anything is replaced, and at a small
/// budget the reclaimer would move them out again first, failing the call
/// with `EFAULT`. In a `vfork()` child that closed the userfaultfd, the
/// touches are restored by the parent's reclaimer. If the call succeeds
/// the hold is never given back here: the reclaimer drops it once this
/// process no longer shares its memory.
fn exec(nr: i64, args: [i64; 6], uc: &libc::ucontext_t) -> i64 {
    let (path, argv, envp) = if nr == libc::SYS_execve {
        (args[0], args[1], args[2])
    } else {
        (args[1], args[2], args[3])
    };
    warn_if_privileges_dropped(nr, &args);
    let mut mask = [0u64; 1];
    // SAFETY: the first word of the saved mask (see sigprocmask).
    mask[0] = unsafe { *(&uc.uc_sigmask as *const libc::sigset_t).cast::<u64>() };
    let mut r = -(libc::EFAULT as i64);
    let _held = zpage_region::hold_evictions_for_exec();
    // With eviction held, a second try only covers a page a burst in flight
    // at the hold moved out after it was touched.
    for _ in 0..2 {
        touch_string(path as usize);
        touch_vector(argv as usize);
        touch_vector(envp as usize);
        // The new program starts with the mask the program had, not this
        // handler's.
        // SAFETY: an 8-byte set on this frame.
        unsafe {
            far::syscall(
                libc::SYS_rt_sigprocmask,
                [libc::SIG_SETMASK as i64, mask.as_ptr() as i64, 0, 8, 0, 0],
            );
        }
        // SAFETY: the program's own call.
        r = unsafe { far::syscall(nr, args) };
        if r != -(libc::EFAULT as i64) {
            return r;
        }
    }
    r
}

/// Under `no_new_privs` (which installing the filter set, see
/// [`super::install`]), a set-user-ID or set-group-ID program runs with
/// the caller's privileges: says so on stderr before the `exec`, so the
/// program's own failure (sudo refusing to run, ping lacking its socket)
/// is not a mystery. File capabilities are dropped the same way; they are
/// not looked for.
fn warn_if_privileges_dropped(nr: i64, args: &[i64; 6]) {
    let (dirfd, path, flags) = if nr == libc::SYS_execve {
        (libc::AT_FDCWD, args[0], 0)
    } else {
        (
            args[0] as i32,
            args[1],
            args[4] as i32 & libc::AT_EMPTY_PATH,
        )
    };
    touch_string(path as usize);
    warn_if_privileged(dirfd, path as *const libc::c_char, flags);
}

/// Says on stderr that the program at `path` (relative to `dirfd`, as for
/// `newfstatat`) will run without its set-user-ID or set-group-ID
/// privileges, when `no_new_privs` is set (which installing the filter as
/// a user other than root does). Async-signal-safe (a `prctl`, a
/// `newfstatat` and a `write`).
pub fn warn_if_privileged(dirfd: i32, path: *const libc::c_char, flags: i32) {
    // SAFETY: a prctl query with no pointer arguments.
    let nnp = unsafe {
        far::syscall(
            libc::SYS_prctl,
            [libc::PR_GET_NO_NEW_PRIVS as i64, 0, 0, 0, 0, 0],
        )
    };
    if nnp != 1 {
        return;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: newfstatat writes one struct stat on this frame; the path is
    // the caller's, read by the kernel (or the call fails).
    let r = unsafe {
        far::syscall(
            libc::SYS_newfstatat,
            [
                dirfd as i64,
                path as i64,
                st.as_mut_ptr() as i64,
                flags as i64,
                0,
                0,
            ],
        )
    };
    // SAFETY: zero-initialised, written by the kernel on success.
    let mode = unsafe { st.assume_init() }.st_mode;
    if r == 0 && mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
        Fatal::new()
            .text("a set-user-ID or set-group-ID program is being run; under zpage run's system-call filter (no_new_privs) it runs with the caller's privileges, not its own. Run the program as root, or with zpage run --syscalls wrappers, if it needs them")
            .print();
    }
}

/// Reads every page of the string at `p` (a fault restores an evicted one).
fn touch_string(p: usize) {
    if !in_region(p, 1) {
        return;
    }
    let mut at = p;
    while at - p < MAX_STRING && in_region(at, 1) {
        // SAFETY: `at` lies in a live region: reading it faults the page in
        // through zpage's SIGBUS handler if it was evicted.
        let b = unsafe { std::ptr::read_volatile(at as *const u8) };
        if b == 0 {
            return;
        }
        at += 1;
    }
}

/// Touches a NULL-terminated array of strings and the strings.
fn touch_vector(v: usize) {
    if v == 0 {
        return;
    }
    for k in 0.. {
        let Some(s) = read_or_touch::<usize>(v + 8 * k) else {
            return;
        };
        if s == 0 || k > 1 << 20 {
            return;
        }
        touch_string(s);
    }
}

/// A value of the program's memory: read directly in a region (faulting the
/// page in if evicted), through `process_vm_readv` elsewhere.
fn read_or_touch<T: Copy + Default>(addr: usize) -> Option<T> {
    let size = std::mem::size_of::<T>();
    if in_region(addr, size) {
        // SAFETY: in a live region: the read faults an evicted page in.
        return Some(unsafe { std::ptr::read_unaligned(addr as *const T) });
    }
    let mut value = T::default();
    // SAFETY: a plain `Copy` value's bytes, overwritten whole or left.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut((&mut value as *mut T).cast::<u8>(), size) };
    copy_in(addr, bytes).map(|()| value)
}

/// Calls served (probes excepted).
pub static TRAPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Serves one trapped call; returns the value for `rax`.
fn serve(nr: i64, mut args: [i64; 6], uc: &mut libc::ucontext_t) -> i64 {
    if nr == libc::SYS_uname && args[0] as usize == PROBE_ADDR {
        return PROBE_ANSWER;
    }
    TRAPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match nr {
        libc::SYS_execve | libc::SYS_execveat => return exec(nr, args, uc),
        libc::SYS_rt_sigprocmask => return sigprocmask(&args, uc),
        libc::SYS_rt_sigaction if matches!(args[0] as i32, libc::SIGBUS | libc::SIGSYS) => {
            return sigaction(&args)
        }
        libc::SYS_read | libc::SYS_write | libc::SYS_pread64 | libc::SYS_pwrite64
            if args[2] as usize > PIECE_BYTES =>
        {
            return in_pieces(nr, args)
        }
        _ => {}
    }
    let call = table::lookup(nr as u32);
    let mut pins = Pins::new();
    if let Err(why) = pin_arguments(&mut pins, nr, call, &mut args) {
        pins.release();
        cannot_serve(call.name, why, &args)
    }
    // SAFETY: the program's own call, its memory pinned (`pins` lives until
    // the call has returned).
    unsafe { far::syscall(nr, args) }
}

/// The handler.
pub extern "C" fn on_sigsys(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let saved_errno = crate::errno();
    // SAFETY: for SA_SIGINFO handlers the kernel passes a valid siginfo;
    // si_code and si_errno are at their usual places for every signal.
    let (code, data) = unsafe { ((*info).si_code, (*info).si_errno) };
    if code != SYS_SECCOMP || data as u32 != TRAP_MARKER || ctx.is_null() {
        return CHAIN.call(sig, info, ctx);
    }
    // SAFETY: the third argument of an SA_SIGINFO handler is the
    // interrupted context; the registers hold the trapped call (the kernel
    // rolled rax back to its number).
    let uc = unsafe { &mut *(ctx as *mut libc::ucontext_t) };
    let g = &uc.uc_mcontext.gregs;
    let nr = g[libc::REG_RAX as usize];
    let args = [
        g[libc::REG_RDI as usize],
        g[libc::REG_RSI as usize],
        g[libc::REG_RDX as usize],
        g[libc::REG_R10 as usize],
        g[libc::REG_R8 as usize],
        g[libc::REG_R9 as usize],
    ];
    let r = serve(nr, args, uc);
    uc.uc_mcontext.gregs[libc::REG_RAX as usize] = r;
    crate::set_errno(saved_errno);
}
