//! The process's arena: one region, reserved at start (`PROT_NONE`), in
//! which every private anonymous mapping the program makes is placed,
//! whatever its size, protection or purpose. Its address ranges are handed
//! out and taken back here; the region follows each page's own protection
//! (`zpage_region::Region::reserved_with_budget`), so the memory runtimes
//! reserve and commit piece by piece (V8's and the JVM's heaps with
//! `mprotect` or `MAP_FIXED` over their own reservation, CPython's 1 MiB
//! arenas, mimalloc's segments serving `malloc`) is all compressed memory,
//! under one budget, with no table of regions to fill.
//!
//! | the program's call | in the arena |
//! |---|---|
//! | `mmap` of private anonymous memory (any size, `PROT_NONE`, read-only or read-write, a hint or not) | a range of the arena, given the protection asked for; a hint's alignment is kept (allocators ask for aligned memory through hints) |
//! | `mmap(MAP_FIXED)` of private anonymous memory over arena addresses | those addresses, emptied (zeros, as a new mapping reads) and given the protection asked for |
//! | `mmap(MAP_FIXED)` of a regular file, private and writable, over arena addresses | as private anonymous memory, then the file's bytes copied in (`mm::copy_private_file`) |
//! | `mmap(MAP_FIXED)` of any other file or shared memory over arena addresses | the range is handed over: what the arena held there is dropped, the range leaves the userfaultfd, and the mapping is the kernel's until unmapped |
//! | `munmap` | the range is emptied and reserved again (`PROT_NONE`), free for the next mapping; a handed-over range is taken back |
//! | `mprotect` | the kernel's, as asked: a page that is not read-write stays resident (it is restored on access, never moved out) |
//! | `mremap` | a new range with the contents copied (pages that read as zeros are not), the old one released; shrinking releases the tail |
//!
//! Emptying a range is the kernel's `MADV_DONTNEED`, whose remove event the
//! region reads (the program's own discards go the same way).
//!
//! Not async-signal-safe (a lock and vectors); called from the memory-map
//! interposers inside [`crate::sys::Inside`].

use crate::sys;
use std::sync::Mutex;
use zpage_codec::PAGE_SIZE;
use zpage_region::{Budget, Region};

/// The arena's size: address space only (no memory until touched; the
/// region's page slots likewise).
pub const ARENA_BYTES: usize = 1 << 40;

thread_local! {
    /// The arena's lock, held by the thread that forks from the prepare
    /// hook to the parent's or child's hook.
    static HELD_FOR_FORK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Ranges>>> =
        const { std::cell::RefCell::new(None) };
}

/// A hint's alignment is kept up to this.
const MAX_HINT_ALIGN: usize = 1 << 30;

#[derive(Debug)]
pub struct Arena {
    region: Region,
    base: usize,
    len: usize,
    ranges: Mutex<Ranges>,
}

/// What the arena's addresses are doing, beyond the region's own books.
#[derive(Debug, Default)]
struct Ranges {
    /// Free ranges, sorted, disjoint, coalesced: reserved, empty.
    free: Vec<(usize, usize)>,
    /// Ranges handed over to a file or shared mapping.
    foreign: Vec<(usize, usize)>,
    /// Bytes handed out to the program (placed, not yet released).
    live: usize,
    peak: usize,
}

fn overlap(a: (usize, usize), b: (usize, usize)) -> Option<(usize, usize)> {
    let s = a.0.max(b.0);
    let e = (a.0 + a.1).min(b.0 + b.1);
    (s < e).then(|| (s, e - s))
}

impl Ranges {
    /// First fit of `len` bytes aligned to `align`.
    fn carve(&mut self, len: usize, align: usize) -> Option<usize> {
        let i = self
            .free
            .iter()
            .position(|&(b, l)| b.next_multiple_of(align) + len <= b + l)?;
        let (b, l) = self.free[i];
        let at = b.next_multiple_of(align);
        self.free.remove(i);
        if at > b {
            self.free.insert(i, (b, at - b));
        }
        if at + len < b + l {
            let j = self.free.partition_point(|&(fb, _)| fb < at + len);
            self.free.insert(j, (at + len, b + l - at - len));
        }
        self.live += len;
        self.peak = self.peak.max(self.live);
        Some(at)
    }

    /// Takes `[at, at + len)` out of the free ranges wherever it is free
    /// (a fixed mapping over addresses the program may or may not hold).
    fn claim(&mut self, at: usize, len: usize) {
        let mut kept = Vec::with_capacity(self.free.len() + 1);
        let mut claimed = 0;
        for &(b, l) in &self.free {
            match overlap((b, l), (at, len)) {
                None => kept.push((b, l)),
                Some((s, n)) => {
                    claimed += n;
                    if s > b {
                        kept.push((b, s - b));
                    }
                    if s + n < b + l {
                        kept.push((s + n, b + l - s - n));
                    }
                }
            }
        }
        self.free = kept;
        self.live += claimed;
        self.peak = self.peak.max(self.live);
    }

    /// Gives `[at, at + len)` back (the parts already free stay free).
    fn release(&mut self, at: usize, len: usize) {
        let already: usize = self
            .free
            .iter()
            .filter_map(|&r| overlap(r, (at, len)).map(|(_, n)| n))
            .sum();
        self.live = self.live.saturating_sub(len - already);
        let mut all = std::mem::take(&mut self.free);
        all.push((at, len));
        all.sort_unstable();
        for (b, l) in all {
            match self.free.last_mut() {
                Some((pb, pl)) if *pb + *pl >= b => *pl = (*pl).max(b + l - *pb),
                _ => self.free.push((b, l)),
            }
        }
    }

    /// True if any byte of the range is not free.
    fn any_used(&self, at: usize, len: usize) -> bool {
        let free: usize = self
            .free
            .iter()
            .filter_map(|&r| overlap(r, (at, len)).map(|(_, n)| n))
            .sum();
        free < len
    }
}

impl Arena {
    /// Reserves the arena on `budget`; `None` with the reason if it cannot.
    pub fn new(budget: &Budget) -> Result<Arena, String> {
        // The arena lies in the far range, which the system-call trap
        // reserves when it is installed; with the wrappers alone, here.
        zpage_region::far::reserve()
            .map_err(|e| format!("could not reserve the far range for its arena: {e}"))?;
        let region = Region::reserved_with_budget(budget, ARENA_BYTES)
            .map_err(|e| format!("could not reserve its arena: {e}"))?;
        let (base, len) = (region.as_ptr() as usize, region.len());
        Ok(Arena {
            region,
            base,
            len,
            ranges: Mutex::new(Ranges {
                free: vec![(base, len)],
                ..Ranges::default()
            }),
        })
    }

    pub fn region(&self) -> &Region {
        &self.region
    }

    /// True if any byte of `[addr, addr + len)` lies in the arena.
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.base + self.len && addr.saturating_add(len.max(1)) > self.base
    }

    /// True if the whole range lies in the arena.
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base && addr.saturating_add(len) <= self.base + self.len
    }

    /// The part of `[addr, addr + len)` in the arena.
    pub fn clip(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        overlap((addr, len), (self.base, self.len))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ranges> {
        self.ranges.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the lock from a fork's prepare hook to its parent and child
    /// hooks (the child must not inherit it held by a thread it lacks).
    pub fn lock_for_fork(&'static self) {
        let guard = self.lock();
        HELD_FOR_FORK.with(|h| *h.borrow_mut() = Some(guard));
    }

    /// The parent's and child's side of [`Arena::lock_for_fork`].
    pub fn unlock_after_fork(&self) {
        HELD_FOR_FORK.with(|h| drop(h.borrow_mut().take()));
    }

    /// Bytes handed out now, and at most.
    pub fn usage(&self) -> (usize, usize) {
        let r = self.lock();
        (r.live, r.peak)
    }

    /// A new mapping of `len` bytes (page-rounded) with protection `prot`;
    /// `hint`'s alignment is kept. `None` if the arena has no room.
    pub fn map(&self, len: usize, prot: i32, hint: usize) -> Option<usize> {
        let len = len.next_multiple_of(PAGE_SIZE);
        let align = match hint {
            0 => PAGE_SIZE,
            h => (1usize << h.trailing_zeros()).clamp(PAGE_SIZE, MAX_HINT_ALIGN),
        };
        let at = self.lock().carve(len, align)?;
        if prot != libc::PROT_NONE && sys::raw_mprotect(at, len, prot) != 0 {
            self.lock().release(at, len);
            return None;
        }
        Some(at)
    }

    /// A fixed private anonymous mapping over `[at, at + len)` (in the
    /// arena): emptied where it was in use, given `prot`.
    pub fn map_fixed(&self, at: usize, len: usize, prot: i32) -> Result<(), i32> {
        let len = len.next_multiple_of(PAGE_SIZE);
        self.take_back_foreign(at, len)?;
        let used = {
            let mut r = self.lock();
            let used = r.any_used(at, len);
            r.claim(at, len);
            used
        };
        if used {
            self.empty(at, len);
        }
        if sys::raw_mprotect(at, len, prot) != 0 {
            return Err(sys::errno());
        }
        Ok(())
    }

    /// True if a `MAP_FIXED_NOREPLACE` of the range must fail (some of it
    /// is in use).
    pub fn in_use(&self, at: usize, len: usize) -> bool {
        self.lock().any_used(at, len.next_multiple_of(PAGE_SIZE))
    }

    /// Hands `[at, at + len)` over to a file or shared mapping the caller
    /// maps there next (with `MAP_FIXED`).
    pub fn hand_over(&self, at: usize, len: usize) -> Result<(), String> {
        let len = len.next_multiple_of(PAGE_SIZE);
        self.take_back_foreign(at, len)
            .map_err(|e| format!("errno {e}"))?;
        self.region
            .hand_over(at - self.base, len)
            .map_err(|e| e.to_string())?;
        let mut r = self.lock();
        r.claim(at, len);
        r.foreign.push((at, len));
        Ok(())
    }

    /// Releases `[at, at + len)` (an `munmap`): emptied, reserved again,
    /// free.
    pub fn unmap(&self, at: usize, len: usize) -> Result<(), i32> {
        let len = len.next_multiple_of(PAGE_SIZE);
        self.take_back_foreign(at, len)?;
        if self.lock().any_used(at, len) {
            self.empty(at, len);
            if sys::raw_mprotect(at, len, libc::PROT_NONE) != 0 {
                return Err(sys::errno());
            }
        }
        self.lock().release(at, len);
        Ok(())
    }

    /// Drops the contents of `[at, at + len)`: the region's remove event
    /// drops what it held there; the range reads as zeros.
    fn empty(&self, at: usize, len: usize) {
        sys::raw_madvise(at, len, libc::MADV_DONTNEED);
    }

    /// Makes the handed-over parts of `[at, at + len)` the arena's again:
    /// reserved, registered.
    fn take_back_foreign(&self, at: usize, len: usize) -> Result<(), i32> {
        let parts: Vec<(usize, usize)> = {
            let mut r = self.lock();
            let mut parts = Vec::new();
            let mut kept = Vec::new();
            for &f in &r.foreign {
                match overlap(f, (at, len)) {
                    None => kept.push(f),
                    Some((s, n)) => {
                        parts.push((s, n));
                        if s > f.0 {
                            kept.push((f.0, s - f.0));
                        }
                        if s + n < f.0 + f.1 {
                            kept.push((s + n, f.0 + f.1 - s - n));
                        }
                    }
                }
            }
            r.foreign = kept;
            parts
        };
        for (s, n) in parts {
            let p = sys::raw_mmap(
                s as *mut libc::c_void,
                n,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            );
            if p as usize != s {
                return Err(sys::errno());
            }
            if let Err(e) = self.region.take_back(s - self.base, n) {
                sys::stderr_line(&format!(
                    "zpage: could not take {n} bytes at {s:#x} back into its arena: {e}\n"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(free: &[(usize, usize)]) -> Ranges {
        Ranges {
            free: free.to_vec(),
            ..Ranges::default()
        }
    }

    #[test]
    fn carving_keeps_alignment_and_releasing_coalesces() {
        let mut r = ranges(&[(0x1000, 0x10_0000)]);
        let a = r.carve(0x2000, 0x1000).unwrap();
        let b = r.carve(0x1000, 0x1_0000).unwrap();
        assert_eq!((a, b), (0x1000, 0x1_0000));
        assert_eq!(r.live, 0x3000);
        r.release(a, 0x2000);
        r.release(b, 0x1000);
        assert_eq!(r.free, vec![(0x1000, 0x10_0000)]);
        assert_eq!((r.live, r.peak), (0, 0x3000));
    }

    #[test]
    fn fixed_claims_and_partial_releases_account_for_what_was_free() {
        let mut r = ranges(&[(0x1000, 0x10000)]);
        r.claim(0x3000, 0x2000);
        assert_eq!(r.free, vec![(0x1000, 0x2000), (0x5000, 0xc000)]);
        assert!(r.any_used(0x2000, 0x2000));
        assert!(!r.any_used(0x1000, 0x2000));
        // Releasing more than was in use counts only what was.
        r.release(0x1000, 0x8000);
        assert_eq!(r.live, 0);
        assert_eq!(r.free, vec![(0x1000, 0x10000)]);
    }
}
