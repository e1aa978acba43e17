//! File pages given back (`BudgetConfig::file_pages_every`): a read-only
//! private mapping of a file on disk loses its resident pages to a pass and
//! reads back the same bytes; mappings holding the program's own copies
//! (written private pages) keep them; a budget's reclaimer makes the passes.
#![allow(unsafe_code)]
mod common;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zpage_region::{
    file_page_figures, give_back_file_pages, Budget, BudgetConfig, Region, PAGE_SIZE,
};

/// The tests give back every file page of the process: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const PAGES: usize = 512;

/// A file of `PAGES` pages, each filled with its own byte pattern, in the
/// build's directory (a disk, not a tmpfs whose pages the kernel could
/// only swap).
fn pattern_file(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("file-pages-{name}-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).unwrap();
    for page in 0..PAGES {
        f.write_all(&page_bytes(page)).unwrap();
    }
    f.sync_all().unwrap();
    path
}

fn page_bytes(page: usize) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (page.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8)
        .collect()
}

struct Mapped {
    addr: *mut u8,
    path: PathBuf,
}

impl Mapped {
    fn new(path: PathBuf, prot: i32) -> Mapped {
        let f = std::fs::File::open(&path).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: a new private mapping of the whole file; unmapped on drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGES * PAGE_SIZE,
                prot,
                libc::MAP_PRIVATE,
                fd,
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        Mapped {
            addr: addr.cast(),
            path,
        }
    }

    fn page(&self, page: usize) -> &[u8] {
        // SAFETY: within the mapping, which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.addr.add(page * PAGE_SIZE), PAGE_SIZE) }
    }

    /// Reads every page and checks it against the file's pattern.
    fn read_all_and_check(&self) {
        for page in 0..PAGES {
            assert!(
                self.page(page) == page_bytes(page),
                "page {page} reads wrong bytes"
            );
        }
    }

    /// Pages of the mapping resident in this process (its `Rss` in
    /// `/proc/self/smaps`).
    fn present_pages(&self) -> usize {
        common::rss_of(self.addr as usize) / PAGE_SIZE
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer referred to.
        unsafe { libc::munmap(self.addr.cast(), PAGES * PAGE_SIZE) };
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn a_pass_gives_back_read_only_file_pages_and_they_read_back_the_same() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = Mapped::new(pattern_file("ro"), libc::PROT_READ);
    mapped.read_all_and_check();
    assert_eq!(mapped.present_pages(), PAGES);
    let pass = give_back_file_pages().expect("a pass");
    assert!(pass.mappings >= 1, "{pass:?}");
    assert!(
        pass.resident_bytes >= (PAGES * PAGE_SIZE) as u64,
        "the pass counted {} resident bytes, the test's mapping alone had {}",
        pass.resident_bytes,
        PAGES * PAGE_SIZE
    );
    let left = mapped.present_pages();
    assert!(
        left < PAGES / 8,
        "{left} of {PAGES} pages still mapped after the pass"
    );
    mapped.read_all_and_check();
    assert_eq!(mapped.present_pages(), PAGES);
}

#[test]
fn the_programs_own_copies_of_file_pages_stay() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A writable private mapping whose pages were written: the program's
    // copies, which the kernel could only swap.
    let written = Mapped::new(pattern_file("rw"), libc::PROT_READ | libc::PROT_WRITE);
    for page in 0..PAGES {
        // SAFETY: within the mapping, writable.
        unsafe { *written.addr.add(page * PAGE_SIZE) = page_bytes(page)[0] };
    }
    // A read-only mapping holding one written copy (as a relocated segment
    // made read-only after): left alone as a whole.
    let relro = Mapped::new(pattern_file("relro"), libc::PROT_READ | libc::PROT_WRITE);
    relro.read_all_and_check();
    // SAFETY: within the mapping, writable until the mprotect below.
    unsafe { *relro.addr = page_bytes(0)[0] };
    // SAFETY: our own mapping.
    let rc = unsafe { libc::mprotect(relro.addr.cast(), PAGES * PAGE_SIZE, libc::PROT_READ) };
    assert_eq!(rc, 0);
    give_back_file_pages().expect("a pass");
    assert_eq!(
        written.present_pages(),
        PAGES,
        "written private pages were given back"
    );
    assert_eq!(
        relro.present_pages(),
        PAGES,
        "a mapping with written pages was given back"
    );
    written.read_all_and_check();
    relro.read_all_and_check();
}

/// A region of 8 MiB on a 4 MiB budget, every page written: the budget
/// stays full (its reclaimer evicting), or, with `fill` false, a region
/// with one page written, far below it.
fn budget_and_region(every: Option<Duration>, fill: bool) -> (Budget, Region) {
    let mut config = BudgetConfig::new(4 << 20);
    config.file_pages_every = every;
    let budget = Budget::new(config).expect("budget");
    let mut region = Region::with_budget(&budget, 8 << 20).expect("region");
    let bytes = region.as_mut_slice();
    let written = if fill { bytes.len() } else { PAGE_SIZE };
    for (i, b) in bytes[..written].iter_mut().enumerate().step_by(64) {
        *b = i as u8;
    }
    (budget, region)
}

/// Waits up to 10 s for the mapping's pages to leave; false if they stay.
fn pages_leave(mapped: &Mapped) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while mapped.present_pages() >= PAGES / 8 {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn a_full_budget_that_asks_gives_file_pages_back_on_its_own() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = Mapped::new(pattern_file("budget"), libc::PROT_READ);
    let passes_before = file_page_figures().passes;
    let (budget, region) = budget_and_region(Some(Duration::from_millis(50)), true);
    mapped.read_all_and_check();
    assert!(
        pages_leave(&mapped),
        "the budget's reclaimer gave nothing back in 10 s"
    );
    assert!(file_page_figures().passes > passes_before);
    mapped.read_all_and_check();
    drop(region);
    drop(budget);
}

#[test]
fn a_budget_with_room_or_that_does_not_ask_leaves_file_pages_alone() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mapped = Mapped::new(pattern_file("default"), libc::PROT_READ);
    for (every, fill) in [(None, true), (Some(Duration::from_millis(50)), false)] {
        let (budget, region) = budget_and_region(every, fill);
        mapped.read_all_and_check();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            mapped.present_pages(),
            PAGES,
            "file pages given back with file_pages_every {every:?}, budget full: {fill}"
        );
        drop(region);
        drop(budget);
    }
}
