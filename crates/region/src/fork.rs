//! fork(): the child gets the parent's pages as they are, evicted ones
//! included, and restores them itself.
//!
//! A child made by `fork()` inherits the regions' mappings (an evicted
//! page's entry keeps its poison marker) and a copy-on-write copy of the
//! budget: its page states, its pool of compressed pages, its staging area.
//! It does not inherit the userfaultfd registration (`EVENT_FORK` needs
//! `CAP_SYS_PTRACE`), nor the budget's threads. So:
//!
//! - **prepare** (in the forking thread, asynchronous signals blocked until
//!   the parent's or child's hook): pauses eviction; closes the budget's
//!   resolve gate and waits for the restores in flight to finish (no page
//!   is half restored at the fork); takes the reclaim lock (the reclaimer is
//!   between two steps, no page half compressed); holds the store's pool
//!   writes back (no pool lock is held by a thread the child will not have).
//!   Nothing is restored: a fork costs what the kernel's does.
//! - **child**: the budget is taken over by the child. Fresh userfaultfds
//!   go at the parent's descriptor numbers (the inherited ones name the
//!   parent's context), every region is registered on them, and an event
//!   thread of its own starts (the program's discards and unmaps are seen
//!   as in the parent). Faults resolve as in the parent, from the child's
//!   copy of the pool, with these differences: no blob is ever freed (the
//!   pool stays shared with the parent, copy-on-write, costing no memory);
//!   a page the child only reads is restored write-protected, its
//!   compressed copy kept, and once the child holds a budget's worth of
//!   pages it restored, each fault first drops one such clean page again
//!   ([`child::make_room_in_child`]): the child's own memory stays within one
//!   budget, plus what it writes. Pages resident at the fork stay shared
//!   with the parent until one of them writes. Pages the program advised
//!   `MADV_WIPEONFORK` or `MADV_DONTFORK` (module `fork::advice` records
//!   them) are emptied in the child's books before anything else, whatever
//!   the parent held of them, and `MADV_DONTFORK` ranges are left out of
//!   the registration: the child reads zeros there, or has no mapping, as
//!   the kernel says.
//! - **parent**: everything resumes. Its resident pages are now shared
//!   copy-on-write, which `UFFDIO_MOVE` refuses with `EBUSY`; eviction makes
//!   them exclusive again (`MADV_POPULATE_WRITE`, see `evict.rs`).
//!
//! Budgets the child cannot take over this way keep the first design, every
//! page restored before the fork: a budget in `FaultMode::HandlerThread`
//! (its faults need a handler thread), and one with a tier below RAM (its
//! reads and index locks belong to the parent's threads).
//!
//! `posix_spawn` and `vfork` run no atfork hooks and copy nothing. Raw
//! `clone()` without `CLONE_VM` bypasses the hooks: a child that then
//! touches an evicted page gets a message naming it and dies (the page keeps
//! its poison marker), never zeros.
//!
//! The child-side path (module `fork::child`) runs in the SIGBUS handler
//! and is async-signal-safe (its argument is at its top). What the hooks
//! share with the fault path (the resolve gate, a child's own budget) is in
//! `fork::state`; what they share with the program's fork advice (the
//! advice gate, each region's marks), in `fork::advice`. The hooks
//! themselves run in normal context.
#![allow(unsafe_code)]

use crate::config::FaultMode;
use crate::evict;
use crate::fault::{self, Access, Ctx};
use crate::fork::advice::ADVICE_GATE;
use crate::fork::state::set_in_fork_hook;
use crate::page::Tag;
use crate::reclaim::lock::ReclaimGuard;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::sys;
use crate::table;
use crate::threads::{self, SignalGuard};
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Once};

pub(crate) mod advice;
pub(crate) mod child;
pub(crate) mod marks;
pub(crate) mod state;
pub(crate) mod vfork;

static INSTALL: Once = Once::new();

/// A budget as the prepare hook left it for the fork.
struct Held {
    /// The reclaim lock, when the child takes the budget over. Declared
    /// before `shared` so that it is dropped first: it borrows its mutex.
    reclaim: Option<ReclaimGuard<'static>>,
    shared: Arc<Shared>,
}

/// What the forking thread holds from prepare to the parent's or child's
/// hook, and the signal mask to restore then.
struct ForkState {
    held: Vec<Held>,
    _signals: SignalGuard,
}

thread_local! {
    static FORKING: RefCell<Option<ForkState>> = const { RefCell::new(None) };
}

/// Whether a child can take `shared` over (see the module docs).
fn child_can_take_over(shared: &Shared) -> bool {
    shared.mode() == FaultMode::Sigbus && shared.store().tier().is_none()
}

/// The budgets of this process's regions, each once.
fn budgets_of(pid: i32) -> Vec<Arc<Shared>> {
    let mut budgets: Vec<Arc<Shared>> = Vec::new();
    table::for_each(|core| {
        if core.owner_pid() == pid && !budgets.iter().any(|b| Arc::ptr_eq(b, &core.budget)) {
            budgets.push(Arc::clone(&core.budget));
        }
    });
    budgets
}

/// Runs `f` on every region of `shared`.
fn for_each_region_of(shared: &Arc<Shared>, mut f: impl FnMut(&RegionCore)) {
    table::for_each(|core| {
        if Arc::ptr_eq(&core.budget, shared) {
            f(core)
        }
    });
}

extern "C" fn prepare() {
    // A program handler interrupting us while the gate is closed would wait
    // on it forever: blocked until the parent's or child's hook.
    let signals = SignalGuard::block_async();
    set_in_fork_hook(true);
    // No fork advice is between the kernel and its record (`fork/advice`).
    ADVICE_GATE.close();
    let pid = sys::getpid();
    let budgets = budgets_of(pid);
    // Nothing is allocated once a gate is closed: the allocator's memory
    // may be an evicted page whose restore would need the reclaimer we hold.
    let mut held = Vec::with_capacity(budgets.len());
    for shared in budgets {
        // No eviction can start after this returns.
        shared.evictions().pause_for_fork();
        if !child_can_take_over(&shared) {
            restore_every_page(&shared);
            held.push(Held {
                reclaim: None,
                shared,
            });
            continue;
        }
        shared.fork_gate().close();
        let guard = shared.lock_reclaim();
        // SAFETY: the guard borrows the lock inside `shared`, which `Held`
        // keeps alive and outlives the guard (field order drops it first).
        let guard: ReclaimGuard<'static> = unsafe { std::mem::transmute(guard) };
        shared.store().pause_writes();
        wait_until_pages_settle(&shared);
        held.push(Held {
            reclaim: Some(guard),
            shared,
        });
    }
    FORKING.with(|f| {
        *f.borrow_mut() = Some(ForkState {
            held,
            _signals: signals,
        })
    });
}

/// Waits for pages held in a passing state (by a zpage thread that faulted
/// on region memory, the only resolver the gate lets through) to settle.
fn wait_until_pages_settle(shared: &Arc<Shared>) {
    for_each_region_of(shared, |core| {
        for slot in core.touched_pages().iter() {
            while matches!(
                slot.load().tag(),
                Tag::Restoring | Tag::Evicting | Tag::Compressing
            ) {
                sys::yield_now();
            }
        }
    });
}

/// The first design, for budgets a child cannot take over: every page
/// restored, so the child gets plain memory with full contents. Pages the
/// program advised `MADV_WIPEONFORK` or `MADV_DONTFORK` are not: the child
/// gets none of their contents.
fn restore_every_page(shared: &Arc<Shared>) {
    for_each_region_of(shared, |core| {
        for page in 0..core.touched_pages().len() {
            if core.fork_marks.child_gets_nothing(page) {
                continue;
            }
            loop {
                let s = core.pages[page].load();
                match s.tag() {
                    Tag::Empty | Tag::Resident => break,
                    Tag::Staged | Tag::Stored | Tag::Evicting | Tag::Compressing => {
                        if fault::resolve(core, page, Access::READ, Ctx::Api).is_err() {
                            break;
                        }
                    }
                    // Another thread is restoring it: wait until it is in.
                    Tag::Restoring => sys::yield_now(),
                }
            }
        }
    });
}

extern "C" fn parent() {
    let Some(state) = FORKING.with(|f| f.borrow_mut().take()) else {
        return;
    };
    set_in_fork_hook(false);
    ADVICE_GATE.open();
    for held in state.held {
        let shared = &held.shared;
        if held.reclaim.is_some() {
            shared.store().resume_writes();
            shared.fork_gate().open();
        }
        drop(held.reclaim);
        shared.evictions().resume_after_fork();
        shared.kick_reclaimer();
    }
}

extern "C" fn child() {
    let Some(state) = FORKING.with(|f| f.borrow_mut().take()) else {
        return;
    };
    for held in &state.held {
        if held.reclaim.is_some() {
            take_over(&held.shared);
        }
    }
    set_in_fork_hook(false);
    ADVICE_GATE.open();
    for held in state.held {
        if held.reclaim.is_none() {
            // Restored whole before the fork: plain memory here, the
            // machinery stays with the parent.
            continue;
        }
        let shared = &held.shared;
        drop(held.reclaim);
        shared.fork_gate().open();
        shared.evictions().resume_after_fork();
    }
}

/// The child's side: see the module docs.
fn take_over(shared: &Arc<Shared>) {
    shared.store().resume_writes_in_child();
    shared.child().take_over(sys::getpid());
    // The parent's event thread (not stopped by the prepare hook: the
    // program's discards wait on it) may have been between reading events
    // and marking their pages: the page table tells what its marks would
    // have said.
    let events_in_flight = shared.installs().take_over_in_child();
    if let Err(e) = shared.replace_uffds_in_child() {
        shared.child().setup_failed(e.0);
        return;
    }
    let mut failed = None;
    // Pages the program advised the child gets nothing of are emptied
    // before any can fault; then every region is registered (the parts the
    // child has mapped), then each region's pages are brought in line: a
    // fault here (the allocator's memory may be an evicted page) then finds
    // its region registered.
    for_each_region_of(shared, forget_advised_pages);
    for_each_region_of(shared, |core| {
        if core.is_unmapped.load(Ordering::Acquire) {
            return;
        }
        let mode = sys::REGISTER_MODE_MISSING | sys::REGISTER_MODE_WP;
        core.fork_marks.mapped_in_child(core.page_count(), |pages| {
            if let Err(e) = sys::uffd_register(
                shared.uffd().fd(),
                core.page_addr(pages.start),
                pages.len() * sys::PAGE_SIZE,
                mode,
            ) {
                failed = Some(e);
            }
        });
    });
    if let Some(e) = failed {
        shared.child().setup_failed(e.0);
        return;
    }
    for_each_region_of(shared, |core| adopt_pages(core, events_in_flight));
    let events = Arc::clone(shared);
    match threads::spawn_blocking_signals(
        "zpage-events",
        Box::new(move || crate::event::run(events)),
    ) {
        // Detached: it ends with the budget (its stop flag) or the process.
        Ok(thread) => drop(thread),
        Err(e) => shared
            .child()
            .setup_failed(e.raw_os_error().unwrap_or(libc::EAGAIN)),
    }
}

/// Empties, in the child's books, every page of `core` the program advised
/// `MADV_WIPEONFORK` (the kernel gave the child an empty range there) or
/// `MADV_DONTFORK` (the child has no mapping there): whatever the parent
/// held of them, resident, staged or compressed, is not the child's. Their
/// compressed copies stay in the pool (the child frees nothing); a staged
/// page's slot in the child's copy of the staging area is discarded. A
/// wiped page then reads as zeros, restored as a never-written page is; a
/// don't-fork page is never touched (an access is the kernel's SIGSEGV).
/// The child has no other thread yet: no page is held by anyone.
fn forget_advised_pages(core: &RegionCore) {
    core.fork_marks.for_each_marked(|page, _| {
        let slot = &core.pages[page];
        let s = slot.load();
        match s.tag() {
            Tag::Empty => {}
            Tag::Resident => {
                let _ = slot.take_page_ref();
                slot.set(s.emptied());
                core.count_vanished();
            }
            Tag::Staged => {
                slot.set(s.emptied());
                evict::drop_staged(core, s.slot());
            }
            // Stored, or claimed at the fork by the parent's event thread
            // (not held by the prepare hook), which was discarding it.
            Tag::Stored | Tag::Evicting | Tag::Compressing | Tag::Restoring => {
                let _ = slot.take_page_ref();
                slot.set(s.emptied());
            }
        }
    });
}

/// Brings the child's view of `core`'s pages in line with its page table.
/// A page the parent kept write-protected (a clean copy) is writable here
/// (fork drops the uffd-wp bits of an unregistered range), so it is dirty
/// now and its copy given up (left in the pool: the child frees nothing).
/// If the parent's event thread was applying discards at the fork, a page
/// our books call evicted whose entry is gone was discarded: zeros.
fn adopt_pages(core: &RegionCore, events_in_flight: bool) {
    for slot in core.touched_pages().iter() {
        let s = slot.load();
        if s.tag() == Tag::Resident && s.clean() {
            let _ = slot.take_page_ref();
            slot.set(s.set_clean(false));
        }
    }
    if events_in_flight {
        // If the page table cannot be read, the books stand: an evicted
        // page still has its marker unless a discard raced with the fork.
        let _ = sys::page_table_entries(
            core.mapping.base(),
            core.touched_pages().len(),
            |page, entry| {
                let slot = &core.pages[page];
                let s = slot.load();
                if s.tag() == Tag::Stored && !entry {
                    let _ = slot.take_page_ref();
                    slot.set(s.emptied());
                }
            },
        );
    }
}

/// Registers the hooks once per process.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: registers three extern "C" functions that live for the
        // whole program; pthread_atfork has no other preconditions.
        unsafe {
            libc::pthread_atfork(Some(prepare), Some(parent), Some(child));
        }
    });
}
