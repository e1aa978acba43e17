//! Loads allocate nothing: the fault path of a region runs the object store's
//! `get_in_handler` in a signal handler, where touching the allocator could
//! deadlock, and `get` keeps the same promise.

#[path = "pages_support/mod.rs"]
mod pages;

use zpage_codec::PAGE_SIZE;
use zpage_store::{CompressionTrigger, PageStore, PageStoreConfig, PoolKind, Put};
use zpage_testsupport::alloc::{self, PerThreadCounter};

#[global_allocator]
static ALLOCATOR: PerThreadCounter = PerThreadCounter;

#[test]
fn loads_neither_allocate_nor_free() {
    for pool in PoolKind::all() {
        for codec in ["lz4", "lz4-flex", "zstd:3"] {
            let objects = PageStore::new(PageStoreConfig {
                pool,
                codec: codec.parse().unwrap(),
                ..PageStoreConfig::default()
            })
            .unwrap();
            let mut object_worker = objects.worker().unwrap();
            let refs: Vec<_> = (0..100)
                .map(|key| {
                    match objects
                        .put(
                            &mut object_worker,
                            &pages::page_for(key, 0),
                            CompressionTrigger::Eager,
                        )
                        .unwrap()
                    {
                        Put::Stored { page_ref, .. } => page_ref,
                        Put::Rejected(reason) => panic!("page {key} rejected: {reason:?}"),
                    }
                })
                .collect();
            let mut out = Box::new([0u8; PAGE_SIZE]);
            // Warm every lazily built piece of state first.
            for key in 0..100 {
                objects
                    .get(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
            }
            let ((), allocations) = alloc::calls_during(|| {
                for key in 0..100 {
                    objects
                        .get(&mut object_worker, refs[key as usize], &mut out)
                        .unwrap();
                    objects
                        .get_in_handler(&mut object_worker, refs[key as usize], &mut out)
                        .unwrap();
                }
            });
            assert_eq!(allocations, 0, "{pool} {codec}");
            for key in 0..100u64 {
                objects
                    .get(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
                assert_eq!(pages::identify(&out), Some((key, 0)));
            }
        }
    }
}

/// A fault on a page in the tier below RAM is served in the signal handler
/// too: reading it back from the packed file (or memory) tier, opening its
/// seal and decoding it allocate nothing, and neither does a read that fails
/// its authentication.
#[test]
fn tier_reads_neither_allocate_nor_free() {
    let path = std::env::temp_dir().join(format!("zpage-noalloc-tier-{}", std::process::id()));
    let tiers: Vec<std::sync::Arc<dyn zpage_store::Tier>> = vec![
        std::sync::Arc::new(
            zpage_store::PackedTier::new(zpage_store::PackedConfig::new(&path, 8 << 20)).unwrap(),
        ),
        std::sync::Arc::new(zpage_store::MemoryTier::new(Default::default()).unwrap()),
    ];
    for tier in tiers {
        let objects = PageStore::new(PageStoreConfig {
            tier: Some(tier.clone()),
            ..PageStoreConfig::default()
        })
        .unwrap();
        let mut worker = objects.worker().unwrap();
        let refs: Vec<_> = (0..100u64)
            .filter_map(|key| {
                match objects
                    .put(
                        &mut worker,
                        &pages::page_for(key, 0),
                        CompressionTrigger::Eager,
                    )
                    .unwrap()
                {
                    Put::Stored { page_ref, .. } => {
                        let moved = objects.move_to_tier(page_ref, key).unwrap()?;
                        objects.free(page_ref);
                        Some((key, moved))
                    }
                    Put::Rejected(reason) => panic!("page {key} rejected: {reason:?}"),
                }
            })
            .collect();
        assert!(refs.len() > 50, "{}", tier.describe());
        let mut out = Box::new([0u8; PAGE_SIZE]);
        for &(key, r) in &refs {
            objects.get_page(&mut worker, r, key, &mut out).unwrap();
        }
        let ((), allocations) = alloc::calls_during(|| {
            for &(key, r) in &refs {
                objects
                    .get_page_in_handler(&mut worker, r, key, &mut out)
                    .unwrap();
                // Asked for as another page: refused, still without allocating.
                assert!(objects
                    .get_page_in_handler(&mut worker, r, key + 1000, &mut out)
                    .is_err());
            }
        });
        assert_eq!(allocations, 0, "{}", tier.describe());
        for &(key, r) in &refs {
            objects.get_page(&mut worker, r, key, &mut out).unwrap();
            assert_eq!(pages::identify(&out), Some((key, 0)));
        }
    }
    let _ = std::fs::remove_file(path);
}
