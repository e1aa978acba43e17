//! Old pages recompressed with a stronger codec read back exactly, keep their
//! age, and are only kept when they land in a smaller size class.

#[path = "pages_support/mod.rs"]
mod pages;

use zpage_codec::PAGE_SIZE;
use zpage_store::{EntryKind, PageStoreConfig, Store, StoreConfig, StoreError};

#[test]
fn old_pages_move_to_the_stronger_codec_when_it_saves_a_size_class() {
    let store = Store::new(StoreConfig {
        pages: PageStoreConfig {
            recompress_codec: Some("zstd:3".parse().unwrap()),
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    for key in 0..500 {
        store
            .store(&mut worker, key, &pages::page_for(key, 1))
            .unwrap();
    }
    let before = store.stats();
    let stats = store.recompress(&mut worker, 10_000).unwrap();
    let after = store.stats();
    let in_pool = before.contents.compressed_pages + before.contents.raw_pages;
    assert_eq!(
        stats.examined, in_pool,
        "every page in pool memory is examined once"
    );
    assert!(stats.recompressed > 100, "{stats:?}");
    assert!(stats.bytes_saved > 0);
    assert_eq!(
        after.contents.compressed_bytes,
        before.contents.compressed_bytes - stats.bytes_saved
    );
    assert_eq!(after.events.recompressed_pages, stats.recompressed);
    assert_eq!(
        after.events.recompress_no_gain_pages,
        in_pool - stats.recompressed
    );
    // Random pages stay raw; a raw page that zstd can shrink leaves the huge class, as in zram.
    assert!(after.contents.raw_pages <= before.contents.raw_pages);
    assert!(after.contents.raw_pages > 0);

    let mut out = Box::new([0u8; PAGE_SIZE]);
    let mut zstd_entries = 0;
    for key in 0..500 {
        store.load(&mut worker, key, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 1)), "key {key}");
        let info = store.entry_info(key).unwrap();
        if info.kind == EntryKind::Compressed && info.codec.as_ref().unwrap().to_string() == "zstd"
        {
            zstd_entries += 1;
        }
    }
    assert_eq!(zstd_entries, stats.recompressed);

    let again = store.recompress(&mut worker, 10_000).unwrap();
    assert_eq!(
        again.examined, 0,
        "pages already tried or recompressed are left alone: {again:?}"
    );
    store.compact();
    assert!(store.stats().contents.pool_memory_used_bytes < before.contents.pool_memory_used_bytes);
}

#[test]
fn recompress_without_a_second_codec_is_an_error_naming_the_setting() {
    let store = Store::new(StoreConfig::default()).unwrap();
    let mut worker = store.worker().unwrap();
    let error = store.recompress(&mut worker, 10).unwrap_err();
    assert!(matches!(error, StoreError::InvalidConfig(_)));
    assert!(error.to_string().contains("recompress_codec"), "{error}");
}

/// A `zstd-dict` recompression codec given without a dictionary: nothing is
/// recompressed until the dictionary is set (once, trained from the store's
/// own pages); workers made before it decode the new blobs; a corrupt blob
/// of that codec is an error naming it.
#[test]
fn a_dictionary_trained_later_serves_workers_made_before_it() {
    use zpage_codec::Dictionary;
    use zpage_store::{CompressionTrigger, LoadError, PageStore, Put, RefKind};
    let store = PageStore::new(PageStoreConfig {
        recompress_codec: Some("zstd-dict".parse().unwrap()),
        ..PageStoreConfig::default()
    })
    .unwrap();
    let mut writer = store.worker().unwrap();
    let mut reader = store.worker().unwrap();
    let mut refs = Vec::new();
    for key in 0..400 {
        match store
            .put(
                &mut writer,
                &pages::page_for(key, 1),
                CompressionTrigger::MemoryPressure,
            )
            .unwrap()
        {
            Put::Stored { page_ref, .. } => refs.push((key, page_ref)),
            Put::Rejected(reason) => panic!("key {key}: {reason:?}"),
        }
    }
    let compressible = refs
        .iter()
        .find(|(_, r)| r.kind() == RefKind::Compressed { codec: 0 })
        .unwrap()
        .1;
    assert!(store.wants_recompress_dictionary());
    // A page put cold before the dictionary exists takes the fast codec.
    let text = pages::page_for(1, 1);
    let early = match store
        .put_cold(&mut writer, &text, CompressionTrigger::MemoryPressure)
        .unwrap()
    {
        Put::Stored { page_ref, .. } => page_ref,
        other => panic!("{other:?}"),
    };
    assert_eq!(early.kind(), RefKind::Compressed { codec: 0 });
    let error = store.recompress(&mut writer, compressible).unwrap_err();
    assert!(error.to_string().contains("no dictionary yet"), "{error}");

    let mut out = Box::new([0u8; PAGE_SIZE]);
    let samples: Vec<Box<zpage_codec::Page>> = refs
        .iter()
        .map(|&(_, r)| {
            store.get(&mut writer, r, &mut out).unwrap();
            out.clone()
        })
        .collect();
    let dictionary = Dictionary::train(samples.iter().map(|p| &**p), 16 * 1024).unwrap();
    store.set_recompress_dictionary(dictionary.clone()).unwrap();
    assert!(!store.wants_recompress_dictionary());
    assert!(
        store.set_recompress_dictionary(dictionary).is_err(),
        "a dictionary pages refer to never changes"
    );

    let mut recompressed = 0;
    for (_, page_ref) in refs.iter_mut() {
        if let Some(new_ref) = store.recompress(&mut writer, *page_ref).unwrap() {
            assert_eq!(new_ref.kind(), RefKind::Compressed { codec: 1 });
            store.free(*page_ref);
            *page_ref = new_ref;
            recompressed += 1;
        }
    }
    assert!(recompressed > 50, "only {recompressed} pages gained");
    // Put cold once the dictionary exists: the cold codec straight away,
    // except for same-filled pages.
    for key in 0..20 {
        let page = pages::page_for(key, 1);
        let Put::Stored { page_ref, .. } = store
            .put_cold(&mut writer, &page, CompressionTrigger::MemoryPressure)
            .unwrap()
        else {
            panic!("key {key}: rejected")
        };
        match zpage_codec::same_filled_word(&page) {
            Some(_) => assert_eq!(page_ref.kind(), RefKind::SameFilled),
            None => assert!(
                matches!(
                    page_ref.kind(),
                    RefKind::Compressed { codec: 1 } | RefKind::Raw
                ),
                "key {key}: {:?}",
                page_ref.kind()
            ),
        }
        store.get(&mut reader, page_ref, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 1)), "key {key}");
        store.free(page_ref);
    }
    store.get(&mut reader, early, &mut out).unwrap();
    assert_eq!(pages::identify(&out), Some((1, 1)));
    for &(key, page_ref) in &refs {
        store.get(&mut reader, page_ref, &mut out).unwrap();
        assert_eq!(pages::identify(&out), Some((key, 1)), "key {key}");
    }

    let like = refs
        .iter()
        .find(|(_, r)| r.kind() == RefKind::Compressed { codec: 1 })
        .unwrap()
        .1;
    let corrupt = store
        .put_blob_for_test(&writer, like, &[0x55; 100])
        .unwrap();
    assert_eq!(
        store.get(&mut reader, corrupt, &mut out),
        Err(LoadError::Corrupt {
            codec: "zstd-dict",
            blob_bytes: 100
        })
    );
}

#[test]
fn only_a_zstd_dict_recompression_codec_takes_a_late_dictionary() {
    let store = zpage_store::PageStore::new(PageStoreConfig {
        recompress_codec: Some("zstd".parse().unwrap()),
        ..PageStoreConfig::default()
    })
    .unwrap();
    assert!(!store.wants_recompress_dictionary());
    let dictionary = zpage_codec::Dictionary::from_bytes(vec![7; 64]);
    let error = store.set_recompress_dictionary(dictionary).unwrap_err();
    assert!(error.to_string().contains("zstd-dict"), "{error}");
}
