//! What the hazard tests (`hazards.rs`, `fork_hazards.rs`) share: regions
//! filled with a pattern that names each page and word, checked a few
//! words a page, and the program's own `madvise` on region pages.

use super::{read, write, MIB};
use zpage_region::{Region, RegionConfig, PAGE_SIZE};

/// The 8-byte words in a page.
pub const WORDS: usize = PAGE_SIZE / 8;

/// Word `w` of page `p` as [`fill`] writes it (never zero, so a page
/// read back as zeros never passes for it).
pub fn pattern(p: usize, w: usize) -> u64 {
    ((p as u64) << 20 | w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

/// A region of `mib` MiB on a budget of its own of `budget_mib` MiB.
pub fn small_region(mib: usize, budget_mib: usize) -> Region {
    Region::new(RegionConfig::new(mib * MIB, budget_mib * MIB)).expect("region")
}

/// Writes the pattern into every page (a few words per page).
pub fn fill(region: &Region) {
    for p in 0..region.len() / PAGE_SIZE {
        for w in (0..WORDS).step_by(97) {
            write(region, p, w, pattern(p, w));
        }
    }
}

/// How many of the words [`fill`] writes differ from the pattern.
pub fn check(region: &Region) -> usize {
    let mut wrong = 0;
    for p in 0..region.len() / PAGE_SIZE {
        for w in (0..WORDS).step_by(97) {
            if read(region, p, w) != pattern(p, w) {
                wrong += 1;
            }
        }
    }
    wrong
}

/// Evicts every page of `region` now.
pub fn evict_all(region: &Region) {
    region.advise_cold(0, region.len()).expect("advise_cold");
}

/// `madvise(advice)` on `pages` pages of `region` from page `first`, as the
/// program would; returns its result.
pub fn advise_pages(
    region: &Region,
    first: usize,
    pages: usize,
    advice: libc::c_int,
) -> libc::c_int {
    assert!(
        first + pages <= region.len() / PAGE_SIZE,
        "inside the region"
    );
    // SAFETY: a whole-page range inside the region's own mapping (checked
    // above); the advice values the tests use change contents only.
    unsafe {
        libc::madvise(
            region.as_ptr().add(first * PAGE_SIZE) as *mut libc::c_void,
            pages * PAGE_SIZE,
            advice,
        )
    }
}
