//! Taking pages out of a region, and compressing them.
//!
//! Eviction moves a page with `UFFDIO_MOVE` into a staging slot. MOVE
//! transfers the physical page under both page-table locks, so a write racing
//! with it lands in the page being moved, and any access after it faults: no
//! write can be lost. The region's now empty entry then gets a poison marker
//! (`UFFDIO_POISON`), so the page faults even if the program closes the
//! userfaultfd (an unregistered, empty entry would read as zeros).
//!
//! A dirty page waits in its slot uncompressed (trial eviction) until the
//! reclaimer compresses it; a clean page (its compressed copy still exact)
//! needs no compression: its slot is discarded with others in a batch.
//!
//! `EBUSY` from MOVE means the page is shared copy-on-write (after `fork()`):
//! `MADV_POPULATE_WRITE` breaks the sharing from the kernel side, without
//! zpage's threads writing the page, and the next attempt succeeds.
//!
//! [`evict_clean_now`] runs on the fault path and is async-signal-safe (see
//! `fault.rs`); the rest runs on the reclaimer or in `advise_cold`, with
//! asynchronous signals blocked.

use crate::aging;
use crate::config::FaultMode;
use crate::counters::Counters;
use crate::dedup::{self, Lookup};
use crate::page::{State, Tag};
use crate::profile;
use crate::queues::Record;
use crate::region_core::RegionCore;
use crate::sys::{self, Errno, PAGE_SIZE};

pub(crate) mod gate;
mod write_back;
pub use write_back::{write_back, WriteBack};
use zpage_store::{CompressionTrigger, Page, Put, RefKind, Worker};

/// Where code runs: the fault path may not free pool memory itself (the
/// pool's `free` takes its lock and may give memory back to the allocator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// A signal handler, the handler thread, or an API call resolving a fault.
    Fault,
    /// The reclaimer, `advise_cold`, the event thread, region teardown.
    Reclaim,
}

/// Gives up the compressed copy of `page` (the caller holds the page): freed
/// now off the fault path, by the reclaimer on it. On the fault path of a
/// thread that may not wait for the reclaimer (see `Shared::free_later`),
/// a copy the reclaimer's full ring refuses stays in the page's slot: the
/// slot of a page that is not STORED may hold a stale copy, which every
/// path that gives the slot a new reference, or takes the page out again,
/// gives up first (and region teardown releases).
pub fn give_up_copy(core: &RegionCore, page: usize, path: Path) {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    match path {
        Path::Reclaim => {
            if let Some(stale) = slot.take_page_ref() {
                budget.release(stale);
            }
        }
        Path::Fault => {
            if let Some(stale) = slot.take_page_ref() {
                if !budget.free_later(stale) {
                    slot.set_page_ref(Some(stale));
                }
            }
        }
    }
}

/// What an attempt to take one page out achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evict {
    /// Now STAGED in this slot, waiting to be compressed.
    Staged(usize),
    /// A clean page: now STORED by its existing copy; its memory goes with its slot.
    Dropped,
    /// The page was absent (the program discarded it): it is EMPTY now.
    Hole,
    /// No staging slot free.
    NoSlot,
    /// Pinned, held by another thread for a moment, shared after fork, or
    /// another transient condition: try later.
    Retry,
    /// Not a resident page any more, or one that cannot move out now (a
    /// page of a reserved region whose protection is not read-write:
    /// `UFFDIO_MOVE` refuses it with `EINVAL`; one the program discarded
    /// there leaves as a [`Evict::Hole`] instead): its record is dropped,
    /// and the victim lists pick it up again when rebuilt from the page
    /// slots.
    Stale,
    /// Eviction of this region is paused (fork, `restore_all`).
    Paused,
}

/// Moves one resident page out of `core`. Reclaimer and `advise_cold` only.
pub fn evict(core: &RegionCore, page: usize) -> Evict {
    let Some(_evicting) = core.budget.evictions().enter(&core.hold) else {
        return Evict::Paused;
    };
    evict_unpaused(core, page)
}

fn evict_unpaused(core: &RegionCore, page: usize) -> Evict {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let mut s = slot.load();
    match s.tag() {
        // Resident, but another thread holds it for a moment: keep its record.
        Tag::Restoring | Tag::Evicting => return Evict::Retry,
        Tag::Resident if s.pins() != 0 => return Evict::Retry,
        Tag::Resident if s.discarded() => match settle_discard(core, page, s) {
            Some(settled) => s = settled,
            None => return Evict::Retry,
        },
        Tag::Resident => {}
        _ => return Evict::Stale,
    }
    let Some(staging_slot) = budget.staging().alloc() else {
        return Evict::NoSlot;
    };
    let claimed = s.with_slot(Tag::Evicting, staging_slot);
    if !slot.claim(s, claimed) {
        budget.staging().free_unused(staging_slot);
        return Evict::Retry;
    }
    let timed = profile::start();
    let moved = move_out(core, page, s, staging_slot);
    profile::end(profile::Part::EvictInBackground, timed, 1);
    match moved {
        Ok(()) => {}
        Err(Errno(libc::ENOENT)) => return vanished(core, page, staging_slot, Path::Reclaim),
        Err(Errno(libc::EBUSY)) => {
            budget.staging().free_after_failed_move(staging_slot);
            make_exclusive(core, page, s);
            return Evict::Retry;
        }
        Err(Errno(libc::EINVAL)) => {
            // The page's mapping differs from the staging area's (read-only,
            // `PROT_NONE` or executable now: the program changed it with
            // `mprotect`), so the kernel refused the MOVE before looking for
            // the page.
            budget.staging().free_after_failed_move(staging_slot);
            if s.discarded() && !sys::page_present(core.page_addr(page)) {
                // Discarded, zapped, and its range made inaccessible since
                // (the arena keeps an unmapped range reserved `PROT_NONE`):
                // nothing is there to move, and it reads as zeros. Kept as
                // resident, it would hold a place in the budget for good.
                return left_as_hole(core, page, Path::Reclaim);
            }
            // Retrying would spin on it; it stays resident.
            slot.publish(s);
            return Evict::Stale;
        }
        Err(_) => {
            budget.staging().free_after_failed_move(staging_slot);
            slot.publish(s);
            return Evict::Retry;
        }
    }
    Counters::bump(&core.counters.eviction_count);
    if s.discarded() {
        // The program discarded the page while it was still mapped: what we
        // moved out is dead; it reads as zeros from now on.
        drop_moved(core, page, staging_slot, Path::Reclaim);
        return Evict::Hole;
    }
    let timed = profile::start();
    poison(core, page);
    profile::end(profile::Part::EvictInBackground, timed, 0);
    aging::on_evicted(budget.clock(), &slot.aging);
    if s.clean() {
        if !slot.claim(claimed, s.with(Tag::Stored).set_clean(false)) {
            drop_moved(core, page, staging_slot, Path::Reclaim);
            return Evict::Hole;
        }
        core.count_dropped();
        budget
            .staging()
            .discard_later(staging_slot, budget.resident());
        Counters::bump(&core.counters.clean_eviction_count);
        return Evict::Dropped;
    }
    // A dirty page's copy, if it still has one, is stale.
    give_up_copy(core, page, Path::Reclaim);
    if !slot.claim(claimed, s.with_slot(Tag::Staged, staging_slot)) {
        drop_moved(core, page, staging_slot, Path::Reclaim);
        return Evict::Hole;
    }
    core.count_staged();
    Evict::Staged(staging_slot)
}

/// How long after the last `REMOVE` event a zap it announced is taken to
/// have happened. The madvise caller zaps as soon as it runs again after
/// the event is read: microseconds, or as long as the scheduler keeps it
/// off a CPU.
const ZAP_SETTLE_NS: u64 = 1_000_000_000;

/// A RESIDENT page marked DISCARD by a `REMOVE` event. `MADV_DONTNEED`
/// zaps it right after the event is read (the next access faults, finds
/// the page gone and clears the mark); `MADV_FREE` raises the same event
/// but leaves the page mapped, and the program's writes after it keep their
/// bytes without a fault. So a marked page still mapped is either waiting
/// for its zap (its old contents must not be carried past it) or freed
/// lazily and perhaps written since (its contents must be kept). Time tells
/// them apart: once no `REMOVE` event was read for [`ZAP_SETTLE_NS`], the
/// zaps announced have happened, and a page still mapped with the mark is
/// a `MADV_FREE`d one: the mark is cleared and the page evicted with its
/// contents (`Some`). Until then it stays (`None`). A page no longer mapped
/// goes on marked: the MOVE finds nothing and it reads as zeros.
fn settle_discard(core: &RegionCore, page: usize, s: State) -> Option<State> {
    if !sys::page_present(core.page_addr(page)) {
        return Some(s);
    }
    if core.budget.installs().ns_since_remove() < ZAP_SETTLE_NS {
        return None;
    }
    let kept = s.undiscarded();
    core.pages[page].claim(s, kept).then_some(kept)
}

/// `UFFDIO_MOVE` of the page into the staging slot, under the install
/// protocol (`event::gate::InstallGate`): `ECANCELED`, and nothing moved,
/// if a `REMOVE` event marked the page since the caller saw it as
/// `before`. A page marked before that was found gone already
/// (`settle_discard`): the MOVE finds nothing, and the page leaves as a hole.
///
/// Why under the protocol: the program's `madvise` returns as soon as its
/// event is read, before the event thread marks the page. After
/// `MADV_FREE` the page stays mapped and the program may write it at once;
/// a MOVE in that gap would carry the new bytes out, and the mark, landing
/// after it, would drop them. Under the protocol a MOVE either ends before
/// the event is read (so before the program's write, which then faults and
/// finds the page dropped: zeros, as a freed page may read) or starts after
/// the mark and leaves the page where it is (`settle_discard` decides later).
fn move_out(
    core: &RegionCore,
    page: usize,
    before: State,
    staging_slot: usize,
) -> Result<(), Errno> {
    let budget = &*core.budget;
    budget.installs().install(|| {
        if !before.discarded() && core.pages[page].load().discarded() {
            return Err(Errno(libc::ECANCELED));
        }
        sys::move_page(
            budget.staging().uffd().fd(),
            budget.staging().addr(staging_slot),
            core.page_addr(page),
        )
    })
}

/// Marks the region's entry of an evicted page so that it never reads as
/// zeros (see the module docs). Held by us, the page cannot be restored
/// meanwhile.
///
/// The marker goes in under the install protocol (no event is being read
/// meanwhile), and not at all if the program discarded the page: a
/// discard's zap clears the entry only if it comes after the marker, and an
/// event read before this point has already marked the page discarded. A
/// marker left on a discarded page would never be cleared, and faults on it
/// would find an empty page they cannot fill.
///
/// Not in `FaultMode::HandlerThread`: a poisoned entry fails kernel accesses
/// with `EFAULT` instead of reporting them to the handler thread, which is
/// what that mode exists for.
fn poison(core: &RegionCore, page: usize) {
    let budget = &*core.budget;
    if budget.mode() != FaultMode::Sigbus {
        return;
    }
    let addr = core.page_addr(page);
    let _ = budget.installs().install(|| {
        if core.pages[page].load().discarded() {
            return Ok(());
        }
        sys::uffd_poison(budget.uffd().fd(), addr, PAGE_SIZE)
    });
}

/// The MOVE found no page to move. That is right when the program discarded
/// the page (its `REMOVE` event, read before the kernel's zap, has marked it
/// by the time events are applied) or unmapped it; then it reads as zeros
/// from now on. It is right too when the region is being dropped: the
/// program may discard a page and drop the region at once (an allocator
/// freeing its last block, then its arena), and the event thread, looking
/// the region up after the drop took it out of the table, marks nothing;
/// nothing reads the page again. Otherwise its contents are lost (a kernel
/// or zpage fault), and the process ends naming the page rather than let it
/// read as zeros.
///
/// Why the drop is seen here when it hid the mark: `Region::drop` sets
/// `dropping` before it clears the table entry, the event thread's lookup
/// saw the entry cleared before it ended its batch, and this thread looks
/// after that batch ended (`wait_events_applied`); all sequentially
/// consistent.
fn vanished(core: &RegionCore, page: usize, staging_slot: usize, path: Path) -> Evict {
    use std::sync::atomic::Ordering;
    let budget = &*core.budget;
    budget.installs().wait_events_applied();
    let explained = core.pages[page].load().discarded()
        || core.is_unmapped.load(Ordering::Acquire)
        || core.dropping.load(Ordering::SeqCst)
        || budget.in_forked_child()
        || sys::mincore(core.page_addr(page), &mut [0u8; 1]) == Err(Errno(libc::ENOMEM));
    if !explained {
        core.about_page(page)
            .text(" vanished while zpage was evicting it: the program neither discarded nor unmapped it, but the kernel found no page to move; ending the process rather than let it read as zeros")
            .abort()
    }
    hole(core, page, staging_slot, path)
}

/// The page was not there (the program discarded it): zeros from now on.
fn hole(core: &RegionCore, page: usize, staging_slot: usize, path: Path) -> Evict {
    core.budget.staging().free_unused(staging_slot);
    left_as_hole(core, page, path)
}

/// A page found gone, its staging slot given back already: zeros from now on.
fn left_as_hole(core: &RegionCore, page: usize, path: Path) -> Evict {
    let slot = &core.pages[page];
    give_up_copy(core, page, path);
    let s = slot.load();
    slot.set(s.emptied());
    core.count_vanished();
    Counters::bump(&core.counters.hole_count);
    Evict::Hole
}

/// Drops a page we moved out but may not keep (the program discarded it).
fn drop_moved(core: &RegionCore, page: usize, staging_slot: usize, path: Path) {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    give_up_copy(core, page, path);
    slot.set(slot.load().emptied());
    core.count_dropped();
    budget
        .staging()
        .discard_later(staging_slot, budget.resident());
    Counters::bump(&core.counters.discard_count);
}

/// After `fork()` the page is shared copy-on-write and MOVE refuses it.
/// `MADV_POPULATE_WRITE` breaks the sharing from the kernel; a clean page is
/// write-protected, so its protection is lifted first, and the page is
/// treated as written from then on (its compressed copy is given up).
fn make_exclusive(core: &RegionCore, page: usize, s: State) {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let addr = core.page_addr(page);
    if s.clean() {
        let _ = budget
            .installs()
            .install(|| sys::uffd_writeprotect(budget.uffd().fd(), addr, false));
        give_up_copy(core, page, Path::Reclaim);
    }
    let _ = sys::populate_write(addr, PAGE_SIZE);
    slot.publish(s.with(Tag::Resident).set_clean(false));
    Counters::bump(&core.counters.ebusy_fix_count);
}

/// Evicts a clean candidate on the calling (faulting) thread: MOVE it out (a
/// racing access faults and waits; nothing can write it meanwhile: it is
/// write-protected), and leave its slot to be discarded with others; its
/// compressed copy is exact. Async-signal-safe. False if the page is not a
/// clean, unpinned resident page of that admission any more.
pub fn evict_clean_now(core: &RegionCore, record: Record) -> bool {
    let Some(_evicting) = core.budget.evictions().enter(&core.hold) else {
        return false;
    };
    evict_clean_unpaused(core, record)
}

fn evict_clean_unpaused(core: &RegionCore, record: Record) -> bool {
    let budget = &*core.budget;
    let page = record.page();
    let Some(slot) = core.pages.get(page) else {
        return false;
    };
    let s = slot.load();
    if s.tag() != Tag::Resident
        || !s.clean()
        || s.discarded()
        || s.pins() != 0
        || !record.is_generation(slot.aging.gen.load(std::sync::atomic::Ordering::Acquire))
    {
        return false;
    }
    let Some(staging_slot) = budget.staging().alloc() else {
        return false;
    };
    let claimed = s.with_slot(Tag::Evicting, staging_slot);
    if !slot.claim(s, claimed) {
        budget.staging().free_unused(staging_slot);
        return false;
    }
    match move_out(core, page, s, staging_slot) {
        Ok(()) => {}
        Err(Errno(libc::ENOENT)) => {
            vanished(core, page, staging_slot, Path::Fault);
            return true;
        }
        Err(_) => {
            budget.staging().free_after_failed_move(staging_slot);
            slot.publish(s);
            return false;
        }
    }
    poison(core, page);
    aging::on_evicted(budget.clock(), &slot.aging);
    if !slot.claim(claimed, s.with(Tag::Stored).set_clean(false)) {
        drop_moved(core, page, staging_slot, Path::Fault);
        return true;
    }
    core.count_dropped();
    budget
        .staging()
        .discard_later(staging_slot, budget.resident());
    Counters::bump(&core.counters.eviction_count);
    Counters::bump(&core.counters.clean_eviction_count);
    Counters::bump(&core.counters.sync_eviction_count);
    true
}

/// What [`recompress`] did with one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recompress {
    /// Its blob is the cold codec's now; this many bytes were saved.
    Saved(usize),
    /// The cold codec did not shrink it to a smaller size class: left as it was.
    NoGain,
    /// Not a page of the fast codec in the pool (restored, discarded,
    /// same-filled, raw, already recompressed, in the tier, held by another
    /// thread): nothing to do.
    Skipped,
}

/// Holds the stored page `page` as COMPRESSING while `work` runs on its
/// reference (a fault on it waits, as for a writeback); `work` returns the
/// reference to install instead, if any. The old one is freed once the new
/// one is installed; a discard of the page meanwhile is honoured (both go).
/// `None` when the page is not stored in the pool or another thread holds it.
fn with_stored<T>(
    core: &RegionCore,
    page: usize,
    work: impl FnOnce(zpage_store::PageRef) -> (T, Option<zpage_store::PageRef>),
) -> Option<T> {
    let budget = &*core.budget;
    let slot = core.pages.get(page)?;
    let s = slot.load();
    if s.tag() != Tag::Stored || s.discarded() {
        return None;
    }
    let held = s.with(Tag::Compressing);
    if !slot.claim(s, held) {
        return None;
    }
    let Some(old) = slot.page_ref().filter(|r| r.in_pool()) else {
        slot.publish(s);
        return None;
    };
    let (outcome, new) = work(old);
    if let Some(new) = new {
        slot.set_page_ref(Some(new));
    }
    if slot.claim(held, s) {
        if new.is_some() {
            budget.release(old);
        }
        return Some(outcome);
    }
    // The program discarded the page meanwhile: whatever it held goes.
    if let Some(stale) = slot.take_page_ref() {
        budget.release(stale);
    }
    if new.is_some() {
        budget.release(old);
    }
    Counters::bump(&core.counters.discard_count);
    slot.set(slot.load().emptied());
    None
}

/// Recompresses the stored page `page` with the budget's cold codec (the
/// reclaimer or `recompress_now`, with asynchronous signals blocked),
/// keeping the result only when it takes a smaller size class. The new
/// reference replaces the old one while the page is held, so a fault never
/// sees a freed blob, and a page restored meanwhile is never touched (it is
/// no longer STORED, so it is skipped).
pub fn recompress(core: &RegionCore, page: usize, worker: &mut Worker) -> Recompress {
    let store = core.budget.store();
    let outcome = with_stored(core, page, |old| {
        // A shared blob is left alone: recompressing one page's copy would
        // store its content twice.
        if !matches!(old.kind(), RefKind::Compressed { codec: 0 }) || core.budget.is_shared(old) {
            return (Recompress::Skipped, None);
        }
        let Ok(old_bytes) = store.blob_bytes(old) else {
            return (Recompress::Skipped, None);
        };
        match store.recompress(worker, old) {
            Ok(Some(new)) => {
                let new_bytes = store.blob_bytes(new).unwrap_or(old_bytes);
                (
                    Recompress::Saved(old_bytes.saturating_sub(new_bytes)),
                    Some(new),
                )
            }
            Ok(None) => (Recompress::NoGain, None),
            Err(_) => (Recompress::Skipped, None),
        }
    })
    .unwrap_or(Recompress::Skipped);
    match outcome {
        Recompress::Saved(bytes) => {
            Counters::bump(&core.counters.recompression_count);
            Counters::add(&core.counters.recompression_saved_bytes, bytes as u64);
        }
        Recompress::NoGain => Counters::bump(&core.counters.recompression_no_gain_count),
        Recompress::Skipped => {}
    }
    outcome
}

/// Copies the stored page `page` into `out` when the fast codec compressed
/// it (a sample for training the cold codec's dictionary); false otherwise.
pub fn sample_stored(core: &RegionCore, page: usize, worker: &mut Worker, out: &mut Page) -> bool {
    let store = core.budget.store();
    with_stored(core, page, |old| {
        let sampled = matches!(old.kind(), RefKind::Compressed { codec: 0 })
            && store.get(worker, old, out).is_ok();
        (sampled, None)
    })
    .unwrap_or(false)
}

/// Why a page is being compressed (Zircon's triggers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// `advise_cold`.
    Eager,
    /// The reclaimer.
    Pressure,
}

/// Compresses the staged page `page` in `staging_slot`. Returns false if the
/// page left staging meanwhile (a fault took it back) or could not be stored
/// (it is put back in the region).
pub fn compress(
    core: &RegionCore,
    page: usize,
    staging_slot: usize,
    worker: &mut Worker,
    trigger: Trigger,
) -> bool {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let s = slot.load();
    if s.tag() != Tag::Staged || s.slot() != staging_slot {
        return false;
    }
    let compressing = s.with_slot(Tag::Compressing, staging_slot);
    if !slot.claim(s, compressing) {
        return false;
    }
    let store_trigger = match trigger {
        Trigger::Eager => CompressionTrigger::Eager,
        Trigger::Pressure => CompressionTrigger::MemoryPressure,
    };
    let timed = profile::start();
    let staged = budget.staging().page(staging_slot);
    let content_hash = budget.dedup().map(|_| dedup::hash(staged));
    let shared = match (budget.dedup(), content_hash) {
        (Some(table), Some(hash)) => table.share(budget.store(), worker, hash, staged),
        _ => Lookup::Miss,
    };
    let put = match shared {
        Lookup::Shared(page_ref, blob_bytes) => Ok(Put::Stored {
            page_ref,
            blob_bytes,
        }),
        Lookup::Mismatch | Lookup::Miss => {
            if shared == Lookup::Mismatch {
                Counters::bump(&core.counters.dedup_verify_mismatch_count);
            }
            let cold_now = budget.cold().is_some_and(|cold| cold.at_eviction);
            let put = if cold_now && aging::wants_cold_codec(&slot.aging) {
                budget.store().put_cold(worker, staged, store_trigger)
            } else {
                budget.store().put(worker, staged, store_trigger)
            };
            if let (Some(table), Some(hash), Ok(Put::Stored { page_ref, .. })) =
                (budget.dedup(), content_hash, &put)
            {
                table.insert(hash, *page_ref);
            }
            put
        }
    };
    profile::end(profile::Part::Compress, timed, 1);
    match put {
        Ok(Put::Stored { page_ref, .. }) => {
            give_up_copy(core, page, Path::Reclaim);
            slot.set_page_ref(Some(page_ref));
            if !slot.claim(compressing, s.with(Tag::Stored)) {
                // The program discarded the page meanwhile.
                if let Some(stale) = slot.take_page_ref() {
                    budget.release(stale);
                }
                drop_staged(core, staging_slot);
                slot.set(slot.load().emptied());
                return false;
            }
            core.count_unstaged();
            budget
                .staging()
                .discard_later(staging_slot, budget.resident());
            if let Lookup::Shared(_, blob_bytes) = shared {
                // Nothing was compressed: the page shares a stored blob.
                Counters::bump(&core.counters.dedup_hit_count);
                Counters::add(&core.counters.dedup_saved_bytes, blob_bytes as u64);
                return true;
            }
            Counters::bump(&core.counters.compression_count);
            if matches!(page_ref.kind(), RefKind::Compressed { codec: 1 }) {
                Counters::bump(&core.counters.cold_compression_count);
            }
            Counters::bump(match trigger {
                Trigger::Eager => &core.counters.eager_compression_count,
                Trigger::Pressure => &core.counters.pressure_compression_count,
            });
            true
        }
        Ok(Put::Rejected(_)) | Err(_) => {
            // Could not store (pool limit, codec error): put the page back
            // where it was (Zircon keeps failed pages resident too).
            Counters::bump(&core.counters.compress_failure_count);
            put_back(core, page, compressing);
            false
        }
    }
}

/// Puts a page the reclaimer could not store back into the region (it holds
/// it COMPRESSING in its slot).
fn put_back(core: &RegionCore, page: usize, held: State) {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let staging_slot = held.slot();
    let src = budget.staging().page(staging_slot).as_ptr();
    let dst = core.page_addr(page);
    let r = budget.installs().install(|| {
        if slot.load().discarded() {
            return Err(Errno(libc::ECANCELED));
        }
        sys::uffd_copy(budget.uffd().fd(), dst, src, 0)
    });
    match r {
        Ok(()) => {
            core.count_unstaged();
            core.count_mapped();
            budget
                .staging()
                .discard_later(staging_slot, budget.resident());
            slot.publish(held.with(Tag::Resident).set_clean(false));
            core.admitted(page, false);
        }
        Err(Errno(libc::ECANCELED)) => {
            drop_staged(core, staging_slot);
            slot.set(held.emptied());
        }
        Err(_) => {
            // Leave it staged; a fault takes it back.
            slot.publish(held.with_slot(Tag::Staged, staging_slot));
        }
    }
}

/// Drops a staged page's data (its range was discarded by the program, or
/// its region is going away). Async-signal-safe.
pub fn drop_staged(core: &RegionCore, staging_slot: usize) {
    let budget = &*core.budget;
    core.count_unstaged();
    budget
        .staging()
        .discard_later(staging_slot, budget.resident());
    Counters::bump(&core.counters.discard_count);
}
