//! The automatic budget (`BudgetConfig::auto_stall_ppm`): it goes down
//! while the program does not stall on compressed memory, and back up
//! when the program's restores pass the stall target, with every word
//! reading back.
mod common;

use common::*;
use std::time::{Duration, Instant};
use zpage_region::{Budget, BudgetConfig, Region, PAGE_SIZE};

fn value(p: usize, w: usize) -> u64 {
    (p as u64) << 20 | (w as u64 & 7)
}

/// 48 MiB written under an automatic budget of at most 256 MiB: while the
/// program sits idle the budget falls below what it holds (40 MiB), then a loop
/// over every page (each pass restores what the smaller budget let go)
/// stalls far past 1% and the budget rises again.
#[test]
fn an_automatic_budget_shrinks_when_idle_and_grows_back_under_stalls() {
    let mut config = BudgetConfig::new(256 * MIB);
    config.auto_stall_ppm = Some(10_000);
    let budget = Budget::new(config).expect("budget");
    let region = Region::with_budget(&budget, 48 * MIB).expect("region");
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        for w in 0..PAGE_SIZE / 8 {
            write(&region, p, w, value(p, w));
        }
    }
    // Idle: no stall, so the budget goes down 2% at each look (ten a
    // second), from what is resident and 32 MiB of headroom.
    let idle_until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < idle_until && budget.budget_bytes() > 40 * MIB {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lowered = budget.budget_bytes();
    let status = budget.auto_budget_status().expect("an automatic budget");
    eprintln!(
        "idle: budget {} MiB after {} shrinks",
        lowered >> 20,
        status.shrinks
    );
    assert!(lowered <= 40 * MIB, "budget {lowered} after idling");
    // Every page again and again: restores, which stall.
    let busy_until = Instant::now() + Duration::from_secs(4);
    let mut passes = 0;
    while Instant::now() < busy_until && budget.budget_bytes() < 44 * MIB {
        for p in 0..pages {
            assert_eq!(read(&region, p, (p * 7) % 512), value(p, (p * 7) % 512));
        }
        passes += 1;
    }
    let raised = budget.budget_bytes();
    let status = budget.auto_budget_status().expect("an automatic budget");
    eprintln!(
        "busy: budget {} MiB after {passes} passes; {} grows; stall {:.1}% of {} ms",
        raised >> 20,
        status.grows,
        status.stall_ppm() as f64 / 1e4,
        status.wall_ns / 1_000_000
    );
    assert!(status.grows > 0, "{status:?}");
    assert!(
        raised > lowered,
        "budget {raised} after stalling, {lowered} before"
    );
    for p in 0..pages {
        for w in (0..PAGE_SIZE / 8).step_by(31) {
            assert_eq!(read(&region, p, w), value(p, w), "page {p} word {w}");
        }
    }
}

/// A program that grows is not made to evict what it holds: under an
/// automatic budget that came down while the program sat idle, 120 MiB
/// written as fast as it can raise the budget with it (its fresh pages are
/// no reason to push out the old ones), where a budget held to what was
/// resident plus headroom at the last look pushed most of them out.
#[test]
fn fresh_pages_raise_an_automatic_budget() {
    let mut config = BudgetConfig::new(512 * MIB);
    config.auto_stall_ppm = Some(10_000);
    let budget = Budget::new(config).expect("budget");
    let region = Region::with_budget(&budget, 128 * MIB).expect("region");
    let pages = region.len() / PAGE_SIZE;
    let first = 8 * MIB / PAGE_SIZE;
    for p in 0..first {
        write(&region, p, 0, value(p, 0));
    }
    let idle_until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < idle_until && budget.budget_bytes() > 48 * MIB {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lowered = budget.budget_bytes();
    assert!(lowered <= 48 * MIB, "budget {lowered} after idling");
    let before = region.stats();
    for p in first..pages {
        for w in (0..PAGE_SIZE / 8).step_by(64) {
            write(&region, p, w, value(p, w));
        }
    }
    let after = region.stats();
    let evicted = after.eviction_count - before.eviction_count;
    eprintln!(
        "budget {} MiB idle, {} MiB after growing; {evicted} pages evicted while growing",
        lowered >> 20,
        budget.budget_bytes() >> 20
    );
    assert!(
        evicted < ((pages - first) / 20) as u64,
        "{evicted} pages evicted while {} were written",
        pages - first
    );
    assert!(
        budget.budget_bytes() >= 120 * MIB,
        "{}",
        budget.budget_bytes()
    );
    for p in 0..pages {
        assert_eq!(read(&region, p, 0), value(p, 0), "page {p}");
    }
}
