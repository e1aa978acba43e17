//! The SIGBUS handler: the faulting thread restores its own page.
//!
//! **Async-signal-safety argument.** The handler runs on the faulting thread,
//! at an arbitrary instruction of the program (possibly inside `malloc`, or
//! inside one of the program's own signal handlers). It
//! - finds the region in the fixed, lock-free region table (`table.rs`) and
//!   resolves the fault with `fault::resolve`, whose own argument is at the
//!   top of `fault.rs` (no allocation, no lock held by a thread that could be
//!   waiting on this one, async-signal-safe system calls only);
//! - saves and restores `errno`;
//! - blocks every other signal but SIGSYS while it runs (a seccomp trap of
//!   one of its calls must be served, see `our_action`), so no other
//!   handler interleaves with a half-done restore;
//! - in a forked child that took the budget over (module `fork`), resolves
//!   as in the parent; in one where the region's machinery stayed with the
//!   parent (raw `clone()` bypassing the fork hooks), ends the process with
//!   a message rather than let a page read as zeros;
//!   a `vfork()` child, which runs in its parent's memory until `exec`,
//!   resolves its fault as a thread of the parent would (`kcmp` tells the
//!   two apart) while its copy of the userfaultfd is open; one that closed
//!   it (spawn libraries close every descriptor before `exec`) asks the
//!   parent's reclaimer and waits on a futex (module `fork::vfork`).
//!
//! **Chaining.** The handler is installed with raw `sigaction` (not
//! signal-hook, which runs the previous handler first; Rust's std handler for
//! SIGBUS resets the disposition to SIG_DFL). Faults outside zpage's regions
//! go to the previously installed action: its `sa_sigaction` or `sa_handler`
//! is called; for SIG_DFL/SIG_IGN the disposition is reset to SIG_DFL and the
//! handler returns, so the access faults again and the process dies with the
//! usual SIGBUS (and core dump).
#![allow(unsafe_code)]

use crate::fault::{self, Access, Ctx};
use crate::sys;
use crate::table;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

struct OldAction(libc::sigaction);
// SAFETY: the saved sigaction is plain data written once, before the
// handler that reads it is installed, and only read afterwards.
unsafe impl Send for OldAction {}
// SAFETY: as above.
unsafe impl Sync for OldAction {}

/// Serialises installation; a failed `sigaction` leaves it uninstalled, so
/// the next region tries again (a failure is never remembered as success).
static INSTALL: Mutex<()> = Mutex::new(());
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn our_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is a valid empty value; we fill in the
    // handler, a full mask and SA_SIGINFO.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        // A seccomp trap (crate `zpage-syscalls`) of a call the handler
        // makes must be served, not kill the process: blocked, the kernel
        // resets SIGSYS to its default action.
        libc::sigdelset(&mut act.sa_mask, libc::SIGSYS);
        act
    }
}

/// Installs the handler once per process (first budget created).
pub fn install() -> Result<(), sys::Errno> {
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let act = our_action();
    // SAFETY: valid sigaction structs; the old action is written into a local.
    let old = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(sys::Errno(sys::last_errno()));
        }
        old
    };
    // The first successful install records the action to chain to; a later
    // re-install (after someone replaced ours) keeps the original.
    SIGBUS_CHAIN.record_replaced(old);
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// True once zpage's handler has been installed in this process (the first
/// budget started). Before that, a program's SIGBUS action belongs in the
/// kernel, not in zpage's chain.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Acquire)
}

/// Puts zpage's handler back in front if someone replaced it (runtimes and
/// crash reporters that install SIGBUS handlers after zpage). The replaced
/// handler is not recorded: chaining goes to the original one.
pub fn ensure_front() -> Result<(), sys::Errno> {
    // SAFETY: reading the current disposition into a zeroed struct.
    let cur = unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut cur);
        cur
    };
    if cur.sa_sigaction == on_sigbus as *const () as usize {
        return Ok(());
    }
    let act = our_action();
    // SAFETY: a valid sigaction; the old one is not needed.
    if unsafe { libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) } != 0 {
        return Err(sys::Errno(sys::last_errno()));
    }
    Ok(())
}

/// Looks `addr` up and resolves the fault; false if it is not ours.
fn dispatch(addr: usize, access: Access, entered: u64) -> bool {
    table::at_address(addr, |core, page| {
        crate::profile::end(crate::profile::Part::Dispatch, entered, 1);
        if core.foreign.contains(page) {
            // Something else is mapped there: the fault is the kernel's.
            return false;
        }
        let owner = core.owner_pid() == sys::getpid();
        if !owner && !sys::shares_memory_with(core.owner_pid()) {
            core.about_page(page)
                .text(" was touched in a child process forked while it was evicted; the region's userfaultfd stayed with the parent, so it cannot be restored here")
                .abort()
        }
        match fault::resolve_from(core, page, access, Ctx::Signal, owner) {
            // ENOENT/ESRCH: the mapping or the process is going away;
            // returning lets the access fault again and fail as it would
            // without us.
            Ok(()) | Err(sys::Errno(libc::ENOENT | libc::ESRCH)) => {}
            Err(e) => core.about_page(page)
                .text(": a userfaultfd ioctl failed with errno ")
                .dec(e.0 as u64)
                .text(" while resolving a fault; ending the process rather than loop")
                .abort(),
        }
        true
    })
    .unwrap_or(false)
}

/// The access from the page-fault error code: a write, and a protection
/// fault (write to a present, write-protected page).
fn access_of(ctx: *mut libc::c_void) -> Access {
    #[cfg(target_arch = "x86_64")]
    {
        if ctx.is_null() {
            return Access::READ;
        }
        // SAFETY: for an SA_SIGINFO handler the third argument is the
        // interrupted ucontext; REG_ERR holds the page-fault error code: bit 0
        // set for a protection fault on a present page, bit 1 for a write.
        let err = unsafe {
            let uc = &*(ctx as *const libc::ucontext_t);
            uc.uc_mcontext.gregs[libc::REG_ERR as usize]
        };
        let write = err & 2 != 0;
        Access {
            write,
            protection: write && err & 1 != 0,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Without the error code, treat every fault as a write to a
        // protected page: resolve() then lifts a protection if there is one
        // and otherwise restores.
        let _ = ctx;
        Access::WRITABLE
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let entered = crate::profile::start();
    let saved_errno = sys::last_errno();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // An evicted page's entry carries a poison marker: on kernels built with
    // memory-failure handling it faults with BUS_MCEERR_AR, otherwise with
    // BUS_ADRERR, like an empty entry.
    let ours = (code == libc::BUS_ADRERR || code == libc::BUS_MCEERR_AR)
        && dispatch(addr, access_of(ctx), entered);
    sys::set_errno(saved_errno);
    if !ours {
        chain(sig, info, ctx);
    }
}

/// The action a handler of zpage's passes what is not its own to: the
/// program's, or the one installed before zpage's. One per signal zpage
/// handles (SIGBUS here, SIGSYS in crate `zpage-syscalls`). The handler and
/// flags are kept, in words read without a lock in the handler; the mask of
/// zpage's handler applies while the program's runs.
pub struct Chain {
    /// The action found when zpage's handler was first installed.
    old: std::sync::OnceLock<OldAction>,
    /// A program's action set afterwards through [`Chain::chain_to`]:
    /// `sa_sigaction`, then `sa_flags`; `set` says whether there is one.
    program_handler: AtomicUsize,
    program_flags: AtomicI32,
    program_set: AtomicBool,
}

impl Chain {
    pub const fn new() -> Chain {
        Chain {
            old: std::sync::OnceLock::new(),
            program_handler: AtomicUsize::new(0),
            program_flags: AtomicI32::new(0),
            program_set: AtomicBool::new(false),
        }
    }

    /// Records the action zpage's handler replaced (the first time only: a
    /// later re-install keeps the original).
    pub fn record_replaced(&self, old: libc::sigaction) {
        let _ = self.old.set(OldAction(old));
    }

    /// Makes `action` the one chained to, keeping zpage's handler installed
    /// in front (for a preload library that intercepts the program's
    /// `sigaction`: a crash reporter such as CPython's faulthandler would
    /// otherwise replace it). Returns the action chained to until now.
    pub fn chain_to(&self, action: &libc::sigaction) -> libc::sigaction {
        let previous = self.chained();
        self.program_flags.store(action.sa_flags, Ordering::Release);
        self.program_handler
            .store(action.sa_sigaction, Ordering::Release);
        self.program_set.store(true, Ordering::Release);
        previous
    }

    /// The action chained to now. Async-signal-safe.
    pub fn chained(&self) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is a valid empty value.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        if self.program_set.load(Ordering::Acquire) {
            action.sa_sigaction = self.program_handler.load(Ordering::Acquire);
            action.sa_flags = self.program_flags.load(Ordering::Acquire);
        } else if let Some(old) = self.old.get() {
            action = old.0;
        }
        action
    }

    /// Passes a signal that is not zpage's on: calls the chained handler,
    /// or, for `SIG_DFL`/`SIG_IGN`, resets the disposition to `SIG_DFL` so
    /// the instruction, executed again, ends the process the usual way.
    /// Async-signal-safe.
    pub fn call(&self, sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        let action = self.chained();
        if action.sa_sigaction == libc::SIG_DFL || action.sa_sigaction == libc::SIG_IGN {
            return reset_default(sig);
        }
        if action.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: the action was installed as an SA_SIGINFO handler with
            // this signature.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(action.sa_sigaction) };
            f(sig, info, ctx);
        } else {
            // SAFETY: the action was installed as a plain handler.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(action.sa_sigaction) };
            f(sig);
        }
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new()
    }
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chain")
    }
}

/// Where SIGBUS faults outside zpage's regions go.
static SIGBUS_CHAIN: Chain = Chain::new();

/// Where SIGBUS faults outside zpage's regions go.
pub fn sigbus_chain() -> &'static Chain {
    &SIGBUS_CHAIN
}

/// SIGBUS's [`Chain::chain_to`].
pub fn chain_to(action: &libc::sigaction) -> libc::sigaction {
    SIGBUS_CHAIN.chain_to(action)
}

/// SIGBUS's [`Chain::chained`].
pub fn chained() -> libc::sigaction {
    SIGBUS_CHAIN.chained()
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    SIGBUS_CHAIN.call(sig, info, ctx)
}

fn reset_default(sig: libc::c_int) {
    // The kernel's `struct sigaction` with SIG_DFL (0), no flags, no
    // restorer, an empty mask. Made from the trampoline when the far range
    // is reserved: a system-call filter of zpage's (crate `zpage-syscalls`)
    // traps the program's `rt_sigaction` of SIGBUS and SIGSYS to keep
    // zpage's handlers in front, and this reset is zpage's own.
    let act = [0u64; 4];
    // SAFETY: rt_sigaction reads 32 bytes of `act`; SIG_DFL makes the
    // re-executed access kill the process with the default action (core
    // dump). Async-signal-safe (one system call).
    unsafe {
        crate::far::syscall(
            libc::SYS_rt_sigaction,
            [sig as i64, act.as_ptr() as i64, 0, 8, 0, 0],
        );
    }
}

/// True if `handler` is zpage's SIGBUS handler (an `sa_sigaction` value).
pub fn is_sigbus_handler(handler: usize) -> bool {
    handler == on_sigbus as *const () as usize
}
