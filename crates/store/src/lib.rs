//! The compressed page store: zswap's front end without the kernel.
//!
//! [`PageStore`], an object store: `put` a page and get a [`PageRef`], one
//! word naming a same-filled word, a compressed blob (pool shard, handle,
//! codec), a raw page, or a blob moved to the store's tier below RAM
//! (`zpage_tier`: a packed, sealed file or device, or Redis); `get` by
//! reference; `free`. A region keeps the reference in the page's own slot,
//! as Zircon keeps its `CompressedRef`, and decides itself which pages go
//! down to the tier and when (`zpage_region`'s reclaimer): there is no
//! keyed layer with an order of its own.
//!
//! It counts every outcome ([`StoreStats`]): the union of zswap's debugfs
//! counters, zram's `mm_stat`/`io_stat`, and Zircon's compression stats.
//! The pool limit follows zswap's accept-threshold hysteresis.
//!
//! Loads do not serialize: they take read locks only. Each thread brings its
//! own [`Worker`] (codec state and a buffer), so neither path allocates per
//! call, and loads allocate nothing even when a blob turns out corrupt.
#![forbid(unsafe_code)]

mod error;
mod object;
mod page_ref;
mod stats;

pub use error::{Result, StoreError};
pub use object::{LoadError, PageStore, PageStoreConfig, Put, RejectReason, Worker};
pub use page_ref::{PageRef, RefKind, MAX_POOL_SHARDS};
pub use stats::{CompressionTrigger, Contents, EventCounts, StoreStats};
pub use zpage_codec::{CodecSpec, Page, RejectThreshold, PAGE_SIZE};
pub use zpage_pool::PoolKind;
pub use zpage_tier::{
    redact_url, Backing, BackingOptions, KeySource, MemoryTier, MemoryTierConfig, PackedConfig,
    PackedTier, ReadFailure, RedisConfig, RedisPassword, RedisTier, RedisTls, Tier, TierError,
    TierField, TierFieldKind, TierFile, TierRef, TierStats, PASSWORD_ENV, SEALING,
};
