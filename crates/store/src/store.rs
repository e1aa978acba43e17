//! The store itself.
//!
//! Lock order, outermost first: a table shard, then the LRU, then a pool
//! shard. No path takes them in another order; pool memory is freed only
//! after the table shard lock is released, and compression runs with no lock
//! held. Loads take read locks only (a table shard, then the pool shard that
//! holds the blob), so loads of different pages, and of the same page, run
//! in parallel; they allocate and free nothing.

use crate::stats::{CompressionTrigger, Contents, Counters, StoreStats};
use crate::{Result, StoreConfig, StoreError};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;
use zpage_codec::{fill_page, CodecSpec, Decoder, Encoded, Encoder, Page, PAGE_SIZE};
use zpage_pool::{CompactStats, Handle, Pool, PoolError};

/// Page-table shards: enough that threads working on different pages rarely meet.
const TABLE_SHARDS: usize = 64;

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// Where a stored page's content is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    /// Nothing stored but the repeated word.
    SameFilled(u64),
    /// A blob of `len` bytes in pool `shard`, made by codec number `codec`.
    Compressed {
        shard: u8,
        handle: Handle,
        len: u16,
        codec: u8,
    },
    /// The page itself, 4096 bytes, in pool `shard`.
    Raw { shard: u8, handle: Handle },
    /// In the backing file: slot, blob length, codec (`RAW_CODEC` for a raw page) and CRC-32.
    WrittenBack {
        slot: u32,
        len: u16,
        codec: u8,
        crc: u32,
    },
}

/// Codec number of a raw page in the backing file.
const RAW_CODEC: u8 = u8::MAX;

/// Pages written back per batch when the pool limit is hit.
const WRITEBACK_BATCH: usize = 32;

impl Location {
    fn pool_object(self) -> Option<(usize, Handle)> {
        match self {
            Location::SameFilled(_) | Location::WrittenBack { .. } => None,
            Location::Compressed { shard, handle, .. } | Location::Raw { shard, handle } => {
                Some((usize::from(shard), handle))
            }
        }
    }

    fn blob_bytes(self) -> u64 {
        match self {
            Location::SameFilled(_) | Location::WrittenBack { .. } => 0,
            Location::Compressed { len, .. } => u64::from(len),
            Location::Raw { .. } => PAGE_SIZE as u64,
        }
    }
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

/// Why a page was not stored. The caller keeps the page; any older copy under the key is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// It compressed to the threshold or more and raw storage is off.
    CompressPoor,
    /// The compressor reported an error.
    CompressFail,
    /// The pool could not allocate.
    AllocFail,
    /// The pool is at its limit (or refilling past the accept threshold).
    PoolLimit,
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

/// Per-thread scratch for one store: encoder, decoders and a buffer.
///
/// Every thread that stores or loads makes its own with [`Store::worker`];
/// that is what keeps the hot paths free of allocation and shared codec state.
pub struct Worker {
    store_id: u64,
    encoder: Encoder,
    /// The stronger codec for old pages, when the store has one.
    recompressor: Option<Encoder>,
    decoders: Vec<Decoder>,
    buffer: Box<Page>,
    pool_shard: usize,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("store_id", &self.store_id)
            .field("pool_shard", &self.pool_shard)
            .finish()
    }
}

/// A compressed page store: zswap's front end without the kernel.
///
/// Keys are caller-chosen `u64`s (a page number, a swap slot). `Store` is
/// `Send + Sync`; share it with an `Arc` and give each thread a [`Worker`].
pub struct Store {
    id: u64,
    config: StoreConfig,
    /// Codec number `i` as recorded in entries; 0 is the configured codec.
    codecs: Vec<CodecSpec>,
    table: Box<[RwLock<HashMap<u64, Entry>>]>,
    lru: Mutex<BTreeMap<u64, u64>>,
    pools: Box<[RwLock<Box<dyn Pool>>]>,
    next_lru_seq: AtomicU64,
    next_worker: AtomicUsize,
    pool_reached_full: AtomicBool,
    pool_pages: AtomicU64,
    pool_pages_max: AtomicU64,
    same_filled_pages: AtomicU64,
    compressed_pages: AtomicU64,
    raw_pages: AtomicU64,
    compressed_bytes: AtomicU64,
    written_back_pages: AtomicU64,
    backing: Option<crate::backing::BackingFile>,
    counters: Counters,
    epoch: Instant,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("id", &self.id)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A read lock taken by spinning on `try_read`, never by parking.
fn spin_read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    loop {
        if let Some(guard) = lock.try_read() {
            return guard;
        }
        std::hint::spin_loop();
    }
}

fn signed_delta(before: u64, after: u64) -> i64 {
    after as i64 - before as i64
}

impl Store {
    /// A store with `config`; fails on a configuration that cannot work.
    pub fn new(config: StoreConfig) -> Result<Self> {
        config.validate()?;
        // Build one encoder now so a bad codec is reported here, not on the first store.
        Encoder::new(&config.codec, config.threshold)?;
        if let Some(codec) = &config.recompress_codec {
            Encoder::new(codec, config.threshold)?;
        }
        let backing = config
            .backing
            .as_ref()
            .map(crate::backing::BackingFile::create)
            .transpose()?;
        let pools = (0..config.pool_shards)
            .map(|_| RwLock::new(config.pool.build()))
            .collect();
        Ok(Self {
            id: NEXT_STORE_ID.fetch_add(1, Relaxed),
            codecs: std::iter::once(config.codec.clone())
                .chain(config.recompress_codec.clone())
                .collect(),
            table: (0..TABLE_SHARDS)
                .map(|_| RwLock::new(HashMap::new()))
                .collect(),
            lru: Mutex::new(BTreeMap::new()),
            pools,
            next_lru_seq: AtomicU64::new(0),
            next_worker: AtomicUsize::new(0),
            pool_reached_full: AtomicBool::new(false),
            pool_pages: AtomicU64::new(0),
            pool_pages_max: AtomicU64::new(0),
            same_filled_pages: AtomicU64::new(0),
            compressed_pages: AtomicU64::new(0),
            raw_pages: AtomicU64::new(0),
            compressed_bytes: AtomicU64::new(0),
            written_back_pages: AtomicU64::new(0),
            backing,
            counters: Counters::default(),
            epoch: Instant::now(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Scratch for one thread. Workers are spread over the pool shards.
    pub fn worker(&self) -> Result<Worker> {
        let decoders = self
            .codecs
            .iter()
            .map(Decoder::new)
            .collect::<std::result::Result<_, _>>()?;
        Ok(Worker {
            store_id: self.id,
            encoder: Encoder::new(&self.config.codec, self.config.threshold)?,
            recompressor: self
                .config
                .recompress_codec
                .as_ref()
                .map(|codec| Encoder::new(codec, self.config.threshold))
                .transpose()?,
            decoders,
            buffer: zpage_codec::zeroed_page(),
            pool_shard: self.next_worker.fetch_add(1, Relaxed) % self.pools.len(),
        })
    }

    fn check_worker(&self, worker: &Worker) -> Result<()> {
        if worker.store_id == self.id {
            Ok(())
        } else {
            Err(StoreError::ForeignWorker)
        }
    }

    fn shard_of(key: u64) -> usize {
        // Fibonacci hashing: neighbouring page numbers land in different shards.
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % TABLE_SHARDS
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The pool limit and the accept threshold below it, in pages, as zswap
    /// computes them (max * percent / 100, rounding down); `None` when unlimited.
    fn limit_pages(&self) -> Option<(u64, u64)> {
        let max_pages = self.config.max_pool_bytes?.div_ceil(PAGE_SIZE as u64);
        let accept_pages = max_pages * u64::from(self.config.accept_threshold_percent) / 100;
        Some((max_pages, accept_pages))
    }

    /// zswap's limit check with hysteresis: true when the store must refuse.
    fn pool_over_limit(&self) -> bool {
        let Some((max_pages, accept_pages)) = self.limit_pages() else {
            return false;
        };
        let used_pages = self.pool_pages.load(Relaxed);
        if used_pages >= max_pages {
            Counters::add(&self.counters.pool_limit_hit_count, 1);
            self.pool_reached_full.store(true, Relaxed);
        } else if self.pool_reached_full.load(Relaxed) && used_pages <= accept_pages {
            self.pool_reached_full.store(false, Relaxed);
        }
        self.pool_reached_full.load(Relaxed)
    }

    /// Runs `op` on pool `shard` under its write lock and keeps the page gauges current.
    fn with_pool<T>(&self, shard: usize, op: impl FnOnce(&mut dyn Pool) -> T) -> T {
        let mut pool = self.pools[shard].write();
        let before = pool.stats().pages;
        let result = op(pool.as_mut());
        let after = pool.stats().pages;
        drop(pool);
        let delta = signed_delta(before, after);
        if delta >= 0 {
            let now = self.pool_pages.fetch_add(delta as u64, Relaxed) + delta as u64;
            self.pool_pages_max.fetch_max(now, Relaxed);
        } else {
            self.pool_pages.fetch_sub(delta.unsigned_abs(), Relaxed);
        }
        result
    }

    fn allocate(&self, shard: usize, blob: &[u8]) -> std::result::Result<Handle, PoolError> {
        self.with_pool(shard, |pool| pool.store(blob))
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
        self.check_worker(worker)?;
        let counters = &self.counters;
        Counters::add(&counters.store_attempts, 1);
        Counters::add(
            match trigger {
                CompressionTrigger::Eager => &counters.eager_compressions,
                CompressionTrigger::MemoryPressure => &counters.memory_pressure_compressions,
                CompressionTrigger::CriticalMemory => &counters.critical_memory_compressions,
            },
            1,
        );
        let started = Instant::now();
        let encoded = worker.encoder.encode(page, &mut worker.buffer);
        Counters::add(
            &counters.compression_time_ns,
            started.elapsed().as_nanos() as u64,
        );
        let placed = match encoded {
            Ok(Encoded::SameFilled(word)) => {
                Ok((Location::SameFilled(word), StoreOutcome::SameFilled))
            }
            Ok(Encoded::Compressed(len)) => self
                .place(worker.pool_shard, &worker.buffer[..len])
                .map(|handle| {
                    let location = Location::Compressed {
                        shard: worker.pool_shard as u8,
                        handle,
                        len: len as u16,
                        codec: 0,
                    };
                    (location, StoreOutcome::Compressed { bytes: len })
                }),
            Ok(Encoded::Incompressible) if self.config.keep_incompressible => {
                self.place(worker.pool_shard, page).map(|handle| {
                    let location = Location::Raw {
                        shard: worker.pool_shard as u8,
                        handle,
                    };
                    (location, StoreOutcome::Raw)
                })
            }
            Ok(Encoded::Incompressible) => Err(RejectReason::CompressPoor),
            Err(_) => Err(RejectReason::CompressFail),
        };
        match placed {
            Ok((location, outcome)) => {
                self.insert(key, location);
                Ok(outcome)
            }
            Err(reason) => {
                let counter = match reason {
                    RejectReason::CompressPoor => Some(&counters.reject_compress_poor_pages),
                    RejectReason::CompressFail => Some(&counters.reject_compress_fail_pages),
                    RejectReason::AllocFail => Some(&counters.reject_alloc_fail_pages),
                    // Counted in `pool_over_limit`, as zswap counts `pool_limit_hit`.
                    RejectReason::PoolLimit => None,
                };
                if let Some(counter) = counter {
                    Counters::add(counter, 1);
                }
                self.discard(key);
                Ok(StoreOutcome::Rejected(reason))
            }
        }
    }

    /// Puts a blob in the pool, subject to the limit.
    fn place(&self, shard: usize, blob: &[u8]) -> std::result::Result<Handle, RejectReason> {
        if self.pool_over_limit() {
            // With a backing file, make room as zswap's shrinker would; without one, refuse.
            let made_room = self.shrink_to_accept_threshold() && !self.pool_over_limit();
            if !made_room {
                return Err(RejectReason::PoolLimit);
            }
        }
        self.allocate(shard, blob)
            .map_err(|_| RejectReason::AllocFail)
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
            // Same-filled pages hold no pool memory: nothing to write back or recompress.
            let listed = !matches!(location, Location::SameFilled(_));
            if self.config.track_lru && (listed || previous.is_some()) {
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
        self.count_in(location);
        match location {
            Location::SameFilled(_) => Counters::add(&self.counters.same_filled_stores, 1),
            Location::Compressed { .. } => Counters::add(&self.counters.compressed_stores, 1),
            Location::Raw { .. } => Counters::add(&self.counters.raw_stores, 1),
            Location::WrittenBack { .. } => {}
        }
        if let Some(old) = previous {
            Counters::add(&self.counters.duplicate_entry_count, 1);
            self.release(old.location);
        }
    }

    fn gauge_of(&self, location: Location) -> &AtomicU64 {
        match location {
            Location::SameFilled(_) => &self.same_filled_pages,
            Location::Compressed { .. } => &self.compressed_pages,
            Location::Raw { .. } => &self.raw_pages,
            Location::WrittenBack { .. } => &self.written_back_pages,
        }
    }

    fn count_in(&self, location: Location) {
        self.gauge_of(location).fetch_add(1, Relaxed);
        self.compressed_bytes
            .fetch_add(location.blob_bytes(), Relaxed);
    }

    /// Drops a location that is no longer in the table: gauges, then pool memory.
    fn release(&self, location: Location) {
        self.gauge_of(location).fetch_sub(1, Relaxed);
        self.compressed_bytes
            .fetch_sub(location.blob_bytes(), Relaxed);
        if let Some((shard, handle)) = location.pool_object() {
            // A handle from our own table is always live; an error here means a pool bug,
            // and leaking the object is the safe reaction.
            let _ = self.with_pool(shard, |pool| pool.free(handle));
        }
        if let (Location::WrittenBack { slot, .. }, Some(backing)) = (location, &self.backing) {
            backing.release(slot);
        }
    }

    fn forget_lru(&self, seq: u64) {
        if self.config.track_lru {
            self.lru.lock().remove(&seq);
        }
    }

    fn require_lru(&self, operation: &str) -> Result<()> {
        if self.config.track_lru {
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
            self.release(entry.location);
        }
    }

    /// Decodes `location` into `dst`. Caller holds the table shard lock, so the blob cannot be freed meanwhile.
    fn read_location(&self, worker: &mut Worker, location: Location, dst: &mut Page) -> Result<()> {
        self.read_location_with(worker, location, dst, |lock| lock.read())
    }

    /// [`Store::read_location`] with the pool shard's read lock taken by `lock_pool`.
    fn read_location_with<'a>(
        &'a self,
        worker: &mut Worker,
        location: Location,
        dst: &mut Page,
        lock_pool: impl Fn(&'a RwLock<Box<dyn Pool>>) -> RwLockReadGuard<'a, Box<dyn Pool>>,
    ) -> Result<()> {
        match location {
            Location::SameFilled(word) => fill_page(dst, word),
            Location::Raw { shard, handle } => {
                let pool = lock_pool(&self.pools[usize::from(shard)]);
                dst.copy_from_slice(pool.get(handle)?);
            }
            Location::Compressed {
                shard,
                handle,
                codec,
                ..
            } => {
                let pool = lock_pool(&self.pools[usize::from(shard)]);
                let blob = pool.get(handle)?;
                let started = Instant::now();
                let decoded = worker.decoders[usize::from(codec)].decode(blob, dst);
                Counters::add(
                    &self.counters.decompression_time_ns,
                    started.elapsed().as_nanos() as u64,
                );
                if let Err(error) = decoded {
                    Counters::add(&self.counters.decompress_fail_count, 1);
                    return Err(error.into());
                }
                Counters::add(&self.counters.decompressions, 1);
            }
            Location::WrittenBack {
                slot,
                len,
                codec,
                crc,
            } => {
                let backing = self
                    .backing
                    .as_ref()
                    .expect("written-back entries imply a backing file");
                let fail = |error: StoreError| {
                    Counters::add(&self.counters.decompress_fail_count, 1);
                    error
                };
                if codec == RAW_CODEC {
                    backing.read(slot, crc, dst).map_err(fail)?;
                } else {
                    let blob = &mut worker.buffer[..usize::from(len)];
                    backing.read(slot, crc, blob).map_err(fail)?;
                    worker.decoders[usize::from(codec)]
                        .decode(blob, dst)
                        .map_err(|e| fail(e.into()))?;
                    Counters::add(&self.counters.decompressions, 1);
                }
            }
        }
        Ok(())
    }

    fn count_load(&self, entry: &Entry) {
        Counters::add(&self.counters.loads, 1);
        let age = self.now_ns().saturating_sub(entry.stored_at_ns);
        self.counters.record_age(age, self.config.age_unit_ns);
    }

    /// Copies the page stored under `key` into `dst`, keeping it stored.
    ///
    /// Takes only read locks and neither allocates nor frees, so it may run in
    /// a fault handler on a thread that is not itself inside the store.
    pub fn load(&self, worker: &mut Worker, key: u64, dst: &mut Page) -> Result<()> {
        self.check_worker(worker)?;
        let shard = self.table[Self::shard_of(key)].read();
        let Some(entry) = shard.get(&key).copied() else {
            Counters::add(&self.counters.load_misses, 1);
            return Err(StoreError::NotFound(key));
        };
        self.read_location(worker, entry.location, dst)?;
        drop(shard);
        self.count_load(&entry);
        Ok(())
    }

    /// [`Store::load`] for a signal handler: it never parks a thread (parking
    /// may allocate the first time a thread waits) and spins on the read locks
    /// instead, so a writer on another thread delays it but cannot deadlock it.
    /// The caller must not be interrupting a thread that holds a store lock.
    /// Pages in the backing file are refused with [`StoreError::WouldBlock`]:
    /// reading them is file I/O, which does not belong in a fault handler.
    pub fn load_without_parking(
        &self,
        worker: &mut Worker,
        key: u64,
        dst: &mut Page,
    ) -> Result<()> {
        self.check_worker(worker)?;
        let shard = spin_read(&self.table[Self::shard_of(key)]);
        let Some(entry) = shard.get(&key).copied() else {
            Counters::add(&self.counters.load_misses, 1);
            return Err(StoreError::NotFound(key));
        };
        if matches!(entry.location, Location::WrittenBack { .. }) {
            return Err(StoreError::WouldBlock(key));
        }
        self.read_location_with(worker, entry.location, dst, spin_read)?;
        drop(shard);
        self.count_load(&entry);
        Ok(())
    }

    /// Copies the page stored under `key` into `dst` and drops it from the store
    /// (zswap's exclusive load). On a decode error the entry stays, for inspection.
    pub fn take(&self, worker: &mut Worker, key: u64, dst: &mut Page) -> Result<()> {
        self.check_worker(worker)?;
        let entry = {
            let mut shard = self.table[Self::shard_of(key)].write();
            let Some(entry) = shard.get(&key).copied() else {
                Counters::add(&self.counters.load_misses, 1);
                return Err(StoreError::NotFound(key));
            };
            self.read_location(worker, entry.location, dst)?;
            shard.remove(&key);
            self.forget_lru(entry.lru_seq);
            entry
        };
        self.count_load(&entry);
        self.release(entry.location);
        Ok(())
    }

    /// Drops the page under `key` without loading it; false when there was none.
    pub fn remove(&self, key: u64) -> bool {
        match self.unlink(key) {
            Some(entry) => {
                Counters::add(&self.counters.invalidated_pages, 1);
                self.release(entry.location);
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
        let (kind, codec) = match entry.location {
            Location::SameFilled(_) => (EntryKind::SameFilled, None),
            Location::Compressed { codec, .. } => (
                EntryKind::Compressed,
                Some(self.codecs[usize::from(codec)].clone()),
            ),
            Location::Raw { .. } => (EntryKind::Raw, None),
            Location::WrittenBack { codec, .. } => (
                EntryKind::WrittenBack,
                self.codecs.get(usize::from(codec)).cloned(),
            ),
        };
        Some(EntryInfo {
            kind,
            stored_bytes: entry.location.blob_bytes(),
            codec,
            age_ns: self.now_ns().saturating_sub(entry.stored_at_ns),
        })
    }

    /// Up to `n` keys of pages in pool memory, least recently stored first
    /// (writeback and recompression candidates; same-filled pages are not
    /// listed). Empty when the store keeps no LRU (`track_lru` off).
    pub fn oldest_keys(&self, n: usize) -> Vec<u64> {
        self.lru.lock().values().take(n).copied().collect()
    }

    /// Moves up to `max_pages` of the least recently stored in-memory pages
    /// (compressed or raw) to the backing file, as zswap's shrinker does;
    /// returns how many moved. Same-filled pages stay: they take no pool memory.
    ///
    /// A page replaced or dropped while its blob was being written is left
    /// alone and its slot freed. On a write error the page stays in memory,
    /// `writeback_fail_count` counts it, and the error is returned.
    pub fn write_back(&self, max_pages: usize) -> Result<usize> {
        self.require_lru("write_back")?;
        let backing = self.backing.as_ref().ok_or_else(|| {
            StoreError::InvalidConfig(
                "write_back needs a backing file: set StoreConfig::backing".into(),
            )
        })?;
        let candidates: Vec<(u64, u64)> = self
            .lru
            .lock()
            .iter()
            .map(|(&seq, &key)| (seq, key))
            .take(max_pages.saturating_mul(2))
            .collect();
        let mut blob = Vec::with_capacity(PAGE_SIZE);
        let mut moved = 0;
        for (seq, key) in candidates {
            if moved == max_pages {
                break;
            }
            let shard_index = Self::shard_of(key);
            // Copy the blob under the table lock, as loads do: the entry cannot be freed meanwhile.
            let (location, codec) = {
                let table = self.table[shard_index].read();
                let location = match table.get(&key) {
                    Some(entry) if entry.lru_seq == seq => entry.location,
                    _ => continue,
                };
                let (codec, shard, handle) = match location {
                    Location::Compressed {
                        codec,
                        shard,
                        handle,
                        ..
                    } => (codec, shard, handle),
                    Location::Raw { shard, handle } => (RAW_CODEC, shard, handle),
                    Location::SameFilled(_) | Location::WrittenBack { .. } => continue,
                };
                blob.clear();
                blob.extend_from_slice(self.pools[usize::from(shard)].read().get(handle)?);
                (location, codec)
            };
            let (slot, crc) = match backing.write(&blob) {
                Ok(written) => written,
                Err(error) => {
                    Counters::add(&self.counters.writeback_fail_count, 1);
                    return Err(error);
                }
            };
            let written_back = Location::WrittenBack {
                slot,
                len: blob.len() as u16,
                codec,
                crc,
            };
            let replaced = {
                let mut table = self.table[shard_index].write();
                match table.get_mut(&key) {
                    Some(entry) if entry.lru_seq == seq && entry.location == location => {
                        entry.location = written_back;
                        self.forget_lru(seq);
                        true
                    }
                    _ => false,
                }
            };
            if replaced {
                self.release(location);
                self.count_in(written_back);
                Counters::add(&self.counters.written_back_pages, 1);
                moved += 1;
            } else {
                backing.release(slot);
            }
        }
        Ok(moved)
    }

    /// Recompresses up to `max_pages` of the oldest pages (compressed with the
    /// primary codec, or raw) with the configured `recompress_codec`, keeping
    /// a result only when it lands in a smaller 16-byte size class, as zram's
    /// `recompress` does. A page that does not gain is not tried again.
    pub fn recompress(&self, worker: &mut Worker, max_pages: usize) -> Result<RecompressStats> {
        self.check_worker(worker)?;
        self.require_lru("recompress")?;
        if worker.recompressor.is_none() {
            return Err(StoreError::InvalidConfig(
                "recompress needs a second codec: set StoreConfig::recompress_codec".into(),
            ));
        }
        const SECONDARY: u8 = 1;
        let size_class = |len: u64| len.div_ceil(16);
        let candidates: Vec<(u64, u64)> = self
            .lru
            .lock()
            .iter()
            .map(|(&seq, &key)| (seq, key))
            .collect();
        let mut page = zpage_codec::zeroed_page();
        let mut stats = RecompressStats::default();
        for (seq, key) in candidates {
            if stats.examined == max_pages as u64 {
                break;
            }
            let shard_index = Self::shard_of(key);
            let location = {
                let table = self.table[shard_index].read();
                let entry = match table.get(&key) {
                    Some(entry) if entry.lru_seq == seq && !entry.recompress_tried => *entry,
                    _ => continue,
                };
                match entry.location {
                    Location::Compressed { codec, .. } if codec != SECONDARY => {}
                    Location::Raw { .. } => {}
                    _ => continue,
                }
                self.read_location(worker, entry.location, &mut page)?;
                entry.location
            };
            stats.examined += 1;
            let recompressor = worker.recompressor.as_mut().expect("checked above");
            let shard = worker.pool_shard;
            let gained = match recompressor.compress(&page, &mut worker.buffer)? {
                Encoded::Compressed(len)
                    if size_class(len as u64) < size_class(location.blob_bytes()) =>
                {
                    Some(len)
                }
                _ => None,
            };
            let new_location = match gained {
                Some(len) => match self.allocate(shard, &worker.buffer[..len]) {
                    Ok(handle) => Some(Location::Compressed {
                        shard: shard as u8,
                        handle,
                        len: len as u16,
                        codec: SECONDARY,
                    }),
                    Err(_) => None,
                },
                None => None,
            };
            let installed = {
                let mut table = self.table[shard_index].write();
                match table.get_mut(&key) {
                    Some(entry) if entry.lru_seq == seq && entry.location == location => {
                        match new_location {
                            Some(new_location) => entry.location = new_location,
                            None => entry.recompress_tried = true,
                        }
                        true
                    }
                    _ => false,
                }
            };
            match (installed, new_location) {
                (true, Some(new_location)) => {
                    stats.recompressed += 1;
                    stats.bytes_saved += location.blob_bytes() - new_location.blob_bytes();
                    self.release(location);
                    self.count_in(new_location);
                    Counters::add(&self.counters.recompressed_pages, 1);
                }
                (true, None) => Counters::add(&self.counters.recompress_no_gain_pages, 1),
                (false, Some(new_location)) => {
                    // The page changed meanwhile: the new blob is not wanted.
                    if let Some((shard, handle)) = new_location.pool_object() {
                        let _ = self.with_pool(shard, |pool| pool.free(handle));
                    }
                }
                (false, None) => {}
            }
        }
        Ok(stats)
    }

    /// Writes back until the pool is under the accept threshold; false when it could not get there.
    fn shrink_to_accept_threshold(&self) -> bool {
        let (Some((_, accept_pages)), Some(_)) = (self.limit_pages(), &self.backing) else {
            return false;
        };
        while self.pool_pages.load(Relaxed) > accept_pages {
            match self.write_back(WRITEBACK_BATCH) {
                Ok(0) | Err(_) => {
                    // Nothing left to move, or the file failed: compaction is the last resort.
                    self.compact();
                    return self.pool_pages.load(Relaxed) <= accept_pages;
                }
                Ok(_) => {}
            }
            if self.pool_pages.load(Relaxed) > accept_pages {
                // Freed objects may leave sparse spans; compaction turns them into free pages.
                self.compact();
            }
        }
        true
    }

    /// Compacts every pool shard (zram's `compact`); counts released pages in `pages_compacted`.
    pub fn compact(&self) -> CompactStats {
        let mut total = CompactStats::default();
        for shard in 0..self.pools.len() {
            let stats = self.with_pool(shard, |pool| pool.compact());
            total.objects_moved += stats.objects_moved;
            total.pages_freed += stats.pages_freed;
        }
        Counters::add(&self.counters.pages_compacted, total.pages_freed);
        total
    }

    /// Memory the pools hold now, in bytes.
    pub fn pool_memory_used_bytes(&self) -> u64 {
        self.pool_pages.load(Relaxed) * PAGE_SIZE as u64
    }

    /// A snapshot of gauges and counters.
    pub fn stats(&self) -> StoreStats {
        let mut pool_metadata = 0;
        for pool in self.pools.iter() {
            pool_metadata += pool.read().stats().metadata_bytes;
        }
        let same = self.same_filled_pages.load(Relaxed);
        let compressed = self.compressed_pages.load(Relaxed);
        let raw = self.raw_pages.load(Relaxed);
        let written_back = self.written_back_pages.load(Relaxed);
        let in_memory = same + compressed + raw;
        let stored = in_memory + written_back;
        let compressed_bytes = self.compressed_bytes.load(Relaxed);
        let used = self.pool_memory_used_bytes();
        let table_entry_bytes = (std::mem::size_of::<(u64, Entry)>() + 1) as u64;
        let lru_entry_bytes = 2 * std::mem::size_of::<u64>() as u64;
        StoreStats {
            contents: Contents {
                stored_pages: stored,
                same_filled_pages: same,
                compressed_pages: compressed,
                raw_pages: raw,
                written_back_pages: written_back,
                backing_used_bytes: self.backing.as_ref().map_or(0, |b| b.used_bytes()),
                uncompressed_bytes: in_memory * PAGE_SIZE as u64,
                compressed_bytes,
                pool_memory_used_bytes: used,
                pool_memory_used_max_bytes: self.pool_pages_max.load(Relaxed) * PAGE_SIZE as u64,
                pool_memory_limit_bytes: self.config.max_pool_bytes.unwrap_or(0),
                pool_fragmentation_bytes: used.saturating_sub(compressed_bytes),
                metadata_bytes: pool_metadata + stored * (table_entry_bytes + lru_entry_bytes),
            },
            events: self.counters.snapshot(),
            age_unit_ns: self.config.age_unit_ns,
        }
    }
}
