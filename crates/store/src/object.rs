//! The object store: store a page and get a one-word reference, load by
//! reference, free. Nothing else.
//!
//! This is the storage Zircon's compression sits on (`VmCompressedStorage`:
//! store, free, read by reference) and what a region keeps per page: the
//! [`PageRef`] lives in the page's own slot, so there is no second index to
//! keep in agreement with the first. The keyed [`crate::Store`] (analyze,
//! writeback, the C users) is a table of keys to references built on top.
//!
//! Lock order: a pool shard's lock is the only lock here. Loads take it for
//! reading (or spin on it, in a signal handler) and neither allocate nor free;
//! stores compress with no lock held and take the write lock only to copy the
//! blob in.

use crate::stats::{CompressionTrigger, Counters, EventCounts};
use crate::{Result, StoreError};
use parking_lot::{RwLock, RwLockReadGuard};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use zpage_codec::{
    fill_page, CodecFamily, CodecSpec, Decoder, Dictionary, Encoded, Encoder, Page,
    RejectThreshold, SharedDictionary, PAGE_SIZE,
};
use zpage_pool::{CompactStats, Handle, Pool, PoolKind};
use zpage_tier::{ReadFailure, Tier, TierRef, READ_BUFFER_BYTES};

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

// ---- The reference word ----------------------------------------------------
//
// ```text
//  63  62      61 60    57  56   55                                         0
// +---+----------+--------+----+--------------------------------------------+
// | 0 |   kind   | shard  | 0  |              pool handle (56 bits)         |  pool object
// +---+----------+--------+----+--------------------------------------------+
// | 0 |   kind   |   0    | 1  |         tier reference (56 bits)           |  in the tier
// +---+----------+--------+----+--------------------------------------------+
// | 1 |          the same-filled word, sign-extended from 63 bits            |  same-filled
// +---+-----------------------------------------------------------------------+
// ```
// Zero is never a reference: a same-filled reference has bit 63 set, and a
// pool handle or tier reference is never zero. Bit 56 marks a blob moved to
// the tier below RAM; its kind field still says how to decode it.

const SAME_FILLED_BIT: u64 = 1 << 63;
const KIND_SHIFT: u32 = 61;
const KIND_BITS: u32 = 2;
const SHARD_SHIFT: u32 = 57;
const SHARD_BITS: u32 = 4;
const RESERVED_BITS: u32 = 1;
const TIER_BIT: u64 = 1 << Handle::BITS;
const _: () = assert!(
    TierRef::BITS == Handle::BITS,
    "a tier reference fills the handle field"
);
const HANDLE_MASK: u64 = (1 << Handle::BITS) - 1;
const _: () = assert!(
    1 + KIND_BITS + SHARD_BITS + RESERVED_BITS + Handle::BITS == 64,
    "the reference layout above no longer fills one word"
);
const _: () = assert!(SHARD_SHIFT == Handle::BITS + RESERVED_BITS);
const _: () = assert!(KIND_SHIFT == SHARD_SHIFT + SHARD_BITS);

/// Pool shards a reference can name.
pub const MAX_POOL_SHARDS: usize = 1 << SHARD_BITS;

/// What a pool object holds (the reference's `kind` field).
const KIND_PRIMARY: u64 = 0;
const KIND_RECOMPRESSED: u64 = 1;
const KIND_RAW: u64 = 2;
/// A same-filled word that does not fit in 63 bits, kept as 8 bytes in the pool.
const KIND_WIDE_WORD: u64 = 3;

/// One stored page, named in one word. Copy it freely; it is only a number
/// until [`PageStore::free`] is called with it, after which it must not be
/// used again (loads of a freed reference are refused, never answered with
/// another page's bytes, as long as the pool's generation counter has not
/// wrapped for that slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRef(std::num::NonZeroU64);

/// The form a stored page is kept in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    /// Every word of the page is the same value: held in the reference itself
    /// (no pool memory), or, for the rare word that does not fit in 63 bits,
    /// as 8 bytes in the pool.
    SameFilled,
    /// A compressed blob made by codec number `codec` (0: the store's codec,
    /// 1: its recompression codec).
    Compressed {
        /// Which codec.
        codec: u8,
    },
    /// The page itself, 4096 bytes in the pool.
    Raw,
}

impl PageRef {
    /// The raw word, for keeping in an atomic.
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    /// Rebuilds a reference from [`PageRef::to_raw`]'s value; `None` for 0,
    /// which never names a page (so 0 can mean "no reference" in a slot).
    pub fn from_raw(raw: u64) -> Option<PageRef> {
        std::num::NonZeroU64::new(raw).map(PageRef)
    }

    fn same_filled(word: u64) -> Option<PageRef> {
        // Representable when bits 63 and 62 agree (the word sign-extends from 63 bits).
        let fits = ((word as i64) << 1 >> 1) as u64 == word;
        fits.then(|| {
            PageRef::from_raw(SAME_FILLED_BIT | (word & !SAME_FILLED_BIT)).expect("bit 63 is set")
        })
    }

    fn pool_object(kind: u64, shard: usize, handle: Handle) -> PageRef {
        let raw = handle.to_raw();
        debug_assert!(raw != 0 && raw & !HANDLE_MASK == 0);
        PageRef::from_raw(
            (kind << KIND_SHIFT) | ((shard as u64) << SHARD_SHIFT) | (raw & HANDLE_MASK),
        )
        .expect("pool handles are never zero")
    }

    /// The kind field of a pool object or a blob in the tier.
    fn blob_kind(self) -> Option<u64> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT == 0).then_some((raw >> KIND_SHIFT) & ((1 << KIND_BITS) - 1))
    }

    /// The kind field of a pool object (`None` for a same-filled word or a
    /// blob in the tier).
    fn pool_kind(self) -> Option<u64> {
        self.blob_kind().filter(|_| self.to_raw() & TIER_BIT == 0)
    }

    /// The reference of a blob moved to the tier below RAM.
    pub fn tier_ref(self) -> Option<TierRef> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT == 0 && raw & TIER_BIT != 0)
            .then(|| TierRef::from_raw(raw & HANDLE_MASK))
            .flatten()
    }

    fn in_tier(kind: u64, tier_ref: TierRef) -> PageRef {
        PageRef::from_raw((kind << KIND_SHIFT) | TIER_BIT | tier_ref.to_raw())
            .expect("tier references are never zero")
    }

    fn shard(self) -> usize {
        ((self.to_raw() >> SHARD_SHIFT) & ((1 << SHARD_BITS) - 1)) as usize
    }

    fn handle(self) -> Handle {
        Handle::from_raw(self.to_raw() & HANDLE_MASK)
    }

    /// The form the page is kept in.
    pub fn kind(self) -> RefKind {
        match self.blob_kind() {
            None | Some(KIND_WIDE_WORD) => RefKind::SameFilled,
            Some(KIND_RAW) => RefKind::Raw,
            Some(KIND_RECOMPRESSED) => RefKind::Compressed { codec: 1 },
            Some(_) => RefKind::Compressed { codec: 0 },
        }
    }

    /// The word of a same-filled page held in the reference itself.
    fn word(self) -> Option<u64> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT != 0).then_some((((raw << 1) as i64) >> 1) as u64)
    }

    /// True when the page takes pool memory.
    pub fn in_pool(self) -> bool {
        self.pool_kind().is_some()
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

/// A read lock taken by spinning on `try_read`, never by parking (parking may
/// allocate the first time a thread waits).
fn spin_read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    loop {
        if let Some(guard) = lock.try_read() {
            return guard;
        }
        std::hint::spin_loop();
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
            .is_some_and(|c| c.family() == CodecFamily::ZstdDict && c.dictionary().is_none());
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

    /// True while the recompression codec waits for its dictionary
    /// ([`PageStore::set_recompress_dictionary`]).
    pub fn wants_recompress_dictionary(&self) -> bool {
        self.recompress_dictionary_later && self.recompress_dictionary.get().is_none()
    }

    /// Gives the `zstd-dict` recompression codec its dictionary, once: from
    /// then on [`PageStore::recompress`] uses it, and every worker decodes
    /// with it (digested here, so loads stay allocation-free). Refused when
    /// the store's recompression codec takes no late dictionary, or already
    /// has one (blobs made with a dictionary need that very dictionary).
    pub fn set_recompress_dictionary(&self, dictionary: Dictionary) -> Result<()> {
        if !self.recompress_dictionary_later {
            return Err(StoreError::InvalidConfig(
                "a recompression dictionary is taken only by a zstd-dict recompress_codec given without one".into(),
            ));
        }
        self.recompress_dictionary
            .set(SharedDictionary::new(dictionary))
            .map_err(|_| {
                StoreError::InvalidConfig(
                    "the recompression dictionary is already set and pages refer to it: it cannot change".into(),
                )
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
        let max_pages = self.config.max_pool_bytes?.div_ceil(PAGE_SIZE as u64);
        let accept_pages = max_pages * u64::from(self.config.accept_threshold_percent) / 100;
        Some((max_pages, accept_pages))
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

    fn free_in_tier(&self, tier_ref: TierRef) {
        if let Some(tier) = &self.config.tier {
            tier.free(tier_ref);
            self.gauges.tiered_pages.fetch_sub(1, Relaxed);
        }
    }

    /// The tier below RAM, when the store has one.
    pub fn tier(&self) -> Option<&Arc<dyn Tier>> {
        self.config.tier.as_ref()
    }

    /// Copies the blob `page_ref` names to the tier, bound to `page` (the
    /// caller's identity of the page: the same value must be given to read
    /// it back), and returns the reference of the copy; `None` for a page
    /// that takes no pool memory. `page_ref` stays valid: the caller installs
    /// the new reference and then frees the old one (or frees the new one if
    /// the page changed meanwhile), as zswap's writeback does. On error
    /// nothing was written and the page stays where it was.
    pub fn move_to_tier(&self, page_ref: PageRef, page: u64) -> Result<Option<PageRef>> {
        let Some(tier) = &self.config.tier else {
            return Err(StoreError::InvalidConfig(
                "writeback needs a tier below RAM: set PageStoreConfig::tier (or StoreConfig::backing)".into(),
            ));
        };
        let Some(kind) = page_ref.pool_kind() else {
            return Ok(None);
        };
        let mut blob = [0u8; PAGE_SIZE];
        let len = self
            .with_blob(page_ref, |bytes| {
                blob[..bytes.len()].copy_from_slice(bytes);
                bytes.len()
            })?
            .unwrap_or(0);
        let tier_ref = tier.put(page, &blob[..len])?;
        self.gauges.tiered_pages.fetch_add(1, Relaxed);
        self.gauges.tiered_bytes.fetch_add(len as u64, Relaxed);
        Ok(Some(PageRef::in_tier(kind, tier_ref)))
    }

    /// Copies the page `page_ref` names into `dst`, from the pool or, for a
    /// blob moved there, from the tier (checked against `page`, the identity
    /// it was moved with). Allocates nothing.
    pub fn get_page(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        page: u64,
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        match page_ref.tier_ref() {
            Some(tier_ref) => self.read_tier(worker, page_ref, tier_ref, page, dst),
            None => self.get(worker, page_ref, dst),
        }
    }

    /// [`PageStore::get_page`] for a signal handler: spins instead of
    /// parking, on the pool's lock and on the tier's (see
    /// [`PageStore::get_in_handler`] for what the caller must guarantee). A
    /// tier whose reads are not async-signal-safe is refused with
    /// [`ReadFailure::Unavailable`].
    pub fn get_page_in_handler(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        page: u64,
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        match page_ref.tier_ref() {
            Some(_) if !self.tier().is_some_and(|t| t.reads_are_async_signal_safe()) => {
                Err(LoadError::Tier(ReadFailure::Unavailable))
            }
            Some(tier_ref) => self.read_tier(worker, page_ref, tier_ref, page, dst),
            None => self.get_in_handler(worker, page_ref, dst),
        }
    }

    /// [`PageStore::get_page_in_handler`] for a tier whose reads are not
    /// async-signal-safe: `fetch` brings the sealed blob into the worker's
    /// preallocated buffer instead of [`Tier::get`] (a region hands the read
    /// to a thread of its own and waits); opening and decoding stay here,
    /// allocation-free. `fetch` is called only for a page in the tier.
    pub fn get_page_in_handler_via(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        page: u64,
        dst: &mut Page,
        fetch: impl FnOnce(TierRef, u64, &mut [u8]) -> std::result::Result<usize, ReadFailure>,
    ) -> std::result::Result<(), LoadError> {
        match page_ref.tier_ref() {
            Some(tier_ref) => self.read_tier_with(worker, page_ref, tier_ref, page, dst, fetch),
            None => self.get_in_handler(worker, page_ref, dst),
        }
    }

    fn read_tier(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        tier_ref: TierRef,
        page: u64,
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        let Some(tier) = &self.config.tier else {
            return Err(LoadError::Tier(ReadFailure::Unavailable));
        };
        self.read_tier_with(worker, page_ref, tier_ref, page, dst, |r, p, buf| {
            tier.get(r, p, buf)
        })
    }

    fn read_tier_with(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        tier_ref: TierRef,
        page: u64,
        dst: &mut Page,
        fetch: impl FnOnce(TierRef, u64, &mut [u8]) -> std::result::Result<usize, ReadFailure>,
    ) -> std::result::Result<(), LoadError> {
        if worker.store_id != self.id {
            return Err(LoadError::ForeignWorker);
        }
        let (Some(_), Some(kind)) = (&self.config.tier, page_ref.blob_kind()) else {
            return Err(LoadError::Tier(ReadFailure::Unavailable));
        };
        let Worker {
            tier_buffer,
            decoders,
            ..
        } = worker;
        let len = fetch(tier_ref, page, tier_buffer).map_err(LoadError::Tier)?;
        self.decode_with(decoders, kind, &tier_buffer[..len], dst)
    }

    /// Copies the page `page_ref` names into `dst`. Takes a pool read lock
    /// (parking) and neither allocates nor frees.
    pub fn get(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        self.read(worker, page_ref, dst, |lock| lock.read())
    }

    /// [`PageStore::get`] for a signal handler: it spins on the pool's read
    /// lock instead of parking. The caller must not be interrupting a thread
    /// that holds that pool's write lock (zpage's own threads block
    /// asynchronous signals while they hold it, and never fault on region
    /// memory under it).
    pub fn get_in_handler(
        &self,
        worker: &mut Worker,
        page_ref: PageRef,
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        self.read(worker, page_ref, dst, spin_read)
    }

    fn read<'a>(
        &'a self,
        worker: &mut Worker,
        page_ref: PageRef,
        dst: &mut Page,
        lock_pool: impl Fn(&'a RwLock<Box<dyn Pool>>) -> RwLockReadGuard<'a, Box<dyn Pool>>,
    ) -> std::result::Result<(), LoadError> {
        if worker.store_id != self.id {
            return Err(LoadError::ForeignWorker);
        }
        if page_ref.tier_ref().is_some() {
            // In the tier: only `get_page` knows the identity it is bound to.
            return Err(LoadError::StaleRef(page_ref.to_raw()));
        }
        let Some(kind) = page_ref.pool_kind() else {
            fill_page(dst, page_ref.word().unwrap_or(0));
            Counters::add(&self.counters.loads, 1);
            return Ok(());
        };
        // Copied out under the read lock and decoded after it: the lock is
        // held for a copy of the blob, not for its decompression, so the
        // writers (stores, frees) rarely wait for readers and readers rarely
        // spin behind a writer.
        let len = {
            let pool = lock_pool(&self.pools[page_ref.shard()]);
            let blob = pool
                .get(page_ref.handle())
                .map_err(|_| LoadError::StaleRef(page_ref.to_raw()))?;
            worker.buffer[..blob.len()].copy_from_slice(blob);
            blob.len()
        };
        let Worker {
            buffer, decoders, ..
        } = worker;
        self.decode_with(decoders, kind, &buffer[..len], dst)
    }

    /// Decodes a blob that a reference of `like`'s kind held (a page read back
    /// from a tier below RAM) into `dst`.
    pub fn decode_blob_like(
        &self,
        worker: &mut Worker,
        like: PageRef,
        blob: &[u8],
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        if worker.store_id != self.id {
            return Err(LoadError::ForeignWorker);
        }
        match like.pool_kind() {
            Some(kind) => self.decode(worker, kind, blob, dst),
            None => {
                fill_page(dst, like.word().unwrap_or(0));
                Ok(())
            }
        }
    }

    fn decode(
        &self,
        worker: &mut Worker,
        kind: u64,
        blob: &[u8],
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        self.decode_with(&mut worker.decoders, kind, blob, dst)
    }

    fn decode_with(
        &self,
        decoders: &mut [Decoder],
        kind: u64,
        blob: &[u8],
        dst: &mut Page,
    ) -> std::result::Result<(), LoadError> {
        match kind {
            KIND_RAW if blob.len() == PAGE_SIZE => dst.copy_from_slice(blob),
            KIND_WIDE_WORD if blob.len() == 8 => {
                let mut word = [0u8; 8];
                word.copy_from_slice(blob);
                fill_page(dst, u64::from_le_bytes(word));
            }
            KIND_PRIMARY | KIND_RECOMPRESSED => {
                let codec = (kind == KIND_RECOMPRESSED) as usize;
                let started = Instant::now();
                let decoded = match decoders.get_mut(codec) {
                    Some(decoder) if codec == 1 && self.recompress_dictionary_later => {
                        // An acquire load: set before any reference to such a blob existed.
                        match self.recompress_dictionary.get() {
                            Some(dictionary) => decoder
                                .decode_with_dictionary(blob, dictionary, dst)
                                .is_ok(),
                            None => false,
                        }
                    }
                    Some(decoder) => decoder.decode(blob, dst).is_ok(),
                    None => false,
                };
                Counters::add(
                    &self.counters.decompression_time_ns,
                    started.elapsed().as_nanos() as u64,
                );
                if !decoded {
                    Counters::add(&self.counters.decompress_fail_count, 1);
                    return Err(LoadError::Corrupt {
                        codec: self
                            .codecs
                            .get(codec)
                            .map_or("unknown", |c| c.family().name()),
                        blob_bytes: blob.len(),
                    });
                }
                Counters::add(&self.counters.decompressions, 1);
            }
            _ => {
                Counters::add(&self.counters.decompress_fail_count, 1);
                return Err(LoadError::Corrupt {
                    codec: if kind == KIND_RAW {
                        "raw"
                    } else {
                        "same-filled"
                    },
                    blob_bytes: blob.len(),
                });
            }
        }
        Counters::add(&self.counters.loads, 1);
        Ok(())
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

    /// Recompresses the page `page_ref` names with the recompression codec,
    /// as zram's `recompress`: returns the new reference when the result lands
    /// in a smaller 16-byte size class (the caller installs it and frees the
    /// old one), `None` when it does not gain. The caller keeps `page_ref`
    /// alive meanwhile.
    pub fn recompress(&self, worker: &mut Worker, page_ref: PageRef) -> Result<Option<PageRef>> {
        self.check_worker(worker)?;
        if !matches!(page_ref.pool_kind(), Some(KIND_PRIMARY) | Some(KIND_RAW)) {
            return Ok(None);
        }
        let old_bytes = self.blob_bytes(page_ref)?;
        let mut page = zpage_codec::zeroed_page();
        self.get(worker, page_ref, &mut page)?;
        self.recompress_page(worker, &page, old_bytes)
    }

    /// The second half of [`PageStore::recompress`], for a page already
    /// decoded (the keyed store decodes under its table lock).
    pub(crate) fn recompress_page(
        &self,
        worker: &mut Worker,
        page: &Page,
        old_bytes: usize,
    ) -> Result<Option<PageRef>> {
        let size_class = |len: usize| len.div_ceil(16);
        let len = match self.cold_compress(worker, page)? {
            Encoded::Compressed(len) if size_class(len) < size_class(old_bytes) => len,
            _ => return Ok(None),
        };
        let shard = worker.pool_shard;
        match self.with_pool(shard, |pool| pool.store(&worker.buffer[..len])) {
            Ok(handle) => {
                let new_ref = PageRef::pool_object(KIND_RECOMPRESSED, shard, handle);
                self.count_in(new_ref, len as u64);
                Ok(Some(new_ref))
            }
            Err(_) => Ok(None),
        }
    }

    /// Compresses `page` into the worker's buffer with the recompression
    /// codec (its encoder made on first use once a late dictionary is set).
    fn cold_compress(&self, worker: &mut Worker, page: &Page) -> Result<Encoded> {
        if worker.recompressor.is_none() && self.recompress_dictionary_later {
            let Some(dictionary) = self.recompress_dictionary.get() else {
                return Err(StoreError::InvalidConfig(
                    "the zstd-dict recompression codec has no dictionary yet: set it with PageStore::set_recompress_dictionary".into(),
                ));
            };
            let codec = self.codecs[1]
                .clone()
                .with_dictionary(dictionary.dictionary().clone())?;
            worker.recompressor = Some(Encoder::new(&codec, self.config.threshold)?);
        }
        let Worker {
            recompressor: Some(recompressor),
            buffer,
            ..
        } = worker
        else {
            return Err(StoreError::InvalidConfig(
                "recompress needs a second codec: set recompress_codec".into(),
            ));
        };
        Ok(recompressor.compress(page, buffer)?)
    }

    /// Stores `page` compressed with the recompression codec straight away
    /// (a page known to be cold), as [`PageStore::put`] otherwise: when the
    /// page is same-filled, when the codec is not ready (no dictionary yet)
    /// or when it does not compress the page.
    pub fn put_cold(
        &self,
        worker: &mut Worker,
        page: &Page,
        trigger: CompressionTrigger,
    ) -> Result<Put> {
        self.check_worker(worker)?;
        if zpage_codec::same_filled_word(page).is_some() || self.wants_recompress_dictionary() {
            return self.put(worker, page, trigger);
        }
        let started = Instant::now();
        let Ok(Encoded::Compressed(len)) = self.cold_compress(worker, page) else {
            return self.put(worker, page, trigger);
        };
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
        Counters::add(
            &counters.compression_time_ns,
            started.elapsed().as_nanos() as u64,
        );
        let shard = worker.pool_shard;
        worker.pool_shard = (shard + 1) % self.pools.len();
        match self.place(shard, &worker.buffer[..len], || false) {
            Ok(handle) => {
                let page_ref = PageRef::pool_object(KIND_RECOMPRESSED, shard, handle);
                self.count_in(page_ref, len as u64);
                Counters::add(&counters.compressed_stores, 1);
                Ok(Put::Stored {
                    page_ref,
                    blob_bytes: len,
                })
            }
            Err(reason) => {
                if reason == RejectReason::AllocFail {
                    Counters::add(&counters.reject_alloc_fail_pages, 1);
                }
                Ok(Put::Rejected(reason))
            }
        }
    }

    /// Bytes of the blob `page_ref` names (0 for a page held in the reference).
    pub fn blob_bytes(&self, page_ref: PageRef) -> Result<usize> {
        Ok(self.with_blob(page_ref, |blob| blob.len())?.unwrap_or(0))
    }

    /// Compacts every pool shard (zram's `compact`); counts released pages
    /// in `pages_compacted`. The shard's lock is taken for one step at a
    /// time (a size class, in the size-class pool), and the CPU offered
    /// between steps, so a fault spinning for a blob there waits for one
    /// step, not for the whole compaction.
    pub fn compact(&self) -> CompactStats {
        let mut total = CompactStats::default();
        for shard in 0..self.pools.len() {
            for step in 0.. {
                let Some(stats) = self.with_pool(shard, |pool| pool.compact_step(step)) else {
                    break;
                };
                total += stats;
                std::thread::yield_now();
            }
        }
        Counters::add(&self.counters.pages_compacted, total.pages_freed);
        total
    }

    /// Memory the pools hold now, in bytes.
    pub fn pool_memory_used_bytes(&self) -> u64 {
        self.gauges.pool_pages.load(Relaxed) * PAGE_SIZE as u64
    }

    /// Bytes of the blobs (and raw pages) held in the pools now: what
    /// [`pool_memory_used_bytes`](Self::pool_memory_used_bytes) would be
    /// with no fragmentation.
    pub fn blob_bytes_held(&self) -> u64 {
        self.gauges.compressed_bytes.load(Relaxed)
    }

    /// Bytes of per-object metadata the pools keep outside their pages.
    pub(crate) fn pool_metadata_bytes(&self) -> u64 {
        self.pools
            .iter()
            .map(|pool| pool.read().stats().metadata_bytes)
            .sum()
    }

    /// The monotonic counters.
    pub fn events(&self) -> EventCounts {
        self.counters.snapshot()
    }

    /// A snapshot of gauges and counters. (The page references themselves
    /// live with the caller: `metadata_bytes` counts only the pools' own.)
    pub fn stats(&self) -> crate::StoreStats {
        crate::stats::snapshot(self, 0, 0, 0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_filled_words_round_trip_through_the_reference() {
        for word in [
            0,
            1,
            u64::MAX,
            0x3fff_ffff_ffff_ffff,
            0xc000_0000_0000_0000,
            0x0000_7fff_dead_beef,
        ] {
            let page_ref = PageRef::same_filled(word).expect("fits in 63 bits");
            assert_eq!(page_ref.kind(), RefKind::SameFilled);
            assert_eq!(page_ref.word(), Some(word));
            assert!(!page_ref.in_pool());
            assert_eq!(PageRef::from_raw(page_ref.to_raw()), Some(page_ref));
        }
        for word in [
            0x8000_0000_0000_0000u64,
            0x4000_0000_0000_0000,
            0x5555_5555_5555_5555,
        ] {
            assert_eq!(PageRef::same_filled(word), None, "{word:#x}");
        }
        assert_eq!(PageRef::from_raw(0), None);
    }

    #[test]
    fn pool_references_keep_kind_shard_and_handle() {
        let handle = Handle::from_raw((1 << Handle::BITS) - 1);
        for (kind, shard) in [
            (KIND_PRIMARY, 0),
            (KIND_RECOMPRESSED, 15),
            (KIND_RAW, 7),
            (KIND_WIDE_WORD, 3),
        ] {
            let page_ref = PageRef::pool_object(kind, shard, handle);
            assert_eq!(page_ref.pool_kind(), Some(kind));
            assert_eq!(page_ref.shard(), shard);
            assert_eq!(page_ref.handle(), handle);
            assert!(page_ref.in_pool());
        }
    }
}
