//! Recompression: pages moved from the store's codec to its stronger
//! recompression codec (zram's `recompress`), or stored with it straight
//! away ([`PageStore::put_cold`]), and the `zstd-dict` codec's dictionary,
//! given once.

use super::{PageStore, Put, RejectReason, Worker};
use crate::page_ref::{PageRef, KIND_PRIMARY, KIND_RAW, KIND_RECOMPRESSED};
use crate::stats::{CompressionTrigger, Counters};
use crate::{Result, StoreError};
use std::time::Instant;
use zpage_codec::{Dictionary, Encoded, Encoder, Page, SharedDictionary};

impl PageStore {
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
    /// decoded.
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
}
