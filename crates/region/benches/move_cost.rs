//! What one eviction's TLB flush costs on this machine: `UFFDIO_MOVE` of
//! single pages (scattered, as eviction victims are) with no other thread of
//! the process on a CPU, with one running on the other CPU, and with one
//! that sleeps; and `MADV_DONTNEED` of 64 one-page ranges, one `madvise`
//! each against one `process_madvise` for all of them, with a thread
//! running on the other CPU. Prints a table (the crate README's "Where a
//! fault's time goes" quotes it).
//!
//!     cargo bench -p zpage-region --bench move_cost
//!
//! A MOVE flushes the moved page's TLB entry on every CPU whose current
//! thread belongs to the process; a CPU that sleeps or runs another process
//! is skipped. The region crate's reclaimer moves pages out while the
//! program runs, so it pays the running case on every page; the kernel's
//! reclaim unmaps many pages and then flushes once.
//!
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

mod common;

use common::{anonymous, move_page, register_missing, userfaultfd, PAGE};
use zpage_region::uffd_abi::FEATURE_MOVE;

/// Another thread of this process: spinning in user space, sleeping, or none.
#[derive(Clone, Copy)]
enum Sibling {
    None,
    Running,
    Sleeping,
}

struct SiblingThread {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl SiblingThread {
    fn start(kind: Sibling) -> SiblingThread {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = match kind {
            Sibling::None => None,
            Sibling::Running => {
                let stop = Arc::clone(&stop);
                Some(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                }))
            }
            Sibling::Sleeping => {
                let stop = Arc::clone(&stop);
                Some(std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_micros(300));
                    }
                }))
            }
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        SiblingThread { stop, handle }
    }
}

impl Drop for SiblingThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Microseconds per single-page MOVE of `pages` scattered pages.
fn move_cost(sibling: Sibling, pages: usize) -> f64 {
    let uffd = userfaultfd(FEATURE_MOVE, libc::O_NONBLOCK);
    let src = anonymous(pages);
    let dst = anonymous(pages);
    register_missing(uffd, dst, pages);
    for p in 0..pages {
        // SAFETY: a page of `src`, made above.
        unsafe { src.add(p * PAGE).write_volatile(1) };
    }
    let sibling = SiblingThread::start(sibling);
    let started = Instant::now();
    for i in 0..pages {
        // A stride prime to `pages`: no two consecutive moves are adjacent.
        let p = (i * 7919) % pages;
        let done = move_page(uffd, dst as usize + p * PAGE, src as usize + p * PAGE);
        assert_eq!(done, 0, "UFFDIO_MOVE");
    }
    let us = started.elapsed().as_secs_f64() * 1e6 / pages as f64;
    drop(sibling);
    // SAFETY: unmapping and closing what was made above.
    unsafe {
        libc::munmap(src.cast(), pages * PAGE);
        libc::munmap(dst.cast(), pages * PAGE);
        libc::close(uffd);
    }
    us
}

/// Microseconds per page to discard 64 one-page ranges, `rounds` times:
/// one `madvise` per range, or one `process_madvise` for all 64.
fn discard_cost(batched: bool, rounds: usize) -> f64 {
    const RANGES: usize = 64;
    const PIDFD_SELF_THREAD: libc::c_int = -10000;
    let area = anonymous(2 * RANGES);
    let _sibling = SiblingThread::start(Sibling::Running);
    let mut total = 0.0;
    for _ in 0..rounds {
        // SAFETY: the ranges lie in `area`, made above; nothing else uses it.
        unsafe {
            for r in 0..RANGES {
                area.add(2 * r * PAGE).write_volatile(1);
            }
            let started = Instant::now();
            if batched {
                let iov: Vec<libc::iovec> = (0..RANGES)
                    .map(|r| libc::iovec {
                        iov_base: area.add(2 * r * PAGE).cast(),
                        iov_len: PAGE,
                    })
                    .collect();
                let done = libc::syscall(
                    libc::SYS_process_madvise,
                    PIDFD_SELF_THREAD,
                    iov.as_ptr(),
                    RANGES,
                    libc::MADV_DONTNEED,
                    0,
                );
                if done != (RANGES * PAGE) as i64 {
                    return f64::NAN;
                }
            } else {
                for r in 0..RANGES {
                    libc::madvise(area.add(2 * r * PAGE).cast(), PAGE, libc::MADV_DONTNEED);
                }
            }
            total += started.elapsed().as_secs_f64();
        }
    }
    // SAFETY: unmapping the area made above.
    unsafe { libc::munmap(area.cast(), 2 * RANGES * PAGE) };
    total * 1e6 / (rounds * RANGES) as f64
}

fn main() {
    let pages = 20_000;
    println!("| operation | other thread of the process | µs per page |");
    println!("|---|---|---|");
    for (sibling, name) in [
        (Sibling::None, "none"),
        (Sibling::Running, "running on the other CPU"),
        (Sibling::Sleeping, "asleep (wakes every 300 µs)"),
    ] {
        println!(
            "| `UFFDIO_MOVE`, one page per call | {name} | {:.2} |",
            move_cost(sibling, pages)
        );
    }
    println!(
        "| `MADV_DONTNEED`, one `madvise` per one-page range | running on the other CPU | {:.2} |",
        discard_cost(false, 1000)
    );
    let batched = discard_cost(true, 1000);
    if batched.is_nan() {
        println!("| `process_madvise(MADV_DONTNEED)`, 64 ranges per call | running on the other CPU | refused by this kernel |");
    } else {
        println!("| `process_madvise(MADV_DONTNEED)`, 64 ranges per call | running on the other CPU | {batched:.2} |");
    }
}
