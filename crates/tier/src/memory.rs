//! The memory tier: sealed blobs in this process's heap. For tests, and the
//! tier a caller gets when none is configured. Blobs are sealed like every
//! tier's, so the same tamper tests apply and the code paths are the same.

use crate::seal::{KeySource, Sealer};
use crate::slot::SlotRef;
use crate::stats::{check_blob_len, Counters, TierStats};
use crate::{spin_read, ReadFailure, Tier, TierError, TierRef};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// How a [`MemoryTier`] is bounded and keyed.
#[derive(Clone, Debug, Default)]
pub struct MemoryTierConfig {
    /// Bound on the sealed bytes it holds (`None`: unbounded).
    pub max_bytes: Option<u64>,
    /// The key.
    pub key: KeySource,
}

#[derive(Debug)]
struct Blob {
    page: u64,
    version: u64,
    generation: u32,
    sealed: Option<Box<[u8]>>,
}

#[derive(Debug, Default)]
struct Slots {
    blobs: Vec<Blob>,
    free: Vec<u32>,
}

/// Sealed blobs in memory.
#[derive(Debug)]
pub struct MemoryTier {
    config: MemoryTierConfig,
    sealer: Sealer,
    slots: RwLock<Slots>,
    used_bytes: AtomicU64,
    counters: Counters,
}

impl MemoryTier {
    /// A memory tier; fails only when the key file cannot be used.
    pub fn new(config: MemoryTierConfig) -> Result<MemoryTier, TierError> {
        Ok(MemoryTier {
            sealer: Sealer::new(&config.key)?,
            config,
            slots: RwLock::new(Slots::default()),
            used_bytes: AtomicU64::new(0),
            counters: Counters::default(),
        })
    }

    /// Overwrites the sealed bytes `tier_ref` names with `f`'s result: for
    /// tamper tests only.
    #[doc(hidden)]
    pub fn tamper_for_test(&self, tier_ref: TierRef, f: impl FnOnce(&mut Vec<u8>)) {
        let slot = SlotRef::decode(tier_ref).slot;
        let mut slots = crate::spin_write(&self.slots);
        if let Some(sealed) = slots.blobs[slot].sealed.as_mut() {
            let mut bytes = sealed.to_vec();
            f(&mut bytes);
            *sealed = bytes.into_boxed_slice();
        }
    }
}

impl Tier for MemoryTier {
    fn describe(&self) -> &str {
        "memory"
    }

    fn put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError> {
        check_blob_len(blob)?;
        let mut sealed = Vec::with_capacity(blob.len() + crate::TAG_BYTES);
        let version = self.sealer.seal(page, blob, &mut sealed)?;
        let len = sealed.len() as u64;
        if let Some(max) = self.config.max_bytes {
            if self.used_bytes.fetch_add(len, Relaxed) + len > max {
                self.used_bytes.fetch_sub(len, Relaxed);
                let error = TierError::Full {
                    tier: "memory".into(),
                    capacity_bytes: max,
                };
                self.counters.count_put_failure(&error);
                return Err(error);
            }
        } else {
            self.used_bytes.fetch_add(len, Relaxed);
        }
        let mut slots = crate::spin_write(&self.slots);
        let slot = match slots.free.pop() {
            Some(slot) => slot,
            None => {
                slots.blobs.push(Blob {
                    page: 0,
                    version: 0,
                    generation: 0,
                    sealed: None,
                });
                (slots.blobs.len() - 1) as u32
            }
        };
        let entry = &mut slots.blobs[slot as usize];
        entry.page = page;
        entry.version = version;
        entry.sealed = Some(sealed.into_boxed_slice());
        let tier_ref = SlotRef::encode(slot, entry.generation);
        drop(slots);
        self.counters.count_put(blob.len());
        Ok(tier_ref)
    }

    fn get(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure> {
        let started = Instant::now();
        let named = SlotRef::decode(tier_ref);
        let result = (|| {
            let slots = spin_read(&self.slots);
            let blob = slots.blobs.get(named.slot).ok_or(ReadFailure::Stale)?;
            let sealed = blob.sealed.as_deref().ok_or(ReadFailure::Stale)?;
            if !named.is_current(blob.generation) || blob.page != page {
                return Err(ReadFailure::Stale);
            }
            let dst = buf
                .get_mut(..sealed.len())
                .ok_or(ReadFailure::BufferTooSmall)?;
            dst.copy_from_slice(sealed);
            let version = blob.version;
            drop(slots);
            self.sealer.open(page, version, dst)
        })();
        match result {
            Ok(_) => self.counters.count_get(started.elapsed().as_nanos() as u64),
            Err(failure) => self.counters.count_read_failure(failure),
        }
        result
    }

    fn free(&self, tier_ref: TierRef) {
        let named = SlotRef::decode(tier_ref);
        let mut slots = crate::spin_write(&self.slots);
        let Some(blob) = slots.blobs.get_mut(named.slot) else {
            return;
        };
        if !named.is_current(blob.generation) {
            return;
        }
        let Some(sealed) = blob.sealed.take() else {
            return;
        };
        blob.generation = blob.generation.wrapping_add(1);
        slots.free.push(named.slot as u32);
        drop(slots);
        self.used_bytes.fetch_sub(sealed.len() as u64, Relaxed);
        self.counters.count_free(sealed.len() as u64);
    }

    fn stats(&self) -> TierStats {
        TierStats {
            backing_bytes: self.used_bytes.load(Relaxed),
            capacity_bytes: self.config.max_bytes.unwrap_or(0),
            ..TierStats::from_counters(&self.counters)
        }
    }

    fn reads_are_async_signal_safe(&self) -> bool {
        true
    }
}
