//! `discard_ranges` against the real kernel.
#![allow(unsafe_code)]

use zpage_pages::{discard_ranges, discards_are_batched, DISCARD_RANGES_MAX, PAGE_SIZE};

/// `pages` pages of a fresh private mapping, each written with `byte(p)`.
struct Mapping {
    addr: usize,
    pages: usize,
}

impl Mapping {
    fn new(pages: usize, byte: impl Fn(usize) -> u8) -> Mapping {
        // SAFETY: a new private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                pages * PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let mapping = Mapping {
            addr: p as usize,
            pages,
        };
        for page in 0..pages {
            // SAFETY: inside the mapping just made, which nothing else uses.
            unsafe { (mapping.page(page) as *mut u8).write_volatile(byte(page)) };
        }
        mapping
    }

    fn page(&self, p: usize) -> usize {
        self.addr + p * PAGE_SIZE
    }

    fn byte(&self, p: usize) -> u8 {
        // SAFETY: inside the mapping.
        unsafe { (self.page(p) as *const u8).read_volatile() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no reference into it left.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.pages * PAGE_SIZE) };
    }
}

#[test]
fn discard_ranges_empties_exactly_the_ranges_given() {
    let mapping = Mapping::new(16, |p| p as u8 + 1);
    let ranges = [
        (mapping.page(1), PAGE_SIZE),
        (mapping.page(4), 3 * PAGE_SIZE),
        (mapping.page(15), PAGE_SIZE),
    ];
    discard_ranges(&ranges);
    for p in 0..16 {
        let emptied = p == 1 || (4..7).contains(&p) || p == 15;
        assert_eq!(
            mapping.byte(p),
            if emptied { 0 } else { p as u8 + 1 },
            "page {p}"
        );
    }
    // Kernels from 6.15 take the batch in one call.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = numbers.next().unwrap().parse().unwrap();
    let minor: u32 = numbers.next().unwrap().parse().unwrap();
    if (major, minor) >= (6, 15) {
        assert!(
            discards_are_batched(),
            "process_madvise refused on {release}"
        );
    }
}

#[test]
fn discard_ranges_takes_more_ranges_than_one_call_can() {
    let pages = 2 * DISCARD_RANGES_MAX + 20;
    let mapping = Mapping::new(pages, |_| 1);
    // Every other page: one range each, more than one call's worth.
    let ranges: Vec<(usize, usize)> = (0..pages)
        .step_by(2)
        .map(|p| (mapping.page(p), PAGE_SIZE))
        .collect();
    assert!(ranges.len() > DISCARD_RANGES_MAX);
    discard_ranges(&ranges);
    for p in 0..pages {
        assert_eq!(mapping.byte(p), (p % 2) as u8, "page {p}");
    }
}
