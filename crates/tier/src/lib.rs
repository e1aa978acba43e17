//! zpage-tier: where compressed pages go below RAM.
//!
//! One interface, [`Tier`]: `put` a compressed blob for a page and get a
//! [`TierRef`] (a number below 2^56, so it fits the reserved space of the
//! store's one-word page reference), `get` it back into a caller's buffer,
//! `free` it. Three implementations today:
//!
//! - [`MemoryTier`]: blobs in this process's heap. For tests, and the default
//!   where no tier is configured.
//! - [`PackedTier`]: a file or block device, log-structured. Blobs are
//!   appended into fixed-size segments at their compressed size (plus the
//!   16-byte tag), an in-memory index maps a reference to (segment, offset,
//!   length, page, version), a bound on space divides the device into
//!   segments, and garbage collection copies live blobs forward so dead ones
//!   stay a small share of the file, whose emptied segments are given back
//!   to the file system.
//! - [`RedisTier`]: a Redis server or Redis Cluster (module `redis`: URL
//!   syntax, keys, what a node that is down or a failover does).
//!
//! Every tier seals every blob (module `seal`): AES-256-GCM with a random
//! per-process key (or a key file), nonces unique by construction, and
//! associated data binding the blob to its page identity, version and length.
//! A blob that fails the check is an error, never wrong bytes.
//!
//! # Failing devices
//!
//! A tier can be missing when it is made, fill up, or fail later. None of it
//! is fatal: `put` returns an error (the caller keeps the page in RAM), the
//! tier marks itself down, prints one line to standard error naming the
//! device and the cause, and tries again after `retry_interval` (a missing
//! file that appears, a disk that has room again: the tier comes back and
//! says so). A `get` that fails returns a [`ReadFailure`] naming the cause
//! and counts it in [`TierStats`]; the caller knows which page it asked for
//! and reports it lost (a region ends the process naming the page). A network tier fits the same interface: a node
//! that is down is a `get` that fails with [`ReadFailure::Unavailable`], one
//! that answers without the blob (restarted empty) [`ReadFailure::Missing`].
//!
//! # Reads from a signal handler
//!
//! A region serves a fault on a page in a tier from its SIGBUS handler, so
//! [`Tier::get`] of a tier whose [`Tier::reads_are_async_signal_safe`] is
//! true must allocate nothing, take no lock that a thread it may interrupt
//! could hold, and make only async-signal-safe system calls. The packed tier
//! and the memory tier meet that: the index and the device are behind
//! read-write locks taken by spinning on `try_read` (their writers are
//! zpage's own threads, which block asynchronous signals, or API calls that
//! do), the blob is read with `pread` into the caller's preallocated buffer,
//! opened in place, and failures are small `Copy` values. `pread` of a local
//! file or block device is bounded by the device's own error handling; a
//! network tier's reads are not: the Redis tier reports `false`, and a
//! region hands its reads to a zpage thread.
#![forbid(unsafe_code)]

mod backing;
mod health;
mod memory;
mod packed;
mod redis;
mod redis_auth;
mod seal;
mod slot;
mod stats;

pub use backing::{Backing, BackingOptions};
pub use memory::{MemoryTier, MemoryTierConfig};
pub use packed::{check_path, check_room, PackedConfig, PackedTarget, PackedTier, TierFile};
pub use redis::{RedisConfig, RedisTier};
pub use redis_auth::{redact_url, RedisPassword, RedisTls, CLUSTER_SCHEME, PASSWORD_ENV};
pub use seal::{KeySource, Sealer, KEY_BYTES, SEALING, TAG_BYTES};
pub use stats::{TierField, TierFieldKind, TierStats};

use std::num::NonZeroU64;

/// The largest blob a tier takes: one uncompressed 4 KiB page.
pub const MAX_BLOB_BYTES: usize = 4096;
/// The buffer [`Tier::get`] needs: the largest blob and its tag.
pub const READ_BUFFER_BYTES: usize = MAX_BLOB_BYTES + TAG_BYTES;

/// A blob in a tier, named in at most [`TierRef::BITS`] bits (never 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TierRef(NonZeroU64);

impl TierRef {
    /// Bits a reference may use: the store keeps it in its page reference's
    /// 56-bit handle field.
    pub const BITS: u32 = 56;

    /// The raw number.
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    /// Rebuilds a reference; `None` for 0 or a number wider than [`TierRef::BITS`].
    pub fn from_raw(raw: u64) -> Option<TierRef> {
        if raw >> Self::BITS != 0 {
            return None;
        }
        NonZeroU64::new(raw).map(TierRef)
    }
}

/// Why a blob could not be read back. `Copy` and allocation-free, so a
/// fault handler can report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ReadFailure {
    /// The tier is down (a device that failed and was not reopened, a node
    /// that does not answer).
    #[error("the tier is unavailable")]
    Unavailable,
    /// The device returned an error.
    #[error("the device returned an I/O error (errno {errno})")]
    Io {
        /// The `errno`.
        errno: i32,
    },
    /// The device ended before the blob did (the file was truncated).
    #[error("the device ends before the blob does (truncated)")]
    Truncated,
    /// The blob failed its authentication check: modified, moved from another
    /// page, a stale version, or corrupt.
    #[error("the blob failed authentication (modified, swapped, replayed or corrupt)")]
    Authentication,
    /// The reference names no live blob of this page.
    #[error("the reference names no live blob of this page")]
    Stale,
    /// The caller's buffer is smaller than the blob and its tag.
    #[error("the read buffer is too small for the blob")]
    BufferTooSmall,
    /// The tier answered but no longer holds the blob (a server restarted
    /// without its data, or one that evicts keys under memory pressure).
    #[error("the tier no longer holds the blob (restarted empty, or evicted it)")]
    Missing,
}

impl ReadFailure {
    /// The cause in a few words, for a message built without allocating.
    pub fn cause(self) -> &'static str {
        match self {
            ReadFailure::Unavailable => "the tier is unavailable",
            ReadFailure::Io { .. } => "the device returned an I/O error",
            ReadFailure::Truncated => "the device ends before the blob does (truncated)",
            ReadFailure::Authentication => {
                "the blob failed authentication (modified, swapped, replayed or corrupt)"
            }
            ReadFailure::Stale => "the reference names no live blob of this page",
            ReadFailure::BufferTooSmall => "the read buffer is too small",
            ReadFailure::Missing => {
                "the tier no longer holds the blob (restarted empty, or evicted it)"
            }
        }
    }
}

/// Errors from making a tier or writing to it. A failed write leaves the
/// caller's page where it was.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// A configuration value that cannot work.
    #[error("invalid tier configuration: {0}")]
    InvalidConfig(String),
    /// The tier has no room left, even after garbage collection.
    #[error(
        "tier {tier} is full ({capacity_bytes} bytes): give it more space; pages stay in memory"
    )]
    Full {
        /// Which tier.
        tier: String,
        /// Its bound.
        capacity_bytes: u64,
    },
    /// The device failed.
    #[error("tier {tier}: {action} failed: {source} (pages stay in memory; the tier is retried)")]
    Io {
        /// Which tier.
        tier: String,
        /// What was being done.
        action: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The tier is down since an earlier failure and not due for a retry.
    #[error(
        "tier {tier} is down since: {cause} (pages stay in memory; retried every {retry_ms} ms)"
    )]
    Unavailable {
        /// Which tier.
        tier: String,
        /// The failure that took it down.
        cause: String,
        /// How often it is retried.
        retry_ms: u64,
    },
    /// A blob that cannot be stored.
    #[error("a blob of {len} bytes cannot be stored: {why}")]
    InvalidBlob {
        /// Its length.
        len: usize,
        /// Why.
        why: &'static str,
    },
    /// The key file could not be used.
    #[error("key file {path}: {action} failed: {source} (give a readable file of 32 bytes, or a path where one may be created)")]
    Key {
        /// The file.
        path: std::path::PathBuf,
        /// What was being done.
        action: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The key file has the wrong length.
    #[error("key file {path} holds {found} bytes, not 32: give a file of 32 random bytes (or remove it to have one made)")]
    KeyLength {
        /// The file.
        path: std::path::PathBuf,
        /// Its length.
        found: usize,
    },
    /// The sealer's version counter would wrap (2^64 writes).
    #[error("the tier's version counter is exhausted: make a new tier")]
    VersionsExhausted,
}

/// A tier below RAM. `Send + Sync`; share it with an `Arc`.
///
/// `page` is the caller's identity of the page (a store key, a region's
/// page): the blob is bound to it, and a `get` for another page fails.
pub trait Tier: Send + Sync + std::fmt::Debug {
    /// What it is, for messages: "packed file /var/tmp/zpage.tier".
    fn describe(&self) -> &str;

    /// Stores `blob` (at most [`MAX_BLOB_BYTES`]) for `page`. On error the
    /// tier holds nothing new and the caller keeps the page.
    fn put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError>;

    /// Copies the blob `tier_ref` names into `buf` (at least the blob's
    /// length plus [`TAG_BYTES`]; [`READ_BUFFER_BYTES`] always suffices) and
    /// returns its length; the blob stays stored. Allocates nothing when
    /// [`Tier::reads_are_async_signal_safe`] says so.
    fn get(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure>;

    /// Drops the blob; the reference must not be used again.
    fn free(&self, tier_ref: TierRef);

    /// Counters and gauges now.
    fn stats(&self) -> TierStats;

    /// Whether [`Tier::get`] may run in a signal handler (see the crate docs).
    fn reads_are_async_signal_safe(&self) -> bool;

    /// Background upkeep (garbage collection, noticing a deleted file);
    /// callers with an idle thread call it now and then.
    fn maintain(&self) {}
}

// The spin locks of zpage: the tiers' locks and the store's pool shards
// (`zpage-store` takes these two, the lowest crate both depend on being
// this one). Neither ever parks.

/// A write lock taken by spinning, then yielding, never by parking: the
/// first park on a thread allocates the lock library's thread-local record
/// from the program's allocator (its destructor is registered with
/// `calloc`), and under `zpage run` that memory may be an evicted page whose
/// restore reads this very lock, which the parked writer holds back.
pub fn spin_write<T: ?Sized>(
    lock: &parking_lot::RwLock<T>,
) -> parking_lot::RwLockWriteGuard<'_, T> {
    let mut attempt = 0u32;
    loop {
        if let Some(guard) = lock.try_write() {
            return guard;
        }
        if attempt < 1000 {
            attempt += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// A read lock taken by spinning on `try_read`, never by parking (parking may
/// allocate the first time a thread waits, and a signal handler must not):
/// what a region's fault handler takes on a tier's index and on the store's
/// pool shards.
pub fn spin_read<T: ?Sized>(lock: &parking_lot::RwLock<T>) -> parking_lot::RwLockReadGuard<'_, T> {
    loop {
        if let Some(guard) = lock.try_read() {
            return guard;
        }
        std::hint::spin_loop();
    }
}
