//! The reclaimer's second compressor: a thread that compresses staged pages
//! beside the reclaimer when a batch is large.
//!
//! **Why.** Compression is most of the reclaimer's time (LZ4 took two thirds
//! of its CPU under GNU sort at a fifth of its peak), and the reclaimer is
//! one thread: when the program's threads wait for room, every CPU but the
//! reclaimer's sits idle while it compresses, where the kernel's faulting
//! threads would each reclaim for themselves (direct reclaim). The faulting
//! threads cannot compress here: they run in a signal handler, and storing
//! a blob takes the pool's locks and allocates. So the reclaimer shares a
//! large batch with this thread instead: both take pages from one queue,
//! and the batch takes about half the time on two CPUs. A small batch is
//! not shared: waking the thread costs 20-75 µs here, a few pages' worth.
//!
//! **Why it is safe.** All the helper's work happens inside the reclaimer's
//! own critical section: the reclaimer posts a batch while it holds the
//! budget's reclaim lock, and before it lets the lock go it takes back what
//! the helper has not started and waits for the page the helper is on
//! ([`Helper::finish`]). So a fork, `advise_cold` or a region's teardown,
//! which take that lock, never find a page half compressed by it. A page is
//! claimed by compare-and-swap of its state word (STAGED to COMPRESSING) in
//! `evict::compress`, and the store, the staging area and the dedup table
//! take concurrent callers, as they do from faulting threads. The thread
//! blocks asynchronous signals and is one of zpage's threads (its
//! allocations come from zpage's own heap under the preload library).

use crate::evict::{self, Trigger};
use crate::queues::Record;
use crate::shared::Shared;
use crate::sys;
use crate::table;
use crate::threads::{self, ZpageThread};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use zpage_store::Worker;

/// A batch is shared with the helper from this many pages.
pub(super) const SHARED_BATCH_MIN: usize = 16;

/// How long the helper sleeps between looks when no batch is posted (a
/// post wakes it sooner).
const IDLE_LOOK_NS: u64 = 100_000_000;

/// A staged page: its record and its staging slot.
pub(super) type Staged = (Record, usize);

#[derive(Default)]
struct Batch {
    /// Pages not yet taken, oldest first.
    pages: VecDeque<Staged>,
    /// Pages the helper took and is compressing (0 or 1).
    in_flight: usize,
    /// Pages the helper stored, for the reclaimer's bookkeeping.
    stored: Vec<Record>,
}

struct Work {
    batch: Mutex<Batch>,
    /// Futex word: bumped when a batch is posted or the helper must stop.
    posted: AtomicU32,
    stop: AtomicBool,
}

impl Work {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        // A panic while holding it leaves a consistent batch (each change is
        // one statement), so a poisoned lock is taken as is.
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        self.posted.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.posted);
    }
}

/// The second compressor, owned by the reclaimer.
pub(super) struct Helper {
    work: Arc<Work>,
    thread: Option<ZpageThread>,
}

impl std::fmt::Debug for Helper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Helper")
    }
}

impl Helper {
    /// Starts the helper when the machine has a second CPU to run it on
    /// (`None` otherwise, or when it cannot start: the reclaimer then
    /// compresses alone, as before).
    pub(super) fn start(budget: &Arc<Shared>) -> Option<Helper> {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            return None;
        }
        let mut worker = budget.store().worker().ok()?;
        let work = Arc::new(Work {
            batch: Mutex::new(Batch::default()),
            posted: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        });
        let (theirs, budget) = (Arc::clone(&work), Arc::clone(budget));
        let thread = threads::spawn_blocking_signals(
            "zpage-compress",
            Box::new(move || {
                warm_thread_locals(&budget);
                run(&theirs, &mut worker);
            }),
        )
        .ok()?;
        Some(Helper {
            work,
            thread: Some(thread),
        })
    }

    /// Hands `pages` over to be compressed by both threads.
    pub(super) fn post(&self, pages: impl Iterator<Item = Staged>) {
        self.work.lock().pages.extend(pages);
        self.work.wake();
    }

    /// The next page of the posted batch, for the reclaimer to compress.
    pub(super) fn take(&self) -> Option<Staged> {
        self.work.lock().pages.pop_front()
    }

    /// Pages of the posted batch not yet stored: not taken, or being
    /// compressed by the helper.
    pub(super) fn pending(&self) -> usize {
        let batch = self.work.lock();
        batch.pages.len() + batch.in_flight
    }

    /// Ends the batch: takes back the pages nobody started (oldest first)
    /// and, once the helper finished the page it is on, the pages it stored.
    pub(super) fn finish(&self) -> (VecDeque<Staged>, Vec<Record>) {
        let rest = std::mem::take(&mut self.work.lock().pages);
        loop {
            let mut batch = self.work.lock();
            if batch.in_flight == 0 {
                return (rest, std::mem::take(&mut batch.stored));
            }
            drop(batch);
            // One page's compression: a few microseconds.
            std::thread::yield_now();
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.work.stop.store(true, Ordering::SeqCst);
        self.work.wake();
        if let Some(thread) = self.thread.take() {
            thread.join();
        }
    }
}

/// The helper's body: compresses posted pages until told to stop.
fn run(work: &Work, worker: &mut Worker) {
    loop {
        let seen = work.posted.load(Ordering::SeqCst);
        if work.stop.load(Ordering::SeqCst) {
            return;
        }
        loop {
            let next = {
                let mut batch = work.lock();
                let next = batch.pages.pop_front();
                batch.in_flight += usize::from(next.is_some());
                next
            };
            let Some((record, slot)) = next else {
                break;
            };
            let stored = table::with_region(record.region(), |core| {
                let stored = evict::compress(core, record.page(), slot, worker, Trigger::Pressure);
                if stored {
                    crate::counters::Counters::bump(&core.counters.helper_compression_count);
                }
                stored
            }) == Some(true);
            let mut batch = work.lock();
            batch.in_flight -= 1;
            if stored {
                batch.stored.push(record);
            }
        }
        sys::futex_wait(&work.posted, seen, IDLE_LOOK_NS);
    }
}

/// The first use of a thread-local with a destructor on a thread (the
/// LZ4 library's compression state is one) makes the C library record
/// the destructor with a `calloc` from the program's allocator, whose
/// memory may lie in this budget's regions (jemalloc's extents under
/// `zpage run`). Made in the middle of an eviction, that call can fault
/// on the very page being compressed and wait on itself. So every codec
/// of the store compresses one page here, before the thread (the
/// reclaimer, its second compressor) evicts or compresses anything.
pub(super) fn warm_thread_locals(budget: &Shared) {
    let mut page: Box<zpage_codec::Page> = Box::new([0; zpage_codec::PAGE_SIZE]);
    for (i, byte) in page.iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    let mut out: Box<zpage_codec::Page> = Box::new([0; zpage_codec::PAGE_SIZE]);
    for number in 0..=u8::MAX {
        let Some(spec) = budget.store().codec(number) else {
            break;
        };
        if let Ok(mut encoder) =
            zpage_codec::Encoder::new(spec, zpage_codec::RejectThreshold::default())
        {
            let _ = encoder.compress(&page, &mut out);
        }
    }
}
