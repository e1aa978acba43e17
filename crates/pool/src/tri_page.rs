//! Zircon `tri_page_storage`: up to three blobs per page, no in-page header.
//!
//! A page has a left slot `[0, L)`, a middle slot centred on the page's
//! midpoint and a right slot `[PAGE_SIZE - R, PAGE_SIZE)`; only the three
//! lengths are recorded, outside the page. Pages with room sit in one of 64
//! buckets keyed by their largest free slot rounded down to 64 B; a `u64`
//! bitmap of non-empty buckets and a trailing-zeros count find the smallest
//! bucket that surely fits a blob in O(1). Within the page, the slot that
//! leaves the most room behind is chosen (`select_slot`).
//!
//! There is no compaction: holes stay until their neighbours are freed, and a
//! page never holds more than three blobs, so small blobs waste space.
//!
//! [`Pool::classes`] reports one row per bucket, `class_size` being the
//! bucket's guaranteed free slot `(bucket + 1) * 64`, plus a row with
//! `class_size` 0 for full pages (no free slot of 64 B or more).

use std::fmt;

use crate::lists::IdLists;
use crate::slotted::{SlotLens, SlottedPages, SlottedRows, SLOTS};
use crate::PAGE_SIZE;
use crate::{ClassStats, CompactStats, Handle, Packed, Packing, Pool, PoolKind, PoolStats, Result};

/// Width of one bucket (`kBucketSize = PAGE_SIZE / 64`).
const BUCKET_BYTES: usize = PAGE_SIZE / 64;
const BUCKETS: usize = PAGE_SIZE / BUCKET_BYTES;
const _: () = assert!(BUCKETS == 64, "the bucket bitmap is one u64");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Left = 0,
    Mid = 1,
    Right = 2,
}

/// Start of a middle blob of `len` bytes; rounding `len` up to even keeps the
/// same offset valid as the free space on either side.
fn mid_offset_for_len(len: usize) -> usize {
    PAGE_SIZE / 2 - len.div_ceil(2)
}

/// Room the middle slot would have with these side lengths.
fn mid_room_with(left: usize, right: usize) -> usize {
    let side = left.max(right);
    if side >= PAGE_SIZE / 2 {
        0
    } else {
        (PAGE_SIZE / 2 - side) * 2
    }
}

fn len(lens: &SlotLens, slot: Slot) -> usize {
    usize::from(lens[slot as usize])
}

/// Where a blob of `len` bytes starts in `slot`.
fn offset(slot: usize, len: usize) -> usize {
    match slot {
        0 => 0,
        1 => mid_offset_for_len(len),
        _ => PAGE_SIZE - len,
    }
}

fn room(lens: &SlotLens, slot: Slot) -> usize {
    let (left, mid, right) = (
        len(lens, Slot::Left),
        len(lens, Slot::Mid),
        len(lens, Slot::Right),
    );
    if len(lens, slot) != 0 {
        return 0;
    }
    match slot {
        Slot::Left if mid != 0 => mid_offset_for_len(mid),
        Slot::Left => PAGE_SIZE - right,
        Slot::Right if mid != 0 => mid_offset_for_len(mid),
        Slot::Right => PAGE_SIZE - left,
        Slot::Mid => mid_room_with(left, right),
    }
}

fn largest_room(lens: &SlotLens) -> usize {
    [Slot::Left, Slot::Mid, Slot::Right]
        .map(|slot| room(lens, slot))
        .into_iter()
        .max()
        .unwrap_or(0)
}

fn is_full(lens: &SlotLens) -> bool {
    largest_room(lens) < BUCKET_BYTES
}

/// The bucket of a page that is neither full nor empty: its largest free slot, in 64 B steps.
fn bucket_of(lens: &SlotLens) -> usize {
    largest_room(lens) / BUCKET_BYTES - 1
}

/// `AllocateBucketLocked`'s choice: the smallest non-empty bucket (bit set
/// in `non_empty_buckets`) whose pages all fit `len`.
fn bucket_that_fits(non_empty_buckets: u64, len: usize) -> Option<usize> {
    let first_bucket = (len - 1) / BUCKET_BYTES;
    let candidates = non_empty_buckets & !((1u64 << first_bucket) - 1);
    (candidates != 0).then(|| candidates.trailing_zeros() as usize)
}

/// The slot a blob of `len` bytes takes in a page its bucket promised room in.
fn slot_in_bucketed_page(lens: &SlotLens, len: usize) -> Slot {
    let slot = select_slot(lens, len);
    debug_assert!(slot.is_some(), "bucket promised room for {len} bytes");
    slot.unwrap_or(Slot::Left)
}

/// `select_slot`: of the slots that fit `len`, the one leaving the most
/// room; left wins ties with right.
fn select_slot(lens: &SlotLens, len_needed: usize) -> Option<Slot> {
    let mut choice = (room(lens, Slot::Left) >= len_needed).then_some(Slot::Left);
    if room(lens, Slot::Mid) >= len_needed {
        choice = match choice {
            None => Some(Slot::Mid),
            Some(_) => {
                let side_room_after_mid = mid_offset_for_len(len_needed);
                let mid_room_after_left = mid_room_with(len_needed, len(lens, Slot::Right));
                Some(if side_room_after_mid > mid_room_after_left {
                    Slot::Mid
                } else {
                    Slot::Left
                })
            }
        };
    }
    if room(lens, Slot::Right) >= len_needed {
        choice = match choice {
            None => Some(Slot::Right),
            Some(Slot::Mid) => {
                let side_room_after_mid = mid_offset_for_len(len_needed);
                let mid_room_after_right = mid_room_with(len(lens, Slot::Left), len_needed);
                Some(if mid_room_after_right > side_room_after_mid {
                    Slot::Right
                } else {
                    Slot::Mid
                })
            }
            other => other,
        };
    }
    choice
}

/// The Zircon tri-page pool. See the module docs.
pub struct TriPagePool {
    pages: SlottedPages,
    buckets: IdLists,
    /// Bit `b` is set when bucket `b` has a page.
    non_empty_buckets: u64,
}

impl fmt::Debug for TriPagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TriPagePool")
            .field(
                "non_empty_buckets",
                &format_args!("{:#018x}", self.non_empty_buckets),
            )
            .field("stats", &self.pages.stats())
            .finish_non_exhaustive()
    }
}

impl Default for TriPagePool {
    fn default() -> TriPagePool {
        TriPagePool::new()
    }
}

impl TriPagePool {
    /// An empty pool.
    pub fn new() -> TriPagePool {
        TriPagePool {
            pages: SlottedPages::new(PoolKind::TriPage),
            buckets: IdLists::new(BUCKETS),
            non_empty_buckets: 0,
        }
    }

    /// Files a non-full, non-empty page under its largest free slot.
    fn insert_into_bucket(&mut self, id: u32) {
        let page = self.pages.page(id);
        debug_assert!(!is_full(page.lens()) && !page.is_empty());
        let bucket = bucket_of(page.lens());
        self.buckets.push(bucket, id);
        self.non_empty_buckets |= 1 << bucket;
    }

    fn remove_from_bucket(&mut self, id: u32) {
        if let Some(bucket) = self.buckets.remove(id) {
            if self.buckets.len(bucket) == 0 {
                self.non_empty_buckets &= !(1 << bucket);
            }
        }
    }

    /// `AllocateBucketLocked`: a page from the smallest bucket whose pages all
    /// fit `len`.
    fn take_page_that_fits(&mut self, len: usize) -> Option<u32> {
        let bucket = bucket_that_fits(self.non_empty_buckets, len)?;
        let id = self.buckets.newest(bucket)?;
        self.remove_from_bucket(id);
        Some(id)
    }
}

impl Pool for TriPagePool {
    fn kind(&self) -> PoolKind {
        PoolKind::TriPage
    }

    fn store(&mut self, blob: &[u8]) -> Result<Handle> {
        let len = blob.len();
        crate::error::check_blob_len(len)?;
        let (id, slot) = match self.take_page_that_fits(len) {
            Some(id) => (id, slot_in_bucketed_page(self.pages.page(id).lens(), len)),
            None => (self.pages.new_page()?, Slot::Left),
        };
        let handle = self
            .pages
            .put(id, slot as usize, offset(slot as usize, len), blob);
        if !is_full(self.pages.page(id).lens()) {
            self.insert_into_bucket(id);
        }
        Ok(handle)
    }

    fn get(&self, handle: Handle) -> Result<&[u8]> {
        self.pages
            .blob(handle, |page, slot| offset(slot, page.len(slot)))
    }

    fn free(&mut self, handle: Handle) -> Result<usize> {
        let (id, slot) = self.pages.resolve(handle)?;
        self.remove_from_bucket(id);
        let (len, released) = self.pages.clear(id, slot);
        // Still full is possible: a small side blob freed next to a large
        // middle blob leaves less than a bucket of room.
        if !released && !is_full(self.pages.page(id).lens()) {
            self.insert_into_bucket(id);
        }
        Ok(len)
    }

    fn compact(&mut self) -> CompactStats {
        CompactStats::default()
    }

    fn stats(&self) -> PoolStats {
        self.pages.stats()
    }

    fn classes(&self) -> Vec<ClassStats> {
        self.pages.classes(
            |id| {
                self.buckets
                    .list_of(id)
                    .map_or(0, |bucket| ((bucket + 1) * BUCKET_BYTES) as u32)
            },
            |_| 3,
        )
    }
}

/// The tri-page packing, replayed on slot lengths (see [`crate::packing`]):
/// the pages with room are kept per bucket as their three slot lengths; a
/// full page takes nothing more and is only counted.
#[derive(Debug)]
pub(crate) struct TriPagePacking {
    /// `buckets[b]`: the slot lengths of the pages in bucket `b`, newest
    /// last (the order the pool's buckets hand them out).
    buckets: Vec<Vec<SlotLens>>,
    /// Bit `b` is set when bucket `b` has a page.
    non_empty_buckets: u64,
    /// Table rows of the full pages (class 0).
    full: SlottedRows,
    totals: Packed,
}

impl TriPagePacking {
    pub(crate) fn new() -> Self {
        Self {
            buckets: vec![Vec::new(); BUCKETS],
            non_empty_buckets: 0,
            full: SlottedRows::default(),
            totals: Packed::default(),
        }
    }

    fn take_page_that_fits(&mut self, len: usize) -> Option<SlotLens> {
        let bucket = bucket_that_fits(self.non_empty_buckets, len)?;
        let lens = self.buckets[bucket].pop();
        if self.buckets[bucket].is_empty() {
            self.non_empty_buckets &= !(1 << bucket);
        }
        lens
    }
}

impl Packing for TriPagePacking {
    fn kind(&self) -> PoolKind {
        PoolKind::TriPage
    }

    fn add(&mut self, len: usize) -> Result<()> {
        self.totals.add_object(len)?;
        let (mut lens, slot) = match self.take_page_that_fits(len) {
            Some(lens) => (lens, slot_in_bucketed_page(&lens, len)),
            None => {
                self.totals.pages += 1;
                ([0; SLOTS], Slot::Left)
            }
        };
        lens[slot as usize] = len as u16;
        if is_full(&lens) {
            self.full.add_page(0, &lens, 3);
        } else {
            let bucket = bucket_of(&lens);
            self.buckets[bucket].push(lens);
            self.non_empty_buckets |= 1 << bucket;
        }
        Ok(())
    }

    fn packed(&self) -> Packed {
        self.totals
    }

    fn classes(&self) -> Vec<ClassStats> {
        let mut rows = self.full.clone();
        for (bucket, pages) in self.buckets.iter().enumerate() {
            for lens in pages {
                rows.add_page(((bucket + 1) * BUCKET_BYTES) as u32, lens, 3);
            }
        }
        rows.into_rows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_blobs_share_a_page_and_keep_their_bytes() {
        let mut pool = TriPagePool::new();
        let blobs: Vec<Vec<u8>> = [1300usize, 1301, 1200]
            .iter()
            .map(|&n| vec![n as u8; n])
            .collect();
        let handles: Vec<Handle> = blobs.iter().map(|b| pool.store(b).unwrap()).collect();
        assert_eq!(pool.stats().pages, 1);
        for (handle, blob) in handles.iter().zip(&blobs) {
            assert_eq!(pool.get(*handle).unwrap(), blob.as_slice());
        }
        // Left, right, then middle: the second blob took the slot leaving most room.
        let slots: Vec<u64> = handles.iter().map(|h| (h.to_raw() >> 32) & 3).collect();
        assert_eq!(slots, vec![0, 2, 1]);
    }

    #[test]
    fn whole_page_blob_fills_a_page() {
        let mut pool = TriPagePool::new();
        pool.store(&[7u8; PAGE_SIZE]).unwrap();
        pool.store(&[8u8; 10]).unwrap();
        assert_eq!(pool.stats().pages, 2);
    }

    #[test]
    fn middle_slot_is_centred() {
        assert_eq!(mid_offset_for_len(100), 1998);
        assert_eq!(mid_offset_for_len(101), 1997);
        assert_eq!(mid_room_with(1000, 10), 2096);
    }
}
