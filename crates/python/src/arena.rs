//! The arena carver behind one `zpage.budget(...)` block: page-aligned
//! extents carved from arena regions drawn on the block's budget. Both
//! allocator hooks use it: NumPy's (module `numpy_hook`) and Python's raw
//! memory domain (module `pymem_hook`), so one block's arrays and buffers
//! share its arenas.
//!
//! # Design
//!
//! Allocations are carved, page-aligned, from arena regions of
//! `arena_bytes` (256 MiB by default, larger for a larger allocation) drawn
//! on the budget. One region per allocation was the alternative; it is not
//! used because a process may hold at most `zpage_region::MAX_REGIONS`
//! (1024) live regions and every region costs a `mmap`, a uffd registration
//! and a table slot, while pandas and NumPy make thousands of temporary
//! arrays. Arenas cost one region per 256 MiB.
//!
//! A free discards the extent (`MADV_DONTNEED`: the region drops its
//! compressed copies, the pages read as zeros again) before it is reused, so
//! frees return memory, and a carved extent is always zero (`calloc` is
//! free). An arena left empty is unmapped (the newest one is kept for the
//! next allocation).
//!
//! In a forked child nothing is carved: the budget's reclaimer stays with
//! the parent. The child takes the inherited arenas over (it restores their
//! evicted pages itself, see `zpage-region`'s fork module); what it
//! allocates anew is plain memory.
//!
//! The carver is called without the GIL, from any thread: it touches no
//! Python object, only its mutex, which is never held while region memory
//! is touched or a region is made or dropped.

use crate::errors::{error, ErrorKind};
use crate::extents::Extents;
use crate::region::Budget;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use zpage_region::{Region, RegionError, PAGE_SIZE};

/// Default size of an arena region.
pub(crate) const DEFAULT_ARENA_BYTES: usize = 256 << 20;

#[derive(Debug)]
pub(crate) struct Arena {
    pub region: Region,
    pub extents: Extents,
}

/// One carved allocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Carved {
    /// Base address of its arena.
    arena: usize,
    /// Bytes taken (whole pages).
    pub len: usize,
    /// Bytes asked for (what a move copies).
    pub requested: usize,
    /// Carved for Python's raw memory domain (else for NumPy).
    buffer: bool,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    /// Arenas by base address.
    pub arenas: BTreeMap<usize, Arena>,
    /// Carved allocations by address.
    pub live: HashMap<usize, Carved>,
    /// Of `live`, those carved for Python's raw memory domain.
    pub live_buffers: usize,
    pub carved_count: u64,
    pub fallback_count: u64,
    pub failed_count: u64,
    pub last_error: Option<String>,
}

/// Lowest base and highest end of every arena any carver ever mapped: a
/// free outside `[ARENAS_LOW, ARENAS_HIGH)` is not carved, found without a
/// lock (the raw hook sees every large free of the process).
static ARENAS_LOW: AtomicUsize = AtomicUsize::new(usize::MAX);
static ARENAS_HIGH: AtomicUsize = AtomicUsize::new(0);

/// Whether `address` may lie in an arena (false: it certainly does not).
pub(crate) fn maybe_in_arena(address: usize) -> bool {
    address >= ARENAS_LOW.load(Ordering::Relaxed) && address < ARENAS_HIGH.load(Ordering::Relaxed)
}

thread_local! {
    /// Set while `zpage.compress` copies an array in this thread: its copy
    /// is carved whatever its size (the caller asked for compressed memory
    /// by name, so `min_bytes`, which keeps a block's small temporaries out
    /// of regions, does not apply). Thread-local because NumPy allocates on
    /// the calling thread and other threads' allocations must not change.
    static CARVE_EVERY_SIZE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Sets whether this thread's allocations in a budget block are carved
/// whatever their size (see `zpage.compress`); returns the previous setting.
#[pyfunction]
pub(crate) fn carve_every_size(on: bool) -> bool {
    CARVE_EVERY_SIZE.replace(on)
}

/// A budget's compression ratio at or below which it cannot help: pages
/// take (almost) as much memory compressed as resident.
const NO_HELP_RATIO: f64 = 1.1;

/// Every carver alive, so an address is traced to the one that carved it
/// (`zpage.resident`, `zpage._zpage.owns`).
static CARVERS: Mutex<Vec<Weak<ArenaCarver>>> = Mutex::new(Vec::new());

/// The live carvers.
pub(crate) fn live_carvers() -> Vec<Arc<ArenaCarver>> {
    let mut list = CARVERS.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|weak| weak.strong_count() > 0);
    list.iter().filter_map(Weak::upgrade).collect()
}

/// The extents of one `zpage.budget(...)` block.
#[derive(Debug)]
pub(crate) struct ArenaCarver {
    pub budget: zpage_region::Budget,
    pub min_bytes: usize,
    arena_bytes: usize,
    /// The process that made the budget: a forked child does not carve.
    owner_pid: u32,
    state: Mutex<State>,
}

pub(crate) fn round_to_pages(bytes: usize) -> Option<usize> {
    bytes.checked_next_multiple_of(PAGE_SIZE)
}

impl ArenaCarver {
    /// A carver on `budget`, registered for address look-ups.
    pub fn new(
        budget: zpage_region::Budget,
        min_bytes: usize,
        arena_bytes: usize,
    ) -> Arc<ArenaCarver> {
        let carver = Arc::new(ArenaCarver {
            budget,
            min_bytes,
            arena_bytes: round_to_pages(arena_bytes).unwrap_or(DEFAULT_ARENA_BYTES),
            owner_pid: std::process::id(),
            state: Mutex::new(State::default()),
        });
        CARVERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&carver));
        carver
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an allocation of `size` bytes is carved here.
    pub fn carves(&self, size: usize) -> bool {
        (size >= self.min_bytes || CARVE_EVERY_SIZE.get()) && std::process::id() == self.owner_pid
    }

    /// Carves `requested` bytes (zero-filled) from an arena, making one if
    /// none has room. `None` when the budget cannot give another region.
    pub fn carve(&self, requested: usize, buffer: bool) -> Option<*mut c_void> {
        let len = round_to_pages(requested.max(1))?;
        let mut state = self.state();
        for (&base, arena) in state.arenas.iter_mut() {
            if let Some(offset) = arena.extents.alloc(len) {
                return Some(record(&mut state, base, offset, len, requested, buffer));
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
        ARENAS_LOW.fetch_min(base, Ordering::Relaxed);
        ARENAS_HIGH.fetch_max(base + region.len(), Ordering::Relaxed);
        let mut extents = Extents::new(region.len());
        let offset = extents.alloc(len)?;
        let mut state = self.state();
        state.arenas.insert(base, Arena { region, extents });
        Some(record(&mut state, base, offset, len, requested, buffer))
    }

    /// The carved allocation at `ptr`, if it is one.
    pub fn carved(&self, ptr: usize) -> Option<Carved> {
        self.state().live.get(&ptr).copied()
    }

    /// Records that the carved allocation at `ptr` now holds `requested` bytes.
    pub fn resize_in_place(&self, ptr: usize, requested: usize) {
        if let Some(entry) = self.state().live.get_mut(&ptr) {
            entry.requested = requested;
        }
    }

    /// The carved allocation at `ptr` if it was carved for that hook
    /// (`buffer`: the raw domain's, else NumPy's).
    pub fn carved_for(&self, ptr: usize, buffer: bool) -> Option<Carved> {
        self.carved(ptr).filter(|c| c.buffer == buffer)
    }

    /// Whether `ptr` was carved here for that hook; forgets it and returns
    /// it if so.
    pub fn take_carved(&self, ptr: usize, buffer: bool) -> Option<Carved> {
        let mut state = self.state();
        if state.live.get(&ptr)?.buffer != buffer {
            return None;
        }
        let carved = state.live.remove(&ptr)?;
        if buffer {
            state.live_buffers -= 1;
        }
        Some(carved)
    }

    /// Returns a carved extent (`take_carved` forgot it): discards its
    /// pages, then frees the extent.
    pub fn give_back(&self, ptr: usize, carved: Carved) {
        // Discard before the extent can be handed out again, so a new owner
        // never has its writes zapped. The region sees the discard (a uffd
        // remove event) and drops any compressed copies of these pages.
        // SAFETY: [ptr, ptr + len) is a carved extent of a live arena that
        // nothing references any more (its owner freed it); discarding it
        // is what the allocator wants.
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

    /// The arena region holding `[address, address + len)`, with the offset.
    pub fn with_arena<T>(
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
    buffer: bool,
) -> *mut c_void {
    let address = arena + offset;
    state.live.insert(
        address,
        Carved {
            arena,
            len,
            requested,
            buffer,
        },
    );
    state.carved_count += 1;
    if buffer {
        state.live_buffers += 1;
    }
    address as *mut c_void
}

/// The allocator of one `zpage.budget(...)` block, for its figures and pins.
#[pyclass(frozen, module = "zpage._zpage")]
#[derive(Debug)]
pub struct ArrayAllocator {
    pub(crate) carver: Arc<ArenaCarver>,
}

#[pymethods]
impl ArrayAllocator {
    /// The carver of a block drawing on `budget`.
    #[new]
    #[pyo3(signature = (budget, min_bytes, arena_bytes=DEFAULT_ARENA_BYTES))]
    fn new(budget: &Bound<'_, Budget>, min_bytes: usize, arena_bytes: usize) -> PyResult<Self> {
        if arena_bytes < PAGE_SIZE || min_bytes == 0 {
            return Err(error(
                ErrorKind::Config,
                format!("min_bytes ({min_bytes}) must be at least 1 and arena_bytes ({arena_bytes}) at least one page"),
            ));
        }
        Ok(ArrayAllocator {
            carver: ArenaCarver::new(budget.get().inner.clone(), min_bytes, arena_bytes),
        })
    }

    /// Figures: arenas, carved bytes and counts, small allocations passed on.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.carver.state();
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
        dict.set_item("live_arrays", state.live.len() - state.live_buffers)?;
        dict.set_item("live_buffers", state.live_buffers)?;
        dict.set_item("carved_count", state.carved_count)?;
        dict.set_item("fallback_count", state.fallback_count)?;
        dict.set_item("failed_count", state.failed_count)?;
        dict.set_item("last_error", state.last_error.clone())?;
        dict.set_item("budget_bytes", self.carver.budget.budget_bytes())?;
        dict.set_item("resident_bytes", self.carver.budget.resident_bytes())?;
        drop(state);
        let contents = self.carver.budget.store_stats().contents;
        compression_figures(&dict, &contents)?;
        Ok(dict)
    }

    /// Whether `[address, address + length)` lies in this allocator's arenas.
    fn owns(&self, address: usize, length: usize) -> bool {
        self.carver
            .with_arena(address, length, |_, _| Ok(()))
            .is_some()
    }

    /// Compresses the pages of the range now.
    fn advise_cold(&self, py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
        py.detach(|| {
            match self
                .carver
                .with_arena(address, length, |r, offset| r.advise_cold(offset, length))
            {
                Some(result) => result.map_err(crate::errors::region_error),
                None => Err(error(
                    ErrorKind::Config,
                    format!("{length} bytes at {address:#x} are not memory of this zpage budget (was the object made inside its `with zpage.budget(...)` block?)"),
                )),
            }
        })
    }
}

/// The budget's compression, as blosc2 reports a ratio per array:
/// `compressed_pages` (in memory), `uncompressed_bytes` (their size),
/// `compressed_bytes` (their blobs), `pool_bytes` (the memory the pool
/// takes for them), `ratio` (`uncompressed_bytes / pool_bytes`, `None`
/// before anything is compressed), `raw_pages` and `raw_bytes` (pages that
/// did not compress and are held at full size), `same_filled_pages`,
/// `written_back_pages`, `helps` (false when the ratio is at most 1.1) and
/// `summary`, one plain sentence saying so.
fn compression_figures(dict: &Bound<'_, PyDict>, c: &zpage_store::Contents) -> PyResult<()> {
    let in_memory = c.same_filled_pages + c.compressed_pages + c.raw_pages;
    let raw_bytes = c.raw_pages * PAGE_SIZE as u64;
    let ratio = (c.pool_memory_used_bytes > 0)
        .then(|| c.uncompressed_bytes as f64 / c.pool_memory_used_bytes as f64);
    dict.set_item("compressed_pages", in_memory)?;
    dict.set_item("uncompressed_bytes", c.uncompressed_bytes)?;
    dict.set_item("compressed_bytes", c.compressed_bytes)?;
    dict.set_item("pool_bytes", c.pool_memory_used_bytes)?;
    dict.set_item("ratio", ratio)?;
    dict.set_item("raw_pages", c.raw_pages)?;
    dict.set_item("raw_bytes", raw_bytes)?;
    dict.set_item("same_filled_pages", c.same_filled_pages)?;
    dict.set_item("written_back_pages", c.written_back_pages)?;
    let helps = ratio.is_none_or(|r| r > NO_HELP_RATIO);
    dict.set_item("helps", helps)?;
    let raw_share = |pages: u64| 100.0 * pages as f64 / in_memory.max(1) as f64;
    let summary = match ratio {
        None if in_memory == 0 => "nothing compressed yet".to_string(),
        None => format!("{in_memory} pages held, all same-filled (no pool memory)"),
        Some(r) if !helps => format!(
            "this budget cannot help: its {in_memory} compressed pages take {:.2} bytes of memory for each byte they hold ({r:.2}:1); {} pages ({:.0}%) did not compress and are held raw at full size. Such data (random-looking float64, already-compressed bytes) saves nothing compressed: keep it out of the budget, or make it compressible (a smaller dtype, rounding)",
            1.0 / r,
            c.raw_pages,
            raw_share(c.raw_pages)
        ),
        Some(r) => format!(
            "{in_memory} pages compressed {r:.2}:1 ({} bytes of memory for {} bytes); {} pages ({:.0}%) held raw",
            c.pool_memory_used_bytes,
            c.uncompressed_bytes,
            c.raw_pages,
            raw_share(c.raw_pages)
        ),
    };
    dict.set_item("summary", summary)
}

/// Runs `call` on the arena region holding `[address, address + length)`,
/// whichever live carver made it, with the GIL released.
fn on_block_memory(
    py: Python<'_>,
    address: usize,
    length: usize,
    call: impl Fn(&Region, usize) -> Result<(), RegionError> + Send + Sync,
) -> PyResult<()> {
    let live = live_carvers();
    py.detach(|| {
        for carver in &live {
            if let Some(result) = carver.with_arena(address, length, &call) {
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
    on_block_memory(py, address, length, |r, offset| r.pin(offset, length))
}

/// Undoes one `pin_memory`.
#[pyfunction]
pub(crate) fn unpin_memory(py: Python<'_>, address: usize, length: usize) -> PyResult<()> {
    on_block_memory(py, address, length, |r, offset| r.unpin(offset, length))
}

/// Whether `[address, address + length)` is memory of any live budget block.
#[pyfunction]
pub(crate) fn owns(address: usize, length: usize) -> bool {
    live_carvers()
        .iter()
        .any(|c| c.with_arena(address, length, |_, _| Ok(())).is_some())
}
