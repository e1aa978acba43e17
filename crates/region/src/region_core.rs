//! One region's own data: its mapping, its page slots, its counters. Shared
//! by the public [`crate::Region`], the signal handler (through the region
//! table) and the budget's threads.

use crate::counters::Counters;
use crate::counters::RegionStats;
use crate::evict::gate::EvictionHold;
use crate::fatal::Fatal;
use crate::fork::marks::ForkMarks;
use crate::mapping::Mapping;
use crate::page::{PageSlot, SlotArray};
use crate::queues::{Record, RegionId};
use crate::shared::Shared;
use crate::sys::{self, PAGE_SIZE};
use crate::threads::SignalGuard;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug)]
pub struct RegionCore {
    pub budget: Arc<Shared>,
    pub mapping: Mapping,
    /// One slot per page, allocated zeroed (every slot starts EMPTY), so a
    /// region much larger than what the program uses of it (the preload
    /// library's one arena per process) costs memory only for the slots of
    /// pages it touches.
    pub pages: SlotArray,
    /// Parts of the region the program mapped something else over (module
    /// `foreign`).
    pub foreign: crate::foreign::ForeignRanges,
    /// One past the highest page index that ever left EMPTY: every page at
    /// or above it is EMPTY, so walks over the pages stop here.
    touched: AtomicUsize,
    pub counters: Counters,
    /// Table index and incarnation, packed; set once registered.
    id: AtomicU32,
    /// This region's pages mapped, plus its pages in staging.
    pub resident: AtomicUsize,
    pub staged: AtomicUsize,
    pub pinned: AtomicUsize,
    /// Set by `restore_all`: none of this region's pages are evicted until `resume_eviction`.
    pub hold: EvictionHold,
    /// Why the region was closed (the program unmapped or moved part of it).
    pub unmapped: Mutex<Option<String>>,
    pub is_unmapped: AtomicBool,
    /// Set by `Region::drop` before the region leaves the table. Its owner
    /// let it go, so no byte of it is read again; and an event read after
    /// this point may not find it in the table, so a page the program
    /// discarded just before the drop can lose its mark (see
    /// `evict::vanished`).
    pub dropping: AtomicBool,
    /// Pages the program advised `MADV_WIPEONFORK` or `MADV_DONTFORK`.
    pub fork_marks: ForkMarks,
}

impl RegionCore {
    /// `pages` holds one slot for each page of `mapping`.
    pub fn new(budget: Arc<Shared>, mapping: Mapping, pages: SlotArray) -> RegionCore {
        debug_assert_eq!(pages.len(), mapping.pages());
        RegionCore {
            budget,
            pages,
            touched: AtomicUsize::new(0),
            foreign: Default::default(),
            mapping,
            counters: Counters::default(),
            id: AtomicU32::new(u32::MAX),
            resident: AtomicUsize::new(0),
            staged: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            hold: EvictionHold::default(),
            unmapped: Mutex::new(None),
            is_unmapped: AtomicBool::new(false),
            dropping: AtomicBool::new(false),
            fork_marks: ForkMarks::default(),
        }
    }

    pub fn set_id(&self, id: RegionId) {
        self.id.store(
            u32::from(id.index) | (u32::from(id.incarnation) << 16),
            Ordering::Release,
        );
    }

    pub fn id(&self) -> RegionId {
        let v = self.id.load(Ordering::Acquire);
        RegionId {
            index: v as u16,
            incarnation: (v >> 16) as u8,
        }
    }

    /// A snapshot of the region's figures.
    pub fn stats(&self) -> RegionStats {
        let budget = &self.budget;
        // The store's snapshot takes its pools' locks.
        let store = {
            let _signals = SignalGuard::block_async();
            budget.store().stats()
        };
        let bytes = |pages: usize| (pages * PAGE_SIZE) as u64;
        let mut stats = RegionStats {
            size_bytes: self.mapping.len() as u64,
            budget_bytes: bytes(budget.limits().budget_pages),
            resident_bytes: bytes(
                self.resident.load(Ordering::Relaxed) + self.staged.load(Ordering::Relaxed),
            ),
            budget_resident_bytes: bytes(budget.resident_pages()),
            overshoot_peak_bytes: bytes(budget.reclaim_signal().overshoot_peak()),
            staged_bytes: bytes(self.staged.load(Ordering::Relaxed)),
            pinned_bytes: bytes(self.pinned.load(Ordering::Relaxed)),
            compressed_bytes: store.contents.compressed_bytes,
            pool_bytes: store.contents.pool_memory_used_bytes,
            stored_pages: store.contents.stored_pages,
            same_filled_pages: store.contents.same_filled_pages,
            raw_pages: store.contents.raw_pages,
            store,
            ..RegionStats::default()
        };
        self.counters.snapshot_into(&mut stats);
        if let Some(max) = budget.memory_max_status() {
            stats.memory_max_over_count = max.over_count;
            stats.memory_max_over_peak_bytes = max.over_peak_bytes;
        }
        stats
    }

    /// The process this region belongs to (its budget's).
    pub fn owner_pid(&self) -> i32 {
        self.budget.owner_pid()
    }

    pub fn page_addr(&self, page: usize) -> usize {
        self.mapping.addr(page)
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Records that `page` leaves EMPTY (a fault or an API call resolves
    /// it). Async-signal-safe.
    pub fn touch(&self, page: usize) {
        let before = self.touched.fetch_max(page + 1, Ordering::AcqRel);
        if page + 1 > before {
            self.budget.add_region_pages(page + 1 - before);
        }
    }

    /// The slots of every page that ever left EMPTY (the others are EMPTY):
    /// what walks over a region's pages go through.
    pub fn touched_pages(&self) -> &[PageSlot] {
        &self.pages[..self.touched.load(Ordering::Acquire).min(self.pages.len())]
    }

    /// The start of a fatal message about one page (async-signal-safe).
    pub fn about_page(&self, page: usize) -> Fatal {
        Fatal::new()
            .text("page ")
            .dec(page as u64)
            .text(" (address ")
            .hex(self.page_addr(page) as u64)
            .text(") of the region at ")
            .hex(self.mapping.base() as u64)
    }

    /// The identity a page's blob is bound to in the tier below RAM: region
    /// table index and incarnation, and the page's index (a region has fewer
    /// than 2^40 pages).
    pub fn tier_identity(&self, page: usize) -> u64 {
        let id = self.id();
        (u64::from(id.index) << 48) | (u64::from(id.incarnation) << 40) | page as u64
    }

    /// True in a `vfork()` child of the region's owner whose copy of the
    /// budget's userfaultfd is still open (a spawn library may have closed
    /// every descriptor before `exec`): only then can it resolve a fault as
    /// a thread of the parent would. Checked before any ioctl, so a closed
    /// descriptor in the child is never taken for a lost userfaultfd in the
    /// parent's (shared) memory. Async-signal-safe.
    pub fn vfork_child_can_resolve(&self) -> bool {
        sys::shares_memory_with(self.owner_pid())
            && sys::uffd_wake(self.budget.uffd().fd(), self.mapping.base(), PAGE_SIZE).is_ok()
    }

    /// Records that page `page` became resident: its record goes to the
    /// reclaimer's queues. Async-signal-safe.
    pub fn admitted(&self, page: usize, activate: bool) {
        let budget = &self.budget;
        let gen = self.pages[page].aging.admit();
        if budget.in_forked_child() {
            // No reclaimer here: the child's own budget is kept by its faults.
            return;
        }
        if !budget
            .queues()
            .admit(Record::new(self.id(), page, gen, activate))
        {
            budget.kick_reclaimer();
        } else if budget.resident().pages() > budget.limits().high_pages {
            // Between two bursts the reclaimer's only work for these faults
            // is draining their records (and the copies they gave up): woken
            // once per `ADMITS_PER_WAKE` of them, it drains them beside the
            // faults rather than during the next burst, while they wait;
            // woken for each, it cost each fault a `futex_wake` and an
            // interrupt (5% of the faulting thread's time under `perf`).
            // Otherwise the count alone tells it the program faults.
            if budget.queues().admits_waiting() >= ADMITS_PER_WAKE {
                budget.kick_reclaimer();
            } else {
                budget.reclaim_signal().note_activity();
            }
        }
    }

    // Accounting. `resident` counts this region's mapped pages, `staged` its
    // pages waiting uncompressed in staging slots; the budget's `resident`
    // counts every mapped page of its regions plus every occupied staging
    // slot (staged, or waiting to be discarded), so it falls only when memory
    // is really given back.

    /// A page was mapped in from nothing (zero fill, decompression).
    pub fn count_mapped(&self) {
        self.resident.fetch_add(1, Ordering::AcqRel);
        self.budget.resident().add(1);
    }

    /// A mapped page vanished with its memory (the program discarded it).
    pub fn count_vanished(&self) {
        self.resident.fetch_sub(1, Ordering::AcqRel);
        self.budget.resident().sub(1);
    }

    /// A mapped page moved into a staging slot to wait there (trial eviction).
    pub fn count_staged(&self) {
        self.resident.fetch_sub(1, Ordering::AcqRel);
        self.staged.fetch_add(1, Ordering::AcqRel);
    }

    /// A mapped page moved into a staging slot to be discarded (its memory
    /// is given back, and the budget's count falls, when the slot is).
    pub fn count_dropped(&self) {
        self.resident.fetch_sub(1, Ordering::AcqRel);
    }

    /// A staged page left staging (compressed, dropped, or copied back to the
    /// region: the copy is counted by `count_mapped`); its slot is discarded later.
    pub fn count_unstaged(&self) {
        self.staged.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Pages admitted (queued for the reclaimer) per wake of a sleeping
/// reclaimer while the program faults above the high watermark.
const ADMITS_PER_WAKE: usize = 128;
