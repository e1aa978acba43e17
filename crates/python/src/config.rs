//! Python arguments to the library's configuration: sizes ("1G" or bytes),
//! codec and pool names (the CLI's spellings), fault mode and aging policy.

use crate::errors::{error, ErrorKind};
use pyo3::prelude::*;
use zpage_region::{AgingPolicy, BudgetConfig, CodecSpec, FaultMode, PoolKind};

/// A size in bytes from an int or a string such as "512M", "1G", "64MiB".
pub(crate) fn size_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    sized(what, value, zpage_units::parse_size)
}

/// A budget in bytes: a size as [`size_arg`] takes it, or a percentage of
/// the machine's memory ("25%", `MemTotal`), as `zpage run --budget` takes
/// it: the same parser, so the same bounds and messages.
pub(crate) fn budget_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    sized(what, value, |text| {
        zpage_units::parse_size_or_percent(text, zpage_units::machine_memory_bytes)
    })
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

/// Budget options as Python passes them (None: the library's default).
#[derive(Debug, Default)]
pub(crate) struct BudgetOptions {
    pub codec: Option<String>,
    pub pool: Option<String>,
    pub fault_mode: Option<String>,
    pub keep_clean_copies: Option<bool>,
    pub aging: Option<String>,
    pub cold_codec: Option<String>,
    pub cold_by_age_only: Option<bool>,
}

impl BudgetOptions {
    /// Whether any option was given (they cannot be with an existing budget).
    pub fn any(&self) -> bool {
        self.codec.is_some()
            || self.pool.is_some()
            || self.fault_mode.is_some()
            || self.keep_clean_copies.is_some()
            || self.aging.is_some()
            || self.cold_codec.is_some()
            || self.cold_by_age_only.is_some()
    }

    /// The library's configuration of a budget of `budget_bytes` with these options.
    pub fn config(&self, budget_bytes: usize) -> PyResult<BudgetConfig> {
        let mut config = BudgetConfig::new(budget_bytes);
        if let Some(codec) = &self.codec {
            config.codec = codec
                .parse::<CodecSpec>()
                .map_err(|e| error(ErrorKind::Config, e.to_string()))?;
        }
        if let Some(cold_codec) = &self.cold_codec {
            config.cold_codec = Some(
                cold_codec
                    .parse::<CodecSpec>()
                    .map_err(|e| error(ErrorKind::Config, format!("cold_codec: {e}")))?,
            );
        }
        if let Some(by_age_only) = self.cold_by_age_only {
            if config.cold_codec.is_none() {
                return Err(error(
                    ErrorKind::Config,
                    "cold_by_age_only needs a cold_codec: give cold_codec=\"zstd-dict\" (or \"zstd\"), or leave cold_by_age_only out",
                ));
            }
            config.cold_at_eviction = !by_age_only;
        }
        if let Some(pool) = &self.pool {
            config.pool = pool
                .parse::<PoolKind>()
                .map_err(|e| error(ErrorKind::Config, e.to_string()))?;
        }
        if let Some(mode) = &self.fault_mode {
            config.mode = match mode.as_str() {
                "sigbus" => FaultMode::Sigbus,
                "handler_thread" => FaultMode::HandlerThread,
                other => {
                    return Err(error(
                        ErrorKind::Config,
                        format!("fault_mode {other:?}: use \"sigbus\" (the default, no privilege) or \"handler_thread\" (system calls on evicted pages work; needs root, vm.unprivileged_userfaultfd=1 or access to /dev/userfaultfd)"),
                    ))
                }
            };
        }
        if let Some(keep) = self.keep_clean_copies {
            config.keep_clean_copies = keep;
        }
        if let Some(aging) = &self.aging {
            config.aging = match aging.as_str() {
                "refault" => AgingPolicy::Refault,
                "fifo" => AgingPolicy::Fifo,
                other => {
                    return Err(error(
                        ErrorKind::Config,
                        format!("aging {other:?}: use \"refault\" (the default) or \"fifo\""),
                    ))
                }
            };
        }
        Ok(config)
    }
}
