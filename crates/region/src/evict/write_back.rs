//! Moving a stored page's blob from the pool to the tier below RAM
//! (the reclaimer's writeback, `reclaim/writeback.rs`).

use crate::counters::Counters;
use crate::page::Tag;
use crate::region_core::RegionCore;

/// What [`write_back`] did with one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteBack {
    /// Its blob is in the tier now and its pool memory freed.
    Moved,
    /// Not a stored page in the pool (restored, discarded, same-filled,
    /// already in the tier, or held by another thread): nothing to do.
    Skipped,
    /// The tier refused it (full, failing, down): it stays in the pool.
    Failed,
}

/// Moves the blob of the stored page `page` to the tier below RAM (the
/// reclaimer, with asynchronous signals blocked). The page is held as
/// COMPRESSING meanwhile, so a fault on it waits for the move to finish
/// (the write is one `pwrite`), and a discard of it meanwhile is honoured.
pub fn write_back(core: &RegionCore, page: usize) -> WriteBack {
    let budget = &*core.budget;
    let Some(slot) = core.pages.get(page) else {
        return WriteBack::Skipped;
    };
    let s = slot.load();
    if s.tag() != Tag::Stored || s.discarded() {
        return WriteBack::Skipped;
    }
    let held = s.with(Tag::Compressing);
    if !slot.claim(s, held) {
        return WriteBack::Skipped;
    }
    // A blob other pages share stays in the pool: moving it would store its
    // content twice and free nothing.
    let Some(old) = slot
        .page_ref()
        .filter(|r| r.in_pool() && !budget.is_shared(*r))
    else {
        slot.publish(s);
        return WriteBack::Skipped;
    };
    let identity = core.tier_identity(page);
    let (outcome, new) = match budget.store().move_to_tier(old, identity) {
        Ok(Some(new)) => (WriteBack::Moved, Some(new)),
        Ok(None) => (WriteBack::Skipped, None),
        Err(_) => (WriteBack::Failed, None),
    };
    if let Some(new) = new {
        slot.set_page_ref(Some(new));
    }
    if slot.claim(held, s) {
        if new.is_some() {
            budget.release(old);
        }
        return outcome;
    }
    // The program discarded the page meanwhile: whatever it held goes.
    if let Some(stale) = slot.take_page_ref() {
        budget.release(stale);
    }
    if new.is_some() {
        budget.release(old);
    }
    Counters::bump(&core.counters.discard_count);
    slot.set(slot.load().emptied());
    WriteBack::Skipped
}
