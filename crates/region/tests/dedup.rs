//! Deduplication (`BudgetConfig::dedup`): identical evicted pages share one
//! blob, so a region holding an image twice (forked workers' heaps) takes
//! about half the compressed memory; every page reads back exact; a write to
//! one copy of a shared page never shows in another; discards and region
//! drops free shared blobs with their last page.
//!
//! Size: `ZPAGE_TEST_DEDUP_MIB` (default 16 MiB of region, 2 MiB budget).

mod common;

use common::*;
use std::time::{Duration, Instant};
use zpage_region::{Budget, BudgetConfig, Region, RegionConfig, PAGE_SIZE};

fn region_mib() -> usize {
    std::env::var("ZPAGE_TEST_DEDUP_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

const BUDGET: usize = 2 * MIB;

/// Writes text page `key` (version `round`) into page `p` of `region`:
/// pages with the same key and round are identical.
fn write_keyed(region: &Region, p: usize, key: usize, round: u64) {
    for w in 0..PAGE_SIZE / 8 {
        write(region, p, w, text_word(key, w, round));
    }
}

/// The number of words of page `p` that differ from text page `key`.
fn wrong_words(region: &Region, p: usize, key: usize, round: u64) -> usize {
    (0..PAGE_SIZE / 8)
        .filter(|&w| read(region, p, w) != text_word(key, w, round))
        .count()
}

fn wait_under_budget(region: &Region) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while region.stats().budget_resident_bytes > region.stats().budget_bytes {
        assert!(Instant::now() < deadline, "never under budget");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn region(dedup: bool) -> Region {
    let mut config = RegionConfig::new(region_mib() * MIB, BUDGET);
    config.dedup = dedup;
    Region::new(config).expect("region")
}

/// The region holds one image twice: page `p` of the second half is page `p`
/// of the first. Evicts all it can and returns the store's compressed bytes.
fn fill_twice_and_evict(region: &Region) -> u64 {
    let half = region.len() / PAGE_SIZE / 2;
    for p in 0..2 * half {
        write_keyed(region, p, p % half, 1);
    }
    region.advise_cold(0, region.len()).expect("advise_cold");
    wait_under_budget(region);
    region.stats().compressed_bytes
}

#[test]
fn an_image_held_twice_takes_half_the_memory_and_reads_back_exact() {
    let plain = region(false);
    let without = fill_twice_and_evict(&plain);
    let stats = plain.stats();
    assert_eq!(stats.dedup_hit_count, 0, "{stats:#?}");
    drop(plain);

    let region = region(true);
    let with = fill_twice_and_evict(&region);
    let stats = region.stats();
    let pages = region.len() / PAGE_SIZE;
    eprintln!(
        "compressed bytes: {without} without dedup, {with} with; {} hits, {} bytes saved",
        stats.dedup_hit_count, stats.dedup_saved_bytes
    );
    assert!(
        stats.dedup_hit_count > (pages / 2 - pages / 8) as u64,
        "{stats:#?}"
    );
    assert_eq!(stats.dedup_verify_mismatch_count, 0, "{stats:#?}");
    assert!(
        with * 100 < without * 60 && with * 100 > without * 40,
        "compressed bytes {with} with dedup, {without} without: not about half"
    );
    let half = pages / 2;
    let wrong: usize = (0..pages)
        .map(|p| wrong_words(&region, p, p % half, 1))
        .sum();
    assert_eq!(wrong, 0, "{wrong} wrong words");
}

#[test]
fn a_write_to_one_copy_of_a_shared_page_never_shows_in_the_other() {
    let region = region(true);
    let half = region.len() / PAGE_SIZE / 2;
    fill_twice_and_evict(&region);
    assert!(region.stats().dedup_hit_count > 0);
    // Restore copy A of some shared pages and write to it.
    let written: Vec<usize> = (0..half).step_by(7).collect();
    for &p in &written {
        write(&region, p, 3, 0xdead_beef);
    }
    // Evict both copies again, then read copy B (original) and A (written).
    region.advise_cold(0, region.len()).expect("advise_cold");
    wait_under_budget(&region);
    for &p in &written {
        assert_eq!(
            wrong_words(&region, p + half, p, 1),
            0,
            "copy B of page {p}"
        );
        assert_eq!(read(&region, p, 3), 0xdead_beef, "copy A of page {p}");
        let others = (0..PAGE_SIZE / 8)
            .filter(|&w| w != 3 && read(&region, p, w) != text_word(p, w, 1))
            .count();
        assert_eq!(others, 0, "copy A of page {p}");
    }
    // The pages nobody wrote still read back.
    let wrong: usize = (0..half)
        .filter(|p| p % 7 != 0)
        .map(|p| wrong_words(&region, p, p, 1) + wrong_words(&region, p + half, p, 1))
        .sum();
    assert_eq!(wrong, 0);
}

#[test]
fn discarding_one_copy_leaves_the_other_and_dropping_both_frees_every_blob() {
    let mut config = BudgetConfig::new(BUDGET);
    config.dedup = true;
    let budget = Budget::new(config).expect("budget");
    let size = region_mib() * MIB / 2;
    let pages = size / PAGE_SIZE;
    // Two workers' heaps with the same image, and a small region that stays
    // to read the budget's figures.
    let a = Region::with_budget(&budget, size).expect("region a");
    let b = Region::with_budget(&budget, size).expect("region b");
    let observer = Region::with_budget(&budget, PAGE_SIZE).expect("observer");
    for region in [&a, &b] {
        for p in 0..pages {
            write_keyed(region, p, p, 1);
        }
        region.advise_cold(0, region.len()).expect("advise_cold");
    }
    wait_under_budget(&a);
    assert!(
        b.stats().dedup_hit_count > (pages / 2) as u64,
        "{:#?}",
        b.stats()
    );
    // MADV_DONTNEED on half of A: those pages read zeros, B's stay.
    // SAFETY: the first half of A's own mapping; no reference into it is held.
    let r = unsafe { libc::madvise(a.as_ptr().cast(), size / 2, libc::MADV_DONTNEED) };
    assert_eq!(r, 0);
    for p in 0..pages / 2 {
        assert_eq!(read(&a, p, 0), 0, "discarded page {p} of A");
    }
    let wrong: usize = (0..pages).map(|p| wrong_words(&b, p, p, 1)).sum();
    assert_eq!(wrong, 0, "B after A's discard");
    // Evict B again, drop A: B's pages still come back.
    b.advise_cold(0, b.len()).expect("advise_cold");
    drop(a);
    let wrong: usize = (0..pages).map(|p| wrong_words(&b, p, p, 1)).sum();
    assert_eq!(wrong, 0, "B after dropping A");
    b.advise_cold(0, b.len()).expect("advise_cold");
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = observer.stats();
        if stats.compressed_bytes == 0 && stats.stored_pages == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "blobs left after both regions went: {stats:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Threads fault, write and read their own pages while the reclaimer evicts
/// and deduplicates them: page contents come from few versions, so pages
/// keep sharing blobs, and each thread's shadow says what every page holds.
#[test]
fn faults_and_writes_racing_the_reclaimer_never_read_wrong_bytes() {
    const THREADS: usize = 2;
    const KEYS: usize = 8;
    let region = region(true);
    let pages = region.len() / PAGE_SIZE;
    let per_thread = pages / THREADS;
    let wrong: usize = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let region = &region;
                scope.spawn(move || {
                    let first = t * per_thread;
                    let mut shadow = vec![(0usize, 0u64); per_thread];
                    for (i, content) in shadow.iter_mut().enumerate() {
                        *content = (i % KEYS, 1);
                        write_keyed(region, first + i, content.0, content.1);
                    }
                    let mut rng = Rng(0x5eed + t as u64);
                    let mut wrong = 0;
                    let deadline = Instant::now() + Duration::from_secs(3);
                    while Instant::now() < deadline {
                        let i = rng.below(per_thread);
                        let (key, round) = shadow[i];
                        if rng.below(4) == 0 {
                            let content = (rng.below(KEYS), 1 + rng.below(2) as u64);
                            write_keyed(region, first + i, content.0, content.1);
                            shadow[i] = content;
                        } else {
                            wrong += wrong_words(region, first + i, key, round);
                        }
                    }
                    for (i, &(key, round)) in shadow.iter().enumerate() {
                        wrong += wrong_words(region, first + i, key, round);
                    }
                    wrong
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    let stats = region.stats();
    assert_eq!(wrong, 0, "{wrong} wrong words\n{stats:#?}");
    assert!(stats.restore_count > 100, "{stats:#?}");
    assert!(stats.dedup_hit_count > 100, "{stats:#?}");
}
