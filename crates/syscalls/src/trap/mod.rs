//! Every system call on region memory, whoever makes it: a seccomp filter
//! traps the calls that hand the kernel memory in zpage's far range, and a
//! SIGSYS handler serves them with that memory pinned.
//!
//! The C library's wrappers ([`crate::calls`]) see only the calls a program
//! makes through them; the C library's own calls (stdio flushing its buffer
//! with `write`, `accept` and `waitpid` filling the caller's structures,
//! `getcwd`, `stat`, its mutexes' `futex`), raw `syscall()` numbers and
//! other libraries' calls reach the kernel directly. With `UFFD_FEATURE_SIGBUS`
//! the kernel cannot fault an evicted page in for them: they fail with
//! `EFAULT`, and some after acting (`accept` has dequeued the connection,
//! `waitpid` has reaped the child). Under the filter they cannot meet an
//! evicted page:
//!
//! 1. every region lies in one fixed range of addresses
//!    (`zpage_region::far`), so the filter recognises a pointer into region
//!    memory by its bits;
//! 2. the filter ([`filter`]) traps a call when one of its pointer
//!    arguments (per the table, [`table`]) lies in that range, or always
//!    for the calls whose memory it cannot see (iovecs, message headers,
//!    `execve`'s strings); calls made from zpage's trampoline, at a fixed
//!    address in the range, pass;
//! 3. the handler (module `handler`) pins what the call names, re-issues it
//!    from the trampoline and returns its result: the call runs once, on
//!    resident memory, and behaves exactly as without zpage; a call whose
//!    memory cannot be kept resident ends the process with a message naming
//!    it, never an `EFAULT`.
//!
//! **What it costs.** Calls whose arguments are not in the range pay the
//! filter (about nine comparisons in the kernel) and nothing else; trapped
//! calls pay a signal round trip and their pins. The fast path of the
//! program's own hot calls stays the wrappers of [`crate::calls`] (no
//! signal). Measured figures: README, "System calls on compressed memory".
//!
//! **Privilege.** Installing a filter needs `CAP_SYS_ADMIN` or the
//! thread's `no_new_privs` bit; without the capability, [`install`] sets
//! the bit, which the process and its children keep: a set-user-ID or
//! file-capability program they `exec` then runs with the caller's
//! privileges (as under systemd's `NoNewPrivileges=yes`). As root the bit
//! is not set.
//!
//! **Across `fork` and `exec`.** Children inherit the filter, and the range
//! and trampoline sit at the same addresses in every process, so the filter
//! means the same in a child and a new program that loads zpage finds it
//! installed and adds none ([`install`] probes first). A new program that
//! does not load zpage never maps memory in the range, so the filter traps
//! nothing there.
//!
//! **io_uring and Linux AIO** are refused (`ENOSYS`): the kernel reads
//! their buffers after the call returns, when no pin holds them. Programs
//! fall back to plain system calls (libuv, liburing users, InnoDB).
#![allow(unsafe_code)]

pub mod filter;
mod handler;
pub mod table;

pub use handler::{warn_if_privileged, CHAIN, PIECE_BYTES};
use zpage_region::far;

/// How [`install`] found the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installed {
    /// The filter was installed now.
    New,
    /// A parent zpage process installed it (inherited across `exec`).
    Inherited,
}

/// True if the filter traps a call with a pointer in the range: the probe
/// (`uname` at [`handler::PROBE_ADDR`]) comes back with the handler's
/// answer. Without the filter the kernel answers `EFAULT` (the address is
/// reserved, not mapped).
fn probe() -> bool {
    // SAFETY: uname writes to the probe address only if it were mapped; it
    // is reserved PROT_NONE, so the kernel fails the call instead. Made
    // with the C library's `syscall`, not the trampoline, so the filter
    // sees it.
    let r = unsafe { libc::syscall(libc::SYS_uname, handler::PROBE_ADDR) };
    r == -1 && crate::errno() == -handler::PROBE_ANSWER as i32
}

fn install_handler() -> Result<(), String> {
    // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO
    // signature.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler::on_sigsys as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSYS, &act, &mut old) != 0 {
            return Err(format!(
                "sigaction(SIGSYS) failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        if old.sa_sigaction != act.sa_sigaction {
            CHAIN.record_replaced(old);
        }
    }
    Ok(())
}

/// A thread of this process that blocks SIGSYS now (from its
/// `/proc/self/task/TID/status`), if there is one. The filter applies to
/// every thread at once, and a trap delivered to a thread that blocks
/// SIGSYS kills the process (the kernel resets the handler to the
/// default): such a thread may only be in one of the C library's short
/// windows with every signal blocked (a `pthread_create` or `fork` in
/// progress), which the next look finds closed.
fn thread_blocking_sigsys() -> Option<String> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        if blocked & (1 << (libc::SIGSYS - 1)) != 0 {
            return Some(task.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

/// Installs the filter and its handler for this process (and its future
/// threads and children), reserving the far range first. Idempotent; an
/// inherited filter is kept as it is. Call it before any thread but the
/// caller's exists, or with every thread's filters compatible (the filter
/// is synchronised to all threads).
pub fn install() -> Result<Installed, String> {
    far::reserve().map_err(|e| {
        format!(
            "the address range {:#x}-{:#x} zpage places regions in is taken ({e})",
            far::FAR_BASE,
            far::FAR_BASE + far::FAR_LEN
        )
    })?;
    install_handler()?;
    if probe() {
        INSTALLED.store(true, std::sync::atomic::Ordering::Release);
        return Ok(Installed::Inherited);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while let Some(tid) = thread_blocking_sigsys() {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "thread {tid} of this process blocks SIGSYS, and a filter installed now would kill it at its next trapped call"
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let code = filter::program(far::TRAMPOLINE_SYSCALL_END as u64);
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_ptr() as *mut libc::sock_filter,
    };
    let set = || {
        // SAFETY: `prog` points to `code`, alive for the call; the kernel
        // copies and checks the program.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_TSYNC,
                &prog as *const libc::sock_fprog,
            )
        }
    };
    if set() != 0 {
        if crate::errno() != libc::EACCES {
            return Err(format!(
                "seccomp(SECCOMP_SET_MODE_FILTER) failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Not CAP_SYS_ADMIN: the kernel wants no_new_privs.
        // SAFETY: a plain prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 || set() != 0 {
            return Err(format!(
                "seccomp(SECCOMP_SET_MODE_FILTER) with no_new_privs failed: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if !probe() {
        return Err("the seccomp filter was installed but does not trap its probe".into());
    }
    INSTALLED.store(true, std::sync::atomic::Ordering::Release);
    Ok(Installed::New)
}

/// System calls the trap served in this process.
pub fn trapped_calls() -> u64 {
    handler::TRAPPED.load(std::sync::atomic::Ordering::Relaxed)
}

/// True once [`install`] succeeded in this process (or in its parent
/// before a `fork`).
pub fn installed() -> bool {
    INSTALLED.load(std::sync::atomic::Ordering::Acquire)
}

static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True if the filter is in place in this process, installed here or
/// inherited (asks the kernel: one trapped call).
pub fn active() -> bool {
    far::is_reserved() && probe()
}
