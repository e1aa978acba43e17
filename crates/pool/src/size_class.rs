//! zsmalloc: size classes over multi-page zspages, with compaction.
//!
//! Reproduces the memory behaviour of Linux `mm/zsmalloc.c` (6.x, with
//! `CONFIG_ZSMALLOC_CHAIN_SIZE=8`), so page counts match zram's
//! `mem_used_total` for the same blobs:
//! - 255 size classes from 32 B to 4096 B in 16 B steps; `zs_malloc` adds the
//!   8-byte in-object handle before choosing the class.
//! - Each class picks the zspage chain length (1..=8 pages) with the least
//!   tail waste; power-of-two sizes use one page. Neighbouring classes with
//!   the same `(pages_per_zspage, objs_per_zspage)` are merged into the larger
//!   one, exactly as `zs_create_pool` does.
//! - Allocation takes a slot from the fullest non-full zspage; a zspage that
//!   becomes empty is freed at once.
//! - [`Pool::compact`] moves objects from the least-used zspages into the
//!   most-used ones of the same class, like `zs_compact`.
//!
//! Differences that do not change the page count: a zspage is one contiguous
//! buffer (so no object straddles two separately mapped pages and `get` never
//! copies), and the owner of each slot is kept in a side table instead of the
//! object's first 8 bytes. The 8 bytes are still reserved by the class choice.

use std::fmt;
use std::mem::size_of;
use std::sync::OnceLock;

use crate::handle::{Generation, HandleCodec};
use crate::lists::IdLists;
use crate::stats::Counters;
use crate::PAGE_SIZE;
use crate::{
    ClassStats, CompactStats, Handle, Packed, Packing, Pool, PoolError, PoolKind, PoolStats, Result,
};
use zpage_pages::PageRun;

/// Smallest object size (`ZS_MIN_ALLOC_SIZE`).
const MIN_ALLOC_SIZE: usize = 32;
/// Step between size classes (`ZS_SIZE_CLASS_DELTA` = `PAGE_SIZE >> 8`).
const CLASS_DELTA: usize = PAGE_SIZE >> 8;
/// Number of size classes before merging (`ZS_SIZE_CLASSES`).
const SIZE_CLASSES: usize = (PAGE_SIZE - MIN_ALLOC_SIZE).div_ceil(CLASS_DELTA) + 1;
/// Bytes `zs_malloc` adds to every request for the in-object handle.
const HANDLE_SIZE: usize = 8;
/// Longest zspage chain (`CONFIG_ZSMALLOC_CHAIN_SIZE`, default 8).
const MAX_PAGES_PER_ZSPAGE: usize = 8;
const _: () = assert!(MAX_PAGES_PER_ZSPAGE <= zpage_pages::MAX_RUN_PAGES);
/// zsmalloc's fullness groups: empty, 0-10 % ... 90-99 % (ten), full.
const FULLNESS_GROUPS: usize = 12;
const GROUP_EMPTY: usize = 0;
const GROUP_FULL: usize = FULLNESS_GROUPS - 1;
/// Marks a slot without an owner in [`ZsPage::owners`].
const NO_OWNER: u32 = u32::MAX;

const _: () = assert!(SIZE_CLASSES == 255);

/// Shape of one (merged) size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ClassGeometry {
    /// Slot size in bytes; the largest request size the class serves.
    size: u32,
    pages_per_zspage: u32,
    objs_per_zspage: u32,
}

/// The class layout every pool shares; computed once.
#[derive(Debug)]
struct ClassTable {
    /// Distinct classes, smallest first.
    classes: Vec<ClassGeometry>,
    /// For each of the 255 size-class indexes, its entry in `classes`.
    class_of_index: Vec<u16>,
    /// zsmalloc's `huge_class_size`.
    huge_class_size: usize,
}

/// `calculate_zspage_chain_size`: the chain length with the least tail waste;
/// ties go to the shorter chain.
fn zspage_chain_pages(class_size: usize) -> usize {
    if class_size.is_power_of_two() {
        return 1;
    }
    (1..=MAX_PAGES_PER_ZSPAGE)
        .min_by_key(|&pages| ((pages * PAGE_SIZE) % class_size, pages))
        .unwrap_or(1)
}

/// `get_size_class_index`: which of the 255 classes serves `size` bytes
/// (handle included). Oversized requests land in the last class.
fn size_class_index(size: usize) -> usize {
    let index = size.saturating_sub(MIN_ALLOC_SIZE).div_ceil(CLASS_DELTA);
    index.min(SIZE_CLASSES - 1)
}

fn class_table() -> &'static ClassTable {
    static TABLE: OnceLock<ClassTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        // Walk from the largest class down, as zs_create_pool does, so a class
        // merges into the larger neighbour that shares its geometry.
        let mut descending: Vec<ClassGeometry> = Vec::new();
        let mut descending_index_of = vec![0usize; SIZE_CLASSES];
        let mut huge_class_size = 0;
        for index in (0..SIZE_CLASSES).rev() {
            let size = (MIN_ALLOC_SIZE + index * CLASS_DELTA).min(PAGE_SIZE);
            let pages = zspage_chain_pages(size);
            let objs = pages * PAGE_SIZE / size;
            // The first class from the top that is not one-object-per-page
            // bounds the huge class; requests grow by the handle before the
            // class lookup, hence the subtraction (as in the kernel).
            if pages != 1 && objs != 1 && huge_class_size == 0 {
                huge_class_size = size - (HANDLE_SIZE - 1);
            }
            let geometry = ClassGeometry {
                size: size as u32,
                pages_per_zspage: pages as u32,
                objs_per_zspage: objs as u32,
            };
            match descending.last() {
                Some(previous)
                    if previous.pages_per_zspage == geometry.pages_per_zspage
                        && previous.objs_per_zspage == geometry.objs_per_zspage => {}
                _ => descending.push(geometry),
            }
            descending_index_of[index] = descending.len() - 1;
        }
        let count = descending.len();
        let class_of_index = descending_index_of
            .iter()
            .map(|&position| (count - 1 - position) as u16)
            .collect();
        descending.reverse();
        ClassTable {
            classes: descending,
            class_of_index,
            huge_class_size,
        }
    })
}

/// zsmalloc's `zs_huge_class_size()` at chain size 8: blobs of this many
/// bytes or more take a whole page each. zram stores pages whose compressed
/// length reaches it uncompressed, as 4096-byte objects.
pub fn huge_class_size() -> usize {
    class_table().huge_class_size
}

/// Slot size, in bytes, that a `len`-byte blob occupies in a
/// [`SizeClassPool`] (after adding the 8-byte handle and class merging).
pub fn class_size_for(len: usize) -> usize {
    let table = class_table();
    let class = table.class_of_index[size_class_index(len + HANDLE_SIZE)];
    table.classes[class as usize].size as usize
}

/// zsmalloc's `get_fullness_group`.
fn fullness_group(in_use: u32, capacity: u32) -> usize {
    if in_use == 0 {
        GROUP_EMPTY
    } else if in_use >= capacity {
        GROUP_FULL
    } else {
        (100 * in_use / capacity / 10) as usize + 1
    }
}

/// Where a live object is.
#[derive(Clone, Copy, Debug)]
struct ObjectLocation {
    zspage: u32,
    slot: u16,
    len: u16,
}

/// One handle-table word (the kernel's `zs_handle` slab object).
#[derive(Clone, Copy, Debug)]
struct HandleEntry {
    generation: Generation,
    object: Option<ObjectLocation>,
}

/// A zspage: `pages_per_zspage` contiguous pages cut into equal slots.
struct ZsPage {
    class: u16,
    /// Its pages, which go back to the kernel when the zspage is freed
    /// (`zpage_pages`).
    memory: PageRun,
    /// Free slot numbers; the last one is handed out next (the kernel's
    /// LIFO free-object chain).
    free_slots: Vec<u16>,
    /// Handle-table index owning each slot, or [`NO_OWNER`]: the back-pointer
    /// compaction needs to move objects.
    owners: Vec<u32>,
    in_use: u32,
}

/// Per-class counters (zsmalloc's `class->stats`).
#[derive(Clone, Copy, Debug)]
struct ClassState {
    geometry: ClassGeometry,
    zspages: u64,
    objects_used: u64,
}

impl ClassState {
    fn objects_allocated(&self) -> u64 {
        self.zspages * u64::from(self.geometry.objs_per_zspage)
    }

    /// `zs_can_compact`: pages that would be freed by packing perfectly.
    fn freeable_pages(&self) -> u64 {
        let wasted = self.objects_allocated() - self.objects_used;
        wasted / u64::from(self.geometry.objs_per_zspage)
            * u64::from(self.geometry.pages_per_zspage)
    }

    fn pages(&self) -> u64 {
        self.zspages * u64::from(self.geometry.pages_per_zspage)
    }

    /// This class's row of the table, given its zspages per fullness column.
    fn row(&self, fullness: [u64; 11]) -> ClassStats {
        ClassStats {
            class_size: self.geometry.size,
            fullness,
            objects_allocated: self.objects_allocated(),
            objects_used: self.objects_used,
            pages_used: self.pages(),
            pages_per_span: self.geometry.pages_per_zspage,
            freeable_pages: self.freeable_pages(),
        }
    }
}

/// The zsmalloc-style pool. See the module docs for what is reproduced.
pub struct SizeClassPool {
    codec: HandleCodec,
    classes: Vec<ClassState>,
    /// Indexed by zspage id; `None` for ids free for reuse.
    zspages: Vec<Option<ZsPage>>,
    vacant_zspage_ids: Vec<u32>,
    /// List `class * FULLNESS_GROUPS + group` holds that class's zspages in
    /// that fullness group.
    fullness_lists: IdLists,
    handles: Vec<HandleEntry>,
    vacant_handles: Vec<u32>,
    counters: Counters,
}

impl fmt::Debug for SizeClassPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SizeClassPool")
            .field("classes", &self.classes.len())
            .field("stats", &self.counters.snapshot())
            .finish_non_exhaustive()
    }
}

impl Default for SizeClassPool {
    fn default() -> SizeClassPool {
        SizeClassPool::new()
    }
}

impl SizeClassPool {
    /// An empty pool with the kernel's class layout.
    pub fn new() -> SizeClassPool {
        let classes: Vec<ClassState> = class_table()
            .classes
            .iter()
            .map(|&geometry| ClassState {
                geometry,
                zspages: 0,
                objects_used: 0,
            })
            .collect();
        SizeClassPool {
            codec: HandleCodec::new(PoolKind::SizeClass),
            fullness_lists: IdLists::new(classes.len() * FULLNESS_GROUPS),
            classes,
            zspages: Vec::new(),
            vacant_zspage_ids: Vec::new(),
            handles: Vec::new(),
            vacant_handles: Vec::new(),
            counters: Counters::default(),
        }
    }

    fn list_index(class: u16, group: usize) -> usize {
        usize::from(class) * FULLNESS_GROUPS + group
    }

    fn zspage_metadata_bytes(geometry: ClassGeometry) -> usize {
        size_of::<ZsPage>()
            + geometry.objs_per_zspage as usize * (size_of::<u16>() + size_of::<u32>())
    }

    /// `find_get_zspage`: the fullest zspage with a free slot.
    fn fullest_with_room(&self, class: u16) -> Option<u32> {
        (GROUP_EMPTY..GROUP_FULL)
            .rev()
            .find_map(|group| self.fullness_lists.newest(Self::list_index(class, group)))
    }

    fn zspage(&self, id: u32) -> &ZsPage {
        self.zspages[id as usize]
            .as_ref()
            .expect("listed zspage ids are live")
    }

    fn zspage_mut(&mut self, id: u32) -> &mut ZsPage {
        self.zspages[id as usize]
            .as_mut()
            .expect("listed zspage ids are live")
    }

    fn allocate_zspage(&mut self, class: u16) -> Result<u32> {
        let state = &mut self.classes[usize::from(class)];
        let geometry = state.geometry;
        let pages = geometry.pages_per_zspage as usize;
        let memory = PageRun::new(pages).ok_or(PoolError::OutOfMemory { pages })?;
        state.zspages += 1;
        let objs = geometry.objs_per_zspage as u16;
        let zspage = ZsPage {
            class,
            memory,
            free_slots: (0..objs).rev().collect(),
            owners: vec![NO_OWNER; usize::from(objs)],
            in_use: 0,
        };
        let id = match self.vacant_zspage_ids.pop() {
            Some(id) => {
                self.zspages[id as usize] = Some(zspage);
                id
            }
            None => {
                self.zspages.push(Some(zspage));
                (self.zspages.len() - 1) as u32
            }
        };
        self.counters
            .pages_added(u64::from(geometry.pages_per_zspage));
        self.counters
            .metadata_grew(Self::zspage_metadata_bytes(geometry));
        Ok(id)
    }

    fn release_zspage(&mut self, id: u32) {
        self.fullness_lists.remove(id);
        let zspage = self.zspages[id as usize]
            .take()
            .expect("released zspage is live");
        debug_assert_eq!(zspage.in_use, 0);
        let state = &mut self.classes[usize::from(zspage.class)];
        state.zspages -= 1;
        let geometry = state.geometry;
        self.vacant_zspage_ids.push(id);
        self.counters
            .pages_released(u64::from(geometry.pages_per_zspage));
        self.counters
            .metadata_shrank(Self::zspage_metadata_bytes(geometry));
    }

    /// Re-files a zspage under its current fullness group, or frees it when
    /// empty. Returns the group (`putback_zspage` / `fix_fullness_group`).
    fn refile_zspage(&mut self, id: u32) -> usize {
        let zspage = self.zspage(id);
        let class = zspage.class;
        let group = fullness_group(
            zspage.in_use,
            self.classes[usize::from(class)].geometry.objs_per_zspage,
        );
        if group == GROUP_EMPTY {
            self.release_zspage(id);
        } else {
            self.fullness_lists.remove(id);
            self.fullness_lists.push(Self::list_index(class, group), id);
        }
        group
    }

    fn allocate_handle(&mut self, object: ObjectLocation) -> Handle {
        let index = match self.vacant_handles.pop() {
            Some(index) => {
                let entry = &mut self.handles[index as usize];
                entry.generation = entry.generation.next();
                entry.object = Some(object);
                index
            }
            None => {
                self.handles.push(HandleEntry {
                    generation: Generation::FIRST,
                    object: Some(object),
                });
                self.counters.metadata_grew(size_of::<HandleEntry>());
                (self.handles.len() - 1) as u32
            }
        };
        self.codec
            .encode(index, 0, self.handles[index as usize].generation)
    }

    /// Validates `handle`; returns its table index and object location.
    fn resolve(&self, handle: Handle) -> Result<(u32, ObjectLocation)> {
        let decoded = self.codec.decode(handle)?;
        let entry = self
            .handles
            .get(decoded.index as usize)
            .ok_or_else(|| self.codec.foreign(handle))?;
        match entry.object {
            Some(object) if entry.generation == decoded.generation && decoded.slot == 0 => {
                Ok((decoded.index, object))
            }
            _ => Err(PoolError::StaleHandle {
                raw: handle.to_raw(),
            }),
        }
    }

    fn slot_range(&self, zspage: &ZsPage, slot: u16, len: usize) -> std::ops::Range<usize> {
        let start =
            usize::from(slot) * self.classes[usize::from(zspage.class)].geometry.size as usize;
        start..start + len
    }

    /// `__zs_compact` for one class: fill the most-used zspages from the
    /// least-used ones until no whole zspage can be freed.
    fn compact_class(&mut self, class: u16) -> CompactStats {
        let mut done = CompactStats::default();
        let mut destination: Option<u32> = None;
        while self.classes[usize::from(class)].freeable_pages() > 0 {
            if destination.is_none() {
                // isolate_dst_zspage: the fullest partially used zspage.
                destination = (GROUP_EMPTY + 1..GROUP_FULL)
                    .rev()
                    .find_map(|group| self.fullness_lists.newest(Self::list_index(class, group)));
                match destination {
                    Some(id) => {
                        self.fullness_lists.remove(id);
                    }
                    None => break,
                }
            }
            // isolate_src_zspage: the emptiest one left.
            let Some(source) = (GROUP_EMPTY + 1..GROUP_FULL)
                .find_map(|group| self.fullness_lists.newest(Self::list_index(class, group)))
            else {
                break;
            };
            self.fullness_lists.remove(source);
            let destination_id = destination.unwrap_or(source);
            done.objects_moved += self.migrate(source, destination_id);
            if self.refile_zspage(source) == GROUP_EMPTY {
                done.pages_freed +=
                    u64::from(self.classes[usize::from(class)].geometry.pages_per_zspage);
            }
            let destination_zspage = self.zspage(destination_id);
            if destination_zspage.free_slots.is_empty() {
                self.refile_zspage(destination_id);
                destination = None;
            }
        }
        if let Some(id) = destination {
            self.refile_zspage(id);
        }
        done
    }

    /// `migrate_zspage`: moves objects from `source` into `destination` until
    /// the source is empty or the destination full. Returns objects moved.
    fn migrate(&mut self, source: u32, destination: u32) -> u64 {
        debug_assert_ne!(source, destination);
        let mut source_zspage = self.zspages[source as usize]
            .take()
            .expect("source is live");
        let mut destination_zspage = self.zspages[destination as usize]
            .take()
            .expect("destination is live");
        let slot_size = self.classes[usize::from(source_zspage.class)].geometry.size as usize;
        let mut moved = 0;
        for source_slot in 0..source_zspage.owners.len() {
            let owner = source_zspage.owners[source_slot];
            if owner == NO_OWNER {
                continue;
            }
            let Some(destination_slot) = destination_zspage.free_slots.pop() else {
                break;
            };
            let entry = &mut self.handles[owner as usize];
            let Some(object) = entry.object.as_mut() else {
                debug_assert!(false, "slot owner {owner} has no object");
                continue;
            };
            let from = source_slot * slot_size;
            let to = usize::from(destination_slot) * slot_size;
            let len = usize::from(object.len);
            destination_zspage.memory[to..to + len]
                .copy_from_slice(&source_zspage.memory[from..from + len]);
            object.zspage = destination;
            object.slot = destination_slot;
            destination_zspage.owners[usize::from(destination_slot)] = owner;
            destination_zspage.in_use += 1;
            source_zspage.owners[source_slot] = NO_OWNER;
            source_zspage.free_slots.push(source_slot as u16);
            source_zspage.in_use -= 1;
            moved += 1;
        }
        self.zspages[source as usize] = Some(source_zspage);
        self.zspages[destination as usize] = Some(destination_zspage);
        moved
    }
}

impl Pool for SizeClassPool {
    fn kind(&self) -> PoolKind {
        PoolKind::SizeClass
    }

    fn store(&mut self, blob: &[u8]) -> Result<Handle> {
        crate::error::check_blob_len(blob.len())?;
        let class = class_table().class_of_index[size_class_index(blob.len() + HANDLE_SIZE)];
        let zspage_id = match self.fullest_with_room(class) {
            Some(id) => id,
            None => self.allocate_zspage(class)?,
        };
        let zspage = self.zspage_mut(zspage_id);
        let slot = zspage
            .free_slots
            .pop()
            .expect("zspages outside the full group have room");
        zspage.in_use += 1;
        let handle = self.allocate_handle(ObjectLocation {
            zspage: zspage_id,
            slot,
            len: blob.len() as u16,
        });
        let handle_index = handle.to_raw() as u32;
        let range = self.slot_range(self.zspage(zspage_id), slot, blob.len());
        let zspage = self.zspage_mut(zspage_id);
        zspage.owners[usize::from(slot)] = handle_index;
        zspage.memory[range].copy_from_slice(blob);
        self.classes[usize::from(class)].objects_used += 1;
        self.refile_zspage(zspage_id);
        self.counters.object_stored(blob.len());
        Ok(handle)
    }

    fn get(&self, handle: Handle) -> Result<&[u8]> {
        let (_, object) = self.resolve(handle)?;
        let zspage = self.zspage(object.zspage);
        Ok(&zspage.memory[self.slot_range(zspage, object.slot, usize::from(object.len))])
    }

    fn free(&mut self, handle: Handle) -> Result<usize> {
        let (index, object) = self.resolve(handle)?;
        self.handles[index as usize].object = None;
        self.vacant_handles.push(index);
        let zspage = self.zspage_mut(object.zspage);
        zspage.owners[usize::from(object.slot)] = NO_OWNER;
        zspage.free_slots.push(object.slot);
        zspage.in_use -= 1;
        let class = zspage.class;
        self.classes[usize::from(class)].objects_used -= 1;
        self.refile_zspage(object.zspage);
        let len = usize::from(object.len);
        self.counters.object_freed(len);
        Ok(len)
    }

    fn compact(&mut self) -> CompactStats {
        let mut total = CompactStats::default();
        for step in 0.. {
            let Some(done) = self.compact_step(step) else {
                break;
            };
            total += done;
        }
        total
    }

    /// One class a step, from the largest down (as `zs_compact` walks them).
    fn compact_step(&mut self, step: usize) -> Option<CompactStats> {
        let class = self.classes.len().checked_sub(step + 1)?;
        let done = self.compact_class(class as u16);
        self.counters.pages_compacted(done.pages_freed);
        Some(done)
    }

    fn stats(&self) -> PoolStats {
        self.counters.snapshot()
    }

    fn classes(&self) -> Vec<ClassStats> {
        self.classes
            .iter()
            .enumerate()
            .map(|(class, state)| {
                let mut fullness = [0u64; 11];
                for group in GROUP_EMPTY + 1..=GROUP_FULL {
                    fullness[group - 1] = self
                        .fullness_lists
                        .len(Self::list_index(class as u16, group))
                        as u64;
                }
                state.row(fullness)
            })
            .collect()
    }
}

/// The size-class pool's packing in closed form (see [`crate::packing`]):
/// with nothing freed, each class holds `ceil(objects / objs_per_zspage)`
/// zspages, all full but the last.
#[derive(Debug)]
pub(crate) struct SizeClassPacking {
    /// Objects per (merged) class, indexed like `ClassTable::classes`.
    objects_per_class: Vec<u64>,
    totals: Packed,
}

impl SizeClassPacking {
    pub(crate) fn new() -> Self {
        Self {
            objects_per_class: vec![0; class_table().classes.len()],
            totals: Packed::default(),
        }
    }

    /// Each class as the pool would hold it: only as many zspages as its objects fill.
    fn states(&self) -> impl Iterator<Item = ClassState> + '_ {
        class_table()
            .classes
            .iter()
            .zip(&self.objects_per_class)
            .map(|(&geometry, &objects)| ClassState {
                geometry,
                zspages: objects.div_ceil(u64::from(geometry.objs_per_zspage)),
                objects_used: objects,
            })
    }
}

impl Packing for SizeClassPacking {
    fn kind(&self) -> PoolKind {
        PoolKind::SizeClass
    }

    fn add(&mut self, len: usize) -> Result<()> {
        self.totals.add_object(len)?;
        let class = class_table().class_of_index[size_class_index(len + HANDLE_SIZE)];
        self.objects_per_class[usize::from(class)] += 1;
        Ok(())
    }

    fn packed(&self) -> Packed {
        Packed {
            pages: self.states().map(|state| state.pages()).sum(),
            ..self.totals
        }
    }

    fn classes(&self) -> Vec<ClassStats> {
        self.states()
            .map(|state| {
                let per_zspage = u64::from(state.geometry.objs_per_zspage);
                let mut fullness = [0u64; 11];
                fullness[GROUP_FULL - 1] = state.objects_used / per_zspage;
                let last = (state.objects_used % per_zspage) as u32;
                if last > 0 {
                    fullness[fullness_group(last, state.geometry.objs_per_zspage) - 1] += 1;
                }
                state.row(fullness)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_lengths_match_the_kernel() {
        // Power-of-two classes take one page.
        assert_eq!(zspage_chain_pages(32), 1);
        assert_eq!(zspage_chain_pages(2048), 1);
        // 1568 B: five pages hold 13 objects with 96 B of tail (99.5 % used).
        assert_eq!(zspage_chain_pages(1568), 5);
        assert_eq!(zspage_chain_pages(48), 3);
        assert_eq!(zspage_chain_pages(4080), 1);
    }

    #[test]
    fn class_table_is_merged_like_zs_create_pool() {
        let table = class_table();
        assert_eq!(table.class_of_index.len(), SIZE_CLASSES);
        assert_eq!(table.classes.first().map(|c| c.size), Some(32));
        assert_eq!(table.classes.last().map(|c| c.size), Some(4096));
        assert!(table
            .classes
            .windows(2)
            .all(|pair| pair[0].size < pair[1].size));
        // Every index maps to a class at least as large as its own size.
        for index in 0..SIZE_CLASSES {
            let size = (MIN_ALLOC_SIZE + index * CLASS_DELTA).min(PAGE_SIZE);
            let class = table.classes[usize::from(table.class_of_index[index])];
            assert!(class.size as usize >= size);
        }
    }

    #[test]
    fn chain_size_8_gives_119_classes_and_huge_size_3625() {
        // Computed from the kernel's own rules (calculate_zspage_chain_size +
        // can_merge): 119 distinct classes; the largest non-huge class is 3632,
        // and zs_huge_class_size() reports 3632 - (ZS_HANDLE_SIZE - 1).
        assert_eq!(class_table().classes.len(), 119);
        assert_eq!(huge_class_size(), 3625);
        let largest_shared = class_table().classes.iter().rev().nth(1).copied();
        assert_eq!(
            largest_shared,
            Some(ClassGeometry {
                size: 3632,
                pages_per_zspage: 8,
                objs_per_zspage: 9
            })
        );
    }

    #[test]
    fn fullness_groups_follow_zsmalloc() {
        assert_eq!(fullness_group(0, 13), GROUP_EMPTY);
        assert_eq!(fullness_group(1, 127), 1);
        assert_eq!(fullness_group(12, 13), 10);
        assert_eq!(fullness_group(13, 13), GROUP_FULL);
    }

    #[test]
    fn handle_size_is_added_before_choosing_the_class() {
        assert_eq!(class_size_for(24), 32);
        assert_eq!(class_size_for(25), 48);
        assert_eq!(class_size_for(4096), 4096);
        assert_eq!(class_size_for(huge_class_size()), 4096);
        assert!(class_size_for(huge_class_size() - 1) < 4096);
    }
}
