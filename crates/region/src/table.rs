//! The process-wide table of live regions: the signal handler finds the
//! region of a faulting address here, and the reclaimer finds the region a
//! queued record names.
//!
//! **Async-signal-safe lookups.** The table is a fixed array of atomics.
//! Each entry counts the threads inside it (ART's in-progress counter):
//! removing an entry clears its range and bumps its incarnation first, then
//! waits for the count to drop to zero, so no lookup uses a region after its
//! `Drop` has started freeing it, and a record made for an earlier region in
//! the same entry never reaches the new one (its incarnation differs).
#![allow(unsafe_code)]

use crate::queues::{RegionId, INCARNATION_BITS, REGION_BITS};
use crate::region_core::RegionCore;
use crate::sys;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

/// How many regions may be live at once in a process.
pub const MAX_REGIONS: usize = 1 << REGION_BITS;

struct Entry {
    base: AtomicUsize,
    end: AtomicUsize,
    core: AtomicPtr<RegionCore>,
    inflight: AtomicUsize,
    incarnation: AtomicU8,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: Entry = Entry {
    base: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    core: AtomicPtr::new(std::ptr::null_mut()),
    inflight: AtomicUsize::new(0),
    incarnation: AtomicU8::new(0),
};

static TABLE: [Entry; MAX_REGIONS] = [EMPTY_ENTRY; MAX_REGIONS];
/// Entries at or above this index have never been used: lookups stop here.
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static REGISTER_LOCK: Mutex<()> = Mutex::new(());

fn next_incarnation(incarnation: u8) -> u8 {
    incarnation.wrapping_add(1) & ((1 << INCARNATION_BITS) - 1)
}

/// Adds a region covering `[base, base + len)`; `None` when the table is full.
pub fn register(core: &RegionCore, base: usize, len: usize) -> Option<RegionId> {
    let _g = REGISTER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    for (index, entry) in TABLE.iter().enumerate() {
        if entry.base.load(Ordering::SeqCst) != 0 || !entry.core.load(Ordering::SeqCst).is_null() {
            continue;
        }
        entry.core.store(
            core as *const RegionCore as *mut RegionCore,
            Ordering::SeqCst,
        );
        entry.end.store(base + len, Ordering::SeqCst);
        entry.base.store(base, Ordering::SeqCst);
        HIGH_WATER.fetch_max(index + 1, Ordering::SeqCst);
        return Some(RegionId {
            index: index as u16,
            incarnation: entry.incarnation.load(Ordering::SeqCst),
        });
    }
    None
}

/// Removes a region and waits until no lookup is inside it.
pub fn unregister(id: RegionId) {
    let _g = REGISTER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let entry = &TABLE[usize::from(id.index)];
    entry.base.store(0, Ordering::SeqCst);
    entry.end.store(0, Ordering::SeqCst);
    entry
        .incarnation
        .store(next_incarnation(id.incarnation), Ordering::SeqCst);
    while entry.inflight.load(Ordering::SeqCst) != 0 {
        sys::yield_now();
    }
    entry.core.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// Runs `f` on entry `index` if it is live and, when given, of `incarnation`.
fn enter<R>(index: usize, incarnation: Option<u8>, f: impl FnOnce(&RegionCore) -> R) -> Option<R> {
    let entry = &TABLE[index];
    entry.inflight.fetch_add(1, Ordering::SeqCst);
    // Checked after announcing ourselves: `unregister` changes the incarnation
    // and the range before it waits for `inflight` to reach zero.
    let live = entry.base.load(Ordering::SeqCst) != 0
        && incarnation.is_none_or(|i| entry.incarnation.load(Ordering::SeqCst) == i);
    let core = entry.core.load(Ordering::SeqCst);
    let result = if live && !core.is_null() {
        // SAFETY: the entry is live and our inflight count keeps `unregister`
        // (and so the region's Drop) from freeing the core until we are done.
        Some(f(unsafe { &*core }))
    } else {
        None
    };
    entry.inflight.fetch_sub(1, Ordering::SeqCst);
    result
}

/// Runs `f` on the region containing `addr` with the page index of `addr`;
/// `None` if no live region contains it. Async-signal-safe.
pub fn at_address<R>(addr: usize, f: impl FnOnce(&RegionCore, usize) -> R) -> Option<R> {
    let top = HIGH_WATER.load(Ordering::Acquire);
    for (index, entry) in TABLE[..top].iter().enumerate() {
        let base = entry.base.load(Ordering::Acquire);
        if base == 0 || addr < base || addr >= entry.end.load(Ordering::Acquire) {
            continue;
        }
        return enter(index, None, |core| {
            // The entry may have been reused for another region since we
            // read its range: look again from inside.
            let base = core.mapping.base();
            (addr >= base && addr < base + core.mapping.len())
                .then(|| f(core, (addr - base) / sys::PAGE_SIZE))
        })
        .flatten();
    }
    None
}

/// Runs `f` on the region `id` names, if it is still that region.
/// Async-signal-safe.
pub fn with_region<R>(id: RegionId, f: impl FnOnce(&RegionCore) -> R) -> Option<R> {
    enter(usize::from(id.index), Some(id.incarnation), f)
}

/// Entries at or above this index have never been used.
pub fn high_water() -> usize {
    HIGH_WATER.load(Ordering::Acquire)
}

/// Runs `f` on the region in entry `index`, if one is live there.
/// Async-signal-safe.
pub fn with_index<R>(index: usize, f: impl FnOnce(&RegionCore) -> R) -> Option<R> {
    if index >= MAX_REGIONS {
        return None;
    }
    enter(index, None, f)
}

/// Runs `f` on every live region.
pub fn for_each(mut f: impl FnMut(&RegionCore)) {
    let top = HIGH_WATER.load(Ordering::Acquire);
    for index in 0..top {
        enter(index, None, &mut f);
    }
}

/// The pages of `core` inside `[addr, addr + len)`, if it is this process's
/// region and overlaps the range. The range is looked at first: the owner
/// check costs a system call, and the system call wrappers ask this of
/// every region for every buffer they pin.
pub(crate) fn pages_in(
    core: &RegionCore,
    addr: usize,
    len: usize,
) -> Option<std::ops::Range<usize>> {
    let base = core.mapping.base();
    let top = base + core.mapping.len();
    let end = addr.saturating_add(len);
    if len == 0 || end <= base || addr >= top {
        return None;
    }
    // A `vfork()` child runs in the owner's memory: the regions are its
    // too (`fault::resolve_from` serves its faults).
    let owner = core.owner_pid();
    if owner != sys::getpid() && !sys::shares_memory_with(owner) {
        return None;
    }
    let s = addr.max(base) - base;
    let e = end.min(top) - base;
    Some(s / sys::PAGE_SIZE..e.div_ceil(sys::PAGE_SIZE))
}

/// True if any byte of `[addr, addr + len)` lies in a live region of this
/// process. Async-signal-safe.
pub fn overlaps_any_region(addr: usize, len: usize) -> bool {
    let mut found = false;
    for_each(|core| found |= pages_in(core, addr, len).is_some());
    found
}
