//! The reclaimer's writeback to the tier below RAM. With a tier and a
//! pool cap (`max_pool_bytes`, or the share of a memory max the rest of
//! the process leaves the pool, `memory_max.rs`, if less: the store's
//! `pool_limit_bytes`), as the pool passes `WRITEBACK_START_PCT` of its cap, the
//! oldest compressed pages (in the order the reclaimer compressed them) go
//! to the tier until the pool is under `WRITEBACK_TARGET_PCT`, at most
//! `writeback_pages_per_sec`. A written-back page keeps its STORED state;
//! its reference names the tier copy, which a fault reads back in the
//! handler. A tier that is full or down makes the writeback stop for the
//! round: pages stay compressed in RAM, and at the cap evictions are
//! refused as without a tier (the budget counts as stuck). The rate limit
//! does not: at the cap, eviction waits for its next batch, and so do
//! faults that need room.

use super::Reclaimer;
use crate::evict;
use crate::table;
use std::sync::Arc;

/// Writeback starts when the pool passes this share of its cap ...
const WRITEBACK_START_PCT: u64 = 90;
/// ... and writes back until it is under this share.
const WRITEBACK_TARGET_PCT: u64 = 80;
/// Pages written back between two compactions of the pool.
const WRITEBACK_BATCH: usize = 64;

impl Reclaimer {
    /// The pool's cap and use in pages, when writeback applies.
    fn pool_cap(&self) -> Option<(u64, u64)> {
        self.budget.store().tier()?;
        let cap = self.budget.store().pool_limit_bytes()?;
        let page = zpage_store::PAGE_SIZE as u64;
        Some((
            cap / page,
            self.budget.store().pool_memory_used_bytes() / page,
        ))
    }

    pub(super) fn writeback_wanted(&self) -> bool {
        self.pool_cap().is_some_and(|(cap, used)| {
            used * 100 > cap * WRITEBACK_START_PCT && !self.compressed.is_empty()
        })
    }

    /// Writes the oldest compressed pages back to the tier while the pool is
    /// over its start share, down to its target share, within the rate limit.
    /// Returns how long until the rate limit allows a batch again when it
    /// is what stopped the writeback (the tier would take more later: the
    /// reclaimer waits rather than calling the budget stuck).
    pub(super) fn write_back(&mut self) -> Option<std::time::Duration> {
        if !self.writeback_wanted() {
            return None;
        }
        let budget = Arc::clone(&self.budget);
        let over = |this: &Self| {
            this.pool_cap()
                .is_some_and(|(cap, used)| used * 100 > cap * WRITEBACK_TARGET_PCT)
        };
        while over(self) && !self.compressed.is_empty() {
            let mut allowed = self.writeback_tokens.take(WRITEBACK_BATCH);
            if allowed == 0 {
                return Some(self.writeback_tokens.time_until(WRITEBACK_BATCH));
            }
            let mut stop = false;
            while allowed > 0 {
                let Some(record) = self.compressed.pop_front() else {
                    break;
                };
                match table::with_region(record.region(), |core| {
                    evict::write_back(core, record.page())
                }) {
                    Some(evict::WriteBack::Moved) => allowed -= 1,
                    Some(evict::WriteBack::Failed) => {
                        // Full or down: the page stays in RAM, and so do the
                        // rest until a later round.
                        self.compressed.push_front(record);
                        stop = true;
                        break;
                    }
                    Some(evict::WriteBack::Skipped) | None => {}
                }
            }
            budget.store().compact();
            budget.signal_room();
            if stop {
                return None;
            }
        }
        None
    }
}
