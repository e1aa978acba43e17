//! The pool's holes: pages restored give their blobs up (exclusive loads),
//! which leaves holes across the pool's spans. The reclaimer compacts when
//! they pass a thirty-second of the blobs, so after random reads a budget's
//! pool holds little more than its blobs, and every page reads back exact.
//!
//! Size: `ZPAGE_TEST_COMPACTION_MIB` (default 256 MiB of region, an eighth of it
//! as budget). The bound allows each pool shard's partly filled spans (a
//! few MiB whatever the pool's size) on top of the thirty-second.

mod common;

use common::*;
use std::time::{Duration, Instant};
use zpage_region::{Region, RegionConfig, PAGE_SIZE};

fn region_mib() -> usize {
    std::env::var("ZPAGE_TEST_COMPACTION_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// Word `w` of page `p`: the first words of each page are noise, as many as
/// the page number picks, the rest repeat, so blobs fall into many size
/// classes (as a real heap's do).
fn varied_word(p: usize, w: usize) -> u64 {
    let noisy_words = (p * 37) % (PAGE_SIZE / 8 - 16);
    if w < noisy_words {
        let mut x = (p as u64) << 20 ^ w as u64;
        x ^= x >> 31;
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^ x >> 29
    } else {
        u64::from_le_bytes(*b"heap    ") ^ (p as u64) << 48
    }
}

/// Room for the pool shards' partly filled spans, which no compaction frees.
const PARTLY_FILLED_SPANS: u64 = 6 * MIB as u64;

#[test]
fn random_reads_leave_the_pool_within_a_thirty_second_of_its_blobs() {
    let region = Region::new(RegionConfig::new(
        region_mib() * MIB,
        region_mib() * MIB / 8,
    ))
    .expect("region");
    let pages = region.len() / PAGE_SIZE;
    for p in 0..pages {
        for w in 0..PAGE_SIZE / 8 {
            write(&region, p, w, varied_word(p, w));
        }
    }
    // Random reads over eight times the budget: most touches restore a page
    // (freeing its blob) and evict another (storing a new one).
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..2 * pages {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let p = (x % pages as u64) as usize;
        for w in [0, 1, PAGE_SIZE / 8 - 1] {
            assert_eq!(read(&region, p, w), varied_word(p, w), "page {p} word {w}");
        }
    }
    // The reclaimer looks at the holes at most every 100 ms, idle or not.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut blobs, mut pool);
    loop {
        std::thread::sleep(Duration::from_millis(150));
        let stats = region.stats();
        blobs = stats.compressed_bytes;
        pool = stats.pool_bytes;
        if pool.saturating_sub(blobs) <= blobs / 32 + PARTLY_FILLED_SPANS
            || Instant::now() > deadline
        {
            break;
        }
    }
    let stats = region.stats();
    assert!(stats.restore_count as usize > pages, "{stats:?}");
    assert!(
        pool.saturating_sub(blobs) <= blobs / 32 + PARTLY_FILLED_SPANS,
        "pool {pool} bytes for {blobs} bytes of blobs: holes above a thirty-second"
    );
    for p in 0..pages {
        for w in 0..PAGE_SIZE / 8 {
            assert_eq!(read(&region, p, w), varied_word(p, w), "page {p} word {w}");
        }
    }
}
