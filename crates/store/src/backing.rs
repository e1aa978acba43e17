//! The keyed store's backing file, kept as a configuration for callers that
//! name a path and a size: it becomes a packed tier (`zpage_tier::PackedTier`:
//! compressed blobs appended into segments, sealed with a per-process key,
//! garbage-collected, bounded). Callers that want another tier, or a key
//! file, build it and set `PageStoreConfig::tier` instead.

use crate::StoreError;
use std::path::PathBuf;
use std::sync::Arc;
use zpage_tier::{PackedConfig, PackedTier, Tier};

/// Where and how much to write back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingConfig {
    /// A new file (created mode 0600 and removed with the store; an
    /// existing file is refused, never overwritten) or a block device. A
    /// file that cannot be created when the store is made does not stop it:
    /// pages stay in memory and the file is tried again on later writebacks.
    pub path: PathBuf,
    /// The bound on the space it takes; writebacks past it (after garbage
    /// collection) fail, count `writeback_fail_count`, and keep pages in memory.
    pub max_bytes: u64,
}

/// The smallest bound: two segments of the smallest size.
const MIN_BACKING_BYTES: u64 = 128 << 10;

impl BackingConfig {
    /// The packed tier this configuration names: 1 MiB segments, or smaller
    /// ones for a small bound (at least four segments where possible).
    pub fn build(&self) -> Result<Arc<dyn Tier>, StoreError> {
        if self.max_bytes < MIN_BACKING_BYTES {
            return Err(StoreError::InvalidConfig(format!(
                "backing max_bytes is {}: give at least {MIN_BACKING_BYTES} bytes (128 KiB)",
                self.max_bytes
            )));
        }
        let mut config = PackedConfig::new(&self.path, self.max_bytes);
        config.segment_bytes = (self.max_bytes / 4).clamp(64 << 10, 1 << 20);
        Ok(Arc::new(PackedTier::new(config)?))
    }
}
