//! Fault-around: a first touch fills the EMPTY pages around its own in an
//! aligned window of 16, so a program growing its heap (upwards or
//! downwards) faults once per 16 pages instead of once per page, never
//! over a page that holds data, never past its mapping, and not while the
//! budget is short of room.
mod common;

use common::{read, write, MIB};
use zpage_region::{Budget, BudgetConfig, Region, RegionConfig, PAGE_SIZE};

/// Pages one fault fills at most: its aligned window.
const AROUND: usize = 16;

/// A small region in a budget with room for all of it many times over.
fn roomy_region(pages: usize) -> Region {
    let budget = Budget::new(BudgetConfig::new(64 * MIB)).expect("budget");
    Region::with_budget(&budget, pages * PAGE_SIZE).expect("region")
}

#[test]
fn a_first_touch_fills_its_window() {
    let region = roomy_region(64);
    write(&region, 0, 0, 7);
    let st = region.stats();
    assert_eq!((st.fault_count, st.zero_fill_count), (1, 1), "{st:?}");
    assert_eq!(st.fault_around_count, AROUND as u64 - 1, "{st:?}");
    assert_eq!(st.resident_bytes, (AROUND * PAGE_SIZE) as u64, "{st:?}");
    // The pages filled with it read as zeros and take writes with no fault.
    for p in 1..AROUND {
        assert_eq!(read(&region, p, 5), 0, "page {p}");
        write(&region, p, 5, p as u64);
    }
    assert_eq!(region.fault_count(), 1);
    // A heap growing downwards: the last page of a window fills the pages
    // below it.
    write(&region, 2 * AROUND - 1, 0, 1);
    assert_eq!(region.fault_count(), 2);
    assert_eq!(region.stats().fault_around_count, 2 * (AROUND as u64 - 1));
    for p in AROUND..2 * AROUND {
        write(&region, p, 5, p as u64);
    }
    assert_eq!(region.fault_count(), 2);
    // A first read fills its window with the zero page, as a read of one
    // page does.
    assert_eq!(read(&region, 40, 0), 0);
    assert_eq!(region.fault_count(), 3);
    for p in 2 * AROUND..3 * AROUND {
        assert_eq!(read(&region, p, 9), 0, "page {p}");
    }
    assert_eq!(region.fault_count(), 3);
    for p in 1..2 * AROUND {
        assert_eq!(read(&region, p, 5), p as u64, "page {p}");
    }
}

#[test]
fn fault_around_stops_at_a_page_that_left_empty() {
    let region = roomy_region(64);
    // An API call's page is its own (no fault-around): page 10 alone.
    region
        .prefault(10 * PAGE_SIZE, PAGE_SIZE)
        .expect("prefault");
    write(&region, 10, 0, 0xfeed);
    let before = region.stats().fault_around_count;
    // Pages 0-9 are EMPTY, page 10 holds data: the run is pages 0-9.
    write(&region, 5, 0, 1);
    assert_eq!(region.stats().fault_around_count - before, 9);
    assert_eq!(read(&region, 10, 0), 0xfeed);
    // An evicted page is not EMPTY either: page 30's data comes back
    // intact, and the run from page 26 is pages 16-29.
    region
        .prefault(30 * PAGE_SIZE, PAGE_SIZE)
        .expect("prefault");
    write(&region, 30, 0, 0xbeef);
    region.advise_cold(30 * PAGE_SIZE, PAGE_SIZE).expect("cold");
    let before = region.stats().fault_around_count;
    write(&region, 26, 0, 2);
    assert_eq!(region.stats().fault_around_count - before, 13);
    assert_eq!(read(&region, 30, 0), 0xbeef);
    assert_eq!(read(&region, 26, 0), 2);
    assert_eq!(read(&region, 31, 0), 0);
}

#[test]
fn fault_around_stays_inside_its_mapping() {
    let region = roomy_region(64);
    let base = region.as_ptr() as usize;
    // Pages 8 and up read-only: two mappings, as a runtime's heap that
    // commits its reservation piece by piece makes. A window that spans
    // both is filled one page at a time.
    // SAFETY: a range inside the region's own mapping.
    let r = unsafe {
        libc::mprotect(
            (base + 8 * PAGE_SIZE) as *mut libc::c_void,
            56 * PAGE_SIZE,
            libc::PROT_READ,
        )
    };
    assert_eq!(r, 0, "mprotect: {}", std::io::Error::last_os_error());
    write(&region, 0, 0, 3);
    let st = region.stats();
    assert_eq!((st.fault_count, st.fault_around_count), (1, 0), "{st:?}");
    assert_eq!(read(&region, 0, 0), 3);
    assert_eq!(read(&region, 8, 0), 0);
    assert_eq!(region.stats().fault_around_count, 0);
    // A window inside one mapping is filled at once.
    assert_eq!(read(&region, 20, 0), 0);
    assert_eq!(region.stats().fault_around_count, AROUND as u64 - 1);
    // SAFETY: as above; the region is made writable again before it goes.
    unsafe {
        libc::mprotect(
            (base + 8 * PAGE_SIZE) as *mut libc::c_void,
            56 * PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
        )
    };
}

#[test]
fn no_fault_around_while_the_budget_is_short_of_room() {
    // 64 MiB written through an 8 MiB budget: runs are filled while the
    // budget has room, single pages once it is full; the budget holds and
    // every page keeps its data.
    let budget_bytes = 8 * MIB;
    let pages = 64 * MIB / PAGE_SIZE;
    let region = Region::new(RegionConfig::new(pages * PAGE_SIZE, budget_bytes)).expect("region");
    for p in 0..pages {
        write(&region, p, 1, p as u64 ^ 0x5a5a);
    }
    let st = region.stats();
    assert!(st.fault_around_count > 0, "{st:?}");
    let budget_pages = (budget_bytes / PAGE_SIZE) as u64;
    assert!(
        st.fault_around_count < budget_pages,
        "pages filled ahead past the budget: {st:?}"
    );
    assert!(
        st.fault_count > (pages as u64 - budget_pages),
        "one fault per page once the budget is full: {st:?}"
    );
    for p in 0..pages {
        assert_eq!(read(&region, p, 1), p as u64 ^ 0x5a5a, "page {p}");
    }
    let st = region.stats();
    assert!(st.resident_bytes <= st.budget_bytes, "{st:?}");
}

#[test]
fn a_fault_trace_keeps_every_first_touch() {
    // A trace is the program's access order: with fault-around its first
    // touches after the first of each window would be missing from it.
    let dir = std::env::temp_dir().join(format!("zpage-fault-around-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("trace");
    let _ = std::fs::remove_file(&path);
    let mut config = BudgetConfig::new(64 * MIB);
    config.fault_trace = Some(path.clone());
    let pages = 2 * AROUND;
    let base;
    {
        let budget = Budget::new(config).expect("budget");
        let region = Region::with_budget(&budget, pages * PAGE_SIZE).expect("region");
        base = region.as_ptr() as u64;
        for p in 0..pages {
            write(&region, p, 0, p as u64);
        }
        assert_eq!(region.stats().fault_around_count, 0);
    }
    let (entries, full) = zpage_region::FaultTrace::read(&path).expect("trace");
    assert!(!full);
    // Each entry is a page's address with its low bit set for a write.
    let expected: Vec<u64> = (0..pages as u64)
        .map(|p| (base + p * PAGE_SIZE as u64) | 1)
        .collect();
    assert_eq!(entries, expected);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
