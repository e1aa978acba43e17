//! The memory allocator of the library's own Rust code.
//!
//! The library runs inside the program's `malloc`, `mmap` and `free` calls.
//! glibc's `malloc` holds its arena lock while it calls `mmap`, and a runtime
//! with its own allocator (jemalloc in Redis, V8) holds its own; if zpage's
//! code called the C library's `malloc` from there it could wait forever on a
//! lock its own thread holds. So Rust code in this library allocates from a
//! private dlmalloc heap whose memory comes from raw `mmap` system calls,
//! which no interposer (ours included) sees.
//!
//! One lock guards the heap (zpage allocates rarely: region bookkeeping,
//! reports). It is the page heap's spin lock (`zpage_pages::SpinLock`)
//! rather than a pthread mutex, so a forked child can reset it (see
//! [`after_fork_in_child`]).
//!
//! **zpage's threads allocate only here.** What they allocate through the
//! C library (its first thread-local destructor registration `calloc`s, and
//! the zstd library and DNS lookups `malloc`) reaches the library's `malloc`
//! family, which serves zpage's threads from this heap ([`c_malloc`] and
//! the rest): the program's allocator keeps its memory in regions, and a
//! zpage thread touching an evicted page there could wait on itself (a
//! forked child's event thread did, hanging Redis's `BGSAVE`). The heap's
//! memory comes from one reserved range, so `free` tells its blocks from
//! the program's by address ([`owns`]), whichever thread frees them.
#![allow(unsafe_code)]

use dlmalloc::{Allocator, Dlmalloc};
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use zpage_pages::SpinLock;

/// The heap's address range: reserved (`PROT_NONE`, no memory) at the
/// first allocation, handed out to the heap from the bottom up.
const RANGE_BYTES: usize = 64 << 30;
static RANGE_BASE: AtomicUsize = AtomicUsize::new(0);
/// Bytes of the range handed out (changed under the heap's lock: dlmalloc
/// calls its system allocator with it held).
static RANGE_USED: AtomicUsize = AtomicUsize::new(0);
/// Bytes of live allocations (their requested sizes), under the heap's lock.
static IN_USE: AtomicUsize = AtomicUsize::new(0);

/// True if `p` was allocated from this heap. Async-signal-safe.
pub fn owns(p: *const u8) -> bool {
    let base = RANGE_BASE.load(Ordering::Acquire);
    base != 0 && (p as usize).wrapping_sub(base) < RANGE_BYTES
}

/// The heap's size now: bytes allocated and not freed, and bytes of its
/// range resident (those, dlmalloc's headers, and free space it has touched
/// and not given back; capacity a large block has not used yet is not
/// resident). Counts pages with `mincore` over the chunks of the range
/// that hold mapped memory.
pub fn usage() -> HeapUsage {
    HeapUsage {
        in_use_bytes: IN_USE.load(Ordering::Relaxed) as u64,
        resident_bytes: resident_bytes(),
    }
}

/// See [`usage`].
#[derive(Clone, Copy, Debug, Default)]
pub struct HeapUsage {
    pub in_use_bytes: u64,
    pub resident_bytes: u64,
}

/// The range in chunks, each with a count of its bytes mapped read-write,
/// so that counting resident pages looks only where memory is: freed
/// blocks are not reused, so the part of the range handed out grows all
/// the while, most of it given back.
const CHUNK_BYTES: usize = 2 << 20;
const CHUNKS: usize = RANGE_BYTES / CHUNK_BYTES;
const _: () = assert!(RANGE_BYTES.is_multiple_of(CHUNK_BYTES) && CHUNK_BYTES <= u32::MAX as usize);
static MAPPED_IN_CHUNK: [AtomicU32; CHUNKS] = [const { AtomicU32::new(0) }; CHUNKS];

/// Counts `size` bytes at `offset` in the range as mapped read-write
/// (`mapped`) or given back.
fn count_mapped(offset: usize, size: usize, mapped: bool) {
    let end = offset + size;
    let mut at = offset;
    while at < end {
        let chunk = at / CHUNK_BYTES;
        let chunk_end = ((chunk + 1) * CHUNK_BYTES).min(end);
        let bytes = (chunk_end - at) as u32;
        if mapped {
            MAPPED_IN_CHUNK[chunk].fetch_add(bytes, Ordering::Relaxed);
        } else {
            MAPPED_IN_CHUNK[chunk].fetch_sub(bytes, Ordering::Relaxed);
        }
        at = chunk_end;
    }
}

fn resident_bytes() -> u64 {
    let base = RANGE_BASE.load(Ordering::Acquire);
    if base == 0 {
        return 0;
    }
    let used = RANGE_USED.load(Ordering::Relaxed);
    let page = zpage_codec::PAGE_SIZE;
    // On the stack: this runs on zpage's sampling thread, and a vector in
    // the heap would count itself.
    let mut in_core = [0u8; CHUNK_BYTES / zpage_codec::PAGE_SIZE];
    let mut resident = 0;
    let chunks = MAPPED_IN_CHUNK.iter().take(used.div_ceil(CHUNK_BYTES));
    for (chunk, mapped) in chunks.enumerate() {
        if mapped.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let start = chunk * CHUNK_BYTES;
        let pages = ((start + CHUNK_BYTES).min(used) - start) / page;
        // SAFETY: the range lies in the heap's reservation, which stays
        // mapped (read-write or PROT_NONE) for the life of the process;
        // `in_core` has room for a chunk's pages.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mincore,
                base + start,
                pages * page,
                in_core.as_mut_ptr(),
            )
        };
        if rc == 0 {
            resident += in_core[..pages].iter().filter(|&&b| b & 1 != 0).count();
        }
    }
    (resident * page) as u64
}

/// Maps `size` bytes read-write at `addr` (in the reserved range), or
/// makes them `PROT_NONE` again.
fn remap_fixed(addr: usize, size: usize, prot: i32) -> bool {
    crate::sys::raw_mmap(
        addr as *mut libc::c_void,
        size,
        prot,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
        -1,
        0,
    ) as usize
        == addr
}

/// Makes `size` bytes at `addr` in the range `PROT_NONE` again, giving
/// their memory back, and counts them out of their chunks.
fn give_back(addr: usize, size: usize) -> bool {
    let freed = remap_fixed(addr, size, libc::PROT_NONE);
    if freed {
        count_mapped(addr - RANGE_BASE.load(Ordering::Relaxed), size, false);
    }
    freed
}

/// Pages from the heap's reserved range.
struct RawPages;

// SAFETY: the methods below return fresh private anonymous mappings in the
// reserved range (or null), free only what they were given, and report
// what mmap guarantees (zeroed memory, 4 KiB pages). They run with the
// heap's lock held, which serialises RANGE_USED.
unsafe impl Allocator for RawPages {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        let mut base = RANGE_BASE.load(Ordering::Acquire);
        if base == 0 {
            let p = crate::sys::raw_mmap(
                std::ptr::null_mut(),
                RANGE_BYTES,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return (std::ptr::null_mut(), 0, 0);
            }
            base = p as usize;
            RANGE_BASE.store(base, Ordering::Release);
        }
        let size = size.next_multiple_of(zpage_codec::PAGE_SIZE);
        let used = RANGE_USED.load(Ordering::Relaxed);
        if RANGE_BYTES - used < size
            || !remap_fixed(base + used, size, libc::PROT_READ | libc::PROT_WRITE)
        {
            return (std::ptr::null_mut(), 0, 0);
        }
        RANGE_USED.store(used + size, Ordering::Relaxed);
        count_mapped(used, size, true);
        ((base + used) as *mut u8, size, 0)
    }

    fn remap(&self, _ptr: *mut u8, _oldsize: usize, _newsize: usize, _can_move: bool) -> *mut u8 {
        // dlmalloc then takes a new segment.
        std::ptr::null_mut()
    }

    fn free_part(&self, ptr: *mut u8, oldsize: usize, newsize: usize) -> bool {
        give_back(ptr as usize + newsize, oldsize - newsize)
    }

    fn free(&self, ptr: *mut u8, size: usize) -> bool {
        // The addresses are not reused: the range is far larger than
        // anything zpage allocates, and its memory goes back to the kernel.
        give_back(ptr as usize, size)
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        true
    }

    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        zpage_codec::PAGE_SIZE
    }
}

/// The library's global allocator. `Sync` through its lock: dlmalloc's
/// state is `Send` and reached only under it.
pub struct PrivateHeap {
    heap: SpinLock<Dlmalloc<RawPages>>,
}

impl PrivateHeap {
    pub const fn new() -> PrivateHeap {
        PrivateHeap {
            heap: SpinLock::new(Dlmalloc::new_with_allocator(RawPages)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Dlmalloc<RawPages>) -> R) -> R {
        self.heap.with(f)
    }
}

impl Default for PrivateHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: dlmalloc implements the GlobalAlloc contract for the layouts it is
// given; every call runs under the heap's lock.
// IN_USE changes inside the lock, so that it never reads below zero.
unsafe impl GlobalAlloc for PrivateHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|h| counted(unsafe { h.malloc(layout.size(), layout.align()) }, layout))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        self.with(|h| counted(unsafe { h.calloc(layout.size(), layout.align()) }, layout))
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        self.with(|h| {
            // SAFETY: forwarded contract.
            unsafe { h.free(ptr, layout.size(), layout.align()) };
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        })
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.with(|h| {
            // SAFETY: forwarded contract.
            let p = unsafe { h.realloc(ptr, layout.size(), layout.align(), new_size) };
            if !p.is_null() {
                IN_USE.fetch_add(new_size, Ordering::Relaxed);
                IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            }
            p
        })
    }
}

/// `p`, a block just allocated with `layout` (or null), counted in use.
fn counted(p: *mut u8, layout: Layout) -> *mut u8 {
    if !p.is_null() {
        IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
    }
    p
}

#[global_allocator]
pub static HEAP: PrivateHeap = PrivateHeap::new();

thread_local! {
    /// Set while the thread's C-library allocations go to this heap though
    /// it is the program's (module `spawn`). Const-initialised, no
    /// destructor.
    static PRIVATE_SCOPE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// While alive, the thread's `malloc` family is served from this heap.
pub struct PrivateScope(());

impl PrivateScope {
    pub fn enter() -> PrivateScope {
        PRIVATE_SCOPE.with(|c| c.set(c.get() + 1));
        PrivateScope(())
    }
}

impl Drop for PrivateScope {
    fn drop(&mut self) {
        PRIVATE_SCOPE.with(|c| c.set(c.get() - 1));
    }
}

/// True if the calling thread's C-library allocations go to this heap:
/// zpage's own threads, zpage's code running inside an interposer on a
/// program thread (the C library allocates for it: a new thread's TLS when
/// the budget starts its threads, from inside the program's own `malloc`,
/// whose allocator's locks are held), and a [`PrivateScope`].
pub fn serves_this_thread() -> bool {
    zpage_region::on_zpage_thread() || crate::sys::inside() || PRIVATE_SCOPE.with(|c| c.get() != 0)
}

/// Bytes in front of every block of the C-library interface: where the
/// dlmalloc block starts, and its size.
const HEADER: usize = 16;

/// `malloc` from this heap for the C library's calls on zpage's threads:
/// `n` bytes aligned to `align` (at least 16), or null.
pub fn c_malloc(n: usize, align: usize) -> *mut u8 {
    let align = align.max(HEADER);
    let Some(total) = n.checked_add(align).and_then(|t| t.checked_add(HEADER)) else {
        return std::ptr::null_mut();
    };
    let Ok(layout) = Layout::from_size_align(total, HEADER) else {
        return std::ptr::null_mut();
    };
    // SAFETY: a non-zero size with a valid alignment.
    let raw = unsafe { HEAP.alloc(layout) };
    if raw.is_null() {
        return raw;
    }
    let user = (raw as usize + HEADER).next_multiple_of(align);
    // SAFETY: user - HEADER >= raw, and user + n <= raw + total: the header
    // words lie inside the block, 8-aligned.
    unsafe {
        *((user - HEADER) as *mut usize) = raw as usize;
        *((user - HEADER + 8) as *mut usize) = total;
    }
    user as *mut u8
}

/// The dlmalloc block and its size behind a block of [`c_malloc`].
///
/// # Safety
/// `p` came from [`c_malloc`] and is live.
unsafe fn block_of(p: *mut u8) -> (*mut u8, usize) {
    // SAFETY: per the contract, the header words precede `p`.
    unsafe {
        (
            *((p as usize - HEADER) as *const usize) as *mut u8,
            *((p as usize - HEADER + 8) as *const usize),
        )
    }
}

/// `free` of a block of [`c_malloc`].
///
/// # Safety
/// `p` came from [`c_malloc`] and is live.
pub unsafe fn c_free(p: *mut u8) {
    // SAFETY: the contract.
    let (raw, total) = unsafe { block_of(p) };
    // SAFETY: the block was allocated with this layout.
    unsafe { HEAP.dealloc(raw, Layout::from_size_align_unchecked(total, HEADER)) };
}

/// `malloc_usable_size` of a block of [`c_malloc`].
///
/// # Safety
/// `p` came from [`c_malloc`] and is live.
pub unsafe fn c_usable_size(p: *mut u8) -> usize {
    // SAFETY: the contract.
    let (raw, total) = unsafe { block_of(p) };
    total - (p as usize - raw as usize)
}

/// `realloc` of a block of [`c_malloc`] (or null) to `n` bytes.
///
/// # Safety
/// `p` is null or came from [`c_malloc`] and is live.
pub unsafe fn c_realloc(p: *mut u8, n: usize) -> *mut u8 {
    let q = c_malloc(n, HEADER);
    if !p.is_null() && !q.is_null() {
        // SAFETY: both blocks are live for the copied length.
        unsafe {
            std::ptr::copy_nonoverlapping(p, q, c_usable_size(p).min(n));
            c_free(p);
        }
    }
    q
}

/// Taken by the fork prepare hook so the child never inherits the heap
/// locked by a thread that does not exist there.
pub fn lock_for_fork() {
    HEAP.heap.lock();
}

/// The parent's side of [`lock_for_fork`].
pub fn unlock_after_fork() {
    HEAP.heap.unlock();
}

/// The child's side of [`lock_for_fork`].
pub fn after_fork_in_child() {
    HEAP.heap.force_unlock();
}
