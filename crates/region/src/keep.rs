//! Interim compressed page keeping, until `zpage-store` lands; it has the
//! same shape (`store` / `load` / `remove` with a per-thread worker) so the
//! switch is a type change. One entry per page of the region.
//!
//! Memory-safety argument: an entry is replaced or freed only by `store` and
//! `remove`, and `load` of a key never runs concurrently with `store`/`remove`
//! of the same key: the region's page-state protocol gives the page to one
//! owner at a time (`load` runs only under RESTORING, `store` under
//! COMPRESSING, `remove` only on RESIDENT/EMPTY pages by the reclaimer).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use zpage_codec::{
    fill_page, CodecSpec, Decoder, Encoded, Encoder, Page, RejectThreshold, PAGE_SIZE,
};

enum Entry {
    Same(u64),
    Blob(Box<[u8]>),
    Raw(Box<Page>),
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::Same(_) => 0,
            Entry::Blob(b) => b.len(),
            Entry::Raw(_) => PAGE_SIZE,
        }
    }
}

/// What happened to a stored page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    SameFilled,
    Compressed(usize),
    StoredRaw,
}

/// Per-thread codec state.
pub struct Worker {
    enc: Option<Encoder>,
    dec: Decoder,
    buf: Box<Page>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Worker")
    }
}

/// The interim keeper.
pub struct Keep {
    spec: CodecSpec,
    threshold: RejectThreshold,
    entries: Box<[AtomicPtr<Entry>]>,
    pub compressed_bytes: AtomicUsize,
    pub stored_pages: AtomicUsize,
    pub same_filled_pages: AtomicUsize,
    pub raw_pages: AtomicUsize,
    pub decompressions: AtomicU64,
    pub compressions: AtomicU64,
}

impl std::fmt::Debug for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keep")
            .field("pages", &self.entries.len())
            .finish()
    }
}

impl Keep {
    pub fn new(
        spec: CodecSpec,
        threshold: RejectThreshold,
        pages: usize,
    ) -> Result<Self, zpage_codec::CodecError> {
        // Check the spec builds before any fault depends on it.
        Encoder::new(&spec, threshold)?;
        Decoder::new(&spec)?;
        Ok(Keep {
            spec,
            threshold,
            entries: (0..pages)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            compressed_bytes: AtomicUsize::new(0),
            stored_pages: AtomicUsize::new(0),
            same_filled_pages: AtomicUsize::new(0),
            raw_pages: AtomicUsize::new(0),
            decompressions: AtomicU64::new(0),
            compressions: AtomicU64::new(0),
        })
    }

    /// A decode-only worker (for the fault path) or a full one.
    pub fn worker(&self, encode: bool) -> Result<Worker, zpage_codec::CodecError> {
        Ok(Worker {
            enc: if encode {
                Some(Encoder::new(&self.spec, self.threshold)?)
            } else {
                None
            },
            dec: Decoder::new(&self.spec)?,
            buf: zpage_codec::zeroed_page(),
        })
    }

    /// Compresses `page` under `key`, replacing any previous entry. Allocates.
    pub fn store(
        &self,
        w: &mut Worker,
        key: usize,
        page: &Page,
    ) -> Result<Outcome, zpage_codec::CodecError> {
        let enc = match w.enc.as_mut() {
            Some(e) => e,
            None => {
                return Err(zpage_codec::CodecError::Dictionary(
                    "decode-only worker used to store".into(),
                ))
            }
        };
        let (entry, outcome) = match enc.encode(page, &mut w.buf)? {
            Encoded::SameFilled(word) => (Entry::Same(word), Outcome::SameFilled),
            Encoded::Compressed(len) => {
                (Entry::Blob(w.buf[..len].into()), Outcome::Compressed(len))
            }
            Encoded::Incompressible => (Entry::Raw(Box::new(*page)), Outcome::StoredRaw),
        };
        self.compressions.fetch_add(1, Ordering::Relaxed);
        self.account(&entry, true);
        let new = Box::into_raw(Box::new(entry));
        let old = self.entries[key].swap(new, Ordering::AcqRel);
        self.free(old);
        Ok(outcome)
    }

    /// Decompresses `key` into `out`. Allocates nothing (LZ4; zstd uses the
    /// worker's preallocated context). Async-signal-safe given the ownership rule above.
    pub fn load(
        &self,
        w: &mut Worker,
        key: usize,
        out: &mut Page,
    ) -> Result<bool, zpage_codec::CodecError> {
        let Some(slot) = self.entries.get(key) else {
            return Ok(false);
        };
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            return Ok(false);
        }
        // SAFETY: non-null entries are live Boxes; the ownership rule (module doc)
        // guarantees nobody frees this one while the caller holds the page.
        let entry = unsafe { &*p };
        match entry {
            Entry::Same(word) => fill_page(out, *word),
            Entry::Blob(b) => w.dec.decode(b, out)?,
            Entry::Raw(r) => out.copy_from_slice(&r[..]),
        }
        self.decompressions.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Drops the entry of `key` (frees memory: not from a signal handler).
    pub fn remove(&self, key: usize) -> bool {
        let Some(slot) = self.entries.get(key) else {
            return false;
        };
        let old = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        let had = !old.is_null();
        self.free(old);
        had
    }

    fn account(&self, e: &Entry, add: bool) {
        let upd = |c: &AtomicUsize, v: usize| {
            if add {
                c.fetch_add(v, Ordering::Relaxed);
            } else {
                c.fetch_sub(v, Ordering::Relaxed);
            }
        };
        upd(&self.stored_pages, 1);
        upd(&self.compressed_bytes, e.bytes());
        match e {
            Entry::Same(_) => upd(&self.same_filled_pages, 1),
            Entry::Raw(_) => upd(&self.raw_pages, 1),
            Entry::Blob(_) => {}
        }
    }

    fn free(&self, p: *mut Entry) {
        if p.is_null() {
            return;
        }
        // SAFETY: `p` came from Box::into_raw and was just unlinked by a swap,
        // so this is its only owner.
        let e = unsafe { Box::from_raw(p) };
        self.account(&e, false);
    }
}

impl Drop for Keep {
    fn drop(&mut self) {
        for i in 0..self.entries.len() {
            self.remove(i);
        }
    }
}
