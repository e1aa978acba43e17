//! Tests that need several of the crate's modules at once, from inside:
//! a budget and its regions, with the reclaimer thread doing part of the
//! work (`reclaim::hook`).
#![allow(unsafe_code)]

use crate::budget::Budget;
use crate::config::BudgetConfig;
use crate::page::Tag;
use crate::reclaim::hook::on_reclaimer_of;
use crate::region::Region;
use crate::shared::Shared;
use crate::table;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zpage_codec::PAGE_SIZE;
use zpage_store::{CompressionTrigger, Put};

/// Fills the ring of references the fault path gives up, with references
/// of pages stored for the purpose (same-filled: no pool memory), until it
/// refuses one. Only the reclaimer drains the ring: called on it, the ring
/// stays full until it goes back to its work.
fn fill_freed_ring(budget: &Shared) -> usize {
    let store = budget.store();
    let mut worker = store.worker().unwrap();
    let zeros = zpage_codec::zeroed_page();
    let mut queued = 0;
    loop {
        let Ok(Put::Stored { page_ref, .. }) =
            store.put(&mut worker, &zeros, CompressionTrigger::Eager)
        else {
            panic!("a zero page is always stored");
        };
        if !budget.queues().hand_over_freed(page_ref) {
            store.free(page_ref);
            return queued;
        }
        queued += 1;
    }
}

/// The reclaimer is the only thread that drains the ring of references
/// the fault path gives up. Should it fault on region memory itself (its
/// allocator's memory in a program that builds its allocator on regions)
/// while that ring is full, its restore must not wait for the ring to
/// drain: it would wait on itself. Its restore keeps the stale copy in the
/// page's slot instead, and the page's next eviction gives it up.
#[test]
fn the_reclaimer_restores_a_page_while_its_own_ring_is_full() {
    const PAGES: usize = 64;
    let budget = Budget::new(BudgetConfig::new(8 << 20)).unwrap();
    let mut region = Region::with_budget(&budget, PAGES * PAGE_SIZE).unwrap();
    // Compressible, and not same-filled: a blob in the pool for each page.
    let byte_at = |p: usize, i: usize| (p * 31 + i / 64) as u8;
    for (p, chunk) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        for (i, byte) in chunk.iter_mut().enumerate() {
            *byte = byte_at(p, i);
        }
    }
    region.advise_cold(0, PAGES * PAGE_SIZE).unwrap();
    let page = 17;
    let addr = region.as_ptr() as usize + page * PAGE_SIZE;
    let state = |addr: usize| table::at_address(addr, |core, p| core.pages[p].load().tag());
    assert_eq!(state(addr), Some(Tag::Stored));

    let (done, finished) = mpsc::channel();
    on_reclaimer_of(budget.shared(), move |shared| {
        let queued = fill_freed_ring(shared);
        // SAFETY: a byte of a live region (the test holds it until this
        // hook has reported); reading it faults the page in on this thread.
        let byte = unsafe { std::ptr::read_volatile((addr + 100) as *const u8) };
        let still_full = fill_freed_ring(shared) == 0;
        let _ = done.send((queued, byte, still_full));
    });
    let Ok((queued, byte, still_full)) = finished.recv_timeout(Duration::from_secs(20)) else {
        // The reclaimer waits on itself: it can never be joined.
        std::mem::forget(region);
        std::mem::forget(budget);
        panic!("the reclaimer's own fault waited 20 s for the ring only it drains");
    };
    assert!(queued >= 1024, "the ring took {queued} references");
    assert!(still_full, "the ring was drained before the fault");
    assert_eq!(byte, byte_at(page, 100), "the restored page's contents");
    let kept = table::at_address(addr, |core, p| {
        (
            core.pages[p].load().tag(),
            core.pages[p].page_ref().is_some(),
        )
    });
    assert_eq!(
        kept,
        Some((Tag::Resident, true)),
        "the copy the ring could not take stays in the page's slot"
    );

    // The kept copy goes with the page's next eviction; nothing leaks and
    // nothing is freed twice: with the region gone and the ring drained,
    // the store is empty.
    region.advise_cold(page * PAGE_SIZE, PAGE_SIZE).unwrap();
    assert_eq!(state(addr), Some(Tag::Stored));
    let bytes = &region.as_slice()[page * PAGE_SIZE..(page + 1) * PAGE_SIZE];
    assert!(bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b == byte_at(page, i)));
    let shared = std::sync::Arc::clone(budget.shared());
    drop(region);
    let started = Instant::now();
    loop {
        let contents = shared.store().stats().contents;
        if contents.stored_pages == 0 && contents.compressed_bytes == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the store still holds {contents:?} with no region left"
        );
        shared.kick_reclaimer();
        std::thread::sleep(Duration::from_millis(5));
    }
}
