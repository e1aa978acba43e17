//! A forked child's side of the fault path: the child that took a budget
//! over keeps its own memory within one budget by dropping clean pages it
//! restored ([`make_room_in_child`]). The hooks that set the child up are in
//! `fork.rs`.
//!
//! Runs in the SIGBUS handler and is async-signal-safe for the reasons given
//! in `fault.rs`: it claims pages by compare-and-swap (through
//! `evict::evict_clean_now`), uses a preallocated staging slot, and makes
//! only ioctl and madvise calls.

use crate::evict;
use crate::page::Tag;
use crate::queues::Record;
use crate::region_core::RegionCore;
use crate::table;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Before a forked child restores one more page: once it holds a budget's
/// worth of pages it restored, drop one of them that it has not written
/// (its compressed copy is still in the pool), scanning at most
/// [`CHILD_SCAN_PAGES`] pages from where the last search stopped. If none is
/// found the fault goes on over the child's budget. Async-signal-safe.
pub fn make_room_in_child(core: &RegionCore) {
    let budget = &core.budget;
    let child = budget.child();
    if child.restored() < budget.limits().budget_pages {
        return;
    }
    for _ in 0..CHILD_SCAN_PAGES {
        let hand = child.advance_hand();
        let (index, page) = (hand >> HAND_PAGE_BITS, hand & HAND_PAGE_MASK);
        let step = table::with_index(index, |victim| {
            if !Arc::ptr_eq(&victim.budget, budget) || page >= victim.page_count() {
                return Step::NextRegion;
            }
            let slot = &victim.pages[page];
            let s = slot.load();
            if s.tag() != Tag::Resident || !s.clean() {
                return Step::NextPage;
            }
            let gen = slot.aging.gen.load(Ordering::Acquire);
            if evict::evict_clean_now(victim, Record::new(victim.id(), page, gen, false)) {
                Step::Dropped
            } else {
                Step::NextPage
            }
        })
        .unwrap_or(Step::NextRegion);
        match step {
            Step::Dropped => {
                child.count_dropped();
                budget.staging().discard_pending(budget.resident());
                return;
            }
            Step::NextPage => {}
            Step::NextRegion => {
                let next = if index + 1 >= table::high_water() {
                    0
                } else {
                    index + 1
                };
                child.move_hand(hand + 1, next << HAND_PAGE_BITS);
            }
        }
    }
}

/// How far one fault in a forked child looks for a clean page to drop.
const CHILD_SCAN_PAGES: usize = 512;
/// The child's search position: table index above, page index below.
const HAND_PAGE_BITS: u32 = 40;
const HAND_PAGE_MASK: usize = (1 << HAND_PAGE_BITS) - 1;

enum Step {
    Dropped,
    NextPage,
    NextRegion,
}
