//! What the program told the kernel a child of `fork()` gets of region
//! memory: `MADV_WIPEONFORK` (the child reads zeros there),
//! `MADV_KEEPONFORK` (undoes it), `MADV_DONTFORK` (the child has no mapping
//! there: an access is a SIGSEGV) and `MADV_DOFORK` (undoes that).
//!
//! The kernel applies the advice to the pages it holds. The pages zpage
//! holds (compressed in the pool, or in a staging slot) are in the child's
//! copy of the region's books and pool, and the child would restore them
//! where the kernel gives zeros or nothing. So [`advise_fork`] passes the
//! advice to the kernel and records it in each region it covers
//! ([`ForkMarks`]: two bits a page), and the child's hook (`fork.rs`,
//! `adopt_pages`) empties every marked page (an access then reads zeros, as
//! the kernel's own wiped page does) and leaves `MADV_DONTFORK` ranges out of
//! its userfaultfd registration (the range is not mapped in the child). A
//! budget the child cannot take over restores its pages before the fork,
//! except the marked ones: the child gets none of their contents anyway.
//!
//! **No fork between the kernel's change and the record.** A fork after
//! the kernel applied the advice but before the record would give the child
//! the old contents of the pages zpage holds (zeros were due), and the
//! reverse order the zeros of a change the kernel had not made. The advice
//! goes through a process-wide gate ([`ADVICE_GATE`], the same Dekker pair
//! as a budget's resolve gate) that the fork prepare hook closes before
//! anything else, with asynchronous signals blocked meanwhile (a program
//! handler that forked there would wait on the gate its own thread holds).
//!
//! A failed `madvise` may have changed part of the range: `ENOMEM` (part of
//! the range is not mapped) still applies the advice to every mapped part,
//! so it is recorded; any other failure on a page-aligned range may have
//! stopped part way, and the caller is told the regions cannot know which
//! of their pages it reached (the preload library then makes them plain
//! memory, whose fork the kernel handles alone).
//!
//! The marks are read only in the fork hooks (normal context). Recording
//! allocates a region's marks at its first advice, on the calling thread.

use crate::fork::marks::ForkAdvice;
use crate::fork::state::ForkGate;
use crate::sys::PAGE_SIZE;
use crate::table::{self, pages_in};
use crate::threads::SignalGuard;

/// Closed by the fork prepare hook from before it quiesces the budgets
/// until its parent's or child's hook: no advice is between the kernel and
/// the record at a fork.
pub(crate) static ADVICE_GATE: ForkGate = ForkGate::new();

/// A fork advice the kernel refused ([`advise_fork`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkAdviceFailed {
    /// The kernel's errno.
    pub errno: i32,
    /// The kernel may have applied the advice to part of the range, and
    /// regions overlap it: they cannot tell which of their pages it reached.
    /// The caller should make them plain memory.
    pub regions_unsure: bool,
}

/// Gives `advice` for `[addr, addr + len)` to the kernel (`madvise`, the
/// caller's call of it, returning its errno on failure) and records it in
/// every region of this process the range covers, so that a child made by
/// `fork()` gets of those regions what the kernel gives it (module docs).
/// For front ends that see the program's `madvise` calls (the preload
/// library); a program using regions directly calls this instead of
/// `madvise` for these four advice values.
pub fn advise_fork(
    addr: usize,
    len: usize,
    advice: ForkAdvice,
    madvise: impl FnOnce() -> Result<(), i32>,
) -> Result<(), ForkAdviceFailed> {
    let _signals = SignalGuard::block_async();
    let entered = ADVICE_GATE.enter();
    let result = madvise();
    // Arguments the kernel refuses before looking at the range.
    let refused_whole = !addr.is_multiple_of(PAGE_SIZE) || addr.checked_add(len).is_none();
    let applied = match result {
        Ok(()) => true,
        // Every mapped part of the range took the advice.
        Err(libc::ENOMEM) => !refused_whole,
        Err(_) => false,
    };
    if applied {
        record(addr, len, advice);
    }
    drop(entered);
    result.map_err(|errno| ForkAdviceFailed {
        errno,
        regions_unsure: !applied && !refused_whole && table::overlaps_any_region(addr, len),
    })
}

/// Marks the pages of every region of this process in the range.
fn record(addr: usize, len: usize, advice: ForkAdvice) {
    table::for_each(|core| {
        if let Some(pages) = pages_in(core, addr, len) {
            core.fork_marks.mark(pages, advice, core.page_count());
        }
    });
}
