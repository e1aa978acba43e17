//! The SIGBUS handler: the faulting thread restores its own page.
//!
//! **Async-signal-safety argument.** The handler runs on the faulting thread,
//! at an arbitrary instruction of the program. It therefore:
//! - allocates nothing and takes no lock: the region table below is a fixed
//!   array of atomics, the page lookup is an atomic load of the page's state
//!   word, the decompression worker comes from a preallocated slot taken by
//!   compare-and-swap ([`crate::slots`]), and counters are relaxed atomics;
//! - makes only async-signal-safe system calls (ioctl, madvise, futex,
//!   nanosleep, sched_yield, clock_gettime, sigaction, write/abort on fatal
//!   corruption);
//! - saves and restores `errno`;
//! - blocks every other signal while it runs (`sa_mask` is full), so no other
//!   handler interleaves with a half-done restore;
//! - never waits for the interrupted thread itself: the states it waits on
//!   (EVICTING, COMPRESSING, RESTORING) are held by the reclaimer or by other
//!   faulting threads, which do not touch region memory while holding them.
//!
//! The decompressor (LZ4) is stateless and does not allocate; zstd runs on a
//! context allocated when the region was created.
//!
//! **Chaining.** The handler is installed with raw `sigaction` (not
//! signal-hook, which runs the previous handler first; Rust's std handler for
//! SIGBUS resets the disposition to SIG_DFL). Faults outside zpage's regions
//! go to the previously installed action: its `sa_sigaction` or `sa_handler`
//! is called; for SIG_DFL/SIG_IGN the disposition is reset to SIG_DFL and the
//! handler returns, so the access faults again and the process dies with the
//! usual SIGBUS (and core dump).
//!
//! **Teardown.** Each table entry counts the handlers inside it (ART's
//! in-progress counter). Removing an entry clears its range first and then
//! waits for the count to drop to zero, so no handler uses a region after its
//! `Drop` has started freeing it.
#![allow(unsafe_code)]

use crate::inner::{Ctx, Inner};
use crate::sys;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// How many regions may be live at once.
pub const MAX_REGIONS: usize = 64;

struct Entry {
    base: AtomicUsize,
    end: AtomicUsize,
    inner: AtomicPtr<Inner>,
    inflight: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: Entry = Entry {
    base: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    inner: AtomicPtr::new(std::ptr::null_mut()),
    inflight: AtomicUsize::new(0),
};

static TABLE: [Entry; MAX_REGIONS] = [EMPTY_ENTRY; MAX_REGIONS];
static TABLE_LOCK: Mutex<()> = Mutex::new(());

struct OldAction(libc::sigaction);
// SAFETY: the saved sigaction is plain data written once before the handler
// can run and only read afterwards.
unsafe impl Send for OldAction {}
// SAFETY: as above.
unsafe impl Sync for OldAction {}

static OLD: OnceLock<OldAction> = OnceLock::new();

/// Installs the handler once per process (first region created).
pub fn install() -> Result<(), sys::Errno> {
    let mut err = None;
    OLD.get_or_init(|| {
        // SAFETY: zeroed sigaction is a valid "empty" value; we fill in the
        // handler, a full mask and SA_SIGINFO, and keep the old action.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigfillset(&mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
                err = Some(sys::Errno(sys::last_errno()));
            }
            OldAction(old)
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Puts zpage's handler back in front if someone replaced it (runtimes and
/// crash reporters that install SIGBUS handlers after zpage). The replaced
/// handler becomes the one zpage chains to.
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
    // SAFETY: same installation as in `install`; the previous front handler
    // is not recorded again (OnceLock), so chaining goes to the original one.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut act.sa_mask);
        if libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) != 0 {
            return Err(sys::Errno(sys::last_errno()));
        }
    }
    Ok(())
}

/// Adds a region to the table; returns its entry index.
pub fn register(inner: &Inner) -> Option<usize> {
    let _g = TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for (i, e) in TABLE.iter().enumerate() {
        if e.base.load(Ordering::SeqCst) == 0 && e.inner.load(Ordering::SeqCst).is_null() {
            e.inner
                .store(inner as *const Inner as *mut Inner, Ordering::SeqCst);
            e.end
                .store(inner.region.base() + inner.region.len(), Ordering::SeqCst);
            e.base.store(inner.region.base(), Ordering::SeqCst);
            return Some(i);
        }
    }
    None
}

/// Removes entry `i` and waits until no handler is inside it.
pub fn unregister(i: usize) {
    let _g = TABLE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let e = &TABLE[i];
    e.base.store(0, Ordering::SeqCst);
    e.end.store(0, Ordering::SeqCst);
    while e.inflight.load(Ordering::SeqCst) != 0 {
        sys::yield_now();
    }
    e.inner.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// Calls `f` on every live region owned by this process (fork hooks).
pub fn for_each_region(mut f: impl FnMut(&Inner)) {
    for e in TABLE.iter() {
        e.inflight.fetch_add(1, Ordering::SeqCst);
        let p = e.inner.load(Ordering::SeqCst);
        if e.base.load(Ordering::SeqCst) != 0 && !p.is_null() {
            // SAFETY: the entry is live and our inflight count keeps `unregister`
            // (and so the region's Drop) from freeing it until we are done.
            f(unsafe { &*p });
        }
        e.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Looks `addr` up and resolves the fault; false if it is not ours.
fn dispatch(addr: usize, (write, wp): (bool, bool)) -> bool {
    for e in TABLE.iter() {
        let base = e.base.load(Ordering::Acquire);
        if base == 0 || addr < base || addr >= e.end.load(Ordering::Acquire) {
            continue;
        }
        e.inflight.fetch_add(1, Ordering::SeqCst);
        // Re-check after announcing ourselves: `unregister` clears the range
        // before waiting for `inflight` to reach zero.
        let still = e.base.load(Ordering::SeqCst) == base;
        let p = e.inner.load(Ordering::SeqCst);
        let mut handled = false;
        if still && !p.is_null() {
            // SAFETY: as in for_each_region.
            let inner = unsafe { &*p };
            // (A forked child never gets here: its copy of the region is not
            // registered, so it takes no userfaultfd faults.)
            {
                let page = (addr - base) / sys::PAGE;
                if page < inner.pages {
                    match inner.resolve(page, write, wp, Ctx::Signal) {
                        // ENOENT/ESRCH: the mapping or the process is going
                        // away; returning lets the access fault again and fail
                        // as it would without us.
                        Ok(()) | Err(sys::Errno(libc::ENOENT | libc::ESRCH)) => {}
                        Err(_) => sys::fatal("zpage: a userfaultfd ioctl failed while resolving a fault; aborting rather than looping\n"),
                    }
                    handled = true;
                }
            }
        }
        e.inflight.fetch_sub(1, Ordering::SeqCst);
        return handled;
    }
    false
}

/// (write, protection fault) from the page-fault error code.
fn fault_kind(ctx: *mut libc::c_void) -> (bool, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        if ctx.is_null() {
            return (false, false);
        }
        // SAFETY: for an SA_SIGINFO handler the third argument is the
        // interrupted ucontext; REG_ERR holds the page-fault error code: bit 0
        // set for a protection fault on a present page, bit 1 for a write.
        let err = unsafe {
            let uc = &*(ctx as *const libc::ucontext_t);
            uc.uc_mcontext.gregs[libc::REG_ERR as usize]
        };
        let write = err & 2 != 0;
        (write, write && err & 1 != 0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // Without the error code, treat every fault as a write to a
        // protected page: resolve() then lifts a protection if there is one
        // and otherwise restores.
        let _ = ctx;
        (true, true)
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let saved_errno = sys::last_errno();
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let ours = code == libc::BUS_ADRERR && dispatch(addr, fault_kind(ctx));
    sys::set_errno(saved_errno);
    if !ours {
        chain(sig, info, ctx);
    }
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(old) = OLD.get() else {
        return reset_default(sig);
    };
    let old = &old.0;
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
