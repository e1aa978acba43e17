//! A tier's figures: monotonic counters, one per outcome, and gauges.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters shared by the implementations; relaxed atomics bumped outside
/// any lock (a fault handler bumps them too).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Gauge: blobs held now.
    pub pages: AtomicU64,
    /// Gauge: their bytes as given to `put`.
    pub stored_bytes: AtomicU64,
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub get_ns: AtomicU64,
    pub get_ns_max: AtomicU64,
    pub frees: AtomicU64,
    pub put_fail_full: AtomicU64,
    pub put_fail_io: AtomicU64,
    pub put_fail_unavailable: AtomicU64,
    pub get_fail_unavailable: AtomicU64,
    pub get_fail_io: AtomicU64,
    pub get_fail_truncated: AtomicU64,
    pub get_fail_authentication: AtomicU64,
    pub get_fail_stale: AtomicU64,
    pub get_fail_missing: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_moved_blobs: AtomicU64,
    pub gc_moved_bytes: AtomicU64,
    pub punched_segments: AtomicU64,
    pub punch_failures: AtomicU64,
}

impl Counters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// A blob of `blob_len` bytes stored.
    pub fn count_put(&self, blob_len: usize) {
        Self::add(&self.pages, 1);
        Self::add(&self.stored_bytes, blob_len as u64);
        Self::add(&self.puts, 1);
        Self::add(&self.put_bytes, blob_len as u64);
    }

    /// A blob freed, `sealed_len` bytes with its tag.
    pub fn count_free(&self, sealed_len: u64) {
        self.pages.fetch_sub(1, Relaxed);
        self.stored_bytes
            .fetch_sub(sealed_len - crate::TAG_BYTES as u64, Relaxed);
        Self::add(&self.frees, 1);
    }

    /// A tier's `put` around its own `try_put`: refuses a blob larger than a
    /// page, counts the outcome, and keeps `health` (a failure other than a
    /// full or already-down tier takes it down; a success brings it back).
    pub fn accounted_put(
        &self,
        health: &crate::health::Health,
        blob: &[u8],
        try_put: impl FnOnce() -> Result<crate::TierRef, crate::TierError>,
    ) -> Result<crate::TierRef, crate::TierError> {
        check_blob_len(blob)?;
        match try_put() {
            Ok(tier_ref) => {
                health.succeeded();
                self.count_put(blob.len());
                Ok(tier_ref)
            }
            Err(error) => {
                self.count_put_failure(&error);
                match &error {
                    // A full tier is not down: frees make room again.
                    crate::TierError::Full { .. } | crate::TierError::Unavailable { .. } => {}
                    _ => health.failed(&error),
                }
                Err(error)
            }
        }
    }

    pub fn count_get(&self, ns: u64) {
        Self::add(&self.gets, 1);
        Self::add(&self.get_ns, ns);
        self.get_ns_max.fetch_max(ns, Relaxed);
    }

    pub fn count_read_failure(&self, failure: crate::ReadFailure) {
        use crate::ReadFailure::*;
        let counter = match failure {
            Unavailable => &self.get_fail_unavailable,
            Io { .. } => &self.get_fail_io,
            Truncated => &self.get_fail_truncated,
            Authentication => &self.get_fail_authentication,
            Stale | BufferTooSmall => &self.get_fail_stale,
            Missing => &self.get_fail_missing,
        };
        Self::add(counter, 1);
    }

    pub fn count_put_failure(&self, error: &crate::TierError) {
        let counter = match error {
            crate::TierError::Full { .. } => &self.put_fail_full,
            crate::TierError::Unavailable { .. } => &self.put_fail_unavailable,
            _ => &self.put_fail_io,
        };
        Self::add(counter, 1);
    }
}

/// Refuses a blob no tier takes: one larger than an uncompressed page.
pub(crate) fn check_blob_len(blob: &[u8]) -> Result<(), crate::TierError> {
    if blob.len() > crate::MAX_BLOB_BYTES {
        return Err(crate::TierError::InvalidBlob {
            len: blob.len(),
            why: "larger than a page",
        });
    }
    Ok(())
}

/// A snapshot of a tier's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TierStats {
    /// Blobs held now.
    pub pages: u64,
    /// Their bytes as given to `put`: the compressed sizes, the live
    /// payload. The seal's tag and any space the tier itself needs are
    /// not in it; they are overhead in `backing_bytes` and `disk_bytes`.
    pub stored_bytes: u64,
    /// Bytes of the device (or heap) holding data now: sealed blobs, live and
    /// dead, in segments not yet reclaimed.
    pub backing_bytes: u64,
    /// The bound on `backing_bytes` (0: none).
    pub capacity_bytes: u64,
    /// Bytes the tier's file takes on its file system now (`st_blocks` ×
    /// 512, what `du` shows): `None` where there is no such file (the
    /// memory and Redis tiers, a packed tier on a block device).
    pub disk_bytes: Option<u64>,
    /// The logical end of a log-structured tier: the offset just past the
    /// last byte written in the furthest segment in use (`None`: not a log).
    pub log_end_bytes: Option<u64>,
    /// Blobs stored, ever.
    pub puts: u64,
    /// Bytes given to `put`, ever.
    pub put_bytes: u64,
    /// Blobs read back, ever.
    pub gets: u64,
    /// Time spent in successful reads (device and opening), nanoseconds.
    pub get_ns: u64,
    /// The slowest successful read, nanoseconds.
    pub get_ns_max: u64,
    /// Blobs freed, ever.
    pub frees: u64,
    /// Puts refused: no room even after garbage collection.
    pub put_fail_full: u64,
    /// Puts that failed with a device error.
    pub put_fail_io: u64,
    /// Puts refused because the tier was down.
    pub put_fail_unavailable: u64,
    /// Reads refused because the tier was down.
    pub get_fail_unavailable: u64,
    /// Reads that failed with a device error.
    pub get_fail_io: u64,
    /// Reads that found the device shorter than the blob.
    pub get_fail_truncated: u64,
    /// Reads whose blob failed authentication (tampered, swapped, replayed, corrupt).
    pub get_fail_authentication: u64,
    /// Reads of a reference that names no live blob of that page.
    pub get_fail_stale: u64,
    /// Reads the tier answered without the blob (a server restarted empty,
    /// or one that evicted it).
    pub get_fail_missing: u64,
    /// Segments reclaimed by garbage collection.
    pub gc_runs: u64,
    /// Live blobs copied forward by garbage collection.
    pub gc_moved_blobs: u64,
    /// Their bytes.
    pub gc_moved_bytes: u64,
    /// Emptied segments whose blocks were given back to the file system
    /// (a hole punched over them).
    pub punched_segments: u64,
    /// Emptied segments the file system would not punch a hole in (their
    /// blocks stay allocated until the segment is written again).
    pub punch_failures: u64,
    /// Whether the tier takes writes now.
    pub available: bool,
    /// Why it does not, when it does not.
    pub down_cause: Option<String>,
}

impl TierStats {
    pub(crate) fn from_counters(c: &Counters) -> TierStats {
        let get = |a: &AtomicU64| a.load(Relaxed);
        TierStats {
            pages: get(&c.pages),
            stored_bytes: get(&c.stored_bytes),
            puts: get(&c.puts),
            put_bytes: get(&c.put_bytes),
            gets: get(&c.gets),
            get_ns: get(&c.get_ns),
            get_ns_max: get(&c.get_ns_max),
            frees: get(&c.frees),
            put_fail_full: get(&c.put_fail_full),
            put_fail_io: get(&c.put_fail_io),
            put_fail_unavailable: get(&c.put_fail_unavailable),
            get_fail_unavailable: get(&c.get_fail_unavailable),
            get_fail_io: get(&c.get_fail_io),
            get_fail_truncated: get(&c.get_fail_truncated),
            get_fail_authentication: get(&c.get_fail_authentication),
            get_fail_stale: get(&c.get_fail_stale),
            get_fail_missing: get(&c.get_fail_missing),
            gc_runs: get(&c.gc_runs),
            gc_moved_blobs: get(&c.gc_moved_blobs),
            gc_moved_bytes: get(&c.gc_moved_bytes),
            punched_segments: get(&c.punched_segments),
            punch_failures: get(&c.punch_failures),
            available: true,
            ..TierStats::default()
        }
    }

    /// Reads that failed, whatever the cause: each is a page reported lost.
    pub fn get_failures(&self) -> u64 {
        self.get_fail_unavailable
            + self.get_fail_io
            + self.get_fail_truncated
            + self.get_fail_authentication
            + self.get_fail_stale
            + self.get_fail_missing
    }

    /// Bytes on disk per byte of live payload (`disk_bytes / stored_bytes`):
    /// what a stored page costs beyond its compressed size (tags, dead
    /// blobs not yet collected, partly written blocks). `None` without a
    /// file or with nothing stored.
    pub fn disk_bytes_per_payload_byte(&self) -> Option<f64> {
        let disk = self.disk_bytes?;
        (self.stored_bytes > 0).then(|| disk as f64 / self.stored_bytes as f64)
    }

    /// Mean latency of a successful read, nanoseconds (0 before any).
    pub fn mean_get_ns(&self) -> u64 {
        self.get_ns.checked_div(self.gets).unwrap_or(0)
    }
}
