//! The backing tier (a packed, sealed file): pages written back read back
//! exactly; a tampered, truncated, full, missing or failing file is reported
//! (the pages it loses by key and cause) and never turns into wrong bytes.

#[path = "pages_support/mod.rs"]
mod pages;

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use zpage_codec::PAGE_SIZE;
use zpage_store::{
    BackingConfig, EntryKind, PageStoreConfig, ReadFailure, Store, StoreConfig, StoreError,
    StoreOutcome, TierError, Worker,
};

struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("zpage-{name}-{}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Stores `page_for(key, 0)` for every key; returns the keys whose pages went
/// to pool memory (same-filled pages never reach the backing file).
fn store_pages_in_pool(store: &Store, worker: &mut Worker, keys: std::ops::Range<u64>) -> Vec<u64> {
    keys.filter(|&key| {
        store.store(worker, key, &pages::page_for(key, 0)).unwrap() != StoreOutcome::SameFilled
    })
    .collect()
}

fn store_with_backing(path: &TempFile, max_bytes: u64) -> Store {
    Store::new(StoreConfig {
        backing: Some(BackingConfig {
            path: path.0.clone(),
            max_bytes,
        }),
        ..StoreConfig::default()
    })
    .unwrap()
}

#[test]
fn written_back_pages_read_back_exactly_and_free_their_memory() {
    let file = TempFile::new("wb-roundtrip");
    let store = store_with_backing(&file, 16 << 20);
    let mut worker = store.worker().unwrap();
    for key in 0..300 {
        store
            .store(&mut worker, key, &pages::page_for(key, 1))
            .unwrap();
    }
    let before = store.stats().contents;
    let moved = store.write_back(200).unwrap();
    let after = store.stats().contents;
    let same_filled_among_oldest = (0..200)
        .filter(|k| store.entry_info(*k).unwrap().kind == EntryKind::SameFilled)
        .count();
    assert_eq!(
        moved, 200,
        "the oldest 200 movable pages, skipping same-filled ones"
    );
    assert!(same_filled_among_oldest > 0);
    assert_eq!(after.written_back_pages, 200);
    assert_eq!(after.stored_pages, 300);
    // Packed: each page takes its compressed size and a 16-byte tag on disk.
    let tier = store.stats().tier.unwrap();
    assert_eq!(tier.pages, 200);
    assert_eq!(after.backing_used_bytes, tier.stored_bytes + 200 * 16);
    // ... exactly the blobs that left the pool.
    assert_eq!(
        tier.stored_bytes,
        before.compressed_bytes - after.compressed_bytes
    );
    assert!(after.pool_memory_used_bytes < before.pool_memory_used_bytes / 2);
    assert_eq!(store.stats().events.written_back_pages, 200);

    let mut out = Box::new([0u8; PAGE_SIZE]);
    for key in 0..300 {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 1)), "key {key}");
    }
    // Taking and removing written-back pages frees their slots.
    let written: Vec<u64> = (0..300)
        .filter(|k| store.entry_info(*k).unwrap().kind == EntryKind::WrittenBack)
        .collect();
    store.take(&mut worker, written[0], &mut out).unwrap();
    assert!(store.remove(written[1]));
    assert_eq!(store.stats().tier.unwrap().pages, 198);
    // A replaced page lives in memory again.
    store
        .store(&mut worker, written[2], &pages::page_for(written[2], 2))
        .unwrap();
    store.load(&mut worker, written[2], &mut out).unwrap();
    assert_eq!(pages::identify(&out), Some((written[2], 2)));
    assert_eq!(store.stats().contents.written_back_pages, 197);
}

#[test]
fn a_tampered_backing_file_is_an_error_not_wrong_bytes() {
    let file = TempFile::new("wb-tamper");
    let store = store_with_backing(&file, 1 << 20);
    let mut worker = store.worker().unwrap();
    // Keep one page in pool memory, so exactly one slot of the file is used.
    let key = store_pages_in_pool(&store, &mut worker, 0..100)[0];
    for other in 0..100 {
        if other != key {
            store.remove(other);
        }
    }
    assert_eq!(store.write_back(10).unwrap(), 1);
    let handle = std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .unwrap();
    handle.write_all_at(&[0xff; 16], 20).unwrap();
    let mut out = Box::new([0u8; PAGE_SIZE]);
    let error = store.load(&mut worker, key, &mut out).unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::PageLost {
                key: k,
                cause: ReadFailure::Authentication,
                ..
            } if k == key
        ),
        "{error}"
    );
    assert!(error.to_string().contains("lost"), "{error}");
    assert_eq!(store.lost_pages(), vec![(key, ReadFailure::Authentication)]);
    let stats = store.stats();
    assert_eq!(stats.events.decompress_fail_count, 1);
    assert_eq!(stats.tier.unwrap().get_fail_authentication, 1);
    // Stored again, the key is whole again.
    store
        .store(&mut worker, key, &pages::page_for(key, 5))
        .unwrap();
    store.load(&mut worker, key, &mut out).unwrap();
    assert_eq!(pages::identify(&out), Some((key, 5)));
    assert!(store.lost_pages().is_empty());
}

#[test]
fn a_full_or_failing_backing_file_keeps_pages_in_memory() {
    let file = TempFile::new("wb-full");
    // The smallest bound: two 64 KiB segments, one kept for collection.
    let store = store_with_backing(&file, 128 << 10);
    let mut worker = store.worker().unwrap();
    let keys = store_pages_in_pool(&store, &mut worker, 0..400);
    let error = store.write_back(400).unwrap_err();
    assert!(
        matches!(error, StoreError::Tier(TierError::Full { .. })),
        "{error}"
    );
    let written = store.stats().contents.written_back_pages;
    assert!(written > 10 && written < keys.len() as u64, "{written}");
    assert_eq!(store.stats().events.writeback_fail_count, 1);
    assert_eq!(store.stats().tier.unwrap().put_fail_full, 1);

    // /dev/full fails every write with ENOSPC. As a backing path it is
    // refused (a character device gives nothing back); a tier whose file
    // turns into it is what a full device looks like.
    let failing_file = TempFile::new("wb-failing");
    assert!(Store::new(StoreConfig {
        backing: Some(BackingConfig {
            path: "/dev/full".into(),
            max_bytes: 1 << 20,
        }),
        ..StoreConfig::default()
    })
    .is_err_and(|e| e.to_string().contains("character device")));
    let tier =
        zpage_store::PackedTier::new(zpage_store::PackedConfig::new(&failing_file.0, 4 << 20))
            .unwrap();
    tier.replace_device_for_test(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/full")
            .unwrap(),
    );
    let failing = Store::new(StoreConfig {
        pages: PageStoreConfig {
            tier: Some(std::sync::Arc::new(tier)),
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut failing_worker = failing.worker().unwrap();
    for &key in &keys {
        failing
            .store(&mut failing_worker, key, &pages::page_for(key, 0))
            .unwrap();
    }
    let error = failing.write_back(5).unwrap_err();
    assert!(error.to_string().contains("No space left"), "{error}");
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for (stores, worker) in [(&store, &mut worker), (&failing, &mut failing_worker)] {
        for &key in &keys {
            stores.load(worker, key, &mut out).unwrap();
            assert_eq!(pages::identify(&out), Some((key, 0)));
        }
    }
}

#[test]
fn a_missing_backing_file_keeps_the_store_running_in_memory() {
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            max_pool_bytes: Some(64 * PAGE_SIZE as u64),
            ..PageStoreConfig::default()
        },
        backing: Some(BackingConfig {
            path: "/nonexistent-dir/zpage.swap".into(),
            max_bytes: 1 << 20,
        }),
        ..StoreConfig::default()
    })
    .unwrap();
    let tier = store.stats().tier.unwrap();
    assert!(!tier.available);
    assert!(
        tier.down_cause
            .unwrap()
            .contains("/nonexistent-dir/zpage.swap"),
        "the cause names the file"
    );
    let mut worker = store.worker().unwrap();
    let mut kept = Vec::new();
    for key in 0..500 {
        // At the pool limit with no tier, stores are refused (the page stays
        // with the caller), never lost.
        if let StoreOutcome::Compressed { .. } | StoreOutcome::Raw | StoreOutcome::SameFilled =
            store
                .store(&mut worker, key, &pages::page_for(key, 0))
                .unwrap()
        {
            kept.push(key);
        }
    }
    assert!(kept.len() > 64);
    let error = store.write_back(5).unwrap_err();
    assert!(error.to_string().contains("/nonexistent-dir"), "{error}");
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for &key in &kept {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)));
    }
}

#[test]
fn a_deleted_or_truncated_backing_file_reports_exactly_the_pages_it_lost() {
    let file = TempFile::new("wb-cut");
    let store = store_with_backing(&file, 16 << 20);
    let mut worker = store.worker().unwrap();
    let keys = store_pages_in_pool(&store, &mut worker, 0..300);
    assert_eq!(store.write_back(300).unwrap(), keys.len());
    // Deleted: the open file still holds every page.
    std::fs::remove_file(&file.0).unwrap();
    store.page_store().tier().unwrap().maintain();
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for &key in &keys {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 0)));
    }
    // Truncated to half (through /proc: the name is gone): the pages past the
    // cut are reported lost by key, the others read back exactly.
    let size = std::fs::metadata(&file.0).map(|m| m.len()).unwrap_or(0);
    assert_eq!(size, 0, "the file is deleted");
    let used = store.stats().contents.backing_used_bytes;
    let fd_path = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_link(e.path())
                .map(|t| t.to_string_lossy().contains("wb-cut"))
                .unwrap_or(false)
        })
        .unwrap()
        .path();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fd_path)
        .unwrap()
        .set_len(used / 2)
        .unwrap();
    let (mut exact, mut lost) = (0, Vec::new());
    for &key in &keys {
        match store.load(&mut worker, key, &mut out) {
            Ok(()) => {
                assert_eq!(pages::identify(&out), Some((key, 0)), "no wrong bytes");
                exact += 1;
            }
            Err(StoreError::PageLost { key: k, cause, .. }) => {
                assert_eq!(k, key);
                assert_eq!(cause, ReadFailure::Truncated);
                lost.push(key);
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(exact > 0 && !lost.is_empty(), "{exact} exact, {lost:?}");
    let listed: Vec<u64> = store.lost_pages().into_iter().map(|(k, _)| k).collect();
    lost.sort_unstable();
    assert_eq!(listed, lost);
    assert_eq!(
        store.stats().tier.unwrap().get_fail_truncated,
        lost.len() as u64
    );
}

#[test]
fn hitting_the_pool_limit_writes_back_instead_of_refusing() {
    let file = TempFile::new("wb-limit");
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            max_pool_bytes: Some(64 * PAGE_SIZE as u64),
            ..PageStoreConfig::default()
        },
        backing: Some(BackingConfig {
            path: file.0.clone(),
            max_bytes: 64 << 20,
        }),
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    for key in 0..2000 {
        let outcome = store
            .store(&mut worker, key, &pages::page_for(key, 3))
            .unwrap();
        assert!(
            !matches!(outcome, StoreOutcome::Rejected(_)),
            "key {key}: {outcome:?}"
        );
    }
    let stats = store.stats();
    assert!(stats.contents.pool_memory_used_bytes <= 64 * PAGE_SIZE as u64);
    assert!(stats.contents.written_back_pages > 1000);
    assert!(stats.events.pool_limit_hit_count > 0);
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for key in 0..2000 {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 3)));
    }
}

#[test]
fn without_an_lru_the_oldest_page_operations_say_what_to_turn_on() {
    let store = Store::new(StoreConfig {
        track_lru: false,
        pages: PageStoreConfig {
            recompress_codec: Some("zstd".parse().unwrap()),
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    store.store(&mut worker, 1, &pages::page_for(1, 0)).unwrap();
    assert!(store.oldest_keys(10).is_empty());
    let error = store.recompress(&mut worker, 10).unwrap_err();
    assert!(error.to_string().contains("track_lru"), "{error}");
    let file = TempFile::new("wb-no-lru");
    let error = Store::new(StoreConfig {
        track_lru: false,
        backing: Some(BackingConfig {
            path: file.0.clone(),
            max_bytes: 1 << 20,
        }),
        ..StoreConfig::default()
    })
    .unwrap_err();
    assert!(error.to_string().contains("track_lru"), "{error}");
}
