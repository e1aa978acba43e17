//! The fault path's safety argument, tested: it allocates nothing, and a
//! program's signal handler that reads region memory works while the
//! interrupted thread faults, prefaults, pins and reads stats (and while
//! zpage's own threads hold locks and pages: they block asynchronous signals,
//! so a process-directed timer signal never lands on them).
mod common;

use common::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use zpage_region::{Budget, BudgetConfig, Region, RegionConfig, PAGE_SIZE};
use zpage_testsupport::alloc::{self, PerThreadCounter, ALLOCATION_ALARM};

#[global_allocator]
static ALLOCATOR: PerThreadCounter = PerThreadCounter;

fn pattern(page: usize, round: u64) -> u64 {
    (page as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xD6E8_FEB8_6659_FD93)
        | 1
}

#[test]
fn the_fault_path_allocates_nothing() {
    fault_path_allocates_nothing(false, None, false);
}

#[test]
fn the_fault_path_allocates_nothing_keeping_clean_copies() {
    fault_path_allocates_nothing(true, None, false);
}

/// Restores of pages that share their blob with others (dedup).
#[test]
fn the_fault_path_allocates_nothing_restoring_shared_pages() {
    fault_path_allocates_nothing(false, None, true);
}

/// Restores of pages recompressed with zstd and its dictionary trained after
/// the fault handler's decoders were made.
#[test]
fn the_fault_path_allocates_nothing_restoring_recompressed_pages() {
    fault_path_allocates_nothing(false, Some("zstd-dict"), false);
}

fn fault_path_allocates_nothing(keep_clean_copies: bool, cold_codec: Option<&str>, dedup: bool) {
    let mut config = RegionConfig::new(32 * MIB, 4 * MIB);
    config.keep_clean_copies = keep_clean_copies;
    config.dedup = dedup;
    config.cold_codec = cold_codec.map(|c| c.parse().expect("codec"));
    let region = Region::new(config).expect("region");
    let pages = region.len() / PAGE_SIZE;
    // With dedup, pages repeat with a period of 16, so most share a blob.
    let key = |p: usize| if dedup { p % 16 } else { p };
    // Half the pages written (the rest are never written: zero fills); with
    // a cold codec, text that it shrinks, word 0 as without.
    for p in (0..pages).step_by(2) {
        if cold_codec.is_some() {
            write_text_page(&region, p, 1);
        }
        write(&region, p, 0, pattern(key(p), 1));
    }
    // Wait until the reclaimer has brought the region under its budget.
    while region.stats().budget_resident_bytes > region.stats().budget_bytes {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if cold_codec.is_some() {
        region
            .recompress_now(0, region.len())
            .expect("recompress_now");
        // Pages evicted once the cold codec's dictionary was trained took
        // it at eviction; the rest were just recompressed: either way their
        // blobs are the cold codec's, which the faults below decode. How
        // many took which way depends on when the dictionary arrived.
        let stats = region.stats();
        assert!(
            stats.recompression_count + stats.cold_compression_count > (pages / 4) as u64,
            "{stats:#?}"
        );
    }
    let before = region.stats();
    let faults_before = region.fault_count();
    let allocations_before = alloc::calls_here();
    // Every kind of fault, on this thread only, with nothing else allocating
    // here: restores (giving their copy up, or, keeping clean copies, read
    // faults restoring write-protected), zero fills, and, keeping clean
    // copies, first writes to restored pages and the clean evictions the
    // faulting thread does itself at the high watermark.
    let mut rng = Rng(0x5eed);
    let mut wrong = 0u64;
    for i in 0..200_000u64 {
        let p = rng.below(pages);
        let expected = if p.is_multiple_of(2) {
            pattern(key(p), 1)
        } else {
            0
        };
        match i % 8 {
            0 if p.is_multiple_of(2) => write(&region, p, 0, pattern(key(p), 1)),
            _ => {
                if read(&region, p, 0) != expected {
                    wrong += 1;
                }
            }
        }
    }
    let allocations = alloc::calls_here() - allocations_before;
    let faults = region.fault_count() - faults_before;
    let after = region.stats();
    assert_eq!(wrong, 0);
    assert!(faults > 10_000, "{faults} faults");
    assert_eq!(
        allocations, 0,
        "{allocations} allocations in {faults} faults"
    );
    let mut paths = vec![
        ("restores", after.restore_count > before.restore_count),
        ("zero fills", after.zero_fill_count > before.zero_fill_count),
    ];
    if dedup {
        paths.push(("shared blobs", before.dedup_hit_count > (pages / 8) as u64));
    }
    if keep_clean_copies {
        paths.push((
            "first writes",
            after.first_write_count > before.first_write_count,
        ));
        paths.push((
            "faulting-thread evictions",
            after.sync_eviction_count > before.sync_eviction_count,
        ));
    }
    for (name, grew) in paths {
        assert!(
            grew,
            "no {name} happened: the test does not cover that path\n{after:#?}"
        );
    }
}

/// A stored page whose blob is corrupt: touching it ends the process with a
/// message naming the page and the codec, and nothing on the way allocates
/// (the handler may be interrupting `malloc`).
#[test]
fn a_corrupt_blob_ends_the_process_naming_the_page() {
    corrupt_blob_ends_the_process_naming_the_page(
        "a_corrupt_blob_ends_the_process_naming_the_page",
        None,
    );
}

/// The same for a page recompressed with the cold codec: the message names
/// that codec.
#[test]
fn a_corrupt_recompressed_blob_ends_the_process_naming_the_page() {
    corrupt_blob_ends_the_process_naming_the_page(
        "a_corrupt_recompressed_blob_ends_the_process_naming_the_page",
        Some("zstd-dict"),
    );
}

fn corrupt_blob_ends_the_process_naming_the_page(test: &str, cold_codec: Option<&str>) {
    if !is_child() {
        let stderr = run_child_expecting_abort(test);
        assert!(
            stderr.contains("zpage: page 100 (address 0x")
                && stderr.contains(&format!(
                    "cannot be restored: its {} blob of 300 bytes does not decode",
                    cold_codec.unwrap_or("lz4")
                )),
            "{stderr}"
        );
        assert!(!stderr.contains(ALLOCATION_ALARM), "{stderr}");
        assert!(!stderr.contains("READ BACK"), "{stderr}");
        return;
    }
    let mut config = RegionConfig::new(8 * MIB, MIB);
    config.cold_codec = cold_codec.map(|c| c.parse().expect("codec"));
    let region = Region::new(config).expect("region");
    for p in 0..region.len() / PAGE_SIZE {
        if cold_codec.is_some() {
            write_text_page(&region, p, 1);
        } else {
            for w in (0..PAGE_SIZE / 8).step_by(3) {
                write(&region, p, w, pattern(p, w as u64));
            }
        }
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    if cold_codec.is_some() {
        region
            .recompress_now(0, region.len())
            .expect("recompress_now");
        assert!(region.stats().recompression_count > 0);
    }
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 151 % 251) as u8).collect();
    region
        .corrupt_page_for_test(100 * PAGE_SIZE, &garbage)
        .expect("corrupt");
    alloc::alarm(true);
    let value = read(&region, 100, 0);
    alloc::alarm(false);
    eprintln!("page 100 READ BACK {value:#x}");
    std::process::exit(0);
}

// ---- A program's timer signal handler reading region memory ----------------

/// The region the handler reads (set before the timer starts).
static HANDLER_BASE: AtomicUsize = AtomicUsize::new(0);
static HANDLER_PAGES: AtomicUsize = AtomicUsize::new(0);
static HANDLER_READS: AtomicU64 = AtomicU64::new(0);
static HANDLER_WRONG: AtomicU64 = AtomicU64::new(0);
static HANDLER_RNG: AtomicU64 = AtomicU64::new(0x1234_5678);

extern "C" fn on_alarm(_signal: libc::c_int) {
    let base = HANDLER_BASE.load(Ordering::Relaxed);
    let pages = HANDLER_PAGES.load(Ordering::Relaxed);
    if base == 0 || pages == 0 {
        return;
    }
    let mut x = HANDLER_RNG.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    HANDLER_RNG.store(x, Ordering::Relaxed);
    let page = (x % pages as u64) as usize;
    // SAFETY: in bounds of the live region (it outlives the timer), aligned.
    let word = unsafe { &*((base + page * PAGE_SIZE) as *const AtomicU64) };
    if word.load(Ordering::Relaxed) != pattern(page, 7) {
        HANDLER_WRONG.fetch_add(1, Ordering::Relaxed);
    }
    HANDLER_READS.fetch_add(1, Ordering::Relaxed);
}

/// How long the signal test runs (longer with ZPAGE_STRESS_SECONDS).
fn seconds() -> u64 {
    std::env::var("ZPAGE_STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// A 10 kHz process-directed timer whose handler reads a random page of a
/// region with a small budget, while the main thread reads and writes other
/// pages and calls prefault, pin, unpin, advise_willneed and stats, and a
/// second region on the same budget is read by another thread. Runs in a
/// child process: a hang is caught by the parent's timeout, not by a wedged
/// test binary.
#[test]
fn a_timer_signal_handler_reads_region_memory() {
    if !is_child() {
        let output = run_child_output("a_timer_signal_handler_reads_region_memory");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{:?}\n{stderr}", output.status);
        assert!(stderr.contains("handler reads:"), "{stderr}");
        for line in stderr.lines().filter(|l| l.contains("handler reads:")) {
            eprintln!("{line}");
        }
        return;
    }
    let budget = Budget::new(BudgetConfig::new(8 * MIB)).expect("budget");
    let region = Region::with_budget(&budget, 64 * MIB).expect("region");
    let neighbour = std::sync::Arc::new(Region::with_budget(&budget, 16 * MIB).expect("region"));
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write(&region, p, 0, pattern(p, 7));
    }
    for p in 0..neighbour.len() / PAGE_SIZE {
        write(&neighbour, p, 0, pattern(p, 9));
    }
    HANDLER_BASE.store(region.as_ptr() as usize, Ordering::Relaxed);
    HANDLER_PAGES.store(pages, Ordering::Relaxed);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (neighbour, stop) = (
            std::sync::Arc::clone(&neighbour),
            std::sync::Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            let mut rng = Rng(99);
            let pages = neighbour.len() / PAGE_SIZE;
            let mut wrong = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let p = rng.below(pages);
                if read(&neighbour, p, 0) != pattern(p, 9) {
                    wrong += 1;
                }
            }
            wrong
        })
    };
    start_alarm(on_alarm, 100);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds());
    let mut rng = Rng(7);
    let mut wrong = 0u64;
    let mut round = 0u64;
    while std::time::Instant::now() < deadline {
        round += 1;
        for _ in 0..2000 {
            let p = rng.below(pages);
            if read(&region, p, 0) != pattern(p, 7) {
                wrong += 1;
            }
            if rng.below(8) == 0 {
                write(&region, p, 1, round);
            }
        }
        let p = rng.below(pages - 16);
        region
            .prefault(p * PAGE_SIZE, 16 * PAGE_SIZE)
            .expect("prefault");
        region.pin(p * PAGE_SIZE, 4 * PAGE_SIZE).expect("pin");
        let _ = region.stats();
        region.unpin(p * PAGE_SIZE, 4 * PAGE_SIZE).expect("unpin");
        region
            .advise_willneed(rng.below(pages - 8) * PAGE_SIZE, 8 * PAGE_SIZE)
            .expect("willneed");
    }
    stop_alarm();
    stop.store(true, Ordering::Relaxed);
    let neighbour_wrong = reader.join().expect("reader");
    let reads = HANDLER_READS.load(Ordering::Relaxed);
    let handler_wrong = HANDLER_WRONG.load(Ordering::Relaxed);
    eprintln!(
        "handler reads: {reads}, wrong {handler_wrong}; main-thread wrong {wrong}; neighbour wrong {neighbour_wrong}; faults {}",
        region.fault_count()
    );
    assert_eq!(wrong + handler_wrong + neighbour_wrong, 0);
    assert!(reads > 1000, "the timer fired {reads} times");
    std::process::exit(0);
}
