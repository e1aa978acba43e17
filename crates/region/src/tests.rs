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

/// A program may discard a page and drop its region at once (an allocator
/// freeing its last block, then the arena). The event thread, looking the
/// region up after the drop took it out of the table, then marks nothing,
/// and an eviction already inside the region finds the page gone with no
/// mark. That is no lost data: the page leaves as a hole, where before it
/// ended the process (seen in CI: NumPy freeing its arrays under a 4 MiB
/// `zpage.budget` on a busy machine).
///
/// The lost mark is made here by discarding the page with the region out
/// of the userfaultfd (no event at all); `dropping` is what `Region::drop`
/// sets first.
#[test]
fn a_page_discarded_as_its_region_is_dropped_leaves_as_a_hole() {
    use crate::evict::{self, Evict};
    use std::sync::atomic::Ordering;
    const PAGES: usize = 8;
    let budget = Budget::new(BudgetConfig::new(64 << 20)).unwrap();
    let mut region = Region::with_budget(&budget, PAGES * PAGE_SIZE).unwrap();
    region.as_mut_slice().fill(0x5a);
    let base = region.as_ptr() as usize;
    let page = 3;
    let addr = base + page * PAGE_SIZE;
    assert_eq!(
        table::at_address(addr, |core, p| core.pages[p].load().tag()),
        Some(Tag::Resident)
    );
    crate::sys::uffd_unregister(budget.shared().uffd().fd(), base, PAGES * PAGE_SIZE).unwrap();
    // SAFETY: one page of the test's own region, which nothing reads again.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, PAGE_SIZE, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0);
    let outcome = table::at_address(addr, |core, p| {
        assert!(!core.pages[p].load().discarded(), "no event marked it");
        core.dropping.store(true, Ordering::SeqCst);
        evict::evict(core, p)
    });
    assert_eq!(outcome, Some(Evict::Hole));
    assert_eq!(
        table::at_address(addr, |core, p| core.pages[p].load().tag()),
        Some(Tag::Empty)
    );
}
