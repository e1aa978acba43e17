//! Random single-threaded sequences of store/load/take/remove/compact agree
//! with a plain map, and the gauges agree with what the map holds.

#[path = "pages_support/mod.rs"]
mod pages;

use proptest::prelude::*;
use std::collections::HashMap;
use zpage_codec::PAGE_SIZE;
use zpage_store::{PageStoreConfig, PoolKind, Store, StoreConfig, StoreError, StoreOutcome};

#[derive(Clone, Debug)]
enum Op {
    Store(u64, u64),
    Load(u64),
    Take(u64),
    Remove(u64),
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..48, 0u64..1000).prop_map(|(k, v)| Op::Store(k, v)),
        3 => (0u64..48).prop_map(Op::Load),
        1 => (0u64..48).prop_map(Op::Take),
        1 => (0u64..48).prop_map(Op::Remove),
        1 => Just(Op::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn store_agrees_with_a_map(pool_index in 0usize..3, track_lru: bool, ops in proptest::collection::vec(op(), 1..300)) {
        let pool = PoolKind::all()[pool_index];
        let store = Store::new(StoreConfig { pages: PageStoreConfig { pool, ..PageStoreConfig::default() }, track_lru, ..StoreConfig::default() }).unwrap();
        let mut worker = store.worker().unwrap();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut out = Box::new([0u8; PAGE_SIZE]);
        for op in ops {
            match op {
                Op::Store(key, version) => {
                    let outcome = store.store(&mut worker, key, &pages::page_for(key, version)).unwrap();
                    prop_assert!(!matches!(outcome, StoreOutcome::Rejected(_)));
                    model.insert(key, version);
                }
                Op::Load(key) | Op::Take(key) => {
                    let take = matches!(op, Op::Take(_));
                    let result = if take {
                        store.take(&mut worker, key, &mut out)
                    } else {
                        store.load(&mut worker, key, &mut out)
                    };
                    match (result, model.get(&key).copied()) {
                        (Ok(()), Some(version)) => prop_assert_eq!(pages::identify(&out), Some((key, version))),
                        (Err(StoreError::NotFound(_)), None) => {}
                        (other, expected) => prop_assert!(false, "{:?} vs model {:?}", other, expected),
                    }
                    if take {
                        model.remove(&key);
                    }
                }
                Op::Remove(key) => prop_assert_eq!(store.remove(key), model.remove(&key).is_some()),
                Op::Compact => {
                    let before = store.pool_memory_used_bytes();
                    store.compact();
                    prop_assert!(store.pool_memory_used_bytes() <= before);
                }
            }
            let contents = store.stats().contents;
            prop_assert_eq!(contents.stored_pages, model.len() as u64);
            prop_assert_eq!(contents.same_filled_pages + contents.compressed_pages + contents.raw_pages, model.len() as u64);
            prop_assert_eq!(store.len(), model.len());
            let listed = if track_lru { contents.compressed_pages + contents.raw_pages } else { 0 };
            prop_assert_eq!(store.oldest_keys(usize::MAX).len() as u64, listed);
        }
        if model.is_empty() {
            prop_assert_eq!(store.pool_memory_used_bytes(), 0);
        }
    }
}
