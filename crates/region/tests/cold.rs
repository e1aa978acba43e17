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

fn cold_region(cold_codec: &str, cold_after: Duration) -> Region {
    let mut config = RegionConfig::new(region_mib() * MIB, 4 * MIB);
    config.cold_codec = Some(cold_codec.parse().expect("codec"));
    config.cold_after = cold_after;
    Region::new(config).expect("region")
}

fn wait_under_budget(region: &Region) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while region.stats().budget_resident_bytes > region.stats().budget_bytes {
        assert!(Instant::now() < deadline, "never under budget");
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

/// A page restored from a cold copy went cold once: its next eviction
/// compresses it with the cold codec straight away, and it reads back.
#[test]
fn a_page_that_went_cold_is_compressed_cold_at_its_next_eviction() {
    let region = cold_region("zstd", Duration::from_secs(3600));
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        write_text_page(&region, p, 1);
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    region
        .recompress_now(0, region.len())
        .expect("recompress_now");
    let recompressed = region.stats().recompression_count;
    assert!(recompressed > (pages / 2) as u64);
    // Restore a range (reads), write half of it, and evict it again.
    let range = 64..192;
    for p in range.clone() {
        check_text_page(&region, p, 1);
        if p % 2 == 0 {
            write_text_page(&region, p, 2);
        }
    }
    let before = region.stats();
    region
        .advise_cold(range.start * PAGE_SIZE, range.len() * PAGE_SIZE)
        .expect("advise_cold");
    let after = region.stats();
    assert!(
        after.cold_compression_count >= before.cold_compression_count + range.len() as u64 / 2,
        "{after:#?}"
    );
    assert_eq!(
        after.recompression_count, recompressed,
        "no recompression needed"
    );
    for p in range {
        check_text_page(&region, p, if p % 2 == 0 { 2 } else { 1 });
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
    let region = cold_region("zstd-dict", Duration::from_millis(0));
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
        while region.stats().recompression_count < (pages / 4) as u64 {
            assert!(
                Instant::now() < deadline,
                "the reclaimer recompressed only {} pages\n{:#?}",
                region.stats().recompression_count,
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
