//! The public [`Region`] type.

use crate::budget::Budget;
use crate::config::{validate_size, FaultMode, RegionConfig};
use crate::counters::RegionStats;
use crate::error::RegionError;
use crate::fault::{self, Access, Ctx};
use crate::mapping::{self, Mapping};
use crate::page::{Tag, MAX_PINS};
use crate::reclaim;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::signal;
use crate::sys;
use crate::table;
use crate::threads::SignalGuard;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use zpage_codec::PAGE_SIZE;

/// A region of memory whose cold pages zpage compresses.
///
/// The program reads and writes `[as_ptr(), as_ptr() + len())` directly. Pages
/// beyond the resident budget are taken out, compressed, and restored on the
/// next access. See the crate documentation for the design and its limits.
#[derive(Debug)]
pub struct Region {
    core: Arc<RegionCore>,
    /// Keeps the budget's threads alive while the region exists.
    budget: Budget,
}

impl Region {
    /// Creates a region with a budget of its own (all pages initially zero,
    /// none resident).
    pub fn new(mut config: RegionConfig) -> Result<Region, RegionError> {
        if config.budget.auto_stall_ppm.is_some() {
            // An automatic budget's given size is only the most it may be:
            // a region of its own needs no more than its size.
            let size = config.size_bytes.next_multiple_of(PAGE_SIZE);
            config.budget.budget_bytes = config.budget.budget_bytes.min(size);
        }
        config.validate()?;
        let budget = Budget::new(config.budget.clone())?;
        Region::with_budget(&budget, config.size_bytes)
    }

    /// Creates a region of `size_bytes` that draws on `budget`, sharing its
    /// resident limit, compressed pool, reclaimer and aging policy with every
    /// other region made on it.
    pub fn with_budget(budget: &Budget, size_bytes: usize) -> Result<Region, RegionError> {
        validate_size(size_bytes)?;
        let pages = size_bytes.div_ceil(PAGE_SIZE);
        let mapping =
            Mapping::new_for_region(pages).map_err(|e| RegionError::sys("mmap(region)", e))?;
        Region::on_mapping(budget, mapping)
    }

    /// A region of `size_bytes` of the far range (`crate::far`, reserved
    /// first) that starts reserved, `PROT_NONE`: the caller makes its parts
    /// accessible with `mprotect`, as a program does with address space it
    /// reserved. Pages follow their own protection: read-write pages are
    /// evicted and restored as in any region; a page made inaccessible or
    /// read-only keeps its contents (restored on access, never moved out
    /// while it is not writable). For the preload library, which places
    /// every anonymous mapping of a program in one such region. Its page
    /// slots cost memory only for pages touched.
    pub fn reserved_with_budget(budget: &Budget, size_bytes: usize) -> Result<Region, RegionError> {
        validate_size(size_bytes)?;
        let pages = size_bytes.div_ceil(PAGE_SIZE);
        let mapping = Mapping::reserve_for_region(pages)
            .map_err(|e| RegionError::sys("reserve the region's range in the far range", e))?;
        Region::on_mapping(budget, mapping)
    }

    /// Hands `[offset, offset + len)` over to something else the program is
    /// about to map there (a file or shared mapping with `MAP_FIXED` over
    /// address space of a [`Region::reserved_with_budget`] region): what the
    /// region held there is dropped (as a program's `MADV_DONTNEED` drops
    /// it), the range is unregistered from the userfaultfd, and zpage never
    /// touches it again until [`Region::take_back`]. Page-aligned.
    pub fn hand_over(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        if !self.core.foreign.add(range.start, range.end) {
            return Err(RegionError::InvalidConfig(format!(
                "a region holds at most {} ranges mapped over by something else",
                crate::foreign::MAX_FOREIGN
            )));
        }
        let (addr, len) = (self.core.page_addr(range.start), range.len() * PAGE_SIZE);
        // The program's own discard path: a remove event drops what the
        // region held for these pages, resident or evicted.
        sys::discard(addr, len).map_err(|e| RegionError::sys("madvise(MADV_DONTNEED)", e))?;
        sys::uffd_unregister(self.core.budget.uffd().fd(), addr, len)
            .map_err(|e| RegionError::sys("UFFDIO_UNREGISTER", e))
    }

    /// Takes `[offset, offset + len)` back after the program unmapped what it
    /// had mapped there: the caller has mapped it reserved again
    /// (`PROT_NONE`, private, anonymous); it is registered again, its pages
    /// EMPTY. Page-aligned.
    pub fn take_back(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let (addr, len) = (self.core.page_addr(range.start), range.len() * PAGE_SIZE);
        let mode = if self.core.budget.keeps_clean_copies() {
            sys::REGISTER_MODE_MISSING | sys::REGISTER_MODE_WP
        } else {
            sys::REGISTER_MODE_MISSING
        };
        sys::uffd_register(self.core.budget.uffd().fd(), addr, len, mode)
            .map_err(|e| RegionError::sys("UFFDIO_REGISTER", e))?;
        self.core.foreign.remove(range.start, range.end);
        Ok(())
    }

    fn on_mapping(budget: &Budget, mapping: Mapping) -> Result<Region, RegionError> {
        let shared: &Arc<Shared> = budget.shared();
        let mode = if shared.keeps_clean_copies() {
            sys::REGISTER_MODE_MISSING | sys::REGISTER_MODE_WP
        } else {
            sys::REGISTER_MODE_MISSING
        };
        let slots = crate::page::SlotArray::zeroed(mapping.pages())
            .map_err(|e| RegionError::sys("mmap(page slots)", e))?;
        sys::uffd_register(shared.uffd().fd(), mapping.base(), mapping.len(), mode)
            .map_err(|e| RegionError::sys("UFFDIO_REGISTER(region)", e))?;
        let core = Arc::new(RegionCore::new(Arc::clone(shared), mapping, slots));
        let Some(id) = table::register(&core, core.mapping.base(), core.mapping.len()) else {
            let _ =
                sys::uffd_unregister(shared.uffd().fd(), core.mapping.base(), core.mapping.len());
            return Err(RegionError::TooManyRegions(table::MAX_REGIONS));
        };
        core.set_id(id);
        Ok(Region {
            core,
            budget: budget.clone(),
        })
    }

    /// The budget this region draws on (make more regions on it with
    /// [`Region::with_budget`]).
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Base address of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.core.mapping.base() as *mut u8
    }

    /// Size of the region in bytes (a multiple of 4 KiB).
    pub fn len(&self) -> usize {
        self.core.mapping.len()
    }

    /// Never true (a region has at least one page); for clippy's len_without_is_empty.
    pub fn is_empty(&self) -> bool {
        self.core.page_count() == 0
    }

    /// The region as bytes. Reading through the slice faults pages back in as
    /// needed. In [`FaultMode::Sigbus`], do not pass this slice to a system
    /// call without [`Region::prefault`] (the kernel gets `EFAULT` on evicted pages).
    pub fn as_slice(&self) -> &[u8] {
        self.core.mapping.as_slice()
    }

    /// The region as mutable bytes (see [`Region::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // `&mut self` is exclusive: no other slice of this region exists. The
        // reclaimer and handlers reach region memory only through ioctls,
        // never through references.
        mapping::exclusive_bytes(&self.core.mapping, &mut self.budget)
    }

    /// False in a child made by `fork()` that did not take the region over
    /// (its budget restored every page before the fork: the child's copy is
    /// plain memory, and the region's machinery stayed with the parent).
    pub fn belongs_to_this_process(&self) -> bool {
        self.core.owner_pid() == sys::getpid()
    }

    fn check_live(&self) -> Result<(), RegionError> {
        let core = &self.core;
        if core.owner_pid() != sys::getpid() {
            return Err(RegionError::ForkedChild {
                owner: core.owner_pid(),
            });
        }
        if core.is_unmapped.load(Ordering::Acquire) {
            let why = core
                .unmapped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            return Err(RegionError::Unmapped(why));
        }
        self.health_check()
    }

    /// Checks that the region's userfaultfd is still open (a program that
    /// closes every fd, e.g. `closefrom(3)`, silently unregisters the region;
    /// evicted pages then fault with a message naming them, never read as
    /// zeros). Every advice call runs it.
    pub fn health_check(&self) -> Result<(), RegionError> {
        let uffd = self.core.budget.uffd();
        if uffd.is_lost() {
            return Err(RegionError::UffdLost(uffd.fd()));
        }
        // UFFDIO_WAKE on our own range succeeds only on our live uffd.
        if sys::uffd_wake(uffd.fd(), self.core.mapping.base(), PAGE_SIZE).is_err() {
            uffd.mark_lost();
            return Err(RegionError::UffdLost(uffd.fd()));
        }
        Ok(())
    }

    fn pages_of(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>, RegionError> {
        let size = self.len();
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or(RegionError::OutOfRange { offset, len, size })?;
        Ok(offset / PAGE_SIZE..end.div_ceil(PAGE_SIZE))
    }

    /// Faults resolved so far (cheap: one atomic load; `stats()` gathers everything).
    pub fn fault_count(&self) -> u64 {
        self.core.counters.fault_count.load(Ordering::Relaxed)
    }

    /// A snapshot of the region's figures (see [`RegionStats`]).
    pub fn stats(&self) -> RegionStats {
        self.core.stats()
    }

    /// Compresses the pages of the range now, on the calling thread (Zircon's
    /// eager trigger). Pinned pages are skipped.
    pub fn advise_cold(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        // Holds store locks and claimed pages.
        let _signals = SignalGuard::block_async();
        if self.core.budget.evictions().paused(&self.core.hold) {
            return Ok(());
        }
        reclaim::compress_now(&self.core, range)
    }

    /// Recompresses the compressed pages of the range with the budget's cold
    /// codec now, on the calling thread (the reclaimer does it by itself to
    /// pages compressed `cold_after` ago), keeping each result only when it
    /// takes less memory. A `zstd-dict` cold codec still without a dictionary
    /// trains it from these pages first. Resident pages are left alone.
    pub fn recompress_now(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        // Holds store locks and claimed pages.
        let _signals = SignalGuard::block_async();
        crate::cold::recompress_now(&self.core, range)
    }

    /// Restores the pages of the range ahead of use (they count against the
    /// budget like any resident page).
    pub fn advise_willneed(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let _signals = SignalGuard::block_async();
        for page in range {
            if self.core.pages[page].load().evicted() {
                fault::resolve(&self.core, page, Access::READ, Ctx::Api)
                    .map_err(|e| RegionError::sys("restore", e))?;
            }
        }
        Ok(())
    }

    /// Makes every page of the range present (restored, or zero-filled if never
    /// written) and writable, so the kernel can read and write it: call before
    /// passing region memory to a system call in [`FaultMode::Sigbus`]. Does
    /// not keep the pages in: the reclaimer may take them out again later; to
    /// hold them across a long call, use [`Region::pin`].
    pub fn prefault(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let _signals = SignalGuard::block_async();
        for page in range {
            fault::resolve(&self.core, page, Access::WRITABLE, Ctx::Api)
                .map_err(|e| RegionError::sys("prefault", e))?;
        }
        Ok(())
    }

    /// Pins the range: restores it and keeps it resident until `unpin`
    /// (Zircon's latency-sensitive opt-out). Pins nest. At most half the
    /// budget may be pinned.
    pub fn pin(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        pin_pages(&self.core, range, PinLimit::HalfBudget)
    }

    /// Undoes one `pin` of the range.
    pub fn unpin(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        unpin_pages(&self.core, range)
    }

    /// Stops eviction of this region and restores every page: for crash
    /// handlers that want complete core dumps (a dump, like a debugger, sees
    /// evicted pages as holes), and before handing the whole region to the
    /// kernel. The region then stays fully resident, over its budget if need
    /// be, until [`Region::resume_eviction`]. Async-signal-safe.
    pub fn restore_all(&self) -> Result<(), RegionError> {
        let _signals = SignalGuard::block_async();
        self.core.budget.evictions().hold(&self.core.hold);
        restore_all(&self.core).map_err(|e| RegionError::sys("restore", e))
    }

    /// Undoes [`Region::restore_all`]: eviction resumes.
    pub fn resume_eviction(&self) {
        self.core.hold.release();
        self.core.budget.kick_reclaimer();
    }

    /// Turns the region into plain memory that stays mapped at the same
    /// address with the same contents: every evicted page is restored, the
    /// range is unregistered from the userfaultfd, and the region's pages,
    /// compressed data and share of the budget are given back. The caller
    /// owns the address range from then on (and unmaps it). For programs
    /// that do to region memory what a region cannot follow (part of it
    /// unmapped, moved or re-protected): the memory stays correct, only no
    /// longer compressed. If a page cannot be restored the region is handed
    /// back unchanged with the error.
    pub fn into_plain_memory(self) -> Result<(usize, usize), (Region, RegionError)> {
        if let Err(e) = self.restore_all() {
            self.resume_eviction();
            return Err((self, e));
        }
        let core = &self.core;
        // Unregistered while the region is still in the table: a thread
        // touching a never-written page meanwhile still finds its handler
        // (whose zero fill then fails with ENOENT and lets the kernel's own
        // fault give it zeros), never a SIGBUS nobody handles.
        if core.owner_pid() == sys::getpid()
            && !core.budget.uffd().is_lost()
            && !core.is_unmapped.load(Ordering::Acquire)
        {
            let _ = sys::uffd_unregister(
                core.budget.uffd().fd(),
                core.mapping.base(),
                core.mapping.len(),
            );
        }
        let range = (core.mapping.base(), core.mapping.len());
        core.mapping.leak_on_drop();
        drop(self);
        Ok(range)
    }

    /// Gives the region's pages, compressed data and share of the budget
    /// back without restoring anything and leaves the address range mapped:
    /// for a caller about to unmap the whole range itself (so no other
    /// thread can map something there between the two). Returns the range.
    pub fn release_for_unmap(self) -> (usize, usize) {
        let range = (self.core.mapping.base(), self.core.mapping.len());
        self.core.mapping.leak_on_drop();
        drop(self);
        range
    }

    /// Puts zpage's SIGBUS handler back in front of any installed after it.
    pub fn ensure_handler_front() -> Result<(), RegionError> {
        signal::ensure_front().map_err(|e| RegionError::sys("sigaction(SIGBUS)", e))
    }

    /// Replaces the compressed copy of the evicted page at `offset` with
    /// `garbage` (for tests of the corrupt-blob path): the next access must
    /// end the process with a message naming the page.
    #[doc(hidden)]
    pub fn corrupt_page_for_test(&self, offset: usize, garbage: &[u8]) -> Result<(), RegionError> {
        let page = self.pages_of(offset, 1)?.start;
        let core = &self.core;
        let budget = &core.budget;
        let worker = budget.store().worker()?;
        let _signals = SignalGuard::block_async();
        let slot = &core.pages[page];
        loop {
            let s = slot.load();
            if s.tag() != Tag::Stored {
                return Err(RegionError::InvalidConfig(format!(
                    "page {page} is not evicted and compressed ({:?})",
                    s.tag()
                )));
            }
            if !slot.claim(s, s.with(Tag::Restoring)) {
                continue;
            }
            let result = match slot.page_ref() {
                Some(old) if old.in_pool() => {
                    let corrupt = budget.store().put_blob_for_test(&worker, old, garbage)?;
                    slot.set_page_ref(Some(corrupt));
                    budget.release(old);
                    Ok(())
                }
                _ => Err(RegionError::InvalidConfig(format!(
                    "page {page} is same-filled: it has no blob to corrupt"
                ))),
            };
            slot.publish(s);
            return result;
        }
    }

    /// The region's userfaultfd (for diagnostics and hazard tests).
    #[doc(hidden)]
    pub fn raw_uffd(&self) -> i32 {
        self.core.budget.uffd().fd()
    }

    /// The fault mode of the region's budget.
    pub fn fault_mode(&self) -> FaultMode {
        self.core.budget.mode()
    }
}

/// How much of a budget pins may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PinLimit {
    /// Half the configured budget: the rest stays for the pages that come
    /// and go. The configured one, not the budget now, which may be
    /// lowered while it runs (to its smallest, by a memory max): a system
    /// call's buffer must still be pinned, for as long as the call (pins
    /// past the budget are an overshoot, counted).
    HalfBudget,
    /// Any amount, over the budget if need be: memory the kernel must be
    /// able to reach at any moment (a stack signals are delivered on, pages
    /// the program `mlock`ed).
    None,
}

/// Pins `range` of `core` (see [`Region::pin`]).
pub(crate) fn pin_pages(
    core: &RegionCore,
    range: std::ops::Range<usize>,
    limit: PinLimit,
) -> Result<(), RegionError> {
    let budget = &core.budget;
    let new_pins = range
        .clone()
        .filter(|&p| core.pages[p].load().pins() == 0 && !core.foreign.contains(p))
        .count();
    let total = budget_pinned(budget) + new_pins;
    let configured = budget.configured_budget_pages();
    if limit == PinLimit::HalfBudget && total > configured / 2 {
        return Err(RegionError::PinExceedsBudget {
            requested: new_pins * PAGE_SIZE,
            total: total * PAGE_SIZE,
            budget: configured * PAGE_SIZE,
        });
    }
    let _signals = SignalGuard::block_async();
    // Which pages are mapped, a chunk at a time: a page RESIDENT in our books,
    // writable and mapped needs no restore, and skipping `resolve` skips its
    // `UFFDIO_COPY`, which only finds the page there (EEXIST). System call
    // wrappers pin every buffer they pass, mostly resident ones.
    // Pins reach here from a `vfork()` child's system calls too.
    let owner = core.owner_pid() == sys::getpid();
    let mut mapped = [0u8; 256];
    let mut chunk = usize::MAX..usize::MAX;
    for page in range.clone() {
        if core.foreign.contains(page) {
            // Not zpage's memory: nothing to pin.
            continue;
        }
        if !chunk.contains(&page) {
            let pages = mapped.len().min(range.end - page);
            chunk = page..page + pages;
            if sys::mincore(core.page_addr(page), &mut mapped[..pages]).is_err() {
                mapped.fill(0);
            }
        }
        let mut maybe_mapped = mapped[page - chunk.start] & 1 != 0;
        loop {
            let slot = &core.pages[page];
            let seen = slot.load();
            let in_place = maybe_mapped && seen.tag() == Tag::Resident && !seen.clean();
            // Once a claim below fails, look again the slow way.
            maybe_mapped = false;
            if !in_place {
                fault::resolve_from(core, page, Access::WRITABLE, Ctx::Api, owner)
                    .map_err(|e| RegionError::sys("pin", e))?;
            }
            let s = slot.load();
            if s.tag() != Tag::Resident {
                continue;
            }
            if s.pins() == MAX_PINS {
                return Err(RegionError::InvalidConfig(format!(
                    "a page may be pinned at most {MAX_PINS} times"
                )));
            }
            if slot.claim(s, s.pinned_once_more()) {
                if s.pins() == 0 {
                    core.pinned.fetch_add(1, Ordering::AcqRel);
                }
                break;
            }
        }
    }
    Ok(())
}

/// Undoes one pin of `range` of `core` (see [`Region::unpin`]).
pub(crate) fn unpin_pages(
    core: &RegionCore,
    range: std::ops::Range<usize>,
) -> Result<(), RegionError> {
    let range = || range.clone().filter(|&p| !core.foreign.contains(p));
    if let Some(p) = range().find(|&p| core.pages[p].load().pins() == 0) {
        return Err(RegionError::NotPinned(p * PAGE_SIZE));
    }
    for page in range() {
        let slot = &core.pages[page];
        loop {
            let s = slot.load();
            if slot.claim(s, s.unpinned_once()) {
                if s.pins() == 1 {
                    core.pinned.fetch_sub(1, Ordering::AcqRel);
                }
                break;
            }
        }
    }
    Ok(())
}

/// Pinned pages of every region of a budget.
fn budget_pinned(budget: &Shared) -> usize {
    let mut pinned = 0;
    table::for_each(|core| {
        if std::ptr::eq(&*core.budget, budget) {
            pinned += core.pinned.load(Ordering::Relaxed);
        }
    });
    pinned
}

/// Restores every evicted page of `core` (no allocation, no lock).
pub(crate) fn restore_all(core: &RegionCore) -> Result<(), sys::Errno> {
    for page in 0..core.touched_pages().len() {
        if core.pages[page].load().evicted() {
            fault::resolve(core, page, Access::READ, Ctx::Api)?;
        }
    }
    Ok(())
}

impl Drop for Region {
    fn drop(&mut self) {
        let core = &self.core;
        let budget = &core.budget;
        // Before the table forgets it, so that a thread still inside that
        // finds a page gone knows why (`evict::vanished`).
        core.dropping.store(true, Ordering::SeqCst);
        // From here no fault, reclaimer or event thread reaches this region.
        table::unregister(core.id());
        if core.owner_pid() != sys::getpid() {
            // A forked child: the machinery stayed in the parent.
            return;
        }
        // An event read before this point (the program's own discard just
        // before the drop) is applied, or found the region gone, before the
        // address range can be unmapped and reused: applied late, it would
        // mark or drop the pages of the next region mapped there.
        budget.installs().wait_events_applied();
        if !budget.uffd().is_lost() && !core.is_unmapped.load(Ordering::Acquire) {
            let _ =
                sys::uffd_unregister(budget.uffd().fd(), core.mapping.base(), core.mapping.len());
        }
        // Give back what the region holds: references (pool memory), staging
        // slots, and its share of the budget. Freeing takes the pool's lock.
        let _signals = SignalGuard::block_async();
        let _g = budget.lock_reclaim();
        for slot in core.touched_pages().iter() {
            let s = slot.load();
            if let Some(page_ref) = slot.take_page_ref() {
                budget.release(page_ref);
            }
            if s.tag() == Tag::Staged {
                budget.staging().discard_later(s.slot(), budget.resident());
            }
        }
        budget.resident().sub(core.resident.load(Ordering::Acquire));
        budget.remove_region_pages(core.touched_pages().len());
        budget.staging().discard_pending(budget.resident());
        budget.signal_room();
        // The mapping is unmapped with the core; the budget's threads stop
        // when the last handle on it goes.
    }
}
