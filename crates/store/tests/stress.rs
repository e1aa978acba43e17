//! Several threads store, load, take and remove over a shared key space; every
//! page read back must be exactly a page some writer stored under that key,
//! and a thread's own keys must read back its latest version.

#[path = "pages_support/mod.rs"]
mod pages;

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::Arc;
use zpage_codec::PAGE_SIZE;
use zpage_store::{PageStoreConfig, PoolKind, Store, StoreConfig, StoreError};

const THREADS: u64 = 4;
const KEYS_PER_THREAD: u64 = 256;
const OPS_PER_THREAD: usize = 40_000;

fn stress(pool: PoolKind, pool_shards: usize) {
    stress_with(StoreConfig {
        pages: PageStoreConfig {
            pool,
            pool_shards,
            ..PageStoreConfig::default()
        },
        ..StoreConfig::default()
    });
}

fn stress_with(config: StoreConfig) {
    let writes_back = config.backing.is_some();
    let store = Arc::new(Store::new(config).unwrap());
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut worker = store.worker().unwrap();
                let mut rng = StdRng::seed_from_u64(thread);
                // This thread writes keys thread, thread+THREADS, ...; it reads everyone's.
                let mut latest = vec![None; KEYS_PER_THREAD as usize];
                let mut out = Box::new([0u8; PAGE_SIZE]);
                let mut verified = 0u64;
                for op in 0..OPS_PER_THREAD {
                    let slot = rng.gen_range(0..KEYS_PER_THREAD);
                    let own_key = slot * THREADS + thread;
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let version = op as u64 + 1;
                            store
                                .store(&mut worker, own_key, &pages::page_for(own_key, version))
                                .unwrap();
                            latest[slot as usize] = Some(version);
                        }
                        4..=5 => match store.load(&mut worker, own_key, &mut out) {
                            Ok(()) => {
                                assert_eq!(
                                    pages::identify(&out),
                                    Some((own_key, latest[slot as usize].unwrap()))
                                );
                                verified += 1;
                            }
                            Err(StoreError::NotFound(_)) => assert_eq!(latest[slot as usize], None),
                            Err(other) => panic!("load failed: {other}"),
                        },
                        6 => match store.take(&mut worker, own_key, &mut out) {
                            Ok(()) => {
                                assert_eq!(
                                    pages::identify(&out),
                                    Some((own_key, latest[slot as usize].take().unwrap()))
                                );
                                verified += 1;
                            }
                            Err(StoreError::NotFound(_)) => assert_eq!(latest[slot as usize], None),
                            Err(other) => panic!("take failed: {other}"),
                        },
                        7 => {
                            assert_eq!(
                                store.remove(own_key),
                                latest[slot as usize].take().is_some()
                            );
                        }
                        8 if op % 500 == 0 => {
                            store.compact();
                        }
                        8 if writes_back && op % 50 == 0 => {
                            store.write_back(16).unwrap();
                        }
                        8 if writes_back && op % 70 == 0 => {
                            store.recompress(&mut worker, 16).unwrap();
                        }
                        _ => {
                            let foreign = rng.gen_range(0..KEYS_PER_THREAD * THREADS);
                            if store.load(&mut worker, foreign, &mut out).is_ok() {
                                let (key, _) = pages::identify(&out)
                                    .expect("a foreign page must be some writer's page");
                                assert_eq!(key, foreign);
                                verified += 1;
                            }
                        }
                    }
                }
                (
                    latest.iter().filter(|v| v.is_some()).count() as u64,
                    verified,
                )
            })
        })
        .collect();
    let mut held = 0;
    let mut verified = 0;
    for thread in threads {
        let (own, checked) = thread.join().unwrap();
        held += own;
        verified += checked;
    }
    assert!(verified > 10_000, "only {verified} pages verified");
    let stats = store.stats();
    assert_eq!(stats.contents.stored_pages, held);
    assert_eq!(store.len() as u64, held);
    assert_eq!(stats.events.decompress_fail_count, 0);
}

#[test]
fn concurrent_size_class_single_pool() {
    stress(PoolKind::SizeClass, 1);
}

#[test]
fn concurrent_size_class_sharded_pools() {
    stress(PoolKind::SizeClass, 4);
}

#[test]
fn concurrent_tri_page() {
    stress(PoolKind::TriPage, 2);
}

#[test]
fn concurrent_zbud() {
    stress(PoolKind::TwoSlot, 2);
}

#[test]
fn concurrent_with_writeback_and_recompression() {
    let path = std::env::temp_dir().join(format!("zpage-stress-backing-{}", std::process::id()));
    stress_with(StoreConfig {
        pages: PageStoreConfig {
            pool_shards: 2,
            recompress_codec: Some("zstd:1".parse().unwrap()),
            ..PageStoreConfig::default()
        },
        backing: Some(zpage_store::BackingConfig {
            path: path.clone(),
            max_bytes: 64 << 20,
        }),
        ..StoreConfig::default()
    });
    assert!(
        !path.exists(),
        "the store's tier removes the file it created"
    );
}
