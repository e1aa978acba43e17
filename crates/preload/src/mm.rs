//! The memory-map interposers: `mmap`/`mmap64`, `munmap`, `mremap`,
//! `mprotect`, `madvise`, on the arena (module `arena`).
//!
//! What the arena takes: every `mmap` of private anonymous memory that is
//! not executable and asks for nothing the arena cannot give (a stack that
//! grows down, huge pages, memory locked or populated at once, a place
//! below 4 GiB), whatever its size or protection. A `MAP_FIXED` over arena
//! addresses stays in the arena (private anonymous memory, or a private
//! writable file mapping, copied in) or hands the range over (anything
//! else). Everything else goes to the C library
//! unchanged.
#![allow(unsafe_code)]

use crate::arena::Arena;
use crate::real;
use crate::state;
use crate::sys::{self, Inside};
use libc::{c_int, c_void, off_t, size_t};
use zpage_codec::PAGE_SIZE;

/// Flags of a mapping the arena can hold (with `MAP_PRIVATE |
/// MAP_ANONYMOUS`): what the others ask for (a stack growing down, huge
/// pages, locked or populated memory, an address below 4 GiB, sharing) is
/// the kernel's to give.
const ARENA_FLAGS: c_int = libc::MAP_PRIVATE
    | libc::MAP_ANONYMOUS
    | libc::MAP_NORESERVE
    | libc::MAP_FIXED
    | libc::MAP_FIXED_NOREPLACE;

/// Protections the arena holds (not executable code: a JIT's pages are the
/// kernel's).
fn arena_prot(prot: c_int) -> bool {
    prot & !(libc::PROT_READ | libc::PROT_WRITE) == 0
}

fn private_anonymous(flags: c_int) -> bool {
    flags & (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) == libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
        && flags & !ARENA_FLAGS == 0
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

/// The arena, for a call of the program's (not zpage's own) on memory
/// that may be in it.
fn program_arena(addr: usize, len: usize) -> Option<&'static Arena> {
    // zpage's own calls (the region's `MADV_POPULATE_WRITE` on a page it is
    // evicting, say) are its own business: served here they would wait on
    // the page they act on.
    if sys::inside() || zpage_region::on_zpage_thread() {
        return None;
    }
    state::get()?
        .arena_if_started()
        .filter(|a| a.overlaps(addr, len.max(1)))
}

fn fail(errno: c_int) -> *mut c_void {
    sys::set_errno(errno);
    libc::MAP_FAILED
}

/// One `mmap` call's arguments.
#[derive(Clone, Copy, Debug)]
struct MapCall {
    addr: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
}

/// `mmap` on the arena; `None` when the call is not the arena's.
fn arena_mmap(call: MapCall) -> Option<*mut c_void> {
    let MapCall {
        addr,
        len,
        prot,
        flags,
        ..
    } = call;
    let fixed = flags & (libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE) != 0;
    if len == 0 {
        return None;
    }
    if fixed {
        let arena = program_arena(addr, len)?;
        let _inside = Inside::enter();
        if !arena.contains(addr, len) || !addr.is_multiple_of(PAGE_SIZE) {
            // Across the arena's edge: not a layout any program asks for.
            return Some(fail(libc::EINVAL));
        }
        if flags & libc::MAP_FIXED_NOREPLACE != 0 && arena.in_use(addr, len) {
            return Some(fail(libc::EEXIST));
        }
        if private_anonymous(flags) && arena_prot(prot) {
            return Some(match arena.map_fixed(addr, len, prot) {
                Ok(()) => addr as *mut c_void,
                Err(e) => fail(e),
            });
        }
        if let Some(copied) = copy_private_file(arena, call) {
            return Some(copied);
        }
        // A file, shared or executable mapping over arena addresses.
        if let Err(why) = arena.hand_over(addr, len) {
            sys::stderr_line(&format!(
                "zpage: could not hand {len} bytes at {addr:#x} over to the program's mapping: {why}\n"
            ));
            return Some(fail(libc::ENOMEM));
        }
        return None;
    }
    if !private_anonymous(flags) || !arena_prot(prot) {
        return None;
    }
    let state = state::placing()?;
    if zpage_region::on_zpage_thread() || len < state.config.min_mapping_bytes {
        return None;
    }
    let _inside = Inside::enter();
    let placed = state.arena().and_then(|arena| arena.map(len, prot, addr));
    if placed.is_none() {
        state.count_refused(len);
    }
    placed.map(|p| p as *mut c_void)
}

/// The largest private file mapping [`copy_private_file`] copies (the
/// JVM's archive is 12 MiB).
const COPIED_FILE_MAX_BYTES: usize = 64 << 20;

/// Flags of a private file mapping that [`copy_private_file`] makes.
const COPIED_FILE_FLAGS: c_int =
    libc::MAP_PRIVATE | libc::MAP_NORESERVE | libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE;

/// A private, writable mapping of a regular file with `MAP_FIXED` over
/// arena addresses is made as arena memory holding a copy of the file's
/// bytes, instead of handing the range over to the kernel. The JVM maps its
/// class-data archive this way over its own reservation and then rewrites
/// the pointers in it (the archive is not at the address it was built for,
/// since the reservation is in the arena): handed over, those pages were
/// anonymous memory outside the budget (9.7 MiB of a small Java program);
/// copied, they are compressed like the rest of the heap. A copy is a
/// faithful private mapping: whether a private mapping sees later changes
/// to the file is unspecified (POSIX `mmap`), and the program's writes
/// never reach the file either way.
///
/// `None` (the range is handed over as before) for anything else: not a
/// regular file, read-only or executable (its pages stay clean file pages
/// the kernel can drop), pages past the file's end (a real mapping raises
/// SIGBUS there, which a copy cannot), more than [`COPIED_FILE_MAX_BYTES`]
/// (a copy reads the whole range at once, where the kernel reads the pages
/// the program touches), or a read that fails.
fn copy_private_file(arena: &Arena, call: MapCall) -> Option<*mut c_void> {
    let MapCall {
        addr,
        len,
        prot,
        flags,
        fd,
        off,
    } = call;
    if flags & libc::MAP_PRIVATE == 0
        || flags & !COPIED_FILE_FLAGS != 0
        || prot & libc::PROT_WRITE == 0
        || !arena_prot(prot)
        || off < 0
        || !(off as usize).is_multiple_of(PAGE_SIZE)
    {
        return None;
    }
    let len = len.next_multiple_of(PAGE_SIZE);
    if len > COPIED_FILE_MAX_BYTES {
        return None;
    }
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable `stat`; a bad descriptor is an error.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let file_pages_end = (st.st_size.max(0) as usize).next_multiple_of(PAGE_SIZE);
    if (off as usize).checked_add(len)? > file_pages_end {
        return None;
    }
    arena
        .map_fixed(addr, len, libc::PROT_READ | libc::PROT_WRITE)
        .ok()?;
    // Through a buffer on this stack, not straight into the arena: the
    // arena's pages are brought in by zpage's fault handler when written
    // here, which the kernel's own copy into them would not call.
    let mut buf = [0u8; 4 * PAGE_SIZE];
    let mut done = 0;
    while done < len {
        let want = buf.len().min(len - done);
        // SAFETY: `buf` is valid for `want` bytes; the descriptor is the caller's.
        let got = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), want, off + done as off_t) };
        if got < 0 && sys::errno() == libc::EINTR {
            continue;
        }
        if got < 0 {
            return None;
        }
        if got == 0 {
            // The file's end, in its last page: the rest reads as zeros,
            // as a fresh arena range does.
            break;
        }
        let got = got as usize;
        // SAFETY: `[addr + done, addr + done + got)` lies in the arena range
        // just made read-write for this mapping (`got <= len - done`), and
        // `buf` is a separate stack buffer.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), (addr + done) as *mut u8, got) };
        done += got;
    }
    if prot != libc::PROT_READ | libc::PROT_WRITE && sys::raw_mprotect(addr, len, prot) != 0 {
        return None;
    }
    Some(addr as *mut c_void)
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
    // A constructor of a library loaded after this one may map memory
    // before this library's own constructor has run.
    crate::startup::ensure_started();
    let call = MapCall {
        addr: addr as usize,
        len,
        prot,
        flags,
        fd,
        off,
    };
    if let Some(p) = arena_mmap(call) {
        return p;
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

/// # Safety
/// The caller's contract is `munmap(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(arena) = program_arena(addr as usize, len) {
        if !(addr as usize).is_multiple_of(PAGE_SIZE) {
            sys::set_errno(libc::EINVAL);
            return -1;
        }
        let _inside = Inside::enter();
        let (at, n) = arena.clip(addr as usize, len).unwrap_or((0, 0));
        if let Err(e) = arena.unmap(at, n) {
            sys::set_errno(e);
            return -1;
        }
        // The parts outside the arena are the kernel's.
        let before = at - addr as usize;
        let after = (addr as usize + len.next_multiple_of(PAGE_SIZE)).saturating_sub(at + n);
        let mut rc = 0;
        if before > 0 {
            rc |= next_munmap(addr, before);
        }
        if after > 0 {
            rc |= next_munmap((at + n) as *mut c_void, after);
        }
        return rc;
    }
    next_munmap(addr, len)
}

/// `mprotect` goes to the kernel: an arena page follows its own
/// protection (the region restores it on access whatever it is, and moves
/// out only pages that are read-write).
///
/// # Safety
/// The caller's contract is `mprotect(2)`'s.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    match real::mprotect() {
        // SAFETY: the C library's mprotect with the caller's arguments.
        Some(f) => unsafe { f(addr, len, prot) },
        None => sys::raw_mprotect(addr as usize, len, prot),
    }
}

fn next_madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    match real::madvise() {
        // SAFETY: the C library's madvise with the caller's arguments.
        Some(f) => unsafe { f(addr, len, advice) },
        None => sys::raw_madvise(addr as usize, len, advice),
    }
}

/// `madvise` goes through: `MADV_DONTNEED` on arena memory reaches the
/// region as a userfaultfd remove event (the pages read as zeros
/// afterwards, as without zpage); `MADV_FREE` is made a `MADV_DONTNEED` on
/// arena memory (which `MADV_FREE` allows: the region cannot tell its pages
/// from ones a `MADV_DONTNEED` is about to zap, see `zpage_region`'s
/// hazards table); `MADV_HUGEPAGE` on arena memory is declined (the arena
/// is kept in 4 KiB pages, which is what moves out); `MADV_POPULATE_*`
/// restores the range first (the kernel cannot fault an evicted page in).
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
    let arena = program_arena(addr as usize, len);
    if let Some(fork_advice) = zpage_region::ForkAdvice::from_madvise(advice) {
        if arena.is_some() {
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
                        // The arena cannot be given back as plain memory, and
                        // a child would get pages the kernel was told to
                        // wipe, or lose pages it was told to keep.
                        zpage_region::Fatal::new()
                            .text("madvise(")
                            .hex(addr as u64)
                            .text(", ")
                            .dec(len as u64)
                            .text(") on compressed memory failed part way (errno ")
                            .dec(failed.errno as u64)
                            .text("): zpage cannot tell which pages a forked child must get, and ends \
                                   the program rather than give it wrong ones. If the advised memory is a \
                                   mapping of its own, a larger `zpage run --min-mapping` keeps it plain.\n")
                            .abort();
                    }
                    sys::set_errno(failed.errno);
                    -1
                }
            };
        }
    }
    let advice = match advice {
        libc::MADV_POPULATE_READ | libc::MADV_POPULATE_WRITE
            if arena.is_some() && !zpage_region::on_zpage_thread() =>
        {
            let _inside = Inside::enter();
            let _ = zpage_region::prefault_range(addr as usize, len);
            advice
        }
        libc::MADV_FREE if arena.is_some() => libc::MADV_DONTNEED,
        libc::MADV_HUGEPAGE if arena.is_some() => return 0,
        other => other,
    };
    next_madvise(addr, len, advice)
}

/// Copies `len` bytes from `from` into fresh memory at `to`, skipping
/// pages that read as zeros (the destination is fresh and reads as zeros),
/// so pages never written are not made resident.
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

/// `mremap` of arena memory: shrinking releases the tail; growing or
/// moving makes a new read-write arena mapping (at `new_addr` with
/// `MREMAP_FIXED`), copies the contents and releases the old one (kept
/// with `MREMAP_DONTUNMAP`, as emptied memory).
fn arena_mremap(
    arena: &Arena,
    old: usize,
    old_len: usize,
    new_len: usize,
    flags: c_int,
    new_addr: usize,
) -> *mut c_void {
    let old_len = old_len.next_multiple_of(PAGE_SIZE);
    let new_len = new_len.next_multiple_of(PAGE_SIZE);
    if !arena.contains(old, old_len) || new_len == 0 {
        return fail(libc::EINVAL);
    }
    let fixed = flags & libc::MREMAP_FIXED != 0;
    if new_len <= old_len && !fixed {
        if new_len < old_len {
            if let Err(e) = arena.unmap(old + new_len, old_len - new_len) {
                return fail(e);
            }
        }
        return old as *mut c_void;
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        // Growing in place: only if nothing is in the way.
        if arena.in_use(old + old_len, new_len - old_len) {
            return fail(libc::ENOMEM);
        }
        return match arena.map_fixed(
            old + old_len,
            new_len - old_len,
            libc::PROT_READ | libc::PROT_WRITE,
        ) {
            Ok(()) => old as *mut c_void,
            Err(e) => fail(e),
        };
    }
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let to = if fixed {
        if !arena.contains(new_addr, new_len) {
            return fail(libc::EINVAL);
        }
        if let Err(e) = arena.map_fixed(new_addr, new_len, rw) {
            return fail(e);
        }
        new_addr
    } else {
        match arena.map(new_len, rw, 0) {
            Some(p) => p,
            None => return fail(libc::ENOMEM),
        }
    };
    // SAFETY: both are live arena mappings of at least the copied length,
    // and distinct.
    unsafe { copy_nonzero_pages(old, to, old_len.min(new_len)) };
    let released = if flags & libc::MREMAP_DONTUNMAP != 0 {
        arena.map_fixed(old, old_len, rw)
    } else {
        arena.unmap(old, old_len)
    };
    if let Err(e) = released {
        return fail(e);
    }
    to as *mut c_void
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
    if let Some(arena) = program_arena(old as usize, old_len) {
        let _inside = Inside::enter();
        return arena_mremap(
            arena,
            old as usize,
            old_len,
            new_len,
            flags,
            new_addr as usize,
        );
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
