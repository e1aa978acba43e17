//! One page's slot: its state word and its compressed reference side by side
//! (Zircon keeps a page's `CompressedRef` in the page's own slot the same way:
//! one index, nothing to keep in agreement).
//!
//! The fault path, the reclaimer, the event thread and the API change a state
//! word only by compare-and-swap, so whoever wins a transition owns the page
//! until it publishes the next state; the others wait (yield) and look again.
//! Only the owner of a page reads or changes its reference.
//!
//! ```text
//!   EMPTY ──fault──▶ RESTORING ──▶ RESIDENT ──evict──▶ EVICTING ──MOVE out──▶ STAGED(slot)
//!                        ▲                                 │ (clean)              │ compress
//!                        │ fault: copy back from staging ◀─┼──────────────────────┤
//!                        │ fault: decompress + COPY ◀── STORED ◀── COMPRESSING(slot)◀┘
//!
//!   in a child of fork(), a page advised MADV_WIPEONFORK or MADV_DONTFORK:
//!   RESIDENT | STAGED(slot) | STORED ──child hook──▶ EMPTY   (`fork.rs`)
//! ```
//!
//! A RESIDENT page is CLEAN when its reference still holds its exact contents
//! (it is mapped write-protected since its restore): evicting it again needs
//! no compression. The first write faults, lifts the protection and gives the
//! reference up.
#![allow(clippy::identity_op)]

use crate::aging::PageAging;
use std::sync::atomic::{AtomicU64, Ordering};
use zpage_store::PageRef;

/// What a page is, in bits 0-3 of its state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// Never written, or discarded by the program: reads as zeros.
    Empty = 0,
    /// Mapped in the region.
    Resident = 1,
    /// Being moved out by the reclaimer or a faulting thread.
    Evicting = 2,
    /// Moved out, uncompressed, in a staging slot (trial eviction).
    Staged = 3,
    /// Being compressed from its staging slot.
    Compressing = 4,
    /// Held by its reference only.
    Stored = 5,
    /// Being restored (or its write protection lifted) by a faulting thread.
    Restoring = 6,
}

const TAG_BITS: u32 = 4;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// The program discarded the page (`MADV_DONTNEED`) while another thread
/// owned it: the owner drops what it holds instead of publishing it.
const DISCARD: u64 = 1 << 4;
/// Resident and write-protected since its restore; its reference is exact.
const CLEAN: u64 = 1 << 5;
const PIN_SHIFT: u32 = 8;
const PIN_BITS: u32 = 8;
const PIN_ONE: u64 = 1 << PIN_SHIFT;
const PIN_MASK: u64 = ((1 << PIN_BITS) - 1) << PIN_SHIFT;
const SLOT_SHIFT: u32 = 32;
/// Staging slots a state word can name.
pub const MAX_STAGING_SLOTS: usize = 1 << (64 - SLOT_SHIFT);
/// Pins a page can hold at once.
pub const MAX_PINS: u64 = (1 << PIN_BITS) - 1;

const _: () = {
    assert!((Tag::Restoring as u64) <= TAG_MASK);
    assert!(DISCARD & TAG_MASK == 0 && CLEAN & TAG_MASK == 0 && DISCARD != CLEAN);
    assert!(DISCARD < PIN_ONE && CLEAN < PIN_ONE);
    assert!(PIN_SHIFT + PIN_BITS <= SLOT_SHIFT);
};

/// A state word's value. Copy; changing the page means a compare-and-swap of
/// the slot's word from one `State` to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State(u64);

impl State {
    pub const EMPTY: State = State(Tag::Empty as u64);

    pub fn tag(self) -> Tag {
        match self.0 & TAG_MASK {
            0 => Tag::Empty,
            1 => Tag::Resident,
            2 => Tag::Evicting,
            3 => Tag::Staged,
            4 => Tag::Compressing,
            5 => Tag::Stored,
            _ => Tag::Restoring,
        }
    }

    pub fn pins(self) -> u64 {
        (self.0 & PIN_MASK) >> PIN_SHIFT
    }

    pub fn slot(self) -> usize {
        (self.0 >> SLOT_SHIFT) as usize
    }

    pub fn clean(self) -> bool {
        self.0 & CLEAN != 0
    }

    pub fn discarded(self) -> bool {
        self.0 & DISCARD != 0
    }

    /// This state with its tag replaced; pins and flags kept, slot cleared.
    pub fn with(self, tag: Tag) -> State {
        State((self.0 & (PIN_MASK | DISCARD | CLEAN)) | tag as u64)
    }

    /// This state with its tag replaced and staging slot `slot` recorded.
    pub fn with_slot(self, tag: Tag, slot: usize) -> State {
        debug_assert!(slot < MAX_STAGING_SLOTS);
        State(self.with(tag).0 | ((slot as u64) << SLOT_SHIFT))
    }

    pub fn set_clean(self, clean: bool) -> State {
        State(if clean {
            self.0 | CLEAN
        } else {
            self.0 & !CLEAN
        })
    }

    /// EMPTY with the pins kept: its contents are zeros, so no discard is pending.
    pub fn emptied(self) -> State {
        State(self.0 & PIN_MASK)
    }

    /// This state without DISCARD (a mark that turned out not to be
    /// followed by a zap, see `evict::settle_discard`).
    pub fn undiscarded(self) -> State {
        State(self.0 & !DISCARD)
    }

    pub fn pinned_once_more(self) -> State {
        State(self.0 + PIN_ONE)
    }

    pub fn unpinned_once(self) -> State {
        State(self.0 - PIN_ONE)
    }

    /// The page's data is somewhere other than the region (staging or store).
    pub fn evicted(self) -> bool {
        matches!(
            self.tag(),
            Tag::Evicting | Tag::Staged | Tag::Compressing | Tag::Stored
        )
    }
}

/// One page's slot.
#[derive(Debug, Default)]
#[repr(C, align(32))]
pub struct PageSlot {
    state: AtomicU64,
    /// The page's compressed reference ([`PageRef::to_raw`]), 0 for none.
    page_ref: AtomicU64,
    /// What the aging policy remembers of the page.
    pub aging: PageAging,
}

/// A region's page slots, all EMPTY with no reference and no history when
/// made: a private anonymous mapping of their own (`MAP_NORESERVE`), since
/// all-zero is the EMPTY state and the kernel hands out zero pages lazily.
/// So the slots of pages never touched cost nothing, which a reserved
/// region of a terabyte (a runtime's heap reservation) relies on: its
/// 8 GiB of slots are memory only where pages were used. A boxed slice
/// would not do: its 32-byte alignment takes the allocator's aligned path,
/// which clears every byte.
pub struct SlotArray {
    ptr: std::ptr::NonNull<PageSlot>,
    len: usize,
}

// SAFETY: the slots are atomics only, shared between threads by design; the
// array owns its mapping.
#[allow(unsafe_code)]
unsafe impl Send for SlotArray {}
// SAFETY: as above: `&SlotArray` only hands out `&[PageSlot]` (atomics).
#[allow(unsafe_code)]
unsafe impl Sync for SlotArray {}

impl SlotArray {
    /// `n` slots, all EMPTY with no reference and no history.
    #[allow(unsafe_code)]
    pub fn zeroed(n: usize) -> Result<SlotArray, crate::sys::Errno> {
        const _: () = assert!(Tag::Empty as u64 == 0);
        const _: () =
            assert!(crate::sys::PAGE_SIZE.is_multiple_of(std::mem::align_of::<PageSlot>()));
        if n == 0 {
            return Ok(SlotArray {
                ptr: std::ptr::NonNull::dangling(),
                len: 0,
            });
        }
        let bytes = n
            .checked_mul(std::mem::size_of::<PageSlot>())
            .ok_or(crate::sys::Errno(libc::ENOMEM))?;
        let p = crate::sys::mmap_anon(bytes)?;
        Ok(SlotArray {
            // SAFETY: mmap succeeded, so `p` is not null; page alignment
            // covers PageSlot's (asserted above).
            ptr: unsafe { std::ptr::NonNull::new_unchecked(p.cast()) },
            len: n,
        })
    }
}

impl std::ops::Deref for SlotArray {
    type Target = [PageSlot];
    #[allow(unsafe_code)]
    fn deref(&self) -> &[PageSlot] {
        // SAFETY: `len` slots of fresh zeroed memory owned by `self` until
        // drop; PageSlot is atomics only (u64, u64, u32, u32, u8), for which
        // all-zero bytes are valid, and all-zero is the EMPTY state with no
        // reference and no aging history (checked by a test against
        // Default). A dangling pointer with `len` 0 is a valid empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SlotArray {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping `zeroed` made, no longer borrowed (drop
            // has `&mut self`).
            let _ = unsafe {
                crate::sys::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<PageSlot>(),
                )
            };
        }
    }
}

impl std::fmt::Debug for SlotArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotArray({} slots)", self.len)
    }
}

const _: () = assert!(
    std::mem::size_of::<PageSlot>() == 32,
    "one page's slot is a half cache line"
);

impl PageSlot {
    pub fn load(&self) -> State {
        State(self.state.load(Ordering::Acquire))
    }

    /// Moves the state from `seen` to `next` if no other thread changed it
    /// since `seen` was read: how a thread takes a page (and hands it on)
    /// without a lock.
    pub fn claim(&self, seen: State, next: State) -> bool {
        self.state
            .compare_exchange(seen.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Ends a claim with `next`, keeping a DISCARD the event thread set
    /// meanwhile (the program's zap of the page is then still to come, and
    /// whatever is installed now must not outlive it).
    pub fn publish(&self, next: State) {
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            match self.state.compare_exchange(
                cur,
                next.0 | (cur & DISCARD),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Ends a claim with exactly `next` (a DISCARD set meanwhile is consumed:
    /// the caller dropped the data because of it).
    pub fn set(&self, next: State) {
        self.state.store(next.0, Ordering::Release);
    }

    /// Sets DISCARD on whatever state the page is in (the event thread, on a
    /// page another thread owns).
    pub fn mark_discarded(&self) {
        self.state.fetch_or(DISCARD, Ordering::AcqRel);
    }

    /// The page's reference. Only the page's owner may rely on it.
    pub fn page_ref(&self) -> Option<PageRef> {
        PageRef::from_raw(self.page_ref.load(Ordering::Acquire))
    }

    /// Records the page's reference (owner only).
    pub fn set_page_ref(&self, page_ref: Option<PageRef>) {
        self.page_ref
            .store(page_ref.map_or(0, PageRef::to_raw), Ordering::Release);
    }

    /// Takes the page's reference out (owner only).
    pub fn take_page_ref(&self) -> Option<PageRef> {
        PageRef::from_raw(self.page_ref.swap(0, Ordering::AcqRel))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn zeroed_slots_are_empty_with_no_reference_and_no_history() {
        let slots = super::SlotArray::zeroed(3).unwrap();
        for slot in slots.iter() {
            assert_eq!(slot.load(), super::State::EMPTY);
            assert!(slot.take_page_ref().is_none());
            assert_eq!(slot.aging.activations(), 0);
            assert_eq!(slot.aging.gen.load(std::sync::atomic::Ordering::Relaxed), 0);
        }
    }

    use super::*;

    #[test]
    fn fields_pack_and_unpack() {
        let s = State::EMPTY
            .pinned_once_more()
            .pinned_once_more()
            .with_slot(Tag::Staged, 12345)
            .set_clean(true);
        assert_eq!(s.tag(), Tag::Staged);
        assert_eq!(s.slot(), 12345);
        assert_eq!(s.pins(), 2);
        assert!(s.clean() && !s.discarded());
        let r = s.with(Tag::Resident);
        assert_eq!((r.tag(), r.slot(), r.pins()), (Tag::Resident, 0, 2));
        let discarded = State(r.0 | DISCARD);
        assert!(discarded.discarded());
        let e = discarded.emptied();
        assert_eq!(
            (e.tag(), e.pins(), e.clean(), e.discarded()),
            (Tag::Empty, 2, false, false)
        );
        assert_eq!(e.unpinned_once().pins(), 1);
    }

    #[test]
    fn publish_keeps_a_discard_set_meanwhile() {
        let slot = PageSlot::default();
        let owned = State::EMPTY.with(Tag::Restoring);
        assert!(slot.claim(State::EMPTY, owned));
        slot.mark_discarded();
        slot.publish(owned.with(Tag::Resident));
        assert!(slot.load().discarded());
        assert_eq!(slot.load().tag(), Tag::Resident);
    }
}
