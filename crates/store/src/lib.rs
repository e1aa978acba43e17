//! The compressed page store: zswap's front end without the kernel.
//!
//! A [`Store`] maps a page key to an entry: a same-filled word, a compressed
//! blob (handle, length, codec, timestamp) in a [`zpage_pool`] pool, or the raw
//! page when it does not compress below the threshold. It keeps the pages in
//! LRU order, enforces a pool limit with zswap's accept-threshold hysteresis,
//! and counts every outcome ([`StoreStats`]): the union of zswap's debugfs
//! counters, zram's `mm_stat`/`io_stat`, and Zircon's compression stats with
//! its log-bucket histogram of how long pages stayed compressed.
//!
//! Loads of different pages do not serialize: the page table is sharded and
//! loads take read locks only. Each thread brings its own [`Worker`] (codec
//! state and a buffer), so neither path allocates per call.
#![forbid(unsafe_code)]

mod backing;
mod config;
mod error;
mod stats;
mod store;

pub use backing::BackingConfig;
pub use config::StoreConfig;
pub use error::{Result, StoreError};
pub use stats::{age_bucket, CompressionTrigger, Contents, EventCounts, StoreStats, AGE_BUCKETS};
pub use store::{EntryInfo, EntryKind, RecompressStats, RejectReason, Store, StoreOutcome, Worker};
pub use zpage_codec::{CodecSpec, Page, RejectThreshold, PAGE_SIZE};
pub use zpage_pool::PoolKind;
