//! Pages of at most three blobs whose lengths live outside the page: the
//! storage shared by the tri-page and zbud pools. The two designs differ in
//! where a slot sits in its page and which page a blob goes to; how pages,
//! handles, lengths and counters are kept is this module's job.

use std::mem::size_of;

use crate::handle::{Generation, HandleCodec};
use crate::stats::{fullness_column, Counters};
use crate::{ClassStats, Handle, PoolError, PoolKind, PoolStats, Result, PAGE_SIZE};

/// Slots per page.
pub(crate) const SLOTS: usize = 3;

/// One page and the record of what it holds (Zircon keeps this in `vm_page_t`,
/// zbud in its in-page header).
pub(crate) struct SlottedPage {
    /// `None` while the page id is free for reuse.
    memory: Option<Box<[u8]>>,
    /// Blob length per slot; 0 means free.
    lens: [u16; SLOTS],
    /// Bumped on each store into the slot, so old handles go stale.
    generations: [Generation; SLOTS],
}

impl SlottedPage {
    /// Length of the blob in `slot` (0 when free).
    pub(crate) fn len(&self, slot: usize) -> usize {
        usize::from(self.lens[slot])
    }

    /// Whether no slot holds a blob.
    pub(crate) fn is_empty(&self) -> bool {
        self.lens == [0; SLOTS]
    }

    fn used_bytes(&self) -> u64 {
        self.lens.iter().map(|&len| u64::from(len)).sum()
    }

    fn objects(&self) -> u64 {
        self.lens.iter().filter(|&&len| len != 0).count() as u64
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
    pub(crate) fn new_page(&mut self) -> u32 {
        self.counters.pages_added(1);
        let memory = Some(vec![0u8; PAGE_SIZE].into_boxed_slice());
        match self.vacant_page_ids.pop() {
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
        }
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
        let mut rows = std::collections::BTreeMap::<u32, ClassStats>::new();
        for (id, page) in self.pages.iter().enumerate() {
            if page.memory.is_none() {
                continue;
            }
            let class_size = class_of(id as u32);
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
            row.objects_allocated += slots_of(page);
            row.objects_used += page.objects();
            row.pages_used += 1;
        }
        rows.into_values().collect()
    }
}
