//! Where a fault's time goes, part by part (the `fault-profile` feature;
//! without it every mark compiles to nothing). Process-wide sums of relaxed
//! atomics, so the fault path can add to them; read with [`fault_profile`].
//! `cargo bench -p zpage-region --bench fault_cost --features fault-profile`
//! prints the table the crate's README quotes.

/// The parts of a fault (and of the reclaimer's work) that are timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// From handler entry to the region found (the region table's lookup).
    Dispatch,
    /// A faulting thread dropping a clean page to make room (MOVE out,
    /// poison marker).
    EvictOnFault,
    /// A faulting thread waiting at the hard limit.
    Throttle,
    /// Finding the blob and decompressing it.
    Load,
    /// `UFFDIO_COPY` of the page (zero fills: `UFFDIO_ZEROPAGE`).
    Install,
    /// The whole of `resolve` (everything above but dispatch, plus the state
    /// word, the aging bookkeeping and the admission record).
    Resolve,
    /// The reclaimer moving a page out (`UFFDIO_MOVE` and the poison marker).
    EvictInBackground,
    /// The reclaimer compressing a staged page into the pool.
    Compress,
    /// Discarding a batch of staging slots (`MADV_DONTNEED`), per slot.
    DiscardPerSlot,
}

/// Every part, in table order.
pub const PARTS: [Part; 9] = [
    Part::Dispatch,
    Part::EvictOnFault,
    Part::Throttle,
    Part::Load,
    Part::Install,
    Part::Resolve,
    Part::EvictInBackground,
    Part::Compress,
    Part::DiscardPerSlot,
];

impl Part {
    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Part::Dispatch => "handler entry to region found",
            Part::EvictOnFault => "clean eviction by the faulting thread",
            Part::Throttle => "wait at the hard limit",
            Part::Load => "blob lookup and decompression",
            Part::Install => "UFFDIO_COPY / ZEROPAGE",
            Part::Resolve => "resolve, in all",
            Part::EvictInBackground => "reclaimer: MOVE out and poison",
            Part::Compress => "reclaimer: compression into the pool",
            Part::DiscardPerSlot => "staging discard, per slot",
        }
    }
}

#[cfg(feature = "fault-profile")]
mod enabled {
    use super::{Part, PARTS};
    use std::sync::atomic::{AtomicU64, Ordering};

    static COUNT: [AtomicU64; PARTS.len()] = [const { AtomicU64::new(0) }; PARTS.len()];
    static TOTAL_NS: [AtomicU64; PARTS.len()] = [const { AtomicU64::new(0) }; PARTS.len()];

    /// Adds one occurrence of `part` that took `ns` (`n` units of it).
    pub fn add(part: Part, ns: u64, n: u64) {
        COUNT[part as usize].fetch_add(n, Ordering::Relaxed);
        TOTAL_NS[part as usize].fetch_add(ns, Ordering::Relaxed);
    }

    /// `(part, occurrences, total nanoseconds)` for every part.
    pub fn fault_profile() -> Vec<(Part, u64, u64)> {
        PARTS
            .iter()
            .map(|&p| {
                (
                    p,
                    COUNT[p as usize].load(Ordering::Relaxed),
                    TOTAL_NS[p as usize].load(Ordering::Relaxed),
                )
            })
            .collect()
    }

    /// Zeroes every part.
    pub fn reset_fault_profile() {
        for i in 0..PARTS.len() {
            COUNT[i].store(0, Ordering::Relaxed);
            TOTAL_NS[i].store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(feature = "fault-profile")]
pub use enabled::{add, fault_profile, reset_fault_profile};

/// Adds a part measured anyway (by the fault counters), when the feature is on.
#[inline(always)]
pub fn add_if_enabled(part: Part, ns: u64) {
    #[cfg(feature = "fault-profile")]
    add(part, ns, 1);
    #[cfg(not(feature = "fault-profile"))]
    let _ = (part, ns);
}

/// A timestamp for a part, or nothing without the feature.
#[inline(always)]
pub fn start() -> u64 {
    #[cfg(feature = "fault-profile")]
    {
        crate::sys::now_ns()
    }
    #[cfg(not(feature = "fault-profile"))]
    {
        0
    }
}

/// Ends a part begun at `started`, counting `n` units.
#[inline(always)]
pub fn end(part: Part, started: u64, n: u64) {
    #[cfg(feature = "fault-profile")]
    add(part, crate::sys::now_ns().saturating_sub(started), n);
    #[cfg(not(feature = "fault-profile"))]
    let _ = (part, started, n);
}
