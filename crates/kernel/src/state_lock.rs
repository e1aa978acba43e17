//! Machine-wide lock for everything that changes kernel state (zram, swap,
//! zswap, sysctls, cgroups): the tests that do, and the commands that do
//! (`zpage analyze --kernel`, `zpage bench --vs-kernel`), must never run at
//! the same time, whichever crate or engineer runs them.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Path of the lock file every crate agrees on.
pub const KERNEL_STATE_LOCK_PATH: &str = "/tmp/zpage-kernel-state.lock";

/// Holds an exclusive `flock` on [`KERNEL_STATE_LOCK_PATH`] until dropped.
///
/// Take it first in any test or command that touches zram devices, swap,
/// zswap parameters, sysctls or cgroups; then save the state to restore in
/// a guard whose `Drop` puts it back.
#[derive(Debug)]
pub struct KernelStateLock {
    _file: File,
}

impl KernelStateLock {
    /// Blocks until the machine-wide lock is held.
    ///
    /// # Panics
    /// Only if the lock file cannot be opened or locked at all (e.g. /tmp is
    /// read-only); a test cannot safely continue then. Use
    /// [`KernelStateLock::try_acquire`] to handle that case yourself.
    pub fn acquire() -> KernelStateLock {
        match Self::try_acquire() {
            Ok(lock) => lock,
            Err(e) => panic!("cannot take the kernel test lock: {e}"),
        }
    }

    /// Blocks until the lock is held, or reports why it cannot be taken.
    pub fn try_acquire() -> crate::Result<KernelStateLock> {
        let path = Path::new(KERNEL_STATE_LOCK_PATH);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(|e| crate::KernelError::io(path, "open the test lock file", e))?;
        crate::sys::flock_exclusive(&file)
            .map_err(|e| crate::KernelError::io(path, "flock the test lock file", e))?;
        Ok(KernelStateLock { _file: file })
    }
}

/// Environment variable that lets tests change the machine's kernel state
/// (zram devices, swap areas, zswap parameters, sysctls, cgroups). Without
/// it those tests print that they are skipped and pass, so a plain
/// `cargo test --workspace` as root leaves the machine alone; CI sets it.
pub const KERNEL_STATE_TESTS_ENV: &str = "ZPAGE_TEST_KERNEL_STATE";

/// Whether a test that changes kernel state may run: `ZPAGE_TEST_KERNEL_STATE=1`
/// is set and this process is root. Otherwise prints a `SKIP` line naming
/// `test` and what is missing, and returns false.
pub fn kernel_state_tests_enabled(test: &str) -> bool {
    let asked = std::env::var(KERNEL_STATE_TESTS_ENV).is_ok_and(|v| v == "1");
    if !asked {
        println!(
            "SKIP {test}: changes kernel state (zram, swap, zswap, sysctls or cgroups); run with {KERNEL_STATE_TESTS_ENV}=1 as root to include it"
        );
        return false;
    }
    if !crate::sys::is_root() {
        println!("SKIP {test}: {KERNEL_STATE_TESTS_ENV}=1 is set but the test needs root");
        return false;
    }
    true
}
