//! zpage-preload: `libzpage_preload.so`, loaded with `LD_PRELOAD`, puts an
//! unmodified program's private anonymous memory, every heap of it, in
//! compressed memory under one budget for the whole process, so its cold
//! pages are compressed. `zpage run` sets it up; it also works alone (see
//! the README for the variables).
//!
//! # What goes into compressed memory, and what stays out
//!
//! One region per process, the arena (module `arena`): 1 TiB of address
//! space reserved `PROT_NONE` when the budget starts, whose pages follow
//! their own protection. Every placement draws a range from it, so there
//! is no table of regions to fill and no size threshold.
//!
//! | memory | in the arena? | how |
//! |---|---|---|
//! | `mmap` of private anonymous memory, any size, `PROT_NONE`, read-only or read-write, with or without a hint | yes | a range of the arena with the protection asked for (module `mm`) |
//! | `mprotect` committing parts of a reservation (V8, the JVM, glibc's per-thread heaps) | yes | the kernel's, as asked: the region restores a page on access whatever its protection, and moves out only read-write pages |
//! | `mmap(MAP_FIXED)` of private anonymous memory over arena addresses (the JVM's commits) | yes | those addresses, emptied and given the protection asked for |
//! | `malloc` and its family, every size, when the program's allocator is the C library's | yes | served by mimalloc (module `malloc`), which takes its memory with `mmap`: from the arena. A program with its own allocator (jemalloc) keeps it; its `mmap`s come to the arena the same way |
//! | memory a constructor of a library the program links to maps before this library's constructor runs (the loader runs theirs first: jemalloc's in Redis) | yes | the first such `mmap` starts the library (module `startup`) |
//! | the C library's heap before the library loads, the dynamic loader's allocations (thread vectors read by every thread-local access, zpage's handler's included) | no | the loader's calls are told apart by their return address and served from zpage's private heap (module `loader`) |
//! | a locale's data (`setlocale`, `newlocale`, `duplocale`) | no | from zpage's private heap: a new thread reads it before it unblocks signals, when a fault would kill the process (module `locale`) |
//! | stacks (`MAP_STACK`, `MAP_GROWSDOWN`), `MAP_SHARED`, file mappings, `PROT_EXEC`, `MAP_POPULATE`, `MAP_LOCKED`, `MAP_HUGETLB`, addresses below 4 GiB | no | shared and file pages belong to the page cache; stacks must never fault into a handler on the stack they grow; the others asked for memory present at once |
//!
//! File pages stay out of the arena, but not out of reach: with
//! `ZPAGE_RUN_FILE_PAGES_EVERY_MS` (`zpage run --file-pages-every`, 500 ms
//! by default) the budget's reclaimer hands the process's read-only private
//! file mappings (its binary, its libraries) to the kernel's reclaim at that
//! interval (`zpage_region`'s module `file_pages`), so the pages the program
//! used once at start leave its resident memory, as a memory cgroup's
//! reclaim would take them.
//!
//! The budget (its threads and userfaultfd) starts with the first
//! placement: a process that never maps memory, such as most short-lived
//! children, has none of zpage's threads or descriptors.
//!
//! # What the program may do to arena memory
//!
//! | call | what happens |
//! |---|---|
//! | `munmap`, `free` | the range is emptied (its compressed pages freed) and reserved again |
//! | `mmap(MAP_FIXED)` of a regular file, private and writable, over arena addresses (the JVM's class-data archive over its reservation) | the file's bytes are copied into those addresses, arena memory like the rest (module `mm`, `copy_private_file`); read-only and executable mappings, ranges past the file's end and ranges over 64 MiB are handed over as below |
//! | `mmap(MAP_FIXED)` of a file or shared memory over arena addresses | the range is handed over: it leaves the userfaultfd and is the kernel's until unmapped |
//! | `mremap`, `realloc` | a new range with the written pages copied, the old one released; shrinking releases the tail |
//! | `madvise(MADV_DONTNEED/MADV_FREE)` | passed through (`MADV_FREE` as `MADV_DONTNEED`, which it allows): the region drops what it held (userfaultfd remove event); it reads as zeros |
//! | `madvise(MADV_POPULATE_*)` | the range is restored first (the kernel cannot fault an evicted page in) |
//! | `madvise(MADV_WIPEONFORK/MADV_KEEPONFORK/MADV_DONTFORK/MADV_DOFORK)` | passed to the kernel through the region layer, which records it: a forked child reads zeros in wiped pages and has no mapping of don't-fork ones, compressed or not, as without zpage. A call the kernel fails part way makes the regions it covers plain memory (they cannot know which of their pages it reached) |
//! | `sigaction(SIGBUS)`, `signal(SIGBUS)` | recorded as the action zpage chains foreign faults to; zpage's handler stays in front (module `sig`) |
//! | blocking SIGBUS | every other signal is blocked as asked, SIGBUS is not: a fault with SIGBUS blocked is fatal (module `sig`) |
//! | system calls naming arena memory | served, whoever makes them: see below |
//! | `fork()` | nothing is restored (the region layer's hooks): the child takes the arena over, restores the pages it touches from its copy-on-write copy of the pool, and holds at most one budget of pages it restored |
//! | `fork()` then `exec` | the new program loads the library again with a budget of its own |
//! | `vfork()`/`posix_spawn()` | no restore: the child runs in the parent's memory until `exec`, and a fault it takes is resolved as one of the parent's threads would (the region layer tells it from a `fork()` child with `kcmp`), or by the parent's reclaimer once the child closed its descriptors (spawn libraries do); its `exec` holds eviction off until the kernel has copied the path, `argv` and `envp` |
//!
//! A case the arena cannot follow never gives wrong bytes: a page that
//! cannot be restored ends the process with a message naming it.
//!
//! # System calls on evicted pages
//!
//! By default a seccomp filter traps every system call with an argument in
//! the far range, where the arena lies (`zpage_syscalls::trap`): the C
//! library's own calls (stdio's `write`, `accept` and `waitpid` filling
//! structures, glibc's `futex` on heap locks) are served like the
//! program's. `ZPAGE_RUN_SYSCALLS=wrappers` keeps only the C library
//! wrappers (module `io`), for programs that `exec` set-user-ID programs
//! (the filter needs `no_new_privs`).
//!
//! # The library's own code
//!
//! It runs inside the program's `malloc`, `mmap` and signal paths: its Rust
//! code allocates from a private heap (module `alloc`), its own calls to
//! interposed functions pass straight through (a thread-local flag; zpage's
//! threads likewise), and while it holds its lock asynchronous signals are
//! blocked.
#![allow(unsafe_code)]

mod alloc;
mod arena;
mod config;
mod env_names;
mod io;
mod loader;
mod locale;
mod malloc;
mod mm;
mod real;
mod report;
mod sig;
mod spawn;
mod stacks;
mod startup;
mod state;
mod stdio;
mod sys;

/// Runs [`startup::start`] when the library is loaded, before the
/// program's `main`, unless a library's constructor mapped memory first
/// (then it ran then).
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = startup::start;
