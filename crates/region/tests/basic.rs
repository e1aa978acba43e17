//! Basic behaviour: data survives eviction and restore, the budget holds.
use zpage_region::{AgingPolicy, Region, RegionConfig, PAGE_SIZE};

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
    assert!(mid.evictions > 0, "{mid:?}");
    for p in 0..pages {
        let v = fill(p, 1);
        for w in (0..PAGE_SIZE / 8).step_by(61) {
            // SAFETY: in bounds of the region.
            let got = unsafe { base.add(p * PAGE_SIZE / 8 + w).read_volatile() };
            assert_eq!(got, v + w as u64, "page {p} word {w}");
        }
    }
    let st = region.stats();
    assert!(st.restores > 0, "{st:?}");
    assert!(st.resident_bytes <= st.budget_bytes, "{st:?}");
    eprintln!("{st:#?}");
    let _ = AgingPolicy::Fifo;
}

#[test]
fn region_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Region>();
}
