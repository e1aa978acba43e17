//! Where one fault's time goes: random reads over a region four times its
//! budget, each touch timed from the program's side, and the fault path's
//! parts timed from inside (the `fault-profile` feature). Prints the table
//! quoted in the crate's README ("Where a fault's time goes").
//!
//!     ZPAGE_BENCH_IMAGE=python-heap.img \
//!       cargo bench -p zpage-region --bench fault_cost --features fault-profile
//!
//! Environment: `ZPAGE_BENCH_IMAGE` (a raw memory image; default: generated
//! text-like data), `ZPAGE_BENCH_SIZE_MIB` (default 1024),
//! `ZPAGE_BENCH_BUDGET_MIB` (default a quarter), `ZPAGE_BENCH_THREADS`
//! (default 1), `ZPAGE_BENCH_KEEP_COPIES=1` (keep clean copies).
mod common;

use common::{env_usize, TextLike};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use zpage_region::{fault_profile, reset_fault_profile, Region, RegionConfig, PAGE_SIZE};

fn fill(region: &Region) -> String {
    let base = region.as_ptr();
    match std::env::var_os("ZPAGE_BENCH_IMAGE") {
        Some(path) => {
            let mut file = std::fs::File::open(&path).expect("open ZPAGE_BENCH_IMAGE");
            let mut buffer = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < region.len() {
                let n = file.read(&mut buffer).expect("read image");
                if n == 0 {
                    break;
                }
                let n = n.min(region.len() - at);
                // SAFETY: in bounds of the region.
                unsafe { std::ptr::copy_nonoverlapping(buffer.as_ptr(), base.add(at), n) };
                at += n;
            }
            format!("{} ({} MiB used)", path.to_string_lossy(), at >> 20)
        }
        None => {
            let mut text = TextLike::new();
            for w in 0..region.len() / 8 {
                let v = text.next_word(w / (PAGE_SIZE / 8), w % (PAGE_SIZE / 8));
                // SAFETY: in bounds of the region, aligned.
                unsafe { (base as *mut u64).add(w).write_volatile(v) };
            }
            "generated text-like data".into()
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let size = env_usize("ZPAGE_BENCH_SIZE_MIB", 1024) << 20;
    let budget = env_usize("ZPAGE_BENCH_BUDGET_MIB", (size >> 20) / 4) << 20;
    let threads = env_usize("ZPAGE_BENCH_THREADS", 1).max(1);
    let keep_copies = env_usize("ZPAGE_BENCH_KEEP_COPIES", 0) == 1;
    let mut config = RegionConfig::new(size, budget);
    config.keep_clean_copies = keep_copies;
    let region = std::sync::Arc::new(Region::new(config).expect("region"));
    let data = fill(&region);
    // Two passes of random reads: the first evicts the fill's pages (every
    // eviction compresses); the second is the steady state measured.
    let pages = region.len() / PAGE_SIZE;
    let touches = pages as u64;
    let run = |measure: bool| {
        let fault_ns = std::sync::Arc::new(AtomicU64::new(0));
        let faults = std::sync::Arc::new(AtomicU64::new(0));
        let hits_ns = std::sync::Arc::new(AtomicU64::new(0));
        let hist = std::sync::Arc::new((0..64).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let started = Instant::now();
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (region, fault_ns, faults, hits_ns, hist) = (
                    region.clone(),
                    fault_ns.clone(),
                    faults.clone(),
                    hits_ns.clone(),
                    hist.clone(),
                );
                std::thread::spawn(move || {
                    let base = region.as_ptr() as usize;
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                    let mut sum = 0u64;
                    for _ in 0..touches / threads as u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let page = (x % pages as u64) as usize;
                        let word = ((x >> 40) % 512) as usize;
                        let before = region.fault_count();
                        let t0 = Instant::now();
                        // SAFETY: in bounds of the region, aligned.
                        sum = sum.wrapping_add(unsafe {
                            ((base + page * PAGE_SIZE + word * 8) as *const u64).read_volatile()
                        });
                        let ns = t0.elapsed().as_nanos() as u64;
                        if !measure {
                            continue;
                        }
                        if region.fault_count() != before {
                            fault_ns.fetch_add(ns, Ordering::Relaxed);
                            faults.fetch_add(1, Ordering::Relaxed);
                            hist[63 - ns.max(1).leading_zeros() as usize]
                                .fetch_add(1, Ordering::Relaxed);
                        } else {
                            hits_ns.fetch_add(ns, Ordering::Relaxed);
                        }
                    }
                    std::hint::black_box(sum);
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        (
            started.elapsed(),
            fault_ns.load(Ordering::Relaxed),
            faults.load(Ordering::Relaxed),
            hist,
        )
    };
    run(false);
    reset_fault_profile();
    let (elapsed, touch_fault_ns, faulting_touches, hist) = run(true);
    let profile = fault_profile();
    let per = |count: u64, ns: u64| {
        if count == 0 {
            0.0
        } else {
            ns as f64 / count as f64 / 1000.0
        }
    };
    let resolve = profile
        .iter()
        .find(|p| p.0 == zpage_region::FaultPart::Resolve)
        .map(|p| per(p.1, p.2))
        .unwrap_or(0.0);
    let dispatch = profile
        .iter()
        .find(|p| p.0 == zpage_region::FaultPart::Dispatch)
        .map(|p| per(p.1, p.2))
        .unwrap_or(0.0);
    let touch_mean = per(faulting_touches, touch_fault_ns);
    let mut seen = 0;
    let p50 = hist
        .iter()
        .enumerate()
        .find(|(_, n)| {
            seen += n.load(Ordering::Relaxed);
            seen * 2 >= faulting_touches
        })
        .map(|(i, _)| (1u64 << (i + 1)) as f64 / 1000.0)
        .unwrap_or(0.0);
    let stats = region.stats();
    println!(
        "fault cost: {} MiB region, {} MiB budget, {threads} thread(s), {data}, clean copies {}",
        size >> 20,
        budget >> 20,
        if keep_copies { "kept" } else { "given up" }
    );
    println!(
        "{:.1}k touches/s; {faulting_touches} faulting touches, mean {touch_mean:.2} us (p50 < {p50:.1} us)",
        touches as f64 / elapsed.as_secs_f64() / 1000.0
    );
    println!();
    println!("| part | occurrences | mean per occurrence (us) | per faulting touch (us) |");
    println!("|---|---|---|---|");
    println!(
        "| kernel fault entry, signal delivery and return | {faulting_touches} | {:.2} | {:.2} |",
        touch_mean - dispatch - resolve,
        touch_mean - dispatch - resolve
    );
    for (part, count, ns) in &profile {
        if *count == 0 {
            continue;
        }
        println!(
            "| {} | {count} | {:.2} | {:.2} |",
            part.name(),
            per(*count, *ns),
            *ns as f64 / faulting_touches.max(1) as f64 / 1000.0
        );
    }
    println!("| the whole faulting touch, seen by the program | {faulting_touches} | {touch_mean:.2} | {touch_mean:.2} |");
    println!();
    println!(
        "restores {} trial hits {} evictions {} (clean {}, by faulting threads {}) compressions {} throttles {}",
        stats.restore_count,
        stats.trial_hit_count,
        stats.eviction_count,
        stats.clean_eviction_count,
        stats.sync_eviction_count,
        stats.compression_count,
        stats.throttle_count
    );
}
