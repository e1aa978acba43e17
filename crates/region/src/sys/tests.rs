//! Tests of the system-call wrappers against the real kernel.
#![allow(unsafe_code)]

use super::*;
use crate::mapping::Mapping;
use std::sync::atomic::{AtomicBool, Ordering};

/// A MOVE racing with a write that replaces the zero page at its source
/// by a private copy (what a read fault restored as the zero page sees
/// when the program writes it next): Linux 6.18 answers `EEXIST` to
/// some of these after moving the page. `move_page` must say moved.
#[test]
fn move_page_reports_a_move_the_kernel_answers_with_eexist() {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::AtomicUsize;
    const PAGES: usize = 1024;
    const ROUNDS: usize = 150;
    let fd = userfaultfd(libc::O_CLOEXEC | UFFD_USER_MODE_ONLY).unwrap();
    // SIGBUS: the writer's access to a page moved away fails (EFAULT)
    // instead of waiting for a fault reader this test does not have.
    uffd_api(fd, FEATURE_MOVE | FEATURE_SIGBUS).unwrap();
    let src = Mapping::new(PAGES).unwrap();
    let dst = Mapping::new(PAGES).unwrap();
    for m in [&src, &dst] {
        uffd_register(fd, m.base(), m.len(), REGISTER_MODE_MISSING).unwrap();
    }
    // Writes through /proc/self/mem take the write fault (and its copy
    // of the zero page) in the kernel, with no signal to handle.
    let mem = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/mem")
        .unwrap();
    let (src_base, dst_base) = (src.base(), dst.base());
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut failure = None;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for round in 0..ROUNDS {
                while ready.load(Ordering::Acquire) != round * (PAGES + 1) {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                for page in 0..PAGES {
                    let addr = src_base + page * PAGE_SIZE;
                    uffd_zeropage_run(fd, addr, PAGE_SIZE, 0).unwrap();
                    ready.fetch_add(1, Ordering::AcqRel);
                    let _ = mem.write_at(&[1], addr as u64);
                }
            }
        });
        'rounds: for round in 0..ROUNDS {
            for page in 0..PAGES {
                while ready.load(Ordering::Acquire) <= round * (PAGES + 1) + page {
                    std::hint::spin_loop();
                }
                let (from, to) = (src_base + page * PAGE_SIZE, dst_base + page * PAGE_SIZE);
                let moved = move_page(fd, to, from);
                if moved != Ok(()) || !page_present(to) || page_present(from) {
                    failure = Some((round, page, moved, page_present(from), page_present(to)));
                    break 'rounds;
                }
            }
            // The last write may still be under way: let it end, then
            // empty both sides for the next round.
            std::thread::sleep(std::time::Duration::from_millis(1));
            discard(src_base, src.len()).unwrap();
            discard(dst_base, dst.len()).unwrap();
            ready.fetch_add(1, Ordering::AcqRel);
        }
        stop.store(true, Ordering::Release);
    });
    close(fd);
    assert_eq!(
        failure, None,
        "(round, page, move_page's answer, source present, destination present)"
    );
}

#[test]
fn resident_bytes_reads_statm_and_follows_what_is_touched() {
    assert_eq!(statm_resident_pages(b"12345 678 90 1 0 2 0\n"), Some(678));
    assert_eq!(statm_resident_pages(b"12345"), None);
    assert_eq!(statm_resident_pages(b"1 x 2"), None);
    let before = resident_bytes().unwrap();
    assert!(before > 0);
    let pages = 16384;
    let mapping = Mapping::new(pages).unwrap();
    for p in 0..pages {
        // SAFETY: inside the mapping just made, which nothing else uses.
        unsafe { (mapping.addr(p) as *mut u8).write_volatile(1) };
    }
    let after = resident_bytes().unwrap();
    // 64 MiB touched and still mapped: the process holds at least that
    // (the kernel's count may lag by a few hundred KiB). Not `before` plus
    // that: the crate's other tests run beside this one and may free what
    // they held meanwhile (CI saw 9.1 -> 23.5 MB after 16 MiB touched).
    let touched = (pages * PAGE_SIZE) as u64;
    assert!(
        after >= touched - (1 << 20) && after > before,
        "{before} -> {after}"
    );
}
