//! The reclaimer's compaction of the pool: when, and how often.

use super::Reclaimer;
use std::time::Instant;

/// Compaction runs when the pool holds more than this fraction above its
/// blobs' bytes. Pages restored give their blobs up (exclusive loads) and
/// leave holes across the pool's spans; zsmalloc leaves them to a shrinker
/// and zram's `compact`, which the kernel runs under memory pressure. A
/// budget is under pressure by construction, so the reclaimer compacts when
/// the holes pass a thirty-second of the blobs. At a sixteenth, `zpage
/// bench`'s random reads on a Python heap image ended at 1.00-1.02x zram's
/// memory; at a thirty-second, 0.98-1.00x, at the same touches/s. That
/// needs compaction in steps (the pool's lock let go between size
/// classes): in one piece, twice as many compactions raised the p99 of two
/// threads' random reads from 44-49 µs to 60-395 µs; in steps, 37-48 µs.
const COMPACT_ABOVE_BLOB_BYTES: u64 = 32;
/// Holes smaller than this are not worth a compaction whatever the ratio:
/// a small pool (a budget of a few MiB) would otherwise compact every
/// interval to win back a few pages.
const COMPACT_MIN_HOLE_BYTES: u64 = 256 << 10;
/// At most one fragmentation check (and compaction) per this interval: a
/// compaction locks one pool shard at a time, one step at a time, and
/// faults that need a blob there wait for that step.
const COMPACTION_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl Reclaimer {
    /// Compacts the pool if its holes pass [`COMPACT_ABOVE_BLOB_BYTES`],
    /// at most once per [`COMPACTION_INTERVAL`].
    pub(super) fn compact_if_fragmented(&mut self) {
        if self.compaction_check.elapsed() < COMPACTION_INTERVAL {
            return;
        }
        self.compaction_check = Instant::now();
        let store = self.budget.store();
        let blobs = store.blob_bytes_held();
        let holes = store.pool_memory_used_bytes().saturating_sub(blobs);
        if holes > blobs / COMPACT_ABOVE_BLOB_BYTES && holes >= COMPACT_MIN_HOLE_BYTES {
            store.compact();
        }
    }
}
