//! The hazards of `fork()` for regions: a child sees evicted pages, restores
//! them from its own copy within one budget, follows `MADV_WIPEONFORK` and
//! `MADV_DONTFORK` given through `advise_fork`, and forks while other
//! threads fault and discard. Each runs in a child process (this test
//! binary re-run with `ZPAGE_CHILD=1` and an exact test filter): fork hooks
//! act on every region of the process, so they would pause the regions of
//! tests running alongside.
mod common;

use common::hazard::*;
use common::*;
use zpage_region::{Budget, BudgetConfig, FaultMode, ForkAdvice, Region, RegionError, PAGE_SIZE};

#[test]
fn fork_child_sees_evicted_pages() {
    // fork() hooks act on every region of the process: run this in a child
    // process so it does not pause the regions of tests running alongside.
    if !is_child() {
        let status = run_child("fork_child_sees_evicted_pages");
        assert!(status.success(), "{status:?}");
        return;
    }
    let region = small_region(16, 4);
    fill(&region);
    // Half evicted, the rest (up to the budget) resident.
    region
        .advise_cold(0, region.len() / 2)
        .expect("advise_cold");
    let before = region.stats();
    assert!(before.stored_pages > 1000, "{before:?}");
    // SAFETY: the child only reads memory and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = if check(&region) == 0 { 0 } else { 1 };
        // SAFETY: _exit is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(code) };
    }
    // The fork restored nothing: the child restores what it touches.
    let forked = region.stats();
    assert_eq!(forked.restore_count, before.restore_count, "{forked:?}");
    assert!(forked.stored_pages > 1000, "{forked:?}");
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child saw wrong bytes: {status:#x}"
    );
    // The parent: its pages resident at the fork are shared copy-on-write
    // with the (gone) child; eviction must take exclusivity back (EBUSY
    // path) and stay right.
    evict_all(&region);
    let after = region.stats();
    assert!(after.ebusy_fix_count > 0, "{after:?}");
    assert!(after.stored_pages > 1000, "{after:?}");
    assert_eq!(check(&region), 0);
}

/// What a forked child checks of its own copy (exit code: 0 if all holds).
fn forked_child_checks(region: &Region, budget: usize) -> i32 {
    let pages = region.len() / PAGE_SIZE;
    // Every page read back exact, the child's resident memory held within
    // the pages resident at the fork plus one budget of its own restores.
    if check(region) != 0 {
        return 10;
    }
    let seen = region.stats();
    if seen.restore_count == 0 || seen.clean_eviction_count == 0 {
        eprintln!(
            "child restored {} and dropped {}",
            seen.restore_count, seen.clean_eviction_count
        );
        return 11;
    }
    if seen.resident_bytes as usize > 2 * budget + MIB {
        eprintln!(
            "child resident {} over {}",
            seen.resident_bytes,
            2 * budget + MIB
        );
        return 12;
    }
    // Writes in the child: a page it restored and wrote is never dropped
    // (its copy is stale); the parent never sees them.
    for p in (0..pages).step_by(3) {
        write(region, p, 0, !pattern(p, 0));
    }
    for p in 0..pages {
        let want = if p % 3 == 0 {
            !pattern(p, 0)
        } else {
            pattern(p, 0)
        };
        if read(region, p, 0) != want {
            eprintln!("child page {p} after its writes");
            return 13;
        }
    }
    // A discard in the child (its own event thread sees it): zeros.
    let rc = advise_pages(region, 0, 64, libc::MADV_DONTNEED);
    if rc != 0 || (0..64).any(|p| read(region, p, 1) != 0) {
        return 14;
    }
    0
}

#[test]
fn forked_child_restores_its_own_pages_within_a_budget() {
    if !is_child() {
        let status = run_child("forked_child_restores_its_own_pages_within_a_budget");
        assert!(status.success(), "{status:?}");
        return;
    }
    let budget = 4 * MIB;
    let region = small_region(32, 4);
    fill(&region);
    evict_all(&region);
    let before = region.stats();
    for round in 0..3 {
        // SAFETY: the child checks its memory and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = forked_child_checks(&region, budget);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "round {round}: child status {status:#x}"
        );
    }
    // The parent's pages are untouched by the children's writes and discards.
    assert_eq!(region.stats().restore_count, before.restore_count);
    assert_eq!(check(&region), 0);
}

/// `advise_fork` of `pages` pages of `region` from page `first`.
fn advise_fork_pages(region: &Region, first: usize, pages: usize, advice: ForkAdvice) {
    let addr = region.as_ptr() as usize + first * PAGE_SIZE;
    let len = pages * PAGE_SIZE;
    let value = match advice {
        ForkAdvice::WipeOnFork => libc::MADV_WIPEONFORK,
        ForkAdvice::KeepOnFork => libc::MADV_KEEPONFORK,
        ForkAdvice::DontFork => libc::MADV_DONTFORK,
        ForkAdvice::DoFork => libc::MADV_DOFORK,
    };
    zpage_region::advise_fork(addr, len, advice, || {
        assert!(first + pages <= region.len() / PAGE_SIZE);
        // SAFETY: whole pages inside the region's own mapping (checked
        // above); these advice values change only what a child gets.
        match unsafe { libc::madvise(addr as *mut libc::c_void, len, value) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap()),
        }
    })
    .expect("fork advice");
}

/// True if no byte of `region`'s pages `[first, first + pages)` is mapped
/// in this process (`mincore` fails with ENOMEM).
fn unmapped(region: &Region, first: usize, pages: usize) -> bool {
    let mut v = vec![0u8; pages];
    // SAFETY: mincore writes one byte per page into `v`, which has `pages`.
    let rc = unsafe {
        libc::mincore(
            region.as_ptr().add(first * PAGE_SIZE) as *mut libc::c_void,
            pages * PAGE_SIZE,
            v.as_mut_ptr(),
        )
    };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOMEM)
}

/// What a child forked after the advice of
/// [`fork_advice_is_followed_for_compressed_pages`] checks (exit code: 0 if
/// all holds): zeros where wiped, the pattern where kept, nothing mapped
/// where not forked.
fn child_checks_fork_advice(region: &Region, gone: &Region) -> i32 {
    let n = region.len() / PAGE_SIZE;
    let wiped = |p: usize| p < n / 8 || (n / 4..n / 2).contains(&p);
    let mut wrong = 0;
    for p in 0..3 * n / 4 {
        for w in (0..WORDS).step_by(97) {
            let want = if wiped(p) { 0 } else { pattern(p, w) };
            if read(region, p, w) != want {
                wrong += 1;
            }
        }
    }
    if wrong != 0 {
        eprintln!("child: {wrong} wrong words");
        return 1;
    }
    if !unmapped(region, 3 * n / 4, n / 4) || !unmapped(gone, 0, gone.len() / PAGE_SIZE) {
        eprintln!("child: a MADV_DONTFORK range is mapped");
        return 2;
    }
    // A wiped page is the child's own memory now.
    write(region, 0, 0, 7);
    if read(region, 0, 0) != 7 {
        return 3;
    }
    0
}

/// `MADV_WIPEONFORK` (with part of it undone by `MADV_KEEPONFORK`) and
/// `MADV_DONTFORK` (part of one region, the whole of another on the same
/// budget) on compressed pages: a child reads zeros where the kernel
/// wipes, has no mapping where it does not fork, and restores the rest;
/// one touching a don't-fork page dies by SIGSEGV. In the default mode (the
/// child takes the budget over) and in handler-thread mode (every page the
/// child gets is restored before the fork).
#[test]
fn fork_advice_is_followed_for_compressed_pages() {
    if !is_child() {
        let status = run_child("fork_advice_is_followed_for_compressed_pages");
        assert!(status.success(), "{status:?}");
        return;
    }
    for mode in [FaultMode::Sigbus, FaultMode::HandlerThread] {
        let mut config = BudgetConfig::new(4 * MIB);
        config.mode = mode;
        let budget = match Budget::new(config) {
            Ok(b) => b,
            Err(RegionError::UffdUnavailable { .. }) if mode == FaultMode::HandlerThread => {
                eprintln!("handler-thread mode unavailable here: skipped");
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        let region = Region::with_budget(&budget, 16 * MIB).expect("region");
        let gone = Region::with_budget(&budget, MIB).expect("region");
        let n = region.len() / PAGE_SIZE;
        fill(&region);
        fill(&gone);
        advise_fork_pages(&region, 0, n / 2, ForkAdvice::WipeOnFork);
        advise_fork_pages(&region, n / 8, n / 8, ForkAdvice::KeepOnFork);
        advise_fork_pages(&region, 3 * n / 4, n / 4, ForkAdvice::DontFork);
        advise_fork_pages(&gone, 0, gone.len() / PAGE_SIZE, ForkAdvice::DontFork);
        // Evicted from, and restored into, the advised ranges (the advice
        // split the mapping): most compressed, some resident at the fork.
        evict_all(&region);
        evict_all(&gone);
        for p in (0..n).step_by(8) {
            assert_eq!(read(&region, p, 0), pattern(p, 0));
        }
        assert!(region.stats().stored_pages > (n / 2) as u64, "{mode:?}");
        for touch_gone in [false, true] {
            // SAFETY: the child reads and writes its memory and calls _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let code = if touch_gone {
                    // Not mapped in the child: SIGSEGV before the exit.
                    std::hint::black_box(read(&region, 3 * n / 4 + 1, 0));
                    9
                } else {
                    child_checks_fork_advice(&region, &gone)
                };
                // SAFETY: ends the child at once.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            if touch_gone {
                assert!(
                    libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
                    "{mode:?}: child touching a MADV_DONTFORK page: {status:#x}"
                );
            } else {
                assert!(
                    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                    "{mode:?}: child status {status:#x}"
                );
            }
        }
        // The parent keeps everything.
        assert_eq!(check(&region), 0, "{mode:?}");
        assert_eq!(check(&gone), 0, "{mode:?}");
    }
}
#[test]
fn fork_while_other_threads_fault_and_discard() {
    if !is_child() {
        let status = run_child("fork_while_other_threads_fault_and_discard");
        assert!(status.success(), "{status:?}");
        return;
    }
    let region = std::sync::Arc::new(small_region(4, 1));
    fill(&region);
    let pages = region.len() / PAGE_SIZE;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (region, stop) = (region.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(99 + t);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = rng.below(pages);
                    match rng.below(20) {
                        0 => {
                            let _ = region.advise_cold(p * PAGE_SIZE, PAGE_SIZE);
                        }
                        1 => {
                            advise_pages(&region, p, 1, libc::MADV_DONTNEED);
                        }
                        _ => {
                            // Either the pattern or, after a discard, zeros.
                            let v = read(&region, p, 0);
                            if v != pattern(p, 0) && v != 0 {
                                eprintln!("page {p}: {v:#x}");
                                std::process::exit(3);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for _ in 0..50 {
        // SAFETY: the child exits at once.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // The child restores what it reads from its own copy: the
            // pattern, or zeros where a discard came before the fork.
            let wrong = (0..pages)
                .filter(|&p| {
                    let v = read(&region, p, 0);
                    v != pattern(p, 0) && v != 0
                })
                .count();
            // SAFETY: _exit in the child.
            unsafe { libc::_exit(if wrong == 0 { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child saw wrong bytes: {status:#x}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.join().expect("worker");
    }
    std::process::exit(0);
}
