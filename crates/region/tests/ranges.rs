//! The API for front ends that see only pointers (the preload library):
//! a region made plain memory keeps every byte at the same address, and
//! address ranges are prefaulted and pinned across the region table.
mod common;

use common::*;
use zpage_region::{
    overlaps_any_region, pin_range, prefault_range, unpin_range, Region, RegionConfig, PAGE_SIZE,
};

/// Tests here ask what lies just past a region; a region made by the other
/// test, running in parallel, may be mapped there. One test at a time.
static ONE_REGION_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pattern(p: usize, w: usize) -> u64 {
    ((p as u64) << 20 | w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

fn filled(mib: usize, budget_mib: usize) -> Region {
    let region = Region::new(RegionConfig::new(mib * MIB, budget_mib * MIB)).expect("region");
    for p in 0..region.len() / PAGE_SIZE {
        write(&region, p, 3, pattern(p, 3));
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    assert!(region.stats().stored_pages > 100, "{:?}", region.stats());
    region
}

/// Pages of `[base, base + len)` resident now (mincore).
fn resident_pages(base: usize, len: usize) -> usize {
    let mut v = vec![0u8; len / PAGE_SIZE];
    // SAFETY: a live mapping of `len` bytes and a vector of one byte per page.
    let rc = unsafe { libc::mincore(base as *mut libc::c_void, len, v.as_mut_ptr()) };
    assert_eq!(rc, 0);
    v.iter().filter(|b| *b & 1 != 0).count()
}

#[test]
fn a_region_made_plain_keeps_its_bytes_at_the_same_address() {
    let _alone = ONE_REGION_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let region = filled(8, 2);
    let pages = region.len() / PAGE_SIZE;
    let (base, len) = region.into_plain_memory().map_err(|(_, e)| e).unwrap();
    assert!(!overlaps_any_region(base, len));
    for p in 0..pages {
        // SAFETY: the range stays mapped: it is ours now.
        let v = unsafe { *((base + p * PAGE_SIZE + 24) as *const u64) };
        assert_eq!(v, pattern(p, 3), "page {p}");
    }
    // Plain memory now: the kernel can read it (no EFAULT) and it can be
    // re-protected.
    // SAFETY: our own mapping.
    let rc = unsafe { libc::mprotect(base as *mut _, PAGE_SIZE, libc::PROT_READ) };
    assert_eq!(rc, 0);
    // SAFETY: we own the range since into_plain_memory.
    let rc = unsafe { libc::munmap(base as *mut _, len) };
    assert_eq!(rc, 0);
}

#[test]
fn ranges_are_prefaulted_and_pinned_across_the_table() {
    let _alone = ONE_REGION_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let region = filled(8, 2);
    let base = region.as_ptr() as usize;
    assert!(overlaps_any_region(base + 5 * PAGE_SIZE, 1));
    assert!(!overlaps_any_region(base + region.len(), PAGE_SIZE));
    let span = 64 * PAGE_SIZE;
    assert!(resident_pages(base, span) < 64);
    prefault_range(base, span).unwrap();
    assert_eq!(resident_pages(base, span), 64);
    // Pinned pages stay in while the rest is pushed out.
    pin_range(base + span, span).unwrap();
    region.advise_cold(0, region.len()).unwrap();
    assert_eq!(resident_pages(base + span, span), 64);
    unpin_range(base + span, span).unwrap();
    // More than half the budget cannot be pinned.
    assert!(pin_range(base, region.len()).is_err());
    // ... and a refused pin leaves nothing pinned.
    assert_eq!(region.stats().pinned_bytes, 0);
}
