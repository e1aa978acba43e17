//! The compressed page store: zswap's front end without the kernel.
//!
//! Two layers:
//! - [`PageStore`], the object store: `put` a page and get a [`PageRef`], one
//!   word naming a same-filled word, a compressed blob (pool shard, handle,
//!   codec) or a raw page; `get` by reference; `free`. A region keeps the
//!   reference in the page's own slot, as Zircon keeps its `CompressedRef`.
//! - [`Store`], the keyed store on top: caller-chosen keys, LRU order, a pool
//!   limit that writes back to a tier below RAM (`zpage_tier`: a packed,
//!   sealed file or device) as zswap's shrinker does, and recompression of
//!   old pages with a second codec.
//!
//! Both count every outcome ([`StoreStats`]): the union of zswap's debugfs
//! counters, zram's `mm_stat`/`io_stat`, and Zircon's compression stats with
//! its log-bucket histogram of how long pages stayed compressed. The pool
//! limit follows zswap's accept-threshold hysteresis.
//!
//! Loads do not serialize: they take read locks only. Each thread brings its
//! own [`Worker`] (codec state and a buffer), so neither path allocates per
//! call, and loads allocate nothing even when a blob turns out corrupt.
#![forbid(unsafe_code)]

mod backing;
mod config;
mod error;
mod object;
mod page_ref;
mod stats;
mod store;

pub use backing::BackingConfig;
pub use config::StoreConfig;
pub use error::{Result, StoreError};
pub use object::{LoadError, PageStore, PageStoreConfig, Put, RejectReason, Worker};
pub use page_ref::{PageRef, RefKind, MAX_POOL_SHARDS};
pub use stats::{age_bucket, CompressionTrigger, Contents, EventCounts, StoreStats, AGE_BUCKETS};
pub use store::{EntryInfo, EntryKind, RecompressStats, Store, StoreOutcome};
pub use zpage_codec::{CodecSpec, Page, RejectThreshold, PAGE_SIZE};
pub use zpage_pool::PoolKind;
pub use zpage_tier::{
    redact_url, Backing, BackingOptions, KeySource, MemoryTier, MemoryTierConfig, PackedConfig,
    PackedTier, ReadFailure, RedisConfig, RedisPassword, RedisTier, RedisTls, Tier, TierError,
    TierFile, TierRef, TierStats, PASSWORD_ENV, SEALING,
};
