//! zpage-region: memory whose cold pages are compressed in user space.
//!
//! A [`Region`] is `size_bytes` of anonymous memory that the program reads and
//! writes directly. Regions draw on a [`Budget`]: one resident limit, one
//! compressed pool, one reclaimer and one aging policy, shared by every region
//! made on it ([`Region::with_budget`]); [`Region::new`] makes a region with a
//! budget of its own. Pages beyond the budget are taken out, compressed, and
//! their memory released; the next access restores them. Everything below is
//! built on userfaultfd as it behaves on Linux 6.18.
//!
//! # Layout of the crate
//!
//! | module | what it owns |
//! |---|---|
//! | `page` | a page's slot: its state word (tag, pins, flags, staging slot; layout checked by `const` asserts) and its compressed reference, side by side |
//! | `fault` | resolving one fault (async-signal-safe; the argument is at its top) |
//! | `evict` | taking pages out (`UFFDIO_MOVE` to staging, poison marker) and compressing them |
//! | `reclaim`, `reclaim/writeback` | the budget's reclaimer thread: watermarks, rounds, the victim queue; its writeback to a tier |
//! | `aging` | the whole aging policy: per-page history, refault distance, the queues |
//! | `budget` | the public [`Budget`] handle: starts and stops the budget's threads |
//! | `shared` | what the regions of one budget and its threads share: its parts below, and what needs several of them (the limit check, giving references up, waking the reclaimer) |
//! | `limits`, `staging`, `uffd` | the budget in pages (it may change while it runs) and the resident count; the staging area and its slot allocator; the userfaultfds |
//! | `file_pages` | the process's read-only private file mappings handed to the kernel's reclaim (`MADV_PAGEOUT`) at an interval, when the budget asks (`zpage run` does) |
//! | `memory_max` | the limit on the whole process's resident memory: the budget capped at what the rest of the process leaves |
//! | `auto_budget` | a budget that finds itself: lowered while the program's stall time stays under a target, raised when it passes it |
//! | `queues` | the lock-free rings between the fault path and the reclaimer, and the record naming a page in them |
//! | `reclaim/wake`, `reclaim/lock` | how the fault path and the reclaimer wake each other (kick, room, bursts); the reclaim lock |
//! | `evict/gate`, `event/gate`, `fork/state` | the eviction pause; the install/event protocol; the resolve gate of `fork()` and a forked child's own budget |
//! | `fork/advice` | the program's `MADV_WIPEONFORK`/`KEEPONFORK`/`DONTFORK`/`DOFORK`: passed to the kernel, recorded per page, followed by a forked child |
//! | `region_core` | one region's own data: mapping, page slots, counters, accounting |
//! | `table` | the process-wide region table the signal handler and the reclaimer look regions up in |
//! | `tier_reader` | the thread that reads pages back from a tier whose reads are not async-signal-safe (Redis), for the fault handler |
//! | `event` | the event thread: the program's discards, unmaps and remaps (and faults in handler-thread mode) |
//! | `signal`, `fork`, `fork/child` | the SIGBUS handler and its chaining; the fork hooks; a forked child's side of the fault path |
//! | `counters` | the one list of figures (`region_stat_fields!`): `RegionStats`, the C struct and the metrics come from it |
//! | `metrics` | publishing a process's figures for `zpage exporter` |
//! | `profile` | the `fault-profile` feature's timing of each part of a fault |
//! | `trace` | the record of every fault's page, in order (`BudgetConfig::fault_trace`), that `zpage bench --workload trace` replays |
//! | `range`, `run_report` | address ranges in any region (for front ends that see only pointers); the per-process report `zpage run` reads |
//! | `sys`, `sys/uffd` | every system call, each a thin wrapper; the userfaultfd ones |
//! | `mapping`, `threads`, `fatal` | the memory zpage maps for itself; zpage's own threads and the signal masks; the allocation-free message that ends the process |
//! | `far` | the far address range regions take their addresses from, and its system-call trampoline |
//! | `tests` (and `reclaim/hook`) | tests that need several modules from inside, some run on the reclaimer thread |
//! | `uffd_abi` | the userfaultfd ABI: ioctl numbers, bits and argument layouts (sizes checked against their request numbers); public, for benches and tools |
//!
//! # One index per page
//!
//! Each page's slot holds its state word and, beside it, its compressed
//! reference ([`zpage_store::PageRef`]: pool shard, handle and codec, or a
//! same-filled word, in one `u64`), as Zircon keeps a page's `CompressedRef` in
//! the page's own slot. The store underneath is an object store (store a page,
//! get a reference; load by reference; free): there is no second index that
//! must agree with the first, and a load takes no table lock, only the read
//! lock of the pool shard that holds the blob, for the time it takes to copy
//! the blob out.
//!
//! # Fault path
//!
//! Regions are registered with a userfaultfd created with
//! `UFFD_USER_MODE_ONLY` and `UFFD_FEATURE_SIGBUS`: an access to an absent
//! page raises SIGBUS *in the faulting thread*, which resolves its own fault
//! (no cross-thread wakeup, which costs more than the rest of a fault: the
//! README's figures). The handler (module
//! `signal`) finds the region in a fixed lock-free table and follows the page's
//! state word:
//!
//! - never written (EMPTY): `UFFDIO_ZEROPAGE` (read) or `UFFDIO_COPY` of a
//!   zero page (write: one fault instead of two), over the EMPTY pages
//!   around it in its aligned 64 KiB window too, in the same ioctl, while
//!   the budget is below its low watermark (fault-around, as the kernel's
//!   for file pages: a growing heap faults once per 16 pages; a signal
//!   round trip per page cost 4x the kernel's own first touch);
//! - STAGED (evicted, still uncompressed): `UFFDIO_COPY` from its staging slot,
//!   no decompression (and no TLB flush, which moving it back would cost);
//! - STORED: decompress into a preallocated buffer and `UFFDIO_COPY` it. A
//!   read restores it write-protected when clean copies are kept (see below),
//!   a write restores it writable at once.
//!
//! Owners of a page hold it by compare-and-swap of its state; others yield and
//! retry. The handler allocates nothing and takes no lock that a thread it
//! could be interrupting might hold: see the argument at the top of `fault.rs`.
//! zpage's own threads block every asynchronous signal, and API calls that
//! hold a page or a store lock block them for that span, so a program's signal
//! handler (a timer, `SIGCHLD`, a runtime's thread-suspension signal) may
//! read region memory. The handler is installed with raw `sigaction`, runs
//! first, and chains every fault outside zpage's regions to the previous
//! handler.
//!
//! [`FaultMode::HandlerThread`] registers a privileged uffd without the
//! SIGBUS feature; the event thread reads fault messages and runs the same
//! resolution. Kernel-mode accesses (system calls) then work on evicted pages,
//! at the cost of a cross-thread wakeup per fault.
//!
//! | mode | privilege | kernel accesses to evicted pages | a fault costs |
//! |---|---|---|---|
//! | `Sigbus` (default) | none | `EFAULT`: call `prefault`/`pin` first | its own resolution, in the faulting thread |
//! | `HandlerThread` | `CAP_SYS_PTRACE`, or `vm.unprivileged_userfaultfd=1`, or rw on `/dev/userfaultfd` | resolved | a cross-CPU wakeup each way on top (the README's "Fault modes" table measures both) |
//!
//! # Reclaim and staging
//!
//! The budget's reclaimer keeps resident memory (every region's mapped pages
//! plus the staging area) within the budget. While the program faults it
//! takes pages out in bursts, while the faults wait (their CPUs then need no
//! TLB-flush interrupt: module `reclaim`); when the program is idle above
//! `high_watermark_pct` of the budget, it evicts down to `low_watermark_pct`.
//! Eviction is `UFFDIO_MOVE` of the page into a staging slot (MOVE's
//! destination must be registered: the staging area has a uffd of its own,
//! with no events). MOVE takes the physical page under both page-table locks,
//! so a racing write lands in the moved page and cannot be lost. The region's
//! now empty entry then gets a poison marker (`UFFDIO_POISON`): an evicted
//! page faults even after the program closes the uffd (an unregistered empty
//! entry would read as zeros), and the process ends with a message naming the
//! page instead. Staged pages are compressed from their slot; slots are freed
//! with `MADV_DONTNEED` in batches of adjacent slots (one TLB flush each).
//!
//! A fault that would go over the budget, or over the pages a region may
//! keep mapped (the budget less the trial set and one burst), first gives
//! back the staging slots waiting to be discarded, then waits for the
//! reclaimer (bounded at 100 ms, counted in `throttle_count`/`throttle_ns`),
//! as does a fault during a burst. That is the only cross-thread wait on the
//! fault path: once per burst of up to 256 pages, and at the limit.
//!
//! After fork, MOVE fails with `EBUSY` (the page is shared copy-on-write);
//! `MADV_POPULATE_WRITE` makes it exclusive again from the kernel side, so
//! zpage's threads need not write the page themselves. (They never read or
//! write region memory in their own code; which threads may still fault on
//! it while holding zpage's state, and what keeps such a fault from waiting
//! on its own thread, is argued at the top of `fault.rs`.)
//!
//! # Clean copies (zswap's exclusive loads)
//!
//! By default a restore gives the page's compressed copy up (the reclaimer
//! frees it), so the pool holds only evicted pages, as zram and zswap do.
//! [`BudgetConfig::keep_clean_copies`] keeps it while the page stays
//! unwritten instead: the page is mapped write-protected (sync uffd-wp in the
//! same context as SIGBUS and MOVE), its first write costs a fault and gives
//! the copy up, and an unwritten page is evicted again without compressing,
//! as the kernel drops clean swap-cache pages. That saves compression CPU on
//! read-mostly data at the cost of pool memory (the copies of resident pages).
//! With it, faulting threads drop clean pages themselves at the high
//! watermark (one page in, one out, no compression), from a queue of clean
//! victims the reclaimer keeps full.
//!
//! # Below RAM: writeback to a tier
//!
//! A budget with a pool cap ([`BudgetConfig::max_pool_bytes`]) and a tier
//! ([`BudgetConfig::tier`]: a packed, encrypted file or device, memory, or
//! Redis)
//! does not keep pages resident over budget when the pool fills: as the pool
//! passes 90% of its cap, the reclaimer writes the oldest compressed pages
//! (in the order it compressed them) back to the tier until the pool is
//! under 80%, at most [`BudgetConfig::writeback_pages_per_sec`]. A
//! written-back page stays STORED; its reference (bit 56 of the
//! [`zpage_store::PageRef`]) names the tier copy, bound by its seal to the
//! page's identity (region and page index) and version.
//!
//! A fault on such a page is served where every fault is, in the SIGBUS
//! handler, not handed to a thread: the tier's read is one `pread` into the
//! worker's preallocated buffer, the seal is opened in place, and the blob
//! is decoded as a pool blob would be. That keeps the fault path's argument
//! (no allocation, only async-signal-safe calls, no lock a thread it
//! interrupts could hold: the tier's locks are spun on and taken for
//! writing only by zpage's threads and API calls, which block asynchronous
//! signals) and costs no cross-thread wakeup. Its limit: a local device
//! that hangs holds the faulting thread, as the kernel's swap-in would.
//!
//! A tier whose reads are not async-signal-safe (Redis: its client
//! allocates, locks and waits on the network) is read by the budget's tier
//! reader thread instead (module `tier_reader`): the handler fills a
//! preallocated request slot (reference, page identity, the worker's
//! buffer), wakes the reader with a futex and sleeps on the slot's futex
//! word until the reader has done the `get` (read and seal check) into that
//! buffer; then it decodes and installs as for any page. The handler's side
//! allocates nothing and makes only futex calls; the wait is bounded by the
//! tier's own timeouts, and a page the tier lost (node down, value gone)
//! ends the process naming it, as below. One reader thread serves every
//! faulting thread of the budget. A tier
//! that is full or down makes writeback stop (pages stay compressed in RAM;
//! at the cap evictions are refused as without a tier); a page the tier
//! cannot give back (an I/O error, a truncated or modified file) ends the
//! process with a message naming the page, the tier and the cause.
//!
//! # Cold pages and recompression
//!
//! A budget with a cold codec ([`BudgetConfig::cold_codec`]: zstd, or
//! zstd with a dictionary; under a memory max with no tier below RAM, zstd
//! when none is given, [`BudgetConfig::cold_codec_in_effect`]) uses it two
//! ways.
//!
//! - **At eviction** ([`BudgetConfig::cold_at_eviction`], on by default):
//!   the aging policy decides which codec a page's copy takes. A page with
//!   no quick reuse in its history (never refaulted, or refaulted only after
//!   more evictions than the policy's threshold, and never active) is
//!   expected to stay compressed long: it goes straight to the cold codec,
//!   compressed once. A page that came back quickly keeps the fast codec, so
//!   the faults that recur pay the fast decode (`aging::wants_cold_codec`).
//! - **By age**: pages that have stayed compressed
//!   [`BudgetConfig::cold_after`] with the fast codec are recompressed,
//!   oldest first (the order the reclaimer compressed them in), at most
//!   [`BudgetConfig::cold_pages_per_sec`]; a result is kept only when it
//!   takes a smaller 16-byte size class (zram's `recompress` rule). The
//!   reclaimer does this only when it has no eviction to do.
//!
//! Each page is held (COMPRESSING) while its reference
//! is replaced, as in writeback: a fault on that page waits for one
//! recompression, a page restored meanwhile is no longer STORED and is left
//! alone, and the old blob is freed only after the new reference is in
//! place. `zstd-dict` without a dictionary trains one (32 KiB) on a thread
//! of its own from up to 4096 of the budget's oldest compressed pages, once
//! [`COLD_DICTIONARY_SAMPLE_PAGES`] have been compressed (until then every
//! page takes the fast codec). The store digests
//! it once and publishes it before any blob refers to it; the fault
//! handler's preallocated decoders take it per call (zstd's
//! `decompress_usingDDict`, no allocation), and it never changes while the
//! budget lives. [`Region::recompress_now`] recompresses a range on the
//! calling thread.
//!
//! # Aging
//!//! # Aging
//!
//! The kernel exposes no accessed bits here, so the policy works from faults:
//! refault distance (as `mm/workingset.c`) with a threshold that follows the
//! active queues' fill, two active queues, and trial eviction through the
//! staging area. The policy lives in one module, `aging.rs`, whose
//! documentation describes it. [`AgingPolicy::Fifo`] evicts in admission
//! order and compresses at once.
//!
//! # Hazards
//!
//! | hazard | behaviour | test |
//! |---|---|---|
//! | `fork()` | nothing is restored: the prepare hook pauses eviction, lets restores in flight finish and holds the reclaimer and the pool's writes for the instant of the fork; the child takes the budget over (fresh userfaultfds, its own event thread), restores from its copy-on-write copy of the pool, frees nothing, and drops clean pages it restored to stay within one budget (module `fork`). Budgets in handler-thread mode or with a tier restore every page first, as before. A `vfork()` child (same memory until `exec`) resolves its faults as a thread of the parent (`kcmp(KCMP_VM)`), or, once it closed its descriptors, through the parent's reclaimer (`fork::vfork`); its `exec` holds eviction off until the kernel has its strings | `fork_hazards::fork_child_sees_evicted_pages`, `fork_hazards::forked_child_restores_its_own_pages_within_a_budget`, `fork_hazards::fork_while_other_threads_fault_and_discard`, `stress::stress_shared_budget_with_timer_signals_and_forks` |
//! | `MADV_WIPEONFORK`, `MADV_DONTFORK` (and `MADV_KEEPONFORK`, `MADV_DOFORK` undoing them) on region memory, through [`advise_fork`] | passed to the kernel and recorded per page, with no fork between the two; a forked child empties those pages in its books (compressed, staged or resident in the parent): zeros where the kernel wipes, and `MADV_DONTFORK` ranges left out of its registration (an access is the kernel's SIGSEGV) | `fork_hazards::fork_advice_is_followed_for_compressed_pages` |
//! | a program signal handler reading region memory | works on every thread: zpage's threads block asynchronous signals; API calls block them while they hold a page or a store lock | `signals::a_timer_signal_handler_reads_region_memory`, `examples/c/signal_handler.c` |
//! | program `madvise(MADV_DONTNEED)` | `EVENT_REMOVE`: evicted copies dropped before any fault can restore them, pages present at the event marked so no eviction carries their old contents past the zap; reads give zeros | `hazards::dontneed_reads_zeros`, `hazards::dontneed_races_with_faults` |
//! | program `madvise(MADV_FREE)` | the same `EVENT_REMOVE`, but the kernel zaps nothing and a write after it keeps its bytes without a fault: a marked page still mapped once no remove event was read for a second loses its mark and is evicted with its contents (until then it stays) | `hazards::madv_free_then_written_keeps_the_new_contents` |
//! | a MOVE racing with a write to the zero page (a page a read fault restored as the zero page, then written) | Linux 6.18 answers `EEXIST` although it moved the page: the eviction looks where the page is (`mincore`) and takes it as moved; a MOVE that finds no page the program neither discarded nor unmapped ends the process naming the page, never zeros | `sys::tests::move_page_reports_a_move_the_kernel_answers_with_eexist`, `hazards::fresh_pages_read_then_written_keep_their_writes` |
//! | `munmap` of a live region | `EVENT_UNMAP`: compressed data freed; API calls return `Unmapped`; `Drop` leaves the range alone | `hazards::munmap_frees_and_refuses` |
//! | `mremap` | refused: `EVENT_REMAP` marks the region unmapped; an evicted page touched at the new address kills the process with SIGBUS (never wrong bytes) | `hazards::mremap_is_refused` |
//! | uffd closed by the program | detected (`health_check`, the event thread): `UffdLost` from every call; an evicted page touched afterwards ends the process with a message (its poison marker faults), never reads zeros | `hazards::closed_uffd_is_detected`, `hazards::closed_uffd_never_reads_zeros` |
//! | a corrupt compressed blob | the process ends with a message naming the page and the codec; nothing is allocated on the way | `signals::a_corrupt_blob_ends_the_process_naming_the_page`; the fuzz target `load_in_handler` (corrupt blobs through the handler's load) |
//! | a written-back page the tier cannot give back (truncated, modified, I/O error, a Redis node down) | the process ends with a message naming the page, the tier and the cause, never zeros; tier reads allocate nothing in the faulting thread | `tier::a_page_the_tier_cannot_give_back_ends_the_process_naming_it`, `tier_redis::a_dead_redis_server_ends_the_process_naming_the_page`; the store's `no_alloc::tier_reads_neither_allocate_nor_free`; `tier_redis::faults_read_pages_back_from_redis_through_the_reader_thread_without_allocating` |
//! | the tier full or failing at writeback | pages stay compressed in RAM; the tier says so once and is retried | `tier::a_pool_cap_writes_back_to_a_packed_tier_and_every_page_reads_back` (the region side); the tier crate's failure tests |
//! | SIGBUS blocked in the faulting thread | the kernel kills the process (never wrong bytes); `prefault`/`pin` or `HandlerThread` mode for such threads | `hazards::blocked_sigbus_kills_not_corrupts` |
//! | THP | regions are `MADV_NOHUGEPAGE`; a program `MADV_HUGEPAGE` is still correct (MOVE splits) | `hazards::thp_is_avoided_and_safe` |
//! | core dumps / debuggers | evicted pages are holes (`EIO` via `/proc/pid/mem`); `restore_all` (async-signal-safe) before dumping | `hazards::evicted_pages_invisible_to_gup_until_restored` |
//! | syscalls on evicted pages (SIGBUS mode) | `EFAULT`, so `prefault`/`pin` first | `hazards::syscall_needs_prefault` |
//! | chaining | foreign SIGBUS reaches the previous handler | `hazards::foreign_sigbus_is_chained` |
//! | latency-sensitive ranges | `pin`/`unpin`: never evicted; at most half the budget | `hazards::pin_keeps_pages_resident` |
//!
//! # Where a fault's time goes
//!
//! Three benches measure the fault path: `cargo bench -p zpage-region
//! --bench fault_cost --features fault-profile` times a fault part by part
//! (the `fault-profile` feature reads the TSC around each part, module
//! `profile`; without it the timers compile to nothing), `--bench
//! move_cost` what one eviction's TLB flush costs, and `--bench
//! fault_floor` the least any user-space fault costs on the machine. Their
//! figures, and the choices they led to (pages evicted in bursts while the
//! faults wait, staging slots discarded in batches, faulting threads that
//! do not compress), are in the crate's README ("Where a fault's time
//! goes"), with the machine they were measured on: figures go stale as the
//! code changes, so they live beside the benches, not in this design.
//!
//! # Unsafe code
//!
//! `unsafe` lives in `sys` and `sys/uffd` (system calls and ioctls),
//! `mapping` (zpage's own mappings), `threads` (signal masks), `fatal` (the
//! message written before `abort`), `far` (the trampoline's code page and
//! calls through it), `page::SlotArray` (page slots in a mapping of their own),
//! `signal` (the handler, chaining), `table` (the region
//! table's pointers), `workers` (the preallocated decompression workers),
//! `tier_reader` (the request slots handed to the tier reader thread),
//! `trace` (the fault record's shared file mapping) and
//! `fork` (registering the atfork hooks), and in the tests (`sys/tests`,
//! `tests`); every block has a `SAFETY` comment. The rest of the crate is
//! `deny(unsafe_code)`.
//!
//! # Not done
//!
//! - x86-64 only: the handler reads the page-fault error code (write vs
//!   protection fault) from the signal context; elsewhere every fault is
//!   treated as a write to a protected page.
//! - Eviction moves one page per ioctl (victims are scattered): each costs a
//!   TLB flush. Bursts made while faults wait keep that local for a single
//!   faulting thread; with two program threads on two CPUs, the thread that
//!   is not waiting still takes an interrupt per page (what one costs: the
//!   README's "Where a fault's time goes"), which is why two threads stay
//!   below the kernel's rate.
//! - Faulting threads never compress: one reclaimer per budget does all of
//!   it, and with one program thread it is the bound. Faulting threads
//!   compressing while they wait, as the kernel's direct reclaim does, would
//!   balance the two CPUs (by how much, and where any user-space fault's
//!   floor lies: the README's "Where a fault's time goes"). Compressing on
//!   the fault path needs the store's `put` made async-signal-safe.
//! - `mprotect`ed (read-only) parts of a region cannot be moved out; they are
//!   skipped, not evicted by copy.
//! - `mremap` of a region is refused rather than followed.
//! - In `HandlerThread` mode evicted pages carry no poison marker (it would
//!   fail the kernel accesses that mode exists to serve): a program that
//!   closes the uffd there reads zeros for evicted pages.
//! - The hard-limit wait is bounded at 100 ms; past it a fault proceeds over
//!   the budget rather than stall (e.g. when most of the budget is pinned).
//! - Writeback candidates are the pages the reclaimer compressed; pages
//!   compressed by `advise_cold` are not written back. A written-back page
//!   is read back on every fault (exclusive loads free its tier copy).
//! - A cold codec costs CPU on both sides: zstd with a dictionary
//!   compresses and decodes a page more slowly than LZ4. When the program
//!   faults pages back as fast as the reclaimer can evict them, the
//!   reclaimer's compression is what limits the rate (figures in the
//!   README's "Cold pages" section).
//! - One tier reader thread per budget serializes the reads of a network
//!   tier: concurrent faults on pages in Redis wait one round trip each.
#![deny(unsafe_code)]

mod aging;
mod auto_budget;
mod budget;
mod cold;
mod config;
mod counters;
mod dedup;
mod error;
mod event;
mod evict;
pub mod far;
mod fatal;
mod fault;
mod file_pages;
mod foreign;
mod fork;
mod limits;
mod mapping;
mod memory_max;
mod metrics;
mod options;
mod page;
mod profile;
mod queues;
mod range;
mod reclaim;
mod region;
mod region_core;
pub mod run_report;
mod shared;
mod signal;
mod staging;
mod sys;
mod table;
#[cfg(test)]
mod tests;
mod threads;
mod tier_reader;
mod trace;
mod uffd;
pub mod uffd_abi;
mod workers;

pub use auto_budget::{
    auto_budget_most_bytes, parse_auto_budget, AutoBudgetStatus, AUTO_BUDGET_MOST,
    AUTO_BUDGET_OPTION, DEFAULT_STALL_PPM,
};
pub use budget::Budget;
pub use cold::COLD_DICTIONARY_SAMPLE_PAGES;
pub use config::{
    cold_codec_problem, AgingPolicy, BudgetConfig, FaultMode, RegionConfig, MAX_REGION_BYTES,
    MIN_BUDGET_BYTES, MIN_MEMORY_MAX_BYTES,
};
pub use counters::{LatencySummary, RegionStats, StatField, StatKind, LATENCY_BUCKETS};
pub use error::RegionError;
pub use fatal::Fatal;
pub use file_pages::{file_page_figures, give_back_file_pages, FilePageFigures, PassFigures};
pub use fork::advice::{advise_fork, ForkAdviceFailed};
pub use fork::marks::ForkAdvice;
pub use memory_max::MemoryMaxStatus;
pub use metrics::{
    default_metrics_dir, publish_metrics, publish_metrics_to, remove_published_if_gone,
    render as render_metrics, sample_regions, RegionSample, METRICS_DIR_ENV,
};
pub use options::{
    BudgetOption, BudgetOptions, OptionEnum, OptionError, OptionValue, Spelling, BUDGET_OPTIONS,
};
#[cfg(feature = "fault-profile")]
pub use profile::{fault_profile, reset_fault_profile};
pub use profile::{Part as FaultPart, PARTS as FAULT_PARTS};
pub use range::{
    hold_evictions_for_exec, pin_range, pin_range_over_budget, prefault_range, unpin_range,
    ExecHold,
};
pub use region::Region;
pub use signal::{
    chain_to as chain_sigbus_to, chained as chained_sigbus, installed as sigbus_handler_installed,
    is_sigbus_handler, sigbus_chain, Chain as SignalChain,
};
pub use table::overlaps_any_region;
pub use table::MAX_REGIONS;
/// For front ends that run zpage code inside the program (the preload
/// library): the same signal discipline as the region's own threads.
pub use threads::{on_zpage_thread, spawn_blocking_signals, SignalGuard, ZpageThread};
pub use trace::FaultTrace;
pub use zpage_codec::{CodecSpec, RejectThreshold, PAGE_SIZE};
pub use zpage_pool::PoolKind;
pub use zpage_store::{BackingOptions, RedisConfig, TierFile};
