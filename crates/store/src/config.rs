use crate::{BackingConfig, StoreError};
use zpage_codec::{CodecSpec, RejectThreshold};
use zpage_pool::PoolKind;

/// How a [`Store`](crate::Store) compresses, packs and limits.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// The codec new pages are compressed with.
    pub codec: CodecSpec,
    /// A stronger codec that [`Store::recompress`](crate::Store::recompress)
    /// applies to old pages (zram's `recomp_algorithm`); entries record which codec made them.
    pub recompress_codec: Option<CodecSpec>,
    /// Blobs at or above this size are not kept compressed.
    pub threshold: RejectThreshold,
    /// Whether pages over the threshold are kept raw (zram's huge pages, zswap
    /// since 6.x) or rejected (old zswap's `reject_compress_poor`).
    pub keep_incompressible: bool,
    /// The allocator packing the blobs.
    pub pool: PoolKind,
    /// Cap on the pool's memory (zswap's `max_pool_percent`, zram's `mem_limit`); `None` is unlimited.
    pub max_pool_bytes: Option<u64>,
    /// After hitting the cap, refuse stores until the pool is back under this
    /// percentage of it (zswap's `accept_threshold_percent`, default 90).
    pub accept_threshold_percent: u8,
    /// Independent pools; concurrent stores on different workers use different
    /// pools. One pool packs tightest (use it to compare with zram).
    pub pool_shards: usize,
    /// Base unit of the how-long-compressed histogram (Zircon's `pages_decompressed_unit_ns`).
    pub age_unit_ns: u64,
    /// Keep pages in LRU order (needed by `write_back`, `recompress` and
    /// `oldest_keys`). A caller that ages pages itself, as a region does,
    /// turns it off and saves a lock and a tree insert per store.
    pub track_lru: bool,
    /// A file to write the oldest pages back to, when asked or when the pool
    /// limit is hit (zswap in front of its swap device); `None` keeps
    /// everything in memory and refuses stores at the limit.
    pub backing: Option<BackingConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            codec: CodecSpec::lz4(),
            recompress_codec: None,
            threshold: RejectThreshold::default(),
            keep_incompressible: true,
            pool: PoolKind::SizeClass,
            max_pool_bytes: None,
            accept_threshold_percent: 90,
            pool_shards: 1,
            age_unit_ns: 1_000_000_000,
            track_lru: true,
            backing: None,
        }
    }
}

impl StoreConfig {
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        if self.accept_threshold_percent == 0 || self.accept_threshold_percent > 100 {
            return Err(StoreError::InvalidConfig(format!(
                "accept_threshold_percent is {}: give 1 to 100",
                self.accept_threshold_percent
            )));
        }
        if self.pool_shards == 0 || self.pool_shards > 256 {
            return Err(StoreError::InvalidConfig(format!(
                "pool_shards is {}: give 1 to 256",
                self.pool_shards
            )));
        }
        if self.age_unit_ns == 0 {
            return Err(StoreError::InvalidConfig(
                "age_unit_ns is 0: give the histogram's base unit in nanoseconds".into(),
            ));
        }
        if self.backing.is_some() && !self.track_lru {
            return Err(StoreError::InvalidConfig(
                "backing is set but track_lru is off: writeback picks the oldest pages from the LRU, so turn track_lru on".into(),
            ));
        }
        if self.max_pool_bytes == Some(0) {
            return Err(StoreError::InvalidConfig(
                "max_pool_bytes is 0: give a positive limit, or none for unlimited".into(),
            ));
        }
        Ok(())
    }
}
