//! What a region is asked to be.
use crate::error::RegionError;
use zpage_codec::{CodecSpec, RejectThreshold, PAGE_SIZE};
use zpage_pool::PoolKind;

/// How faults on evicted pages are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FaultMode {
    /// Default. The faulting thread resolves its own fault in a SIGBUS handler
    /// (`UFFD_FEATURE_SIGBUS` on a `UFFD_USER_MODE_ONLY` uffd). Needs no
    /// privilege. System calls that read or write an evicted page fail with
    /// `EFAULT`: call [`crate::Region::prefault`] (or `pin`) on a buffer before
    /// handing it to the kernel.
    #[default]
    Sigbus,
    /// A handler thread reads the uffd and resolves faults; the faulting thread
    /// sleeps in the kernel meanwhile. Kernel-mode accesses (system calls,
    /// futexes) are resolved too, so region memory can go straight to system
    /// calls. Needs a uffd that traps kernel faults: `CAP_SYS_PTRACE`, or
    /// `vm.unprivileged_userfaultfd=1`, or read-write access to
    /// `/dev/userfaultfd`. Costs a cross-thread wakeup per fault (23-75 us here).
    HandlerThread,
}

/// How the reclaimer picks which resident pages to take out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AgingPolicy {
    /// Evict in the order pages became resident (the baseline).
    Fifo,
    /// zpage's policy: refault distance (as `mm/workingset.c`) activates pages
    /// that come back soon after eviction; trial eviction keeps evicted pages
    /// uncompressed in a staging area for a while, so a touch brings them back
    /// cheaply and marks them hot; active pages are protected from eviction.
    #[default]
    Refault,
}

/// Configuration of a [`crate::Region`].
#[derive(Clone, Debug)]
pub struct RegionConfig {
    /// Size of the region in bytes (rounded up to 4 KiB).
    pub size_bytes: usize,
    /// Bytes of uncompressed pages the region may keep resident (including
    /// pages held uncompressed in the staging area).
    pub budget_bytes: usize,
    /// Codec for evicted pages ("lz4" is the fastest to restore).
    pub codec: CodecSpec,
    /// Pages that do not compress below this are stored raw.
    pub threshold: RejectThreshold,
    /// Allocator for compressed blobs.
    pub pool: PoolKind,
    /// Cap on the compressed pool's memory (`None`: unlimited). At the cap,
    /// evictions are refused and pages stay resident (over budget if need be).
    pub max_pool_bytes: Option<u64>,
    /// Fault resolution mode.
    pub mode: FaultMode,
    /// Write tracking: restored pages are mapped write-protected (sync
    /// uffd-wp); the first write costs one more fault, and a page never
    /// written since its restore is evicted again without compressing (the
    /// store still holds it), as the kernel drops clean swap-cache pages.
    /// In `Sigbus` mode the kernel cannot write a protected page either:
    /// `prefault` lifts the protection.
    pub track_writes: bool,
    /// Aging policy.
    pub aging: AgingPolicy,
    /// The reclaimer starts when resident memory exceeds this percentage of the budget.
    pub high_watermark_pct: u8,
    /// ... and stops when it is back under this percentage.
    pub low_watermark_pct: u8,
    /// Percentage of the budget used as the trial-eviction staging area
    /// ([`AgingPolicy::Refault`] only; FIFO compresses at once).
    pub staging_pct: u8,
}

impl RegionConfig {
    /// A region of `size_bytes` that keeps at most `budget_bytes` resident, with
    /// LZ4, the size-class pool, the SIGBUS fault mode and zpage's aging policy.
    pub fn new(size_bytes: usize, budget_bytes: usize) -> Self {
        RegionConfig {
            size_bytes,
            budget_bytes,
            codec: CodecSpec::lz4(),
            threshold: RejectThreshold::default(),
            pool: PoolKind::SizeClass,
            max_pool_bytes: None,
            mode: FaultMode::Sigbus,
            track_writes: true,
            aging: AgingPolicy::Refault,
            high_watermark_pct: 97,
            low_watermark_pct: 93,
            staging_pct: 1,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RegionError> {
        let bad = |s: String| Err(RegionError::InvalidConfig(s));
        if self.size_bytes == 0 {
            return bad("size_bytes is 0: give the region a size".into());
        }
        if self.size_bytes > (1usize << 46) {
            return bad(format!(
                "size_bytes {} is larger than 64 TiB",
                self.size_bytes
            ));
        }
        if self.budget_bytes > self.size_bytes {
            return bad(format!(
                "budget_bytes ({}) is larger than size_bytes ({}): a budget above the size never evicts; lower it",
                self.budget_bytes, self.size_bytes
            ));
        }
        if self.budget_bytes < 64 * PAGE_SIZE {
            return bad(format!(
                "budget_bytes ({}) is below 64 pages (256 KiB): the reclaimer needs room to batch",
                self.budget_bytes
            ));
        }
        if !(self.low_watermark_pct < self.high_watermark_pct && self.high_watermark_pct <= 100) {
            return bad(format!(
                "watermarks low {}% / high {}%: need low < high <= 100",
                self.low_watermark_pct, self.high_watermark_pct
            ));
        }
        if self.staging_pct > 25 {
            return bad(format!(
                "staging_pct {} is above 25: the staging area counts against the budget",
                self.staging_pct
            ));
        }
        Ok(())
    }
}
