//! Opaque handles and their bit layout.
//!
//! ```text
//!  63   56 55        44 43      36 35  34 33  32 31                          0
//! +-------+------------+----------+------+------+-----------------------------+
//! | zero  | generation | instance | kind | slot |            index            |
//! +-------+------------+----------+------+------+-----------------------------+
//! ```
//! The top eight bits are always zero ([`Handle::BITS`] = 56), so a caller
//! can pack a handle with a few bits of its own into one word (the store's
//! page references do).
//! - `index`: handle-table entry (zsmalloc) or page number (tri-page, zbud).
//! - `slot`: which object of the page (tri-page, zbud); 0 for zsmalloc.
//! - `kind`: 1..=3, the design that issued it; a zero kind means "never issued".
//! - `instance`: low bits of a per-pool serial number, so handles from another
//!   pool of the same design are (almost always) recognised as foreign.
//! - `generation`: bumped each time the entry or slot is reused, so a freed
//!   handle stays invalid after its slot holds a new object.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{PoolError, PoolKind, Result};

/// Names one stored object. Copy it freely; it is only a number.
///
/// Raw values round-trip through [`Handle::to_raw`] / [`Handle::from_raw`], so
/// callers can pack handles into their own tables. Any `u64` is accepted by
/// `from_raw`; pools validate handles on use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(u64);

impl Handle {
    /// Bits a raw handle value occupies: `to_raw() < 1 << Handle::BITS`.
    pub const BITS: u32 = 56;

    /// The raw 64-bit value, for packing into the caller's own structures.
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// Rebuilds a handle from [`Handle::to_raw`]'s value.
    pub fn from_raw(raw: u64) -> Handle {
        Handle(raw)
    }
}

const SLOT_SHIFT: u32 = 32;
const SLOT_BITS: u32 = 2;
const KIND_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;
const KIND_BITS: u32 = 2;
const INSTANCE_SHIFT: u32 = KIND_SHIFT + KIND_BITS;
const INSTANCE_BITS: u32 = 8;
const GENERATION_SHIFT: u32 = INSTANCE_SHIFT + INSTANCE_BITS;
const GENERATION_BITS: u32 = Handle::BITS - GENERATION_SHIFT;
const _: () = assert!(GENERATION_BITS == 12, "layout diagram above is out of date");

/// Largest slot number a handle can carry.
pub(crate) const MAX_SLOT: u8 = (1 << SLOT_BITS) - 1;

/// Generation counter stored next to every reusable entry or slot.
///
/// Never zero, so a zeroed table entry can never match a handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Generation(u32);

impl Generation {
    pub(crate) const FIRST: Generation = Generation(1);

    /// The generation for the next object in this entry or slot.
    pub(crate) fn next(self) -> Generation {
        let wrapped = (self.0 + 1) & ((1 << GENERATION_BITS) - 1);
        Generation(wrapped.max(1))
    }
}

/// What a valid-looking handle decodes to; the pool still checks that the
/// index exists and the generation matches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decoded {
    pub(crate) index: u32,
    pub(crate) slot: u8,
    pub(crate) generation: Generation,
}

/// Encodes and decodes the handles of one pool instance.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HandleCodec {
    kind: PoolKind,
    instance: u8,
}

static NEXT_POOL_SERIAL: AtomicU64 = AtomicU64::new(0);

impl HandleCodec {
    pub(crate) fn new(kind: PoolKind) -> HandleCodec {
        // Truncation is intended: eight bits of serial number separate
        // neighbouring pools; the generation check still protects the rest.
        let instance = NEXT_POOL_SERIAL.fetch_add(1, Ordering::Relaxed) as u8;
        HandleCodec { kind, instance }
    }

    fn kind_tag(self) -> u64 {
        match self.kind {
            PoolKind::SizeClass => 1,
            PoolKind::TriPage => 2,
            PoolKind::TwoSlot => 3,
        }
    }

    pub(crate) fn encode(self, index: u32, slot: u8, generation: Generation) -> Handle {
        debug_assert!(slot <= MAX_SLOT);
        Handle(
            u64::from(index)
                | (u64::from(slot) << SLOT_SHIFT)
                | (self.kind_tag() << KIND_SHIFT)
                | (u64::from(self.instance) << INSTANCE_SHIFT)
                | (u64::from(generation.0) << GENERATION_SHIFT),
        )
    }

    /// Checks the kind and instance tags and splits the handle into fields.
    pub(crate) fn decode(self, handle: Handle) -> Result<Decoded> {
        let raw = handle.0;
        let field = |shift: u32, bits: u32| (raw >> shift) & ((1u64 << bits) - 1);
        if field(KIND_SHIFT, KIND_BITS) != self.kind_tag()
            || field(INSTANCE_SHIFT, INSTANCE_BITS) != u64::from(self.instance)
        {
            return Err(self.foreign(handle));
        }
        Ok(Decoded {
            index: raw as u32,
            slot: field(SLOT_SHIFT, SLOT_BITS) as u8,
            generation: Generation(field(GENERATION_SHIFT, GENERATION_BITS) as u32),
        })
    }

    pub(crate) fn foreign(self, handle: Handle) -> PoolError {
        PoolError::ForeignHandle {
            raw: handle.0,
            pool: self.kind.name(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let codec = HandleCodec::new(PoolKind::TriPage);
        let generation = Generation::FIRST.next().next();
        let handle = codec.encode(0xdead_beef, 2, generation);
        let decoded = codec.decode(Handle::from_raw(handle.to_raw())).unwrap();
        assert_eq!(decoded.index, 0xdead_beef);
        assert_eq!(decoded.slot, 2);
        assert_eq!(decoded.generation, generation);
    }

    #[test]
    fn other_pools_handles_are_foreign() {
        let first = HandleCodec::new(PoolKind::SizeClass);
        let second = HandleCodec::new(PoolKind::SizeClass);
        let other_kind = HandleCodec::new(PoolKind::TwoSlot);
        let handle = first.encode(1, 0, Generation::FIRST);
        assert!(matches!(
            second.decode(handle),
            Err(PoolError::ForeignHandle { .. })
        ));
        assert!(matches!(
            other_kind.decode(handle),
            Err(PoolError::ForeignHandle { .. })
        ));
        assert!(matches!(
            first.decode(Handle::from_raw(0)),
            Err(PoolError::ForeignHandle { .. })
        ));
    }

    #[test]
    fn handles_fit_in_their_bits() {
        let codec = HandleCodec::new(PoolKind::TwoSlot);
        let last = Generation((1 << GENERATION_BITS) - 1);
        let handle = codec.encode(u32::MAX, MAX_SLOT, last);
        assert!(handle.to_raw() < 1 << Handle::BITS);
        assert_eq!(codec.decode(handle).unwrap().generation, last);
    }

    #[test]
    fn generation_wraps_without_zero() {
        let last = Generation((1 << GENERATION_BITS) - 1);
        assert_eq!(last.next(), Generation::FIRST);
    }
}
