//! `advise_cold`'s eager compression (Zircon's eager trigger), on the
//! calling thread rather than the reclaimer.

use crate::error::RegionError;
use crate::evict::{self, Evict, Trigger};
use crate::region_core::RegionCore;

/// `advise_cold`: evicts and compresses the pages of `pages` of `core` now,
/// on the calling thread (Zircon's eager trigger). The caller blocks
/// asynchronous signals.
pub fn compress_now(core: &RegionCore, pages: std::ops::Range<usize>) -> Result<(), RegionError> {
    let budget = &*core.budget;
    let mut worker = budget.store().worker()?;
    let _g = budget.lock_reclaim();
    for page in pages {
        for _attempt in 0..3 {
            match evict::evict(core, page) {
                Evict::Staged(slot) => {
                    evict::compress(core, page, slot, &mut worker, Trigger::Eager);
                    break;
                }
                Evict::NoSlot => {
                    budget.staging().discard_pending(budget.resident());
                }
                Evict::Retry => {}
                _ => break,
            }
        }
    }
    budget.staging().discard_pending(budget.resident());
    budget.signal_room();
    Ok(())
}
