//! A pool gives the memory of what it frees back to the kernel: a pool that
//! shrank (its pages restored, written back to a tier or discarded) does not
//! keep its high-water mark resident. Alone in its test binary: it reads the
//! process's resident memory.

use zpage_pool::{Handle, PoolKind};

const MIB: usize = 1 << 20;

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * zpage_pool::PAGE_SIZE
}

/// 64 MiB of blobs of every length; three in four freed, scattered, as
/// restores free them; compacted: what compaction emptied leaves the
/// process's resident memory.
#[test]
fn a_compacted_pool_gives_the_memory_it_freed_back() {
    let mut pool = PoolKind::SizeClass.build();
    let blob = |i: usize| vec![(i % 251) as u8 | 1; 64 + (i * 977) % 4000];
    let mut handles: Vec<Handle> = Vec::new();
    while pool.stats().memory_used_bytes < 64 * MIB as u64 {
        handles.push(pool.store(&blob(handles.len())).unwrap());
    }
    let full = resident_bytes();
    for (i, &handle) in handles.iter().enumerate() {
        if i % 4 != 0 {
            pool.free(handle).unwrap();
        }
    }
    pool.compact();
    let used = pool.stats().memory_used_bytes as usize;
    let fell = full.saturating_sub(resident_bytes());
    eprintln!(
        "64 MiB of pool, three blobs in four freed and compacted to {} MiB: resident memory fell by {} MiB; {:?}",
        used / MIB,
        fell / MIB,
        zpage_pages::heap_stats()
    );
    assert!(used < 24 * MIB, "compaction left {used} bytes");
    assert!(
        fell + used > 56 * MIB,
        "resident memory fell by {fell} bytes only, with {used} bytes of pool left"
    );
    for (i, &handle) in handles.iter().enumerate().step_by(4) {
        assert_eq!(pool.get(handle).unwrap(), &blob(i)[..], "blob {i}");
    }
}
