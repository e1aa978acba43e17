//! The per-page state word and its transitions.
//!
//! Every page of a region has one `AtomicU64`. The fault path, the reclaimer,
//! the event thread and the advice calls change it only by compare-and-swap,
//! so whoever wins a transition owns the page until it publishes the next
//! state; the others wait (`sched_yield`) and look again:
//!
//! ```text
//!   EMPTY ──fault──▶ RESTORING ──▶ RESIDENT ──reclaim──▶ EVICTING ──MOVE──▶ STAGED(slot)
//!                        ▲                                                     │    │
//!                        │ fault: MOVE back (trial-eviction hit) ◀─────────────┘    │ compress
//!                        │ fault: decompress + COPY ◀── STORED ◀── COMPRESSING(slot)◀┘
//! ```
//!
//! Layout: bits 0-3 tag, bit 4 `COPY` (the store still holds an entry for a
//! page that is not STORED: stale, to be removed), bit 5 `DISCARD`, bits 8-15 pin count, bits 32-63 staging slot.

pub const EMPTY: u64 = 0;
pub const RESIDENT: u64 = 1;
pub const EVICTING: u64 = 2;
pub const STAGED: u64 = 3;
pub const COMPRESSING: u64 = 4;
pub const STORED: u64 = 5;
pub const RESTORING: u64 = 6;

pub const TAG_MASK: u64 = 0xf;
pub const COPY: u64 = 1 << 4;
/// Set by the event thread on a page owned by someone else (EVICTING,
/// COMPRESSING, RESTORING) when the program discarded its range: the owner
/// must drop the data instead of publishing it.
pub const DISCARD: u64 = 1 << 5;
/// The page is resident, write-protected since it was restored, and the
/// store's entry (COPY) still holds its exact contents: evicting it needs no
/// compression. The first write faults (sync uffd-wp) and clears it.
pub const CLEAN: u64 = 1 << 6;
pub const PIN_ONE: u64 = 1 << 8;
pub const PIN_MASK: u64 = 0xff << 8;
pub const SLOT_SHIFT: u32 = 32;

#[inline]
pub fn tag(s: u64) -> u64 {
    s & TAG_MASK
}

#[inline]
pub fn pins(s: u64) -> u64 {
    (s & PIN_MASK) >> 8
}

#[inline]
pub fn slot(s: u64) -> usize {
    (s >> SLOT_SHIFT) as usize
}

/// `s` with its tag replaced (pins, COPY and DISCARD kept; slot cleared).
/// Transitions to EMPTY must clear DISCARD themselves (see [`empty`]).
#[inline]
pub fn with_tag(s: u64, t: u64) -> u64 {
    (s & (PIN_MASK | COPY | DISCARD | CLEAN)) | t
}

/// `s` with its tag replaced and a staging slot set.
#[inline]
pub fn with_slot(s: u64, t: u64, slot: usize) -> u64 {
    (s & (PIN_MASK | COPY | DISCARD | CLEAN)) | t | ((slot as u64) << SLOT_SHIFT)
}

/// `s` as EMPTY: its contents are zeros, so no discard is pending.
#[inline]
pub fn empty(s: u64) -> u64 {
    with_tag(s, EMPTY) & !(DISCARD | CLEAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let s = with_slot((PIN_ONE * 3) | COPY, STAGED, 12345);
        assert_eq!(tag(s), STAGED);
        assert_eq!(slot(s), 12345);
        assert_eq!(pins(s), 3);
        assert_eq!(s & COPY, COPY);
        let r = with_tag(s, RESIDENT);
        assert_eq!(tag(r), RESIDENT);
        assert_eq!(slot(r), 0);
        assert_eq!(pins(r), 3);
    }
}
