//! Page deduplication (`BudgetConfig::dedup`): identical evicted pages of
//! every region of a budget share one compressed blob.
//!
//! When the reclaimer (or `advise_cold`) compresses a page, it hashes it
//! (XXH3, 128 bits) and looks the hash up here. A blob with that hash is
//! decoded and compared byte for byte with the page before it is shared (a
//! hash is never trusted alone; a collision is counted and the page stored
//! on its own). Each blob the table knows carries a count of the page slots
//! naming it; giving a reference up ([`Dedup::release`]) lowers the count,
//! and only the last one frees the blob.
//!
//! Copy on write needs nothing more: a fault decodes the shared blob into
//! the faulting region's own page, and the blob itself is never written
//! (a written page is compressed again, into a blob of its own or a share
//! of another one).
//!
//! Shared blobs (count above one) are left where they are by cold
//! recompression and writeback: recompressing or moving one page's copy
//! would store the content a second time and free nothing.
//!
//! The table's lock is taken by the reclaimer, the event thread and API
//! calls that block asynchronous signals, never on the fault path (which
//! hands references it gives up to the reclaimer through `free_later`). Its
//! holders take the pool's locks inside it and never install pages or wait
//! for the event thread, so the event thread may take it (see `event.rs`).
//! With dedup off there is no table, and no page is hashed.

use std::collections::HashMap;
use std::sync::Mutex;
use zpage_codec::Page;
use zpage_store::{PageRef, PageStore, Worker};

/// A budget's table of deduplicated blobs.
#[derive(Debug)]
pub(crate) struct Dedup {
    tables: Mutex<Tables>,
}

#[derive(Debug)]
struct Tables {
    /// Content hash -> the blob stored with it.
    by_hash: HashMap<u128, u64>,
    /// Blob (its raw reference) -> its hash and how many page slots name it.
    by_ref: HashMap<u64, Entry>,
    /// A blob decoded for the byte comparison.
    scratch: Box<Page>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    hash: u128,
    holders: u32,
}

/// What [`Dedup::share`] found for a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// An identical blob, now held once more by the caller; it takes this
    /// many bytes of pool memory (saved by not storing the page again).
    Shared(PageRef, usize),
    /// A blob with the same hash and different bytes (a collision).
    Mismatch,
    /// No blob with this hash.
    Miss,
}

/// The content hash pages are looked up by.
pub(crate) fn hash(page: &Page) -> u128 {
    xxhash_rust::xxh3::xxh3_128(page)
}

impl Dedup {
    pub(crate) fn new() -> Self {
        Dedup {
            tables: Mutex::new(Tables {
                by_hash: HashMap::new(),
                by_ref: HashMap::new(),
                scratch: zpage_codec::zeroed_page(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks for a stored blob holding exactly `page` (whose hash is
    /// `hash`); on a hit the caller holds one more reference on it.
    pub(crate) fn share(
        &self,
        store: &PageStore,
        worker: &mut Worker,
        hash: u128,
        page: &Page,
    ) -> Lookup {
        let mut guard = self.lock();
        let tables = &mut *guard;
        let Some(&raw) = tables.by_hash.get(&hash) else {
            return Lookup::Miss;
        };
        let Some(page_ref) = PageRef::from_raw(raw) else {
            return Lookup::Miss;
        };
        // The entry keeps the blob alive while the lock is held.
        if store.get(worker, page_ref, &mut tables.scratch).is_err() || *tables.scratch != *page {
            return Lookup::Mismatch;
        }
        let Some(entry) = tables.by_ref.get_mut(&raw) else {
            return Lookup::Miss;
        };
        entry.holders += 1;
        Lookup::Shared(page_ref, store.blob_bytes(page_ref).unwrap_or(0))
    }

    /// Makes the newly stored blob `page_ref` (held once, by the caller)
    /// available for sharing under `hash`. Blobs outside the pool (same-filled
    /// words, tier blobs) are not tracked; nor is a blob whose hash another
    /// blob already has (a collision: the first one keeps it).
    pub(crate) fn insert(&self, hash: u128, page_ref: PageRef) {
        if !page_ref.in_pool() {
            return;
        }
        let mut tables = self.lock();
        if tables.by_hash.contains_key(&hash) {
            return;
        }
        let raw = page_ref.to_raw();
        tables.by_hash.insert(hash, raw);
        tables.by_ref.insert(raw, Entry { hash, holders: 1 });
    }

    /// Whether more than one page slot names `page_ref`.
    pub(crate) fn is_shared(&self, page_ref: PageRef) -> bool {
        self.lock()
            .by_ref
            .get(&page_ref.to_raw())
            .is_some_and(|entry| entry.holders > 1)
    }

    /// Gives up one holder's reference: true when it was the last one (or
    /// the blob was never shared) and the caller must free the blob.
    pub(crate) fn release(&self, page_ref: PageRef) -> bool {
        let mut tables = self.lock();
        let raw = page_ref.to_raw();
        let Some(entry) = tables.by_ref.get_mut(&raw) else {
            return true;
        };
        if entry.holders > 1 {
            entry.holders -= 1;
            return false;
        }
        let hash = entry.hash;
        tables.by_ref.remove(&raw);
        if tables.by_hash.get(&hash) == Some(&raw) {
            tables.by_hash.remove(&hash);
        }
        true
    }
}
