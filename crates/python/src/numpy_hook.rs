//! NumPy arrays in compressed memory: a NEP 49 allocator (`PyDataMem_Handler`)
//! whose large allocations are carved from regions on one budget.
//!
//! # Design
//!
//! Allocations of at least `min_bytes` are carved, page-aligned, from arena
//! regions of `arena_bytes` (256 MiB by default, larger for a larger array)
//! drawn on the budget; smaller ones go to the handler that was current
//! when the hook was made (NumPy's default, normally). One region per array
//! was the alternative; it is not used because a process may hold at most
//! `zpage_region::MAX_REGIONS` (1024) live regions and every region costs a
//! `mmap`, a uffd registration and a table slot, while pandas and NumPy make
//! thousands of temporary arrays. Arenas cost one region per 256 MiB.
//!
//! A free discards the extent (`MADV_DONTNEED`: the region drops its
//! compressed copies, the pages read as zeros again) before it is reused, so
//! frees return memory, and `calloc` (what `numpy.zeros` uses) is free: a
//! carved extent is always zero. An arena left empty is unmapped (the
//! newest one is kept for the next array).
//!
//! NumPy keeps a reference to the handler's capsule in every array it
//! allocates, and the capsule owns the allocator: arrays outliving the
//! `with zpage.budget(...)` block stay valid, and the budget is released
//! with the last of them.
//!
//! In a forked child, new arrays come from the fallback handler: the
//! budget's machinery stays with the parent (every page was restored before
//! the fork, so inherited arrays are plain memory in the child).
//!
//! The allocator functions may be called without the GIL (NumPy allows it):
//! they touch no Python object, only the allocator's mutex.

use crate::errors::{error, ErrorKind};
use crate::extents::Extents;
use crate::region::Budget;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_uint, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use zpage_region::{Region, RegionError, PAGE_SIZE};

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

/// Default size of an arena region.
pub(crate) const DEFAULT_ARENA_BYTES: usize = 256 << 20;

#[derive(Debug)]
struct Arena {
    region: Region,
    extents: Extents,
}

/// One carved allocation.
#[derive(Clone, Copy, Debug)]
struct Carved {
    /// Base address of its arena.
    arena: usize,
    /// Bytes taken (whole pages).
    len: usize,
    /// Bytes asked for (what `realloc` copies).
    requested: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Arenas by base address.
    arenas: BTreeMap<usize, Arena>,
    /// Carved allocations by address.
    live: HashMap<usize, Carved>,
    carved_count: u64,
    fallback_count: u64,
    failed_count: u64,
    last_error: Option<String>,
}

/// The allocator behind one `zpage.budget(...)` block.
#[derive(Debug)]
pub(crate) struct Allocator {
    budget: zpage_region::Budget,
    min_bytes: usize,
    arena_bytes: usize,
    /// The process that made the budget: a forked child allocates with the
    /// fallback (the budget's machinery stays with the parent; the arenas it
    /// inherited are plain memory there).
    owner_pid: u32,
    state: Mutex<State>,
    /// The handler small allocations go to, and its capsule (kept alive).
    fallback: *const MemHandler,
    _fallback_capsule: Py<PyAny>,
}

// SAFETY: `fallback` points into a capsule `_fallback_capsule` keeps alive;
// NumPy's handlers may be called from any thread. Everything else is Send + Sync.
unsafe impl Send for Allocator {}
// SAFETY: as above; shared state is behind the mutex.
unsafe impl Sync for Allocator {}

fn round_to_pages(bytes: usize) -> Option<usize> {
    bytes.checked_next_multiple_of(PAGE_SIZE)
}

impl Allocator {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fallback(&self) -> &MemAllocator {
        // SAFETY: the capsule holding the handler is kept alive by `self`.
        unsafe { &(*self.fallback).allocator }
    }

    /// Carves `requested` bytes (zero-filled) from an arena, making one if
    /// none has room. `None` when the budget cannot give another region.
    fn carve(&self, requested: usize) -> Option<*mut c_void> {
        let len = round_to_pages(requested.max(1))?;
        let mut state = self.state();
        for (&base, arena) in state.arenas.iter_mut() {
            if let Some(offset) = arena.extents.alloc(len) {
                return Some(record(&mut state, base, offset, len, requested));
            }
        }
        drop(state);
        // A new arena: made without the lock (it maps and registers memory).
        let arena_len = len.max(self.arena_bytes);
        crate::syscalls::wrap_new_objects();
        let region = match Region::with_budget(&self.budget, arena_len) {
            Ok(region) => region,
            Err(e) => {
                let mut state = self.state();
                state.failed_count += 1;
                state.last_error = Some(e.to_string());
                return None;
            }
        };
        let base = region.as_ptr() as usize;
        let mut extents = Extents::new(region.len());
        let offset = extents.alloc(len)?;
        let mut state = self.state();
        state.arenas.insert(base, Arena { region, extents });
        Some(record(&mut state, base, offset, len, requested))
    }

    /// Whether `ptr` was carved here; forgets it and returns it if so.
    fn take_carved(&self, ptr: usize) -> Option<Carved> {
        self.state().live.remove(&ptr)
    }

    /// Returns a carved extent: discards its pages, then frees the extent.
    fn give_back(&self, ptr: usize, carved: Carved) {
        // Discard before the extent can be handed out again, so a new owner
        // never has its writes zapped. The region sees the discard (a uffd
        // remove event) and drops any compressed copies of these pages.
        // SAFETY: [ptr, ptr + len) is a carved extent of a live arena that
        // nothing references any more (NumPy freed it); discarding it is
        // what the allocator wants.
        let _ = unsafe { libc::madvise(ptr as *mut c_void, carved.len, libc::MADV_DONTNEED) };
        let mut state = self.state();
        let emptied = match state.arenas.get_mut(&carved.arena) {
            Some(arena) => {
                arena.extents.free(ptr - carved.arena, carved.len);
                arena.extents.used() == 0
            }
            None => false,
        };
        let newest = state.arenas.keys().next_back().copied();
        if emptied && state.arenas.len() > 1 && newest != Some(carved.arena) {
            let arena = state.arenas.remove(&carved.arena);
            drop(state);
            drop(arena);
        }
    }

    fn carves(&self, size: usize) -> bool {
        size >= self.min_bytes && std::process::id() == self.owner_pid
    }

    fn malloc(&self, size: usize) -> *mut c_void {
        if self.carves(size) {
            return self.carve(size).unwrap_or(std::ptr::null_mut());
        }
        self.state().fallback_count += 1;
        let fallback = self.fallback();
        // SAFETY: the fallback handler's own function with its own context.
        unsafe { (fallback.malloc)(fallback.ctx, size) }
    }

    fn calloc(&self, nelem: usize, elsize: usize) -> *mut c_void {
        let Some(size) = nelem.checked_mul(elsize) else {
            return std::ptr::null_mut();
        };
        if self.carves(size) {
            // Carved extents are always zero (fresh, or discarded on free).
            return self.carve(size).unwrap_or(std::ptr::null_mut());
        }
        self.state().fallback_count += 1;
        let fallback = self.fallback();
        // SAFETY: the fallback handler's own function with its own context.
        unsafe { (fallback.calloc)(fallback.ctx, nelem, elsize) }
    }

    fn realloc(&self, ptr: *mut c_void, new_size: usize) -> *mut c_void {
        if ptr.is_null() {
            return self.malloc(new_size);
        }
        let Some(carved) = self.state().live.get(&(ptr as usize)).copied() else {
            // Not ours: the fallback keeps it (its old size is unknown here).
            let fallback = self.fallback();
            // SAFETY: `ptr` came from the fallback handler.
            return unsafe { (fallback.realloc)(fallback.ctx, ptr, new_size) };
        };
        if round_to_pages(new_size.max(1)) == Some(carved.len) {
            if let Some(entry) = self.state().live.get_mut(&(ptr as usize)) {
                entry.requested = new_size;
            }
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
        if let Some(carved) = self.take_carved(ptr as usize) {
            self.give_back(ptr as usize, carved);
        }
        moved
    }

    fn free(&self, ptr: *mut c_void, size: usize) {
        if ptr.is_null() {
            return;
        }
        match self.take_carved(ptr as usize) {
            Some(carved) => self.give_back(ptr as usize, carved),
            None => {
                let fallback = self.fallback();
                // SAFETY: not carved here, so the fallback handler made it.
                unsafe { (fallback.free)(fallback.ctx, ptr, size) }
            }
        }
    }

    /// The arena region holding `[address, address + len)`, with the offset.
    fn with_arena<T>(
        &self,
        address: usize,
        len: usize,
        call: impl FnOnce(&Region, usize) -> Result<T, RegionError>,
    ) -> Option<Result<T, RegionError>> {
        let state = self.state();
        let (&base, arena) = state.arenas.range(..=address).next_back()?;
        let end = address.checked_add(len)?;
        if end > base + arena.region.len() {
            return None;
        }
        Some(call(&arena.region, address - base))
    }
}

fn record(
    state: &mut State,
    arena: usize,
    offset: usize,
    len: usize,
    requested: usize,
) -> *mut c_void {
    let address = arena + offset;
    state.live.insert(
        address,
        Carved {
            arena,
            len,
            requested,
        },
    );
    state.carved_count += 1;
    address as *mut c_void
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

/// The allocator of one `zpage.budget(...)` block, for its figures and pins.
#[pyclass(frozen, module = "zpage._zpage")]
#[derive(Debug)]
pub struct ArrayAllocator {
    allocator: Arc<Allocator>,
}

#[pymethods]
impl ArrayAllocator {
    /// Figures: arenas, carved bytes and counts, small allocations passed on.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.allocator.state();
        let dict = PyDict::new(py);
        dict.set_item("arena_count", state.arenas.len())?;
        dict.set_item(
            "arena_bytes",
            state.arenas.values().map(|a| a.region.len()).sum::<usize>(),
        )?;
        dict.set_item(
            "carved_bytes",
            state
                .arenas
                .values()
                .map(|a| a.extents.used())
                .sum::<usize>(),
        )?;
        dict.set_item(
            "free_extent_count",
            state
                .arenas
                .values()
                .map(|a| a.extents.free_extents())
                .sum::<usize>(),
        )?;
        dict.set_item("live_arrays", state.live.len())?;
        dict.set_item("carved_count", state.carved_count)?;
        dict.set_item("fallback_count", state.fallback_count)?;
        dict.set_item("failed_count", state.failed_count)?;
        dict.set_item("last_error", state.last_error.clone())?;
        dict.set_item("budget_bytes", self.allocator.budget.budget_bytes())?;
        dict.set_item("resident_bytes", self.allocator.budget.resident_bytes())?;
        Ok(dict)
    }

    /// Whether `[address, address + length)` lies in this allocator's arenas.
    fn owns(&self, address: usize, length: usize) -> bool {
        self.allocator
            .with_arena(address, length, |_, _| Ok(()))
            .is_some()
    }

    /// Compresses the pages of the range now.
    fn advise_cold(&self, py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
        self.region_call(py, address, length, |r, offset| {
            r.advise_cold(offset, length)
        })
    }
}

impl ArrayAllocator {
    fn region_call(
        &self,
        py: Python<'_>,
        address: usize,
        length: usize,
        call: impl FnOnce(&Region, usize) -> Result<(), RegionError> + Send,
    ) -> PyResult<()> {
        py.detach(|| match self.allocator.with_arena(address, length, call) {
            Some(result) => result.map_err(crate::errors::region_error),
            None => Err(error(
                ErrorKind::Config,
                format!("{length} bytes at {address:#x} are not memory of this zpage budget (was the array made inside its `with zpage.budget(...)` block?)"),
            )),
        })
    }
}

/// Every allocator alive, so `zpage.resident(array)` finds the one that
/// carved an array from its address alone.
static ALLOCATORS: Mutex<Vec<std::sync::Weak<Allocator>>> = Mutex::new(Vec::new());

/// Runs `call` on the arena region holding `[address, address + length)`,
/// whichever live allocator carved it, with the GIL released.
fn on_array_memory(
    py: Python<'_>,
    address: usize,
    length: usize,
    call: impl Fn(&Region, usize) -> Result<(), RegionError> + Send + Sync,
) -> PyResult<()> {
    let live: Vec<Arc<Allocator>> = {
        let mut list = ALLOCATORS.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|weak| weak.strong_count() > 0);
        list.iter().filter_map(std::sync::Weak::upgrade).collect()
    };
    py.detach(|| {
        for allocator in &live {
            if let Some(result) = allocator.with_arena(address, length, &call) {
                return result.map_err(crate::errors::region_error);
            }
        }
        Err(error(
            ErrorKind::Config,
            format!("{length} bytes at {address:#x} are not in memory of a zpage.budget() block (for an array viewing a zpage.Region, use region.pin()/unpin())"),
        ))
    })
}

/// Pins the pages under `[address, address + length)`, memory of a budget block.
#[pyfunction]
pub(crate) fn pin_memory(py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
    on_array_memory(py, address, length, |r, offset| r.pin(offset, length))
}

/// Undoes one `pin_memory`.
#[pyfunction]
pub(crate) fn unpin_memory(py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
    on_array_memory(py, address, length, |r, offset| r.unpin(offset, length))
}

/// Makes the NEP 49 handler of a budget: a "mem_handler" capsule, and the
/// allocator object for its figures. `fallback` is the handler small
/// allocations go to (the current one, from `PyDataMem_GetHandler`).
#[pyfunction]
#[pyo3(signature = (api, budget, min_bytes, arena_bytes=DEFAULT_ARENA_BYTES))]
pub(crate) fn make_numpy_handler<'py>(
    api: &Bound<'py, PyAny>,
    budget: &Bound<'py, Budget>,
    min_bytes: usize,
    arena_bytes: usize,
) -> PyResult<(Bound<'py, PyAny>, ArrayAllocator)> {
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
    if arena_bytes < PAGE_SIZE || min_bytes == 0 {
        return Err(error(
            ErrorKind::Config,
            format!("min_bytes ({min_bytes}) must be at least 1 and arena_bytes ({arena_bytes}) at least one page"),
        ));
    }
    let allocator = Arc::new(Allocator {
        budget: budget.get().inner.clone(),
        min_bytes,
        owner_pid: std::process::id(),
        arena_bytes: round_to_pages(arena_bytes).unwrap_or(DEFAULT_ARENA_BYTES),
        state: Mutex::new(State::default()),
        fallback,
        _fallback_capsule: fallback_capsule.unbind(),
    });
    ALLOCATORS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(&allocator));
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
    Ok((capsule, ArrayAllocator { allocator }))
}
