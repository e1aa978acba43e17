//! One far, fixed address range for every region of a process that asks
//! for it (the preload library under `zpage run`).
//!
//! With regions scattered wherever the kernel puts mappings, nothing tells a
//! pointer into region memory from any other pointer without a table
//! lookup. Placed in one range at a fixed address, region memory is
//! recognisable from the pointer's bits alone: a seccomp filter (which sees
//! system call arguments as numbers, never the memory behind them) can trap
//! exactly the calls that hand the kernel a pointer into regions, by
//! comparing one shifted word per argument. The range is the same in every
//! process, so a filter inherited across `exec` means the same thing in the
//! new program, and a program that does not load zpage never has memory
//! there (nothing maps so far up unless asked to: the kernel places mappings
//! down from below the stack, PIE programs and their heaps sit near
//! `0x5555_5555_0000`, V8's random hints stay below 64 TiB, the Go runtime's
//! start at `0x00c0_0000_0000`, sanitizer shadows below 16 TiB).
//!
//! The range is reserved `PROT_NONE` (no memory, `MAP_NORESERVE`) when
//! [`reserve`] is called; regions made afterwards in this process take their
//! address ranges from it ([`take`]) and give them back re-reserved when
//! they end ([`give_back`]). Its first [`TRAMPOLINE_BYTES`] are left to the
//! system-call trampoline (crate `zpage-syscalls`), whose address must be
//! fixed too: a filter allows zpage's own calls by the address they are made
//! from.
//!
//! Making and dropping ranges is not async-signal-safe (a lock and a
//! vector; regions are made and dropped outside signal handlers);
//! [`syscall`] is.
#![allow(unsafe_code)]

use crate::sys::{self, Errno, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Where the range starts: 72 TiB, a multiple of its own size.
pub const FAR_BASE: usize = 0x4800_0000_0000;
/// Its size: 4 TiB of address space (no memory until pages are touched).
pub const FAR_LEN: usize = 1 << FAR_SHIFT;
/// `log2(FAR_LEN)`: a pointer `p` lies in the range iff
/// `p >> FAR_SHIFT == FAR_BASE >> FAR_SHIFT`.
pub const FAR_SHIFT: u32 = 42;
/// The start of the range, kept for the system-call trampoline's code.
pub const TRAMPOLINE_ADDR: usize = FAR_BASE;
/// The address right after the trampoline's `syscall` instruction: what a
/// seccomp filter sees as the instruction pointer of a call made through it.
pub const TRAMPOLINE_SYSCALL_END: usize = TRAMPOLINE_ADDR + TRAMPOLINE_CODE.len() - 1;
/// Bytes kept at the start of the range for the trampoline (2 MiB, so the
/// regions after it start on a huge-page boundary).
pub const TRAMPOLINE_BYTES: usize = 2 << 20;

/// `long trampoline(long nr, long a, long b, long c, long d, long e, long f)`
/// in the System V calling convention: the arguments moved to the system
/// call's registers, `syscall`, `ret` (the kernel's return value, a negative
/// errno on failure, in `rax`). Position-independent, no stack use but the
/// seventh argument.
const TRAMPOLINE_CODE: [u8; 26] = [
    0x48, 0x89, 0xf8, // mov rax, rdi
    0x48, 0x89, 0xf7, // mov rdi, rsi
    0x48, 0x89, 0xd6, // mov rsi, rdx
    0x48, 0x89, 0xca, // mov rdx, rcx
    0x4d, 0x89, 0xc2, // mov r10, r8
    0x4d, 0x89, 0xc8, // mov r8, r9
    0x4c, 0x8b, 0x4c, 0x24, 0x08, // mov r9, [rsp + 8]
    0x0f, 0x05, // syscall
    0xc3, // ret
];

const _: () = assert!(FAR_BASE.is_multiple_of(FAR_LEN));
const _: () = assert!(FAR_BASE + FAR_LEN <= 0x7000_0000_0000);
const _: () = assert!(TRAMPOLINE_BYTES.is_multiple_of(PAGE_SIZE));

/// True if `addr` lies in the far range (whether or not it is reserved in
/// this process). Async-signal-safe.
pub const fn contains(addr: usize) -> bool {
    addr >> FAR_SHIFT == FAR_BASE >> FAR_SHIFT
}

static RESERVED: AtomicBool = AtomicBool::new(false);
/// Free address ranges of the reserved range, sorted, coalesced.
static FREE: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// True once [`reserve`] succeeded in this process (or its parent before a
/// `fork`): new regions then take their addresses from the range.
pub fn is_reserved() -> bool {
    RESERVED.load(Ordering::Acquire)
}

/// Reserves the far range (`PROT_NONE`, no memory). Fails with `EEXIST`
/// when something is mapped there already (then regions go where the kernel
/// puts them, as without a reservation). Idempotent.
pub fn reserve() -> Result<(), Errno> {
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    if is_reserved() {
        return Ok(());
    }
    sys::map_fixed(FAR_BASE, FAR_LEN, libc::PROT_NONE, true)?;
    write_trampoline()?;
    free.clear();
    free.push((FAR_BASE + TRAMPOLINE_BYTES, FAR_LEN - TRAMPOLINE_BYTES));
    RESERVED.store(true, Ordering::Release);
    Ok(())
}

/// Maps the trampoline's page read-write, writes its code, makes it
/// read-execute.
fn write_trampoline() -> Result<(), Errno> {
    sys::map_fixed(
        TRAMPOLINE_ADDR,
        PAGE_SIZE,
        libc::PROT_READ | libc::PROT_WRITE,
        false,
    )?;
    // SAFETY: the page was just mapped read-write at this fixed address and
    // nothing else refers to it yet.
    let page = unsafe { std::slice::from_raw_parts_mut(TRAMPOLINE_ADDR as *mut u8, PAGE_SIZE) };
    page[..TRAMPOLINE_CODE.len()].copy_from_slice(&TRAMPOLINE_CODE);
    sys::protect(
        TRAMPOLINE_ADDR,
        PAGE_SIZE,
        libc::PROT_READ | libc::PROT_EXEC,
    )
}

type Trampoline = unsafe extern "C" fn(i64, i64, i64, i64, i64, i64, i64) -> i64;

/// System call `nr` with `args`, made from the trampoline when the range is
/// reserved (a seccomp filter installed by zpage lets it through), with the
/// C library's `syscall` otherwise. Returns the kernel's value: the result,
/// or a negative errno. Async-signal-safe (one system call).
///
/// # Safety
/// The system call's own contract: its pointer arguments are valid for what
/// the kernel does with them.
pub unsafe fn syscall(nr: i64, args: [i64; 6]) -> i64 {
    let [a, b, c, d, e, f] = args;
    if is_reserved() {
        // SAFETY: the trampoline's page holds TRAMPOLINE_CODE (written
        // before RESERVED was set, and never unmapped while reserved), a
        // function of this type.
        unsafe {
            let call: Trampoline = std::mem::transmute(TRAMPOLINE_ADDR);
            call(nr, a, b, c, d, e, f)
        }
    } else {
        // SAFETY: the caller's contract.
        let r = unsafe { libc::syscall(nr, a, b, c, d, e, f) };
        if r == -1 {
            -(sys::last_errno() as i64)
        } else {
            r
        }
    }
}

/// An address range of `len` bytes (a multiple of the page size) mapped
/// read-write from the reserved range, or `None` when the range is not
/// reserved or has no room.
pub(crate) fn take(len: usize) -> Option<usize> {
    take_with(len, libc::PROT_READ | libc::PROT_WRITE)
}

/// As [`take`], mapped with protection `prot` (`PROT_NONE`: reserved, for a
/// region whose parts the program makes accessible itself).
pub(crate) fn take_with(len: usize, prot: i32) -> Option<usize> {
    debug_assert!(len.is_multiple_of(PAGE_SIZE));
    if !is_reserved() || len == 0 {
        return None;
    }
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    let base = carve(&mut free, len)?;
    if sys::map_fixed(base, len, prot, false).is_err() {
        insert_free(&mut free, base, len);
        return None;
    }
    Some(base)
}

/// Gives `[base, base + len)` back: reserved again (`PROT_NONE`, its pages
/// and any userfaultfd registration gone with the old mapping) and free for
/// the next region.
pub(crate) fn give_back(base: usize, len: usize) {
    if sys::map_fixed(base, len, libc::PROT_NONE, false).is_err() {
        // Left mapped as it was: the addresses are lost to later regions,
        // nothing else.
        return;
    }
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    insert_free(&mut free, base, len);
}

/// First fit: the lowest free range of at least `len` bytes gives its start.
fn carve(free: &mut Vec<(usize, usize)>, len: usize) -> Option<usize> {
    let i = free.iter().position(|&(_, l)| l >= len)?;
    let (base, l) = free[i];
    if l == len {
        free.remove(i);
    } else {
        free[i] = (base + len, l - len);
    }
    Some(base)
}

/// Puts a range back in the sorted list, merged with its neighbours.
fn insert_free(free: &mut Vec<(usize, usize)>, base: usize, len: usize) {
    let i = free.partition_point(|&(b, _)| b < base);
    free.insert(i, (base, len));
    if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
        free[i].1 += free[i + 1].1;
        free.remove(i + 1);
    }
    if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
        free[i - 1].1 += free[i].1;
        free.remove(i);
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    #[test]
    fn the_range_test_is_one_shift() {
        assert!(contains(FAR_BASE));
        assert!(contains(FAR_BASE + FAR_LEN - 1));
        assert!(!contains(FAR_BASE - 1));
        assert!(!contains(FAR_BASE + FAR_LEN));
        assert!(!contains(0x5555_5555_0000));
        assert!(!contains(0x7fff_ffff_f000));
    }

    #[test]
    fn free_ranges_are_carved_first_fit_and_merged_back() {
        let mut free = vec![(0x1000, 0x10000)];
        let a = carve(&mut free, 0x2000).unwrap();
        let b = carve(&mut free, 0x3000).unwrap();
        assert_eq!((a, b), (0x1000, 0x3000));
        assert_eq!(free, vec![(0x6000, 0xb000)]);
        assert!(carve(&mut free, 0x20000).is_none());
        insert_free(&mut free, b, 0x3000);
        assert_eq!(free, vec![(0x3000, 0xe000)], "merged with the range after");
        insert_free(&mut free, a, 0x2000);
        assert_eq!(free, vec![(0x1000, 0x10000)], "and with the one before");
    }

    #[test]
    fn calls_through_the_trampoline_return_what_the_kernel_says() {
        reserve().expect("the far range is free in a test process");
        // SAFETY: getpid takes no arguments; a bad descriptor reads nothing.
        unsafe {
            assert_eq!(syscall(libc::SYS_getpid, [0; 6]), libc::getpid() as i64);
            assert_eq!(
                syscall(libc::SYS_read, [-1, 0, 0, 0, 0, 0]),
                -(libc::EBADF as i64)
            );
        }
        assert_eq!(
            TRAMPOLINE_CODE[TRAMPOLINE_SYSCALL_END - TRAMPOLINE_ADDR - 2..][..2],
            [0x0f, 0x05]
        );
    }

    #[test]
    fn taken_ranges_are_fresh_read_write_memory_in_the_range() {
        reserve().expect("the far range is free in a test process");
        let a = take(16 * PAGE_SIZE).unwrap();
        assert!(contains(a) && contains(a + 16 * PAGE_SIZE - 1));
        // SAFETY: a fresh read-write mapping of 16 pages at `a`.
        unsafe {
            assert_eq!(*(a as *const u64), 0);
            *(a as *mut u64) = 7;
            assert_eq!(*(a as *const u64), 7);
        }
        give_back(a, 16 * PAGE_SIZE);
        let mut vec = [0u8; 1];
        assert!(
            sys::mincore(a, &mut vec).is_ok(),
            "still reserved after it is given back"
        );
    }
}
