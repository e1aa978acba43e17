//! Packed storage of compressed page blobs behind handles.
//!
//! A compressed page is a blob of 1..=[`PAGE_SIZE`] bytes. Storing each blob
//! in its own page would save nothing, so a [`Pool`] packs many blobs into
//! whole 4 KiB pages and hands back an opaque [`Handle`] per blob. Memory is
//! accounted in the pages a pool holds, exactly as zram reports
//! `mem_used_total`.
//!
//! Three designs, chosen with [`PoolKind`]:
//! - [`PoolKind::SizeClass`]: Linux zsmalloc. 16-byte size classes, multi-page
//!   zspages, fullest-first allocation and compaction. Densest, and the only
//!   one that can give memory back after random frees.
//! - [`PoolKind::TriPage`]: Zircon `tri_page_storage`. At most three blobs per
//!   page, O(1) placement through a bucket bitmap, no per-page header.
//! - [`PoolKind::TwoSlot`]: Linux zbud. Two buddies per page; never worse
//!   than one blob per page, never better than two.
//!
//! [`PoolKind::packing`] gives a design's page count for blobs stored in
//! order and never freed from their lengths alone (see [`Packing`]): how
//! `zpage analyze` sizes pools for any amount of memory.
//!
//! Pools are single-threaded data structures (`&mut self` to change them);
//! callers that share one wrap it in a lock. Handles are checked on every
//! call: a stale, double-freed or foreign handle is a [`PoolError`], never a
//! panic or a read of someone else's bytes.
#![forbid(unsafe_code)]

mod error;
mod handle;
mod lists;
mod packing;
mod size_class;
mod slotted;
mod stats;
mod tri_page;
mod two_slot;

use std::fmt;
use std::str::FromStr;

pub use error::{PoolError, Result};
pub use handle::Handle;
pub use packing::{Packed, Packing};
pub use size_class::{class_size_for, huge_class_size, SizeClassPool};
pub use stats::{format_classes, ClassStats, CompactStats, PoolStats};
pub use tri_page::TriPagePool;
pub use two_slot::TwoSlotPool;

/// Size of the pages a pool is made of, and the largest blob it accepts (the
/// project's one page size).
pub use zpage_codec::PAGE_SIZE;

/// Packed storage for compressed blobs.
///
/// Contract shared by every implementation:
/// - `store` copies the blob; the caller keeps ownership of its buffer.
/// - A handle stays valid, and `get` keeps returning the same bytes, until
///   `free` is called with it, even across [`Pool::compact`].
/// - Blobs are contiguous in memory, so `get` never copies.
/// - Misuse (empty or oversized blob, stale or foreign handle) is reported as
///   a [`PoolError`] and leaves the pool unchanged.
/// - **[`Pool::get`] runs in a signal handler**: a region's SIGBUS handler
///   loads a page's blob through it (`zpage-store`'s `get_in_handler`,
///   under the pool's read lock). So `get` must be async-signal-safe for
///   every handle, live, stale or foreign: it allocates and frees nothing
///   (its errors carry only numbers and static names), takes no lock, makes
///   no system call, and never panics; it only reads the pool's own
///   memory. `tests/no_alloc.rs` checks the allocation part for every
///   design. The other methods run in normal context, under the caller's
///   write lock.
pub trait Pool: Send + Sync + fmt::Debug {
    /// Which design this pool implements.
    fn kind(&self) -> PoolKind;

    /// Copies `blob` (1..=[`PAGE_SIZE`] bytes) into the pool.
    ///
    /// Handles stay valid across compaction.
    fn store(&mut self, blob: &[u8]) -> Result<Handle>;

    /// The exact bytes stored under `handle`. Async-signal-safe (see the
    /// trait's contract): called from a region's SIGBUS handler.
    fn get(&self, handle: Handle) -> Result<&[u8]>;

    /// Frees the object and returns its length in bytes.
    ///
    /// Freeing twice, or freeing a handle this pool did not issue, is an
    /// error and changes nothing.
    fn free(&mut self, handle: Handle) -> Result<usize>;

    /// Moves objects to release memory (zsmalloc's `zs_compact`).
    ///
    /// Designs without compaction return zeros.
    fn compact(&mut self) -> CompactStats;

    /// Step `step` (from 0) of [`Pool::compact`], or `None` past the last
    /// one: a caller that locks the pool around each step lets the pool's
    /// readers in between (zsmalloc's `__zs_compact` stops when its lock is
    /// contended). Designs that compact in one go do it all at step 0.
    fn compact_step(&mut self, step: usize) -> Option<CompactStats> {
        (step == 0).then(|| self.compact())
    }

    /// Current counters; O(1), kept incrementally.
    fn stats(&self) -> PoolStats;

    /// Per-class (or per-bucket) occupancy table, like zsmalloc's debugfs
    /// `classes` file. Render it with [`format_classes`].
    fn classes(&self) -> Vec<ClassStats>;
}

/// The allocator designs this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum PoolKind {
    /// Linux zsmalloc: size classes over multi-page zspages, with compaction.
    SizeClass,
    /// Zircon `tri_page_storage`: left, middle and right slot per page.
    TriPage,
    /// Linux zbud: two buddies per page.
    TwoSlot,
}

impl PoolKind {
    /// The name of the design this kind reproduces, as printed in tables.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::SizeClass => "zsmalloc",
            PoolKind::TriPage => "tri-page",
            PoolKind::TwoSlot => "zbud",
        }
    }

    /// Every kind, densest design first.
    pub fn all() -> [PoolKind; 3] {
        [PoolKind::SizeClass, PoolKind::TriPage, PoolKind::TwoSlot]
    }

    /// A new, empty pool of this kind.
    pub fn build(self) -> Box<dyn Pool> {
        match self {
            PoolKind::SizeClass => Box::new(SizeClassPool::new()),
            PoolKind::TriPage => Box::new(TriPagePool::new()),
            PoolKind::TwoSlot => Box::new(TwoSlotPool::new()),
        }
    }

    /// This design's packing, from blob lengths alone: the pages and
    /// per-class table a pool of this kind would show after storing the
    /// same blobs in the same order with nothing freed.
    pub fn packing(self) -> Box<dyn Packing> {
        match self {
            PoolKind::SizeClass => Box::new(size_class::SizeClassPacking::new()),
            PoolKind::TriPage => Box::new(tri_page::TriPagePacking::new()),
            PoolKind::TwoSlot => Box::new(two_slot::TwoSlotPacking::new()),
        }
    }
}

impl fmt::Display for PoolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Accepted spellings for each kind, in the order error messages list them.
const KIND_SPELLINGS: [(&str, PoolKind); 7] = [
    ("zsmalloc", PoolKind::SizeClass),
    ("size-class", PoolKind::SizeClass),
    ("tri-page", PoolKind::TriPage),
    ("zircon", PoolKind::TriPage),
    ("three-slot", PoolKind::TriPage),
    ("zbud", PoolKind::TwoSlot),
    ("two-slot", PoolKind::TwoSlot),
];

impl FromStr for PoolKind {
    type Err = PoolError;

    fn from_str(text: &str) -> Result<PoolKind> {
        let wanted = text.trim().to_ascii_lowercase();
        KIND_SPELLINGS
            .iter()
            .find(|(spelling, _)| *spelling == wanted)
            .map(|&(_, kind)| kind)
            .ok_or_else(|| PoolError::UnknownKind {
                given: text.to_owned(),
                choices: KIND_SPELLINGS
                    .iter()
                    .map(|(s, _)| *s)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_parse_back() {
        for kind in PoolKind::all() {
            assert_eq!(kind.name().parse::<PoolKind>().unwrap(), kind);
            assert_eq!(kind.to_string(), kind.name());
            assert_eq!(kind.build().kind(), kind);
        }
        assert_eq!("Zircon".parse::<PoolKind>().unwrap(), PoolKind::TriPage);
        assert_eq!("two-slot".parse::<PoolKind>().unwrap(), PoolKind::TwoSlot);
        assert_eq!(
            "size-class".parse::<PoolKind>().unwrap(),
            PoolKind::SizeClass
        );
    }

    #[test]
    fn unknown_kind_lists_the_choices() {
        let message = "z3fold".parse::<PoolKind>().unwrap_err().to_string();
        assert!(message.contains("z3fold"), "{message}");
        assert!(
            message.contains("zsmalloc, size-class, tri-page"),
            "{message}"
        );
    }
}
