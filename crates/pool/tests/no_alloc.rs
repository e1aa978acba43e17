//! `Pool::get` runs in a region's SIGBUS handler (the trait's contract):
//! for a live handle, a freed one and another pool's, no design allocates
//! or frees.

use zpage_pool::{Handle, PoolKind};
use zpage_testsupport::alloc::{self, PerThreadCounter};

#[global_allocator]
static ALLOCATOR: PerThreadCounter = PerThreadCounter;

#[test]
fn get_neither_allocates_nor_frees_for_any_handle() {
    for kind in PoolKind::all() {
        let mut pool = kind.build();
        let mut other = kind.build();
        let blob = |i: usize| vec![i as u8 | 1; 40 + (i * 97) % 3000];
        let live: Vec<Handle> = (0..200).map(|i| pool.store(&blob(i)).unwrap()).collect();
        let freed: Vec<Handle> = (200..300).map(|i| pool.store(&blob(i)).unwrap()).collect();
        for &handle in &freed {
            pool.free(handle).unwrap();
        }
        let foreign: Vec<Handle> = (0..50).map(|i| other.store(&blob(i)).unwrap()).collect();
        let (outcomes, calls) = alloc::calls_during(|| {
            let mut outcomes = [0usize; 3];
            for &handle in &live {
                outcomes[0] += usize::from(pool.get(handle).is_ok());
            }
            for &handle in &freed {
                outcomes[1] += usize::from(pool.get(handle).is_err());
            }
            for &handle in &foreign {
                outcomes[2] += usize::from(pool.get(handle).is_err());
            }
            outcomes
        });
        assert_eq!(calls, 0, "{kind:?}: get allocated or freed");
        assert_eq!(outcomes, [200, 100, 50], "{kind:?}: live, freed, foreign");
        for (i, &handle) in live.iter().enumerate() {
            assert_eq!(pool.get(handle).unwrap(), &blob(i)[..], "{kind:?} blob {i}");
        }
    }
}
