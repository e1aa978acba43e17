//! Linux zbud: two buddies per page.
//!
//! A page is 64 chunks of 64 B. The first chunk is zbud's header (kept
//! reserved here, though our bookkeeping lives outside the page); the first
//! buddy is left-justified after it and the last buddy right-justified at the
//! page end, so freeing either merges its space with the gap between them.
//! Pages with one buddy free sit in `unbuddied[free_chunks]`; allocation scans
//! those lists upward from the chunks it needs.
//!
//! zbud rejects blobs larger than `PAGE_SIZE - 2 chunks` (3968 B). This pool
//! instead gives such a blob a dedicated page, as zswap/zram would have stored
//! it some other way, so the `Pool` contract (any 1..=4096 bytes) holds.
//!
//! There is no compaction. [`Pool::classes`] reports one row per
//! `unbuddied` list, `class_size` being its free space in bytes
//! (`free_chunks * 64`), plus a row with `class_size` 0 for pages without a
//! free buddy (both buddies used, or a dedicated page).

use std::fmt;

use crate::lists::IdLists;
use crate::slotted::{SlotLens, SlottedPage, SlottedPages, SlottedRows, SLOTS};
use crate::PAGE_SIZE;
use crate::{ClassStats, CompactStats, Handle, Packed, Packing, Pool, PoolKind, PoolStats, Result};

/// `NCHUNKS_ORDER`: pages are split into 2^6 chunks.
const CHUNK_BYTES: usize = PAGE_SIZE >> 6;
/// Chunks available to buddies after the one-chunk header (`NCHUNKS`).
const BUDDY_CHUNKS: usize = (PAGE_SIZE - CHUNK_BYTES) / CHUNK_BYTES;
/// Largest blob zbud itself accepts.
const MAX_BUDDY_BYTES: usize = PAGE_SIZE - 2 * CHUNK_BYTES;

const _: () = assert!(BUDDY_CHUNKS == 63 && MAX_BUDDY_BYTES == 3968);

/// Slot numbers in a page.
const FIRST: usize = 0;
const LAST: usize = 1;
/// A whole page for a blob zbud would have rejected.
const DEDICATED: usize = 2;

fn chunks_for(len: usize) -> usize {
    len.div_ceil(CHUNK_BYTES)
}

fn free_chunks(lens: &SlotLens) -> usize {
    BUDDY_CHUNKS - chunks_for(usize::from(lens[FIRST])) - chunks_for(usize::from(lens[LAST]))
}

/// Where `zbud_alloc` puts a blob: a page of its own (too big for a buddy),
/// or a buddy in the newest page of the first non-empty `unbuddied` list
/// among `lists` (a new page when all are empty).
enum Placement {
    Dedicated,
    Buddy { lists: std::ops::Range<usize> },
}

fn placement(len: usize) -> Placement {
    if len > MAX_BUDDY_BYTES {
        Placement::Dedicated
    } else {
        Placement::Buddy {
            lists: chunks_for(len)..BUDDY_CHUNKS,
        }
    }
}

/// Where the blob of `bud` starts: after the header, right-justified, or at 0.
fn offset(page: &SlottedPage, bud: usize) -> usize {
    match bud {
        FIRST => CHUNK_BYTES,
        LAST => PAGE_SIZE - chunks_for(page.len(LAST)) * CHUNK_BYTES,
        _ => 0,
    }
}

/// The zbud pool. See the module docs.
pub struct TwoSlotPool {
    pages: SlottedPages,
    /// List `n` holds pages with one free buddy and `n` free chunks.
    unbuddied: IdLists,
}

impl fmt::Debug for TwoSlotPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoSlotPool")
            .field("stats", &self.pages.stats())
            .finish_non_exhaustive()
    }
}

impl Default for TwoSlotPool {
    fn default() -> TwoSlotPool {
        TwoSlotPool::new()
    }
}

impl TwoSlotPool {
    /// An empty pool.
    pub fn new() -> TwoSlotPool {
        TwoSlotPool {
            pages: SlottedPages::new(PoolKind::TwoSlot),
            unbuddied: IdLists::new(BUDDY_CHUNKS),
        }
    }

    /// `zbud_alloc`'s search: the newest page of the first non-empty list of
    /// `lists`, and which of its buddies is free.
    fn take_unbuddied(&mut self, lists: std::ops::Range<usize>) -> Option<(u32, usize)> {
        let id = lists
            .into_iter()
            .find_map(|free| self.unbuddied.newest(free))?;
        self.unbuddied.remove(id);
        let bud = if self.pages.page(id).len(FIRST) == 0 {
            FIRST
        } else {
            LAST
        };
        Some((id, bud))
    }
}

impl Pool for TwoSlotPool {
    fn kind(&self) -> PoolKind {
        PoolKind::TwoSlot
    }

    fn store(&mut self, blob: &[u8]) -> Result<Handle> {
        let len = blob.len();
        crate::error::check_blob_len(len)?;
        let (id, bud) = match placement(len) {
            Placement::Dedicated => (self.pages.new_page()?, DEDICATED),
            Placement::Buddy { lists } => match self.take_unbuddied(lists) {
                Some(found) => found,
                None => (self.pages.new_page()?, FIRST),
            },
        };
        // The last buddy is right-justified, so its offset depends on its length.
        let start = match bud {
            LAST => PAGE_SIZE - chunks_for(len) * CHUNK_BYTES,
            other => offset(self.pages.page(id), other),
        };
        let handle = self.pages.put(id, bud, start, blob);
        let page = self.pages.page(id);
        if bud != DEDICATED && (page.len(FIRST) == 0 || page.len(LAST) == 0) {
            self.unbuddied.push(free_chunks(page.lens()), id);
        }
        Ok(handle)
    }

    fn get(&self, handle: Handle) -> Result<&[u8]> {
        self.pages.blob(handle, offset)
    }

    fn free(&mut self, handle: Handle) -> Result<usize> {
        let (id, bud) = self.pages.resolve(handle)?;
        self.unbuddied.remove(id);
        let (len, released) = self.pages.clear(id, bud);
        if !released {
            let free = free_chunks(self.pages.page(id).lens());
            self.unbuddied.push(free, id);
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
                self.unbuddied
                    .list_of(id)
                    .map_or(0, |free| (free * CHUNK_BYTES) as u32)
            },
            |page| if page.len(DEDICATED) != 0 { 1 } else { 2 },
        )
    }
}

/// zbud's packing, replayed on lengths (see [`crate::packing`]): the pages
/// holding one buddy are kept per `unbuddied` list; a page with two buddies,
/// or a dedicated one, takes nothing more and is only counted.
#[derive(Debug)]
pub(crate) struct TwoSlotPacking {
    /// `unbuddied[n]`: the length of the one buddy of each page with `n`
    /// free chunks, newest last (the order the pool's list hands them out).
    unbuddied: Vec<Vec<u16>>,
    /// Table rows of the pages no blob can join any more (class 0).
    closed: SlottedRows,
    totals: Packed,
}

impl TwoSlotPacking {
    pub(crate) fn new() -> Self {
        Self {
            unbuddied: vec![Vec::new(); BUDDY_CHUNKS],
            closed: SlottedRows::default(),
            totals: Packed::default(),
        }
    }
}

impl Packing for TwoSlotPacking {
    fn kind(&self) -> PoolKind {
        PoolKind::TwoSlot
    }

    fn add(&mut self, len: usize) -> Result<()> {
        self.totals.add_object(len)?;
        let len16 = len as u16;
        match placement(len) {
            Placement::Dedicated => {
                self.totals.pages += 1;
                let mut lens = [0; SLOTS];
                lens[DEDICATED] = len16;
                self.closed.add_page(0, &lens, 1);
            }
            Placement::Buddy { lists } => {
                match lists
                    .into_iter()
                    .find_map(|free| self.unbuddied[free].pop())
                {
                    Some(other) => self.closed.add_page(0, &[other, len16, 0], 2),
                    None => {
                        self.totals.pages += 1;
                        let lens = [len16, 0, 0];
                        self.unbuddied[free_chunks(&lens)].push(len16);
                    }
                }
            }
        }
        Ok(())
    }

    fn packed(&self) -> Packed {
        self.totals
    }

    fn classes(&self) -> Vec<ClassStats> {
        let mut rows = self.closed.clone();
        for (free, buddies) in self.unbuddied.iter().enumerate() {
            for &len in buddies {
                rows.add_page((free * CHUNK_BYTES) as u32, &[len, 0, 0], 2);
            }
        }
        rows.into_rows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddies_are_justified_to_both_ends() {
        let mut pool = TwoSlotPool::new();
        let first = pool.store(&[1u8; 1000]).unwrap();
        let last = pool.store(&[2u8; 2000]).unwrap();
        assert_eq!(pool.stats().pages, 1);
        let page = pool.pages.page(0);
        assert_eq!(offset(page, FIRST), 64);
        assert_eq!(offset(page, LAST), PAGE_SIZE - 32 * 64);
        assert_eq!(pool.get(first).unwrap(), &[1u8; 1000][..]);
        assert_eq!(pool.get(last).unwrap(), &[2u8; 2000][..]);
        // A third blob needs a new page: at most two per page.
        pool.store(&[3u8; 10]).unwrap();
        assert_eq!(pool.stats().pages, 2);
    }

    #[test]
    fn blobs_too_big_for_a_buddy_get_a_dedicated_page() {
        let mut pool = TwoSlotPool::new();
        let big = pool.store(&[9u8; MAX_BUDDY_BYTES + 1]).unwrap();
        pool.store(&[1u8; 10]).unwrap();
        assert_eq!(pool.stats().pages, 2);
        assert_eq!(pool.free(big).unwrap(), MAX_BUDDY_BYTES + 1);
        assert_eq!(pool.stats().pages, 1);
    }
}
