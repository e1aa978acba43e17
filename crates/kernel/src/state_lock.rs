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
