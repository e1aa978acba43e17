//! Whole pages of memory that go back to the kernel when they are freed.
//!
//! A compressed pool is made of zspages, runs of one to a few pages, and it
//! takes them and frees them all the time: a zspage is freed as soon as its
//! last blob is (a page restored, written back to a tier, discarded). Taken
//! from a general allocator, a freed zspage stays resident: the allocator
//! keeps what is freed for reuse and gives back only whole segments, which
//! a pool's scattered frees never empty. A pool that shrank kept its
//! high-water mark resident. Node under `zpage run --memory-max 86M` with a
//! backing tier ended with 3 MiB in its regions, an empty pool and 72 MiB
//! of anonymous memory, nearly all of it the pool's freed zspages, and the
//! memory max, which counts them as memory outside compressed memory,
//! squeezed its budget to the floor and still passed the limit.
//!
//! [`PageRun`] takes its pages from one heap per process ([`heap_stats`]):
//! address space reserved once, handed out from the bottom up and made
//! read-write as it is used. A freed run is kept by its length for reuse,
//! resident; past a bound (a sixty-fourth of the pages in use, and 1 MiB),
//! the oldest kept runs go back to the kernel, many with one system call
//! ([`discard_ranges`]), and are reused later as fresh zero pages. Runs of
//! one length are never split or merged: address space is what the heap
//! wastes, not memory.
//!
//! [`discard_ranges`] (`MADV_DONTNEED` on many ranges with one
//! `process_madvise`) is here because both the pool's heap and the region's
//! staging area need it.
//!
//! The heap makes its system calls raw (`syscall`), so that an interposer
//! of `mmap` and `madvise` (the preload library's, which places anonymous
//! memory in compressed memory) never sees them.
//!
//! Not async-signal-safe except where a function says so: a run's bytes
//! may be read in a signal handler (the pool's `get`), but runs are taken
//! and freed in normal context. The heap's lock is a spin lock that a
//! forked child resets (with the free lists, which a thread of the parent
//! may have been changing): the child keeps the runs it uses and forgets
//! the free ones.
#![allow(unsafe_code)]

mod spin;

pub use spin::SpinLock;

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// The page size the heap hands out (the project's one page size).
pub const PAGE_SIZE: usize = 4096;

/// The longest run, in pages.
pub const MAX_RUN_PAGES: usize = 16;

/// Address space the heap reserves (no memory until used): far more than
/// any pool on this class of machine.
const RESERVE_BYTES: usize = 1 << 40;

/// The heap's reserved range is made read-write this much at a time.
const COMMIT_BYTES: usize = 2 << 20;

/// Freed pages kept resident for reuse, at least (1 MiB)...
const KEPT_PAGES_MIN: usize = 256;
/// ... and as a share of the pages in use: 1/64.
const KEPT_SHARE_SHIFT: u32 = 6;

/// Most runs given back with one [`discard_ranges`] call from the heap.
const GIVE_BACK_BATCH: usize = 64;

/// Most ranges one `process_madvise` call of [`discard_ranges`] hands the
/// kernel (its iovec array is on the stack; more ranges take more calls).
pub const DISCARD_RANGES_MAX: usize = 256;

/// `process_madvise`'s "the calling thread's process" (Linux 6.15+): no
/// pidfd to open, and none to reopen in a forked child.
const PIDFD_SELF_THREAD: libc::c_int = -10000;

/// Whether [`discard_ranges`] still tries `process_madvise`: cleared once
/// the kernel refuses it, so that an older kernel costs one failed call, not
/// one a batch.
static BATCHED: AtomicBool = AtomicBool::new(true);

/// `MADV_DONTNEED` on many ranges at once, with one `process_madvise`
/// call: the kernel flushes the TLB once for the lot instead of once a
/// range, and a flush interrupts every CPU running a thread of the process
/// (0.72 against 10.08 µs a one-page range with a thread running on the
/// other CPU: the table in the region crate's README). A kernel without it
/// (before 6.15), or a partial advice, falls back to one `madvise` a range
/// (advising a range twice is harmless). The caller gives up the ranges'
/// contents: they read as zeros after. Async-signal-safe.
pub fn discard_ranges(ranges: &[(usize, usize)]) {
    for batch in ranges.chunks(DISCARD_RANGES_MAX) {
        discard_batch(batch);
    }
}

/// [`discard_ranges`] for at most [`DISCARD_RANGES_MAX`] ranges.
fn discard_batch(ranges: &[(usize, usize)]) {
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; DISCARD_RANGES_MAX];
    let mut total = 0;
    for (slot, &(addr, len)) in iov.iter_mut().zip(ranges) {
        *slot = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        total += len;
    }
    if ranges.len() > 1 && BATCHED.load(Ordering::Relaxed) {
        // SAFETY: the iovecs name ranges whose contents the caller gave up;
        // the kernel only reads the array.
        let done = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                PIDFD_SELF_THREAD,
                iov.as_ptr(),
                ranges.len(),
                libc::MADV_DONTNEED,
                0,
            )
        };
        if done == total as i64 {
            return;
        }
        // EPERM: a seccomp filter that allows `madvise` but not this.
        // SAFETY: reads the calling thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        if done < 0
            && matches!(
                errno,
                libc::EBADF | libc::ENOSYS | libc::EINVAL | libc::EPERM
            )
        {
            BATCHED.store(false, Ordering::Relaxed);
        }
    }
    for &(addr, len) in ranges {
        // SAFETY: as above, one range at a time.
        unsafe { libc::syscall(libc::SYS_madvise, addr, len, libc::MADV_DONTNEED) };
    }
}

/// Whether the last [`discard_ranges`] of several ranges could use one
/// `process_madvise` (for tests: kernels from 6.15 take it).
pub fn discards_are_batched() -> bool {
    BATCHED.load(Ordering::Relaxed)
}

/// A run of whole pages, page-aligned, owned alone; its pages go back to
/// the process's page heap when it is dropped. It reads as zeros when
/// taken.
pub struct PageRun {
    addr: NonNull<u8>,
    pages: usize,
}

// SAFETY: a run is memory owned by its holder alone, as a `Box<[u8]>` is.
unsafe impl Send for PageRun {}
// SAFETY: shared access only reads through `&[u8]`.
unsafe impl Sync for PageRun {}

impl PageRun {
    /// A run of `pages` pages (1..=[`MAX_RUN_PAGES`]); `None` when the
    /// kernel refuses the memory (out of address space or commit).
    ///
    /// # Panics
    /// On a length outside 1..=[`MAX_RUN_PAGES`]: a caller's bug.
    pub fn new(pages: usize) -> Option<PageRun> {
        assert!(
            (1..=MAX_RUN_PAGES).contains(&pages),
            "a page run is 1 to {MAX_RUN_PAGES} pages, not {pages}"
        );
        let (addr, dirty) = HEAP.take(pages)?;
        if dirty {
            // SAFETY: the run is ours alone from now on, `pages` pages long.
            unsafe { std::ptr::write_bytes(addr.as_ptr(), 0, pages * PAGE_SIZE) };
        }
        Some(PageRun { addr, pages })
    }

    /// Its length in pages.
    pub fn pages(&self) -> usize {
        self.pages
    }
}

impl std::ops::Deref for PageRun {
    type Target = [u8];
    /// Async-signal-safe (no call, no lock).
    fn deref(&self) -> &[u8] {
        // SAFETY: the run is `pages` pages of read-write memory that only
        // this value hands out references to, alive until it is dropped.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.pages * PAGE_SIZE) }
    }
}

impl std::ops::DerefMut for PageRun {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.pages * PAGE_SIZE) }
    }
}

impl Drop for PageRun {
    fn drop(&mut self) {
        HEAP.give(self.addr, self.pages);
    }
}

impl std::fmt::Debug for PageRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRun")
            .field("addr", &self.addr)
            .field("pages", &self.pages)
            .finish()
    }
}

/// What the process's page heap holds, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    /// In runs taken and not dropped.
    pub in_use_bytes: usize,
    /// Freed, kept resident for reuse.
    pub kept_bytes: usize,
    /// Freed and given back to the kernel (address space only).
    pub given_back_bytes: usize,
    /// Address space handed out so far (the sum of the above).
    pub used_range_bytes: usize,
}

/// What the process's page heap holds now.
pub fn heap_stats() -> HeapStats {
    HEAP.stats()
}

/// The page heap: one per process.
struct Heap {
    state: SpinLock<State>,
}

/// Free runs of one length, by page number from the range's start.
type Runs = [Vec<u32>; MAX_RUN_PAGES + 1];
type KeptRuns = [VecDeque<u32>; MAX_RUN_PAGES + 1];

struct State {
    /// The reserved range's start; 0 until the first run is taken.
    base: usize,
    /// Pages of the range handed out, from the bottom.
    handed_out: usize,
    /// Pages of the range made read-write.
    committed: usize,
    /// Freed runs still resident, oldest first in each list.
    kept: KeptRuns,
    kept_pages: usize,
    /// Freed runs given back to the kernel: they read as zeros.
    given_back: Runs,
    given_back_pages: usize,
    in_use_pages: usize,
}

static HEAP: Heap = Heap {
    state: SpinLock::new(State {
        base: 0,
        handed_out: 0,
        committed: 0,
        kept: [const { VecDeque::new() }; MAX_RUN_PAGES + 1],
        kept_pages: 0,
        given_back: [const { Vec::new() }; MAX_RUN_PAGES + 1],
        given_back_pages: 0,
        in_use_pages: 0,
    }),
};

/// Registers the forked child's reset, once.
static AT_FORK: std::sync::Once = std::sync::Once::new();

extern "C" fn reset_in_forked_child() {
    HEAP.reset_after_fork();
}

impl Heap {
    /// Runs `f` on the state under the lock. `f` must not take a run or
    /// give one back (the lock is not reentrant).
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        self.state.with(f)
    }

    /// A run of `pages` and whether it may hold old bytes (a kept run).
    fn take(&self, pages: usize) -> Option<(NonNull<u8>, bool)> {
        AT_FORK.call_once(|| {
            // SAFETY: registers a handler that only resets this heap.
            unsafe { libc::pthread_atfork(None, None, Some(reset_in_forked_child)) };
        });
        self.with(|s| {
            let (page, dirty) = if let Some(page) = s.kept[pages].pop_back() {
                s.kept_pages -= pages;
                (page as usize, true)
            } else if let Some(page) = s.given_back[pages].pop() {
                s.given_back_pages -= pages;
                (page as usize, false)
            } else {
                (s.hand_out(pages)?, false)
            };
            s.in_use_pages += pages;
            NonNull::new((s.base + page * PAGE_SIZE) as *mut u8).map(|p| (p, dirty))
        })
    }

    /// Takes a run back; gives the oldest kept runs back to the kernel
    /// when more are kept than the bound allows.
    fn give(&self, addr: NonNull<u8>, pages: usize) {
        let mut batch = [(0usize, 0usize); GIVE_BACK_BATCH];
        let (count, base) = self.with(|s| {
            let page = (addr.as_ptr() as usize - s.base) / PAGE_SIZE;
            s.in_use_pages -= pages;
            s.kept[pages].push_back(page as u32);
            s.kept_pages += pages;
            (s.oldest_over_bound(&mut batch), s.base)
        });
        if count == 0 {
            return;
        }
        let ranges = batch.map(|(page, pages)| (base + page * PAGE_SIZE, pages * PAGE_SIZE));
        discard_ranges(&ranges[..count]);
        self.with(|s| {
            for &(page, pages) in &batch[..count] {
                s.given_back[pages].push(page as u32);
                s.given_back_pages += pages;
            }
        });
    }

    fn stats(&self) -> HeapStats {
        self.with(|s| HeapStats {
            in_use_bytes: s.in_use_pages * PAGE_SIZE,
            kept_bytes: s.kept_pages * PAGE_SIZE,
            given_back_bytes: s.given_back_pages * PAGE_SIZE,
            used_range_bytes: s.handed_out * PAGE_SIZE,
        })
    }

    /// In a forked child: the lock and the free lists start again (a parent
    /// thread may have held the one and been changing the others); the free
    /// runs are forgotten, the runs in use and the range stay.
    fn reset_after_fork(&self) {
        // SAFETY: the child has one thread, this one, which holds no
        // reference to the state (it runs a fork hook).
        let s = unsafe { self.state.get_unlocked() };
        std::mem::forget(std::mem::replace(
            &mut s.kept,
            [const { VecDeque::new() }; MAX_RUN_PAGES + 1],
        ));
        std::mem::forget(std::mem::replace(
            &mut s.given_back,
            [const { Vec::new() }; MAX_RUN_PAGES + 1],
        ));
        s.kept_pages = 0;
        s.given_back_pages = 0;
        self.state.force_unlock();
    }
}

impl State {
    /// `pages` fresh pages from the bottom of the range: their first page.
    fn hand_out(&mut self, pages: usize) -> Option<usize> {
        if self.base == 0 {
            // SAFETY: a new private reservation: no memory, no access.
            let p = unsafe {
                libc::syscall(
                    libc::SYS_mmap,
                    0usize,
                    RESERVE_BYTES,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1i32,
                    0usize,
                )
            };
            if p < 0 {
                return None;
            }
            self.base = p as usize;
        }
        let end = self.handed_out + pages;
        if end * PAGE_SIZE > RESERVE_BYTES {
            return None;
        }
        if end > self.committed {
            let from = self.committed * PAGE_SIZE;
            let len = (end * PAGE_SIZE - from)
                .next_multiple_of(COMMIT_BYTES)
                .min(RESERVE_BYTES - from);
            // SAFETY: a part of our own reservation not handed out yet.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_mprotect,
                    self.base + from,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                return None;
            }
            self.committed += len / PAGE_SIZE;
        }
        let first = self.handed_out;
        self.handed_out = end;
        Some(first)
    }

    /// Fills `batch` with the oldest kept runs while more are kept than
    /// the bound allows (down to half of it); returns how many it took.
    fn oldest_over_bound(&mut self, batch: &mut [(usize, usize); GIVE_BACK_BATCH]) -> usize {
        let bound = KEPT_PAGES_MIN + (self.in_use_pages >> KEPT_SHARE_SHIFT);
        if self.kept_pages <= bound {
            return 0;
        }
        let mut count = 0;
        'lengths: for pages in (1..=MAX_RUN_PAGES).rev() {
            while self.kept_pages > bound / 2 {
                if count == GIVE_BACK_BATCH {
                    break 'lengths;
                }
                let Some(page) = self.kept[pages].pop_front() else {
                    break;
                };
                self.kept_pages -= pages;
                batch[count] = (page as usize, pages);
                count += 1;
            }
        }
        count
    }
}
