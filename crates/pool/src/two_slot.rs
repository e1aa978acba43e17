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

use std::collections::BTreeMap;
use std::fmt;
use std::mem::size_of;

use crate::handle::{Generation, HandleCodec};
use crate::lists::IdLists;
use crate::stats::{fullness_column, Counters};
use crate::PAGE_SIZE;
use crate::{ClassStats, CompactStats, Handle, Pool, PoolError, PoolKind, PoolStats, Result};

/// `NCHUNKS_ORDER`: pages are split into 2^6 chunks.
const CHUNK_BYTES: usize = PAGE_SIZE >> 6;
/// Chunks available to buddies after the one-chunk header (`NCHUNKS`).
const BUDDY_CHUNKS: usize = (PAGE_SIZE - CHUNK_BYTES) / CHUNK_BYTES;
/// Largest blob zbud itself accepts.
const MAX_BUDDY_BYTES: usize = PAGE_SIZE - 2 * CHUNK_BYTES;

const _: () = assert!(BUDDY_CHUNKS == 63 && MAX_BUDDY_BYTES == 3968);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bud {
    First = 0,
    Last = 1,
    /// A whole page for a blob zbud would have rejected.
    Dedicated = 2,
}

impl Bud {
    fn from_tag(tag: u8) -> Option<Bud> {
        match tag {
            0 => Some(Bud::First),
            1 => Some(Bud::Last),
            2 => Some(Bud::Dedicated),
            _ => None,
        }
    }
}

fn chunks_for(len: usize) -> usize {
    len.div_ceil(CHUNK_BYTES)
}

/// Per-page record (zbud's `struct zbud_header`, kept outside the page).
struct BudPage {
    /// `None` while the page id is free for reuse.
    memory: Option<Box<[u8]>>,
    /// Blob length per [`Bud`]; 0 means free.
    lens: [u16; 3],
    generations: [Generation; 3],
}

impl BudPage {
    fn len(&self, bud: Bud) -> usize {
        usize::from(self.lens[bud as usize])
    }

    fn free_chunks(&self) -> usize {
        BUDDY_CHUNKS - chunks_for(self.len(Bud::First)) - chunks_for(self.len(Bud::Last))
    }

    fn is_empty(&self) -> bool {
        self.lens == [0; 3]
    }

    fn offset(&self, bud: Bud) -> usize {
        match bud {
            Bud::First => CHUNK_BYTES,
            Bud::Last => PAGE_SIZE - chunks_for(self.len(Bud::Last)) * CHUNK_BYTES,
            Bud::Dedicated => 0,
        }
    }
}

/// The zbud pool. See the module docs.
pub struct TwoSlotPool {
    codec: HandleCodec,
    pages: Vec<BudPage>,
    vacant_page_ids: Vec<u32>,
    /// List `n` holds pages with one free buddy and `n` free chunks.
    unbuddied: IdLists,
    counters: Counters,
}

impl fmt::Debug for TwoSlotPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoSlotPool")
            .field("stats", &self.counters.snapshot())
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
            codec: HandleCodec::new(PoolKind::TwoSlot),
            pages: Vec::new(),
            vacant_page_ids: Vec::new(),
            unbuddied: IdLists::new(BUDDY_CHUNKS),
            counters: Counters::default(),
        }
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
                self.pages.push(BudPage {
                    memory,
                    lens: [0; 3],
                    generations: [Generation::FIRST; 3],
                });
                self.counters.metadata_grew(size_of::<BudPage>());
                (self.pages.len() - 1) as u32
            }
        }
    }

    /// `zbud_alloc`'s search: the first unbuddied page with enough chunks,
    /// and which of its buddies is free.
    fn take_unbuddied(&mut self, chunks: usize) -> Option<(u32, Bud)> {
        let id = (chunks..BUDDY_CHUNKS).find_map(|free| self.unbuddied.newest(free))?;
        self.unbuddied.remove(id);
        let bud = if self.pages[id as usize].len(Bud::First) == 0 {
            Bud::First
        } else {
            Bud::Last
        };
        Some((id, bud))
    }

    fn resolve(&self, handle: Handle) -> Result<(u32, Bud)> {
        let decoded = self.codec.decode(handle)?;
        let bud = Bud::from_tag(decoded.slot).ok_or_else(|| self.codec.foreign(handle))?;
        let page = self
            .pages
            .get(decoded.index as usize)
            .ok_or_else(|| self.codec.foreign(handle))?;
        if page.memory.is_none()
            || page.len(bud) == 0
            || page.generations[bud as usize] != decoded.generation
        {
            return Err(PoolError::StaleHandle {
                raw: handle.to_raw(),
            });
        }
        Ok((decoded.index, bud))
    }
}

impl Pool for TwoSlotPool {
    fn kind(&self) -> PoolKind {
        PoolKind::TwoSlot
    }

    fn store(&mut self, blob: &[u8]) -> Result<Handle> {
        let len = blob.len();
        crate::error::check_blob_len(len)?;
        let (id, bud) = if len > MAX_BUDDY_BYTES {
            (self.new_page(), Bud::Dedicated)
        } else {
            match self.take_unbuddied(chunks_for(len)) {
                Some(found) => found,
                None => (self.new_page(), Bud::First),
            }
        };
        let page = &mut self.pages[id as usize];
        page.lens[bud as usize] = len as u16;
        let generation = page.generations[bud as usize].next();
        page.generations[bud as usize] = generation;
        let offset = page.offset(bud);
        if let Some(memory) = page.memory.as_mut() {
            memory[offset..offset + len].copy_from_slice(blob);
        }
        if bud != Bud::Dedicated && (page.len(Bud::First) == 0 || page.len(Bud::Last) == 0) {
            let free = page.free_chunks();
            self.unbuddied.push(free, id);
        }
        self.counters.object_stored(len);
        Ok(self.codec.encode(id, bud as u8, generation))
    }

    fn get(&self, handle: Handle) -> Result<&[u8]> {
        let (id, bud) = self.resolve(handle)?;
        let page = &self.pages[id as usize];
        let offset = page.offset(bud);
        let memory = page.memory.as_deref().ok_or(PoolError::StaleHandle {
            raw: handle.to_raw(),
        })?;
        Ok(&memory[offset..offset + page.len(bud)])
    }

    fn free(&mut self, handle: Handle) -> Result<usize> {
        let (id, bud) = self.resolve(handle)?;
        self.unbuddied.remove(id);
        let page = &mut self.pages[id as usize];
        let len = page.len(bud);
        page.lens[bud as usize] = 0;
        if page.is_empty() {
            page.memory = None;
            self.vacant_page_ids.push(id);
            self.counters.pages_released(1);
        } else {
            let free = page.free_chunks();
            self.unbuddied.push(free, id);
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
                .unbuddied
                .list_of(id as u32)
                .map_or(0, |free| (free * CHUNK_BYTES) as u32);
            let row = rows.entry(class_size).or_insert_with(|| ClassStats {
                class_size,
                fullness: [0; 11],
                objects_allocated: 0,
                objects_used: 0,
                pages_used: 0,
                pages_per_span: 1,
                freeable_pages: 0,
            });
            let used_bytes: u64 = page.lens.iter().map(|&len| u64::from(len)).sum();
            row.fullness[fullness_column(used_bytes, PAGE_SIZE as u64)] += 1;
            row.objects_allocated += if page.len(Bud::Dedicated) != 0 { 1 } else { 2 };
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
    fn buddies_are_justified_to_both_ends() {
        let mut pool = TwoSlotPool::new();
        let first = pool.store(&[1u8; 1000]).unwrap();
        let last = pool.store(&[2u8; 2000]).unwrap();
        assert_eq!(pool.stats().pages, 1);
        let page = &pool.pages[0];
        assert_eq!(page.offset(Bud::First), 64);
        assert_eq!(page.offset(Bud::Last), PAGE_SIZE - 32 * 64);
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
