//! The one error type of this crate. Every message names the file or device,
//! the problem, and what to do about it.

use std::path::PathBuf;

/// Errors from reading or changing the kernel's zram, zswap, swap and sysctl state.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    /// The kernel refused an operation that needs privileges.
    #[error("{path}: needs root to {action}: run as root or with CAP_SYS_ADMIN")]
    NeedsRoot {
        /// File or device that was refused.
        path: PathBuf,
        /// What we tried to do ("write", "read", "swapon" ...).
        action: String,
    },
    /// Root was refused: the kernel itself forbids the operation (a read-only
    /// sysfs in a container, kernel lockdown, an attribute not writable now).
    #[error("{path}: the kernel refused to {action} even to root: check that /sys is not mounted read-only (containers), that kernel lockdown is off, and that the attribute may be changed in the device's current state")]
    DeniedToRoot {
        /// File or device that was refused.
        path: PathBuf,
        /// What we tried to do.
        action: String,
    },
    /// The configuration file is not valid TOML; nothing was changed.
    #[error("config line {line}, column {column}: {problem}: fix the TOML syntax there (keys are `name = value`, tables `[zswap]` and `[[zram]]`)")]
    ConfigSyntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        problem: String,
    },
    /// The zram module is not loaded (or not built).
    #[error("zram module not loaded (/sys/class/zram-control is missing): run `modprobe zram` (or build the kernel with CONFIG_ZRAM)")]
    ZramModuleNotLoaded,
    /// No such zram device.
    #[error("/sys/block/zram{index} does not exist: create it with `zpage kernel apply` (hot_add) or `cat /sys/class/zram-control/hot_add`")]
    NoSuchZramDevice {
        /// Device index asked for.
        index: u32,
    },
    /// The device is in use and must not be touched.
    #[error("{device} is in use ({reason}): {fix}")]
    DeviceBusy {
        /// Device name, e.g. "zram0".
        device: String,
        /// Why it is considered in use.
        reason: String,
        /// What the user can do.
        fix: String,
    },
    /// The requested compression algorithm is not offered by the kernel.
    #[error("{device}: compression algorithm {algorithm:?} is not available (the kernel offers: {available}): pick one of those, or load/build the backend")]
    UnknownAlgorithm {
        /// Device or subsystem ("zram0", "zswap").
        device: String,
        /// What was requested.
        algorithm: String,
        /// What the kernel offers, space separated.
        available: String,
    },
    /// An I/O error on a kernel interface file or device.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        /// File or device.
        path: PathBuf,
        /// What we tried to do.
        action: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A kernel file had content we could not understand.
    #[error("{path}: unexpected content {content:?}: {problem}")]
    Parse {
        /// File that was read.
        path: PathBuf,
        /// The offending content (shortened).
        content: String,
        /// What was expected.
        problem: String,
    },
    /// A configuration value is invalid; nothing was changed.
    #[error("config key `{key}`: {problem}: {fix}")]
    InvalidConfig {
        /// Dotted key path, e.g. "zram.0.size".
        key: String,
        /// What is wrong.
        problem: String,
        /// How to fix it.
        fix: String,
    },
    /// The running kernel lacks a feature.
    #[error("{feature} is not available on this kernel: {missing}")]
    Unsupported {
        /// Feature asked for.
        feature: String,
        /// What exactly is missing (Kconfig option, file).
        missing: String,
    },
    /// An external program failed.
    #[error("`{command}` failed: {detail}: {fix}")]
    Command {
        /// Command line that was run.
        command: String,
        /// Its stderr or exit status.
        detail: String,
        /// What to do.
        fix: String,
    },
    /// A budgeted run in a memory cgroup cannot be set up on this machine.
    #[error("kernel mode is not available here: {reason}")]
    KernelModeUnavailable {
        /// What is missing, and what to do.
        reason: String,
    },
    /// Putting the machine's swap state back failed partly.
    #[error("could not fully restore the machine's swap state: {problems}: fix these by hand (`zpage kernel status` shows the state)")]
    NotRestored {
        /// Each step that failed.
        problems: String,
    },
    /// Applying failed; what had already been changed was rolled back.
    #[error("{cause} (everything already changed was rolled back{rollback_note})")]
    RolledBack {
        /// The error that stopped the apply.
        cause: Box<KernelError>,
        /// Empty, or a note about rollback steps that themselves failed.
        rollback_note: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = KernelError> = std::result::Result<T, E>;

impl KernelError {
    /// Maps an I/O error on `path` to the most helpful variant
    /// (permission problems become [`KernelError::NeedsRoot`]).
    pub fn io(path: impl Into<PathBuf>, action: &str, source: std::io::Error) -> Self {
        let path = path.into();
        match source.kind() {
            std::io::ErrorKind::PermissionDenied if crate::sys::is_root() => {
                KernelError::DeniedToRoot {
                    path,
                    action: action.to_string(),
                }
            }
            std::io::ErrorKind::PermissionDenied => KernelError::NeedsRoot {
                path,
                action: action.to_string(),
            },
            _ => KernelError::Io {
                path,
                action: action.to_string(),
                source,
            },
        }
    }

    /// An invalid configuration key.
    pub fn config(
        key: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        KernelError::InvalidConfig {
            key: key.into(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_denied_says_root_only_to_those_who_are_not() {
        let error = KernelError::io(
            "/sys/block/zram0/disksize",
            "write",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        let message = error.to_string();
        if crate::sys::is_root() {
            assert!(
                matches!(error, KernelError::DeniedToRoot { .. }),
                "{message}"
            );
            assert!(
                !message.contains("needs root") && message.contains("read-only"),
                "{message}"
            );
        } else {
            assert!(matches!(error, KernelError::NeedsRoot { .. }), "{message}");
        }
    }
}
