//! The staging area of a budget: pages moved out of regions wait here
//! uncompressed, and slots whose pages are no longer needed are discarded
//! in batches. Everything here the fault path calls is async-signal-safe:
//! atomics, ioctls and `madvise`/`process_madvise` only, and no allocation.

use crate::config::FaultMode;
use crate::error::RegionError;
use crate::limits::Resident;
use crate::mapping::Mapping;
use crate::queues::Ring;
use crate::sys::{self, Errno, PAGE_SIZE};
use crate::uffd::Uffd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// The staging area: pages moved out of regions wait here uncompressed (on
/// trial, or until compressed), and clean pages wait here until their memory
/// is discarded in a batch (one TLB flush for many pages). A slot is free in
/// the bitmap only once its memory is discarded, so a MOVE into a free slot
/// always finds it empty.
#[derive(Debug)]
pub struct Staging {
    mapping: Mapping,
    /// MOVE's destination must be registered with the uffd the ioctl is made
    /// on; this one has no events, so discarding slots raises none.
    uffd: Uffd,
    bits: Box<[AtomicU64]>,
    /// Where the next allocation starts looking: consecutive evictions get
    /// adjacent slots, so a discard batch is a few long runs (one `madvise`
    /// and one TLB flush each) rather than many single pages.
    cursor: AtomicUsize,
    /// Slots whose page is no longer needed, waiting to be discarded.
    discards: Ring,
    pending: AtomicUsize,
    /// Held by the one thread discarding (the ring has one consumer).
    discarding: AtomicBool,
    /// Slots taken (staged pages, and slots waiting to be discarded).
    in_use: AtomicUsize,
}

/// Discard batches at least this large (one `process_madvise` and one TLB
/// flush for the runs of adjacent slots in it).
const DISCARD_BATCH: usize = 64;
const _: () = assert!(4 * DISCARD_BATCH <= sys::DISCARD_RANGES_MAX);

impl Staging {
    /// A staging area for `pages_in_flight` pages (the trial set and one
    /// round's worth of evictions), and the discard batches.
    pub fn new(pages_in_flight: usize) -> Result<Staging, RegionError> {
        let slots = (pages_in_flight + 8 * DISCARD_BATCH + 1024).div_ceil(64) * 64;
        let mapping = Mapping::new(slots).map_err(|e| RegionError::sys("mmap(staging)", e))?;
        let uffd = Uffd::new(
            sys::FEATURE_SIGBUS | sys::FEATURE_MOVE,
            false,
            FaultMode::Sigbus,
        )?;
        sys::uffd_register(
            uffd.fd(),
            mapping.base(),
            mapping.len(),
            sys::REGISTER_MODE_MISSING,
        )
        .map_err(|e| RegionError::sys("UFFDIO_REGISTER(staging)", e))?;
        Ok(Staging {
            mapping,
            uffd,
            bits: (0..slots / 64).map(|_| AtomicU64::new(0)).collect(),
            cursor: AtomicUsize::new(0),
            discards: Ring::new(4 * DISCARD_BATCH),
            pending: AtomicUsize::new(0),
            discarding: AtomicBool::new(false),
            in_use: AtomicUsize::new(0),
        })
    }

    pub fn addr(&self, slot: usize) -> usize {
        self.mapping.addr(slot)
    }

    /// The staging area's own userfaultfd (MOVE into a slot is made on it).
    pub fn uffd(&self) -> &Uffd {
        &self.uffd
    }

    /// Slots taken now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// In a forked child: a fresh userfaultfd on the staging area at the
    /// descriptor number of the parent's (whose context is the parent's).
    pub fn take_over_in_child(&self) -> Result<(), Errno> {
        self.uffd
            .replace_in_child(sys::FEATURE_SIGBUS | sys::FEATURE_MOVE)?;
        sys::uffd_register(
            self.uffd.fd(),
            self.mapping.base(),
            self.mapping.len(),
            sys::REGISTER_MODE_MISSING,
        )?;
        // A discard the parent had under way at the fork has no thread here.
        self.discarding.store(false, Ordering::Release);
        Ok(())
    }

    /// The uncompressed page in `slot` (its owner reads it while it holds the page).
    pub fn page(&self, slot: usize) -> &[u8; PAGE_SIZE] {
        self.mapping.page(slot)
    }

    /// Takes a free slot (any thread; async-signal-safe).
    pub fn alloc(&self) -> Option<usize> {
        let words = self.bits.len();
        let start = self.cursor.load(Ordering::Relaxed) % (words * 64);
        for i in 0..=words {
            let w = (start / 64 + i) % words;
            let mut cur = self.bits[w].load(Ordering::Acquire);
            // In the starting word, look at and after the cursor's bit first.
            let from = if i == 0 { start % 64 } else { 0 };
            loop {
                let free = !cur & (u64::MAX << from);
                if free == 0 {
                    break;
                }
                let bit = free.trailing_zeros() as usize;
                match self.bits[w].compare_exchange(
                    cur,
                    cur | (1 << bit),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        self.in_use.fetch_add(1, Ordering::AcqRel);
                        let slot = w * 64 + bit;
                        self.cursor.store(slot + 1, Ordering::Relaxed);
                        return Some(slot);
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        None
    }

    /// Gives back a slot whose memory is already empty (a MOVE into it failed).
    pub fn free_unused(&self, slot: usize) {
        self.bits[slot / 64].fetch_and(!(1 << (slot % 64)), Ordering::AcqRel);
        self.in_use.fetch_sub(1, Ordering::AcqRel);
    }

    /// Gives back a slot after a MOVE into it failed. The slot should be
    /// empty; if a page sits there anyway (a MOVE that failed after moving,
    /// see `sys::move_page`), it is discarded first, or every later MOVE
    /// into the slot would fail with `EEXIST`. Async-signal-safe.
    pub fn free_after_failed_move(&self, slot: usize) {
        if sys::page_present(self.addr(slot)) {
            let _ = sys::discard(self.addr(slot), PAGE_SIZE);
        }
        self.free_unused(slot);
    }

    /// Queues `slot` to be discarded with others; when enough are waiting,
    /// discards them now. Async-signal-safe.
    pub fn discard_later(&self, slot: usize, budget_resident: &Resident) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if !self.discards.try_push(slot as u64 + 1) {
            // The queue is full (its consumer is busy): this one goes alone.
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let _ = sys::discard(self.addr(slot), PAGE_SIZE);
            self.free_unused(slot);
            budget_resident.sub(1);
            return;
        }
        if self.pending.load(Ordering::Acquire) >= DISCARD_BATCH {
            self.discard_pending(budget_resident);
        }
    }

    /// Discards every queued slot and frees it; returns how many. Only one
    /// thread discards at a time; another caller returns 0 at once.
    /// Async-signal-safe (no allocation: slots are sorted in a stack array).
    pub fn discard_pending(&self, budget_resident: &Resident) -> usize {
        if self.discarding.swap(true, Ordering::AcqRel) {
            return 0;
        }
        let mut total = 0;
        let timed = crate::profile::start();
        loop {
            let mut batch = [0u32; 4 * DISCARD_BATCH];
            let mut n = 0;
            while n < batch.len() {
                match self.discards.pop() {
                    Some(v) => {
                        batch[n] = (v - 1) as u32;
                        n += 1;
                    }
                    None => break,
                }
            }
            if n == 0 {
                break;
            }
            let batch = &mut batch[..n];
            batch.sort_unstable();
            let mut ranges = [(0usize, 0usize); 4 * DISCARD_BATCH];
            let mut runs = 0;
            let mut i = 0;
            while i < n {
                let mut j = i + 1;
                while j < n && batch[j] == batch[j - 1] + 1 {
                    j += 1;
                }
                ranges[runs] = (self.addr(batch[i] as usize), (j - i) * PAGE_SIZE);
                runs += 1;
                i = j;
            }
            sys::discard_ranges(&ranges[..runs]);
            for &slot in batch.iter() {
                self.free_unused(slot as usize);
            }
            self.pending.fetch_sub(n, Ordering::AcqRel);
            budget_resident.sub(n);
            total += n;
        }
        self.discarding.store(false, Ordering::Release);
        if total > 0 {
            crate::profile::end(crate::profile::Part::DiscardPerSlot, timed, total as u64);
        }
        total
    }
}
