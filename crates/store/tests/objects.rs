//! The object store on its own: random sequences of put/get/free/compact
//! agree with a map from reference to page, every reference names exactly
//! its page, freed references are refused rather than answered with another
//! page's bytes, and the gauges agree with what is held.

#[path = "pages_support/mod.rs"]
mod pages;

use proptest::prelude::*;
use zpage_codec::{fill_page, PAGE_SIZE};
use zpage_store::{
    CompressionTrigger, LoadError, PageRef, PageStore, PageStoreConfig, PoolKind, Put, RefKind,
};

#[derive(Clone, Debug)]
enum Op {
    Put(u64, u64),
    /// A same-filled page of this word (words that do not fit in the
    /// reference itself take the pool path).
    PutWord(u64),
    Get(usize),
    Free(usize),
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..64, 0u64..1000).prop_map(|(k, v)| Op::Put(k, v)),
        1 => prop_oneof![Just(0u64), Just(u64::MAX), Just(0x8000_0000_0000_0001), any::<u64>()].prop_map(Op::PutWord),
        3 => any::<usize>().prop_map(Op::Get),
        2 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Compact),
    ]
}

fn put(store: &PageStore, worker: &mut zpage_store::Worker, page: &zpage_codec::Page) -> PageRef {
    match store
        .put(worker, page, CompressionTrigger::MemoryPressure)
        .unwrap()
    {
        Put::Stored { page_ref, .. } => page_ref,
        Put::Rejected(reason) => panic!("rejected: {reason:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn references_name_exactly_their_pages(pool_index in 0usize..3, ops in proptest::collection::vec(op(), 1..300)) {
        let pool = PoolKind::all()[pool_index];
        let store = PageStore::new(PageStoreConfig { pool, ..PageStoreConfig::default() }).unwrap();
        let mut worker = store.worker().unwrap();
        let mut held: Vec<(PageRef, Box<zpage_codec::Page>)> = Vec::new();
        let mut out = Box::new([0u8; PAGE_SIZE]);
        for op in ops {
            match op {
                Op::Put(key, version) => {
                    let page = pages::page_for(key, version);
                    let page_ref = put(&store, &mut worker, &page);
                    held.push((page_ref, page));
                }
                Op::PutWord(word) => {
                    let mut page = Box::new([0u8; PAGE_SIZE]);
                    fill_page(&mut page, word);
                    let page_ref = put(&store, &mut worker, &page);
                    prop_assert_eq!(page_ref.kind(), RefKind::SameFilled);
                    held.push((page_ref, page));
                }
                Op::Get(i) if !held.is_empty() => {
                    let (page_ref, page) = &held[i % held.len()];
                    store.get_in_handler(&mut worker, *page_ref, &mut out).unwrap();
                    prop_assert!(out.as_slice() == page.as_slice());
                }
                Op::Free(i) if !held.is_empty() => {
                    let (page_ref, _) = held.swap_remove(i % held.len());
                    store.free(page_ref);
                    if page_ref.in_pool() {
                        prop_assert!(matches!(store.get(&mut worker, page_ref, &mut out), Err(LoadError::StaleRef(_))));
                    }
                }
                Op::Compact => {
                    store.compact();
                }
                _ => {}
            }
            let contents = store.stats().contents;
            prop_assert_eq!(contents.same_filled_pages + contents.compressed_pages + contents.raw_pages, held.len() as u64);
        }
        for (page_ref, page) in &held {
            store.get(&mut worker, *page_ref, &mut out).unwrap();
            prop_assert!(out.as_slice() == page.as_slice());
        }
        for (page_ref, _) in held.drain(..) {
            store.free(page_ref);
        }
        prop_assert_eq!(store.pool_memory_used_bytes(), 0);
        prop_assert_eq!(store.stats().contents.compressed_bytes, 0);
    }
}

#[test]
fn a_corrupt_blob_is_an_error_not_a_wrong_page() {
    // A worker of another store decodes with that store's codec: an LZ4 blob
    // fed to zstd is corrupt data.
    let lz4 = PageStore::new(PageStoreConfig::default()).unwrap();
    let zstd = PageStore::new(PageStoreConfig {
        codec: "zstd:3".parse().unwrap(),
        ..PageStoreConfig::default()
    })
    .unwrap();
    let mut worker = lz4.worker().unwrap();
    let mut zstd_worker = zstd.worker().unwrap();
    let page_ref = (0..64)
        .map(|key| put(&lz4, &mut worker, &pages::page_for(key, 1)))
        .find(|page_ref| page_ref.kind() == RefKind::Compressed { codec: 0 })
        .expect("some generated page compresses");
    let mut out = Box::new([0u8; PAGE_SIZE]);
    assert_eq!(
        lz4.get(&mut zstd_worker, page_ref, &mut out),
        Err(LoadError::ForeignWorker)
    );
    let blob = lz4.with_blob(page_ref, |b| b.to_vec()).unwrap().unwrap();
    let error = zstd
        .decode_blob_like(&mut zstd_worker, page_ref, &blob, &mut out)
        .unwrap_err();
    assert!(
        matches!(error, LoadError::Corrupt { codec: "zstd", .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("corrupt"), "{error}");
}
