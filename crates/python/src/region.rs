//! `zpage.Region` and `zpage.Budget`.
//!
//! A region exports its memory through the buffer protocol (PEP 3118), so
//! `memoryview(region)` and `numpy.frombuffer(region, dtype)` are zero-copy,
//! writable views. PyO3 offers `__getbuffer__` only when built for the
//! limited API of Python >= 3.11, and this package is one abi3 wheel for
//! Python >= 3.9; since 3.9 `PyType_FromSpec` accepts the buffer slots (the
//! `Py_buffer` layout is the same in every version), so the exported type is
//! made at import: a subclass of the PyO3 class [`RegionBase`] with exactly
//! the two buffer slots (module `buffer`).
//!
//! Each view holds a reference to the region object, so the memory outlives
//! every view. `close()` while views exist raises `BusyError` naming them;
//! leaving a `with` block while views exist closes the region when the last
//! one is released.

use crate::config::{budget_config, budget_options, budget_or_auto, fault_mode_name, size_arg};
use crate::errors::{error, region_error, ErrorKind};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard};
use zpage_region::RegionStats;

/// A resident budget shared by several regions.
///
/// Budget(size, codec="lz4", **options)
///
/// Every region made on one budget (``Region(size, budget=b)``) shares its
/// resident limit, its compressed pool and its reclaimer: pages beyond
/// ``size`` bytes, across all of them, are compressed. ``size`` is a number of
/// bytes, a string such as ``"512M"`` or ``"1G"``, or a share of the
/// machine's memory such as ``"25%"`` (of ``MemTotal``, as ``zpage run
/// --budget`` takes it).
///
/// ``options`` are the budget options of ``zpage run`` (see ``zpage run
/// --help``), named with underscores: ``pool``, ``fault_mode``, ``aging``,
/// ``dedup``, ``keep_clean_copies``, ``cold_codec``, ``cold_after_ms``,
/// ``cold_by_age_only``, and the tier below RAM: ``max_pool_bytes`` (a size)
/// with ``backing`` (a new file, a block device or a Redis URL) and the
/// ``backing_*`` options. Values are strings, ints (sizes in bytes), bools
/// or paths; ``None`` keeps the default.
#[pyclass(frozen, module = "zpage._zpage")]
#[derive(Debug)]
pub struct Budget {
    pub(crate) inner: zpage_region::Budget,
}

#[pymethods]
impl Budget {
    #[new]
    #[pyo3(signature = (size, codec=None, **options))]
    fn new(
        py: Python<'_>,
        size: &Bound<'_, PyAny>,
        codec: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Budget> {
        crate::syscalls::wrap_new_objects();
        let mut options = budget_options(codec, options)?;
        let budget_bytes = budget_or_auto("budget size", size, &mut options)?;
        let config = budget_config(&options, budget_bytes)?;
        let inner = py
            .detach(|| zpage_region::Budget::new(config))
            .map_err(region_error)?;
        Ok(Budget { inner })
    }

    /// The budget in bytes.
    #[getter]
    fn budget_bytes(&self) -> usize {
        self.inner.budget_bytes()
    }

    /// Bytes every region of the budget holds uncompressed now.
    #[getter]
    fn resident_bytes(&self) -> usize {
        self.inner.resident_bytes()
    }

    /// The budget's compressed store counters (zram / zswap names) as a dict.
    fn store_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        crate::json::to_python(py, &self.inner.store_stats())
    }

    fn __repr__(&self) -> String {
        format!(
            "zpage.Budget({} bytes, {} resident)",
            self.inner.budget_bytes(),
            self.inner.resident_bytes()
        )
    }
}

/// The machinery of `zpage.Region` (use `zpage.Region`, which adds the
/// buffer protocol).
#[pyclass(subclass, frozen, module = "zpage._zpage")]
#[derive(Debug)]
pub struct RegionBase {
    /// `None` once closed. Long calls hold the read lock with the GIL
    /// released; `close` takes the write lock.
    region: RwLock<Option<zpage_region::Region>>,
    base: usize,
    len: usize,
    /// Live buffer exports (memoryviews, arrays made by `numpy.frombuffer`).
    exports: AtomicUsize,
    /// Set by leaving a `with` block while views exist: the last release closes.
    close_on_release: AtomicBool,
}

impl RegionBase {
    fn open(&self) -> PyResult<RwLockReadGuard<'_, Option<zpage_region::Region>>> {
        let guard = self.region.read().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(closed_error());
        }
        Ok(guard)
    }

    /// Runs `call` on the open region with the GIL released (page work can
    /// wait on the reclaimer, which never needs the GIL).
    fn with_region<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&zpage_region::Region) -> Result<T, zpage_region::RegionError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let guard = self.open()?;
            let region = guard.as_ref().ok_or_else(closed_error)?;
            call(region).map_err(region_error)
        })
    }

    /// The byte range `[offset, offset + length)`, `length` defaulting to the rest.
    fn range(&self, offset: usize, length: Option<usize>) -> PyResult<(usize, usize)> {
        let length = length.unwrap_or_else(|| self.len.saturating_sub(offset));
        if offset.checked_add(length).is_none_or(|end| end > self.len) {
            return Err(error(
                ErrorKind::Config,
                format!(
                    "range {offset}+{length} is outside the region of {} bytes",
                    self.len
                ),
            ));
        }
        Ok((offset, length))
    }

    /// Base address and length, for a buffer export; counts the export.
    pub(crate) fn export(&self) -> PyResult<(usize, usize)> {
        let _open = self.open()?;
        if self.close_on_release.load(Ordering::Acquire) {
            return Err(closed_error());
        }
        self.exports.fetch_add(1, Ordering::AcqRel);
        Ok((self.base, self.len))
    }

    /// One export released; closes the region if it was left while exported.
    pub(crate) fn release(&self) {
        let before = self.exports.fetch_sub(1, Ordering::AcqRel);
        if before == 1 && self.close_on_release.load(Ordering::Acquire) {
            self.region
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .take();
        }
    }
}

fn closed_error() -> PyErr {
    error(
        ErrorKind::Closed,
        "the region is closed: its memory was released; make a new region",
    )
}

#[pymethods]
impl RegionBase {
    #[new]
    #[pyo3(signature = (size, budget=None, codec=None, **options))]
    fn new(
        py: Python<'_>,
        size: &Bound<'_, PyAny>,
        budget: Option<&Bound<'_, PyAny>>,
        codec: Option<&Bound<'_, PyAny>>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<RegionBase> {
        crate::syscalls::wrap_new_objects();
        let size_bytes = size_arg("region size", size)?;
        let mut options = budget_options(codec, options)?;
        let region = match budget {
            Some(shared) if shared.is_instance_of::<Budget>() => {
                if !options.is_empty() {
                    let given: Vec<&str> = options.iter().map(|(o, _)| o.name).collect();
                    return Err(error(
                        ErrorKind::Config,
                        format!(
                            "{} belong to the Budget: give them to zpage.Budget(...), not to a region made on it",
                            given.join(", ")
                        ),
                    ));
                }
                let shared = shared.cast::<Budget>()?.get();
                py.detach(|| zpage_region::Region::with_budget(&shared.inner, size_bytes))
            }
            _ => {
                let budget_bytes = match budget {
                    Some(bytes) => budget_or_auto("budget", bytes, &mut options)?,
                    None => {
                        return Err(error(
                            ErrorKind::Config,
                            "give the region a budget: Region(size, budget) with budget in bytes (\"64M\"), or a zpage.Budget shared with other regions",
                        ))
                    }
                };
                let config = zpage_region::RegionConfig {
                    size_bytes,
                    budget: budget_config(&options, budget_bytes)?,
                };
                py.detach(|| zpage_region::Region::new(config))
            }
        }
        .map_err(region_error)?;
        Ok(RegionBase {
            base: region.as_ptr() as usize,
            len: region.len(),
            region: RwLock::new(Some(region)),
            exports: AtomicUsize::new(0),
            close_on_release: AtomicBool::new(false),
        })
    }

    /// Size of the region in bytes (a multiple of 4096).
    #[getter]
    fn size(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Base address of the region's memory (for ctypes and C extensions).
    #[getter]
    fn address(&self) -> PyResult<usize> {
        let _open = self.open()?;
        Ok(self.base)
    }

    /// Whether the region is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.region
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Live buffer exports (memoryviews and arrays viewing the region).
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }

    /// The budget's fault mode: "sigbus" or "handler_thread".
    #[getter]
    fn fault_mode(&self) -> PyResult<&'static str> {
        let guard = self.open()?;
        Ok(guard
            .as_ref()
            .map_or("sigbus", |r| fault_mode_name(r.fault_mode())))
    }

    /// A snapshot of the region's figures: a dict with the names of the
    /// library's ``RegionStats`` (gauges, then counters; every name ends in
    /// its unit), plus ``fault_latency`` and the budget's ``store`` counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats: RegionStats = self.with_region(py, |r| Ok(r.stats()))?;
        let dict = PyDict::new(py);
        for (field, value) in RegionStats::FIELDS.iter().zip(stats.values()) {
            dict.set_item(field.name, value)?;
        }
        let latency = PyDict::new(py);
        let l = &stats.fault_latency;
        latency.set_item("count", l.count)?;
        latency.set_item("mean_ns", l.mean_ns)?;
        latency.set_item("p50_ns", l.p50_ns)?;
        latency.set_item("p90_ns", l.p90_ns)?;
        latency.set_item("p99_ns", l.p99_ns)?;
        latency.set_item("p999_ns", l.p999_ns)?;
        latency.set_item("max_ns", l.max_ns)?;
        latency.set_item("log2_buckets", l.log2_buckets.clone())?;
        dict.set_item("fault_latency", latency)?;
        dict.set_item("store", crate::json::to_python(py, &stats.store)?)?;
        Ok(dict)
    }

    /// Makes every page of ``[offset, offset+length)`` present and writable
    /// (length defaults to the rest of the region). The reclaimer may take the
    /// pages out again later: to hand a buffer to a system call in "sigbus"
    /// mode, ``pin`` it for the duration instead.
    #[pyo3(signature = (offset=0, length=None))]
    fn prefault(&self, py: Python<'_>, offset: usize, length: Option<usize>) -> PyResult<()> {
        let (offset, length) = self.range(offset, length)?;
        self.with_region(py, |r| r.prefault(offset, length))
    }

    /// Restores the range and keeps it resident until ``unpin`` (pins nest).
    /// At most half the budget may be pinned. While pinned, the range may go
    /// to system calls (``write``, ``send``, ``numpy.save``) in any mode.
    #[pyo3(signature = (offset=0, length=None))]
    fn pin(&self, py: Python<'_>, offset: usize, length: Option<usize>) -> PyResult<()> {
        let (offset, length) = self.range(offset, length)?;
        self.with_region(py, |r| r.pin(offset, length))
    }

    /// Undoes one ``pin`` of the range.
    #[pyo3(signature = (offset=0, length=None))]
    fn unpin(&self, py: Python<'_>, offset: usize, length: Option<usize>) -> PyResult<()> {
        let (offset, length) = self.range(offset, length)?;
        self.with_region(py, |r| r.unpin(offset, length))
    }

    /// Compresses the range now (it will not be needed soon).
    #[pyo3(signature = (offset=0, length=None))]
    fn advise_cold(&self, py: Python<'_>, offset: usize, length: Option<usize>) -> PyResult<()> {
        let (offset, length) = self.range(offset, length)?;
        self.with_region(py, |r| r.advise_cold(offset, length))
    }

    /// Restores the range ahead of use.
    #[pyo3(signature = (offset=0, length=None))]
    fn advise_willneed(
        &self,
        py: Python<'_>,
        offset: usize,
        length: Option<usize>,
    ) -> PyResult<()> {
        let (offset, length) = self.range(offset, length)?;
        self.with_region(py, |r| r.advise_willneed(offset, length))
    }

    /// Releases the region's memory. Raises ``BusyError`` while views of it
    /// (memoryviews, NumPy arrays) exist: release them first (``del``,
    /// ``memoryview.release()``). Closing twice is harmless.
    fn close(&self) -> PyResult<()> {
        let mut guard = self.region.write().unwrap_or_else(|e| e.into_inner());
        let live = self.exports.load(Ordering::Acquire);
        if live > 0 && guard.is_some() {
            return Err(error(
                ErrorKind::Busy,
                format!(
                    "cannot close the region: {live} buffer export(s) are live (memoryviews or arrays made from it by numpy.frombuffer); release them first (del the arrays, memoryview.release()), or leave a `with` block, which closes the region when the last view goes"
                ),
            ));
        }
        guard.take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the region, or, while views exist, marks it to close when the
    /// last one is released.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, PyAny>) -> bool {
        let mut guard = self.region.write().unwrap_or_else(|e| e.into_inner());
        if self.exports.load(Ordering::Acquire) == 0 {
            guard.take();
        } else {
            self.close_on_release.store(true, Ordering::Release);
        }
        false
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!(
            "zpage.Region({} bytes, {state}, {} views)",
            self.len,
            self.exports.load(Ordering::Acquire)
        )
    }
}
