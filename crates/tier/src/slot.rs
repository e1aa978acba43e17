//! References into a tier's index of reusable slots (the memory and packed
//! tiers): slot + 1 in the low 32 bits (so never 0), and the low 24 bits of
//! the slot's generation above them (so below 2^56). A slot's generation
//! moves on when its blob is freed, so a reference kept after its `free`
//! names no live blob even once the slot is reused (until the 24-bit
//! generation wraps).

use crate::TierRef;

/// The bits of a slot's generation a reference carries.
const GENERATION_MASK: u32 = 0xff_ffff;

/// A decoded reference: the slot, and the generation it was handed out at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotRef {
    pub slot: usize,
    generation: u32,
}

impl SlotRef {
    /// The reference to `slot` at its current `generation`.
    pub fn encode(slot: u32, generation: u32) -> TierRef {
        let raw = (u64::from(generation & GENERATION_MASK) << 32) | (u64::from(slot) + 1);
        TierRef::from_raw(raw).expect("below 2^56 and never 0")
    }

    pub fn decode(tier_ref: TierRef) -> SlotRef {
        let raw = tier_ref.to_raw();
        SlotRef {
            slot: ((raw & 0xffff_ffff) - 1) as usize,
            generation: (raw >> 32) as u32,
        }
    }

    /// Whether a slot now at `generation` is still the one this reference names.
    pub fn is_current(self, generation: u32) -> bool {
        generation & GENERATION_MASK == self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_round_trip_and_name_only_their_generation() {
        for (slot, generation) in [(0, 0), (7, 1), (u32::MAX - 1, 0xff_ffff), (3, 0x1ff_ffff)] {
            let tier_ref = SlotRef::encode(slot, generation);
            assert!(tier_ref.to_raw() >> TierRef::BITS == 0);
            let decoded = SlotRef::decode(tier_ref);
            assert_eq!(decoded.slot, slot as usize);
            assert!(decoded.is_current(generation));
            assert!(!decoded.is_current(generation.wrapping_add(1)));
        }
    }
}
