//! The native part of the `zpage` Python package (`zpage._zpage`).
//!
//! The package (`python/zpage`) is what users import; this module gives it
//! the regions and budgets of `zpage-region`, the NumPy and raw-memory
//! allocator hooks, and
//! the analyzer. Errors become `zpage.ZpageError` subclasses carrying the
//! library's message (module `errors`); no call panics into the interpreter.

mod analyze;
mod arena;
mod buffer;
mod config;
mod errors;
mod extents;
mod json;
mod numpy_hook;
mod pymem_hook;
mod region;
mod syscalls;

use pyo3::prelude::*;

#[pymodule]
#[pyo3(name = "_zpage")]
fn zpage_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<region::Budget>()?;
    module.add_class::<region::RegionBase>()?;
    module.add("Region", buffer::region_type(py)?)?;
    module.add_class::<arena::ArrayAllocator>()?;
    module.add_function(wrap_pyfunction!(numpy_hook::make_numpy_handler, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_hook::set_numpy_handler, module)?)?;
    module.add_function(wrap_pyfunction!(pymem_hook::enter_python_objects, module)?)?;
    module.add_function(wrap_pyfunction!(pymem_hook::exit_python_objects, module)?)?;
    module.add_function(wrap_pyfunction!(arena::pin_memory, module)?)?;
    module.add_function(wrap_pyfunction!(arena::unpin_memory, module)?)?;
    module.add_function(wrap_pyfunction!(arena::owns, module)?)?;
    module.add_function(wrap_pyfunction!(arena::carve_every_size, module)?)?;
    module.add_function(wrap_pyfunction!(analyze::analyze, module)?)?;
    module.add_function(wrap_pyfunction!(analyze::kernel_status, module)?)?;
    module.add_function(wrap_pyfunction!(syscalls::syscall_wrappers, module)?)?;
    syscalls::install_at_import();
    module.add("PAGE_SIZE", zpage_region::PAGE_SIZE)?;
    // The package's version is the workspace's (pyproject.toml takes it
    // from Cargo.toml).
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
