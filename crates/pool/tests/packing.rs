//! A design's packing from lengths alone against the pool itself: same
//! pages, same per-class table, for the same blobs stored in the same order.

use proptest::prelude::*;
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use zpage_pool::{PoolError, PoolKind, PAGE_SIZE};

/// Stores blobs of these lengths in a pool and in the packing of its kind,
/// and checks that both show the same figures.
fn assert_packing_matches_pool(kind: PoolKind, lengths: &[usize]) {
    let mut pool = kind.build();
    let mut packing = kind.packing();
    assert_eq!(packing.kind(), kind);
    let bytes = [0x5au8; PAGE_SIZE];
    for (n, &len) in lengths.iter().enumerate() {
        pool.store(&bytes[..len]).unwrap();
        packing.add(len).unwrap();
        // Check along the way too, not only at the end.
        if n % 997 == 0 {
            assert_eq!(
                packing.packed().pages,
                pool.stats().pages,
                "{kind} after {n}"
            );
        }
    }
    let stats = pool.stats();
    let packed = packing.packed();
    assert_eq!(packed.objects, stats.objects, "{kind}");
    assert_eq!(packed.stored_bytes, stats.stored_bytes, "{kind}");
    assert_eq!(packed.pages, stats.pages, "{kind}");
    assert_eq!(
        packed.memory_used_bytes(),
        stats.memory_used_bytes,
        "{kind}"
    );
    assert_eq!(packing.classes(), pool.classes(), "{kind}");
}

/// Lengths shaped like LZ4 output of heap pages, with some raw pages (4096)
/// and some small blobs, in the proportions real images show.
fn heap_like_lengths(count: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count)
        .map(|_| match rng.gen_range(0..20) {
            0 => PAGE_SIZE,
            1..=3 => rng.gen_range(20..400),
            4 => rng.gen_range(3000..=PAGE_SIZE),
            _ => rng.gen_range(900..=2200),
        })
        .collect()
}

#[test]
fn packing_matches_every_pool_on_heap_like_blobs() {
    for kind in PoolKind::all() {
        assert_packing_matches_pool(kind, &heap_like_lengths(20_000, 1));
    }
}

#[test]
fn packing_matches_every_pool_on_uniform_and_small_blobs() {
    let mut rng = StdRng::seed_from_u64(2);
    let uniform: Vec<usize> = (0..10_000).map(|_| rng.gen_range(1..=PAGE_SIZE)).collect();
    let small: Vec<usize> = (0..10_000).map(|_| rng.gen_range(1..=300)).collect();
    let sides: Vec<usize> = (0..10_000)
        .map(|i| if i % 2 == 0 { 2100 } else { 1900 })
        .collect();
    for kind in PoolKind::all() {
        assert_packing_matches_pool(kind, &uniform);
        assert_packing_matches_pool(kind, &small);
        assert_packing_matches_pool(kind, &sides);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn packing_matches_every_pool_on_any_lengths(
        lengths in prop::collection::vec(1..=PAGE_SIZE, 0..600)
    ) {
        for kind in PoolKind::all() {
            assert_packing_matches_pool(kind, &lengths);
        }
    }
}

#[test]
fn size_classes_depend_on_the_histogram_alone_and_zbud_on_the_order() {
    let lengths = heap_like_lengths(5_000, 3);
    let mut shuffled = lengths.clone();
    shuffled.shuffle(&mut StdRng::seed_from_u64(4));
    let pages = |kind: PoolKind, lengths: &[usize]| {
        let mut packing = kind.packing();
        for &len in lengths {
            packing.add(len).unwrap();
        }
        packing.packed().pages
    };
    assert_eq!(
        pages(PoolKind::SizeClass, &lengths),
        pages(PoolKind::SizeClass, &shuffled)
    );
    // The module's example, in 64-byte chunks: 40, 30, 23, 33 pair up in two
    // pages; 23, 30, 33, 40 take three. Both are what the pool itself does.
    let chunks = |c: &[usize]| c.iter().map(|c| c * 64).collect::<Vec<_>>();
    for (order, expected) in [
        (chunks(&[40, 30, 23, 33]), 2),
        (chunks(&[23, 30, 33, 40]), 3),
    ] {
        assert_eq!(pages(PoolKind::TwoSlot, &order), expected, "{order:?}");
        assert_packing_matches_pool(PoolKind::TwoSlot, &order);
    }
}

#[test]
fn packing_refuses_what_the_pool_refuses() {
    for kind in PoolKind::all() {
        let mut packing = kind.packing();
        assert!(matches!(packing.add(0), Err(PoolError::EmptyBlob)));
        assert!(matches!(
            packing.add(PAGE_SIZE + 1),
            Err(PoolError::BlobTooLarge { .. })
        ));
        assert_eq!(
            packing.packed().objects,
            0,
            "{kind}: refused blobs are not counted"
        );
    }
}
