//! Loads: a page back from its reference, from the pool or from the tier
//! below RAM. What a fault handler calls ([`PageStore::get_page_in_handler`]):
//! a load copies the blob out under the pool shard's read lock (spun on in a
//! handler, never parked on) and decodes after it, allocating and freeing
//! nothing, even for a corrupt blob.

use super::{LoadError, PageStore, Worker};
use crate::page_ref::{PageRef, KIND_PRIMARY, KIND_RAW, KIND_RECOMPRESSED, KIND_WIDE_WORD};
use crate::stats::Counters;
use parking_lot::{RwLock, RwLockReadGuard};
use std::time::Instant;
use zpage_codec::{fill_page, Decoder, Page, PAGE_SIZE};
use zpage_pool::Pool;
use zpage_tier::{spin_read, ReadFailure, TierRef};

impl PageStore {
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
}
