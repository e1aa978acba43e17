//! zpage-region: a memory region whose cold pages are compressed in user space.
//!
//! A [`Region`] is `size_bytes` of anonymous memory that the program reads and
//! writes directly, with a resident budget. Pages beyond the budget are taken
//! out of the region, compressed, and their memory released; the next access
//! restores them. Everything below is built on userfaultfd as it behaves on
//! Linux 6.18 (see `shared/notes/userfaultfd.md`).
//!
//! # Fault path
//!
//! The region is registered (MISSING mode) with a userfaultfd created with
//! `UFFD_USER_MODE_ONLY` and `UFFD_FEATURE_SIGBUS`: an access to an absent
//! page raises SIGBUS *in the faulting thread*, which resolves its own fault
//! (no cross-thread wakeup; those cost 20-75 us here). The handler (module
//! `signal`) finds the region in a fixed lock-free table, then follows the
//! page's atomic state word (module `state`):
//!
//! - never written (EMPTY): `UFFDIO_ZEROPAGE` (read) or `UFFDIO_COPY` of a
//!   zero page (write: one fault instead of two);
//! - STAGED (trial eviction, still uncompressed): `UFFDIO_MOVE` back from the
//!   staging area, no decompression;
//! - STORED: decompress into a preallocated per-slot buffer, `UFFDIO_COPY`.
//!
//! Owners of a page (reclaimer, a restoring thread) hold it by compare-and-swap
//! of its state; others yield and retry. `EEXIST` from a racing install means
//! the page is there. The handler allocates nothing and takes no lock: see
//! the argument at the top of `signal.rs`. It is installed with raw
//! `sigaction`, runs first, and chains every fault outside our regions to the
//! previous handler (SIG_DFL: reset and re-fault, so the process dies and
//! dumps core as it would have).
//!
//! [`FaultMode::HandlerThread`] registers a privileged uffd without the
//! SIGBUS feature; a thread reads fault messages and runs the same resolution.
//! Kernel-mode accesses (system calls) then work on evicted pages, at the cost
//! of a cross-thread wakeup per fault.
//!
//! | mode | privilege | kernel accesses to evicted pages | cost per fault here |
//! |---|---|---|---|
//! | `Sigbus` (default) | none | `EFAULT`: call `prefault`/`pin` first | ~3 us + decompression |
//! | `HandlerThread` | `CAP_SYS_PTRACE`, or `vm.unprivileged_userfaultfd=1`, or rw on `/dev/userfaultfd` | resolved | 23-75 us (cross-CPU wakeup) |
//!
//! # Reclaim and staging
//!
//! A background reclaimer keeps resident memory (resident pages plus staged
//! pages, both uncompressed) between watermarks: it starts above
//! `high_watermark_pct` of the budget and evicts down to `low_watermark_pct`.
//!
//! Clean pages (unwritten since their restore, so the store's entry is still
//! exact) are evicted by the faulting threads themselves: the reclaimer
//! queues them oldest first, and a fault at the high watermark MOVEs one out
//! and frees it before restoring its own page (`sync_evictions`; no
//! allocation, so it is allowed in the handler). Why: scattered pages cannot
//! be moved in one batch (a MOVE batches only runs of adjacent present
//! pages), so every eviction flushes the TLB of each CPU running the
//! process. From the reclaimer on the other CPU that is an interrupt of the
//! program's CPU per page (measured here: ~6 us of its time each, and ~10 us
//! for the reclaimer waiting for it); from the faulting thread the flush is
//! local while the reclaimer sleeps, and a read-mostly program needs the
//! reclaimer only to refill the queue.
//!
//! A fault that would go over the budget (the hard limit) with no clean page
//! to drop wakes the reclaimer and waits for room (bounded at 100 ms,
//! counted in `throttles`/`throttle_ns`). That is the only cross-thread wait
//! on the fault path, and it happens only at the limit.
//!
//! Eviction is `UFFDIO_MOVE` of the page into a staging area registered with
//! a second uffd (MOVE's destination must be registered; the second uffd has
//! no events, so freeing staging slots with `MADV_DONTNEED` raises none).
//! MOVE takes the physical page under both page-table locks, so a racing write
//! lands in the moved page and cannot be lost. After fork, MOVE fails with
//! `EBUSY` (the page is shared copy-on-write); the reclaimer then makes the
//! page exclusive with an atomic add of zero (a write of the value already
//! there) and retries.
//!
//! # Aging
//!
//! The kernel exposes no accessed bits here, so the policy works from what
//! user space sees: faults.
//!
//! - **Refault distance** (as `mm/workingset.c`): each eviction stamps the
//!   page with an eviction clock; a refault whose distance is under a
//!   threshold is *quick*. A quick refault activates a page that was active
//!   before or refaulted quickly last time too (a first quick refault only
//!   marks it: cold pages that come back soon by chance do not displace the
//!   hot set). Active pages are protected: victims come from the *inactive*
//!   queue (admission order) first.
//! - **A threshold that follows the active queues' fill**: the whole budget
//!   while they are empty (a new hot set is learnt within a few refaults per
//!   page, and a wrong activation displaces nothing), down to a quarter of
//!   it when they are full (a wrong activation then costs a hot page its
//!   place, so the evidence must be stronger).
//! - **Two active queues**: pages activated once, and pages activated again
//!   after a demotion. Demotions take the oldest page activated once first
//!   (a cold page activated by chance), a repeatedly activated one only when
//!   there is none, and that one spends an activation. Without access bits
//!   the active pages cannot be told apart otherwise, and every wrong
//!   demotion costs a hot page a fault.
//! - **Trial eviction**: evicted pages wait uncompressed in staging
//!   (`staging_pct` of the budget). A touch brings one back with a MOVE (no
//!   decompression) and counts as a quick refault.
//! - **Write tracking** (`track_writes`, sync uffd-wp in the same context as
//!   SIGBUS and MOVE): restored pages are mapped write-protected and the
//!   store keeps their entry; the first write costs a fault and marks the
//!   entry stale. A page unwritten since its restore is evicted again with
//!   no compression (`clean_evictions`), as the kernel drops clean
//!   swap-cache pages. (Sync rather than `WP_ASYNC`: the "clean" state must
//!   be exact at the moment of the MOVE, which a later PAGEMAP_SCAN cannot
//!   guarantee because MOVE drops the uffd-wp bit.)
//!
//! [`AgingPolicy::Fifo`] evicts in admission order and compresses at once.
//! `tests/aging.rs` runs the bench's 80/20 hot/cold pattern (hot set = 80% of
//! the budget, region = 4x budget, a quarter of touches write). Faulting
//! share after a warm-up, every fault counted: 0.23 (zpage) vs 0.61 (FIFO),
//! ratio 0.39, with write tracking (the default); 0.19 vs 0.41, ratio 0.45,
//! without it. The best any policy can do there is about 0.19 (every hot page
//! resident, the rest of the budget a random share of the cold pages).
//!
//! # Hazards
//!
//! | hazard | behaviour | test |
//! |---|---|---|
//! | `fork()` | atfork hook pauses eviction (lock-free) and restores every page before the fork: the child gets full contents; the parent re-takes exclusivity on `EBUSY` with a locked add of zero | `hazards::fork_child_sees_evicted_pages`, `hazards::fork_while_other_threads_fault_and_discard` |
//! | program `madvise(MADV_DONTNEED)` | `EVENT_REMOVE`: evicted copies dropped before any fault can restore them, and pages present at the event are marked so the reclaimer cannot carry their old contents past the zap (see `event.rs`); reads give zeros | `hazards::dontneed_reads_zeros`, `hazards::dontneed_races_with_faults` |
//! | `munmap` of a live region | `EVENT_UNMAP`: compressed data freed; API calls return `Unmapped`; `Drop` leaves the range alone | `hazards::munmap_frees_and_refuses` |
//! | `mremap` | refused: `EVENT_REMAP` marks the region unmapped; an evicted page touched at the new address kills the process with SIGBUS (never wrong bytes) | `hazards::mremap_is_refused` |
//! | uffd closed by the program | detected (`health_check`, event thread): `UffdLost` from every call; evicted pages read as zeros after the close: documented refusal, do not close fds you did not open | `hazards::closed_uffd_is_detected` |
//! | SIGBUS blocked in the faulting thread | the kernel kills the process (never wrong bytes); `prefault`/`pin` or `HandlerThread` mode for such threads | `hazards::blocked_sigbus_kills_not_corrupts` |
//! | THP | regions are `MADV_NOHUGEPAGE`; a program `MADV_HUGEPAGE` is still correct (MOVE splits) | `hazards::thp_is_avoided_and_safe` |
//! | core dumps / debuggers | evicted pages are holes (zeros in cores, `EIO` via `/proc/pid/mem`); `restore_all` (stops eviction, restores everything; async-signal-safe) before dumping | `hazards::evicted_pages_invisible_to_gup_until_restored` |
//! | syscalls on evicted pages (SIGBUS mode) | `EFAULT`, so `prefault`/`pin` first | `hazards::syscall_needs_prefault` |
//! | chaining | foreign SIGBUS reaches the previous handler | `hazards::foreign_sigbus_is_chained` |
//! | latency-sensitive ranges | `pin`/`unpin`: never evicted, touches never fault; at most half the budget | `hazards::pin_keeps_pages_resident` |
//!
//! # Unsafe code
//!
//! `unsafe` lives in `sys` (system calls, ioctls, the mappings), `signal`
//! (the handler, its table, chaining), `slots` (the preallocated workers)
//! and `fork` (registering the atfork hooks); every block has a `SAFETY`
//! comment. The rest of the crate is `deny(unsafe_code)`.
//!
//! # Not done
//!
//! - x86-64 only: the handler reads the page-fault error code (write vs
//!   protection fault) from the signal context, and the fork path uses a
//!   locked add; other architectures would treat every fault as a write.
//! - Eviction MOVEs one page per ioctl (victims are scattered); contiguous
//!   runs are not batched yet, so each eviction costs a TLB flush.
//! - `mprotect`ed (read-only) parts of a region cannot be MOVEd; they are
//!   skipped, not evicted by copy.
//! - `mremap` of a region is refused rather than followed.
//! - A program that closes the region's uffd reads zeros for evicted pages
//!   from then on (detected, not prevented).
//! - The hard-limit wait is bounded at 100 ms; past it a fault proceeds over
//!   the budget rather than stall (e.g. when most of the budget is pinned).
#![deny(unsafe_code)]

mod aging;
mod budget;
mod config;
mod core;
mod counters;
mod error;
mod event;
mod evict;
mod fault;
mod fork;
mod metrics;
mod page;
mod profile;
mod queues;
mod reclaim;
mod region;
mod signal;
mod sys;
mod table;
mod workers;

pub use budget::Budget;
pub use config::{AgingPolicy, BudgetConfig, FaultMode, RegionConfig, MAX_REGION_BYTES};
pub use counters::{LatencySummary, RegionStats, StatField, StatKind, LATENCY_BUCKETS};
pub use error::RegionError;
pub use metrics::{
    default_metrics_dir, publish_metrics, publish_metrics_to, render as render_metrics,
    sample_regions, RegionSample, METRICS_DIR_ENV,
};
#[cfg(feature = "fault-profile")]
pub use profile::{fault_profile, reset_fault_profile};
pub use profile::{Part as FaultPart, PARTS as FAULT_PARTS};
pub use region::Region;
pub use table::MAX_REGIONS;
pub use zpage_codec::{CodecSpec, RejectThreshold, PAGE_SIZE};
pub use zpage_pool::PoolKind;
