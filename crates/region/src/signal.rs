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
//! - blocks every other signal while it runs (`sa_mask` is full), so no other
//!   handler interleaves with a half-done restore;
//! - in a forked child that took the budget over (module `fork`), resolves
//!   as in the parent; in one where the region's machinery stayed with the
//!   parent (raw `clone()` bypassing the fork hooks), ends the process with
//!   a message rather than let a page read as zeros;
//!   a `vfork()` child, which runs in its parent's memory until `exec`,
//!   resolves its fault as a thread of the parent would (`kcmp` tells the
//!   two apart) while its copy of the userfaultfd is open; one that closed
//!   it (spawn libraries close every descriptor before `exec`) ends with
//!   the message too.
//!
//! **Chaining.** The handler is installed with raw `sigaction` (not
//! signal-hook, which runs the previous handler first; Rust's std handler for
//! SIGBUS resets the disposition to SIG_DFL). Faults outside zpage's regions
//! go to the previously installed action: its `sa_sigaction` or `sa_handler`
//! is called; for SIG_DFL/SIG_IGN the disposition is reset to SIG_DFL and the
//! handler returns, so the access faults again and the process dies with the
//! usual SIGBUS (and core dump).
#![allow(unsafe_code)]

use crate::fault::{self, about_page, Access, Ctx};
use crate::sys;
use crate::table;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

struct OldAction(libc::sigaction);
// SAFETY: the saved sigaction is plain data written once, under INSTALL,
// before the handler that reads it is installed, and only read afterwards.
unsafe impl Send for OldAction {}
// SAFETY: as above.
unsafe impl Sync for OldAction {}

/// The action zpage chains to, written once under [`INSTALL`].
static OLD: std::sync::OnceLock<OldAction> = std::sync::OnceLock::new();
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
    let _ = OLD.set(OldAction(old));
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
        if core.owner_pid() != sys::getpid() && !sys::vfork_child_can_resolve(core) {
            about_page(core, page)
                .text(" was touched in a child process forked while it was evicted; the region's userfaultfd stayed with the parent, so it cannot be restored here")
                .abort()
        }
        match fault::resolve(core, page, access, Ctx::Signal) {
            // ENOENT/ESRCH: the mapping or the process is going away;
            // returning lets the access fault again and fail as it would
            // without us.
            Ok(()) | Err(sys::Errno(libc::ENOENT | libc::ESRCH)) => {}
            Err(e) => about_page(core, page)
                .text(": a userfaultfd ioctl failed with errno ")
                .dec(e.0 as u64)
                .text(" while resolving a fault; ending the process rather than loop")
                .abort(),
        }
    })
    .is_some()
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

/// A SIGBUS action the program asked for after zpage's handler was
/// installed (through [`chain_to`]): `sa_sigaction` then `sa_flags`; a
/// handler of 0 means none (chain to [`OLD`]). Two words read without a lock
/// in the handler.
static PROGRAM_HANDLER: AtomicUsize = AtomicUsize::new(0);
static PROGRAM_FLAGS: AtomicI32 = AtomicI32::new(0);
static PROGRAM_SET: AtomicBool = AtomicBool::new(false);

/// Makes `action` the SIGBUS action faults outside zpage's regions go to,
/// keeping zpage's handler installed in front (for a preload library that
/// intercepts the program's `sigaction(SIGBUS)`: a crash reporter such as
/// CPython's faulthandler would otherwise replace it and kill the program
/// at the first evicted page). Returns the action chained to until now. The
/// handler and flags are what is kept; the mask of zpage's handler (full)
/// applies while the program's handler runs.
pub fn chain_to(action: &libc::sigaction) -> libc::sigaction {
    let previous = chained();
    PROGRAM_FLAGS.store(action.sa_flags, Ordering::Release);
    PROGRAM_HANDLER.store(action.sa_sigaction, Ordering::Release);
    PROGRAM_SET.store(true, Ordering::Release);
    previous
}

/// The SIGBUS action faults outside zpage's regions go to now.
pub fn chained() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is a valid empty value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    if PROGRAM_SET.load(Ordering::Acquire) {
        action.sa_sigaction = PROGRAM_HANDLER.load(Ordering::Acquire);
        action.sa_flags = PROGRAM_FLAGS.load(Ordering::Acquire);
    } else if let Some(old) = OLD.get() {
        action = old.0;
    }
    action
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let program;
    let old = if PROGRAM_SET.load(Ordering::Acquire) {
        // SAFETY: a zeroed sigaction is a valid empty value.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = PROGRAM_HANDLER.load(Ordering::Acquire);
        act.sa_flags = PROGRAM_FLAGS.load(Ordering::Acquire);
        program = act;
        &program
    } else {
        let Some(old) = OLD.get() else {
            return reset_default(sig);
        };
        &old.0
    };
    if old.sa_sigaction == libc::SIG_DFL || old.sa_sigaction == libc::SIG_IGN {
        return reset_default(sig);
    }
    if old.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous action was installed as an SA_SIGINFO handler
        // with this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous action was installed as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(old.sa_sigaction) };
        f(sig);
    }
}

fn reset_default(sig: libc::c_int) {
    // SAFETY: sigaction is async-signal-safe; SIG_DFL makes the re-executed
    // access kill the process with the default action (core dump).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}
