//! The library's JSON documents as Python objects: the same encoding the
//! CLI's `--json` prints, decoded by Python's `json` module.

use pyo3::prelude::*;

/// `value` encoded as the CLI encodes it, as Python dicts, lists and numbers.
pub(crate) fn to_python<'py, T: serde::Serialize>(
    py: Python<'py>,
    value: &T,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(value).map_err(|e| {
        crate::errors::error(
            crate::errors::ErrorKind::System,
            format!("encode as JSON: {e}"),
        )
    })?;
    py.import("json")?.call_method1("loads", (text,))
}
