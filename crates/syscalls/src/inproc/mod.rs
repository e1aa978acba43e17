//! In-process installation: the wrappers reached through the program's own
//! GOT entries, for a front end loaded as a library into a program that did
//! not start with `LD_PRELOAD` (the Python package).
//!
//! [`install`] points the `R_X86_64_JUMP_SLOT`/`R_X86_64_GLOB_DAT` entries
//! (AArch64: `R_AARCH64_JUMP_SLOT`/`R_AARCH64_GLOB_DAT`) of every wrapped
//! function in every loaded object at this module's wrappers, whose real
//! function is `dlsym(RTLD_DEFAULT)`'s: the one those entries were bound to.
//! Left alone: the C library itself (its internal calls use no GOT entry
//! anyway), the object that holds this code (its calls are zpage's own),
//! entries bound to another definition than the default one (another
//! interposer's, a versioned alias), and the `dlopen` entries of objects
//! with a `DT_RPATH`/`DT_RUNPATH` (see below).
//!
//! Objects loaded later are patched too: the wrapper of `dlopen` patches
//! what the call loaded before returning it, and [`install`] may be called
//! again (the Python package calls it at each budget and region it makes;
//! it costs one walk of the loaded objects when nothing new was loaded).
//! `dlopen` searches a bare name along the calling object's `DT_RPATH` or
//! `DT_RUNPATH`; called from the wrapper, the caller would be this object,
//! so objects that carry such a path keep their own `dlopen` (what they load
//! is patched at the next [`install`]) unless the front end knows they
//! `dlopen` only paths with a slash ([`install_with`]), and if this object
//! carries one, `dlopen` is wrapped nowhere.
//!
//! What no GOT entry sees stays unwrapped: calls through `dlsym` (ctypes
//! functions), raw `syscall` instructions, the C library's calls to itself
//! (`fread`/`fwrite` are wrapped at the caller for that reason), io_uring.
//! The kernel fails those with `EFAULT` on an evicted page; nothing wrong
//! is read or written.

mod got;

use crate::calls;
use crate::guard::Policy;
use crate::real::{Real, Scope};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

pub use got::Counts;

/// The in-process policy: any region of this process is zpage's; zpage's
/// own code lives in the object [`install`] skips, so it never reaches a
/// wrapper.
#[derive(Debug)]
pub struct InProcess;

static PINNED_CALLS: AtomicU64 = AtomicU64::new(0);
static RETRIED_CALLS: AtomicU64 = AtomicU64::new(0);

impl Policy for InProcess {
    type Inside = ();
    fn passes_through(&self) -> bool {
        false
    }
    fn in_region(&self, addr: usize, len: usize) -> bool {
        zpage_region::overlaps_any_region(addr, len)
    }
    fn enter(&self) {}
    fn count_pinned(&self) {
        PINNED_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    fn count_retried(&self) {
        RETRIED_CALLS.fetch_add(1, Ordering::Relaxed);
    }
    const ADVICE: &'static str =
        "keep the buffer resident for the call (zpage.resident) or raise the budget";
}

/// Calls that ran with pinned buffers, and retried calls, since the start.
pub fn call_counts() -> (u64, u64) {
    (
        PINNED_CALLS.load(Ordering::Relaxed),
        RETRIED_CALLS.load(Ordering::Relaxed),
    )
}

/// Makes the in-process wrapper of each listed function and the table
/// [`install`] patches from.
macro_rules! define_in_process_wrappers {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => |$s:ident| $spans:block $(pieces $pieces:tt)? ; )*) => {
        #[allow(non_upper_case_globals)]
        mod real_of {
            use super::{Real, Scope};
            $( pub static $name: Real = Real::new(concat!(stringify!($name), "\0"), Scope::Default); )*
        }

        mod wrapper {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)]
                pub(super) unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
                    // SAFETY: the signature is the C function's (the list);
                    // the caller keeps the function's contract.
                    unsafe {
                        calls::$name(&InProcess, real_of::$name.function::<calls::signature::$name>(), $($arg),*)
                    }
                }
            )*
        }

        /// Every wrapped function: its slot and its wrapper.
        fn listed() -> Vec<(&'static Real, usize)> {
            vec![
                $( (&real_of::$name, wrapper::$name as calls::signature::$name as usize), )*
                (&REAL_SYSCALL, syscall_wrapper as calls::SyscallFn as usize),
                (&REAL_DLOPEN, dlopen_wrapper as DlopenFn as usize),
            ]
        }
    };
}

crate::for_each_wrapped_call!(define_in_process_wrappers);

static REAL_SYSCALL: Real = Real::new("syscall\0", Scope::Default);
static REAL_DLOPEN: Real = Real::new("dlopen\0", Scope::Default);

type DlopenFn = unsafe extern "C" fn(*const libc::c_char, libc::c_int) -> *mut libc::c_void;

/// `syscall(3)` (see [`calls::syscall`]).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn syscall_wrapper(
    nr: libc::c_long,
    a: libc::c_long,
    b: libc::c_long,
    c: libc::c_long,
    d: libc::c_long,
    e: libc::c_long,
    f: libc::c_long,
) -> libc::c_long {
    // SAFETY: the slot holds `syscall`, whose type SyscallFn declares; the
    // caller keeps syscall's contract.
    unsafe {
        calls::syscall(
            &InProcess,
            REAL_SYSCALL.function::<calls::SyscallFn>(),
            nr,
            [a, b, c, d, e, f],
        )
    }
}

/// `dlopen(3)`, then the objects it loaded are patched.
unsafe extern "C" fn dlopen_wrapper(
    file: *const libc::c_char,
    flags: libc::c_int,
) -> *mut libc::c_void {
    // SAFETY: the slot holds the C library's dlopen, of type DlopenFn.
    let real = unsafe { REAL_DLOPEN.function::<DlopenFn>() };
    let Some(real) = real else {
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's arguments, dlopen's contract.
    let handle = unsafe { real(file, flags) };
    if !handle.is_null() {
        let saved = crate::guard::errno();
        let _ = install();
        crate::guard::set_errno(saved);
    }
    handle
}

/// Set once the wrappers are installed; cleared by [`disable`].
static DISABLED: AtomicBool = AtomicBool::new(false);
/// One walk at a time.
static WALK: Mutex<Option<got::Walker>> = Mutex::new(None);

/// Points the GOT entries of the wrapped functions in every loaded object
/// (but the C library and the object holding this code) at the wrappers.
/// Cheap when called again with nothing new loaded. Returns the counts of
/// the walk it made (all zero when it had nothing to do).
pub fn install() -> Result<Counts, String> {
    install_with(|_| false)
}

/// [`install`], with `dlopen` wrapped also in the objects for which
/// `dlopen_despite_run_path(name)` is true although they carry a run path:
/// objects the front end knows to `dlopen` only paths with a slash, which
/// no run path affects (the Python interpreter loads extension modules so).
/// The first call's predicate is the one kept.
pub fn install_with(
    dlopen_despite_run_path: fn(&std::ffi::CStr) -> bool,
) -> Result<Counts, String> {
    if DISABLED.load(Ordering::Relaxed) {
        return Ok(Counts::default());
    }
    let mut walker = WALK.lock().unwrap_or_else(|e| e.into_inner());
    let walker = match walker.as_mut() {
        Some(w) => w,
        None => walker.insert(got::Walker::new(
            listed(),
            install as fn() -> _ as usize,
            dlopen_despite_run_path,
        )?),
    };
    Ok(walker.patch_new_objects())
}

/// Totals over every walk so far.
pub fn totals() -> Counts {
    let walker = WALK.lock().unwrap_or_else(|e| e.into_inner());
    walker.as_ref().map(|w| w.totals).unwrap_or_default()
}

/// Makes later [`install`] calls do nothing (entries already patched stay).
pub fn disable() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// True once [`disable`] was called.
pub fn disabled() -> bool {
    DISABLED.load(Ordering::Relaxed)
}
