//! Cold recompression: pages compressed with the fast codec move to the
//! budget's cold codec (zstd, zstd with a dictionary trained from the pages),
//! take less memory, and every page reads back exact, with faults and writes
//! racing with the recompression.
//!
//! Size: `ZPAGE_TEST_COLD_MIB` (default 32 MiB of region, 4 MiB budget).

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zpage_region::{Region, RegionConfig, PAGE_SIZE};

fn region_mib() -> usize {
    std::env::var("ZPAGE_TEST_COLD_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

/// A region with `cold_codec` used for recompression by age only (every
/// eviction takes the fast codec), so the tests of recompression have
/// fast-codec pages to work on.
fn cold_region(cold_codec: &str, cold_after: Duration) -> Region {
    cold_region_with(cold_codec, cold_after, false)
}

fn cold_region_with(cold_codec: &str, cold_after: Duration, cold_at_eviction: bool) -> Region {
    let mut config = RegionConfig::new(region_mib() * MIB, 4 * MIB);
    config.cold_codec = Some(cold_codec.parse().expect("codec"));
    config.cold_after = cold_after;
    config.cold_at_eviction = cold_at_eviction;
    Region::new(config).expect("region")
}

fn wait_under_budget(region: &Region) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while region.stats().budget_resident_bytes > region.stats().budget_bytes {
        assert!(Instant::now() < deadline, "never under budget");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The region's figures once the pages `advise_cold` moved out have been
/// compressed: it returns when they are in the staging area, and the
/// reclaimer and its helper compress them after (waits 2 s at most; pages
/// still staged then are counted in `staged_bytes`).
fn settled_stats(region: &Region) -> zpage_region::RegionStats {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let stats = region.stats();
        if stats.staged_bytes == 0 || Instant::now() >= deadline {
            return stats;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `recompress_now` moves the compressed pages to the cold codec (training
/// the dictionary first for zstd-dict), the store holds fewer bytes, and
/// every page reads back as written.
fn recompress_now_shrinks_and_reads_back(cold_codec: &str) {
    // Never on its own: this test triggers it.
    let region = cold_region(cold_codec, Duration::from_secs(3600));
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write_text_page(&region, p, 1);
    }
    wait_under_budget(&region);
    let before = region.stats();
    assert_eq!(before.recompression_count, 0, "{before:#?}");
    region
        .recompress_now(0, region.len())
        .expect("recompress_now");
    let after = region.stats();
    assert!(
        after.recompression_count > (pages / 2) as u64,
        "{cold_codec}: only {} of {pages} pages recompressed\n{after:#?}",
        after.recompression_count
    );
    assert!(after.recompression_saved_bytes > 0);
    eprintln!(
        "{cold_codec}: {} pages recompressed, compressed bytes {} -> {}",
        after.recompression_count, before.compressed_bytes, after.compressed_bytes
    );
    assert!(
        after.compressed_bytes + after.recompression_saved_bytes / 2 < before.compressed_bytes,
        "{cold_codec}: compressed bytes {} -> {} (saved {})",
        before.compressed_bytes,
        after.compressed_bytes,
        after.recompression_saved_bytes
    );
    for p in 0..pages {
        check_text_page(&region, p, 1);
    }
}

/// With `cold_at_eviction`, pages with no quick reuse go out with the cold
/// codec at once (nothing left to recompress), a page faulted back soon
/// after its eviction goes out with the fast codec next time, and a later
/// slow return makes it cold again; every page reads back as written.
#[test]
fn pages_without_quick_reuse_go_out_with_the_cold_codec() {
    let region = cold_region_with("zstd", Duration::from_secs(3600), true);
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write_text_page(&region, p, 1);
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    let first = settled_stats(&region);
    assert!(
        first.cold_compression_count > (pages * 9 / 10) as u64,
        "never-refaulted pages should go out cold: {first:#?}"
    );
    // Out, then back at once (a quick refault: fewer evictions since than
    // the threshold, a budget's worth), half of them written, and out
    // again: the fast codec.
    let range = 64..192;
    for p in range.clone() {
        check_text_page(&region, p, 1);
    }
    region
        .advise_cold(range.start * PAGE_SIZE, range.len() * PAGE_SIZE)
        .expect("advise_cold");
    let first = settled_stats(&region);
    for p in range.clone() {
        check_text_page(&region, p, 1);
        if p % 2 == 0 {
            write_text_page(&region, p, 2);
        }
    }
    region
        .advise_cold(range.start * PAGE_SIZE, range.len() * PAGE_SIZE)
        .expect("advise_cold");
    let quick = settled_stats(&region);
    // Pages still staged at `first` (none, once settled) were the range's
    // previous, slow return: they may still be compressed cold.
    let staged_at_first = first.staged_bytes / PAGE_SIZE as u64;
    assert!(
        quick.cold_compression_count <= first.cold_compression_count + staged_at_first,
        "quickly refaulted pages keep the fast codec: {} cold compressions before, {staged_at_first} pages staged then, {quick:#?}",
        first.cold_compression_count
    );
    assert!(quick.compression_count >= first.compression_count + range.len() as u64 / 2);
    assert_eq!(quick.recompression_count, 0, "nothing recompressed");
    // The same pages come back only after more than a budget of other
    // evictions: slow, so out cold again.
    let budget_pages = 4 * MIB / PAGE_SIZE;
    let others = (range.end..pages).take(2 * budget_pages);
    for p in others.clone() {
        check_text_page(&region, p, 1);
    }
    region
        .advise_cold(range.end * PAGE_SIZE, others.len() * PAGE_SIZE)
        .expect("advise_cold");
    for p in range.clone() {
        check_text_page(&region, p, if p % 2 == 0 { 2 } else { 1 });
    }
    let before = settled_stats(&region);
    region
        .advise_cold(range.start * PAGE_SIZE, range.len() * PAGE_SIZE)
        .expect("advise_cold");
    let slow = settled_stats(&region);
    assert!(
        slow.cold_compression_count >= before.cold_compression_count + range.len() as u64 / 2,
        "slowly refaulted pages go out cold again: {slow:#?}"
    );
    for p in 0..pages {
        let expected = if range.contains(&p) && p % 2 == 0 {
            2
        } else {
            1
        };
        check_text_page(&region, p, expected);
    }
}

/// Without `cold_at_eviction` every eviction takes the fast codec.
#[test]
fn without_cold_at_eviction_pages_go_out_with_the_fast_codec() {
    let region = cold_region("zstd", Duration::from_secs(3600));
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write_text_page(&region, p, 1);
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    let stats = region.stats();
    assert_eq!(stats.cold_compression_count, 0, "{stats:#?}");
    assert!(stats.compression_count > (pages / 2) as u64, "{stats:#?}");
    for p in 0..pages {
        check_text_page(&region, p, 1);
    }
}

#[test]
fn recompress_now_with_zstd_shrinks_and_reads_back() {
    recompress_now_shrinks_and_reads_back("zstd");
}

#[test]
fn recompress_now_with_a_trained_dictionary_shrinks_and_reads_back() {
    recompress_now_shrinks_and_reads_back("zstd-dict");
}

/// The reclaimer recompresses by itself once pages have been compressed
/// `cold_after`, training the dictionary on its own pages; threads fault
/// pages back and write them meanwhile, and no page ever reads back other
/// than as last written (a restored page is never clobbered by a
/// recompression of its old copy).
#[test]
fn background_recompression_races_with_faults_and_writes() {
    cold_pages_race_with_faults_and_writes(false);
}

/// The same with the cold codec taken at eviction: pages go out with the
/// dictionary once it is trained, threads fault them back and write them
/// meanwhile, and every page reads back as last written.
#[test]
fn cold_evictions_race_with_faults_and_writes() {
    cold_pages_race_with_faults_and_writes(true);
}

fn cold_pages_race_with_faults_and_writes(cold_at_eviction: bool) {
    let region = cold_region_with("zstd-dict", Duration::from_millis(0), cold_at_eviction);
    let moved_to_cold = |stats: &zpage_region::RegionStats| {
        if cold_at_eviction {
            stats.cold_compression_count
        } else {
            stats.recompression_count
        }
    };
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write_text_page(&region, p, 1);
    }
    // The version of each page, as last written.
    let versions: Vec<AtomicU64> = (0..pages).map(|_| AtomicU64::new(1)).collect();
    let stop = AtomicBool::new(false);
    const THREADS: usize = 3;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (region, versions, stop) = (&region, &versions, &stop);
            scope.spawn(move || {
                let mut rng = Rng(0x1234 + t as u64);
                let mut touches = 0u64;
                while !stop.load(Ordering::Relaxed) || touches < 20_000 {
                    // Each thread reads and writes only its own pages
                    // (p % THREADS == t), so it knows their version.
                    let p = rng.below(pages / THREADS) * THREADS + t;
                    let version = versions[p].load(Ordering::Relaxed);
                    if touches.is_multiple_of(5) {
                        write_text_page(region, p, version + 1);
                        versions[p].store(version + 1, Ordering::Relaxed);
                    } else {
                        check_text_page(region, p, version);
                    }
                    touches += 1;
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        while moved_to_cold(&region.stats()) < (pages / 4) as u64 {
            assert!(
                Instant::now() < deadline,
                "only {} pages took the cold codec\n{:#?}",
                moved_to_cold(&region.stats()),
                region.stats()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Keep racing a while after the dictionary is in use.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
    });
    let stats = region.stats();
    assert!(stats.restore_count > 1000, "{stats:#?}");
    for (p, version) in versions.iter().enumerate() {
        check_text_page(&region, p, version.load(Ordering::Relaxed));
    }
}

#[test]
fn a_cold_codec_equal_to_the_codec_is_refused_naming_the_fix() {
    let mut config = RegionConfig::new(4 * MIB, MIB);
    config.cold_codec = Some("lz4".parse().unwrap());
    let error = Region::new(config).unwrap_err().to_string();
    assert!(
        error.contains("cold_codec") && error.contains("zstd"),
        "{error}"
    );
}

#[test]
fn recompress_now_without_a_cold_codec_says_which_setting() {
    let region = Region::new(RegionConfig::new(4 * MIB, MIB)).expect("region");
    let error = region.recompress_now(0, region.len()).unwrap_err();
    assert!(error.to_string().contains("cold_codec"), "{error}");
}
