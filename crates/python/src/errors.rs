//! Errors reach Python as `zpage.ZpageError` subclasses carrying the
//! library's message. The classes are defined in Python (`zpage/_errors.py`)
//! so they can also derive from the builtin they refine (`ValueError`,
//! `OSError`, `BufferError`) and carry docstrings `help()` shows.

use pyo3::prelude::*;
use zpage_region::RegionError;

/// Which `zpage` exception class an error becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// A value that cannot work (sizes, codec names, ranges).
    Config,
    /// The kernel lacks what zpage needs (userfaultfd, features, privilege).
    Unavailable,
    /// The region (or budget) is closed, unmapped, or belongs to the parent process.
    Closed,
    /// The region is still exported to views (memoryview, NumPy arrays).
    Busy,
    /// Pinning refused (more than half the budget, or not pinned).
    Pin,
    /// A system call failed.
    System,
    /// The analyzer failed (unreadable image or process).
    Analyze,
    /// The NumPy allocator hook could not be installed.
    Numpy,
}

impl ErrorKind {
    fn class_name(self) -> &'static str {
        match self {
            ErrorKind::Config => "ConfigError",
            ErrorKind::Unavailable => "UnavailableError",
            ErrorKind::Closed => "ClosedError",
            ErrorKind::Busy => "BusyError",
            ErrorKind::Pin => "PinError",
            ErrorKind::System => "SystemCallError",
            ErrorKind::Analyze => "AnalyzeError",
            ErrorKind::Numpy => "NumpyHookError",
        }
    }
}

/// A Python exception of `kind` with `message`.
pub(crate) fn error(kind: ErrorKind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let made = py
            .import("zpage._errors")
            .and_then(|module| module.getattr(kind.class_name()))
            .and_then(|class| class.call1((message.clone(),)));
        match made {
            Ok(instance) => PyErr::from_value(instance),
            // The package is broken (the module is missing): still say what failed.
            Err(import_error) => pyo3::exceptions::PyRuntimeError::new_err(format!(
                "{message} (and zpage._errors could not be loaded: {import_error})"
            )),
        }
    })
}

/// The exception for a region error: its class follows what went wrong, its
/// message is the library's.
pub(crate) fn region_error(e: RegionError) -> PyErr {
    let kind = match &e {
        RegionError::UffdUnavailable { .. }
        | RegionError::FeaturesMissing { .. }
        | RegionError::Unsupported(_) => ErrorKind::Unavailable,
        RegionError::InvalidConfig(_)
        | RegionError::OutOfRange { .. }
        | RegionError::Codec(_)
        | RegionError::TooManyRegions(_) => ErrorKind::Config,
        RegionError::PinExceedsBudget { .. } | RegionError::NotPinned(_) => ErrorKind::Pin,
        RegionError::UffdLost(_) | RegionError::ForkedChild { .. } | RegionError::Unmapped(_) => {
            ErrorKind::Closed
        }
        RegionError::Sys { .. } | RegionError::Store(_) => ErrorKind::System,
    };
    error(kind, e.to_string())
}
