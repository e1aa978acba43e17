//! The process's page heap against the real kernel: runs read as zeros,
//! freed memory goes back to the kernel past the bound, a forked child can
//! take and free runs.
#![allow(unsafe_code)]

use std::sync::Mutex;
use zpage_pages::{heap_stats, PageRun, MAX_RUN_PAGES, PAGE_SIZE};

/// The heap is the process's: one test at a time looks at its figures.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const MIB: usize = 1 << 20;

fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * PAGE_SIZE
}

#[test]
fn a_run_is_page_aligned_zeroed_and_writable() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for pages in 1..=MAX_RUN_PAGES {
        let mut run = PageRun::new(pages).unwrap();
        assert_eq!(run.pages(), pages);
        assert_eq!(run.len(), pages * PAGE_SIZE);
        assert_eq!(run.as_ptr() as usize % PAGE_SIZE, 0);
        assert!(run.iter().all(|&b| b == 0));
        run.fill(0xa5);
        assert!(run.iter().all(|&b| b == 0xa5));
    }
    // A run freed with bytes in it and taken again reads as zeros, kept
    // resident or given back.
    for _ in 0..2000 {
        let mut run = PageRun::new(3).unwrap();
        assert!(run.iter().all(|&b| b == 0), "a reused run held old bytes");
        run.fill(0x5a);
    }
}

#[test]
fn freed_runs_go_back_to_the_kernel_past_the_bound() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = heap_stats();
    // 64 MiB in runs of every length, every page written.
    let mut runs = Vec::new();
    let mut bytes = 0;
    let mut pages = 1;
    while bytes < 64 * MIB {
        let mut run = PageRun::new(pages).unwrap();
        run.fill(1);
        bytes += run.len();
        runs.push(run);
        pages = pages % MAX_RUN_PAGES + 1;
    }
    let taken = heap_stats();
    assert_eq!(taken.in_use_bytes, before.in_use_bytes + bytes);
    let resident = resident_bytes();
    // Freed in an order unlike the one they were taken in, as a pool frees:
    // two of every three, then the rest.
    let mut every_third: Vec<PageRun> = Vec::new();
    for (i, run) in runs.into_iter().enumerate() {
        if i % 3 == 0 {
            every_third.push(run);
        }
    }
    drop(every_third);
    let runs_per_length = bytes / (PAGE_SIZE * MAX_RUN_PAGES * (MAX_RUN_PAGES + 1) / 2);
    let freed = heap_stats();
    let kept_bound = 256 * PAGE_SIZE + freed.in_use_bytes / 64;
    assert!(
        freed.kept_bytes <= kept_bound,
        "kept {} bytes over a bound of {kept_bound}: {freed:?}",
        freed.kept_bytes
    );
    let gone = resident.saturating_sub(resident_bytes());
    eprintln!(
        "64 MiB taken and freed: resident memory fell by {} MiB; {freed:?}",
        gone / MIB
    );
    assert!(gone > 56 * MIB, "resident memory fell by {gone} bytes only");
    // The memory given back is used again before new address space.
    let range = heap_stats().used_range_bytes;
    let again: Vec<PageRun> = (0..runs_per_length / 2 * 4)
        .map(|i| PageRun::new(i % 4 + 1).unwrap())
        .collect();
    assert_eq!(heap_stats().used_range_bytes, range);
    drop(again);
}

#[test]
fn a_forked_child_takes_and_frees_runs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut kept: Vec<PageRun> = (0..64).map(|_| PageRun::new(2).unwrap()).collect();
    kept[0][0] = 7;
    drop(kept.split_off(32));
    // SAFETY: the child only takes and frees runs, then leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let ok = kept[0][0] == 7 && {
            drop(kept);
            let runs: Vec<PageRun> = (0..256).map(|_| PageRun::new(5).unwrap()).collect();
            runs.iter().all(|r| r.iter().all(|&b| b == 0))
        };
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    assert_eq!(kept[0][0], 7);
}
