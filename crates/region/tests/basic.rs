//! Basic behaviour: data survives eviction and restore, the budget holds.
mod common;

use zpage_region::{AgingPolicy, Budget, BudgetConfig, Region, RegionConfig, PAGE_SIZE};

const MIB: usize = 1 << 20;

fn fill(page: usize, round: u64) -> u64 {
    (page as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round
}

#[test]
fn round_trip_through_compression() {
    let region = Region::new(RegionConfig::new(64 * MIB, 8 * MIB)).expect("region");
    let pages = region.len() / PAGE_SIZE;
    let base = region.as_ptr() as *mut u64;
    for p in 0..pages {
        let v = fill(p, 1);
        for w in (0..PAGE_SIZE / 8).step_by(61) {
            // SAFETY: in bounds of the region.
            unsafe { base.add(p * PAGE_SIZE / 8 + w).write_volatile(v + w as u64) };
        }
    }
    let mid = region.stats();
    assert!(mid.eviction_count > 0, "{mid:?}");
    for p in 0..pages {
        let v = fill(p, 1);
        for w in (0..PAGE_SIZE / 8).step_by(61) {
            // SAFETY: in bounds of the region.
            let got = unsafe { base.add(p * PAGE_SIZE / 8 + w).read_volatile() };
            assert_eq!(got, v + w as u64, "page {p} word {w}");
        }
    }
    let st = region.stats();
    assert!(st.restore_count > 0, "{st:?}");
    assert!(st.resident_bytes <= st.budget_bytes, "{st:?}");
    eprintln!("{st:#?}");
    let _ = AgingPolicy::Fifo;
}

#[test]
fn region_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Region>();
}

fn word(region: &Region, p: usize, w: usize) -> &std::sync::atomic::AtomicU64 {
    assert!(p * PAGE_SIZE + w * 8 + 8 <= region.len());
    // SAFETY: in bounds of the region's live mapping, 8-byte aligned.
    unsafe { &*(region.as_ptr().add(p * PAGE_SIZE + w * 8) as *const std::sync::atomic::AtomicU64) }
}

#[test]
fn willneed_restores_ahead_and_cold_compresses_now() {
    use std::sync::atomic::Ordering::Relaxed;
    let region = Region::new(RegionConfig::new(8 * MIB, 8 * MIB)).expect("region");
    for p in 0..256 {
        word(&region, p, 3).store(fill(p, 7), Relaxed);
    }
    region.advise_cold(0, 256 * PAGE_SIZE).expect("cold");
    let st = region.stats();
    assert!(st.eager_compression_count >= 256, "{st:?}");
    assert_eq!(st.resident_bytes, 0, "{st:?}");
    region
        .advise_willneed(0, 128 * PAGE_SIZE)
        .expect("willneed");
    let faults = region.fault_count();
    for p in 0..128 {
        assert_eq!(word(&region, p, 3).load(Relaxed), fill(p, 7));
    }
    assert_eq!(
        region.fault_count(),
        faults,
        "willneed'ed pages must not fault"
    );
    for p in 128..256 {
        assert_eq!(word(&region, p, 3).load(Relaxed), fill(p, 7));
    }
    assert!(region.fault_count() >= faults + 128);
}

#[test]
fn pool_limit_keeps_pages_resident_and_correct() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut cfg = RegionConfig::new(8 * MIB, 8 * MIB);
    cfg.max_pool_bytes = Some(64 * 1024);
    let region = Region::new(cfg).expect("region");
    // Incompressible pages: the pool fills after a few dozen.
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut want = vec![0u64; 256 * 512];
    for (i, v) in want.iter_mut().enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *v = x;
        word(&region, i / 512, i % 512).store(x, Relaxed);
    }
    region.advise_cold(0, 256 * PAGE_SIZE).expect("cold");
    let st = region.stats();
    assert!(st.compress_failure_count > 0, "{st:?}");
    for (i, v) in want.iter().enumerate() {
        assert_eq!(
            word(&region, i / 512, i % 512).load(Relaxed),
            *v,
            "word {i}"
        );
    }
}

/// Lowered while it runs, the budget holds at its new size: the reclaimer
/// brings resident memory under it with no fault to wake it, and faults
/// keep to it; it stays between the smallest budget and the configured one.
#[test]
fn the_budget_changes_while_it_runs() {
    let budget = Budget::new(BudgetConfig::new(32 * MIB)).expect("budget");
    assert_eq!(budget.budget_bytes(), 32 * MIB);
    let region = Region::with_budget(&budget, 64 * MIB).expect("region");
    let pages = region.len() / PAGE_SIZE;
    let check = || {
        for p in 0..pages {
            for w in (0..PAGE_SIZE / 8).step_by(61) {
                let got = word(&region, p, w).load(std::sync::atomic::Ordering::Relaxed);
                assert_eq!(got, fill(p, w as u64), "page {p} word {w}");
            }
        }
    };
    for p in 0..pages {
        for w in (0..PAGE_SIZE / 8).step_by(61) {
            word(&region, p, w).store(fill(p, w as u64), std::sync::atomic::Ordering::Relaxed);
        }
    }
    assert_eq!(budget.set_budget_bytes(8 * MIB), 8 * MIB);
    assert_eq!(budget.budget_bytes(), 8 * MIB);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while budget.resident_bytes() > 8 * MIB && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(budget.resident_bytes() <= 8 * MIB, "{:?}", region.stats());
    check();
    assert!(budget.resident_bytes() <= 9 * MIB, "{:?}", region.stats());
    assert_eq!(region.stats().budget_bytes, 8 * MIB as u64);
    assert_eq!(budget.set_budget_bytes(1 << 40), 32 * MIB);
    assert_eq!(budget.set_budget_bytes(1), zpage_region::MIN_BUDGET_BYTES);
    assert_eq!(budget.budget_bytes(), zpage_region::MIN_BUDGET_BYTES);
    check();
    budget.set_budget_bytes(32 * MIB);
    check();
}

/// Large batches of staged pages are shared with the reclaimer's second
/// compressor on a machine with two CPUs: two threads rewrite and reread a
/// region eight times its budget, every page is checked against what was
/// written, and the second compressor stored part of the pages.
#[test]
fn a_second_compressor_shares_large_batches_and_loses_nothing() {
    let region = Region::new(RegionConfig::new(64 * MIB, 8 * MIB)).expect("region");
    let pages = region.len() / PAGE_SIZE;
    for round in 1..=3u64 {
        std::thread::scope(|s| {
            for half in 0..2 {
                let region = &region;
                s.spawn(move || {
                    for p in (half..pages).step_by(2) {
                        common::write_text_page(region, p, round);
                    }
                });
            }
        });
        for p in 0..pages {
            common::check_text_page(&region, p, round);
        }
    }
    let st = region.stats();
    assert!(st.resident_bytes <= st.budget_bytes, "{st:?}");
    assert!(
        st.helper_compression_count <= st.pressure_compression_count,
        "{st:?}"
    );
    if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        assert!(st.helper_compression_count > 0, "{st:?}");
    }
}
