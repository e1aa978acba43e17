//! A region that starts reserved (`Region::reserved_with_budget`, the
//! preload library's arena): parts made accessible with `mprotect` are
//! evicted and restored as in any region, pages keep their protection, and
//! a range handed over to another mapping is the kernel's until taken back.
mod common;

use common::*;
use zpage_region::{far, Budget, BudgetConfig, Region, PAGE_SIZE};

fn protect(addr: usize, len: usize, prot: i32) {
    // SAFETY: a range of the test's own reserved region.
    let rc = unsafe { libc::mprotect(addr as *mut libc::c_void, len, prot) };
    assert_eq!(rc, 0);
}

#[test]
fn parts_made_accessible_are_evicted_and_restored() {
    far::reserve().expect("far range");
    let budget = Budget::new(BudgetConfig::new(4 * MIB)).expect("budget");
    let region = Region::reserved_with_budget(&budget, 1 << 32).expect("reserved region");
    assert!(far::contains(region.as_ptr() as usize));
    // Two parts far apart, 16 MiB each, four times the budget together.
    let parts = [64 * MIB, 3 << 30];
    for &off in &parts {
        protect(
            region.as_ptr() as usize + off,
            16 * MIB,
            libc::PROT_READ | libc::PROT_WRITE,
        );
    }
    let pages = 16 * MIB / PAGE_SIZE;
    for &off in &parts {
        for p in 0..pages {
            write(&region, off / PAGE_SIZE + p, 0, (off + p) as u64);
        }
    }
    for &off in &parts {
        for p in 0..pages {
            assert_eq!(read(&region, off / PAGE_SIZE + p, 0), (off + p) as u64);
        }
    }
    let st = region.stats();
    eprintln!("{st:?}");
    assert!(st.eviction_count > 0 && st.restore_count > 0, "{st:?}");
    assert!(
        st.budget_resident_bytes <= 4 * MIB as u64 + (MIB as u64),
        "{st:?}"
    );
}

#[test]
fn a_read_only_page_keeps_its_contents_and_stays() {
    far::reserve().expect("far range");
    let budget = Budget::new(BudgetConfig::new(MIB)).expect("budget");
    let region = Region::reserved_with_budget(&budget, 64 * MIB).expect("reserved region");
    let base = region.as_ptr() as usize;
    protect(base, 16 * MIB, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..16 * MIB / PAGE_SIZE {
        write(&region, p, 1, p as u64 + 1);
    }
    // Evicted by now (16 MiB on 1 MiB): read-only, it reads back right.
    protect(base, 4 * MIB, libc::PROT_READ);
    for p in 0..16 * MIB / PAGE_SIZE {
        assert_eq!(read(&region, p, 1), p as u64 + 1, "page {p}");
    }
    protect(base, 4 * MIB, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..16 * MIB / PAGE_SIZE {
        assert_eq!(read(&region, p, 1), p as u64 + 1, "page {p}");
    }
}

#[test]
fn a_handed_over_range_is_the_kernels_until_taken_back() {
    far::reserve().expect("far range");
    let budget = Budget::new(BudgetConfig::new(MIB)).expect("budget");
    let region = Region::reserved_with_budget(&budget, 64 * MIB).expect("reserved region");
    let base = region.as_ptr() as usize;
    protect(base, 8 * MIB, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..8 * MIB / PAGE_SIZE {
        write(&region, p, 0, 7);
    }
    region.hand_over(MIB, MIB).expect("hand over");
    // A shared mapping there, as a program maps a file over its own space.
    // SAFETY: MAP_FIXED over the handed-over range of the test's region.
    let p = unsafe {
        libc::mmap(
            (base + MIB) as *mut libc::c_void,
            MIB,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(p as usize, base + MIB);
    // Pins over it skip the foreign part.
    let across = (base + MIB - 64 * 1024, 128 * 1024);
    zpage_region::pin_range(across.0, across.1).expect("pin across the foreign part");
    zpage_region::unpin_range(across.0, across.1).expect("unpin");
    // SAFETY: the shared mapping just made.
    unsafe {
        *((base + MIB) as *mut u64) = 42;
        assert_eq!(*((base + MIB) as *const u64), 42);
    }
    for p in (0..8 * MIB / PAGE_SIZE).filter(|p| !(256..512).contains(p)) {
        assert_eq!(read(&region, p, 0), 7, "page {p}");
    }
    // Unmapped by the program: reserved again, taken back, usable.
    // SAFETY: as above.
    let q = unsafe {
        libc::mmap(
            (base + MIB) as *mut libc::c_void,
            MIB,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_eq!(q as usize, base + MIB);
    region.take_back(MIB, MIB).expect("take back");
    protect(base + MIB, MIB, libc::PROT_READ | libc::PROT_WRITE);
    assert_eq!(read(&region, 256, 0), 0, "taken back empty");
    write(&region, 256, 0, 9);
    assert_eq!(read(&region, 256, 0), 9);
}

/// Pages the program discarded leave the budget even when their range is
/// made inaccessible before the reclaimer reaches them, as the preload
/// library's arena does with a range the program unmaps (`MADV_DONTNEED`,
/// then `PROT_NONE` to keep it reserved). The kernel refuses to move a page
/// out of a `PROT_NONE` mapping before it looks for the page; such pages
/// were kept as resident for good, and a CPython run lost most of its
/// budget to them as it freed its arenas at exit (20k pages of a 10.7k-page
/// budget), faulting on the rest in a loop.
#[test]
fn discarded_pages_made_inaccessible_leave_the_budget() {
    far::reserve().expect("far range");
    let budget = Budget::new(BudgetConfig::new(4 * MIB)).expect("budget");
    let region = Region::reserved_with_budget(&budget, 64 * MIB).expect("reserved region");
    let base = region.as_ptr() as usize;
    // Within the budget: nothing is evicted, the reclaimer has no reason to
    // look at these pages until the budget is full.
    let freed = 3 * MIB;
    protect(base, freed, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..freed / PAGE_SIZE {
        write(&region, p, 0, p as u64 + 1);
    }
    // SAFETY: the test's own range of its region: emptied, then kept
    // reserved, as an munmap of the arena does.
    let rc = unsafe { libc::madvise(base as *mut libc::c_void, freed, libc::MADV_DONTNEED) };
    assert_eq!(rc, 0);
    protect(base, freed, libc::PROT_NONE);
    // Four times the budget elsewhere in the region: the reclaimer takes
    // the discarded pages first.
    let (other, len) = (16 * MIB, 16 * MIB);
    protect(base + other, len, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..len / PAGE_SIZE {
        write(&region, other / PAGE_SIZE + p, 0, p as u64 + 7);
    }
    for p in 0..len / PAGE_SIZE {
        assert_eq!(read(&region, other / PAGE_SIZE + p, 0), p as u64 + 7);
    }
    let st = region.stats();
    assert!(
        st.hole_count >= (freed / PAGE_SIZE) as u64,
        "the discarded pages did not leave as holes: {st:?}"
    );
    // Reused, the range reads as zeros.
    protect(base, freed, libc::PROT_READ | libc::PROT_WRITE);
    for p in 0..freed / PAGE_SIZE {
        assert_eq!(read(&region, p, 0), 0, "page {p}");
    }
}

fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A region of a terabyte costs memory only for what is touched: its page
/// slots are allocated zeroed and never written until used.
#[test]
fn a_terabyte_region_costs_only_what_is_touched() {
    far::reserve().expect("far range");
    let budget = Budget::new(BudgetConfig::new(4 * MIB)).expect("budget");
    let before = rss_bytes();
    let region = Region::reserved_with_budget(&budget, 1 << 40).expect("reserved region");
    let grown = rss_bytes().saturating_sub(before);
    eprintln!(
        "a 1 TiB reserved region: resident memory grew by {} KiB",
        grown >> 10
    );
    assert!(grown < 64 * MIB, "grew by {grown} bytes");
    drop(region);
}
