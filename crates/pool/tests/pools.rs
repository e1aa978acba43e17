//! Cross-design behaviour: round trips, misuse, packing density, compaction,
//! and a property test of random store/free/compact sequences.

use std::collections::HashMap;

use proptest::prelude::*;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use zpage_pool::{format_classes, Handle, Pool, PoolError, PoolKind, PAGE_SIZE};

/// Deterministic bytes for blob number `seed`, so every blob is distinct.
fn blob(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.gen()).collect()
}

/// Blob lengths shaped like LZ4 output for anonymous pages (p10..p90 about
/// 1000..2100 B, as measured in the project notes).
fn lz4_like_length(rng: &mut StdRng) -> usize {
    rng.gen_range(1000..=2100)
}

/// Checks every invariant against the shadow map of live blobs.
fn check_invariants(pool: &dyn Pool, live: &HashMap<Handle, Vec<u8>>) {
    let stats = pool.stats();
    assert_eq!(stats.objects, live.len() as u64);
    assert_eq!(
        stats.stored_bytes,
        live.values().map(|b| b.len() as u64).sum::<u64>()
    );
    assert_eq!(stats.memory_used_bytes, stats.pages * PAGE_SIZE as u64);
    assert!(stats.peak_memory_used_bytes >= stats.memory_used_bytes);
    assert!(stats.memory_used_bytes >= stats.stored_bytes);
    for (handle, bytes) in live {
        assert_eq!(pool.get(*handle).expect("live handle"), bytes.as_slice());
    }
    let classes = pool.classes();
    assert_eq!(
        classes.iter().map(|c| c.pages_used).sum::<u64>(),
        stats.pages
    );
    assert_eq!(
        classes.iter().map(|c| c.objects_used).sum::<u64>(),
        stats.objects
    );
}

#[test]
fn random_blobs_round_trip_in_every_pool() {
    for kind in PoolKind::all() {
        let mut pool = kind.build();
        let mut rng = StdRng::seed_from_u64(1);
        let mut live = HashMap::new();
        for seed in 0..2000u64 {
            let len = rng.gen_range(1..=PAGE_SIZE);
            let bytes = blob(seed, len);
            let handle = pool.store(&bytes).unwrap();
            assert!(
                live.insert(handle, bytes).is_none(),
                "{kind}: handle reused while live"
            );
        }
        check_invariants(pool.as_ref(), &live);
        for (handle, bytes) in live.drain() {
            assert_eq!(pool.free(handle).unwrap(), bytes.len());
        }
        let stats = pool.stats();
        assert_eq!(
            (stats.objects, stats.pages, stats.stored_bytes),
            (0, 0, 0),
            "{kind}"
        );
    }
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    for kind in PoolKind::all() {
        let mut pool = kind.build();
        let mut other = kind.build();
        assert_eq!(pool.store(&[]), Err(PoolError::EmptyBlob));
        assert!(matches!(
            pool.store(&[0; PAGE_SIZE + 1]),
            Err(PoolError::BlobTooLarge { .. })
        ));
        let handle = pool.store(&[1, 2, 3]).unwrap();
        let foreign = other.store(&[4, 5, 6]).unwrap();
        assert!(
            matches!(pool.get(foreign), Err(PoolError::ForeignHandle { .. })),
            "{kind}"
        );
        assert!(
            matches!(pool.free(foreign), Err(PoolError::ForeignHandle { .. })),
            "{kind}"
        );
        for raw in [
            0,
            u64::MAX,
            handle.to_raw() ^ 0xffff_ffff,
            handle.to_raw() | (3 << 32),
        ] {
            assert!(
                pool.get(Handle::from_raw(raw)).is_err(),
                "{kind}: bogus {raw:#x}"
            );
            assert!(
                pool.free(Handle::from_raw(raw)).is_err(),
                "{kind}: bogus {raw:#x}"
            );
        }
        assert_eq!(pool.free(handle).unwrap(), 3);
        assert!(
            matches!(pool.free(handle), Err(PoolError::StaleHandle { .. })),
            "{kind}"
        );
        assert!(
            matches!(pool.get(handle), Err(PoolError::StaleHandle { .. })),
            "{kind}"
        );
        // The slot is reused, yet the old handle stays stale.
        let reused = pool.store(&[7, 8, 9]).unwrap();
        assert_ne!(reused, handle);
        assert!(pool.free(handle).is_err(), "{kind}");
        assert_eq!(pool.get(reused).unwrap(), &[7, 8, 9]);
        assert_eq!(pool.stats().objects, 1);
    }
}

/// Fills each pool with LZ4-sized blobs; returns (pages, overhead over payload).
fn fill(kind: PoolKind, count: usize) -> (Box<dyn Pool>, Vec<Handle>, f64) {
    let mut pool = kind.build();
    let mut rng = StdRng::seed_from_u64(7);
    let payload = vec![0x5au8; PAGE_SIZE];
    let handles: Vec<Handle> = (0..count)
        .map(|_| pool.store(&payload[..lz4_like_length(&mut rng)]).unwrap())
        .collect();
    let stats = pool.stats();
    let overhead = stats.memory_used_bytes as f64 / stats.stored_bytes as f64 - 1.0;
    (pool, handles, overhead)
}

#[test]
fn zsmalloc_fill_overhead_is_a_few_percent() {
    let (pool, _, overhead) = fill(PoolKind::SizeClass, 20_000);
    // About 1 % is rounding plus the 8 B handle on ~1.55 KB blobs; the rest is
    // zspage tails and the last, partly filled zspage of each busy class.
    assert!(overhead < 0.05, "zsmalloc overhead {overhead:.4}");
    let (_, _, tri_overhead) = fill(PoolKind::TriPage, 20_000);
    let (_, _, zbud_overhead) = fill(PoolKind::TwoSlot, 20_000);
    assert!(overhead < tri_overhead && tri_overhead < zbud_overhead);
    eprintln!(
        "fill overhead: zsmalloc {:.2}%, tri-page {:.2}%, zbud {:.2}%",
        overhead * 100.0,
        tri_overhead * 100.0,
        zbud_overhead * 100.0
    );
    eprintln!("{}", format_classes(&pool.classes()));
}

#[test]
fn compaction_after_freeing_half_recovers_memory() {
    let (mut pool, mut handles, _) = fill(PoolKind::SizeClass, 20_000);
    let filled_pages = pool.stats().pages;
    handles.shuffle(&mut StdRng::seed_from_u64(9));
    for handle in handles.drain(..10_000) {
        pool.free(handle).unwrap();
    }
    let sparse = pool.stats();
    let freeable: u64 = pool.classes().iter().map(|c| c.freeable_pages).sum();
    let done = pool.compact();
    let compacted = pool.stats();
    assert_eq!(done.pages_freed, sparse.pages - compacted.pages);
    assert_eq!(compacted.pages_compacted, done.pages_freed);
    assert!(
        done.pages_freed >= freeable * 9 / 10,
        "{done:?} vs freeable {freeable}"
    );
    // About half the pages come back: within 10 % of half the filled pages.
    assert!(
        compacted.pages * 100 <= filled_pages * 55,
        "{compacted:?} from {filled_pages}"
    );
    eprintln!(
        "pages: filled {filled_pages}, after freeing half {}, after compaction {} ({} moved)",
        sparse.pages, compacted.pages, done.objects_moved
    );
    for handle in handles {
        assert_eq!(pool.get(handle).unwrap().len(), pool.free(handle).unwrap());
    }
    assert_eq!(pool.stats().pages, 0);
}

/// Compaction in steps (one size class each) with stores and frees between
/// them, as happens now that a shard's lock is let go between steps: every
/// blob still reads back, the steps free what one compaction would, and a
/// step past the last says so.
#[test]
fn compaction_in_steps_with_stores_and_frees_between_keeps_every_blob() {
    let (mut pool, mut handles, _) = fill(PoolKind::SizeClass, 20_000);
    let mut rng = StdRng::seed_from_u64(11);
    handles.shuffle(&mut rng);
    for handle in handles.drain(..10_000) {
        pool.free(handle).unwrap();
    }
    let freeable: u64 = pool.classes().iter().map(|c| c.freeable_pages).sum();
    let mut live: HashMap<Handle, Vec<u8>> = HashMap::new();
    let mut freed_by_steps = 0;
    let mut steps = 0;
    while let Some(done) = pool.compact_step(steps) {
        freed_by_steps += done.pages_freed;
        steps += 1;
        // Between two steps: a new blob in, an old one out.
        let bytes = blob(100_000 + steps as u64, lz4_like_length(&mut rng));
        live.insert(pool.store(&bytes).unwrap(), bytes);
        if let Some(handle) = handles.pop() {
            pool.free(handle).unwrap();
        }
    }
    assert_eq!(steps, pool.classes().len(), "one step a size class");
    assert!(pool.compact_step(steps).is_none());
    assert!(
        freed_by_steps >= freeable * 9 / 10,
        "steps freed {freed_by_steps} pages of {freeable} freeable"
    );
    assert_eq!(pool.stats().pages_compacted, freed_by_steps);
    for handle in handles {
        let kept = pool.get(handle).expect("a blob kept through the steps");
        assert!(kept.iter().all(|&b| b == 0x5a), "a moved blob changed");
    }
    for (handle, bytes) in &live {
        assert_eq!(pool.get(*handle).unwrap(), bytes.as_slice());
    }
}

#[derive(Clone, Debug)]
enum Step {
    Store(usize),
    /// Frees the live object at this position (modulo the live count).
    Free(usize),
    Compact,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => prop_oneof![1usize..=64, 1usize..=PAGE_SIZE, 3600usize..=PAGE_SIZE].prop_map(Step::Store),
        4 => any::<usize>().prop_map(Step::Free),
        1 => Just(Step::Compact),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_sequences_keep_every_invariant(
        kind_index in 0usize..3,
        steps in proptest::collection::vec(step(), 1..300),
    ) {
        let kind = PoolKind::all()[kind_index];
        let mut pool = kind.build();
        let mut live: HashMap<Handle, Vec<u8>> = HashMap::new();
        let mut order: Vec<Handle> = Vec::new();
        for (seed, step) in steps.into_iter().enumerate() {
            match step {
                Step::Store(len) => {
                    let bytes = blob(seed as u64, len);
                    let handle = pool.store(&bytes).unwrap();
                    prop_assert!(live.insert(handle, bytes).is_none(), "aliased handle");
                    order.push(handle);
                }
                Step::Free(pick) if !order.is_empty() => {
                    let handle = order.swap_remove(pick % order.len());
                    let bytes = live.remove(&handle).unwrap();
                    prop_assert_eq!(pool.free(handle).unwrap(), bytes.len());
                    prop_assert!(pool.free(handle).is_err());
                }
                Step::Free(_) => {}
                Step::Compact => {
                    let before = pool.stats();
                    let done = pool.compact();
                    let after = pool.stats();
                    prop_assert!(after.pages <= before.pages);
                    prop_assert_eq!(before.pages - after.pages, done.pages_freed);
                    if kind != PoolKind::SizeClass {
                        prop_assert_eq!(done, Default::default());
                    }
                }
            }
            check_invariants(pool.as_ref(), &live);
        }
    }
}
