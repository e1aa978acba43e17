//! Done-criterion 5: one test per hazard in the Safety paragraph;
//! those of `fork()` are in `fork_hazards.rs`. Tests that must kill a
//! process run the hazard in a child process (this test binary re-run with
//! `ZPAGE_CHILD=1` and an exact test filter).
mod common;

use common::hazard::*;
use common::*;
use zpage_region::{Region, RegionConfig, RegionError, PAGE_SIZE};

#[test]
fn dontneed_reads_zeros() {
    let region = small_region(8, 2);
    fill(&region);
    let pages = region.len() / PAGE_SIZE;
    // Evict the first half; the second half stays mostly resident.
    region.advise_cold(0, region.len() / 2).expect("cold");
    assert!(region.stats().stored_pages > 0);
    // The program discards a range straddling evicted and resident pages.
    let (from, to) = (pages / 4, 3 * pages / 4);
    // The region must then read zeros there.
    let rc = advise_pages(&region, from, to - from, libc::MADV_DONTNEED);
    assert_eq!(rc, 0);
    for p in 0..pages {
        for w in (0..WORDS).step_by(97) {
            let want = if (from..to).contains(&p) {
                0
            } else {
                pattern(p, w)
            };
            assert_eq!(read(&region, p, w), want, "page {p} word {w}");
        }
    }
    assert!(region.stats().discard_count > 0);
}

#[test]
fn discarded_pages_never_touched_again_leave_the_budget() {
    // An allocator discards the pages it frees (MADV_DONTNEED) and may never
    // touch them again. They must leave the budget's resident count as
    // holes; kept there, they fill the budget, and every later fault waits
    // the throttle's 100 ms for room that never comes.
    let region = small_region(8, 1);
    let pages = region.len() / PAGE_SIZE;
    let discarded = pages / 8;
    for p in 0..discarded {
        write(&region, p, 0, pattern(p, 0));
    }
    assert_eq!(advise_pages(&region, 0, discarded, libc::MADV_DONTNEED), 0);
    for p in discarded..discarded * 3 {
        write(&region, p, 0, pattern(p, 0));
    }
    let stats = region.stats();
    assert!(
        stats.hole_count > 0,
        "no discarded page left the budget: {stats:?}"
    );
    for p in 0..discarded * 3 {
        let want = if p < discarded { 0 } else { pattern(p, 0) };
        assert_eq!(read(&region, p, 0), want, "page {p}");
    }
}

#[test]
fn discarded_pages_leave_before_live_ones() {
    // Freed memory leaves a memory cgroup at once; a region's discarded
    // pages must likewise leave the budget before any live page does,
    // however recently they were admitted.
    let region = small_region(8, 1); // 2,048 pages, a budget of 256
    let (live, freed, fresh) = (60, 150, 100);
    for p in 0..live + freed {
        write(&region, p, 0, pattern(p, 0));
    }
    assert_eq!(advise_pages(&region, live, freed, libc::MADV_DONTNEED), 0);
    let first_fresh = live + freed;
    for p in first_fresh..first_fresh + fresh {
        write(&region, p, 0, pattern(p, 0));
    }
    let stats = region.stats();
    assert!(stats.hole_count > 0, "{stats:?}");
    assert_eq!(
        stats.eviction_count, 0,
        "live pages were evicted while discarded ones held the budget: {stats:?}"
    );
    for p in 0..first_fresh + fresh {
        let want = if (live..first_fresh).contains(&p) {
            0
        } else {
            pattern(p, 0)
        };
        assert_eq!(read(&region, p, 0), want, "page {p}");
    }
}

#[test]
fn dontneed_races_with_faults() {
    // Threads keep faulting pages back while another thread discards them:
    // after each discard returns, the discarding thread must read zeros.
    let region = std::sync::Arc::new(small_region(4, 1));
    fill(&region);
    let pages = region.len() / PAGE_SIZE;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (region, stop) = (region.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(77 + t);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = rng.below(pages);
                    let _ = read(&region, p, 0);
                    if rng.below(50) == 0 {
                        let _ = region.advise_cold(p * PAGE_SIZE, PAGE_SIZE);
                    }
                }
            })
        })
        .collect();
    let mut rng = Rng(5);
    for _ in 0..2000 {
        let p = rng.below(pages);
        let rc = advise_pages(&region, p, 1, libc::MADV_DONTNEED);
        assert_eq!(rc, 0);
        assert_eq!(
            read(&region, p, 97),
            0,
            "page {p} not zero after MADV_DONTNEED"
        );
        write(&region, p, 97, pattern(p, 97));
        assert_eq!(read(&region, p, 97), pattern(p, 97));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
}

#[test]
fn fresh_pages_read_then_written_keep_their_writes() {
    // A read fault on an empty page maps the zero page; the write that
    // follows replaces it with a private copy. A MOVE evicting the page
    // during that write can be answered EEXIST though it moved the page
    // (Linux 6.18): taken at its word, the page was lost and read as zeros.
    // Four threads keep discarding blocks of their own pages and updating
    // them in place (each word read, then written), as an in-place NumPy
    // operation on fresh memory does, over a region eight times its budget,
    // checking every page against a shadow copy.
    const THREADS: usize = 4;
    const BLOCK: usize = 32;
    let region = std::sync::Arc::new(small_region(16, 2));
    let pages = region.len() / PAGE_SIZE;
    let rounds = std::env::var("ZPAGE_FRESH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000usize);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let region = region.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0xF00D + t as u64);
                let mine = pages / THREADS;
                let first = t * mine;
                let mut shadow = vec![0u64; mine];
                let mut wrong = 0;
                for round in 0..rounds {
                    let at = first + rng.below(mine / BLOCK) * BLOCK;
                    if rng.below(2) == 0 {
                        let rc = advise_pages(&region, at, BLOCK, libc::MADV_DONTNEED);
                        assert_eq!(rc, 0);
                        shadow[at - first..at - first + BLOCK].fill(0);
                    }
                    let add = pattern(at, round);
                    for p in at..at + BLOCK {
                        let w = word(&region, p, 5);
                        // A read, then a write: not one atomic add, which
                        // would fault as a write at once.
                        let old = w.load(std::sync::atomic::Ordering::Relaxed);
                        wrong += usize::from(old != shadow[p - first]);
                        w.store(old.wrapping_add(add), std::sync::atomic::Ordering::Relaxed);
                        shadow[p - first] = old.wrapping_add(add);
                    }
                }
                wrong
                    + (first..first + mine)
                        .filter(|&p| read(&region, p, 5) != shadow[p - first])
                        .count()
            })
        })
        .collect();
    let wrong: usize = threads.into_iter().map(|h| h.join().expect("thread")).sum();
    assert_eq!(wrong, 0, "{:#?}", region.stats());
    assert!(
        region.stats().eviction_count > 0,
        "the test ran under pressure"
    );
}

#[test]
fn munmap_frees_and_refuses() {
    let region = small_region(8, 2);
    fill(&region);
    evict_all(&region);
    let stored = region.stats().stored_pages;
    assert!(stored > 1000);
    // SAFETY: unmapping the second half of the region's mapping; nothing of
    // ours references it afterwards (the region learns through the event).
    let rc = unsafe {
        libc::munmap(
            region.as_ptr().add(region.len() / 2).cast(),
            region.len() / 2,
        )
    };
    assert_eq!(rc, 0);
    // The event is consumed before munmap returns; its effects land right after.
    let mut refused = false;
    for _ in 0..200 {
        if matches!(
            region.advise_cold(0, PAGE_SIZE),
            Err(RegionError::Unmapped(_))
        ) {
            refused = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(refused, "API calls must refuse after munmap");
    std::thread::sleep(std::time::Duration::from_millis(50));
    // Only the half still mapped may hold stored pages. (Half of `stored`
    // would be the wrong bound: pages the eviction left resident may be
    // compressed meanwhile, so the mapped half can reach all its pages.)
    let after = region.stats().stored_pages;
    let mapped_half = (region.len() / 2 / PAGE_SIZE) as u64;
    assert!(
        after <= mapped_half + 16,
        "compressed pages of the unmapped half must be freed: {stored} -> {after} (mapped half: {mapped_half} pages)"
    );
    // The half still mapped still reads right.
    for p in 0..region.len() / PAGE_SIZE / 2 {
        assert_eq!(read(&region, p, 0), pattern(p, 0));
    }
}

#[test]
fn mremap_is_refused() {
    if !is_child() {
        let status = run_child("mremap_is_refused");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
        return;
    }
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    // SAFETY: moving the region's mapping (the hazard under test).
    let new = unsafe {
        libc::mremap(
            region.as_ptr().cast(),
            region.len(),
            region.len(),
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            0x6000_0000_0000usize as *mut libc::c_void,
        )
    };
    assert_ne!(new, libc::MAP_FAILED);
    eprintln!("moved; touching an evicted page at the new address must kill us with SIGBUS");
    // SAFETY: reading the moved mapping: the access under test.
    let v = unsafe { std::ptr::read_volatile(new as *const u64) };
    eprintln!("read {v:#x} instead of dying");
    std::process::exit(0);
}

#[test]
fn closed_uffd_is_detected() {
    if !is_child() {
        let status = run_child("closed_uffd_is_detected");
        assert!(status.success(), "{status:?}");
        return;
    }
    let region = small_region(4, 1);
    fill(&region);
    assert!(region.health_check().is_ok());
    // SAFETY: closing the region's uffd behind its back (the hazard under test).
    unsafe { libc::close(region.raw_uffd()) };
    assert!(matches!(
        region.health_check(),
        Err(RegionError::UffdLost(_))
    ));
    assert!(matches!(
        region.advise_cold(0, PAGE_SIZE),
        Err(RegionError::UffdLost(_))
    ));
    assert!(matches!(
        region.prefault(0, PAGE_SIZE),
        Err(RegionError::UffdLost(_))
    ));
    std::process::exit(0);
}

#[test]
fn closed_uffd_never_reads_zeros() {
    if !is_child() {
        let stderr = run_child_expecting_abort("closed_uffd_never_reads_zeros");
        assert!(
            stderr.contains("the program closed zpage's userfaultfd"),
            "{stderr}"
        );
        assert!(!stderr.contains("READ ZEROS"), "{stderr}");
        return;
    }
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    assert!(region.stats().stored_pages > 100);
    // SAFETY: closing the region's uffd behind its back (the hazard under test).
    unsafe { libc::close(region.raw_uffd()) };
    // Every evicted page must fault (and end the process), never read zeros.
    for p in 0..region.len() / PAGE_SIZE {
        if read(&region, p, 0) != pattern(p, 0) {
            eprintln!("page {p} READ ZEROS after the uffd was closed");
        }
    }
    eprintln!("every page read back: the test wants an abort before this");
    std::process::exit(0);
}

#[test]
fn blocked_sigbus_kills_not_corrupts() {
    if !is_child() {
        let status = run_child("blocked_sigbus_kills_not_corrupts");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
        return;
    }
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    // SAFETY: blocking SIGBUS in this thread (the hazard under test).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGBUS);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let v = read(&region, 3, 0);
    eprintln!("read {v:#x} instead of dying");
    std::process::exit(0);
}

#[test]
fn thp_is_avoided_and_safe() {
    let region = small_region(16, 4);
    fill(&region);
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let base = format!("{:x}-", region.as_ptr() as usize);
    let block: String = smaps
        .split_inclusive('\n')
        .skip_while(|l| !l.starts_with(&base))
        .take_while(|l| l.starts_with(&base) || !l.contains('-') || l.contains(':'))
        .take(30)
        .collect();
    assert!(block.contains("AnonHugePages:         0 kB"), "{block}");
    // The program asks for huge pages anyway: still correct (MOVE splits).
    let rc = advise_pages(&region, 0, region.len() / PAGE_SIZE, libc::MADV_HUGEPAGE);
    assert_eq!(rc, 0);
    fill(&region);
    evict_all(&region);
    assert_eq!(check(&region), 0);
}

#[test]
fn evicted_pages_invisible_to_gup_until_restored() {
    // A core dump (and gdb, /proc/pid/mem) reads memory through GUP, which
    // cannot fault an evicted page in: it sees a hole. restore_all() first.
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    let mem = std::fs::File::open("/proc/self/mem").expect("/proc/self/mem");
    let mut buf = [0u8; 8];
    use std::os::unix::fs::FileExt;
    let addr = region.as_ptr() as u64 + 5 * PAGE_SIZE as u64;
    assert!(
        mem.read_at(&mut buf, addr).is_err(),
        "GUP read of an evicted page should fail"
    );
    region.restore_all().expect("restore_all");
    mem.read_exact_at(&mut buf, addr)
        .expect("read after restore");
    assert_eq!(u64::from_ne_bytes(buf), pattern(5, 0));
}

#[test]
fn syscall_needs_prefault() {
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 into a local array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let src = 7 * PAGE_SIZE;
    // SAFETY: write(2) from region memory (the hazard under test).
    let n = unsafe { libc::write(fds[1], region.as_ptr().add(src).cast(), 64) };
    assert_eq!(n, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EFAULT)
    );
    region.prefault(src, 64).expect("prefault");
    // SAFETY: as above, now on a present page.
    let n = unsafe { libc::write(fds[1], region.as_ptr().add(src).cast(), 64) };
    assert_eq!(n, 64);
    let mut buf = [0u8; 8];
    // SAFETY: read(2) into a local buffer.
    assert_eq!(unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 8) }, 8);
    assert_eq!(u64::from_ne_bytes(buf), pattern(7, 0));
    // SAFETY: closing our own pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

static FOREIGN_HIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn program_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    FOREIGN_HIT.store(true, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) };
}

#[test]
fn foreign_sigbus_is_chained() {
    if !is_child() {
        let status = run_child("foreign_sigbus_is_chained");
        assert_eq!(status.code(), Some(42), "{status:?}");
        return;
    }
    // The program's own handler, installed before zpage's.
    // SAFETY: installing a plain SA_SIGINFO handler.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = program_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
    let region = small_region(4, 1);
    fill(&region);
    evict_all(&region);
    assert_eq!(check(&region), 0, "zpage's faults are handled, not chained");
    // A genuine SIGBUS elsewhere: touching a file mapping beyond EOF.
    let path = std::env::temp_dir().join(format!("zpage-sigbus-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("temp file");
    use std::os::fd::AsRawFd;
    // SAFETY: mapping an empty file; touching it raises SIGBUS (BUS_ADRERR).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let _ = std::fs::remove_file(&path);
    // SAFETY: the access under test; the program handler exits with 42.
    let v = unsafe { std::ptr::read_volatile(p as *const u8) };
    eprintln!("read {v} without a signal");
    std::process::exit(1);
}

#[test]
fn pin_keeps_pages_resident() {
    let region = small_region(8, 2);
    fill(&region);
    region.pin(0, 64 * PAGE_SIZE).expect("pin");
    let before = region.stats();
    assert_eq!(before.pinned_bytes, 64 * PAGE_SIZE as u64);
    evict_all(&region);
    fill(&region);
    // Pinned pages never leave: no fault when touching them.
    let faults = region.stats().fault_count;
    for p in 0..64 {
        assert_eq!(read(&region, p, 0), pattern(p, 0));
    }
    assert_eq!(
        region.stats().fault_count,
        faults,
        "touching pinned pages faulted"
    );
    region.unpin(0, 64 * PAGE_SIZE).expect("unpin");
    assert!(matches!(
        region.unpin(0, PAGE_SIZE),
        Err(RegionError::NotPinned(0))
    ));
    assert!(matches!(
        region.pin(0, region.len()),
        Err(RegionError::PinExceedsBudget { .. })
    ));
    assert_eq!(check(&region), 0);
}

#[test]
fn config_errors_name_the_fix() {
    let e = Region::new(RegionConfig::new(MIB, 2 * MIB)).expect_err("budget > size");
    assert!(e.to_string().contains("larger than size_bytes"), "{e}");
    let e = Region::new(RegionConfig::new(0, 0)).expect_err("size 0");
    assert!(e.to_string().contains("size_bytes is 0"), "{e}");
    let region = small_region(1, 1);
    let e = region
        .advise_cold(region.len(), 1)
        .expect_err("out of range");
    assert!(matches!(e, RegionError::OutOfRange { .. }), "{e}");
}

#[test]
fn handler_thread_mode_serves_syscalls() {
    let mut cfg = RegionConfig::new(4 * MIB, MIB);
    cfg.mode = zpage_region::FaultMode::HandlerThread;
    let region = match Region::new(cfg) {
        Ok(r) => r,
        Err(e @ RegionError::UffdUnavailable { .. }) => {
            // Unprivileged: the error must name the fix.
            assert!(e.to_string().contains("CAP_SYS_PTRACE"), "{e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    fill(&region);
    evict_all(&region);
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 into a local array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // No prefault: the handler thread resolves the kernel's access.
    // SAFETY: write(2) from region memory.
    let n = unsafe { libc::write(fds[1], region.as_ptr().add(9 * PAGE_SIZE).cast(), 8) };
    assert_eq!(n, 8);
    let mut buf = [0u8; 8];
    // SAFETY: read(2) into a local buffer.
    assert_eq!(unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), 8) }, 8);
    assert_eq!(u64::from_ne_bytes(buf), pattern(9, 0));
    // SAFETY: closing our own pipe.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert_eq!(check(&region), 0);
}

#[test]
fn madv_free_then_written_keeps_the_new_contents() {
    // MADV_FREE raises the same REMOVE event as MADV_DONTNEED, but leaves
    // the page mapped: a write after it keeps the page and its new bytes.
    let region = small_region(4, 1);
    fill(&region);
    let p = 3;
    // Mapped now (the fill evicted it): its restore is the one fault.
    write(&region, p, 1, 0x1234);
    let faults = region.stats().fault_count;
    let rc = advise_pages(&region, p, 1, libc::MADV_FREE);
    assert_eq!(rc, 0);
    write(&region, p, 1, 0xABCD);
    assert_eq!(
        region.stats().fault_count,
        faults,
        "the write after MADV_FREE found the page mapped"
    );
    evict_all(&region);
    assert_eq!(read(&region, p, 1), 0xABCD, "{:#?}", region.stats());
    // A second after the last discard, the page is evicted like any other,
    // with its contents.
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    evict_all(&region);
    let mut mapped = [0u8; 1];
    // SAFETY: one page of the region's own mapping, one byte of output.
    let rc = unsafe {
        libc::mincore(
            region.as_ptr().add(p * PAGE_SIZE) as *mut libc::c_void,
            PAGE_SIZE,
            mapped.as_mut_ptr(),
        )
    };
    assert_eq!((rc, mapped[0] & 1), (0, 0), "evicted");
    assert_eq!(read(&region, p, 1), 0xABCD, "{:#?}", region.stats());
}
