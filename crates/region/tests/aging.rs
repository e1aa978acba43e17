//! On a hot/cold workload whose hot set fits in the active queues' share of
//! the budget (two thirds, see `aging.rs`), the share of touches that fault
//! under zpage's policy (refault distance + trial eviction) is at most three
//! quarters of FIFO's.
//!
//! The bound was a half while the active queues could take nearly the whole
//! budget (a hot set of 80% of it measured 0.45x FIFO), but that share let a
//! hot set the program stopped using keep its place: CPython restored 3.4x
//! as often as the kernel swapped in. With two thirds, a hot set of half the
//! budget measures 0.47x FIFO with write tracking and 0.58x without, on a
//! quiet machine.
mod common;

use common::*;
use std::sync::Mutex;
use zpage_region::{AgingPolicy, Region, RegionConfig, PAGE_SIZE};

/// One comparison at a time. Each runs a reclaimer thread per region; with
/// both tests of this file side by side on a 2-CPU machine, the reclaimers
/// and the touching threads compete for the CPUs, the reclaimer falls
/// behind, its inactive queue runs dry and it demotes hot pages: on such a
/// machine the refault policy measured 0.215-0.225 against FIFO's
/// 0.430-0.436 in parallel, and 0.187-0.191 against 0.415-0.491 one at a
/// time. That is a property of a starved machine (the speed issue's
/// busy-machine runs), not of the policy under test.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The bench's hot/cold pattern (zpage-bench `HOT_COLD_80_20`): `hot_pct`% of
/// touches go to a hot set of `hot_pages` pages spread over the region, the
/// rest to the other pages. A warm-up of `touches` touches, then `touches`
/// measured ones; returns the faulting share of the measured touches.
fn faulting_share(
    aging: AgingPolicy,
    keep_clean_copies: bool,
    size: usize,
    budget: usize,
    hot_pages: usize,
    hot_pct: usize,
    touches: usize,
) -> f64 {
    let mut cfg = RegionConfig::new(size, budget);
    cfg.aging = aging;
    cfg.keep_clean_copies = keep_clean_copies;
    let region = Region::new(cfg).expect("region");
    let pages = region.len() / PAGE_SIZE;
    // The hot set is spread over the region (every k-th page), as hot objects are.
    let stride = pages / hot_pages;
    let mut rng = Rng(0xC0FFEE);
    let mut hot_faults = 0u64;
    let touch = |rng: &mut Rng, hot_faults: &mut u64| {
        let f0 = region.fault_count();
        let p = if rng.below(100) < hot_pct {
            rng.below(hot_pages) * stride
        } else {
            // A cold page: any page off the hot stride.
            let q = rng.below(pages);
            if q / stride * stride == q {
                (q + 1) % pages
            } else {
                q
            }
        };
        let w = rng.below(PAGE_SIZE / 8);
        if rng.below(4) == 0 {
            write(&region, p, w, p as u64);
        } else {
            let v = read(&region, p, w);
            assert!(v == 0 || v == p as u64, "page {p}: {v:#x}");
        }
        if p / stride * stride == p && region.fault_count() != f0 {
            *hot_faults += 1;
        }
    };
    for _ in 0..touches {
        touch(&mut rng, &mut hot_faults);
    }
    let before = region.stats().fault_count;
    hot_faults = 0;
    for _ in 0..touches {
        touch(&mut rng, &mut hot_faults);
    }
    eprintln!("{aging:?}: hot-page faults {hot_faults}");
    let st = region.stats();
    let share = (st.fault_count - before) as f64 / touches as f64;
    eprintln!(
        "{aging:?}: faulting share {share:.4} (faults {}, restores {}, trial hits {}, activations {}, demotions {}, resident {} of {} budget, throttles {} for {} ms, sync evictions {})",
        st.fault_count - before,
        st.restore_count,
        st.trial_hit_count,
        st.activation_count,
        st.demotion_count,
        st.resident_bytes,
        st.budget_bytes,
        st.throttle_count,
        st.throttle_ns / 1_000_000,
        st.sync_eviction_count
    );
    share
}

/// The comparison, up to three times: the policy passes if one attempt
/// brings FIFO's faulting share down to three quarters of it at most. The share depends on the reclaimer keeping
/// up with the touching thread; on a machine busy with other work (CI's
/// other test binaries, a build) it can fall behind for a whole attempt
/// (0.268 against FIFO's 0.440 was seen once on a loaded 2-CPU machine,
/// 0.19 against 0.42 when idle). FIFO, the policy it is compared with,
/// never halves itself, so a policy no better than FIFO fails every attempt.
fn compare(keep_clean_copies: bool) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (size, budget) = (64 * MIB, 16 * MIB);
    let budget_pages = budget / PAGE_SIZE;
    // 80% of touches on an eighth of the pages: the hot set is half the
    // budget.
    let hot = budget_pages / 2;
    let touches = 1_000_000;
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let fifo = faulting_share(
            AgingPolicy::Fifo,
            keep_clean_copies,
            size,
            budget,
            hot,
            80,
            touches,
        );
        let zpage = faulting_share(
            AgingPolicy::Refault,
            keep_clean_copies,
            size,
            budget,
            hot,
            80,
            touches,
        );
        eprintln!(
            "hot/cold (write tracking {keep_clean_copies}): zpage {zpage:.4} vs FIFO {fifo:.4}: ratio {:.3}",
            zpage / fifo
        );
        if zpage <= fifo * 0.75 {
            return;
        }
        attempts.push((zpage, fifo));
    }
    panic!("the refault policy did not bring FIFO's faulting share down to three quarters in any attempt (zpage, fifo): {attempts:?}");
}

/// Every fault counts, the first-write faults of write tracking included.
#[test]
fn hot_cold_refault_policy_faults_less_than_fifo() {
    compare(true);
}

/// Write tracking off: FIFO's share is not inflated by write-protect faults
/// (measured ratio 0.58).
#[test]
fn hot_cold_refault_policy_faults_less_than_fifo_without_write_tracking() {
    compare(false);
}
