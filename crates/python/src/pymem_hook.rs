//! Large `bytes`, `bytearray` and other Python buffers in compressed memory:
//! a hook on CPython's raw memory domain (`PyMem_RawMalloc` and family).
//!
//! CPython's object allocator serves requests of up to 512 bytes itself and
//! hands larger ones to the raw domain; so do `bytes`, `bytearray`, `str`,
//! lists' item arrays and most other variable-size objects. The hook wraps
//! the raw allocator current when it is installed (the first
//! `zpage.budget(..., python_objects=True)` block; it stays for the life of
//! the process, since blocks it carved may be freed at any time later). In a
//! thread inside such a block, requests of at least the block's `min_bytes`
//! are carved from the block's arenas (module `arena`, shared with the
//! NumPy hook); everything else goes to the wrapped allocator.
//!
//! A pointer is recognised as carved by address: frees outside every arena
//! ever mapped (two relaxed atomic loads) go straight to the wrapped
//! allocator; others are looked up among the blocks that still own carved
//! buffers (`BLOCKS`, which keeps each block's carver alive until its last
//! buffer is freed, however long after the block ended).
//!
//! The raw domain is called without the GIL and from any thread: nothing
//! here touches a Python object; shared state is behind mutexes, never held
//! while region memory is read or written.

use crate::arena::{maybe_in_arena, round_to_pages, ArenaCarver, ArrayAllocator};
use pyo3::prelude::*;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};

/// `PyMemAllocatorEx` (Include/cpython/pymem.h). Not in the limited API
/// (the package is built for abi3), so declared here; its layout is the
/// same in every CPython from 3.5, checked against the headers of 3.9 to
/// 3.13.
#[repr(C)]
#[derive(Clone, Copy)]
struct PyMemAllocatorEx {
    ctx: *mut c_void,
    malloc: Option<unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void>,
    calloc: Option<unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void>,
    realloc: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    free: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
}

/// `PYMEM_DOMAIN_RAW` of `PyMemAllocatorDomain`.
const PYMEM_DOMAIN_RAW: c_int = 0;

// Exported by every CPython 3 (not part of the limited API, hence declared
// here; same signatures in 3.9 to 3.13).
extern "C" {
    fn PyMem_GetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
    fn PyMem_SetAllocator(domain: c_int, allocator: *mut PyMemAllocatorEx);
}

/// The wrapped raw allocator.
struct Previous(PyMemAllocatorEx);

// SAFETY: the raw domain's functions and context may be used from any
// thread (CPython calls them without the GIL).
unsafe impl Send for Previous {}
// SAFETY: as above; it is never written after it is set.
unsafe impl Sync for Previous {}

static PREVIOUS: OnceLock<Previous> = OnceLock::new();
static INSTALL: Once = Once::new();

/// The smallest `min_bytes` of any block ever entered: smaller requests
/// never look further.
static MIN_BYTES_FLOOR: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Block numbers (0 is none).
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The block this thread is in (0: none). No destructor, so it can be
    /// read while the thread exits.
    static ACTIVE: Cell<u64> = const { Cell::new(0) };
}

/// A block's carver, kept while the block is entered or owns buffers.
struct Block {
    id: u64,
    carver: Arc<ArenaCarver>,
    entered: usize,
}

static BLOCKS: Mutex<Vec<Block>> = Mutex::new(Vec::new());

fn blocks() -> MutexGuard<'static, Vec<Block>> {
    BLOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Forgets the block `id` when it is neither entered nor owns a buffer;
/// the carver is dropped after the lock is released.
fn release_if_done(id: u64) {
    let mut list = blocks();
    let Some(at) = list
        .iter()
        .position(|b| b.id == id && b.entered == 0 && b.carver.state().live_buffers == 0)
    else {
        return;
    };
    let block = list.swap_remove(at);
    drop(list);
    drop(block);
}

fn previous() -> &'static PyMemAllocatorEx {
    match PREVIOUS.get() {
        Some(previous) => &previous.0,
        // The hook is installed only after PREVIOUS is set.
        None => std::process::abort(),
    }
}

fn previous_malloc(size: usize) -> *mut c_void {
    let p = previous();
    match p.malloc {
        // SAFETY: the wrapped allocator's own function and context.
        Some(malloc) => unsafe { malloc(p.ctx, size) },
        None => std::ptr::null_mut(),
    }
}

fn previous_calloc(nelem: usize, elsize: usize) -> *mut c_void {
    let p = previous();
    match p.calloc {
        // SAFETY: the wrapped allocator's own function and context.
        Some(calloc) => unsafe { calloc(p.ctx, nelem, elsize) },
        None => std::ptr::null_mut(),
    }
}

fn previous_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    let p = previous();
    match p.realloc {
        // SAFETY: `ptr` came from the wrapped allocator (or is null).
        Some(realloc) => unsafe { realloc(p.ctx, ptr, size) },
        None => std::ptr::null_mut(),
    }
}

fn previous_free(ptr: *mut c_void) {
    let p = previous();
    if let Some(free) = p.free {
        // SAFETY: `ptr` came from the wrapped allocator (or is null).
        unsafe { free(p.ctx, ptr) }
    }
}

/// The carver of this thread's block if it carves `size` bytes.
fn active_carver(size: usize) -> Option<(u64, Arc<ArenaCarver>)> {
    if size < MIN_BYTES_FLOOR.load(Ordering::Relaxed) {
        return None;
    }
    let id = ACTIVE.with(Cell::get);
    if id == 0 {
        return None;
    }
    let carver = blocks()
        .iter()
        .find(|b| b.id == id)
        .map(|b| Arc::clone(&b.carver))?;
    carver.carves(size).then_some((id, carver))
}

/// The block owning the buffer carved at `ptr`, and the buffer.
fn owner_of(ptr: usize) -> Option<(u64, Arc<ArenaCarver>, crate::arena::Carved)> {
    if !maybe_in_arena(ptr) {
        return None;
    }
    blocks().iter().find_map(|b| {
        b.carver
            .carved_for(ptr, true)
            .map(|carved| (b.id, Arc::clone(&b.carver), carved))
    })
}

/// Carves `size` bytes in this thread's block; `None` when not in a block,
/// below its threshold, or the budget could not give an arena (then the
/// wrapped allocator serves: a Python object never fails for zpage's sake).
fn carve(size: usize) -> Option<*mut c_void> {
    let (_, carver) = active_carver(size)?;
    carver.carve(size, true)
}

fn malloc(size: usize) -> *mut c_void {
    match carve(size) {
        Some(ptr) => ptr,
        None => previous_malloc(size),
    }
}

fn calloc(nelem: usize, elsize: usize) -> *mut c_void {
    if let Some(size) = nelem.checked_mul(elsize) {
        // Carved extents are always zero (fresh, or discarded on free).
        if let Some(ptr) = carve(size) {
            return ptr;
        }
    }
    previous_calloc(nelem, elsize)
}

fn free(ptr: *mut c_void) {
    let address = ptr as usize;
    let Some((id, carver, _)) = owner_of(address) else {
        return previous_free(ptr);
    };
    // Not found again only if it was freed twice at once; an arena pointer
    // must never reach the wrapped allocator.
    if let Some(carved) = carver.take_carved(address, true) {
        carver.give_back(address, carved);
        drop(carver);
        release_if_done(id);
    }
}

fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    if ptr.is_null() {
        return malloc(size);
    }
    if let Some((_, carver, carved)) = owner_of(ptr as usize) {
        if round_to_pages(size.max(1)) == Some(carved.len) {
            carver.resize_in_place(ptr as usize, size);
            return ptr;
        }
        let moved = malloc(size);
        if moved.is_null() {
            return moved; // The old block stays valid, as realloc promises.
        }
        // SAFETY: both blocks are live and distinct; the copy reads at most
        // what was asked of the old one and fits the new one. Evicted pages
        // of the old block fault back in (a user-mode read).
        unsafe {
            std::ptr::copy_nonoverlapping(
                ptr as *const u8,
                moved as *mut u8,
                carved.requested.min(size),
            )
        };
        free(ptr);
        return moved;
    }
    if let Some((_, carver)) = active_carver(size) {
        // A buffer of the wrapped allocator grown into a block (a
        // `bytearray` extended in it): its old size is unknown here, so the
        // wrapped allocator resizes it first and the whole new size moves.
        let resized = previous_realloc(ptr, size);
        if resized.is_null() {
            return resized;
        }
        let Some(moved) = carver.carve(size, true) else {
            return resized;
        };
        // SAFETY: `resized` holds `size` bytes (its tail past the old size
        // is uninitialised, copied as bytes and never interpreted), `moved`
        // is a fresh carved extent of at least `size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(resized as *const u8, moved as *mut u8, size) };
        previous_free(resized);
        return moved;
    }
    previous_realloc(ptr, size)
}

/// Runs `call`, turning a panic into `failed` (it must not unwind into C).
fn guarded<T>(failed: T, call: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or(failed)
}

unsafe extern "C" fn hook_malloc(_ctx: *mut c_void, size: usize) -> *mut c_void {
    if size < MIN_BYTES_FLOOR.load(Ordering::Relaxed) {
        return previous_malloc(size);
    }
    guarded(std::ptr::null_mut(), || malloc(size))
}

unsafe extern "C" fn hook_calloc(_ctx: *mut c_void, nelem: usize, elsize: usize) -> *mut c_void {
    if nelem.saturating_mul(elsize) < MIN_BYTES_FLOOR.load(Ordering::Relaxed) {
        return previous_calloc(nelem, elsize);
    }
    guarded(std::ptr::null_mut(), || calloc(nelem, elsize))
}

unsafe extern "C" fn hook_realloc(_ctx: *mut c_void, ptr: *mut c_void, size: usize) -> *mut c_void {
    if !maybe_in_arena(ptr as usize) && size < MIN_BYTES_FLOOR.load(Ordering::Relaxed) {
        return previous_realloc(ptr, size);
    }
    guarded(std::ptr::null_mut(), || realloc(ptr, size))
}

unsafe extern "C" fn hook_free(_ctx: *mut c_void, ptr: *mut c_void) {
    if !maybe_in_arena(ptr as usize) {
        return previous_free(ptr);
    }
    guarded((), || free(ptr))
}

/// Wraps the raw domain, once per process. Called with the GIL held.
fn install() {
    PREVIOUS.get_or_init(|| {
        let mut current = PyMemAllocatorEx {
            ctx: std::ptr::null_mut(),
            malloc: None,
            calloc: None,
            realloc: None,
            free: None,
        };
        // SAFETY: fills the struct with the raw domain's current allocator.
        unsafe { PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &mut current) };
        Previous(current)
    });
    INSTALL.call_once(|| {
        let mut hook = PyMemAllocatorEx {
            ctx: std::ptr::null_mut(),
            malloc: Some(hook_malloc),
            calloc: Some(hook_calloc),
            realloc: Some(hook_realloc),
            free: Some(hook_free),
        };
        // SAFETY: CPython copies the struct. The hook serves every block
        // the wrapped allocator made (it passes them back), and a thread
        // reading the domain while it is replaced gets either allocator:
        // neither uses the context (the hook's functions read PREVIOUS,
        // set above).
        unsafe { PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &mut hook) };
    });
}

/// Enters a block in this thread: raw allocations of at least its
/// `min_bytes` are carved from `allocator` until `exit_python_objects`.
/// Returns the block this thread was in, for `exit_python_objects`.
#[pyfunction]
pub(crate) fn enter_python_objects(allocator: &Bound<'_, ArrayAllocator>) -> u64 {
    install();
    let carver = &allocator.get().carver;
    let id = {
        let mut list = blocks();
        match list.iter_mut().find(|b| Arc::ptr_eq(&b.carver, carver)) {
            Some(block) => {
                block.entered += 1;
                block.id
            }
            None => {
                let id = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed);
                list.push(Block {
                    id,
                    carver: Arc::clone(carver),
                    entered: 1,
                });
                id
            }
        }
    };
    MIN_BYTES_FLOOR.fetch_min(carver.min_bytes, Ordering::Relaxed);
    ACTIVE.with(|active| active.replace(id))
}

/// Leaves the block of `allocator` in this thread, back to `previous`.
#[pyfunction]
pub(crate) fn exit_python_objects(allocator: &Bound<'_, ArrayAllocator>, previous: u64) {
    let carver = &allocator.get().carver;
    ACTIVE.with(|active| active.set(previous));
    let id = {
        let mut list = blocks();
        let Some(block) = list.iter_mut().find(|b| Arc::ptr_eq(&b.carver, carver)) else {
            return;
        };
        block.entered = block.entered.saturating_sub(1);
        block.id
    };
    release_if_done(id);
}
