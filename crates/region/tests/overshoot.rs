//! When pages cannot leave, the budget is exceeded, counted and reported,
//! and the program keeps its speed: no fault waits for room that will not
//! come (each used to wait the full 100 ms bound while the reclaimer moved
//! pages out, failed to store them and put them back).
mod common;

use common::*;
use std::time::{Duration, Instant};
use zpage_region::{BudgetConfig, Region, RegionConfig, PAGE_SIZE};

/// The word `w` of page `p`: pseudo-random, so pages hardly compress and
/// a pool cap is reached after about as many pages as it holds.
fn value(p: usize, w: usize) -> u64 {
    let mut x = (p as u64) << 9 | w as u64;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 29)
}

/// Writes every word of the region, then reads them back; returns how long
/// that took.
fn fill_and_check(region: &Region) -> Duration {
    let started = Instant::now();
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        for w in 0..PAGE_SIZE / 8 {
            write(region, p, w, value(p, w));
        }
    }
    for p in 0..pages {
        for w in 0..PAGE_SIZE / 8 {
            assert_eq!(read(region, p, w), value(p, w), "page {p} word {w}");
        }
    }
    started.elapsed()
}

/// A pool cap and no tier below it: once the pool is full, nothing can be
/// stored, so nothing can leave.
#[test]
fn a_full_pool_with_no_tier_is_an_overshoot_not_a_stall() {
    let mut budget = BudgetConfig::new(4 * MIB);
    budget.max_pool_bytes = Some(MIB as u64);
    let mut cfg = RegionConfig::new(64 * MIB, 4 * MIB);
    cfg.budget = budget;
    let region = Region::new(cfg).expect("region");
    let took = fill_and_check(&region);
    let st = region.stats();
    eprintln!(
        "64 MiB through a 4 MiB budget and a 1 MiB pool cap: {took:?}, {} faults over the budget, peak {} MiB over, {} throttled for {} ms",
        st.overshoot_count,
        st.overshoot_peak_bytes >> 20,
        st.throttle_count,
        st.throttle_ns / 1_000_000
    );
    assert!(st.overshoot_count > 0, "{st:?}");
    assert!(st.overshoot_peak_bytes > 0, "{st:?}");
    // 16,384 pages: at the old 100 ms a fault that is many minutes.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(st.throttle_ns < 20_000_000_000, "{st:?}");
}

/// Every resident page held (`restore_all`, as `mlockall` does): nothing
/// can leave until it is let go.
#[test]
fn held_pages_are_an_overshoot_and_eviction_resumes_after() {
    let region = Region::new(RegionConfig::new(32 * MIB, 4 * MIB)).expect("region");
    region.restore_all().expect("hold");
    let took = fill_and_check(&region);
    let st = region.stats();
    eprintln!(
        "32 MiB held on a 4 MiB budget: {took:?}, {} faults over the budget, resident {} MiB",
        st.overshoot_count,
        st.resident_bytes >> 20
    );
    assert!(st.overshoot_count > 0, "{st:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    region.resume_eviction();
    let deadline = Instant::now() + Duration::from_secs(20);
    while region.stats().budget_resident_bytes > 4 * MIB as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        region.stats().budget_resident_bytes <= 4 * MIB as u64,
        "{:?}",
        region.stats()
    );
    fill_and_check(&region);
}
