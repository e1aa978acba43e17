//! The object store: store a page and get a one-word reference, load by
//! reference, free. Nothing else.
//!
//! This is the storage Zircon's compression sits on (`VmCompressedStorage`:
//! store, free, read by reference) and what a region keeps per page: the
//! [`PageRef`] (module `page_ref`) lives in the page's own slot, so there is
//! no second index to keep in agreement with the first.
//!
//! This file holds the store, its configuration, stores and frees; the
//! other parts are its submodules: `load` (loads, the fault handler's
//! path), `recompress` (the second codec), `tier` (writeback to the tier
//! below RAM) and `compaction`.
//!
//! Lock order: a pool shard's lock is the only lock here. Loads take it for
//! reading (or spin on it, in a signal handler) and neither allocate nor free;
//! stores compress with no lock held and take the write lock only to copy the
//! blob in.

use crate::page_ref::{PageRef, RefKind, KIND_PRIMARY, KIND_RAW, KIND_WIDE_WORD, MAX_POOL_SHARDS};
use crate::stats::{CompressionTrigger, Counters, EventCounts};
use crate::{Result, StoreError};
use parking_lot::RwLock;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use zpage_codec::{
    CodecSpec, Decoder, Encoded, Encoder, Page, RejectThreshold, SharedDictionary, PAGE_SIZE,
};
use zpage_pool::{Handle, Pool, PoolKind};
use zpage_tier::{ReadFailure, Tier, READ_BUFFER_BYTES};

mod compaction;
mod load;
mod recompress;
mod tier;

static NEXT_STORE_ID: AtomicU64 = AtomicU64::new(1);

/// How a [`PageStore`] compresses, packs and limits.
#[derive(Clone, Debug)]
pub struct PageStoreConfig {
    /// The codec new pages are compressed with.
    pub codec: CodecSpec,
    /// A stronger codec for old pages (zram's `recomp_algorithm`); a page's
    /// reference records which of the two made its blob. A `zstd-dict` codec
    /// given without a dictionary gets one later, once, with
    /// [`PageStore::set_recompress_dictionary`] (trained from the store's own
    /// pages); until then nothing is recompressed.
    pub recompress_codec: Option<CodecSpec>,
    /// Blobs at or above this size are not kept compressed.
    pub threshold: RejectThreshold,
    /// Whether pages over the threshold are kept raw (zram's huge pages, zswap
    /// since 6.x) or rejected (old zswap's `reject_compress_poor`).
    pub keep_incompressible: bool,
    /// The allocator packing the blobs.
    pub pool: PoolKind,
    /// Cap on the pool's memory (zswap's `max_pool_percent`, zram's
    /// `mem_limit`); `None` is unlimited.
    pub max_pool_bytes: Option<u64>,
    /// After hitting the cap, refuse stores until the pool is back under this
    /// percentage of it (zswap's `accept_threshold_percent`, default 90).
    pub accept_threshold_percent: u8,
    /// Independent pools (at most [`MAX_POOL_SHARDS`]); concurrent stores on
    /// different workers use different pools. One packs tightest (use it to
    /// compare with zram).
    pub pool_shards: usize,
    /// A tier below RAM that pool blobs can be moved to
    /// ([`PageStore::move_to_tier`]); `None`: pages stay in the pool.
    pub tier: Option<Arc<dyn Tier>>,
}

impl Default for PageStoreConfig {
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
            tier: None,
        }
    }
}

impl PageStoreConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.accept_threshold_percent == 0 || self.accept_threshold_percent > 100 {
            return Err(StoreError::InvalidConfig(format!(
                "accept_threshold_percent is {}: give 1 to 100",
                self.accept_threshold_percent
            )));
        }
        if self.pool_shards == 0 || self.pool_shards > MAX_POOL_SHARDS {
            return Err(StoreError::InvalidConfig(format!(
                "pool_shards is {}: give 1 to {MAX_POOL_SHARDS}",
                self.pool_shards
            )));
        }
        if self.max_pool_bytes == Some(0) {
            return Err(StoreError::InvalidConfig(
                "max_pool_bytes is 0: give a positive limit, or none for unlimited".into(),
            ));
        }
        Ok(())
    }
}

/// Why a page was not stored. The caller keeps the page.
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

/// What `put` did with a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Kept; the reference names it.
    Stored {
        /// The page's reference.
        page_ref: PageRef,
        /// Bytes of pool memory its blob takes (0 for a same-filled page
        /// kept in the reference itself).
        blob_bytes: usize,
    },
    /// Not kept.
    Rejected(RejectReason),
}

/// Why a load failed. Small and `Copy`: building it allocates nothing, so a
/// fault handler can report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The blob did not decode to exactly one page.
    #[error("its {codec} blob of {blob_bytes} bytes does not decode to a page (corrupt compressed data)")]
    Corrupt {
        /// The codec that refused it.
        codec: &'static str,
        /// The blob's length.
        blob_bytes: usize,
    },
    /// The reference names no live pool object (freed, or never issued).
    #[error("its reference {0:#018x} names no live object in the pool")]
    StaleRef(u64),
    /// The blob was moved to the tier below RAM and could not be read back.
    #[error("it was written back to the tier below RAM and cannot be read back: {0}")]
    Tier(ReadFailure),
    /// A worker made for another store was used.
    #[error("the worker belongs to another store")]
    ForeignWorker,
}

/// Per-thread scratch for one store: encoder, decoders and a buffer.
///
/// Every thread that stores or loads makes its own with [`PageStore::worker`];
/// that is what keeps the hot paths free of allocation and shared codec state.
pub struct Worker {
    store_id: u64,
    pub(crate) encoder: Encoder,
    /// The stronger codec for old pages, when the store has one.
    pub(crate) recompressor: Option<Encoder>,
    pub(crate) decoders: Vec<Decoder>,
    pub(crate) buffer: Box<Page>,
    /// A sealed blob read back from the tier (empty without a tier).
    pub(crate) tier_buffer: Box<[u8]>,
    pub(crate) pool_shard: usize,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("store_id", &self.store_id)
            .field("pool_shard", &self.pool_shard)
            .finish()
    }
}

/// Gauges of what the store holds now.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    pub(crate) same_filled_pages: AtomicU64,
    pub(crate) compressed_pages: AtomicU64,
    pub(crate) raw_pages: AtomicU64,
    pub(crate) compressed_bytes: AtomicU64,
    pub(crate) pool_pages: AtomicU64,
    pub(crate) pool_pages_max: AtomicU64,
    /// Pages whose blob is in the tier below RAM.
    pub(crate) tiered_pages: AtomicU64,
    /// Their blobs' bytes.
    pub(crate) tiered_bytes: AtomicU64,
}

/// The object store. `Send + Sync`; share it and give each thread a [`Worker`].
pub struct PageStore {
    id: u64,
    config: PageStoreConfig,
    /// Codec number `i` as recorded in references; 0 is the configured codec.
    codecs: Vec<CodecSpec>,
    /// The recompression codec is `zstd-dict` and its dictionary comes later.
    recompress_dictionary_later: bool,
    /// That dictionary, once set; never changed after (blobs refer to it).
    /// Published before any reference to a blob made with it exists, so a
    /// load that finds such a reference finds it set.
    recompress_dictionary: OnceLock<SharedDictionary>,
    pools: Box<[RwLock<Box<dyn Pool>>]>,
    /// Pool writes in flight, and the flag [`PageStore::pause_writes`] sets:
    /// a Dekker pair, so that once the pause returns no write is half done
    /// and none starts (a process about to `fork()` must not hand its child
    /// a pool lock held by a thread that does not exist there).
    writes: AtomicUsize,
    writes_paused: AtomicBool,
    next_worker: AtomicUsize,
    /// The pool's cap in effect (bytes; `u64::MAX`: none): the configured
    /// `max_pool_bytes`, or less while a user of the store lowers it
    /// ([`PageStore::cap_pool_at`]).
    pool_limit_bytes: AtomicU64,
    pool_reached_full: AtomicBool,
    pub(crate) gauges: Gauges,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for PageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageStore")
            .field("id", &self.id)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PageStore {
    /// A store with `config`; fails on a configuration that cannot work.
    pub fn new(config: PageStoreConfig) -> Result<Self> {
        config.validate()?;
        // Build one encoder now so a bad codec is reported here, not on the first store.
        Encoder::new(&config.codec, config.threshold)?;
        let recompress_dictionary_later = config
            .recompress_codec
            .as_ref()
            .is_some_and(CodecSpec::awaits_dictionary);
        match &config.recompress_codec {
            Some(codec) if recompress_dictionary_later => {
                Decoder::without_dictionary(codec)?;
            }
            Some(codec) => {
                Encoder::new(codec, config.threshold)?;
            }
            None => {}
        }
        let pools = (0..config.pool_shards)
            .map(|_| RwLock::new(config.pool.build()))
            .collect();
        Ok(Self {
            id: NEXT_STORE_ID.fetch_add(1, Relaxed),
            codecs: std::iter::once(config.codec.clone())
                .chain(config.recompress_codec.clone())
                .collect(),
            recompress_dictionary_later,
            recompress_dictionary: OnceLock::new(),
            pools,
            writes: AtomicUsize::new(0),
            writes_paused: AtomicBool::new(false),
            next_worker: AtomicUsize::new(0),
            pool_limit_bytes: AtomicU64::new(config.max_pool_bytes.unwrap_or(u64::MAX)),
            pool_reached_full: AtomicBool::new(false),
            gauges: Gauges::default(),
            counters: Counters::default(),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PageStoreConfig {
        &self.config
    }

    /// The codec a [`RefKind::Compressed`] codec number stands for.
    pub fn codec(&self, number: u8) -> Option<&CodecSpec> {
        self.codecs.get(usize::from(number))
    }

    /// Scratch for one thread. Workers are spread over the pool shards.
    pub fn worker(&self) -> Result<Worker> {
        let decoders = self
            .codecs
            .iter()
            .enumerate()
            .map(|(number, codec)| {
                if number == 1 && self.recompress_dictionary_later {
                    Decoder::without_dictionary(codec)
                } else {
                    Decoder::new(codec)
                }
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Worker {
            store_id: self.id,
            encoder: Encoder::new(&self.config.codec, self.config.threshold)?,
            // With a dictionary still to come, made on first use after it.
            recompressor: match &self.config.recompress_codec {
                Some(codec) if !self.recompress_dictionary_later => {
                    Some(Encoder::new(codec, self.config.threshold)?)
                }
                _ => None,
            },
            decoders,
            buffer: zpage_codec::zeroed_page(),
            tier_buffer: vec![
                0;
                if self.config.tier.is_some() {
                    READ_BUFFER_BYTES
                } else {
                    0
                }
            ]
            .into_boxed_slice(),
            pool_shard: self.next_worker.fetch_add(1, Relaxed) % self.pools.len(),
        })
    }

    pub(crate) fn check_worker(&self, worker: &Worker) -> Result<()> {
        if worker.store_id == self.id {
            Ok(())
        } else {
            Err(StoreError::ForeignWorker)
        }
    }

    /// The pool limit and the accept threshold below it, in pages, as zswap
    /// computes them (max * percent / 100, rounding down); `None` when unlimited.
    pub(crate) fn limit_pages(&self) -> Option<(u64, u64)> {
        let max_pages = self.pool_limit_bytes()?.div_ceil(PAGE_SIZE as u64);
        let accept_pages = max_pages * u64::from(self.config.accept_threshold_percent) / 100;
        Some((max_pages, accept_pages))
    }

    /// The pool's cap in effect: `max_pool_bytes`, or what
    /// [`PageStore::cap_pool_at`] last set if less; `None`: unlimited.
    pub fn pool_limit_bytes(&self) -> Option<u64> {
        Some(self.pool_limit_bytes.load(Relaxed)).filter(|&cap| cap != u64::MAX)
    }

    /// Caps the pool at `bytes` (at least a page), or at the configured
    /// `max_pool_bytes` if that is less, until the next call: for a cap that
    /// follows something outside the store (a region's memory max leaves the
    /// pool what the rest of the process does not use). Stores are refused
    /// at it as at the configured cap, with the same accept threshold.
    pub fn cap_pool_at(&self, bytes: u64) {
        let configured = self.config.max_pool_bytes.unwrap_or(u64::MAX);
        self.pool_limit_bytes
            .store(bytes.max(PAGE_SIZE as u64).min(configured), Relaxed);
    }

    /// True while a store would be refused for the pool's cap (the check of
    /// [`PageStore::pool_over_limit`], without counting a hit): a region's
    /// reclaimer looks before moving pages out it could not store.
    pub fn refusing_stores(&self) -> bool {
        let Some((max_pages, accept_pages)) = self.limit_pages() else {
            return false;
        };
        let used_pages = self.gauges.pool_pages.load(Relaxed);
        used_pages >= max_pages
            || (self.pool_reached_full.load(Relaxed) && used_pages > accept_pages)
    }

    /// zswap's limit check with hysteresis: true when the store must refuse.
    pub(crate) fn pool_over_limit(&self) -> bool {
        let Some((max_pages, accept_pages)) = self.limit_pages() else {
            return false;
        };
        let used_pages = self.gauges.pool_pages.load(Relaxed);
        if used_pages >= max_pages {
            Counters::add(&self.counters.pool_limit_hit_count, 1);
            self.pool_reached_full.store(true, Relaxed);
        } else if self.pool_reached_full.load(Relaxed) && used_pages <= accept_pages {
            self.pool_reached_full.store(false, Relaxed);
        }
        self.pool_reached_full.load(Relaxed)
    }

    /// Runs `op` on pool `shard` under its write lock and keeps the page gauges current.
    ///
    /// The lock is taken by spinning, then yielding, never by parking:
    /// write sections are short (a blob copied in or a free), a writer that
    /// parks makes every reader that arrives meanwhile spin for a cross-CPU
    /// wakeup (20-75 us here), and the first park on a thread makes the lock
    /// library's thread-local record, whose destructor the C library
    /// registers with a `calloc` from the program's allocator. Under `zpage
    /// run` that memory may be an evicted page of a region: the reclaimer,
    /// waiting for this lock with its writer bit set, faulted there and
    /// waited for a read of this very lock (seen as a redis-server hang in
    /// `DEBUG DIGEST`).
    fn with_pool<T>(&self, shard: usize, op: impl FnOnce(&mut dyn Pool) -> T) -> T {
        self.enter_write();
        let result = self.with_pool_unpaused(shard, op);
        self.writes.fetch_sub(1, SeqCst);
        result
    }

    fn enter_write(&self) {
        loop {
            self.writes.fetch_add(1, SeqCst);
            if !self.writes_paused.load(SeqCst) {
                return;
            }
            self.writes.fetch_sub(1, SeqCst);
            while self.writes_paused.load(SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    /// Waits until no pool write is in flight and holds every new one back
    /// (spinning, holding no lock) until [`PageStore::resume_writes`]. Loads
    /// go on. For a `fork()` prepare hook.
    pub fn pause_writes(&self) {
        self.writes_paused.store(true, SeqCst);
        while self.writes.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
    }

    /// Lets writes go on after [`PageStore::pause_writes`].
    pub fn resume_writes(&self) {
        self.writes_paused.store(false, SeqCst);
    }

    /// [`PageStore::resume_writes`] in a child made by `fork()` while writes
    /// were paused: the writers waiting in the parent do not exist here.
    pub fn resume_writes_in_child(&self) {
        self.writes.store(0, SeqCst);
        self.writes_paused.store(false, SeqCst);
    }

    fn with_pool_unpaused<T>(&self, shard: usize, op: impl FnOnce(&mut dyn Pool) -> T) -> T {
        let guard = zpage_tier::spin_write(&self.pools[shard]);
        self.with_pool_locked(guard, op)
    }

    fn with_pool_locked<T>(
        &self,
        mut pool: parking_lot::RwLockWriteGuard<'_, Box<dyn Pool>>,
        op: impl FnOnce(&mut dyn Pool) -> T,
    ) -> T {
        let before = pool.stats().pages;
        let result = op(pool.as_mut());
        let after = pool.stats().pages;
        drop(pool);
        if after >= before {
            let now = self.gauges.pool_pages.fetch_add(after - before, Relaxed) + (after - before);
            self.gauges.pool_pages_max.fetch_max(now, Relaxed);
        } else {
            self.gauges.pool_pages.fetch_sub(before - after, Relaxed);
        }
        result
    }

    /// Stores `page`; see [`PageStore::put_with`].
    pub fn put(
        &self,
        worker: &mut Worker,
        page: &Page,
        trigger: CompressionTrigger,
    ) -> Result<Put> {
        self.put_with(worker, page, trigger, || false)
    }

    /// Stores `page`, counting the compression under `trigger`. At the pool
    /// limit, `make_room` is asked to free pool memory (a writeback); when it
    /// cannot, the page is refused with [`RejectReason::PoolLimit`].
    pub fn put_with(
        &self,
        worker: &mut Worker,
        page: &Page,
        trigger: CompressionTrigger,
        make_room: impl FnOnce() -> bool,
    ) -> Result<Put> {
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
        let shard = worker.pool_shard;
        // The next store goes to the next shard: one worker storing a stream
        // of pages (a reclaimer) spreads them over every shard, so a reader
        // waits for its write lock on one shard in N, not on every load.
        worker.pool_shard = (shard + 1) % self.pools.len();
        let placed = match encoded {
            Ok(Encoded::SameFilled(word)) => match PageRef::same_filled(word) {
                Some(page_ref) => Ok((page_ref, 0)),
                None => self
                    .place(shard, &word.to_le_bytes(), make_room)
                    .map(|handle| (PageRef::pool_object(KIND_WIDE_WORD, shard, handle), 8)),
            },
            Ok(Encoded::Compressed(len)) => self
                .place(shard, &worker.buffer[..len], make_room)
                .map(|handle| (PageRef::pool_object(KIND_PRIMARY, shard, handle), len)),
            Ok(Encoded::Incompressible) if self.config.keep_incompressible => self
                .place(shard, page, make_room)
                .map(|handle| (PageRef::pool_object(KIND_RAW, shard, handle), PAGE_SIZE)),
            Ok(Encoded::Incompressible) => Err(RejectReason::CompressPoor),
            Err(_) => Err(RejectReason::CompressFail),
        };
        match placed {
            Ok((page_ref, blob_bytes)) => {
                self.count_in(page_ref, blob_bytes as u64);
                Counters::add(
                    match page_ref.kind() {
                        RefKind::SameFilled => &counters.same_filled_stores,
                        RefKind::Raw => &counters.raw_stores,
                        RefKind::Compressed { .. } => &counters.compressed_stores,
                    },
                    1,
                );
                Ok(Put::Stored {
                    page_ref,
                    blob_bytes,
                })
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
                Ok(Put::Rejected(reason))
            }
        }
    }

    fn is_wide_word(&self, page_ref: PageRef) -> bool {
        page_ref.pool_kind() == Some(KIND_WIDE_WORD)
    }

    /// Puts a blob in the pool, subject to the limit.
    fn place(
        &self,
        shard: usize,
        blob: &[u8],
        make_room: impl FnOnce() -> bool,
    ) -> std::result::Result<Handle, RejectReason> {
        if self.pool_over_limit() {
            let made_room = make_room() && !self.pool_over_limit();
            if !made_room {
                return Err(RejectReason::PoolLimit);
            }
        }
        self.with_pool(shard, |pool| pool.store(blob))
            .map_err(|_| RejectReason::AllocFail)
    }

    fn gauge_of(&self, page_ref: PageRef) -> &AtomicU64 {
        match page_ref.pool_kind() {
            None | Some(KIND_WIDE_WORD) => &self.gauges.same_filled_pages,
            Some(KIND_RAW) => &self.gauges.raw_pages,
            Some(_) => &self.gauges.compressed_pages,
        }
    }

    fn count_in(&self, page_ref: PageRef, blob_bytes: u64) {
        self.gauge_of(page_ref).fetch_add(1, Relaxed);
        if !self.is_wide_word(page_ref) {
            self.gauges.compressed_bytes.fetch_add(blob_bytes, Relaxed);
        }
    }

    /// Frees the page `page_ref` names; the reference must not be used again.
    /// Returns the bytes of pool memory its blob took.
    pub fn free(&self, page_ref: PageRef) -> usize {
        if let Some(tier_ref) = page_ref.tier_ref() {
            self.free_in_tier(tier_ref);
            return 0;
        }
        self.gauge_of(page_ref).fetch_sub(1, Relaxed);
        if !page_ref.in_pool() {
            return 0;
        }
        // A reference from our own caller is always live; an error here means a
        // caller bug (double free), and leaking the object is the safe reaction.
        let freed = self
            .with_pool(page_ref.shard(), |pool| pool.free(page_ref.handle()))
            .unwrap_or(0);
        if !self.is_wide_word(page_ref) {
            self.gauges
                .compressed_bytes
                .fetch_sub(freed as u64, Relaxed);
        }
        freed
    }

    /// Frees every reference in `refs` (emptied), taking each pool shard's
    /// lock once for all of its references.
    pub fn free_many(&self, refs: &mut Vec<PageRef>) {
        refs.sort_unstable_by_key(|r| r.shard());
        for shard in 0..self.pools.len() {
            let mine: Vec<PageRef> = refs
                .iter()
                .copied()
                .filter(|r| r.in_pool() && r.shard() == shard)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let freed: Vec<usize> = self.with_pool(shard, |pool| {
                mine.iter()
                    .map(|r| pool.free(r.handle()).unwrap_or(0))
                    .collect()
            });
            for (r, bytes) in mine.iter().zip(freed) {
                self.gauge_of(*r).fetch_sub(1, Relaxed);
                if !self.is_wide_word(*r) {
                    self.gauges
                        .compressed_bytes
                        .fetch_sub(bytes as u64, Relaxed);
                }
            }
        }
        for r in refs.iter().filter(|r| !r.in_pool()) {
            match r.tier_ref() {
                Some(tier_ref) => self.free_in_tier(tier_ref),
                None => {
                    self.gauge_of(*r).fetch_sub(1, Relaxed);
                }
            }
        }
        refs.clear();
    }

    /// Runs `f` on the blob `page_ref` names (under the pool's read lock):
    /// for writing it elsewhere. `None` for a page held in the reference.
    pub fn with_blob<T>(
        &self,
        page_ref: PageRef,
        f: impl FnOnce(&[u8]) -> T,
    ) -> std::result::Result<Option<T>, LoadError> {
        if !page_ref.in_pool() {
            return Ok(None);
        }
        let pool = self.pools[page_ref.shard()].read();
        let blob = pool
            .get(page_ref.handle())
            .map_err(|_| LoadError::StaleRef(page_ref.to_raw()))?;
        Ok(Some(f(blob)))
    }

    /// Puts arbitrary bytes in the pool as a blob of `like`'s kind: for tests
    /// and fuzzing of the load path with corrupt blobs. Not for production
    /// use (nothing checks that the bytes decode).
    #[doc(hidden)]
    pub fn put_blob_for_test(
        &self,
        worker: &Worker,
        like: PageRef,
        blob: &[u8],
    ) -> Result<PageRef> {
        let Some(kind) = like.pool_kind() else {
            return Err(StoreError::InvalidConfig(
                "a same-filled reference holds no blob".into(),
            ));
        };
        let shard = worker.pool_shard;
        let handle = self.with_pool(shard, |pool| pool.store(blob))?;
        let page_ref = PageRef::pool_object(kind, shard, handle);
        self.count_in(page_ref, blob.len() as u64);
        Ok(page_ref)
    }

    /// Bytes of the blob `page_ref` names (0 for a page held in the reference).
    pub fn blob_bytes(&self, page_ref: PageRef) -> Result<usize> {
        Ok(self.with_blob(page_ref, |blob| blob.len())?.unwrap_or(0))
    }

    /// The monotonic counters.
    pub fn events(&self) -> EventCounts {
        self.counters.snapshot()
    }

    /// A snapshot of gauges and counters. (The page references themselves
    /// live with the caller: `metadata_bytes` counts only the pools' own.)
    pub fn stats(&self) -> crate::StoreStats {
        crate::stats::snapshot(self)
    }
}
