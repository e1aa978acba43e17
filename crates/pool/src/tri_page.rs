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

use std::collections::BTreeMap;
use std::fmt;
use std::mem::size_of;

use crate::handle::{Generation, HandleCodec};
use crate::lists::IdLists;
use crate::stats::{fullness_column, Counters};
use crate::PAGE_SIZE;
use crate::{ClassStats, CompactStats, Handle, Pool, PoolError, PoolKind, PoolStats, Result};

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

impl Slot {
    fn from_tag(tag: u8) -> Option<Slot> {
        match tag {
            0 => Some(Slot::Left),
            1 => Some(Slot::Mid),
            2 => Some(Slot::Right),
            _ => None,
        }
    }
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

/// Per-page record (what Zircon keeps in `vm_page_t::zram`).
struct TriPage {
    /// `None` while the page id is free for reuse.
    memory: Option<Box<[u8]>>,
    /// Blob length per slot; 0 means free.
    lens: [u16; 3],
    /// Bumped on each store into the slot, so old handles go stale.
    generations: [Generation; 3],
}

impl TriPage {
    fn len(&self, slot: Slot) -> usize {
        usize::from(self.lens[slot as usize])
    }

    fn room(&self, slot: Slot) -> usize {
        let (left, mid, right) = (
            self.len(Slot::Left),
            self.len(Slot::Mid),
            self.len(Slot::Right),
        );
        if self.len(slot) != 0 {
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

    fn largest_room(&self) -> usize {
        [Slot::Left, Slot::Mid, Slot::Right]
            .map(|slot| self.room(slot))
            .into_iter()
            .max()
            .unwrap_or(0)
    }

    fn is_full(&self) -> bool {
        self.largest_room() < BUCKET_BYTES
    }

    fn is_empty(&self) -> bool {
        self.lens == [0; 3]
    }

    fn used_bytes(&self) -> u64 {
        self.lens.iter().map(|&len| u64::from(len)).sum()
    }

    fn offset(slot: Slot, len: usize) -> usize {
        match slot {
            Slot::Left => 0,
            Slot::Mid => mid_offset_for_len(len),
            Slot::Right => PAGE_SIZE - len,
        }
    }

    /// `select_slot`: of the slots that fit `len`, the one leaving the most
    /// room; left wins ties with right.
    fn select_slot(&self, len: usize) -> Option<Slot> {
        let mut choice = (self.room(Slot::Left) >= len).then_some(Slot::Left);
        if self.room(Slot::Mid) >= len {
            choice = match choice {
                None => Some(Slot::Mid),
                Some(_) => {
                    let side_room_after_mid = mid_offset_for_len(len);
                    let mid_room_after_left = mid_room_with(len, self.len(Slot::Right));
                    Some(if side_room_after_mid > mid_room_after_left {
                        Slot::Mid
                    } else {
                        Slot::Left
                    })
                }
            };
        }
        if self.room(Slot::Right) >= len {
            choice = match choice {
                None => Some(Slot::Right),
                Some(Slot::Mid) => {
                    let side_room_after_mid = mid_offset_for_len(len);
                    let mid_room_after_right = mid_room_with(self.len(Slot::Left), len);
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
}

/// The Zircon tri-page pool. See the module docs.
pub struct TriPagePool {
    codec: HandleCodec,
    pages: Vec<TriPage>,
    vacant_page_ids: Vec<u32>,
    buckets: IdLists,
    /// Bit `b` is set when bucket `b` has a page.
    non_empty_buckets: u64,
    counters: Counters,
}

impl fmt::Debug for TriPagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TriPagePool")
            .field(
                "non_empty_buckets",
                &format_args!("{:#018x}", self.non_empty_buckets),
            )
            .field("stats", &self.counters.snapshot())
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
            codec: HandleCodec::new(PoolKind::TriPage),
            pages: Vec::new(),
            vacant_page_ids: Vec::new(),
            buckets: IdLists::new(BUCKETS),
            non_empty_buckets: 0,
            counters: Counters::default(),
        }
    }

    /// Files a non-full, non-empty page under its largest free slot.
    fn insert_into_bucket(&mut self, id: u32) {
        let page = &self.pages[id as usize];
        debug_assert!(!page.is_full() && !page.is_empty());
        let bucket = page.largest_room() / BUCKET_BYTES - 1;
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
        let first_bucket = (len - 1) / BUCKET_BYTES;
        let candidates = self.non_empty_buckets & !((1u64 << first_bucket) - 1);
        if candidates == 0 {
            return None;
        }
        let bucket = candidates.trailing_zeros() as usize;
        let id = self.buckets.newest(bucket)?;
        self.remove_from_bucket(id);
        Some(id)
    }

    fn new_page(&mut self) -> u32 {
        self.counters.pages_added(1);
        let memory = Some(vec![0u8; PAGE_SIZE].into_boxed_slice());
        match self.vacant_page_ids.pop() {
            Some(id) => {
                self.pages[id as usize].memory = memory;
                id
            }
            None => {
                self.pages.push(TriPage {
                    memory,
                    lens: [0; 3],
                    generations: [Generation::FIRST; 3],
                });
                self.counters.metadata_grew(size_of::<TriPage>());
                (self.pages.len() - 1) as u32
            }
        }
    }

    /// Validates `handle`; returns the page id and slot of a live blob.
    fn resolve(&self, handle: Handle) -> Result<(u32, Slot)> {
        let decoded = self.codec.decode(handle)?;
        let slot = Slot::from_tag(decoded.slot).ok_or_else(|| self.codec.foreign(handle))?;
        let page = self
            .pages
            .get(decoded.index as usize)
            .ok_or_else(|| self.codec.foreign(handle))?;
        if page.memory.is_none()
            || page.len(slot) == 0
            || page.generations[slot as usize] != decoded.generation
        {
            return Err(PoolError::StaleHandle {
                raw: handle.to_raw(),
            });
        }
        Ok((decoded.index, slot))
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
            Some(id) => {
                let slot = self.pages[id as usize].select_slot(len);
                debug_assert!(slot.is_some(), "bucket {id} promised room for {len} bytes");
                (id, slot.unwrap_or(Slot::Left))
            }
            None => (self.new_page(), Slot::Left),
        };
        let page = &mut self.pages[id as usize];
        page.lens[slot as usize] = len as u16;
        let generation = page.generations[slot as usize].next();
        page.generations[slot as usize] = generation;
        let offset = TriPage::offset(slot, len);
        if let Some(memory) = page.memory.as_mut() {
            memory[offset..offset + len].copy_from_slice(blob);
        }
        if !page.is_full() {
            self.insert_into_bucket(id);
        }
        self.counters.object_stored(len);
        Ok(self.codec.encode(id, slot as u8, generation))
    }

    fn get(&self, handle: Handle) -> Result<&[u8]> {
        let (id, slot) = self.resolve(handle)?;
        let page = &self.pages[id as usize];
        let len = page.len(slot);
        let offset = TriPage::offset(slot, len);
        let memory = page.memory.as_deref().ok_or(PoolError::StaleHandle {
            raw: handle.to_raw(),
        })?;
        Ok(&memory[offset..offset + len])
    }

    fn free(&mut self, handle: Handle) -> Result<usize> {
        let (id, slot) = self.resolve(handle)?;
        self.remove_from_bucket(id);
        let page = &mut self.pages[id as usize];
        let len = page.len(slot);
        page.lens[slot as usize] = 0;
        if page.is_empty() {
            page.memory = None;
            self.vacant_page_ids.push(id);
            self.counters.pages_released(1);
        } else if !page.is_full() {
            // Still full is possible: a small side blob freed next to a large
            // middle blob leaves less than a bucket of room.
            self.insert_into_bucket(id);
        }
        self.counters.object_freed(len);
        Ok(len)
    }

    fn compact(&mut self) -> CompactStats {
        CompactStats::default()
    }

    fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    fn classes(&self) -> Vec<ClassStats> {
        let mut rows: BTreeMap<u32, ClassStats> = BTreeMap::new();
        for (id, page) in self.pages.iter().enumerate() {
            if page.memory.is_none() {
                continue;
            }
            let class_size = self
                .buckets
                .list_of(id as u32)
                .map_or(0, |bucket| ((bucket + 1) * BUCKET_BYTES) as u32);
            let row = rows.entry(class_size).or_insert_with(|| ClassStats {
                class_size,
                fullness: [0; 11],
                objects_allocated: 0,
                objects_used: 0,
                pages_used: 0,
                pages_per_span: 1,
                freeable_pages: 0,
            });
            row.fullness[fullness_column(page.used_bytes(), PAGE_SIZE as u64)] += 1;
            row.objects_allocated += 3;
            row.objects_used += page.lens.iter().filter(|&&len| len != 0).count() as u64;
            row.pages_used += 1;
        }
        rows.into_values().collect()
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
