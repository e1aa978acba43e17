//! A tier's figures: monotonic counters, one per outcome, and gauges.
//!
//! They are declared once, in the list below: the counters the tiers bump,
//! [`TierStats`] and the description of its numbers a process publishes
//! ([`TierStats::FIELDS`]) all come from it, so a figure added there is
//! counted, reported and published.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Whether a figure of [`TierStats`] is a level or an event count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierFieldKind {
    /// What is true now (goes up and down).
    Gauge,
    /// Events since the tier was made (only grows).
    Counter,
}

/// One number of [`TierStats`], as a process publishes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierField {
    /// Its name in [`TierStats`].
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Level or count.
    pub kind: TierFieldKind,
    /// The name it is published under, ending in its unit as `name` does
    /// (`_ns`, `_bytes`), or naming what it counts. Figures counting one
    /// outcome by cause share one.
    pub family: &'static str,
    /// Its cause, when it shares its family with others.
    pub cause: Option<&'static str>,
}

/// `Some("name")`, or `None` without a name.
macro_rules! optional_name {
    () => {
        None
    };
    ($name:ident) => {
        Some(stringify!($name))
    };
}

/// The published name: the one a figure was given, else its own.
macro_rules! family_name {
    ($field:ident) => {
        stringify!($field)
    };
    ($field:ident $family:ident) => {
        stringify!($family)
    };
}

macro_rules! define_tier_stats {
    (
        counted_gauges { $( $(#[doc = $cgdoc:literal])* $cg:ident $(=> $cgfamily:ident)?, )* }
        reported_gauges { $( $(#[doc = $rgdoc:literal])* $rg:ident, )* }
        optional_gauges { $( $(#[doc = $ogdoc:literal])* $og:ident, )* }
        counters { $( $(#[doc = $cdoc:literal])* $c:ident $(=> $cfamily:ident $(($cause:ident))?)?, )* }
    ) => {
        /// Counters shared by the implementations; relaxed atomics bumped
        /// outside any lock (a fault handler bumps them too).
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub $cg: AtomicU64, )*
            $( pub $c: AtomicU64, )*
        }

        /// A snapshot of a tier's figures.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct TierStats {
            $( $(#[doc = $cgdoc])* pub $cg: u64, )*
            $( $(#[doc = $rgdoc])* pub $rg: u64, )*
            $( $(#[doc = $ogdoc])* pub $og: Option<u64>, )*
            $( $(#[doc = $cdoc])* pub $c: u64, )*
            /// Whether the tier takes writes now.
            pub available: bool,
            /// Why it does not, when it does not.
            pub down_cause: Option<String>,
        }

        impl TierStats {
            /// The figures the shared counters keep; the tier fills in the rest.
            pub(crate) fn from_counters(c: &Counters) -> TierStats {
                TierStats {
                    $( $cg: c.$cg.load(Relaxed), )*
                    $( $c: c.$c.load(Relaxed), )*
                    available: true,
                    ..TierStats::default()
                }
            }

            /// Every number's name, meaning, kind and published name, in the
            /// order of [`TierStats::values`]. `available` and `down_cause`
            /// are not in it: they are the tier's state, not figures.
            pub const FIELDS: &'static [TierField] = &[
                $( TierField {
                    name: stringify!($cg),
                    help: concat!($($cgdoc),*),
                    kind: TierFieldKind::Gauge,
                    family: family_name!($cg $($cgfamily)?),
                    cause: None,
                }, )*
                $( TierField {
                    name: stringify!($rg),
                    help: concat!($($rgdoc),*),
                    kind: TierFieldKind::Gauge,
                    family: stringify!($rg),
                    cause: None,
                }, )*
                $( TierField {
                    name: stringify!($og),
                    help: concat!($($ogdoc),*),
                    kind: TierFieldKind::Gauge,
                    family: stringify!($og),
                    cause: None,
                }, )*
                $( TierField {
                    name: stringify!($c),
                    help: concat!($($cdoc),*),
                    kind: TierFieldKind::Counter,
                    family: family_name!($c $($cfamily)?),
                    cause: optional_name!($($($cause)?)?),
                }, )*
            ];

            /// Every number's value, in the order of [`TierStats::FIELDS`];
            /// `None` for one this tier does not have.
            pub fn values(&self) -> Vec<Option<u64>> {
                vec![
                    $( Some(self.$cg), )*
                    $( Some(self.$rg), )*
                    $( self.$og, )*
                    $( Some(self.$c), )*
                ]
            }
        }
    };
}

// The one list of a tier's figures. A name given after `=>` is the one it
// is published under: what it counts, in the words of the rest of zpage
// (pages written to the tier, read back), with failures of one operation
// published as one family by cause.
define_tier_stats! {
    // Levels the shared counters keep.
    counted_gauges {
        /// Blobs held now.
        pages,
        /// Bytes of the blobs held now as given to `put`: the compressed
        /// sizes, the live payload. The seal's tag and any space the tier itself needs are
        /// not in it; they are overhead in `backing_bytes` and `disk_bytes`.
        stored_bytes,
        /// The slowest successful read.
        get_ns_max => read_max_ns,
    }
    // Levels each tier reads from its own state.
    reported_gauges {
        /// Bytes of the device (or heap) holding data now: sealed blobs, live and
        /// dead, in segments not yet reclaimed.
        backing_bytes,
        /// The bound on `backing_bytes` (0: none).
        capacity_bytes,
    }
    // Levels only some tiers have.
    optional_gauges {
        /// Bytes the tier's file takes on its file system now (`st_blocks` ×
        /// 512, what `du` shows); none (`None`) where there is no such file
        /// (the memory and Redis tiers, a packed tier on a block device).
        disk_bytes,
        /// The logical end of a log-structured tier: the offset just past the
        /// last byte written in the furthest segment in use; none (`None`)
        /// for a tier that is not a log.
        log_end_bytes,
    }
    counters {
        /// Blobs stored, ever.
        puts => writes,
        /// Bytes given to `put`, ever.
        put_bytes => written_bytes,
        /// Blobs read back, ever.
        gets => reads,
        /// Time spent in successful reads (device and opening).
        get_ns => read_ns,
        /// Blobs freed, ever.
        frees,
        /// Puts refused: no room even after garbage collection.
        put_fail_full => write_failures(full),
        /// Puts that failed with a device error.
        put_fail_io => write_failures(io),
        /// Puts refused because the tier was down.
        put_fail_unavailable => write_failures(unavailable),
        /// Reads refused because the tier was down.
        get_fail_unavailable => read_failures(unavailable),
        /// Reads that failed with a device error.
        get_fail_io => read_failures(io),
        /// Reads that found the device shorter than the blob.
        get_fail_truncated => read_failures(truncated),
        /// Reads whose blob failed authentication (tampered, swapped, replayed, corrupt).
        get_fail_authentication => read_failures(authentication),
        /// Reads of a reference that names no live blob of that page.
        get_fail_stale => read_failures(stale),
        /// Reads the tier answered without the blob (a server restarted empty,
        /// or one that evicted it).
        get_fail_missing => read_failures(missing),
        /// Segments reclaimed by garbage collection.
        gc_runs,
        /// Live blobs copied forward by garbage collection.
        gc_moved_blobs,
        /// Bytes of the live blobs garbage collection copied forward.
        gc_moved_bytes,
        /// Emptied segments whose blocks were given back to the file system
        /// (a hole punched over them).
        punched_segments,
        /// Emptied segments the file system would not punch a hole in (their
        /// blocks stay allocated until the segment is written again).
        punch_failures,
    }
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

impl TierStats {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_a_meaning_a_unit_and_one_kind_per_family() {
        for field in TierStats::FIELDS {
            assert!(!field.help.trim().is_empty(), "{} has no help", field.name);
            // Its unit is in its name: a figure published in another unit
            // (nanoseconds as seconds) must not name one in its help.
            assert!(
                !field.help.contains("nanosecond"),
                "{}: the unit is in the name",
                field.name
            );
            // A time keeps its unit in the published name (it is published
            // in seconds), and a name with a unit keeps it.
            for unit in ["_ns", "_bytes"] {
                assert_eq!(
                    field.name.contains(unit),
                    field.family.contains(unit),
                    "{} is published as {}",
                    field.name,
                    field.family
                );
            }
            for other in TierStats::FIELDS {
                if other.family == field.family && other.name != field.name {
                    assert_eq!(other.kind, field.kind, "{} mixes kinds", field.family);
                    assert!(
                        field.cause.is_some()
                            && other.cause.is_some()
                            && field.cause != other.cause,
                        "{} and {} share {} without distinct causes",
                        field.name,
                        other.name,
                        field.family
                    );
                }
            }
        }
    }

    #[test]
    fn values_follow_the_fields() {
        let counters = Counters::default();
        counters.count_put(100);
        counters.count_get(7);
        counters.count_read_failure(crate::ReadFailure::Authentication);
        let stats = TierStats {
            disk_bytes: Some(8192),
            ..TierStats::from_counters(&counters)
        };
        let values = stats.values();
        assert_eq!(values.len(), TierStats::FIELDS.len());
        let value = |name: &str| {
            let i = TierStats::FIELDS
                .iter()
                .position(|f| f.name == name)
                .unwrap();
            values[i]
        };
        assert_eq!(value("puts"), Some(1));
        assert_eq!(value("stored_bytes"), Some(100));
        assert_eq!(value("get_ns_max"), Some(7));
        assert_eq!(value("get_fail_authentication"), Some(1));
        assert_eq!(value("disk_bytes"), Some(8192));
        assert_eq!(value("log_end_bytes"), None, "absent, not 0");
        let authentication = TierStats::FIELDS
            .iter()
            .find(|f| f.name == "get_fail_authentication")
            .unwrap();
        assert_eq!(
            (authentication.family, authentication.cause),
            ("read_failures", Some("authentication"))
        );
    }
}
