//! System calls on evicted pages inside the interpreter: the wrappers of
//! `zpage-syscalls`, installed in process (GOT entries of every loaded
//! object, see `zpage_syscalls::inproc`) at import, and again for objects
//! loaded since at each budget, region and NumPy arena made (the wrapper of
//! `dlopen` catches most of them as they load).
//!
//! `ZPAGE_PYTHON_WRAP_SYSCALLS=0` in the environment at import leaves every
//! GOT entry alone: system calls on evicted pages then fail with `EFAULT`
//! (`OSError`), as `zpage.resident` or the copying helpers avoid.

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The variable that turns the wrappers off.
pub const ENV: &str = "ZPAGE_PYTHON_WRAP_SYSCALLS";

/// Installs the wrappers (at import): every loaded object's entries.
pub fn install_at_import() {
    if std::env::var(ENV).is_ok_and(|v| v == "0") {
        zpage_syscalls::inproc::disable();
        return;
    }
    wrap_new_objects();
}

/// The interpreter's own objects (the program, `libpython`): they carry a
/// run path in some builds, but `dlopen` only extension modules, by a path
/// with a slash (CPython adds `./` to a bare name), which no run path
/// affects; their `dlopen` is wrapped so that modules imported later are
/// patched as they load.
fn is_interpreter(name: &std::ffi::CStr) -> bool {
    let name = name.to_bytes();
    let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    name.is_empty() || base.starts_with(b"libpython")
}

/// Patches the objects loaded since the last walk (cheap if none was).
pub fn wrap_new_objects() {
    if let Err(why) = zpage_syscalls::inproc::install_with(is_interpreter) {
        zpage_syscalls::inproc::disable();
        eprintln!(
            "zpage: system calls on compressed pages are not wrapped ({why}); they fail with OSError (EFAULT) on evicted pages"
        );
    }
}

/// What the in-process wrappers did: objects walked, entries patched, left
/// alone (bound to another definition) and not writable, and the calls that
/// ran with pinned buffers or were retried.
#[pyfunction]
pub fn syscall_wrappers(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let totals = zpage_syscalls::inproc::totals();
    let (pinned, retried) = zpage_syscalls::inproc::call_counts();
    let d = PyDict::new(py);
    d.set_item("enabled", !zpage_syscalls::inproc::disabled())?;
    d.set_item("objects", totals.objects)?;
    d.set_item("patched", totals.patched)?;
    d.set_item("bound_elsewhere", totals.bound_elsewhere)?;
    d.set_item("failed", totals.failed)?;
    d.set_item("pinned_calls", pinned)?;
    d.set_item("retried_calls", retried)?;
    Ok(d)
}
