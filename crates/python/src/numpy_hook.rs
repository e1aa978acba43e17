//! NumPy arrays in compressed memory: a NEP 49 allocator (`PyDataMem_Handler`)
//! whose large allocations are carved from regions on one budget.
//!
//! Allocations of at least `min_bytes` are carved from the block's arenas
//! (module `arena`); smaller ones go to the handler that was current when
//! the hook was made (NumPy's default, normally).
//!
//! NumPy keeps a reference to the handler's capsule in every array it
//! allocates, and the capsule owns the allocator: arrays outliving the
//! `with zpage.budget(...)` block stay valid, and the budget is released
//! with the last of them.
//!
//! The allocator functions may be called without the GIL (NumPy allows it):
//! they touch no Python object, only the carver's mutex.

use crate::arena::{round_to_pages, ArenaCarver, ArrayAllocator};
use crate::errors::{error, ErrorKind};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_char, c_uint, c_void};
use std::sync::Arc;

/// `PyDataMemAllocator` (numpy/ndarraytypes.h).
#[repr(C)]
struct MemAllocator {
    ctx: *mut c_void,
    malloc: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void,
    calloc: unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void,
    realloc: unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void,
    free: unsafe extern "C" fn(*mut c_void, *mut c_void, usize),
}

/// `PyDataMem_Handler`, version 1.
#[repr(C)]
struct MemHandler {
    name: [c_char; 127],
    version: u8,
    allocator: MemAllocator,
}

/// The capsule name NumPy requires of a handler.
const HANDLER_CAPSULE: &std::ffi::CStr = c"mem_handler";
/// NumPy's C-API table: `PyArray_GetNDArrayCFeatureVersion`,
/// `PyDataMem_SetHandler` and `PyDataMem_GetHandler` (numpy_api.py).
const API_FEATURE_VERSION: usize = 211;
const API_SET_HANDLER: usize = 304;
const API_GET_HANDLER: usize = 305;
/// The C-API feature version of NumPy 1.22, which added NEP 49.
const NEP49_FEATURE_VERSION: c_uint = 0x0000_000f;

/// The allocator behind one `zpage.budget(...)` block.
#[derive(Debug)]
pub(crate) struct Allocator {
    carver: Arc<ArenaCarver>,
    /// The handler small allocations go to, and its capsule (kept alive).
    fallback: *const MemHandler,
    _fallback_capsule: Py<PyAny>,
}

// SAFETY: `fallback` points into a capsule `_fallback_capsule` keeps alive;
// NumPy's handlers may be called from any thread. Everything else is Send + Sync.
unsafe impl Send for Allocator {}
// SAFETY: as above; shared state is behind the carver's mutex.
unsafe impl Sync for Allocator {}

impl Allocator {
    fn fallback(&self) -> &MemAllocator {
        // SAFETY: the capsule holding the handler is kept alive by `self`.
        unsafe { &(*self.fallback).allocator }
    }

    fn malloc(&self, size: usize) -> *mut c_void {
        if self.carver.carves(size) {
            return self
                .carver
                .carve(size, false)
                .unwrap_or(std::ptr::null_mut());
        }
        self.carver.state().fallback_count += 1;
        let fallback = self.fallback();
        // SAFETY: the fallback handler's own function with its own context.
        unsafe { (fallback.malloc)(fallback.ctx, size) }
    }

    fn calloc(&self, nelem: usize, elsize: usize) -> *mut c_void {
        let Some(size) = nelem.checked_mul(elsize) else {
            return std::ptr::null_mut();
        };
        if self.carver.carves(size) {
            // Carved extents are always zero (fresh, or discarded on free).
            return self
                .carver
                .carve(size, false)
                .unwrap_or(std::ptr::null_mut());
        }
        self.carver.state().fallback_count += 1;
        let fallback = self.fallback();
        // SAFETY: the fallback handler's own function with its own context.
        unsafe { (fallback.calloc)(fallback.ctx, nelem, elsize) }
    }

    fn realloc(&self, ptr: *mut c_void, new_size: usize) -> *mut c_void {
        if ptr.is_null() {
            return self.malloc(new_size);
        }
        let Some(carved) = self.carver.carved_for(ptr as usize, false) else {
            // Not ours: the fallback keeps it (its old size is unknown here).
            let fallback = self.fallback();
            // SAFETY: `ptr` came from the fallback handler.
            return unsafe { (fallback.realloc)(fallback.ctx, ptr, new_size) };
        };
        if round_to_pages(new_size.max(1)) == Some(carved.len) {
            self.carver.resize_in_place(ptr as usize, new_size);
            return ptr;
        }
        let moved = self.malloc(new_size);
        if moved.is_null() {
            return moved; // The old block stays valid, as realloc promises.
        }
        // SAFETY: both blocks are live and distinct; the copy reads at most
        // what was asked of the old one and fits the new one. Reading evicted
        // pages of the old block faults them in (user-mode access).
        unsafe {
            std::ptr::copy_nonoverlapping(
                ptr as *const u8,
                moved as *mut u8,
                carved.requested.min(new_size),
            )
        };
        if let Some(carved) = self.carver.take_carved(ptr as usize, false) {
            self.carver.give_back(ptr as usize, carved);
        }
        moved
    }

    fn free(&self, ptr: *mut c_void, size: usize) {
        if ptr.is_null() {
            return;
        }
        match self.carver.take_carved(ptr as usize, false) {
            Some(carved) => self.carver.give_back(ptr as usize, carved),
            None => {
                let fallback = self.fallback();
                // SAFETY: not carved here, so the fallback handler made it.
                unsafe { (fallback.free)(fallback.ctx, ptr, size) }
            }
        }
    }
}

/// Runs `call` on the allocator behind `ctx`; a panic becomes `failed`
/// (unwinding into NumPy's C code would abort the interpreter).
fn on_allocator<T>(ctx: *mut c_void, failed: T, call: impl FnOnce(&Allocator) -> T) -> T {
    // SAFETY: `ctx` is the `Arc<Allocator>` leaked into the handler when it was
    // made (`make_handler`), alive until the capsule's destructor.
    let allocator = unsafe { &*(ctx as *const Allocator) };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(allocator))).unwrap_or(failed)
}

unsafe extern "C" fn hook_malloc(ctx: *mut c_void, size: usize) -> *mut c_void {
    on_allocator(ctx, std::ptr::null_mut(), |a| a.malloc(size))
}

unsafe extern "C" fn hook_calloc(ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    on_allocator(ctx, std::ptr::null_mut(), |a| a.calloc(nelem, elsize))
}

unsafe extern "C" fn hook_realloc(ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void {
    on_allocator(ctx, std::ptr::null_mut(), |a| a.realloc(ptr, size))
}

unsafe extern "C" fn hook_free(ctx: *mut c_void, ptr: *mut c_void, size: usize) {
    on_allocator(ctx, (), |a| a.free(ptr, size))
}

/// Frees the handler and its reference to the allocator.
unsafe extern "C" fn destroy_handler(capsule: *mut ffi::PyObject) {
    // SAFETY: the capsule was made by `make_handler` with this name and a
    // `Box<MemHandler>` whose ctx is `Arc::into_raw` of the allocator; the
    // destructor runs once, with the GIL held.
    unsafe {
        let handler =
            ffi::PyCapsule_GetPointer(capsule, HANDLER_CAPSULE.as_ptr()) as *mut MemHandler;
        if handler.is_null() {
            ffi::PyErr_Clear();
            return;
        }
        let handler = Box::from_raw(handler);
        drop(Arc::from_raw(handler.allocator.ctx as *const Allocator));
    }
}

/// NumPy's C-API table from its `_ARRAY_API` capsule, checked for NEP 49.
fn api_table(api: &Bound<'_, PyAny>) -> PyResult<*const *const c_void> {
    // SAFETY: `api` is a live object; NumPy's API capsule has no name.
    let table = unsafe { ffi::PyCapsule_GetPointer(api.as_ptr(), std::ptr::null()) };
    if table.is_null() {
        // PyCapsule_GetPointer set an exception: it is the cause.
        let cause = PyErr::fetch(api.py());
        return Err(error(
            ErrorKind::Numpy,
            format!("numpy's _ARRAY_API is not a C-API capsule ({cause})"),
        ));
    }
    let table = table as *const *const c_void;
    // SAFETY: every NumPy with a C-API table has slot 211,
    // `unsigned int PyArray_GetNDArrayCFeatureVersion(void)`.
    let version = unsafe {
        let f: unsafe extern "C" fn() -> c_uint =
            std::mem::transmute(*table.add(API_FEATURE_VERSION));
        f()
    };
    if version < NEP49_FEATURE_VERSION {
        return Err(error(
            ErrorKind::Numpy,
            format!("this NumPy's C API is version {version:#x}; the allocator hook (NEP 49) needs NumPy >= 1.22: upgrade numpy"),
        ));
    }
    Ok(table)
}

/// `PyDataMem_SetHandler(handler)`: installs `handler` (a "mem_handler"
/// capsule) for the current context and returns the previous one.
#[pyfunction]
pub(crate) fn set_numpy_handler<'py>(
    api: &Bound<'py, PyAny>,
    handler: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let table = api_table(api)?;
    // SAFETY: from feature version 0x0f slot 304 is
    // `PyObject *PyDataMem_SetHandler(PyObject *)`, returning a new reference
    // or NULL with an exception set; it checks the capsule's name itself.
    unsafe {
        let set: unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject =
            std::mem::transmute(*table.add(API_SET_HANDLER));
        Bound::from_owned_ptr_or_err(api.py(), set(handler.as_ptr()))
    }
}

/// Makes the NEP 49 handler of a budget block: a "mem_handler" capsule
/// carving from `allocator`. Small allocations go to the handler current
/// now (from `PyDataMem_GetHandler`).
#[pyfunction]
pub(crate) fn make_numpy_handler<'py>(
    api: &Bound<'py, PyAny>,
    allocator: &Bound<'py, ArrayAllocator>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = api.py();
    let table = api_table(api)?;
    // SAFETY: from feature version 0x0f slot 305 is
    // `PyObject *PyDataMem_GetHandler(void)`: a new reference or NULL.
    let fallback_capsule = unsafe {
        let get: unsafe extern "C" fn() -> *mut ffi::PyObject =
            std::mem::transmute(*table.add(API_GET_HANDLER));
        Bound::from_owned_ptr_or_err(py, get())?
    };
    // SAFETY: NumPy's handler capsules are named "mem_handler" and hold a
    // `PyDataMem_Handler`; the capsule stays alive in the allocator.
    let fallback =
        unsafe { ffi::PyCapsule_GetPointer(fallback_capsule.as_ptr(), HANDLER_CAPSULE.as_ptr()) }
            as *const MemHandler;
    if fallback.is_null() {
        return Err(PyErr::fetch(py));
    }
    let allocator = Arc::new(Allocator {
        carver: Arc::clone(&allocator.get().carver),
        fallback,
        _fallback_capsule: fallback_capsule.unbind(),
    });
    let mut name = [0 as c_char; 127];
    for (slot, byte) in name.iter_mut().zip(b"zpage") {
        *slot = *byte as c_char;
    }
    let handler = Box::new(MemHandler {
        name,
        version: 1,
        allocator: MemAllocator {
            ctx: Arc::into_raw(Arc::clone(&allocator)) as *mut c_void,
            malloc: hook_malloc,
            calloc: hook_calloc,
            realloc: hook_realloc,
            free: hook_free,
        },
    });
    let handler = Box::into_raw(handler);
    // SAFETY: the capsule takes the box; `destroy_handler` frees it and the
    // allocator reference. On failure nothing took it: free both here.
    let capsule = unsafe {
        let raw = ffi::PyCapsule_New(
            handler as *mut c_void,
            HANDLER_CAPSULE.as_ptr(),
            Some(destroy_handler),
        );
        if raw.is_null() {
            let handler = Box::from_raw(handler);
            drop(Arc::from_raw(handler.allocator.ctx as *const Allocator));
            return Err(PyErr::fetch(py));
        }
        Bound::from_owned_ptr(py, raw)
    };
    Ok(capsule)
}
