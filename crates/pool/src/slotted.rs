//! Pages of at most three blobs whose lengths live outside the page: the
//! storage shared by the tri-page and zbud pools. The two designs differ in
//! where a slot sits in its page and which page a blob goes to; how pages,
//! handles, lengths and counters are kept is this module's job.

use std::collections::BTreeMap;
use std::mem::size_of;

use crate::handle::{Generation, HandleCodec};
use crate::stats::{fullness_column, Counters};
use crate::{ClassStats, Handle, PoolError, PoolKind, PoolStats, Result, PAGE_SIZE};
use zpage_pages::PageRun;

/// Slots per page.
pub(crate) const SLOTS: usize = 3;

/// The blob length in each slot of a page; 0 means free. Where a design puts
/// the next blob is a function of these alone, so the pools and their
/// packing replays (`crate::packing`) apply the same rules to them.
pub(crate) type SlotLens = [u16; SLOTS];

/// Bytes of blobs in a page with these slot lengths.
pub(crate) fn used_bytes(lens: &SlotLens) -> u64 {
    lens.iter().map(|&len| u64::from(len)).sum()
}

/// Blobs in a page with these slot lengths.
pub(crate) fn objects(lens: &SlotLens) -> u64 {
    lens.iter().filter(|&&len| len != 0).count() as u64
}

/// One page and the record of what it holds (Zircon keeps this in `vm_page_t`,
/// zbud in its in-page header).
pub(crate) struct SlottedPage {
    /// `None` while the page id is free for reuse.
    memory: Option<PageRun>,
    /// Blob length per slot; 0 means free.
    lens: SlotLens,
    /// Bumped on each store into the slot, so old handles go stale.
    generations: [Generation; SLOTS],
}

impl SlottedPage {
    /// Length of the blob in `slot` (0 when free).
    pub(crate) fn len(&self, slot: usize) -> usize {
        usize::from(self.lens[slot])
    }

    /// The blob length in each slot.
    pub(crate) fn lens(&self) -> &SlotLens {
        &self.lens
    }

    /// Whether no slot holds a blob.
    pub(crate) fn is_empty(&self) -> bool {
        self.lens == [0; SLOTS]
    }
}

/// Per-class rows of a table of pages that hold at most three blobs, built a
/// page at a time (by a pool from its live pages, by a packing replay from
/// the lengths it keeps).
#[derive(Clone, Debug, Default)]
pub(crate) struct SlottedRows(BTreeMap<u32, ClassStats>);

impl SlottedRows {
    /// Counts a page of class `class_size` with these slot lengths, which can hold `slots` blobs.
    pub(crate) fn add_page(&mut self, class_size: u32, lens: &SlotLens, slots: u64) {
        let row = self.0.entry(class_size).or_insert_with(|| ClassStats {
            class_size,
            fullness: [0; 11],
            objects_allocated: 0,
            objects_used: 0,
            pages_used: 0,
            pages_per_span: 1,
            freeable_pages: 0,
        });
        row.fullness[fullness_column(used_bytes(lens), PAGE_SIZE as u64)] += 1;
        row.objects_allocated += slots;
        row.objects_used += objects(lens);
        row.pages_used += 1;
    }

    /// The rows, smallest class first.
    pub(crate) fn into_rows(self) -> Vec<ClassStats> {
        self.0.into_values().collect()
    }
}

/// The pages of one pool, with page-id reuse, handles and counters.
pub(crate) struct SlottedPages {
    codec: HandleCodec,
    pages: Vec<SlottedPage>,
    vacant_page_ids: Vec<u32>,
    counters: Counters,
}

impl SlottedPages {
    pub(crate) fn new(kind: PoolKind) -> Self {
        Self {
            codec: HandleCodec::new(kind),
            pages: Vec::new(),
            vacant_page_ids: Vec::new(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn page(&self, id: u32) -> &SlottedPage {
        &self.pages[id as usize]
    }

    /// A fresh zeroed page; returns its id.
    pub(crate) fn new_page(&mut self) -> Result<u32> {
        let memory = Some(PageRun::new(1).ok_or(PoolError::OutOfMemory { pages: 1 })?);
        self.counters.pages_added(1);
        Ok(match self.vacant_page_ids.pop() {
            Some(id) => {
                self.pages[id as usize].memory = memory;
                id
            }
            None => {
                self.pages.push(SlottedPage {
                    memory,
                    lens: [0; SLOTS],
                    generations: [Generation::FIRST; SLOTS],
                });
                self.counters.metadata_grew(size_of::<SlottedPage>());
                (self.pages.len() - 1) as u32
            }
        })
    }

    /// Copies `blob` into `slot` of page `id` at `offset` and returns its handle.
    pub(crate) fn put(&mut self, id: u32, slot: usize, offset: usize, blob: &[u8]) -> Handle {
        let page = &mut self.pages[id as usize];
        debug_assert_eq!(page.lens[slot], 0, "slot {slot} of page {id} is taken");
        page.lens[slot] = blob.len() as u16;
        let generation = page.generations[slot].next();
        page.generations[slot] = generation;
        if let Some(memory) = page.memory.as_mut() {
            memory[offset..offset + blob.len()].copy_from_slice(blob);
        }
        self.counters.object_stored(blob.len());
        self.codec.encode(id, slot as u8, generation)
    }

    /// Validates `handle`; returns the page id and slot of a live blob.
    pub(crate) fn resolve(&self, handle: Handle) -> Result<(u32, usize)> {
        let decoded = self.codec.decode(handle)?;
        let slot = usize::from(decoded.slot);
        let page = self
            .pages
            .get(decoded.index as usize)
            .filter(|_| slot < SLOTS)
            .ok_or_else(|| self.codec.foreign(handle))?;
        if page.memory.is_none()
            || page.len(slot) == 0
            || page.generations[slot] != decoded.generation
        {
            return Err(PoolError::StaleHandle {
                raw: handle.to_raw(),
            });
        }
        Ok((decoded.index, slot))
    }

    /// The bytes of the blob `handle` names, which starts at `offset(page, slot)`.
    pub(crate) fn blob(
        &self,
        handle: Handle,
        offset: impl Fn(&SlottedPage, usize) -> usize,
    ) -> Result<&[u8]> {
        let (id, slot) = self.resolve(handle)?;
        let page = &self.pages[id as usize];
        let start = offset(page, slot);
        let memory = page.memory.as_deref().ok_or(PoolError::StaleHandle {
            raw: handle.to_raw(),
        })?;
        Ok(&memory[start..start + page.len(slot)])
    }

    /// Empties `slot` of page `id`; releases the page when nothing is left in
    /// it. Returns the blob's length and whether the page was released.
    pub(crate) fn clear(&mut self, id: u32, slot: usize) -> (usize, bool) {
        let page = &mut self.pages[id as usize];
        let len = page.len(slot);
        page.lens[slot] = 0;
        self.counters.object_freed(len);
        if !page.is_empty() {
            return (len, false);
        }
        page.memory = None;
        self.vacant_page_ids.push(id);
        self.counters.pages_released(1);
        (len, true)
    }

    pub(crate) fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    /// One row per class: `class_of` gives a live page's class size, `slots_of` how many objects it can hold.
    pub(crate) fn classes(
        &self,
        class_of: impl Fn(u32) -> u32,
        slots_of: impl Fn(&SlottedPage) -> u64,
    ) -> Vec<ClassStats> {
        let mut rows = SlottedRows::default();
        for (id, page) in self.pages.iter().enumerate() {
            if page.memory.is_some() {
                rows.add_page(class_of(id as u32), &page.lens, slots_of(page));
            }
        }
        rows.into_rows()
    }
}
