//! Loads allocate nothing: the fault path of a region runs `load` in a signal
//! handler, where touching the allocator could deadlock.

#[path = "pages_support/mod.rs"]
mod pages;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use zpage_codec::PAGE_SIZE;
use zpage_store::PoolKind;

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
fn load_neither_allocates_nor_frees() {
    for pool in PoolKind::all() {
        for codec in ["lz4", "lz4-flex", "zstd:3"] {
            let (store, mut worker) = pages::filled_store(pool, codec, 100, 0);
            let mut out = Box::new([0u8; PAGE_SIZE]);
            // Warm every lazily built piece of state first.
            for key in 0..100 {
                store.load(&mut worker, key, &mut out).unwrap();
            }
            COUNTING.store(true, Ordering::SeqCst);
            for key in 0..100 {
                store.load(&mut worker, key, &mut out).unwrap();
                store
                    .load_without_parking(&mut worker, key, &mut out)
                    .unwrap();
            }
            COUNTING.store(false, Ordering::SeqCst);
            assert_eq!(ALLOCATIONS.swap(0, Ordering::SeqCst), 0, "{pool} {codec}");
        }
    }
}
