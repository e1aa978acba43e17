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
