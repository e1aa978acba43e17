//! Fault resolution: making one page present with its right contents.
//!
//! **Async-signal-safety argument.** [`resolve`] runs in the faulting thread's
//! SIGBUS handler (the default mode), on the event thread
//! (`FaultMode::HandlerThread`), and in API calls (`prefault`, `pin`,
//! `advise_willneed`, `restore_all`), which block asynchronous signals while
//! they hold a page. In all of them it:
//! - allocates and frees nothing: a page is claimed by compare-and-swap of
//!   its state word; the decompression worker comes from a preallocated slot;
//!   loads use the object store's `get_page_in_handler`, which spins on the
//!   pool's read lock and allocates nothing even for a corrupt blob; a page
//!   written back to the tier below RAM is read with `pread` into the
//!   worker's preallocated buffer and its seal opened in place (the tier's
//!   index lock is spun on, and its writers are zpage's threads or API
//!   calls, which block asynchronous signals), so it is served here too,
//!   with no thread to wake; a page in a tier whose reads are not
//!   async-signal-safe (Redis) is read by the tier reader thread instead,
//!   handed over through a preallocated request slot and a futex (module
//!   `tier_reader` argues it); references given
//!   up go to a lock-free ring for the reclaimer to free (freeing takes the
//!   pool's write lock), or, when the ring is full and this thread may not
//!   wait for it, stay in the page's slot (`Shared::free_later`); fatal
//!   messages are built in a stack buffer;
//! - records the fault, when a trace is asked for, with an atomic add and a
//!   store into a mapping made when the budget started (module `trace`);
//! - makes only async-signal-safe system calls: ioctl, madvise, mincore,
//!   process_madvise, futex,
//!   sched_yield, nanosleep, clock_gettime, pread, write and abort. A
//!   `pread` of a local file or block device returns or fails in bounded
//!   time unless the device itself hangs (as the kernel's own swap-in would);
//!   a network tier's read is bounded by the tier's timeouts;
//! - never waits for its own thread. The states it waits on (EVICTING,
//!   COMPRESSING, RESTORING) and the pool write lock it may spin behind are
//!   held only by zpage's own threads (which block asynchronous signals),
//!   by other threads inside this handler (which runs with every signal
//!   blocked but a seccomp trap's SIGSYS, see `signal.rs`), or by API calls
//!   (which block asynchronous signals while they hold them). So no handler
//!   of the program can run on a thread while that thread holds what the
//!   handler's own fault would wait for. A thread holding a reclaim lock,
//!   and in some programs a zpage thread, may fault here itself; what
//!   keeps those from waiting on themselves is below;
//! - waits for the event thread to apply the events it read only when a
//!   page it evicts (`evict::evict_clean_now`) was not there to move: the
//!   event thread itself waits only for installs in flight, and this
//!   thread has none in flight then;
//! - waits at the budget's resolve gate only before it holds anything: the
//!   gate is closed by a fork prepare hook on another thread, for as long
//!   as the fork takes, and that thread's own faults and zpage's threads'
//!   pass it (module `fork`). In a forked child that took the budget over
//!   it frees nothing and drops clean pages itself
//!   (`fork::child::make_room_in_child`), with the same calls as
//!   `evict::evict_clean_now`;
//! - waits for the reclaimer at the budget's limit for at most 100 ms
//!   (`throttle`), and, when the ring of given-up copies is full, until the
//!   reclaimer drains it, only on a program thread that holds no reclaim
//!   lock (`Shared::free_later`); with a memory max, at the limit too for
//!   as long as pages can leave, only on such a thread, for API calls as
//!   for faults (a pin waits holding the pins it took before: pages the
//!   reclaimer skips, so if they are all it has, it finds the budget
//!   stuck and the wait ends);
//! - never panics on a reachable path (page indices are checked by the caller).
//!
//! **Threads that hold zpage's state and fault on region memory.** zpage's
//! threads (the reclaimer and its second compressor, the event thread, the
//! tier reader, the dictionary trainer; module `threads`) never read or write region memory
//! in their own code: they reach it through ioctls. Nor do their
//! allocations lie in regions: under `zpage run` the preload library serves
//! every allocation a zpage thread makes, Rust's and the C libraries'
//! (a codec's work area, the C library's record of a thread-local's
//! destructor), from zpage's private heap (`crates/preload/src/alloc.rs`),
//! and elsewhere the C library's allocator is not region memory. Two kinds
//! of thread may still fault on region memory while they hold some of
//! zpage's state: a program thread holding a reclaim lock (the forking
//! thread holds one from the fork's prepare hook to its parent or child
//! hook, and allocates from the program's allocator, which under `zpage
//! run` lies in regions), and a zpage thread in a program whose own
//! allocator serves it from regions (one built on regions through the API,
//! without the preload library). Such a fault is resolved here, on that
//! thread, like any other, and does not wait on what that thread holds:
//! - the resolve gate lets zpage's threads and the forking thread through
//!   (`fork::state::ForkGate`);
//! - the ring of given-up copies has one consumer, the reclaimer, which
//!   drains it holding the reclaim lock: zpage's threads and reclaim-lock
//!   holders never wait for it; a copy the full ring refuses stays in the
//!   page's slot, and the page's next eviction gives it up
//!   (`Shared::free_later`, tested on the reclaimer itself by
//!   `tests::the_reclaimer_restores_a_page_while_its_own_ring_is_full`);
//! - the install gate: between reading events and applying them, the event
//!   thread touches only its own stack and Rust-allocated memory, so it
//!   never faults while installs wait for it (`event::gate::InstallGate`);
//! - the pool's locks and the dedup table's lock: what runs under them
//!   touches only pool memory, which is Rust-allocated;
//! - the wait at the limit is bounded (100 ms) on those threads, memory
//!   max or not.
//!
//! Not excluded, for a zpage thread whose allocator lies in regions (never
//! under `zpage run`): a page that thread holds (EVICTING, COMPRESSING)
//! whose memory the allocator hands, at that moment, to C code on that same
//! thread (a codec allocating its work area on first use), which would
//! then wait on itself; and the tier reader faulting on a page written back
//! to its own tier, which waits until `tier_reader::GIVE_UP_NS` and ends
//! the process naming the page.
//!
//! A page whose contents cannot be restored (a corrupt blob, a blob in the
//! tier that fails its read or its authentication, a userfaultfd the program
//! closed) ends the process with a message naming the page and the cause,
//! never zeros or wrong bytes.

use crate::aging;
use crate::counters::Counters;
use crate::evict::{self, Path};
use crate::fatal::Fatal;
use crate::fork::vfork::PageAccess;
use crate::page::{State, Tag};
use crate::profile;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::sys::{self, Errno, PAGE_SIZE};
use crate::table;

/// Where a restore request comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctx {
    /// The faulting thread's SIGBUS handler.
    Signal,
    /// The handler thread: the faulting thread sleeps in the kernel until woken.
    Thread,
    /// An API call: nobody is waiting on a fault.
    Api,
}

/// What the faulting access was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// A write.
    pub write: bool,
    /// A write to a present, write-protected page (or, for an API call, the
    /// caller needs the page writable by the kernel).
    pub protection: bool,
}

impl Access {
    pub const READ: Access = Access {
        write: false,
        protection: false,
    };
    /// What an API call asks for: present and writable.
    pub const WRITABLE: Access = Access {
        write: true,
        protection: true,
    };
}

/// Makes the page at index `page` of `core` present with its right contents.
/// Returns `Err` only when the mapping is going away (munmap in flight,
/// process exiting); the access then fails the way it would without zpage.
pub fn resolve(core: &RegionCore, page: usize, access: Access, ctx: Ctx) -> Result<(), Errno> {
    core.touch(page);
    let started = sys::now_ns();
    if core.budget.in_forked_child() {
        let errno = core.budget.child().setup_errno();
        if errno != 0 {
            core.about_page(page)
                .text(" cannot be restored in this forked child: taking the region over after fork() failed with errno ")
                .dec(errno as u64)
                .text("; ending the process rather than let the page read as zeros")
                .abort()
        }
    }
    let resolving = core.budget.fork_gate().enter();
    let result = resolve_inner(core, page, access, ctx);
    drop(resolving);
    if ctx != Ctx::Api {
        if let Some(trace) = core.budget.fault_trace() {
            if !core.budget.in_forked_child() {
                trace.record(core.page_addr(page), access.write);
            }
        }
        let ns = sys::now_ns() - started;
        core.counters.record_fault(ns);
        profile::add_if_enabled(profile::Part::Resolve, ns);
    }
    result
}

/// Resolves `page` of `core` from this process: the region's owner
/// (`owner`), or a `vfork()` child of it, which runs in the owner's memory.
/// Such a child resolves the fault itself while its copy of the
/// userfaultfd is open, and otherwise asks the owner's reclaimer to
/// (module `fork::vfork`).
pub fn resolve_from(
    core: &RegionCore,
    page: usize,
    access: Access,
    ctx: Ctx,
    owner: bool,
) -> Result<(), Errno> {
    if owner || core.vfork_child_can_resolve() {
        return resolve(core, page, access, ctx);
    }
    let budget = &*core.budget;
    if budget.in_forked_child() {
        // A forked child's budget has no reclaimer to ask.
        return Err(Errno(libc::EBADF));
    }
    budget.vfork().ask(
        core.page_addr(page),
        PageAccess {
            write: access.write,
            protection: access.protection,
        },
        &|| budget.reclaim_signal().kick(),
        &|| budget.reclaim_signal().stopping(),
    )
}

fn resolve_inner(core: &RegionCore, page: usize, access: Access, ctx: Ctx) -> Result<(), Errno> {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    // A fault makes room once. API calls (pins of system calls' buffers,
    // prefaults) leave the budget to the reclaimer, except under a memory
    // max on a thread that may wait for it: there a system call reading a
    // large file into fresh memory would otherwise pass the limit by what
    // it pins before the reclaimer catches up.
    let mut room_made =
        ctx == Ctx::Api && !(budget.has_memory_max() && Shared::thread_may_wait_for_reclaimer());
    let mut protection = access.protection;
    loop {
        let s = slot.load();
        match s.tag() {
            Tag::Resident if protection && s.clean() => {
                lift_protection(core, page, s)?;
                if ctx != Ctx::Api {
                    return Ok(());
                }
                // An API caller also needs the page present: look again.
                protection = false;
            }
            Tag::Empty | Tag::Resident => {
                if s.tag() == Tag::Empty && !room_made {
                    budget.make_room_for_growth(FAULT_AROUND_PAGES);
                    make_room(core);
                    room_made = true;
                    continue;
                }
                // Claimed, so no eviction can move the page out between our
                // look and our fill.
                if !slot.claim(s, s.with(Tag::Restoring)) {
                    continue;
                }
                let mut run = if s.tag() == Tag::Empty && ctx != Ctx::Api {
                    claim_around(core, page, s)
                } else {
                    Run::one(page, s)
                };
                let filled = fill_run(core, &mut run, page, access.write)?;
                let page_filled = page < run.start + filled;
                Counters::add(
                    &core.counters.fault_around_count,
                    (filled - page_filled as usize) as u64,
                );
                if page_filled {
                    Counters::bump(&core.counters.zero_fill_count);
                } else if ctx == Ctx::Thread {
                    let _ = sys::uffd_wake(budget.uffd().fd(), core.page_addr(page), PAGE_SIZE);
                }
                return Ok(());
            }
            Tag::Staged => {
                if !slot.claim(s, s.with_slot(Tag::Restoring, s.slot())) {
                    continue;
                }
                match stalled(budget, || restore_staged(core, page, s)) {
                    Err(Errno(libc::ECANCELED)) => continue,
                    r => return r,
                }
            }
            Tag::Stored => {
                if !room_made {
                    make_room(core);
                    room_made = true;
                    continue;
                }
                if !slot.claim(s, s.with(Tag::Restoring)) {
                    continue;
                }
                match stalled(budget, || restore_stored(core, page, s, access.write)) {
                    Err(Errno(libc::ECANCELED)) => continue,
                    r => return r,
                }
            }
            Tag::Evicting | Tag::Compressing | Tag::Restoring => {
                // Owned by another thread, which always finishes.
                sys::yield_now();
            }
        }
    }
}

/// First write since the restore: lift the protection; the compressed copy
/// is stale from now on and goes back to the store.
fn lift_protection(core: &RegionCore, page: usize, s: State) -> Result<(), Errno> {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    if !slot.claim(s, s.with(Tag::Restoring)) {
        return Ok(());
    }
    let addr = core.page_addr(page);
    match budget
        .installs()
        .install(|| sys::uffd_writeprotect(budget.uffd().fd(), addr, false))
    {
        Ok(()) => {
            evict::give_up_copy(core, page, Path::Fault);
            slot.publish(s.with(Tag::Resident).set_clean(false));
            Counters::bump(&core.counters.first_write_count);
            Ok(())
        }
        Err(e) => {
            slot.publish(s);
            Err(e)
        }
    }
}

/// Pages a first touch fills at once at most: the EMPTY pages around its
/// own in an aligned window of 64 KiB, the kernel's `fault_around_bytes`
/// (fault-around). A heap grows page after page, upwards (an arena, the
/// `brk` heap) or downwards (GNU sort's line table), so the program's next
/// touches are mostly there, and each page filled at once spares it a
/// fault: a signal round trip, 5 µs here, where the kernel's own first
/// touch of a page costs 1-2 µs.
const FAULT_AROUND_PAGES: usize = 16;

static ZERO_PAGES: [u8; PAGE_SIZE * FAULT_AROUND_PAGES] = [0; PAGE_SIZE * FAULT_AROUND_PAGES];

/// Pages a fault claimed to fill with zeros: `pages` pages from `start`,
/// the faulting page among them, each claimed from the state in `seen`.
struct Run {
    start: usize,
    pages: usize,
    seen: [State; FAULT_AROUND_PAGES],
}

impl Run {
    /// The faulting page alone, claimed from `seen`.
    fn one(page: usize, seen: State) -> Run {
        let mut run = Run {
            start: page,
            pages: 1,
            seen: [State::EMPTY; FAULT_AROUND_PAGES],
        };
        run.seen[0] = seen;
        run
    }

    /// Ends the claims: the first `filled` pages are resident now, the
    /// others are as they were.
    fn release(&self, core: &RegionCore, filled: usize) {
        for (i, &seen) in self.seen[..self.pages].iter().enumerate() {
            let page = self.start + i;
            if i < filled {
                zero_filled(core, page, seen);
            } else {
                core.pages[page].publish(seen);
            }
        }
    }

    /// Lets every page go but `page`, which becomes the run.
    fn shrink_to(&mut self, core: &RegionCore, page: usize) {
        let seen = self.seen[page - self.start];
        for (i, &other) in self.seen[..self.pages].iter().enumerate() {
            if self.start + i != page {
                core.pages[self.start + i].publish(other);
            }
        }
        *self = Run::one(page, seen);
    }
}

/// Claims, with `page` (claimed from EMPTY, `seen`), the EMPTY pages next
/// to it inside its aligned window of [`FAULT_AROUND_PAGES`], up to the
/// first page either side that is not EMPTY, while the budget has room for
/// them below its low watermark: under pressure a page filled and never
/// used would push out one in use. Not while faults are traced: the trace
/// is the program's access order, and pages filled unasked would be
/// missing from it.
fn claim_around(core: &RegionCore, page: usize, seen: State) -> Run {
    let budget = &*core.budget;
    let mut run = Run::one(page, seen);
    if budget.in_forked_child()
        || budget.fault_trace().is_some()
        || budget.resident().pages() + FAULT_AROUND_PAGES > budget.limits().low_pages
    {
        return run;
    }
    let window = page - page % FAULT_AROUND_PAGES;
    let window_end = core.pages.len().min(window + FAULT_AROUND_PAGES);
    let claim = |neighbour: usize| -> Option<State> {
        let slot = &core.pages[neighbour];
        let seen = slot.load();
        if seen.tag() != Tag::Empty {
            return None;
        }
        // Before the page can leave EMPTY, as `resolve` does for its own.
        core.touch(neighbour);
        slot.claim(seen, seen.with(Tag::Restoring)).then_some(seen)
    };
    // Downwards, the claims fill `seen` from its end, in page order with
    // `page` last; a rotation then puts `start` first.
    let last = FAULT_AROUND_PAGES - 1;
    run.seen[last] = seen;
    let mut start = page;
    while start > window {
        let Some(seen) = claim(start - 1) else { break };
        start -= 1;
        run.seen[last - (page - start)] = seen;
    }
    run.seen.rotate_left(last - (page - start));
    run.start = start;
    run.pages = page - start + 1;
    for neighbour in page + 1..window_end {
        let Some(seen) = claim(neighbour) else { break };
        run.seen[run.pages] = seen;
        run.pages += 1;
    }
    run
}

/// Books a page claimed from EMPTY (`seen`) as filled with zeros: resident,
/// counted, and handed to the aging. Zeros are right for a page we never
/// held (EMPTY) and for one the program discarded (RESIDENT in our books,
/// but absent); no discard is pending after a fill.
fn zero_filled(core: &RegionCore, page: usize, seen: State) {
    evict::give_up_copy(core, page, Path::Fault);
    core.pages[page].set(seen.emptied().with(Tag::Resident));
    if seen.tag() == Tag::Empty {
        core.count_mapped();
        core.admitted(page, false);
    }
}

/// Maps zeros over `run` and ends its claims: the shared zero page for a
/// read (no memory), zeroed pages for a write (one fault instead of two).
/// Returns how many pages from `run.start` it filled: `page` (the faulting
/// one) may not be among them if it was already present, or still carries
/// an eviction marker the program's discard is about to clear (the access
/// faults again meanwhile). A run that fails as a whole (it crosses into
/// another mapping, made with other protections) is tried again as `page`
/// alone.
fn fill_run(core: &RegionCore, run: &mut Run, page: usize, write: bool) -> Result<usize, Errno> {
    let budget = &*core.budget;
    let timed = profile::start();
    // In a forked child an empty page may still carry an eviction marker
    // whose clearing zap belonged to the parent's `madvise` (the fork came
    // between the event and the zap): ZEROPAGE refuses a marker, COPY
    // replaces it.
    let write = write || budget.in_forked_child();
    let mut r = fill_zero(budget, core.page_addr(run.start), run.pages, write);
    if r == Err(Errno(libc::ENOENT)) && run.pages > 1 {
        run.shrink_to(core, page);
        r = fill_zero(budget, core.page_addr(page), 1, write);
    }
    profile::end(profile::Part::Install, timed, 1);
    let filled = match r {
        Ok(filled) => filled,
        Err(Errno(libc::EEXIST)) => 0,
        Err(e) => {
            run.release(core, 0);
            return Err(check_uffd(budget, e));
        }
    };
    run.release(core, filled);
    Ok(filled)
}

/// One `UFFDIO_COPY` of zeros or `UFFDIO_ZEROPAGE` over `pages` pages from
/// `addr`; returns how many it filled before the first already present.
fn fill_zero(budget: &Shared, addr: usize, pages: usize, write: bool) -> Result<usize, Errno> {
    debug_assert!((1..=FAULT_AROUND_PAGES).contains(&pages));
    let fd = budget.uffd().fd();
    let len = pages * PAGE_SIZE;
    let mut filled = 0;
    budget.installs().install(|| {
        let r = if write {
            sys::uffd_copy_run(fd, addr, ZERO_PAGES.as_ptr(), len, 0)
        } else {
            sys::uffd_zeropage_run(fd, addr, len, 0)
        };
        match r {
            Ok(bytes) | Err((_, bytes)) if bytes > 0 => {
                filled = bytes / PAGE_SIZE;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e),
        }
    })?;
    Ok(filled)
}

/// Ends the process if `e` says the userfaultfd is gone (the program closed
/// it): evicted pages could not be restored, and must never read as zeros.
fn check_uffd(budget: &Shared, e: Errno) -> Errno {
    if matches!(e.0, libc::EBADF | libc::ENOTTY | libc::EINVAL) {
        budget.uffd().mark_lost();
        Fatal::new()
            .text("the program closed zpage's userfaultfd (fd ")
            .dec(budget.uffd().fd() as u64)
            .text("): evicted pages can no longer be restored; ending the process rather than let them read as zeros. Do not close file descriptors you did not open")
            .abort()
    }
    e
}

/// Copies `src` into the region's page with `UFFDIO_COPY`, unless the program
/// discarded the page while we held it (`ECANCELED`).
fn copy_in(core: &RegionCore, page: usize, src: *const u8, protect: bool) -> Result<(), Errno> {
    let budget = &*core.budget;
    let dst = core.page_addr(page);
    let mode = if protect { sys::COPY_MODE_WP } else { 0 };
    let timed = profile::start();
    let r = budget.installs().install(|| {
        if core.pages[page].load().discarded() {
            return Err(Errno(libc::ECANCELED));
        }
        sys::uffd_copy(budget.uffd().fd(), dst, src, mode)
    });
    profile::end(profile::Part::Install, timed, 1);
    match r {
        Err(Errno(libc::EEXIST)) => core.about_page(page)
            .text(": its address is mapped although the page is evicted (was the region remapped?); refusing to guess its contents")
            .abort(),
        Err(e) if e.0 != libc::ECANCELED => Err(check_uffd(budget, e)),
        r => r,
    }
}

/// Runs a restore, its time counted as a stall for the automatic budget
/// (timed only when the budget has one: the clock is read twice).
fn stalled<T>(budget: &Shared, restore: impl FnOnce() -> T) -> T {
    let started = budget.times_stalls().then(sys::now_ns);
    let result = restore();
    if let Some(started) = started {
        budget.note_stall(sys::now_ns() - started);
    }
    result
}

/// A fault on a staged page: copy it back from its staging slot (no
/// decompression, and no TLB flush, unlike moving it back); the slot is
/// discarded later with others.
fn restore_staged(core: &RegionCore, page: usize, s: State) -> Result<(), Errno> {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let staging_slot = s.slot();
    match copy_in(
        core,
        page,
        budget.staging().page(staging_slot).as_ptr(),
        false,
    ) {
        Ok(()) => {}
        Err(Errno(libc::ECANCELED)) => {
            evict::drop_staged(core, staging_slot);
            slot.set(s.emptied());
            return Err(Errno(libc::ECANCELED));
        }
        Err(e) => {
            slot.publish(s);
            return Err(e);
        }
    }
    core.count_unstaged();
    core.count_mapped();
    budget
        .staging()
        .discard_later(staging_slot, budget.resident());
    let activate = aging::on_trial_hit(budget.clock(), &slot.aging);
    slot.publish(s.with(Tag::Resident).set_clean(false));
    Counters::bump(&core.counters.trial_hit_count);
    if activate {
        Counters::bump(&core.counters.activation_count);
    }
    core.admitted(page, activate);
    Ok(())
}

/// A fault on a stored page: decompress it and copy it in. A read maps it
/// write-protected (with write tracking) and keeps its compressed copy, so
/// that, unwritten, it can be dropped again without compressing; a write maps
/// it writable at once (one fault instead of two) and gives the copy up.
fn restore_stored(core: &RegionCore, page: usize, s: State, write: bool) -> Result<(), Errno> {
    let budget = &*core.budget;
    let slot = &core.pages[page];
    let Some(page_ref) = slot.page_ref() else {
        core.about_page(page)
            .text(": it is marked stored but holds no reference (zpage bug)")
            .abort()
    };
    // A forked child keeps every copy (it never frees a blob), so a page it
    // only reads can be dropped again to keep its budget.
    let protect = (budget.keeps_clean_copies() || budget.in_forked_child()) && !write;
    let copied = budget.workers().with(|worker, buffer| {
        let timed = profile::start();
        let identity = core.tier_identity(page);
        let loaded = match &budget.tier_reader() {
            // A network tier: its read is handed to the tier reader thread.
            Some(reader) => budget.store().get_page_in_handler_via(
                worker,
                page_ref,
                identity,
                buffer,
                |tier_ref, page, buf| reader.read(tier_ref, page, buf),
            ),
            None => budget
                .store()
                .get_page_in_handler(worker, page_ref, identity, buffer),
        };
        profile::end(profile::Part::Load, timed, 1);
        if let Err(e) = loaded {
            let message = core.about_page(page).text(" cannot be restored: ");
            let message = match e {
                zpage_store::LoadError::Corrupt { codec, blob_bytes } => message
                    .text("its ")
                    .text(codec)
                    .text(" blob of ")
                    .dec(blob_bytes as u64)
                    .text(" bytes does not decode (corrupt compressed data)"),
                zpage_store::LoadError::StaleRef(raw) => message
                    .text("its reference ")
                    .hex(raw)
                    .text(" names no live object in the pool"),
                zpage_store::LoadError::ForeignWorker => {
                    message.text("a worker of another store was used")
                }
                zpage_store::LoadError::Tier(failure) => {
                    let message = message
                        .text("it was written back to ")
                        .text(budget.store().tier().map_or("the tier", |t| t.describe()))
                        .text(" and cannot be read back: ")
                        .text(failure.cause());
                    match failure {
                        zpage_store::ReadFailure::Io { errno } => {
                            message.text(" (errno ").dec(errno as u64).text(")")
                        }
                        _ => message,
                    }
                }
            };
            message
                .text("; ending the process rather than hand back wrong bytes")
                .abort()
        }
        copy_in(core, page, buffer.as_ptr(), protect)
    });
    match copied {
        Ok(()) => {}
        Err(Errno(libc::ECANCELED)) => {
            // Discarded by the program while we held it: zeros.
            evict::give_up_copy(core, page, Path::Fault);
            Counters::bump(&core.counters.discard_count);
            slot.set(s.emptied());
            return Err(Errno(libc::ECANCELED));
        }
        Err(e) => {
            slot.publish(s);
            return Err(e);
        }
    }
    if !protect {
        evict::give_up_copy(core, page, Path::Fault);
    }
    core.count_mapped();
    if budget.in_forked_child() {
        budget.child().count_restored();
    }
    let activate = aging::on_refault(budget.clock(), &slot.aging);
    slot.publish(s.with(Tag::Resident).set_clean(protect));
    Counters::bump(&core.counters.restore_count);
    if activate {
        Counters::bump(&core.counters.activation_count);
    }
    core.admitted(page, activate);
    Ok(())
}

/// Before a fault makes one more page resident. At the high watermark the
/// faulting thread drops a clean page itself: one page in, one page out,
/// with no compression (the page's copy is exact) and no wait for the
/// reclaimer. Only at the hard limit does a fault wait.
fn make_room(core: &RegionCore) {
    let budget = &*core.budget;
    if budget.in_forked_child() {
        crate::fork::child::make_room_in_child(core);
        return;
    }
    if budget.evictions().budget_paused() {
        return;
    }
    if budget.resident().pages() >= budget.limits().high_pages {
        for _ in 0..4 {
            let Some(record) = budget.queues().victims().take() else {
                break;
            };
            let timed = profile::start();
            let dropped = table::with_region(record.region(), |victim| {
                evict::evict_clean_now(victim, record)
            });
            profile::end(profile::Part::EvictOnFault, timed, 1);
            match dropped {
                Some(true) => break,
                // Not clean (written since), or held for a moment: back to the reclaimer.
                Some(false) => {
                    budget.queues().return_victim(record);
                }
                // Its region is gone.
                None => {}
            }
        }
        if budget.keeps_clean_copies() && budget.queues().ask_for_refill() {
            budget.kick_reclaimer();
        }
    }
    throttle(core);
}

/// How long a fault waits for room before it goes over the budget, when it
/// may not wait longer (see [`throttle`]).
const THROTTLE_BOUND_NS: u64 = 100_000_000;

/// Over the hard limit: give back the staging slots waiting to be
/// discarded; if that is not enough, wake the reclaimer and sleep until it
/// made room. Without a memory max the wait is bounded at 100 ms, after
/// which the fault proceeds over budget rather than stall forever; with
/// one, a program thread waits for as long as pages can leave (the
/// reclaimer marks the budget stuck when they cannot: everything resident
/// pinned, the pool at its cap with nowhere to write back), since passing
/// the budget would pass the limit. A fault that goes over the budget is
/// counted (`overshoot_count`) with how far (`overshoot_peak_bytes`).
fn throttle(core: &RegionCore) {
    let budget = &*core.budget;
    let full = || budget.over_limit();
    if !full() {
        return;
    }
    budget.staging().discard_pending(budget.resident());
    if !full() || budget.evictions().budget_paused() {
        return;
    }
    let signal = budget.reclaim_signal();
    if signal.stuck() {
        // Pages cannot leave: no waiting for room that will not come; the
        // budget is exceeded, counted and reported.
        Counters::bump(&core.counters.overshoot_count);
        signal.note_overshoot(
            budget
                .resident()
                .pages()
                .saturating_sub(budget.limits().budget_pages)
                + 1,
        );
        return;
    }
    let started = sys::now_ns();
    let timed = profile::start();
    Counters::bump(&core.counters.throttle_count);
    let unbounded = budget.has_memory_max() && Shared::thread_may_wait_for_reclaimer();
    loop {
        signal.wait_for_room(sys::now_ns(), THROTTLE_BOUND_NS, &full, &|| {
            budget.kick_reclaimer()
        });
        if !unbounded
            || !full()
            || signal.stuck()
            || signal.stopping()
            || budget.evictions().budget_paused()
        {
            break;
        }
    }
    let waited = sys::now_ns() - started;
    Counters::add(&core.counters.throttle_ns, waited);
    budget.note_stall(waited);
    profile::end(profile::Part::Throttle, timed, 1);
    let (resident, limit) = (budget.resident().pages(), budget.limits().budget_pages);
    if resident >= limit && full() && !signal.stopping() {
        // Going on over the budget: the bound passed, or pages cannot leave.
        Counters::bump(&core.counters.overshoot_count);
        signal.note_overshoot(resident - limit + 1);
    }
}
