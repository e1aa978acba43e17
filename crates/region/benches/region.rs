//! Fault-path benchmarks (criterion): the cost of one touch of a uniformly
//! random page of a region four times its budget (most touches fault and
//! restore a compressed page), read-only and with writes, and the cost of
//! a touch when everything fits (no faults), for reference.
//!
//! At the end each group prints the region's own fault-handling histogram
//! (p50/p99 from inside the handler) and its counters.
mod common;

use common::TextLike;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zpage_region::{Region, RegionConfig, PAGE_SIZE};

const MIB: usize = 1 << 20;

fn word(region: &Region, p: usize, w: usize) -> &AtomicU64 {
    assert!(p * PAGE_SIZE + w * 8 + 8 <= region.len());
    // SAFETY: in bounds of the region's live mapping, 8-byte aligned.
    unsafe { &*(region.as_ptr().add(p * PAGE_SIZE + w * 8) as *const AtomicU64) }
}

/// Fills pages with text-like data that compresses about 3:1 with LZ4.
fn fill(region: &Region) {
    let mut text = TextLike::new();
    for p in 0..region.len() / PAGE_SIZE {
        for w in 0..PAGE_SIZE / 8 {
            word(region, p, w).store(text.next_word(p, w), Ordering::Relaxed);
        }
    }
}

fn bench_random_touch(c: &mut Criterion) {
    let mut group = c.benchmark_group("random_touch");
    group.measurement_time(Duration::from_secs(6));
    // (name, region size, budget, share of the region touched in %, writes in %)
    for (name, size, budget, touched_pct, write_pct) in [
        ("fits_in_budget", 64 * MIB, 64 * MIB, 85usize, 0u64),
        ("4x_budget_read", 256 * MIB, 64 * MIB, 100, 0),
        ("4x_budget_rw50", 256 * MIB, 64 * MIB, 100, 50),
    ] {
        let region = Region::new(RegionConfig::new(size, budget)).expect("region");
        fill(&region);
        let pages = region.len() / PAGE_SIZE * touched_pct / 100;
        let mut x = 88172645463325252u64;
        group.bench_function(BenchmarkId::new("touch", name), |b| {
            b.iter_custom(|iters| {
                let t0 = Instant::now();
                for _ in 0..iters {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = (x % pages as u64) as usize;
                    let w = word(&region, p, (x >> 40) as usize % (PAGE_SIZE / 8));
                    if x % 100 < write_pct {
                        w.store(x, Ordering::Relaxed);
                    } else {
                        black_box(w.load(Ordering::Relaxed));
                    }
                }
                t0.elapsed()
            })
        });
        let st = region.stats();
        let l = &st.fault_latency;
        eprintln!(
            "{name}: faults {} restores {} trial_hits {} first_writes {} clean_evictions {} compressions {} throttles {} | in-handler p50 <= {} ns, p99 <= {} ns, p99.9 <= {} ns, mean {} ns",
            st.fault_count, st.restore_count, st.trial_hit_count, st.first_write_count, st.clean_eviction_count, st.compression_count, st.throttle_count,
            l.p50_ns, l.p99_ns, l.p999_ns, l.mean_ns
        );
    }
    group.finish();
}

/// End-to-end latency of faulting touches (signal delivery included), as
/// the program sees it: uniform random reads over a region four times its
/// budget; prints percentiles of the touches that faulted.
fn fault_latency_distribution(c: &mut Criterion) {
    let region = Region::new(RegionConfig::new(256 * MIB, 64 * MIB)).expect("region");
    fill(&region);
    let pages = region.len() / PAGE_SIZE;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut lat = Vec::with_capacity(400_000);
    for i in 0..600_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = (x % pages as u64) as usize;
        let f0 = region.fault_count();
        let t0 = Instant::now();
        black_box(word(&region, p, 7).load(Ordering::Relaxed));
        let ns = t0.elapsed().as_nanos() as u64;
        if i >= 200_000 && region.fault_count() != f0 {
            lat.push(ns);
        }
    }
    lat.sort_unstable();
    let q = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    eprintln!(
        "faulting touches (SIGBUS mode, 4x budget, uniform reads): n {} p50 {} ns p90 {} ns p99 {} ns p99.9 {} ns max {} ns",
        lat.len(),
        q(0.5),
        q(0.9),
        q(0.99),
        q(0.999),
        lat[lat.len() - 1]
    );
    // A token measurement so criterion has something to run.
    c.bench_function("fault_count_read", |b| {
        b.iter(|| black_box(region.fault_count()))
    });
}

criterion_group!(benches, bench_random_touch, fault_latency_distribution);
criterion_main!(benches);
