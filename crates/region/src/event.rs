//! The budget's event thread: program-side discards, unmaps and remaps of
//! region memory, and (in `FaultMode::HandlerThread`) page faults, for every
//! region of the budget (they share one userfaultfd).
//!
//! `MADV_DONTNEED`/`MADV_FREE` on region memory raise `UFFD_EVENT_REMOVE`;
//! the calling thread sleeps until an event is read, and the kernel zaps the
//! range after that. Pages zpage holds evicted in that range must then read as
//! zeros, never as our stored copy. The protocol (its atomics are
//! [`gate::InstallGate`], whose `install` every page install goes through):
//!
//! 1. `event_seq` becomes odd, then the thread waits until no install
//!    (COPY/ZEROPAGE/MOVE into a region) is in flight. An install that
//!    started earlier completes before the event is read, so before the zap,
//!    which then removes it. Evictions' MOVEs out of a region go through
//!    the same gate (`evict::move_out`): one that started earlier ends
//!    before the program's `madvise` returns, so before any write after it.
//! 2. It reads the events and, for each page in a discarded range, drops the
//!    data (STAGED, STORED) or sets `DISCARD` on a page another thread owns
//!    (EVICTING, COMPRESSING, RESTORING) or that is still mapped (RESIDENT),
//!    so the owner drops it instead of publishing it.
//! 3. `event_seq` becomes even; installs resume and see the new states.
//!
//! A fault that follows the program's madvise starts after the read, waits
//! for step 3, and finds the page EMPTY: zeros.
//!
//! `MADV_FREE` raises the same event but zaps nothing: its pages stay
//! mapped, and a write after it keeps its bytes without a fault. A RESIDENT
//! page left marked and still mapped once no event was read for a while is
//! such a page: the reclaimer clears its mark and evicts it with its
//! contents (`evict::settle_discard`).
//!
//! This thread never waits on a thread that waits for events to be read: it
//! takes no lock but the pool's and the dedup table's (whose holders never
//! install while holding them), and it frees references itself rather than through a ring the
//! reclaimer drains (the reclaimer may be spinning on an install that waits
//! for this thread).
//!
//! `munmap` (and `mmap(MAP_FIXED)` over a region, `mremap` shrinking it)
//! raise `UFFD_EVENT_UNMAP`: the range's data is freed and the region is
//! marked unmapped (API calls return `RegionError::Unmapped`; `Drop` leaves
//! the address range alone). `mremap` moving region pages raises
//! `UFFD_EVENT_REMAP`: zpage refuses it (see the crate docs).
//!
//! The thread blocks asynchronous signals and reaches region memory only
//! through ioctls (what a fault of its own may and may not wait for: the
//! argument at the top of `fault.rs`).

use crate::config::FaultMode;
use crate::evict;
use crate::fault::{self, Access, Ctx};
use crate::page::Tag;
use crate::queues::Record;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::sys::{self, UffdMsg, PAGE_SIZE};
use crate::table;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) mod gate;

/// The pages of `core` inside `[start, end)`.
fn page_range(core: &RegionCore, start: u64, end: u64) -> std::ops::Range<usize> {
    let base = core.mapping.base() as u64;
    let top = base + core.mapping.len() as u64;
    let s = start.clamp(base, top);
    let e = end.clamp(base, top);
    ((s - base) as usize / PAGE_SIZE)..((e - base) as usize).div_ceil(PAGE_SIZE)
}

/// Step 2 for one page (runs while `event_seq` is odd).
fn discard_page(core: &RegionCore, page: usize) {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    loop {
        let s = slot.load();
        match s.tag() {
            Tag::Empty => return,
            Tag::Resident if s.discarded() => return,
            Tag::Staged => {
                if slot.claim(s, s.emptied()) {
                    evict::drop_staged(core, s.slot());
                    return;
                }
            }
            Tag::Stored => {
                if slot.claim(s, s.with(Tag::Restoring)) {
                    let stale = slot.take_page_ref();
                    // Let go of the page before freeing: a fork's prepare
                    // hook holds pool writes back until no page is held.
                    slot.set(s.emptied());
                    if let Some(stale) = stale {
                        budget.release(stale);
                    }
                    crate::counters::Counters::bump(&core.counters.discard_count);
                    return;
                }
            }
            // Still mapped (the kernel zaps it after we return; until then a
            // MOVE by the reclaimer would carry the old contents past the
            // zap), or owned by another thread: mark it. A resident page no
            // thread holds is named to the reclaimer, which counts it out
            // of the budget once the zap has taken it.
            _ => {
                slot.mark_discarded();
                if s.tag() == Tag::Resident && s.pins() == 0 && !budget.in_forked_child() {
                    let gen = slot.aging.gen.load(Ordering::Acquire);
                    let _ = budget
                        .queues()
                        .discarded(Record::new(core.id(), page, gen, false));
                }
                return;
            }
        }
    }
}

fn mark_unmapped(core: &RegionCore, why: String) {
    let mut g = core.unmapped.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(why);
    }
    core.is_unmapped.store(true, Ordering::Release);
    core.mapping.leak_on_drop();
}

/// Runs `f` on every live region of `budget` that overlaps `[start, end)`.
fn each_region_in(budget: &Shared, start: u64, end: u64, mut f: impl FnMut(&RegionCore)) {
    table::for_each(|core| {
        let base = core.mapping.base() as u64;
        let top = base + core.mapping.len() as u64;
        if std::ptr::eq(&*core.budget, budget) && start < top && end > base {
            f(core);
        }
    });
}

/// The thread body.
pub fn run(budget: Arc<Shared>) {
    let mut msgs = [UffdMsg {
        event: 0,
        a: 0,
        b: 0,
        c: 0,
    }; 16];
    let fd = budget.uffd().fd();
    let installs = budget.installs();
    while !budget.reclaim_signal().stopping() {
        if budget.uffd().is_lost() {
            sys::sleep_ns(20_000_000);
            continue;
        }
        if !sys::poll_in(fd, 20) {
            if !sys::fd_is_open(fd) {
                budget.uffd().mark_lost();
            }
            continue;
        }
        // The fd number may have been closed and reused for another file:
        // only a live uffd accepts UFFDIO_WAKE.
        if sys::uffd_wake(fd, budget.staging().addr(0), PAGE_SIZE).is_err() {
            budget.uffd().mark_lost();
            continue;
        }
        // Step 1.
        installs.begin_events();
        let n = match sys::uffd_read(fd, &mut msgs) {
            Ok(n) => n,
            Err(e) => {
                installs.end_events();
                if e.0 == libc::EBADF {
                    budget.uffd().mark_lost();
                }
                continue;
            }
        };
        // Step 2.
        for m in &msgs[..n] {
            if m.event == sys::EVENT_REMOVE {
                // Before any page is marked: an evictor that sees a mark
                // sees this time too.
                installs.remove_read();
            }
            match m.event {
                sys::EVENT_REMOVE | sys::EVENT_UNMAP => {
                    each_region_in(&budget, m.a, m.b, |core| {
                        for page in page_range(core, m.a, m.b) {
                            discard_page(core, page);
                        }
                        if m.event == sys::EVENT_UNMAP && m.a < m.b {
                            mark_unmapped(core, format!("munmap of {:#x}..{:#x}", m.a, m.b));
                        }
                    });
                }
                sys::EVENT_REMAP => {
                    each_region_in(&budget, m.a, m.a + m.c, |core| {
                        mark_unmapped(
                            core,
                            format!(
                                "mremap of {:#x}+{:#x} to {:#x}, which zpage does not support",
                                m.a, m.c, m.b
                            ),
                        )
                    });
                }
                _ => {}
            }
        }
        // Step 3.
        installs.end_events();
        if budget.mode() == FaultMode::HandlerThread {
            for m in &msgs[..n] {
                if m.event != sys::EVENT_PAGEFAULT {
                    continue;
                }
                let addr = m.b as usize;
                let access = Access {
                    write: m.a & sys::PAGEFAULT_FLAG_WRITE != 0,
                    protection: m.a & sys::PAGEFAULT_FLAG_WP != 0,
                };
                let resolved = table::at_address(addr, |core, page| {
                    fault::resolve(core, page, access, Ctx::Thread)
                });
                if !matches!(resolved, Some(Ok(()))) {
                    let _ = sys::uffd_wake(fd, addr & !(PAGE_SIZE - 1), PAGE_SIZE);
                }
            }
        }
    }
}
