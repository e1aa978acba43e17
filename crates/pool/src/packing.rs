//! The pages a pool needs for blobs stored one after another and never
//! freed, computed from their lengths alone: what `zpage analyze` reports
//! for any amount of memory without holding the blobs.
//!
//! Each design answers by its own rule, in the module of the pool that
//! follows the same rule (so the two cannot drift apart; a test compares
//! them on the same lengths):
//!
//! - **Size classes** (`size_class.rs`): a closed form. A blob always goes
//!   to the fullest zspage of its class that has room, so with nothing freed
//!   a class holds at most one partly filled zspage, and `n` objects take
//!   `ceil(n / objs_per_zspage)` zspages of `pages_per_zspage` pages. The
//!   figure is a function of the per-class object counts (the histogram of
//!   lengths, bucketed by class), whatever their order. zram's
//!   `mem_used_total` after writing pages to a fresh device is this figure.
//! - **zbud** (`two_slot.rs`): no closed form; the page count depends on the
//!   order. In chunks of 64 B (63 per page), 40, 30, 23, 33 pair up as
//!   (40, 23) and (30, 33): two pages; 23, 30, 33, 40 pair (23, 30) first,
//!   and 33 and 40 do not fit together: three pages. So the stores are
//!   replayed in order on lengths alone. A page that has its second buddy is
//!   never chosen again and is only counted; what is kept is the pages
//!   holding one buddy, per free-chunk list, newest last as the pool's lists
//!   hand them out (2 bytes each: the buddy's length, for the fullness table).
//! - **tri-page** (`tri_page.rs`): no closed form either (where a blob goes
//!   depends on the three slot lengths of the page the bucket hands out), so
//!   it is replayed the same way: a full page is only counted; the pages with
//!   room are kept per bucket, newest last, as their three slot lengths
//!   (6 bytes each).
//!
//! Memory: the size-class form holds one counter per class. The replays hold
//! at most one record per page with room, and a pool never has more pages
//! than blobs: at most 6 bytes per 4 KiB page analysed (1.5 MiB per GiB,
//! twice that while a stack grows).

use std::fmt;

use crate::{ClassStats, PoolKind, Result, PAGE_SIZE};

/// What a [`Packing`] has counted: the figures [`crate::PoolStats`] would show for a
/// pool that stored the same blobs in the same order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Packed {
    /// Blobs stored.
    pub objects: u64,
    /// Sum of their lengths.
    pub stored_bytes: u64,
    /// 4 KiB pages the pool would hold.
    pub pages: u64,
}

impl Packed {
    /// `pages * PAGE_SIZE`: what zram reports as `mem_used_total`.
    pub fn memory_used_bytes(&self) -> u64 {
        self.pages * PAGE_SIZE as u64
    }

    /// Counts one blob of `len` bytes (checked as [`crate::Pool::store`] checks it).
    pub(crate) fn add_object(&mut self, len: usize) -> Result<()> {
        crate::error::check_blob_len(len)?;
        self.objects += 1;
        self.stored_bytes += len as u64;
        Ok(())
    }
}

/// A pool design's packing of blobs stored in order and never freed, from
/// their lengths: the pages and per-class table the pool itself would show,
/// without the blobs. Build one with [`PoolKind::packing`].
pub trait Packing: Send + fmt::Debug {
    /// Which design this is the packing of.
    fn kind(&self) -> PoolKind;

    /// Counts the next blob stored, `len` bytes (1..=[`PAGE_SIZE`]).
    fn add(&mut self, len: usize) -> Result<()>;

    /// The totals so far.
    fn packed(&self) -> Packed;

    /// The per-class table [`crate::Pool::classes`] would show.
    fn classes(&self) -> Vec<ClassStats>;
}
