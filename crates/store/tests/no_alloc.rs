//! Loads allocate nothing: the fault path of a region runs the object store's
//! `get_in_handler` in a signal handler, where touching the allocator could
//! deadlock; the keyed store's `load` keeps the same promise.

#[path = "pages_support/mod.rs"]
mod pages;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use zpage_codec::PAGE_SIZE;
use zpage_store::{CompressionTrigger, PageStore, PageStoreConfig, PoolKind, Put};

struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; it only counts.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours, passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

#[test]
fn loads_neither_allocate_nor_free() {
    for pool in PoolKind::all() {
        for codec in ["lz4", "lz4-flex", "zstd:3"] {
            let (store, mut worker) = pages::filled_store(pool, codec, 100, 0);
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
                store.load(&mut worker, key, &mut out).unwrap();
                objects
                    .get(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
            }
            COUNTING.store(true, Ordering::SeqCst);
            for key in 0..100 {
                store.load(&mut worker, key, &mut out).unwrap();
                objects
                    .get(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
                objects
                    .get_in_handler(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
            }
            COUNTING.store(false, Ordering::SeqCst);
            assert_eq!(ALLOCATIONS.swap(0, Ordering::SeqCst), 0, "{pool} {codec}");
            for key in 0..100u64 {
                objects
                    .get(&mut object_worker, refs[key as usize], &mut out)
                    .unwrap();
                assert_eq!(pages::identify(&out), Some((key, 0)));
            }
        }
    }
}
