//! Preallocated decompression workers for the fault path.
//!
//! A SIGBUS handler may not allocate, so the codec state and the page buffer it
//! decompresses into are made when the region is created. A handler takes a
//! free slot with one compare-and-swap and gives it back with one store; if
//! every slot is busy it yields and tries again (the holders are other threads
//! in the middle of a restore, which always finishes).
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};
use zpage_codec::Page;
use zpage_store::Worker;

struct Slot {
    busy: AtomicBool,
    cell: UnsafeCell<(Worker, Box<Page>)>,
}

/// A fixed set of workers shared by the threads that resolve faults.
pub struct WorkerSlots {
    slots: Box<[Slot]>,
}

// SAFETY: each cell is only accessed by the thread that won its `busy` flag.
unsafe impl Sync for WorkerSlots {}
// SAFETY: the workers are plain owned data.
unsafe impl Send for WorkerSlots {}

impl std::fmt::Debug for WorkerSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerSlots({})", self.slots.len())
    }
}

impl WorkerSlots {
    pub fn new(workers: Vec<Worker>) -> Self {
        WorkerSlots {
            slots: workers
                .into_iter()
                .map(|w| Slot {
                    busy: AtomicBool::new(false),
                    cell: UnsafeCell::new((w, zpage_codec::zeroed_page())),
                })
                .collect(),
        }
    }

    /// Runs `f` with exclusive use of one worker and its buffer. Async-signal-safe.
    pub fn with<R>(&self, f: impl FnOnce(&mut Worker, &mut Page) -> R) -> R {
        loop {
            for slot in self.slots.iter() {
                if slot
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    // SAFETY: winning the flag gives this thread sole access
                    // until the release store below.
                    let (w, page) = unsafe { &mut *slot.cell.get() };
                    let r = f(w, page);
                    slot.busy.store(false, Ordering::Release);
                    return r;
                }
            }
            crate::sys::yield_now();
        }
    }
}
