//! Python arguments to the library's configuration: sizes ("1G" or bytes)
//! and the budget's options (the one list's names and rules).

use crate::errors::{error, region_error, ErrorKind};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use zpage_region::{
    BudgetConfig, BudgetOption, BudgetOptions, FaultMode, Spelling, BUDGET_OPTIONS,
};

/// A size in bytes from an int or a string such as "512M", "1G", "64MiB".
pub(crate) fn size_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    sized(what, value, zpage_units::parse_size)
}

/// A budget in bytes: a size as [`size_arg`] takes it, or a percentage of
/// the machine's memory ("25%", `MemTotal`), as `zpage run --budget` takes
/// it: the same parser, so the same bounds and messages.
fn budget_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    sized(what, value, |text| {
        zpage_units::parse_size_or_percent(text, zpage_units::machine_memory_bytes)
    })
}

/// A budget argument that may ask for a budget that finds itself:
/// `"auto"` or `"auto:STALL%"` (the rules of `zpage run --budget auto`) puts
/// the stall target in `options` and gives the most the budget may be, a
/// quarter of the machine's memory as under `zpage run`; anything else is
/// read by [`budget_arg`].
pub(crate) fn budget_or_auto(
    what: &str,
    value: &Bound<'_, PyAny>,
    options: &mut BudgetOptions,
) -> PyResult<usize> {
    let auto = match value.extract::<String>() {
        Ok(text) => zpage_region::parse_auto_budget(&text)
            .map_err(|e| error(ErrorKind::Config, format!("{what}: {e}")))?,
        Err(_) => None,
    };
    let Some(ppm) = auto else {
        return budget_arg(what, value);
    };
    let option = zpage_region::AUTO_BUDGET_OPTION;
    if options.text(option).is_some() {
        return Err(error(
            ErrorKind::Config,
            format!(
                "{what} \"auto\" and {option} both give a stall target: give it once, as \"auto:STALL%\""
            ),
        ));
    }
    options
        .set(option, &ppm.to_string(), Spelling::Keyword)
        .map_err(|e| error(ErrorKind::Config, e.to_string()))?;
    zpage_region::auto_budget_most_bytes().map_err(|e| error(ErrorKind::Config, e))
}

fn sized(
    what: &str,
    value: &Bound<'_, PyAny>,
    parse: impl Fn(&str) -> Result<u64, zpage_units::SizeError>,
) -> PyResult<usize> {
    let bytes: u64 = if let Ok(text) = value.extract::<String>() {
        parse(&text).map_err(|e| error(ErrorKind::Config, format!("{what}: {e}")))?
    } else if let Ok(number) = value.extract::<i128>() {
        u64::try_from(number).map_err(|_| {
            error(
                ErrorKind::Config,
                format!(
                    "{what} is {number}: give a positive number of bytes or a size such as \"1G\""
                ),
            )
        })?
    } else {
        return Err(error(
            ErrorKind::Config,
            format!(
                "{what} must be a number of bytes or a size string such as \"512M\" or \"1G\", not {}",
                value.get_type().name()?
            ),
        ));
    };
    usize::try_from(bytes).map_err(|_| {
        error(
            ErrorKind::Config,
            format!("{what} {bytes} does not fit in memory"),
        )
    })
}

/// The fault mode's Python name.
pub(crate) fn fault_mode_name(mode: FaultMode) -> &'static str {
    match mode {
        FaultMode::Sigbus => "sigbus",
        FaultMode::HandlerThread => "handler_thread",
    }
}

/// The budget options given to `zpage.Budget` or `zpage.Region`: `codec`
/// (positional, as it always was) and keywords named as the one option list
/// names them (`zpage_region::BUDGET_OPTIONS`; the stub `_zpage.pyi` lists
/// them, checked by `tests/stub.rs`). Each value is written out as text and
/// read by the list's rules, so a mistake gets the same words as `zpage
/// run`'s flag, naming the keyword. `None` leaves an option at its default.
pub(crate) fn budget_options(
    codec: Option<&Bound<'_, PyAny>>,
    keywords: Option<&Bound<'_, PyDict>>,
) -> PyResult<BudgetOptions> {
    let mut options = BudgetOptions::new();
    let mut give = |name: &str, value: &Bound<'_, PyAny>| -> PyResult<()> {
        let Some(option) = BudgetOption::named(name) else {
            let names: Vec<&str> = BUDGET_OPTIONS.iter().map(|o| o.name).collect();
            return Err(PyTypeError::new_err(format!(
                "unexpected keyword argument {name:?}: the budget options are {}",
                names.join(", ")
            )));
        };
        if let Some(text) = option_text(option, value)? {
            options
                .set(name, &text, Spelling::Keyword)
                .map_err(|e| error(ErrorKind::Config, e.to_string()))?;
        }
        Ok(())
    };
    if let Some(codec) = codec {
        give("codec", codec)?;
    }
    if let Some(keywords) = keywords {
        for (name, value) in keywords.iter() {
            give(&name.extract::<String>()?, &value)?;
        }
    }
    Ok(options)
}

/// A Python value as the option list reads it: `True`/`False` as
/// `true`/`false`, an int in decimal (a number of bytes for a size), a
/// string as given, a path (`pathlib.Path`) as its text. `None`: not given.
fn option_text(option: &BudgetOption, value: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if value.is_none() {
        return Ok(None);
    }
    // Before int: Python's bool is an int subclass.
    if let Ok(switch) = value.cast::<PyBool>() {
        return Ok(Some(switch.is_true().to_string()));
    }
    if let Ok(number) = value.extract::<i128>() {
        return Ok(Some(number.to_string()));
    }
    if let Ok(text) = value.extract::<String>() {
        return Ok(Some(text));
    }
    if value.hasattr("__fspath__")? {
        let path = value.py().import("os")?.call_method1("fspath", (value,))?;
        if let Ok(text) = path.extract::<String>() {
            return Ok(Some(text));
        }
    }
    Err(error(
        ErrorKind::Config,
        format!(
            "{}: give {} as a str, int, bool or path, not {}",
            option.name,
            option.syntax,
            value.get_type().name()?
        ),
    ))
}

/// The library's configuration of a budget of `budget_bytes` with `options`.
pub(crate) fn budget_config(
    options: &BudgetOptions,
    budget_bytes: usize,
) -> PyResult<BudgetConfig> {
    options.config(budget_bytes).map_err(region_error)
}
