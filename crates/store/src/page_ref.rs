//! The page reference: one word naming a stored page (a same-filled word
//! held in the reference itself, a blob in a pool shard, or a blob moved to
//! the tier below RAM). It is the contract the store, the tier and the
//! region share: a region keeps it in each page's slot, and its layout is
//! checked below by `const` asserts against the pool's handle and the tier's
//! reference widths.
//!
//! ```text
//!  63  62      61 60    57  56   55                                         0
//! +---+----------+--------+----+--------------------------------------------+
//! | 0 |   kind   | shard  | 0  |              pool handle (56 bits)         |  pool object
//! +---+----------+--------+----+--------------------------------------------+
//! | 0 |   kind   |   0    | 1  |         tier reference (56 bits)           |  in the tier
//! +---+----------+--------+----+--------------------------------------------+
//! | 1 |          the same-filled word, sign-extended from 63 bits            |  same-filled
//! +---+-----------------------------------------------------------------------+
//! ```
//!
//! Zero is never a reference: a same-filled reference has bit 63 set, and a
//! pool handle or tier reference is never zero. Bit 56 marks a blob moved to
//! the tier below RAM; its kind field still says how to decode it.

use zpage_pool::Handle;
use zpage_tier::TierRef;

const SAME_FILLED_BIT: u64 = 1 << 63;
const KIND_SHIFT: u32 = 61;
const KIND_BITS: u32 = 2;
const SHARD_SHIFT: u32 = 57;
const SHARD_BITS: u32 = 4;
const RESERVED_BITS: u32 = 1;
const TIER_BIT: u64 = 1 << Handle::BITS;
const _: () = assert!(
    TierRef::BITS == Handle::BITS,
    "a tier reference fills the handle field"
);
const HANDLE_MASK: u64 = (1 << Handle::BITS) - 1;
const _: () = assert!(
    1 + KIND_BITS + SHARD_BITS + RESERVED_BITS + Handle::BITS == 64,
    "the reference layout above no longer fills one word"
);
const _: () = assert!(SHARD_SHIFT == Handle::BITS + RESERVED_BITS);
const _: () = assert!(KIND_SHIFT == SHARD_SHIFT + SHARD_BITS);

/// Pool shards a reference can name.
pub const MAX_POOL_SHARDS: usize = 1 << SHARD_BITS;

/// What a pool object holds (the reference's `kind` field).
pub(crate) const KIND_PRIMARY: u64 = 0;
pub(crate) const KIND_RECOMPRESSED: u64 = 1;
pub(crate) const KIND_RAW: u64 = 2;
/// A same-filled word that does not fit in 63 bits, kept as 8 bytes in the pool.
pub(crate) const KIND_WIDE_WORD: u64 = 3;

/// One stored page, named in one word. Copy it freely; it is only a number
/// until [`crate::PageStore::free`] is called with it, after which it must not be
/// used again (loads of a freed reference are refused, never answered with
/// another page's bytes, as long as the pool's generation counter has not
/// wrapped for that slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRef(std::num::NonZeroU64);

/// The form a stored page is kept in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    /// Every word of the page is the same value: held in the reference itself
    /// (no pool memory), or, for the rare word that does not fit in 63 bits,
    /// as 8 bytes in the pool.
    SameFilled,
    /// A compressed blob made by codec number `codec` (0: the store's codec,
    /// 1: its recompression codec).
    Compressed {
        /// Which codec.
        codec: u8,
    },
    /// The page itself, 4096 bytes in the pool.
    Raw,
}

impl PageRef {
    /// The raw word, for keeping in an atomic.
    pub fn to_raw(self) -> u64 {
        self.0.get()
    }

    /// Rebuilds a reference from [`PageRef::to_raw`]'s value; `None` for 0,
    /// which never names a page (so 0 can mean "no reference" in a slot).
    pub fn from_raw(raw: u64) -> Option<PageRef> {
        std::num::NonZeroU64::new(raw).map(PageRef)
    }

    pub(crate) fn same_filled(word: u64) -> Option<PageRef> {
        // Representable when bits 63 and 62 agree (the word sign-extends from 63 bits).
        let fits = ((word as i64) << 1 >> 1) as u64 == word;
        fits.then(|| {
            PageRef::from_raw(SAME_FILLED_BIT | (word & !SAME_FILLED_BIT)).expect("bit 63 is set")
        })
    }

    pub(crate) fn pool_object(kind: u64, shard: usize, handle: Handle) -> PageRef {
        let raw = handle.to_raw();
        debug_assert!(raw != 0 && raw & !HANDLE_MASK == 0);
        PageRef::from_raw(
            (kind << KIND_SHIFT) | ((shard as u64) << SHARD_SHIFT) | (raw & HANDLE_MASK),
        )
        .expect("pool handles are never zero")
    }

    /// The kind field of a pool object or a blob in the tier.
    pub(crate) fn blob_kind(self) -> Option<u64> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT == 0).then_some((raw >> KIND_SHIFT) & ((1 << KIND_BITS) - 1))
    }

    /// The kind field of a pool object (`None` for a same-filled word or a
    /// blob in the tier).
    pub(crate) fn pool_kind(self) -> Option<u64> {
        self.blob_kind().filter(|_| self.to_raw() & TIER_BIT == 0)
    }

    /// The reference of a blob moved to the tier below RAM.
    pub fn tier_ref(self) -> Option<TierRef> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT == 0 && raw & TIER_BIT != 0)
            .then(|| TierRef::from_raw(raw & HANDLE_MASK))
            .flatten()
    }

    pub(crate) fn in_tier(kind: u64, tier_ref: TierRef) -> PageRef {
        PageRef::from_raw((kind << KIND_SHIFT) | TIER_BIT | tier_ref.to_raw())
            .expect("tier references are never zero")
    }

    pub(crate) fn shard(self) -> usize {
        ((self.to_raw() >> SHARD_SHIFT) & ((1 << SHARD_BITS) - 1)) as usize
    }

    pub(crate) fn handle(self) -> Handle {
        Handle::from_raw(self.to_raw() & HANDLE_MASK)
    }

    /// The form the page is kept in.
    pub fn kind(self) -> RefKind {
        match self.blob_kind() {
            None | Some(KIND_WIDE_WORD) => RefKind::SameFilled,
            Some(KIND_RAW) => RefKind::Raw,
            Some(KIND_RECOMPRESSED) => RefKind::Compressed { codec: 1 },
            Some(_) => RefKind::Compressed { codec: 0 },
        }
    }

    /// The word of a same-filled page held in the reference itself.
    pub(crate) fn word(self) -> Option<u64> {
        let raw = self.to_raw();
        (raw & SAME_FILLED_BIT != 0).then_some((((raw << 1) as i64) >> 1) as u64)
    }

    /// True when the page takes pool memory.
    pub fn in_pool(self) -> bool {
        self.pool_kind().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_filled_words_round_trip_through_the_reference() {
        for word in [
            0,
            1,
            u64::MAX,
            0x3fff_ffff_ffff_ffff,
            0xc000_0000_0000_0000,
            0x0000_7fff_dead_beef,
        ] {
            let page_ref = PageRef::same_filled(word).expect("fits in 63 bits");
            assert_eq!(page_ref.kind(), RefKind::SameFilled);
            assert_eq!(page_ref.word(), Some(word));
            assert!(!page_ref.in_pool());
            assert_eq!(PageRef::from_raw(page_ref.to_raw()), Some(page_ref));
        }
        for word in [
            0x8000_0000_0000_0000u64,
            0x4000_0000_0000_0000,
            0x5555_5555_5555_5555,
        ] {
            assert_eq!(PageRef::same_filled(word), None, "{word:#x}");
        }
        assert_eq!(PageRef::from_raw(0), None);
    }

    #[test]
    fn pool_references_keep_kind_shard_and_handle() {
        let handle = Handle::from_raw((1 << Handle::BITS) - 1);
        for (kind, shard) in [
            (KIND_PRIMARY, 0),
            (KIND_RECOMPRESSED, 15),
            (KIND_RAW, 7),
            (KIND_WIDE_WORD, 3),
        ] {
            let page_ref = PageRef::pool_object(kind, shard, handle);
            assert_eq!(page_ref.pool_kind(), Some(kind));
            assert_eq!(page_ref.shard(), shard);
            assert_eq!(page_ref.handle(), handle);
            assert!(page_ref.in_pool());
        }
    }
}
