//! The event thread: program-side discards, unmaps and remaps of region
//! memory, and (in `FaultMode::HandlerThread`) page faults.
//!
//! `MADV_DONTNEED`/`MADV_FREE` on region memory raise `UFFD_EVENT_REMOVE`;
//! the calling thread sleeps until an event is read, and the kernel zaps the
//! range after that. Pages zpage holds evicted in that range must then read as
//! zeros, never as our stored copy. The protocol (with `Inner::install`):
//!
//! 1. `event_seq` becomes odd, then the thread waits until no install
//!    (COPY/ZEROPAGE/MOVE into the region) is in flight. An install that
//!    started earlier completes before the event is read, so before the zap,
//!    which then removes it.
//! 2. It reads the events and, for each page in a discarded range, drops the
//!    data (STAGED, STORED) or sets `DISCARD` on a page another thread owns
//!    (EVICTING, COMPRESSING, RESTORING), so the owner drops it instead of
//!    publishing it.
//! 3. `event_seq` becomes even; installs resume and see the new states.
//!
//! A fault that follows the program's madvise starts after the read, waits
//! for step 3, and finds the page EMPTY: zeros.
//!
//! This thread never blocks on a lock another zpage thread may hold while
//! it waits for events to be read (the reclaim lock is only try-locked): a
//! thread whose install gets `EAGAIN` spins until this thread reads the
//! pending event, so this thread must always get back to reading.
//!
//! `munmap` (and `mmap(MAP_FIXED)` over the region, `mremap` shrinking it)
//! raise `UFFD_EVENT_UNMAP`: the range's data is freed and the region is
//! marked unmapped (API calls return `RegionError::Unmapped`; `Drop` leaves
//! the address range alone). `mremap` moving region pages raises
//! `UFFD_EVENT_REMAP`: zpage refuses it (see the crate docs).

use crate::config::FaultMode;
use crate::inner::{Ctx, Inner};
use crate::state::*;
use crate::sys::{self, UffdMsg};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Event features asked for on the region's uffd (no privilege needed).
pub const FEATURES: u64 =
    sys::FEATURE_EVENT_REMOVE | sys::FEATURE_EVENT_UNMAP | sys::FEATURE_EVENT_REMAP;

fn page_range(inner: &Inner, start: u64, end: u64) -> std::ops::Range<usize> {
    let base = inner.region.base() as u64;
    let top = base + inner.region.len() as u64;
    let s = start.clamp(base, top);
    let e = end.clamp(base, top);
    ((s - base) as usize / sys::PAGE)..((e - base) as usize).div_ceil(sys::PAGE)
}

/// Step 2 for one page (runs while `event_seq` is odd).
fn discard_page(inner: &Inner, page: usize) {
    let st = &inner.state[page];
    loop {
        let s = st.load(Ordering::Acquire);
        let next = match tag(s) {
            EMPTY => return,
            // The kernel zaps it after we return; until then a MOVE out by
            // the reclaimer would carry the old contents past the zap, so
            // mark it (stale store entries, COPY, go later under the lock).
            RESIDENT if s & DISCARD != 0 => return,
            STAGED => empty(s),
            STORED => empty(s) | COPY,
            _ => s | DISCARD,
        };
        if st
            .compare_exchange(s, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            match tag(s) {
                STAGED => inner.drop_staged(slot(s)),
                STORED => crate::stats::Counters::bump(&inner.counters.discarded),
                _ => {}
            }
            return;
        }
    }
}

fn mark_unmapped(inner: &Inner, why: String) {
    let mut g = inner.unmapped.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(why);
    }
    inner.is_unmapped.store(true, Ordering::Release);
    inner.region.leak_on_drop();
}

/// The thread body.
pub fn run(inner: Arc<Inner>) {
    let mut msgs = [UffdMsg {
        event: 0,
        a: 0,
        b: 0,
        c: 0,
    }; 16];
    let mut stale: Vec<usize> = Vec::new();
    while !inner.stop.load(Ordering::Acquire) {
        if inner.lost.load(Ordering::Acquire) {
            sys::sleep_ns(20_000_000);
            continue;
        }
        if !sys::poll_in(inner.uffd, 20) {
            if !sys::fd_is_open(inner.uffd) {
                inner.lost.store(true, Ordering::Release);
            }
            continue;
        }
        // The fd number may have been closed and reused for another file:
        // only a live uffd with our range registered accepts UFFDIO_WAKE.
        if sys::uffd_wake(inner.uffd, inner.region.base(), sys::PAGE).is_err() {
            inner.lost.store(true, Ordering::Release);
            sys::sleep_ns(20_000_000);
            continue;
        }
        // Step 1.
        inner.event_seq.fetch_add(1, Ordering::SeqCst);
        while inner.installs.load(Ordering::SeqCst) != 0 {
            sys::yield_now();
        }
        let n = match sys::uffd_read(inner.uffd, &mut msgs) {
            Ok(n) => n,
            Err(e) => {
                inner.event_seq.fetch_add(1, Ordering::SeqCst);
                if e.0 == libc::EBADF {
                    inner.lost.store(true, Ordering::Release);
                    sys::sleep_ns(20_000_000);
                }
                continue;
            }
        };
        // Step 2.
        for m in &msgs[..n] {
            match m.event {
                sys::EVENT_REMOVE | sys::EVENT_UNMAP => {
                    for page in page_range(&inner, m.a, m.b) {
                        discard_page(&inner, page);
                        stale.push(page);
                    }
                    if m.event == sys::EVENT_UNMAP && m.a < m.b {
                        mark_unmapped(&inner, format!("munmap of {:#x}..{:#x}", m.a, m.b));
                    }
                }
                sys::EVENT_REMAP => {
                    mark_unmapped(
                        &inner,
                        format!(
                            "mremap of {:#x}+{:#x} to {:#x}, which zpage does not support",
                            m.a, m.c, m.b
                        ),
                    );
                }
                _ => {}
            }
        }
        // Step 3.
        inner.event_seq.fetch_add(1, Ordering::SeqCst);
        if inner.mode == FaultMode::HandlerThread {
            for m in &msgs[..n] {
                if m.event != sys::EVENT_PAGEFAULT {
                    continue;
                }
                let addr = m.b as usize;
                let base = inner.region.base();
                if addr >= base && addr < base + inner.region.len() {
                    let write = m.a & sys::PAGEFAULT_FLAG_WRITE != 0;
                    let wp = m.a & sys::PAGEFAULT_FLAG_WP != 0;
                    if inner
                        .resolve((addr - base) / sys::PAGE, write, wp, Ctx::Thread)
                        .is_err()
                    {
                        let _ = sys::uffd_wake(inner.uffd, addr & !(sys::PAGE - 1), sys::PAGE);
                    }
                }
            }
        }
        // Never block on the reclaim lock: its holder may be spinning on an
        // install that waits for this thread to read the next event.
        if !stale.is_empty() {
            if let Ok(_g) = inner.reclaim_lock.try_lock() {
                for page in stale.drain(..) {
                    inner.drop_stale_copy(page);
                }
            }
        }
    }
}
