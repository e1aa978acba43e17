//! The store's counters after a scripted sequence equal hand-computed values exactly.

#[path = "pages_support/mod.rs"]
mod pages;

use zpage_codec::{fill_page, Encoded, Encoder, Page, PAGE_SIZE};
use zpage_store::{
    CodecSpec, EventCounts, PageStoreConfig, PoolKind, RejectReason, RejectThreshold, Store,
    StoreConfig, StoreError, StoreOutcome,
};

fn text_page(seed: u8) -> Box<Page> {
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let text = format!("key=value {seed} the quick brown fox jumps over the lazy dog; ");
    for (i, byte) in page.iter_mut().enumerate() {
        *byte = text.as_bytes()[i % text.len()];
    }
    page
}

fn random_page(seed: u64) -> Box<Page> {
    use rand::{Rng, SeedableRng};
    let mut page = Box::new([0u8; PAGE_SIZE]);
    rand::rngs::StdRng::seed_from_u64(seed).fill(&mut page[..]);
    page
}

fn compressed_len(page: &Page) -> usize {
    let mut encoder = Encoder::new(&CodecSpec::lz4(), RejectThreshold::default()).unwrap();
    match encoder.encode(page, &mut [0u8; PAGE_SIZE]).unwrap() {
        Encoded::Compressed(len) => len,
        other => panic!("test page expected to compress, got {other:?}"),
    }
}

#[test]
fn scripted_sequence_counts_exactly() {
    let store = Store::new(StoreConfig::default()).unwrap();
    let mut worker = store.worker().unwrap();
    let mut out = Box::new([0u8; PAGE_SIZE]);
    let mut same = Box::new([0u8; PAGE_SIZE]);
    fill_page(&mut same, 0xabab_abab_abab_abab);
    let (text_a, text_b) = (text_page(1), text_page(2));
    let (len_a, len_b) = (compressed_len(&text_a), compressed_len(&text_b));

    assert_eq!(
        store.store(&mut worker, 0, &[0u8; PAGE_SIZE]).unwrap(),
        StoreOutcome::SameFilled
    );
    assert_eq!(
        store.store(&mut worker, 1, &same).unwrap(),
        StoreOutcome::SameFilled
    );
    assert_eq!(
        store.store(&mut worker, 2, &text_a).unwrap(),
        StoreOutcome::Compressed { bytes: len_a }
    );
    assert_eq!(
        store.store(&mut worker, 3, &random_page(7)).unwrap(),
        StoreOutcome::Raw
    );
    assert_eq!(
        store.store(&mut worker, 2, &text_b).unwrap(),
        StoreOutcome::Compressed { bytes: len_b }
    );

    store.load(&mut worker, 2, &mut out).unwrap();
    assert_eq!(out.as_slice(), text_b.as_slice());
    store.load(&mut worker, 0, &mut out).unwrap();
    assert_eq!(out.as_slice(), [0u8; PAGE_SIZE].as_slice());
    assert!(matches!(
        store.load(&mut worker, 99, &mut out),
        Err(StoreError::NotFound(99))
    ));
    store.take(&mut worker, 3, &mut out).unwrap();
    assert_eq!(out.as_slice(), random_page(7).as_slice());
    assert!(store.remove(1));
    assert!(!store.remove(1));

    let stats = store.stats();
    let events = &stats.events;
    let expected = EventCounts {
        store_attempts: 5,
        same_filled_stores: 2,
        compressed_stores: 2,
        raw_stores: 1,
        duplicate_entry_count: 1,
        eager_compressions: 5,
        loads: 3,
        decompressions: 1,
        load_misses: 1,
        invalidated_pages: 1,
        compression_time_ns: events.compression_time_ns,
        decompression_time_ns: events.decompression_time_ns,
        decompressed_within_log_time: [3, 0, 0, 0, 0, 0, 0, 0],
        ..EventCounts::default()
    };
    assert_eq!(events, &expected);
    assert!(events.compression_time_ns > 0 && events.decompression_time_ns > 0);

    let contents = &stats.contents;
    assert_eq!(contents.stored_pages, 2, "zero page and text_b remain");
    assert_eq!(contents.same_filled_pages, 1);
    assert_eq!(contents.compressed_pages, 1);
    assert_eq!(contents.raw_pages, 0);
    assert_eq!(contents.uncompressed_bytes, 2 * PAGE_SIZE as u64);
    assert_eq!(contents.compressed_bytes, len_b as u64);
    assert!(contents.pool_memory_used_bytes >= len_b as u64);
    assert_eq!(
        contents.pool_fragmentation_bytes,
        contents.pool_memory_used_bytes - len_b as u64
    );
    let mm_stat = stats.zram_mm_stat();
    assert_eq!(mm_stat[5], ("same_pages", 1));
    assert_eq!(mm_stat[8], ("huge_pages_since", 1));
}

#[test]
fn poor_pages_are_rejected_when_raw_storage_is_off_and_stale_copies_dropped() {
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            keep_incompressible: false,
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    store.store(&mut worker, 5, &text_page(3)).unwrap();
    assert_eq!(
        store.store(&mut worker, 5, &random_page(1)).unwrap(),
        StoreOutcome::Rejected(RejectReason::CompressPoor)
    );
    assert!(
        !store.contains(5),
        "the older copy must not survive a rejected store"
    );
    let stats = store.stats();
    assert_eq!(stats.events.reject_compress_poor_pages, 1);
    assert_eq!(stats.contents.stored_pages, 0);
    assert_eq!(stats.contents.pool_memory_used_bytes, 0);
}

#[test]
fn pool_limit_refuses_with_hysteresis_like_zswap() {
    // Raw pages take one pool page each, so the limit counts in whole pages.
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            max_pool_bytes: Some(4 * PAGE_SIZE as u64),
            accept_threshold_percent: 50,
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    let raw = |key| random_page(key);
    for key in 10..14 {
        assert_eq!(
            store.store(&mut worker, key, &raw(key)).unwrap(),
            StoreOutcome::Raw
        );
    }
    let limited = StoreOutcome::Rejected(RejectReason::PoolLimit);
    assert_eq!(store.store(&mut worker, 14, &raw(14)).unwrap(), limited);
    assert_eq!(store.stats().events.pool_limit_hit_count, 1);

    store.remove(10); // 3 pages: still above the accept threshold of 2
    assert_eq!(store.store(&mut worker, 15, &raw(15)).unwrap(), limited);
    assert_eq!(
        store.stats().events.pool_limit_hit_count,
        1,
        "refusals in the band are not limit hits"
    );

    store.remove(11); // 2 pages: at the accept threshold, stores resume
    assert_eq!(
        store.store(&mut worker, 16, &raw(16)).unwrap(),
        StoreOutcome::Raw
    );
    assert_eq!(
        store.store(&mut worker, 17, &raw(17)).unwrap(),
        StoreOutcome::Raw
    );
    assert_eq!(store.store(&mut worker, 18, &raw(18)).unwrap(), limited);
    // Same-filled pages need no pool memory and are never refused.
    assert_eq!(
        store.store(&mut worker, 19, &[0u8; PAGE_SIZE]).unwrap(),
        StoreOutcome::SameFilled
    );

    let stats = store.stats();
    assert_eq!(stats.events.pool_limit_hit_count, 2);
    assert_eq!(stats.contents.pool_memory_used_bytes, 4 * PAGE_SIZE as u64);
    assert_eq!(
        stats.contents.pool_memory_used_max_bytes,
        4 * PAGE_SIZE as u64
    );
    assert_eq!(stats.contents.pool_memory_limit_bytes, 4 * PAGE_SIZE as u64);
    assert_eq!(stats.contents.stored_pages, 5);
}

#[test]
fn a_worker_from_another_store_is_refused() {
    let a = Store::new(StoreConfig::default()).unwrap();
    let b = Store::new(StoreConfig::default()).unwrap();
    let mut worker_of_a = a.worker().unwrap();
    assert!(matches!(
        b.store(&mut worker_of_a, 1, &[0u8; PAGE_SIZE]),
        Err(StoreError::ForeignWorker)
    ));
}

#[test]
fn invalid_configs_are_errors_naming_the_field() {
    for (config, field) in [
        (
            StoreConfig {
                pages: PageStoreConfig {
                    accept_threshold_percent: 0,
                    ..PageStoreConfig::default()
                },
                ..StoreConfig::default()
            },
            "accept_threshold_percent",
        ),
        (
            StoreConfig {
                pages: PageStoreConfig {
                    pool_shards: 0,
                    ..PageStoreConfig::default()
                },
                ..StoreConfig::default()
            },
            "pool_shards",
        ),
        (
            StoreConfig {
                pages: PageStoreConfig {
                    max_pool_bytes: Some(0),
                    ..PageStoreConfig::default()
                },
                ..StoreConfig::default()
            },
            "max_pool_bytes",
        ),
        (
            StoreConfig {
                age_unit_ns: 0,
                ..StoreConfig::default()
            },
            "age_unit_ns",
        ),
        (
            StoreConfig {
                pages: PageStoreConfig {
                    codec: "zstd-dict".parse().unwrap(),
                    ..PageStoreConfig::default()
                },
                ..StoreConfig::default()
            },
            "dictionary",
        ),
    ] {
        let error = Store::new(config).unwrap_err().to_string();
        assert!(error.contains(field), "{error}");
    }
}

#[test]
fn every_pool_and_codec_round_trips_generated_pages() {
    for pool in PoolKind::all() {
        for codec in ["lz4", "lz4-flex", "zstd:-1", "zstd:3"] {
            let (store, mut worker) = pages::filled_store(pool, codec, 200, 1);
            let mut out = Box::new([0u8; PAGE_SIZE]);
            for key in 0..200 {
                store.load(&mut worker, key, &mut out).unwrap();
                assert_eq!(
                    pages::identify(&out),
                    Some((key, 1)),
                    "{pool} {codec} key {key}"
                );
            }
            assert_eq!(store.stats().contents.stored_pages, 200);
        }
    }
}
