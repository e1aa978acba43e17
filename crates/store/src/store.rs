//! The keyed store: a table of caller-chosen keys to page references, on top
//! of the object store ([`crate::PageStore`]), with LRU order, writeback to a
//! tier below RAM and recompression of old pages.
//!
//! Lock order, outermost first: a table shard, then the LRU, then a pool
//! shard (inside the object store). No path takes them in another order; pool
//! memory is freed only after the table shard lock is released, and
//! compression runs with no lock held. Loads take read locks only (a table
//! shard, then the pool shard that holds the blob), so loads of different
//! pages, and of the same page, run in parallel; they allocate and free
//! nothing.

use crate::object::{Gauges, PageStore, Put, Worker};
use crate::page_ref::{PageRef, RefKind};
use crate::stats::{CompressionTrigger, Counters, StoreStats};
use crate::{PageStoreConfig, Result, StoreConfig, StoreError};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;
use zpage_codec::{CodecSpec, Page};
use zpage_pool::CompactStats;

pub use crate::object::RejectReason;

/// Page-table shards: enough that threads working on different pages rarely meet.
const TABLE_SHARDS: usize = 64;

/// Pages written back per batch when the pool limit is hit.
const WRITEBACK_BATCH: usize = 32;

/// Where a stored page's content is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    /// In memory, named by its reference.
    Memory(PageRef),
    /// In the tier below RAM, named by a tier reference (bound to the key).
    WrittenBack(PageRef),
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    location: Location,
    /// Nanoseconds since the store's epoch when the page was stored.
    stored_at_ns: u64,
    /// Position in the LRU: smaller is older.
    lru_seq: u64,
    /// The recompression codec was tried on this page and did not save a size class.
    recompress_tried: bool,
}

/// What one [`Store::recompress`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecompressStats {
    /// Pages looked at.
    pub examined: u64,
    /// Pages now held with the recompression codec.
    pub recompressed: u64,
    /// Blob bytes saved by them.
    pub bytes_saved: u64,
}

/// What kind of entry holds a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A same-filled word.
    SameFilled,
    /// A compressed blob.
    Compressed,
    /// The raw page.
    Raw,
    /// In the backing file.
    WrittenBack,
}

/// A description of one stored page, for tools and policies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// The form it is kept in.
    pub kind: EntryKind,
    /// Bytes it takes in the pool (0 for same-filled and written-back pages, 4096 for raw).
    pub stored_bytes: u64,
    /// The codec of a compressed entry.
    pub codec: Option<CodecSpec>,
    /// How long ago it was stored.
    pub age_ns: u64,
}

/// What `store` did with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// Kept as its repeated word.
    SameFilled,
    /// Kept compressed in this many bytes.
    Compressed {
        /// Blob size.
        bytes: usize,
    },
    /// Kept raw: it did not compress below the threshold.
    Raw,
    /// Not kept.
    Rejected(RejectReason),
}

/// A compressed page store with keys: zswap's front end without the kernel.
///
/// Keys are caller-chosen `u64`s (a page number, a swap slot). `Store` is
/// `Send + Sync`; share it with an `Arc` and give each thread a [`Worker`].
pub struct Store {
    pages: PageStore,
    track_lru: bool,
    age_unit_ns: u64,
    table: Box<[RwLock<HashMap<u64, Entry>>]>,
    lru: Mutex<BTreeMap<u64, u64>>,
    next_lru_seq: AtomicU64,
    written_back_pages: AtomicU64,
    /// Keys whose written-back page could not be read back, and why.
    lost: Mutex<BTreeMap<u64, zpage_tier::ReadFailure>>,
    epoch: Instant,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("pages", &self.pages)
            .field("track_lru", &self.track_lru)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A store with `config`; fails on a configuration that cannot work.
    pub fn new(config: StoreConfig) -> Result<Self> {
        config.validate()?;
        let mut pages = config.pages;
        if let Some(backing) = &config.backing {
            pages.tier = Some(backing.build()?);
        }
        Ok(Self {
            pages: PageStore::new(pages)?,
            track_lru: config.track_lru,
            age_unit_ns: config.age_unit_ns,
            table: (0..TABLE_SHARDS)
                .map(|_| RwLock::new(HashMap::new()))
                .collect(),
            lru: Mutex::new(BTreeMap::new()),
            next_lru_seq: AtomicU64::new(0),
            written_back_pages: AtomicU64::new(0),
            lost: Mutex::new(BTreeMap::new()),
            epoch: Instant::now(),
        })
    }

    /// The object store underneath.
    pub fn page_store(&self) -> &PageStore {
        &self.pages
    }

    /// The object store's configuration.
    pub fn config(&self) -> &PageStoreConfig {
        self.pages.config()
    }

    /// Scratch for one thread. Workers are spread over the pool shards.
    pub fn worker(&self) -> Result<Worker> {
        self.pages.worker()
    }

    fn shard_of(key: u64) -> usize {
        // Fibonacci hashing: neighbouring page numbers land in different shards.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % TABLE_SHARDS
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn counters(&self) -> &Counters {
        &self.pages.counters
    }

    fn gauges(&self) -> &Gauges {
        &self.pages.gauges
    }

    /// Stores `page` under `key`, replacing what the key held. See [`Store::store_with_trigger`].
    pub fn store(&self, worker: &mut Worker, key: u64, page: &Page) -> Result<StoreOutcome> {
        self.store_with_trigger(worker, key, page, CompressionTrigger::Eager)
    }

    /// Stores `page` under `key`, counting the compression under `trigger`.
    ///
    /// A rejected page is not kept and any older copy under `key` is dropped,
    /// so the store never answers a later load with stale bytes.
    pub fn store_with_trigger(
        &self,
        worker: &mut Worker,
        key: u64,
        page: &Page,
        trigger: CompressionTrigger,
    ) -> Result<StoreOutcome> {
        // With a backing file, the pool limit makes room as zswap's shrinker would.
        let put = self
            .pages
            .put_with(worker, page, trigger, || self.shrink_to_accept_threshold())?;
        match put {
            Put::Stored {
                page_ref,
                blob_bytes,
            } => {
                self.insert(key, Location::Memory(page_ref));
                Ok(match page_ref.kind() {
                    RefKind::SameFilled => StoreOutcome::SameFilled,
                    RefKind::Raw => StoreOutcome::Raw,
                    RefKind::Compressed { .. } => StoreOutcome::Compressed { bytes: blob_bytes },
                })
            }
            Put::Rejected(reason) => {
                self.discard(key);
                Ok(StoreOutcome::Rejected(reason))
            }
        }
    }

    fn listed(location: Location) -> bool {
        // Same-filled pages hold no pool memory: nothing to write back or recompress.
        matches!(location, Location::Memory(page_ref) if page_ref.kind() != RefKind::SameFilled)
    }

    fn insert(&self, key: u64, location: Location) {
        let entry = Entry {
            location,
            stored_at_ns: self.now_ns(),
            lru_seq: self.next_lru_seq.fetch_add(1, Relaxed),
            recompress_tried: false,
        };
        let previous = {
            let mut shard = self.table[Self::shard_of(key)].write();
            let previous = shard.insert(key, entry);
            let listed = Self::listed(location);
            if self.track_lru && (listed || previous.is_some()) {
                let mut lru = self.lru.lock();
                if listed {
                    lru.insert(entry.lru_seq, key);
                }
                if let Some(old) = previous {
                    lru.remove(&old.lru_seq);
                }
            }
            previous
        };
        if let Some(old) = previous {
            Counters::add(&self.counters().duplicate_entry_count, 1);
            self.release(key, old.location);
        }
    }

    /// Drops a location that is no longer in the table.
    fn release(&self, key: u64, location: Location) {
        match location {
            Location::Memory(page_ref) => {
                self.pages.free(page_ref);
            }
            Location::WrittenBack(page_ref) => {
                self.written_back_pages.fetch_sub(1, Relaxed);
                self.pages.free(page_ref);
                self.lost.lock().remove(&key);
            }
        }
    }

    fn forget_lru(&self, seq: u64) {
        if self.track_lru {
            self.lru.lock().remove(&seq);
        }
    }

    fn require_lru(&self, operation: &str) -> Result<()> {
        if self.track_lru {
            Ok(())
        } else {
            Err(StoreError::InvalidConfig(format!(
                "{operation} picks the oldest pages from the LRU, which this store does not keep: set StoreConfig::track_lru"
            )))
        }
    }

    /// Removes `key`'s entry from the table and LRU, without touching pool memory.
    fn unlink(&self, key: u64) -> Option<Entry> {
        let mut shard = self.table[Self::shard_of(key)].write();
        let entry = shard.remove(&key)?;
        self.forget_lru(entry.lru_seq);
        Some(entry)
    }

    fn discard(&self, key: u64) {
        if let Some(entry) = self.unlink(key) {
            self.release(key, entry.location);
        }
    }

    /// Decodes `location` into `dst`. Caller holds the table shard lock, so
    /// the blob cannot be freed meanwhile. A written-back page that cannot
    /// be read back is reported lost: counted, listed, and one line on
    /// standard error naming the key, the tier and the cause.
    fn read_location(
        &self,
        worker: &mut Worker,
        key: u64,
        location: Location,
        dst: &mut Page,
    ) -> Result<()> {
        match location {
            Location::Memory(page_ref) => Ok(self.pages.get(worker, page_ref, dst)?),
            Location::WrittenBack(page_ref) => {
                match self.pages.get_page(worker, page_ref, key, dst) {
                    Ok(()) => {
                        // Reported lost while its tier was unreachable (a
                        // node down, a cluster failing over) and read back
                        // exact now: no longer lost.
                        if self.lost.lock().remove(&key).is_some() {
                            let tier = self.pages.tier().map_or("the tier", |t| t.describe());
                            eprintln!(
                                "zpage: store page under key {key}, reported lost, read back from {tier}"
                            );
                        }
                        Ok(())
                    }
                    Err(crate::LoadError::Tier(cause)) => {
                        Counters::add(&self.counters().decompress_fail_count, 1);
                        let tier = self
                            .pages
                            .tier()
                            .map_or("the tier", |t| t.describe())
                            .to_string();
                        if self.lost.lock().insert(key, cause).is_none() {
                            eprintln!("zpage: store page under key {key} is lost: {tier}: {cause}");
                        }
                        Err(StoreError::PageLost { key, tier, cause })
                    }
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// Keys whose written-back page could not be read back, with the cause,
    /// in key order (until the key is stored again or removed, or its page
    /// reads back after all: a tier that was unreachable for a while, as a
    /// Redis Cluster while a replica takes over a dead master).
    pub fn lost_pages(&self) -> Vec<(u64, zpage_tier::ReadFailure)> {
        self.lost.lock().iter().map(|(&k, &c)| (k, c)).collect()
    }

    fn count_load(&self, entry: &Entry) {
        let age = self.now_ns().saturating_sub(entry.stored_at_ns);
        self.counters().record_age(age, self.age_unit_ns);
    }

    /// Copies the page stored under `key` into `dst`, keeping it stored.
    ///
    /// For a page in memory it takes only read locks and neither allocates
    /// nor frees.
    pub fn load(&self, worker: &mut Worker, key: u64, dst: &mut Page) -> Result<()> {
        self.pages.check_worker(worker)?;
        let shard = self.table[Self::shard_of(key)].read();
        let Some(entry) = shard.get(&key).copied() else {
            Counters::add(&self.counters().load_misses, 1);
            return Err(StoreError::NotFound(key));
        };
        self.read_location(worker, key, entry.location, dst)?;
        drop(shard);
        self.count_load(&entry);
        Ok(())
    }

    /// Copies the page stored under `key` into `dst` and drops it from the store
    /// (zswap's exclusive load). On a decode error the entry stays, for inspection.
    pub fn take(&self, worker: &mut Worker, key: u64, dst: &mut Page) -> Result<()> {
        self.pages.check_worker(worker)?;
        let entry = {
            let mut shard = self.table[Self::shard_of(key)].write();
            let Some(entry) = shard.get(&key).copied() else {
                Counters::add(&self.counters().load_misses, 1);
                return Err(StoreError::NotFound(key));
            };
            self.read_location(worker, key, entry.location, dst)?;
            shard.remove(&key);
            self.forget_lru(entry.lru_seq);
            entry
        };
        self.count_load(&entry);
        self.release(key, entry.location);
        Ok(())
    }

    /// Drops the page under `key` without loading it; false when there was none.
    pub fn remove(&self, key: u64) -> bool {
        match self.unlink(key) {
            Some(entry) => {
                Counters::add(&self.counters().invalidated_pages, 1);
                self.release(key, entry.location);
                true
            }
            None => false,
        }
    }

    /// Whether `key` holds a page.
    pub fn contains(&self, key: u64) -> bool {
        self.table[Self::shard_of(key)].read().contains_key(&key)
    }

    /// Pages held.
    pub fn len(&self) -> usize {
        self.table.iter().map(|shard| shard.read().len()).sum()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Describes the page under `key`.
    pub fn entry_info(&self, key: u64) -> Option<EntryInfo> {
        let entry = self.table[Self::shard_of(key)].read().get(&key).copied()?;
        let age_ns = self.now_ns().saturating_sub(entry.stored_at_ns);
        Some(match entry.location {
            Location::Memory(page_ref) => {
                let (kind, codec) = match page_ref.kind() {
                    RefKind::SameFilled => (EntryKind::SameFilled, None),
                    RefKind::Raw => (EntryKind::Raw, None),
                    RefKind::Compressed { codec } => {
                        (EntryKind::Compressed, self.pages.codec(codec).cloned())
                    }
                };
                let stored_bytes = match kind {
                    EntryKind::SameFilled => 0,
                    _ => self.pages.blob_bytes(page_ref).unwrap_or(0) as u64,
                };
                EntryInfo {
                    kind,
                    stored_bytes,
                    codec,
                    age_ns,
                }
            }
            Location::WrittenBack(like) => EntryInfo {
                kind: EntryKind::WrittenBack,
                stored_bytes: 0,
                codec: match like.kind() {
                    RefKind::Compressed { codec } => self.pages.codec(codec).cloned(),
                    _ => None,
                },
                age_ns,
            },
        })
    }

    /// Up to `n` keys of pages in pool memory, least recently stored first
    /// (writeback and recompression candidates; same-filled pages are not
    /// listed). Empty when the store keeps no LRU (`track_lru` off).
    pub fn oldest_keys(&self, n: usize) -> Vec<u64> {
        self.lru.lock().values().take(n).copied().collect()
    }

    /// Moves up to `max_pages` of the least recently stored in-memory pages
    /// (compressed or raw) to the tier below RAM, as zswap's shrinker does;
    /// returns how many moved. Same-filled pages stay: they take no pool memory.
    ///
    /// A page replaced or dropped while its blob was being written is left
    /// alone and its copy freed. On a write error (the tier full, failing or
    /// down) the page stays in memory, `writeback_fail_count` counts it, and
    /// the error is returned.
    pub fn write_back(&self, max_pages: usize) -> Result<usize> {
        self.require_lru("write_back")?;
        if self.pages.tier().is_none() {
            return Err(StoreError::InvalidConfig(
                "write_back needs a tier below RAM: set StoreConfig::backing".into(),
            ));
        }
        let candidates: Vec<(u64, u64)> = self
            .lru
            .lock()
            .iter()
            .map(|(&seq, &key)| (seq, key))
            .take(max_pages.saturating_mul(2))
            .collect();
        let mut moved = 0;
        for (seq, key) in candidates {
            if moved == max_pages {
                break;
            }
            let shard_index = Self::shard_of(key);
            // Look under the table lock; the tier write copies the blob out
            // under the pool's lock, and the result is installed only if
            // the entry is still the one copied.
            let page_ref = {
                let table = self.table[shard_index].read();
                match table.get(&key) {
                    Some(Entry {
                        lru_seq,
                        location: Location::Memory(page_ref),
                        ..
                    }) if *lru_seq == seq && page_ref.in_pool() => *page_ref,
                    _ => continue,
                }
            };
            let tier_ref = match self.pages.move_to_tier(page_ref, key) {
                Ok(Some(tier_ref)) => tier_ref,
                // Freed and its handle reused meanwhile: not this page any more.
                Ok(None) | Err(StoreError::Load(_)) => continue,
                Err(error) => {
                    Counters::add(&self.counters().writeback_fail_count, 1);
                    return Err(error);
                }
            };
            let written_back = Location::WrittenBack(tier_ref);
            let replaced = {
                let mut table = self.table[shard_index].write();
                match table.get_mut(&key) {
                    Some(entry)
                        if entry.lru_seq == seq && entry.location == Location::Memory(page_ref) =>
                    {
                        entry.location = written_back;
                        self.forget_lru(seq);
                        true
                    }
                    _ => false,
                }
            };
            if replaced {
                self.pages.free(page_ref);
                self.written_back_pages.fetch_add(1, Relaxed);
                Counters::add(&self.counters().written_back_pages, 1);
                moved += 1;
            } else {
                self.pages.free(tier_ref);
            }
        }
        if let Some(tier) = self.pages.tier() {
            // Garbage collection ahead of need, while we are at it.
            tier.maintain();
        }
        Ok(moved)
    }

    /// Recompresses up to `max_pages` of the oldest pages (compressed with the
    /// primary codec, or raw) with the configured `recompress_codec`, keeping
    /// a result only when it lands in a smaller 16-byte size class, as zram's
    /// `recompress` does. A page that does not gain is not tried again.
    pub fn recompress(&self, worker: &mut Worker, max_pages: usize) -> Result<RecompressStats> {
        self.pages.check_worker(worker)?;
        self.require_lru("recompress")?;
        if self.pages.config().recompress_codec.is_none() {
            return Err(StoreError::InvalidConfig(
                "recompress needs a second codec: set StoreConfig::recompress_codec".into(),
            ));
        }
        let candidates: Vec<(u64, u64)> = self
            .lru
            .lock()
            .iter()
            .map(|(&seq, &key)| (seq, key))
            .collect();
        let mut stats = RecompressStats::default();
        let mut page = zpage_codec::zeroed_page();
        for (seq, key) in candidates {
            if stats.examined == max_pages as u64 {
                break;
            }
            let shard_index = Self::shard_of(key);
            // Decode under the table lock, as loads do: the entry cannot be
            // freed meanwhile. The result is installed only if the entry is
            // still the one decoded.
            let (page_ref, old_bytes) = {
                let table = self.table[shard_index].read();
                let page_ref = match table.get(&key) {
                    Some(Entry {
                        lru_seq,
                        location: Location::Memory(page_ref),
                        recompress_tried: false,
                        ..
                    }) if *lru_seq == seq
                        && matches!(
                            page_ref.kind(),
                            RefKind::Raw | RefKind::Compressed { codec: 0 }
                        ) =>
                    {
                        *page_ref
                    }
                    _ => continue,
                };
                self.pages.get(worker, page_ref, &mut page)?;
                (page_ref, self.pages.blob_bytes(page_ref)?)
            };
            stats.examined += 1;
            let new_ref = self.pages.recompress_page(worker, &page, old_bytes)?;
            // Measured before it is installed: once installed, another thread
            // may replace and free it.
            let new_bytes = match new_ref {
                Some(new_ref) => self.pages.blob_bytes(new_ref)?,
                None => 0,
            };
            let installed = {
                let mut table = self.table[shard_index].write();
                match table.get_mut(&key) {
                    Some(entry)
                        if entry.lru_seq == seq && entry.location == Location::Memory(page_ref) =>
                    {
                        match new_ref {
                            Some(new_ref) => entry.location = Location::Memory(new_ref),
                            None => entry.recompress_tried = true,
                        }
                        true
                    }
                    _ => false,
                }
            };
            match (installed, new_ref) {
                (true, Some(_)) => {
                    stats.recompressed += 1;
                    stats.bytes_saved += (old_bytes - new_bytes) as u64;
                    self.pages.free(page_ref);
                    Counters::add(&self.counters().recompressed_pages, 1);
                }
                (true, None) => Counters::add(&self.counters().recompress_no_gain_pages, 1),
                (false, Some(new_ref)) => {
                    // The page changed meanwhile: the new blob is not wanted.
                    self.pages.free(new_ref);
                }
                (false, None) => {}
            }
        }
        Ok(stats)
    }

    /// Writes back until the pool is under the accept threshold; false when it could not get there.
    fn shrink_to_accept_threshold(&self) -> bool {
        let (Some((_, accept_pages)), Some(_)) = (self.pages.limit_pages(), self.pages.tier())
        else {
            return false;
        };
        let used = || self.gauges().pool_pages.load(Relaxed);
        while used() > accept_pages {
            match self.write_back(WRITEBACK_BATCH) {
                Ok(0) | Err(_) => {
                    // Nothing left to move, or the file failed: compaction is the last resort.
                    self.compact();
                    return used() <= accept_pages;
                }
                Ok(_) => {}
            }
            if used() > accept_pages {
                // Freed objects may leave sparse spans; compaction turns them into free pages.
                self.compact();
            }
        }
        true
    }

    /// Compacts every pool shard (zram's `compact`); counts released pages in `pages_compacted`.
    pub fn compact(&self) -> CompactStats {
        self.pages.compact()
    }

    /// Memory the pools hold now, in bytes.
    pub fn pool_memory_used_bytes(&self) -> u64 {
        self.pages.pool_memory_used_bytes()
    }

    /// A snapshot of gauges and counters.
    pub fn stats(&self) -> StoreStats {
        let written_back = self.written_back_pages.load(Relaxed);
        let entries = self.len() as u64;
        let table_entry_bytes = (std::mem::size_of::<(u64, Entry)>() + 1) as u64;
        let lru_entry_bytes = 2 * std::mem::size_of::<u64>() as u64;
        crate::stats::snapshot(
            &self.pages,
            written_back,
            self.pages.tier().map_or(0, |t| t.stats().backing_bytes),
            entries * (table_entry_bytes + lru_entry_bytes),
            self.age_unit_ns,
        )
    }
}
