//! The few system calls std does not offer. All `unsafe` of the crate lives here.
//!
//! Signal context: `forward_signal` runs as a signal handler, and the
//! `join_cgroup_at_exec` and `hold_signals` hooks between fork and exec;
//! they only load atomics and make system calls (pidfd_send_signal, kill,
//! write, sigprocmask), which are async-signal-safe.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

// From <sys/swap.h>; the libc crate does not export them.
const SWAP_FLAG_PREFER: i32 = 0x8000;
const SWAP_FLAG_PRIO_MASK: i32 = 0x7fff;
const SWAP_FLAG_DISCARD: i32 = 0x10000;

/// Effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// True when running as root (most kernel knobs need it).
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// Raises this process's soft limit on open files towards `wanted` (never
/// past the hard limit, never lowering it); returns the soft limit now in
/// effect. systemd starts services with a soft limit of 1024 and a far
/// higher hard one, and expects programs that need more to raise it.
pub fn raise_open_file_limit(wanted: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    let target = wanted.min(limit.rlim_max);
    if target > limit.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we pass, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return target;
        }
    }
    limit.rlim_cur
}

/// Blocks until an exclusive flock on `file` is held; released when the file is closed.
pub fn flock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor is valid for the lifetime of `file`, which we borrow.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Enables swap on `path`; `priority` None lets the kernel choose (negative, decreasing).
pub fn swapon(path: &Path, priority: Option<i16>, discard: bool) -> io::Result<()> {
    let c = c_path(path)?;
    let mut flags = 0;
    if let Some(prio) = priority {
        // The kernel accepts 0..=32767 through SWAP_FLAG_PREFER; negative ones are kernel-assigned.
        let prio = i32::from(prio.max(0));
        flags |= SWAP_FLAG_PREFER | (prio & SWAP_FLAG_PRIO_MASK);
    }
    if discard {
        flags |= SWAP_FLAG_DISCARD;
    }
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::swapon(c.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Disables swap on `path` (moves its pages back to RAM first; may take a while).
pub fn swapoff(path: &Path) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::swapoff(c.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct pm_scan_arg` of `<linux/fs.h>` (Linux 6.7+).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

/// Resident anonymous (present, not file-backed, not shared) address ranges
/// in `[start, end)` of the process whose `/proc/PID/pagemap` is `pagemap`,
/// at most `max_pages` pages in all, found with the `PAGEMAP_SCAN` ioctl:
/// the kernel skips unpopulated page tables, so a sparse terabyte mapping
/// costs what its resident pages cost. `Ok(None)` when the kernel lacks the
/// ioctl (before Linux 6.7).
pub fn resident_anonymous_ranges(
    pagemap: &File,
    start: u64,
    end: u64,
    max_pages: u64,
) -> io::Result<Option<Vec<(u64, u64)>>> {
    let mut found = Vec::new();
    let mut regions = vec![PageRegion::default(); 512];
    let mut next = start;
    let mut pages = 0u64;
    while next < end && pages < max_pages {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            start: next,
            end,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: max_pages - pages,
            category_inverted: PAGE_IS_FILE,
            category_mask: PAGE_IS_PRESENT | PAGE_IS_FILE,
            return_mask: PAGE_IS_PRESENT,
            ..PmScanArg::default()
        };
        // SAFETY: `arg` is a valid pm_scan_arg whose `vec` points at `regions`,
        // `vec_len` entries long, both alive across the call; the descriptor
        // is valid for the lifetime of `pagemap`.
        let rc = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOTTY) | Some(libc::EINVAL) if found.is_empty() && next == start => {
                    Ok(None)
                }
                _ => Err(err),
            };
        }
        for region in &regions[..rc as usize] {
            found.push((region.start, region.end));
            pages += (region.end - region.start) / zpage_codec::PAGE_SIZE as u64;
        }
        if arg.walk_end <= next {
            break;
        }
        next = arg.walk_end;
    }
    Ok(Some(found))
}

/// Allocates every block of `file` up to `len` bytes (no holes, unlike `set_len`).
pub fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
    // SAFETY: the descriptor is valid for the lifetime of `file`; the kernel checks the range.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to process `pid`; a process already gone is not an error
/// worth reporting (the caller only wants it dead or told).
///
/// Async-signal-safe: one `kill` system call, no allocation.
pub fn send_signal(pid: i32, signal: i32) {
    if pid <= 0 {
        return;
    }
    // SAFETY: kill takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// How a child ended and what it used, from `wait4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildEnd {
    /// Exit code when it exited.
    pub code: Option<i32>,
    /// Signal number when a signal killed it.
    pub signal: Option<i32>,
    /// Its peak resident set (and of its waited-for descendants), bytes.
    pub max_rss_bytes: u64,
    /// Major faults.
    pub major_faults: u64,
    /// Minor faults.
    pub minor_faults: u64,
    /// CPU time in user mode, microseconds.
    pub user_micros: u64,
    /// CPU time in the kernel, microseconds.
    pub system_micros: u64,
}

/// Reaps child `pid` if it has ended (`Ok(None)` while it runs), with its
/// resource use.
pub fn try_reap(pid: i32) -> io::Result<Option<ChildEnd>> {
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live locals for the duration of the call.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(err);
    }
    if rc == 0 {
        return Ok(None);
    }
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    let exited = libc::WIFEXITED(status);
    let signaled = libc::WIFSIGNALED(status);
    Ok(Some(ChildEnd {
        code: exited.then(|| libc::WEXITSTATUS(status)),
        signal: signaled.then(|| libc::WTERMSIG(status)),
        // Linux reports ru_maxrss in KiB.
        max_rss_bytes: usage.ru_maxrss.max(0) as u64 * 1024,
        major_faults: usage.ru_majflt.max(0) as u64,
        minor_faults: usage.ru_minflt.max(0) as u64,
        user_micros: micros(usage.ru_utime),
        system_micros: micros(usage.ru_stime),
    }))
}

/// Makes `command`'s child write `0` (itself) to `cgroup_procs` between
/// fork and exec, so the program is in the cgroup before it allocates
/// anything. `cgroup_procs` is opened here, in the parent, and closed at exec.
pub fn join_cgroup_at_exec(
    command: &mut std::process::Command,
    cgroup_procs: &Path,
) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let file = std::fs::OpenOptions::new().write(true).open(cgroup_procs)?;
    let fd = file.as_raw_fd();
    let hook = move || {
        // Keeps the file (and so `fd`) open in the parent until `command` is dropped.
        let _keep = &file;
        // SAFETY: `fd` is open (the closure owns the File); the buffer is a
        // static one-byte string. write is async-signal-safe, as code between
        // fork and exec must be.
        let rc = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        if rc == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: the hook only calls write(2), which is async-signal-safe, and
    // allocates nothing on its success path.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

/// Where the forwarding handler passes signals on to: a pidfd of the child
/// when the kernel has them (a pidfd names one process, so a signal never
/// reaches another process that reused the pid), else its pid; both `-1`/`0`
/// when forwarding is off.
static FORWARD_PIDFD: AtomicI32 = AtomicI32::new(-1);
static FORWARD_PID: AtomicI32 = AtomicI32::new(0);

/// Whether a supervisor passes `signal` on to its child. Not passed on:
/// those that cannot be caught (SIGKILL, SIGSTOP); SIGCHLD, which is about
/// the supervisor's own child; those the kernel raises for a fault or an
/// `abort()` in the supervisor itself (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
/// SIGTRAP, SIGSYS, SIGABRT), whose default action must stay; the
/// terminal's background-I/O stops (SIGTTIN, SIGTTOU), which are about the
/// supervisor's own use of the terminal; and the C library's internal
/// real-time signals. Everything else a supervisor, a service manager or a
/// user sends (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
/// SIGWINCH, SIGCONT, SIGTSTP, SIGALRM, real-time signals...) is.
pub fn is_forwarded(signal: i32) -> bool {
    const NEVER: [i32; 12] = [
        libc::SIGKILL,
        libc::SIGSTOP,
        libc::SIGCHLD,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
        libc::SIGABRT,
        libc::SIGTTIN,
        libc::SIGTTOU,
    ];
    let standard = (1..32).contains(&signal);
    let realtime = (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signal);
    (standard || realtime) && !NEVER.contains(&signal)
}

/// Every signal number [`is_forwarded`] accepts.
fn forwarded_signals() -> impl Iterator<Item = i32> {
    (1..=libc::SIGRTMAX()).filter(|&s| is_forwarded(s))
}

/// Runs in signal context: async-signal-safe, as it only loads atomics and
/// makes system calls (pidfd_send_signal or kill, getpid), saving errno.
extern "C" fn forward_signal(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _: *mut libc::c_void,
) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for
    // the thread's life; saved here and put back below, so the interrupted
    // code never sees the handler's errors.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    // A signal the kernel generated for the terminal (Ctrl-C, Ctrl-\,
    // Ctrl-Z, a window resize, a hang-up: si_code SI_KERNEL) already went
    // to the whole foreground process group, the child included: sending it
    // again would deliver it twice (a second SIGINT makes redis quit
    // without saving).
    if code != libc::SI_KERNEL {
        let pidfd = FORWARD_PIDFD.load(Ordering::SeqCst);
        if pidfd >= 0 {
            // SAFETY: plain integers and a null siginfo (the kernel fills
            // in SI_USER); a stale descriptor only fails.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd,
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
        } else {
            send_signal(FORWARD_PID.load(Ordering::SeqCst), signal);
        }
    }
    if signal == libc::SIGTSTP {
        // What SIGTSTP's default action would have done: stop, so a shell
        // waiting for the job sees it stopped; SIGCONT resumes us (and is
        // passed on).
        // SAFETY: getpid and kill take plain integers.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGSTOP);
        }
    }
    // SAFETY: as above, this thread's errno slot.
    unsafe {
        *libc::__errno_location() = errno;
    }
}

/// Signals held back (blocked in this thread) while a child starts, so one
/// that arrives meanwhile is passed on to it once it runs instead of ending
/// this process. See [`hold_signals`] and [`HeldSignals::forward_to`].
#[derive(Debug)]
pub struct HeldSignals {
    old_mask: libc::sigset_t,
}

/// Blocks every signal that [`is_forwarded`] in the calling thread (and in
/// threads it starts from now on) until the returned value is turned into
/// a [`SignalForwarding`] or dropped; `command`'s child gets the mask this
/// thread had before (put back between fork and exec: std's spawn keeps
/// the parent's mask).
pub fn hold_signals(command: &mut std::process::Command) -> io::Result<HeldSignals> {
    use std::os::unix::process::CommandExt;
    let set = forwarded_set();
    // SAFETY: a zeroed sigset_t is a valid out value, filled by the call.
    let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers refer to live locals; changes this thread's mask only.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    let child_mask = old_mask;
    let unblock = move || {
        // SAFETY: sets the child's mask to a copy owned by the closure;
        // pthread_sigmask is async-signal-safe, as code between fork and
        // exec must be, and allocates nothing.
        let rc =
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &child_mask, std::ptr::null_mut()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    };
    // SAFETY: the hook only calls pthread_sigmask (see above).
    unsafe {
        command.pre_exec(unblock);
    }
    Ok(HeldSignals { old_mask })
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is valid input to sigemptyset, which initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live local; sigemptyset/sigaddset only write to it.
    unsafe {
        libc::sigemptyset(&mut set);
        for signal in forwarded_signals() {
            libc::sigaddset(&mut set, signal);
        }
    }
    set
}

impl HeldSignals {
    /// Passes every forwarded signal sent to this process on to `pid` from
    /// now on (those that arrived while held first), except those this
    /// process ignores (as under `nohup`: the child inherited that), and
    /// those the terminal sent the whole process group. `pid` must be an
    /// unreaped child of this process.
    pub fn forward_to(self, pid: i32) -> io::Result<SignalForwarding> {
        // SAFETY: pidfd_open takes plain integers; `pid` is our unreaped
        // child, so it names that process. A kernel without pidfds (before
        // 5.3) says ENOSYS and the handler falls back to kill(pid).
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        FORWARD_PID.store(pid, Ordering::SeqCst);
        FORWARD_PIDFD.store(pidfd.max(-1), Ordering::SeqCst);
        let mut forwarding = SignalForwarding {
            previous: Vec::new(),
            pidfd,
        };
        for signal in forwarded_signals() {
            // SAFETY: a zeroed sigaction is a valid out value.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a null new action only reads the current one into `old`.
            if unsafe { libc::sigaction(signal, std::ptr::null(), &mut old) } != 0 {
                continue;
            }
            if old.sa_sigaction == libc::SIG_IGN {
                continue;
            }
            // SAFETY: a zeroed sigaction is a valid value of this plain C struct.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = forward_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            // SAFETY: sa_mask is a valid sigset_t inside `action`.
            unsafe {
                libc::sigemptyset(&mut action.sa_mask);
            }
            // SAFETY: both pointers refer to live locals; the handler is an
            // extern "C" fn with the SA_SIGINFO signature.
            if unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            forwarding.previous.push((signal, old));
        }
        // Dropping `self` puts the old mask back: what arrived meanwhile
        // is delivered to the handler now.
        drop(self);
        Ok(forwarding)
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask this thread had before hold_signals.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut());
        }
    }
}

/// While alive, the signals a supervisor forwards ([`is_forwarded`]) that
/// are sent to this process are passed on to its child instead of acting
/// on this process, which can then report and restore what it changed.
/// The previous handlers come back on drop.
#[derive(Debug)]
pub struct SignalForwarding {
    previous: Vec<(i32, libc::sigaction)>,
    pidfd: i32,
}

impl Drop for SignalForwarding {
    fn drop(&mut self) {
        for (signal, old) in &self.previous {
            // SAFETY: `old` is the action the kernel gave us for this signal.
            unsafe {
                libc::sigaction(*signal, old, std::ptr::null_mut());
            }
        }
        FORWARD_PIDFD.store(-1, Ordering::SeqCst);
        FORWARD_PID.store(0, Ordering::SeqCst);
        if self.pidfd >= 0 {
            // SAFETY: our own descriptor from pidfd_open, closed once.
            unsafe {
                libc::close(self.pidfd);
            }
        }
    }
}

/// Blocks the signals a supervisor forwards ([`is_forwarded`]) in the
/// calling thread, so they are handled on the main thread and never
/// interrupt a helper thread of ours.
pub fn block_forwarded_signals_in_this_thread() {
    let set = forwarded_set();
    // SAFETY: `set` is a live local; pthread_sigmask reads it and changes
    // only this thread's mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Ends this process the way its child ended, by `signal`, so that whoever
/// waits for it (a shell deciding whether to stop a script on Ctrl-C, a
/// service manager that counts death by SIGTERM as a clean stop) sees the
/// child's end. Core dumps are turned off first (the child's core, if any,
/// is the one worth having). Where the signal cannot end the process (it
/// is the init of a PID namespace, or the signal's default is to ignore),
/// exits with 128 + `signal`, a shell's spelling of the same.
pub fn exit_by_signal(signal: i32) -> ! {
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask; the other
    // calls take plain values or pointers to live locals.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signal, &default, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// Whether this process may execute `path` (execve's own check, with the
/// effective ids).
pub fn may_execute(path: &Path) -> bool {
    let Ok(c) = c_path(path) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::X_OK, libc::AT_EACCESS) == 0 }
}
