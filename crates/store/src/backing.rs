//! The backing file: the tier below the pool (zswap's swap device, zram's
//! `backing_dev`). Each written-back page takes one 4 KiB slot holding its
//! blob; the blob's length, codec and CRC-32 stay in the page table, so a
//! tampered or failing file is detected on read and reported, never decoded
//! into wrong bytes.

use crate::StoreError;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use zpage_codec::PAGE_SIZE;

/// Where and how much to write back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackingConfig {
    /// The file; created (or truncated) when the store is made.
    pub path: PathBuf,
    /// Its capacity; a store past it keeps pages in memory and counts `writeback_fail_count`.
    pub max_bytes: u64,
}

#[derive(Debug)]
struct Slots {
    free: Vec<u32>,
    next_unused: u32,
    capacity: u32,
}

#[derive(Debug)]
pub(crate) struct BackingFile {
    file: File,
    path: PathBuf,
    slots: Mutex<Slots>,
}

impl BackingFile {
    pub(crate) fn create(config: &BackingConfig) -> Result<Self, StoreError> {
        let capacity = config.max_bytes / PAGE_SIZE as u64;
        if capacity == 0 || capacity > u64::from(u32::MAX) {
            return Err(StoreError::InvalidConfig(format!(
                "backing max_bytes is {}: give at least 4096 bytes and less than 16 TiB",
                config.max_bytes
            )));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&config.path)
            .map_err(|source| StoreError::backing(&config.path, "create", source))?;
        Ok(Self {
            file,
            path: config.path.clone(),
            slots: Mutex::new(Slots {
                free: Vec::new(),
                next_unused: 0,
                capacity: capacity as u32,
            }),
        })
    }

    fn allocate(&self) -> Option<u32> {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.free.pop() {
            return Some(slot);
        }
        (slots.next_unused < slots.capacity).then(|| {
            slots.next_unused += 1;
            slots.next_unused - 1
        })
    }

    pub(crate) fn release(&self, slot: u32) {
        self.slots.lock().free.push(slot);
    }

    /// Writes `blob` to a free slot and returns the slot and the blob's CRC-32.
    pub(crate) fn write(&self, blob: &[u8]) -> Result<(u32, u32), StoreError> {
        let slot = self.allocate().ok_or_else(|| StoreError::BackingFull {
            path: self.path.clone(),
        })?;
        let offset = u64::from(slot) * PAGE_SIZE as u64;
        if let Err(source) = self.file.write_all_at(blob, offset) {
            self.release(slot);
            return Err(StoreError::backing(&self.path, "write", source));
        }
        Ok((slot, crc32fast::hash(blob)))
    }

    /// Reads `dst.len()` bytes of `slot` and checks them against `crc`.
    pub(crate) fn read(&self, slot: u32, crc: u32, dst: &mut [u8]) -> Result<(), StoreError> {
        let offset = u64::from(slot) * PAGE_SIZE as u64;
        self.file
            .read_exact_at(dst, offset)
            .map_err(|source| StoreError::backing(&self.path, "read", source))?;
        if crc32fast::hash(dst) != crc {
            return Err(StoreError::BackingCorrupt {
                path: self.path.clone(),
                slot,
            });
        }
        Ok(())
    }

    pub(crate) fn used_bytes(&self) -> u64 {
        let slots = self.slots.lock();
        u64::from(slots.next_unused - slots.free.len() as u32) * PAGE_SIZE as u64
    }
}
