//! zpage's own threads and the signal mask discipline: threads zpage spawns
//! block every asynchronous signal for their whole life
//! ([`spawn_blocking_signals`]), and code that holds a claimed page or a
//! store lock on a program thread blocks them for that span
//! ([`SignalGuard`]), so no program handler runs where it could wait on what
//! its own thread holds. The synchronous signals stay deliverable: a zpage
//! thread that faults on region memory (see the top of `fault.rs` for when
//! it can) resolves that fault itself, without waiting on itself
//! ([`on_zpage_thread`] is how the fault path and the preload library's
//! allocator tell zpage's threads).
#![allow(unsafe_code)]

use std::ffi::c_void;

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
/// zpage's system-call filter traps blocking masks whose sets lie in region
/// memory, and zpage's own, which block neither SIGBUS nor SIGSYS, need no
/// trap. Async-signal-safe (one system call).
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

#[cfg(test)]
mod tests {
    use super::*;

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
