//! The buffer protocol (PEP 3118) for `zpage.Region` on every Python >= 3.9
//! from one abi3 wheel.
//!
//! PyO3 gives `__getbuffer__` to abi3 builds only from Python 3.11, when
//! `Py_buffer` joined the limited API. Its layout has not changed since
//! Python 3.0, and since Python 3.9 `PyType_FromSpec` accepts the two buffer
//! slots. So `zpage.Region` is made here, at import, as a subclass of the
//! PyO3 class `RegionBase` whose spec holds exactly those two slots; PyO3
//! still allocates, initialises and frees its instances (the subclass adds
//! no storage).

use crate::region::RegionBase;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

/// `Py_buffer` as every CPython since 3.0 lays it out (`Include/pybuffer.h`).
#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

// The stable ABI's numbers (`Include/typeslots.h`), the same in every version.
const PY_BF_GETBUFFER: c_int = 1;
const PY_BF_RELEASEBUFFER: c_int = 2;
const PY_TP_DOC: c_int = 56;
// Request flags (`Include/pybuffer.h`).
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;

/// Unsigned bytes: what `memoryview(region)` shows; NumPy views reinterpret it.
static FORMAT_UNSIGNED_BYTE: &CStr = c"B";

const REGION_DOC: &CStr = c"Region(size, budget, codec=\"lz4\", **options)
--

Memory whose cold pages zpage compresses: ``size`` bytes (rounded up to
4096), of which at most ``budget`` stay uncompressed. ``budget`` is a
number of bytes, a size string (\"64M\"), or a ``zpage.Budget`` shared
with other regions (then the options belong to the Budget). ``options``
are those of ``zpage.Budget`` (``pool``, ``fault_mode``, ``max_pool_bytes``,
``backing``, ...: the budget options of ``zpage run``).

The region exports its memory through the buffer protocol:
``memoryview(region)`` and ``numpy.frombuffer(region, dtype)`` are
zero-copy, writable views. New pages read as zeros.

Use it as a context manager: leaving the block frees the memory (at
once, or when the last view of it is released). ``close()`` refuses
while views exist.

In the default \"sigbus\" fault mode a system call cannot read or write
an evicted page (it fails with EFAULT): ``pin`` a range before giving it
to ``write``/``send``/``numpy.save``, or make the budget with
``fault_mode=\"handler_thread\"`` (root or vm.unprivileged_userfaultfd=1).";

/// `bf_getbuffer`: a writable, one-dimensional view of the whole region.
unsafe extern "C" fn get_buffer(
    exporter: *mut ffi::PyObject,
    view: *mut PyBuffer,
    flags: c_int,
) -> c_int {
    // SAFETY: CPython calls this slot with the GIL held, `exporter` a live
    // instance of the type that has the slot.
    let py = unsafe { Python::assume_attached() };
    // SAFETY: `exporter` is a valid borrowed reference for this call.
    let object = unsafe { Bound::from_borrowed_ptr(py, exporter) };
    let outcome = (|| -> PyResult<(usize, usize)> {
        if view.is_null() {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "NULL view in getbuffer",
            ));
        }
        object.cast::<RegionBase>()?.get().export()
    })();
    let (base, len) = match outcome {
        Ok(range) => range,
        Err(e) => {
            e.restore(py);
            return -1;
        }
    };
    // SAFETY: `view` is non-null (checked) and points to a `Py_buffer` the
    // caller owns for the duration of the export; the fields filled are those
    // `PyBuffer_FillInfo` fills, `shape` and `strides` pointing into the view
    // itself as it does (they live as long as the view).
    unsafe {
        let v = &mut *view;
        v.buf = base as *mut c_void;
        v.obj = object.clone().into_ptr();
        v.len = len as ffi::Py_ssize_t;
        v.itemsize = 1;
        v.readonly = 0;
        v.ndim = 1;
        v.format = if flags & PYBUF_FORMAT != 0 {
            FORMAT_UNSIGNED_BYTE.as_ptr() as *mut c_char
        } else {
            ptr::null_mut()
        };
        v.shape = if flags & PYBUF_ND == PYBUF_ND {
            &mut v.len
        } else {
            ptr::null_mut()
        };
        v.strides = if flags & PYBUF_STRIDES == PYBUF_STRIDES {
            &mut v.itemsize
        } else {
            ptr::null_mut()
        };
        v.suboffsets = ptr::null_mut();
        v.internal = ptr::null_mut();
    }
    0
}

/// `bf_releasebuffer`: one export fewer (CPython drops `view.obj` itself).
unsafe extern "C" fn release_buffer(exporter: *mut ffi::PyObject, _view: *mut PyBuffer) {
    // SAFETY: called by `PyBuffer_Release` with the GIL held and `exporter`
    // the object whose `get_buffer` succeeded, still alive (the view holds it).
    let py = unsafe { Python::assume_attached() };
    // SAFETY: as above, a valid borrowed reference.
    let object = unsafe { Bound::from_borrowed_ptr(py, exporter) };
    if let Ok(region) = object.cast::<RegionBase>() {
        region.get().release();
    }
}

/// Makes `zpage._zpage.Region`: `RegionBase` plus the buffer slots.
pub(crate) fn region_type<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyType>> {
    let base = py.get_type::<RegionBase>();
    let basicsize: c_int = base.getattr("__basicsize__")?.extract()?;
    let mut slots = [
        ffi::PyType_Slot {
            slot: PY_BF_GETBUFFER,
            pfunc: get_buffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: PY_BF_RELEASEBUFFER,
            pfunc: release_buffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: PY_TP_DOC,
            pfunc: REGION_DOC.as_ptr() as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"zpage._zpage.Region".as_ptr(),
        basicsize,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    };
    let bases = pyo3::types::PyTuple::new(py, [base])?;
    // SAFETY: `spec` and `slots` are valid for the call (CPython copies what
    // it keeps; the doc string is copied, the name is 'static); `bases` is a
    // tuple of one type. The result is a new reference or NULL with an
    // exception set.
    let made = unsafe {
        let raw = ffi::PyType_FromSpecWithBases(&mut spec, bases.as_ptr());
        Bound::from_owned_ptr_or_err(py, raw)?
    };
    Ok(made.cast_into::<PyType>()?)
}
