//! zpage-kernel: see, configure and keep healthy the Linux kernel's zram and
//! zswap, the swap devices behind them and the sysctls that steer them.
//!
//! Everything reads the kernel's own files (`/sys/block/zram*`,
//! `/sys/module/zswap/parameters`, `/proc/meminfo`, `/proc/vmstat`,
//! `/proc/swaps`, `/proc/sys/vm`, PSI, memory cgroups) so the figures shown
//! are exactly the kernel's.

mod error;
mod state_lock;
mod sys;

pub mod apply;
pub mod config;
pub mod daemon;
pub mod export;
pub mod exporter;
pub mod import;
pub mod machine;
pub mod measure;
pub mod memcg;
pub mod procfs;
pub mod recommend;
pub mod run;
pub mod status;
pub mod supervise;
pub mod swapdev;
pub mod zram;
pub mod zswap;

pub use error::{KernelError, Result};
pub use state_lock::{kernel_state_tests_enabled, KernelStateLock, KERNEL_STATE_TESTS_ENV};
pub use sys::{is_root, resident_anonymous_ranges};

/// Reads a kernel file into a string, mapping errors to [`KernelError`].
pub(crate) fn read_file(path: impl AsRef<std::path::Path>) -> Result<String> {
    let path = path.as_ref();
    std::fs::read_to_string(path).map_err(|e| KernelError::io(path, "read", e))
}

/// Reads a kernel file and trims it.
pub(crate) fn read_trimmed(path: impl AsRef<std::path::Path>) -> Result<String> {
    read_file(path).map(|s| s.trim().to_string())
}

/// Writes a value to a kernel file (one write, as sysfs expects).
pub(crate) fn write_file(path: impl AsRef<std::path::Path>, value: &str) -> Result<()> {
    let path = path.as_ref();
    std::fs::write(path, value).map_err(|e| KernelError::io(path, &format!("write {value:?}"), e))
}

/// Parses an unsigned integer from a kernel file's content.
pub(crate) fn parse_u64(path: &std::path::Path, text: &str) -> Result<u64> {
    text.trim().parse().map_err(|_| KernelError::Parse {
        path: path.to_path_buf(),
        content: text.chars().take(80).collect(),
        problem: "expected an unsigned integer".into(),
    })
}
