//! zpage-preload: `libzpage_preload.so`, loaded with `LD_PRELOAD`, puts an
//! unmodified program's large anonymous memory in zpage regions under one
//! budget for the whole process, so its cold pages are compressed. `zpage
//! run` sets it up; it also works alone (see the README for the variables).
//!
//! # What goes into regions, and what stays out
//!
//! | memory | placed in a region? | why |
//! |---|---|---|
//! | `mmap(NULL, n, PROT_READ\|PROT_WRITE, MAP_PRIVATE\|MAP_ANONYMOUS[\|MAP_NORESERVE])`, `n` at least the threshold (2 MiB by default) | yes, one region per mapping | the heaps runtimes build (jemalloc extents, CPython's arenas if the threshold is lowered to 1 MiB) |
//! | `malloc`/`calloc`/`realloc`/`posix_memalign`/`aligned_alloc`/`memalign`/`valloc`/`pvalloc` of at least the threshold, alignment up to 4 KiB | yes, one region per allocation | glibc makes these with its internal `mmap`, which no interposer sees |
//! | smaller mappings and allocations, the `brk` heap | no | small objects are what programs hand to system calls the library does not wrap (paths, `pollfd` arrays, `argv`): evicted, those calls fail with `EFAULT` (see `config.rs`); each region also costs a table slot (`MAX_REGIONS`, 1024) |
//! | an address hint, `MAP_FIXED`, `MAP_FIXED_NOREPLACE` | no | the program wants a particular place, which regions (placed by the kernel) cannot promise |
//! | `PROT_NONE` reservations (V8, the JVM, glibc's per-thread heaps), then `mprotect`ed in parts | no | a region is read-write as a whole; committing parts of a reservation one by one would need a region per commit |
//! | stacks (`MAP_STACK`, `MAP_GROWSDOWN`), `MAP_SHARED`, file mappings, `PROT_EXEC` | no | shared and file pages belong to the page cache; stacks must never fault into a handler on the stack they grow |
//! | `MAP_POPULATE`, `MAP_LOCKED`, `MAP_HUGETLB` | no | the program asked for memory that is present at once |
//!
//! The budget (its threads and userfaultfd) starts with the first region: a
//! process that never places memory in one, such as most short-lived
//! children, has none of zpage's threads or descriptors (programs that list
//! their own descriptors, as CPython's `test_subprocess` does, see only
//! theirs).
//!
//! # What the program may do to region memory
//!
//! | call | what happens |
//! |---|---|
//! | `munmap` of a whole region (or `free` of its allocation) | the region is given up (its compressed pages freed), then the range unmapped |
//! | `munmap` of part, `mmap(MAP_FIXED)` over part, `mprotect` to anything but read-write, `mremap` of part or without `MREMAP_MAYMOVE` | the region becomes plain memory first: every page restored, the range unregistered, the address and contents unchanged (counted as "ejected" in the report); then the call proceeds. Correct, no longer compressed. |
//! | `mremap(MREMAP_MAYMOVE)` of a whole region, `realloc` | a new region of the new size, the written pages copied (pages that read as zeros are not), the old one given up |
//! | `madvise(MADV_DONTNEED/MADV_FREE)` | passed through (`MADV_FREE` as `MADV_DONTNEED`, which it allows): the region drops what it held for the range (userfaultfd remove event); it reads as zeros |
//! | `madvise(MADV_POPULATE_*)` | the range is restored first (the kernel cannot fault an evicted page in) |
//! | `madvise(MADV_WIPEONFORK/MADV_KEEPONFORK/MADV_DONTFORK/MADV_DOFORK)` | passed to the kernel through the region layer, which records it: a forked child reads zeros in wiped pages and has no mapping of don't-fork ones, compressed or not, as without zpage. A call the kernel fails part way makes the regions it covers plain memory (they cannot know which of their pages it reached) |
//! | `sigaction(SIGBUS)`, `signal(SIGBUS)` | recorded as the action zpage chains foreign faults to; zpage's handler stays in front (module `sig`) |
//! | `pthread_sigmask`/`sigprocmask` blocking SIGBUS, a `sa_mask` with SIGBUS | every other signal is blocked as asked, SIGBUS is not: a fault with SIGBUS blocked is fatal (module `sig`) |
//! | system calls with buffers in regions | the buffers are pinned for the call (module `io`, the wrappers of `zpage-syscalls`) |
//! | `fork()` | nothing is restored (the region layer's hooks): the child takes the regions over, restores the pages it touches from its copy-on-write copy of the pool, and holds at most one budget of pages it restored (it drops clean ones again). It places nothing new in regions (the reclaimer stays in the parent): memory it maps itself is plain. The parent's budget is unchanged; its pages resident at the fork are shared copy-on-write until one side writes |
//! | `fork()` then `exec` | the new program loads the library again with a budget of its own |
//! | `vfork()`/`posix_spawn()` | no restore: the child runs in the parent's memory until `exec`, and a fault it takes on an evicted page is resolved as one of the parent's threads would (the region layer tells it from a `fork()` child with `kcmp`) |
//!
//! A case a region cannot follow never gives wrong bytes: the region is made
//! plain first, and a page that cannot be restored ends the process with a
//! message naming it.
//!
//! # System calls on evicted pages
//!
//! See module `io` and the `zpage-syscalls` crate, whose wrappers the Python
//! package installs in process as well. Wrapping the C library's calls was chosen over a
//! seccomp filter that traps every system call with a pointer into the
//! regions' range (SIGSYS): a filter cannot read the buffers an iovec or a
//! msghdr names, it stays installed across `exec` (children without the
//! library would die at their first trapped call) and it needs
//! `PR_SET_NO_NEW_PRIVS`, which breaks set-user-ID children. The wrappers'
//! limit is what they do not see: glibc's internal calls (its mutexes and
//! condition variables issue `futex` directly; the window there is a page
//! evicted between the user-space compare and the system call, and glibc
//! then aborts with "The futex facility returned an unexpected error code"),
//! io_uring buffers, and raw `syscall()` numbers other than `SYS_futex` (a
//! line on stderr names the call when it fails with `EFAULT` on region
//! memory). None of these returns wrong data: the kernel fails the call.
//!
//! # The library's own code
//!
//! It runs inside the program's `malloc`, `mmap` and signal paths: its Rust
//! code allocates from a private heap (module `alloc`), its own calls to
//! interposed functions pass straight through (a thread-local flag), and
//! while it holds its lock asynchronous signals are blocked.
#![allow(unsafe_code)]

mod alloc;
mod config;
mod env_names;
mod io;
mod malloc;
mod mm;
mod real;
mod report;
mod sig;
mod spawn;
mod stacks;
mod state;
mod sys;

use std::sync::atomic::Ordering;

extern "C" fn fork_prepare() {
    if let Some(state) = state::get() {
        state.forks.fetch_add(1, Ordering::Relaxed);
    }
    state::lock_for_fork();
    alloc::lock_for_fork();
}

extern "C" fn fork_parent() {
    alloc::unlock_after_fork();
    state::unlock_after_fork();
}

extern "C" fn fork_child() {
    state::FORKED_CHILD.store(true, Ordering::Relaxed);
    alloc::after_fork_in_child();
    state::unlock_after_fork();
}

fn inactive(why: String, print: bool) {
    if print {
        sys::stderr_line(&format!("zpage: {why}; the program runs without zpage\n"));
    }
    let _ = state::INACTIVE.set(why);
}

extern "C" fn start() {
    let _inside = sys::Inside::enter();
    real::resolve();
    io::resolve();
    // Registered before the budget (started with the first region)
    // registers the region layer's own hooks:
    // prepare hooks run in reverse order, so the region layer quiesces its
    // budgets (waiting on zpage's threads, which allocate) before these
    // take the private heap's and the region list's locks; child hooks run
    // in order, so the heap is usable again when the region layer's child
    // hook allocates.
    // SAFETY: registers functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
    }
    match config::from_env(|k| std::env::var(k).ok()) {
        Ok(None) => inactive(
            format!(
                "{} is not set (zpage run sets it; alone, set it to a budget in bytes)",
                config::BUDGET_ENV
            ),
            false,
        ),
        Err(why) => inactive(why, true),
        Ok(Some(config)) => {
            // Before any region: the trap reserves the range regions are
            // placed in.
            let trapped = match config.syscalls {
                config::Syscalls::Trap => zpage_syscalls::trap::install().map(|_| ()),
                config::Syscalls::Wrappers => Ok(()),
            };
            match trapped {
                Err(why) => inactive(
                    format!(
                        "system calls on compressed memory cannot be served ({why}); {}=wrappers serves only the C library's wrapped functions",
                        config::SYSCALLS_ENV
                    ),
                    true,
                ),
                Ok(()) => {
                    if let Err(why) = state::start(config) {
                        inactive(why, true);
                    }
                }
            }
        }
    }
    // SAFETY: registers a function that lives as long as the process.
    unsafe {
        libc::atexit(report::write_at_exit);
    }
}

/// Runs [`start`] when the library is loaded, before the program's `main`.
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;
