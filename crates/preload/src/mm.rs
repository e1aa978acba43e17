//! The memory-map interposers: `mmap`/`mmap64`, `munmap`, `mremap`,
//! `mprotect`, `madvise`.
//!
//! What becomes a region (see the crate docs for why): a mapping with no
//! address hint, `PROT_READ|PROT_WRITE`, flags `MAP_PRIVATE|MAP_ANONYMOUS`
//! (with `MAP_NORESERVE` allowed) and at least the size threshold.
//! Everything else goes to the C library unchanged, except that a call that
//! changes part of a region first makes that region plain memory (same
//! address, same contents, counted as ejected) or, when it covers the whole
//! region, gives the region up.
#![allow(unsafe_code)]

use crate::real;
use crate::state::{self, Placed};
use crate::sys::{self, Inside};
use libc::{c_int, c_void, off_t, size_t};
use zpage_codec::PAGE_SIZE;

const PLACEABLE_FLAGS: c_int = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;

fn placeable(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, min: usize) -> bool {
    addr.is_null()
        && len >= min
        && prot == libc::PROT_READ | libc::PROT_WRITE
        && flags & (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS)
            == libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        && flags & !PLACEABLE_FLAGS == 0
}

pub fn next_mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    match real::mmap() {
        // SAFETY: the C library's mmap with the caller's arguments.
        Some(f) => unsafe { f(addr, len, prot, flags, fd, off) },
        None => sys::raw_mmap(addr, len, prot, flags, fd, off),
    }
}

pub fn next_munmap(addr: *mut c_void, len: size_t) -> c_int {
    match real::munmap() {
        // SAFETY: the C library's munmap with the caller's arguments.
        Some(f) => unsafe { f(addr, len) },
        None => sys::raw_munmap(addr, len),
    }
}

/// Gives up or ejects every region overlapping `[addr, addr + len)` before
/// the caller unmaps or maps over that range: a region the range covers
/// whole is given up (its contents are going away), one it covers in part
/// becomes plain memory first.
fn vacate(state: &state::State, addr: usize, len: usize) {
    let end = addr.saturating_add(len.next_multiple_of(PAGE_SIZE));
    for placed in state.take_overlapping(addr, len) {
        if placed.base >= addr && placed.base + placed.len <= end {
            state.release(placed);
        } else {
            state.eject(placed);
        }
    }
}

/// Makes every region overlapping the range plain memory (contents kept).
fn eject_overlapping(state: &state::State, addr: usize, len: usize) {
    for placed in state.take_overlapping(addr, len) {
        state.eject(placed);
    }
}

/// # Safety
/// The caller's contract is `mmap(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    if let Some(state) = state::placing() {
        if placeable(addr, len, prot, flags, state.config.min_mapping_bytes)
            && !zpage_region::on_zpage_thread()
        {
            let _inside = Inside::enter();
            if let Some(base) = state.place(len, false) {
                return base as *mut c_void;
            }
        } else if flags & libc::MAP_FIXED != 0 && state.may_overlap(addr as usize, len) {
            let _inside = Inside::enter();
            vacate(state, addr as usize, len);
        }
    } else if let Some(state) = state::get() {
        if flags & libc::MAP_FIXED != 0 && !sys::inside() && state.may_overlap(addr as usize, len) {
            let _inside = Inside::enter();
            vacate(state, addr as usize, len);
        }
    }
    next_mmap(addr, len, prot, flags, fd, off)
}

/// # Safety
/// As [`mmap`].
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: same contract.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// The state, when a call from the program (not from zpage itself) may
/// involve regions.
fn program_call(addr: usize, len: usize) -> Option<&'static state::State> {
    let state = state::get()?;
    (!sys::inside() && state.may_overlap(addr, len)).then_some(state)
}

/// # Safety
/// The caller's contract is `munmap(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(state) = program_call(addr as usize, len) {
        let _inside = Inside::enter();
        vacate(state, addr as usize, len);
    }
    next_munmap(addr, len)
}

/// # Safety
/// The caller's contract is `mprotect(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // Read-write is what a region already is; any other protection on part
    // of a region would leave pages the reclaimer cannot move out (and
    // write-protected restores it could not make): plain memory instead.
    if prot != libc::PROT_READ | libc::PROT_WRITE {
        if let Some(state) = program_call(addr as usize, len) {
            let _inside = Inside::enter();
            eject_overlapping(state, addr as usize, len);
        }
    }
    match real::mprotect() {
        // SAFETY: the C library's mprotect with the caller's arguments.
        Some(f) => unsafe { f(addr, len, prot) },
        // SAFETY: the raw system call with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot) as c_int },
    }
}

fn next_madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    match real::madvise() {
        // SAFETY: the C library's madvise with the caller's arguments.
        Some(f) => unsafe { f(addr, len, advice) },
        // SAFETY: the raw system call with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) as c_int },
    }
}

/// `madvise` goes through: `MADV_DONTNEED` on region memory reaches the
/// region as a userfaultfd remove event (the pages read as zeros afterwards,
/// as without zpage), and the other advice values leave a region's contents
/// alone, except `MADV_FREE`, made a `MADV_DONTNEED` on region memory. Its
/// remove event is the same, but the kernel zaps nothing, so the region
/// cannot tell its pages from ones a `MADV_DONTNEED` is about to zap and
/// keeps them resident for a second (`zpage_region`'s hazards table);
/// dropping the contents at once is what `MADV_FREE` allows anyway.
///
/// `MADV_WIPEONFORK`, `MADV_KEEPONFORK`, `MADV_DONTFORK` and `MADV_DOFORK`
/// on region memory go to the kernel through the region layer, which
/// records them: a child of `fork()` then gets of the pages zpage holds
/// what the kernel gives it of the rest (zeros, or no mapping). If the
/// kernel fails such a call part way, the regions it covers cannot know
/// which of their pages it reached: they are made plain memory, whose fork
/// the kernel handles alone.
///
/// # Safety
/// The caller's contract is `madvise(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    if let Some(fork_advice) = zpage_region::ForkAdvice::from_madvise(advice) {
        if let Some(state) = program_call(addr as usize, len) {
            let _inside = Inside::enter();
            let advised = zpage_region::advise_fork(addr as usize, len, fork_advice, || {
                match next_madvise(addr, len, advice) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL)),
                }
            });
            return match advised {
                Ok(()) => 0,
                Err(failed) => {
                    if failed.regions_unsure {
                        eject_overlapping(state, addr as usize, len);
                    }
                    sys::set_errno(failed.errno);
                    -1
                }
            };
        }
    }
    if matches!(advice, libc::MADV_POPULATE_READ | libc::MADV_POPULATE_WRITE) {
        // The kernel cannot populate an evicted page (EFAULT): restore first.
        // zpage's reclaimer issues this advice itself, on pages it holds.
        if program_call(addr as usize, len).is_some() && !zpage_region::on_zpage_thread() {
            let _inside = Inside::enter();
            let _ = zpage_region::prefault_range(addr as usize, len);
        }
    }
    let advice = if advice == libc::MADV_FREE && program_call(addr as usize, len).is_some() {
        libc::MADV_DONTNEED
    } else {
        advice
    };
    next_madvise(addr, len, advice)
}

/// Copies `len` bytes of one region's contents into fresh memory at `to`,
/// skipping zero pages (the destination is fresh and reads as zeros), so
/// pages the program never wrote are not made resident.
///
/// # Safety
/// `from` and `to` are valid for `len` bytes and do not overlap.
pub unsafe fn copy_nonzero_pages(from: usize, to: usize, len: usize) {
    let mut off = 0;
    while off < len {
        let n = PAGE_SIZE.min(len - off);
        // SAFETY: in bounds of both ranges per the contract.
        let src = unsafe { std::slice::from_raw_parts((from + off) as *const u8, n) };
        if src.iter().any(|&b| b != 0) {
            // SAFETY: as above; the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (to + off) as *mut u8, n) };
        }
        off += n;
    }
}

/// Moves a whole region to a new region of `new_len` (the `mremap` of
/// glibc's `realloc` and of runtimes growing a buffer): a fresh region,
/// the contents copied, the old one given up and unmapped.
fn move_region(state: &state::State, placed: Placed, new_len: usize) -> *mut c_void {
    let Some(new_base) = state.place(new_len, placed.from_malloc) else {
        // No region: plain memory, the contents copied, the old given up.
        let p = next_mmap(
            std::ptr::null_mut(),
            new_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            state.put_back(placed);
            sys::set_errno(libc::ENOMEM);
            return libc::MAP_FAILED;
        }
        // SAFETY: both ranges are live mappings of at least the copied length.
        unsafe { copy_nonzero_pages(placed.base, p as usize, placed.len.min(new_len)) };
        let (base, len) = (placed.base, placed.len);
        state.release(placed);
        next_munmap(base as *mut c_void, len);
        return p;
    };
    // SAFETY: both are live regions of at least the copied length.
    unsafe { copy_nonzero_pages(placed.base, new_base, placed.len.min(new_len)) };
    let (base, len) = (placed.base, placed.len);
    state.release(placed);
    next_munmap(base as *mut c_void, len);
    new_base as *mut c_void
}

/// `mremap`'s fifth argument exists only with `MREMAP_FIXED`: on x86-64 and
/// AArch64 a variadic argument is passed like a fixed one, so declaring it
/// fixed reads the caller's value when there is one (and it is used only
/// then).
///
/// # Safety
/// The caller's contract is `mremap(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    if let Some(state) = program_call(old as usize, old_len.max(1)) {
        let _inside = Inside::enter();
        match state.take_exact(old as usize, state::Made::Either) {
            Some(placed)
                if placed.len == old_len.next_multiple_of(PAGE_SIZE)
                    && flags == libc::MREMAP_MAYMOVE
                    && !state::FORKED_CHILD.load(std::sync::atomic::Ordering::Relaxed)
                    && new_len > 0 =>
            {
                return move_region(state, placed, new_len);
            }
            Some(placed) => state.eject(placed),
            None => {}
        }
        eject_overlapping(state, old as usize, old_len.max(1));
        if flags & libc::MREMAP_FIXED != 0 {
            vacate(state, new_addr as usize, new_len);
        }
    }
    match real::mremap() {
        // SAFETY: the C library's mremap with the caller's arguments.
        Some(f) => unsafe { f(old, old_len, new_len, flags, new_addr) },
        // SAFETY: the raw system call with the caller's arguments.
        None => unsafe {
            libc::syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr) as *mut c_void
        },
    }
}
