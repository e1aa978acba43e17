//! What a budget and a region are asked to be. Front ends set a budget's
//! fields through the option list (`options.rs`), which reads every value
//! the same way; this file holds the fields, their defaults and the checks
//! of the whole.
use crate::error::RegionError;
use crate::queues::MAX_REGION_PAGES;
use zpage_codec::{CodecSpec, RejectThreshold, PAGE_SIZE};
use zpage_pool::PoolKind;
use zpage_store::Tier;

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

impl FaultMode {
    /// Its name in options (`handler-thread` is read too, as flags write it).
    pub fn name(self) -> &'static str {
        match self {
            FaultMode::Sigbus => "sigbus",
            FaultMode::HandlerThread => "handler_thread",
        }
    }
}

impl std::fmt::Display for FaultMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FaultMode {
    type Err = RegionError;

    fn from_str(text: &str) -> Result<FaultMode, RegionError> {
        match text.trim().replace('-', "_").as_str() {
            "sigbus" => Ok(FaultMode::Sigbus),
            "handler_thread" => Ok(FaultMode::HandlerThread),
            _ => Err(RegionError::InvalidConfig(format!(
                "fault mode {text:?}: give sigbus (the default, no privilege) or handler_thread (system calls on evicted pages work; needs root, vm.unprivileged_userfaultfd=1 or access to /dev/userfaultfd)"
            ))),
        }
    }
}

/// How the reclaimer picks which resident pages to take out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AgingPolicy {
    /// Evict in the order pages became resident (the baseline).
    Fifo,
    /// zpage's policy (see the `aging` module): refault distance activates
    /// pages that come back soon after eviction; trial eviction keeps evicted
    /// pages uncompressed in a staging area for a while; active pages are
    /// protected from eviction.
    #[default]
    Refault,
}

impl AgingPolicy {
    /// Its name in options.
    pub fn name(self) -> &'static str {
        match self {
            AgingPolicy::Fifo => "fifo",
            AgingPolicy::Refault => "refault",
        }
    }
}

impl std::fmt::Display for AgingPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AgingPolicy {
    type Err = RegionError;

    fn from_str(text: &str) -> Result<AgingPolicy, RegionError> {
        match text.trim() {
            "fifo" => Ok(AgingPolicy::Fifo),
            "refault" => Ok(AgingPolicy::Refault),
            _ => Err(RegionError::InvalidConfig(format!(
                "aging {text:?}: give refault (the default) or fifo"
            ))),
        }
    }
}

/// Configuration of a [`crate::Budget`]: one resident budget, one compressed
/// pool, one reclaimer and one aging policy shared by every region drawing on it.
#[derive(Clone, Debug)]
pub struct BudgetConfig {
    /// Bytes of uncompressed pages the regions may keep resident together
    /// (including pages held uncompressed in the staging area).
    pub budget_bytes: usize,
    /// Codec for evicted pages ("lz4" is the fastest to restore).
    pub codec: CodecSpec,
    /// A stronger codec for cold pages (`None`: off, except under a memory
    /// max with no tier below RAM, see [`BudgetConfig::cold_codec_in_effect`]).
    /// Pages with no quick
    /// reuse in their history are compressed with it when evicted (see
    /// [`BudgetConfig::cold_at_eviction`]); and the reclaimer, when it has no
    /// eviction to do, recompresses the oldest compressed pages with it (cold
    /// recompression), keeping a result only when it takes a smaller 16-byte
    /// size class. `zstd-dict`
    /// without a dictionary trains one from the budget's own pages once
    /// [`COLD_DICTIONARY_SAMPLE_PAGES`](crate::COLD_DICTIONARY_SAMPLE_PAGES)
    /// have been compressed, and keeps it for the budget's life. Restores of
    /// recompressed pages decode with that codec in the fault handler
    /// (zstd restores cost a few microseconds more than LZ4's).
    pub cold_codec: Option<CodecSpec>,
    /// With a cold codec: evicted pages that showed no quick reuse (never
    /// refaulted, or refaulted only after more evictions than the aging
    /// policy's threshold, and never active) go straight to the cold codec,
    /// once its dictionary is trained, instead of being compressed twice.
    /// Pages with quick reuse keep the fast codec, so the faults that recur
    /// pay its decode. `false`: every eviction uses [`BudgetConfig::codec`],
    /// and only recompression by age moves pages to the cold codec (as
    /// zram's `recompress`).
    pub cold_at_eviction: bool,
    /// A page is recompressed only once it has been compressed this long.
    pub cold_after: std::time::Duration,
    /// At most this many pages recompressed per second (a burst of one
    /// second's worth), so recompression leaves the CPU to the program.
    pub cold_pages_per_sec: u32,
    /// Pages that do not compress below this are stored raw.
    pub threshold: RejectThreshold,
    /// Allocator for compressed blobs.
    pub pool: PoolKind,
    /// Cap on the compressed pool's memory (`None`: unlimited). With a
    /// [`BudgetConfig::tier`], the reclaimer writes the oldest compressed
    /// pages back to it as the pool nears the cap; without one (or with the
    /// tier full or down), evictions at the cap are refused and pages stay
    /// resident (over budget if need be).
    pub max_pool_bytes: Option<u64>,
    /// A limit on the whole process's resident memory (`None`: none): the
    /// pages of its regions and of the rest of it, the compressed pool and
    /// zpage's own memory, as `VmRSS` and a container's limit count them.
    /// The budget shrinks to what the rest of the process leaves under it
    /// (`memory_max.rs`), so as the pool grows resident pages make room;
    /// faults wait for eviction rather than pass it. With `budget_bytes`,
    /// both hold. With a tier, the pool's cap is three quarters of what the
    /// rest of the process leaves (or `max_pool_bytes`, if less), and the
    /// oldest compressed pages are written back as it nears it. What cannot
    /// be held (memory outside the regions alone over the limit, pages that
    /// cannot leave) is counted and reported.
    pub memory_max_bytes: Option<u64>,
    /// A budget that finds itself (module `auto_budget`): the stall target,
    /// in parts per million of wall time (10,000 is 1%); `budget_bytes` is
    /// then the most the budget may be.
    pub auto_stall_ppm: Option<u32>,
    /// Give the process's file pages back to the kernel this often
    /// (module `file_pages`): its read-only private file mappings (program,
    /// libraries, files mapped to read) handed to the kernel's reclaim with
    /// `MADV_PAGEOUT`, so what it no longer uses leaves its resident memory,
    /// as a memory cgroup's reclaim takes it. `None` (the default): file
    /// pages stay. `zpage run` sets it (`--file-pages-every`); a library in
    /// someone else's program leaves the program's file pages alone unless
    /// asked.
    pub file_pages_every: Option<std::time::Duration>,
    /// Record every fault's page, in order, to this new file (module
    /// `trace`), for `zpage bench --workload trace`; `None`: no record.
    pub fault_trace: Option<std::path::PathBuf>,
    /// A tier below RAM for the oldest compressed pages when the pool nears
    /// `max_pool_bytes` (`zpage_store::PackedTier` on a file or device,
    /// `zpage_store::MemoryTier`, `zpage_store::RedisTier`). A fault on a
    /// written-back page is served from the SIGBUS handler when the tier's
    /// reads are async-signal-safe (file, memory), and handed to a zpage
    /// thread that reads it when they are not (Redis).
    pub tier: Option<std::sync::Arc<dyn Tier>>,
    /// A tier named as front ends name it, opened when the budget starts
    /// (when `tier` is not set): a new file or a block device (a packed,
    /// sealed tier bounded by [`BudgetConfig::backing_max_bytes`]), or a
    /// Redis URL (`redis://`, `rediss://`, `redis+cluster://`), checked and
    /// opened by `zpage_store::Backing` as every front end's `--backing` is.
    pub backing: Option<String>,
    /// What goes with `backing`: the Redis password file and TLS files
    /// (paths only: a password is never an option's value, which `ps` or
    /// `/proc/PID/environ` may show), and what becomes of a tier file.
    pub backing_options: zpage_store::BackingOptions,
    /// The most a backing file or device may hold (`None`: the machine's memory).
    pub backing_max_bytes: Option<u64>,
    /// At most this many pages written back per second (a burst of one
    /// second's worth), so writeback does not flood the device.
    pub writeback_pages_per_sec: u32,
    /// Fault resolution mode.
    pub mode: FaultMode,
    /// Keep a restored page's compressed copy while the page stays unwritten:
    /// it is mapped write-protected (sync uffd-wp), its first write costs one
    /// more fault and gives the copy up, and an unwritten page is evicted
    /// again without compressing, as the kernel drops clean swap-cache
    /// pages. Saves compression CPU on read-mostly data; costs pool memory
    /// (the copies of resident pages, on top of what zram would hold). Off by
    /// default: a restore gives its copy up (zswap's exclusive loads), so the
    /// pool holds only what is evicted. In `Sigbus` mode the kernel cannot
    /// write a protected page either: `prefault` lifts the protection.
    pub keep_clean_copies: bool,
    /// Store identical evicted pages once (of every region of the budget):
    /// each compressed page is hashed, and a page whose bytes equal a stored
    /// blob's shares it (a reference count frees the blob with its last
    /// page). A write to a restored copy stays private to its region. Costs a
    /// hash per compression, a decode per hit to check the bytes, and a
    /// table entry per stored blob; off by default (then nothing is hashed).
    pub dedup: bool,
    /// Aging policy.
    pub aging: AgingPolicy,
    /// When the program is not faulting, the reclaimer starts when resident
    /// memory exceeds this percentage of the budget (while it faults, pages
    /// go out in bursts at the budget instead).
    pub high_watermark_pct: u8,
    /// ... and stops when it is back under this percentage.
    pub low_watermark_pct: u8,
    /// Percentage of the budget used as the trial-eviction staging area
    /// ([`AgingPolicy::Refault`] only; FIFO compresses at once).
    pub staging_pct: u8,
}

impl BudgetConfig {
    /// A budget of `budget_bytes` with LZ4, the size-class pool, the SIGBUS
    /// fault mode, exclusive loads and zpage's aging policy.
    pub fn new(budget_bytes: usize) -> Self {
        BudgetConfig {
            budget_bytes,
            codec: CodecSpec::lz4(),
            cold_codec: None,
            cold_at_eviction: true,
            cold_after: std::time::Duration::from_secs(1),
            cold_pages_per_sec: 65536,
            threshold: RejectThreshold::default(),
            pool: PoolKind::SizeClass,
            max_pool_bytes: None,
            memory_max_bytes: None,
            auto_stall_ppm: None,
            file_pages_every: None,
            fault_trace: None,
            tier: None,
            backing: None,
            backing_options: zpage_store::BackingOptions::default(),
            backing_max_bytes: None,
            writeback_pages_per_sec: 16384,
            mode: FaultMode::Sigbus,
            keep_clean_copies: false,
            dedup: false,
            aging: AgingPolicy::Refault,
            high_watermark_pct: 97,
            low_watermark_pct: 93,
            staging_pct: 1,
        }
    }

    /// Checks the configuration as a whole, as starting a budget does;
    /// front ends call it to refuse a setting before they start anything.
    /// The one place the smallest budget ([`MIN_BUDGET_BYTES`]) is checked.
    pub fn check(&self) -> Result<(), RegionError> {
        let bad = |s: String| Err(RegionError::InvalidConfig(s));
        if self.budget_bytes < MIN_BUDGET_BYTES {
            return bad(format!(
                "the budget ({} bytes) is below the smallest, {MIN_BUDGET_BYTES} bytes (64 pages, 256 KiB): the reclaimer needs room to batch; raise it",
                self.budget_bytes
            ));
        }
        if let Some(max) = self
            .memory_max_bytes
            .filter(|&max| max < MIN_MEMORY_MAX_BYTES)
        {
            return bad(format!(
                "memory_max ({max} bytes) is below the smallest, {MIN_MEMORY_MAX_BYTES} bytes (8 MiB): the least budget it leaves and the margin it keeps are 4 MiB each, and the process's own memory comes on top; raise it"
            ));
        }
        if let Some(ppm) = self.auto_stall_ppm.filter(|&ppm| ppm > 500_000) {
            return bad(format!(
                "auto_budget_stall_ppm {ppm} asks for a stall of more than half of wall time: give a target such as 10000 (1%)"
            ));
        }
        if self.codec.awaits_dictionary() {
            return bad(format!(
                "codec {} needs a dictionary before the first page is compressed, and none is given: use it as cold_codec (its dictionary is trained from the budget's own pages), or use zstd",
                self.codec
            ));
        }
        if !self.cold_at_eviction && self.cold_codec_in_effect().is_none() {
            return bad(
                "cold_by_age_only needs a cold_codec: give one (zstd-dict, zstd), or leave cold_by_age_only out".into(),
            );
        }
        if self.backing.is_some() && self.tier.is_some() {
            return bad("both backing and tier are set: give one tier below RAM".into());
        }
        if !(self.low_watermark_pct < self.high_watermark_pct && self.high_watermark_pct <= 100) {
            return bad(format!(
                "watermarks low {}% / high {}%: need low < high <= 100",
                self.low_watermark_pct, self.high_watermark_pct
            ));
        }
        if self.tier.is_some() || self.backing.is_some() {
            if self.max_pool_bytes.is_none() && self.memory_max_bytes.is_none() {
                return bad(
                    "a tier (backing) is set without max_pool_bytes (--pool-max) or memory_max_bytes (--memory-max): writeback starts as the pool nears its cap, or the share of the memory max the rest of the process leaves it, so give one".into(),
                );
            }
            if self.writeback_pages_per_sec == 0 {
                return bad("writeback_pages_per_sec is 0: give a positive rate".into());
            }
        }
        if self.cold_codec_in_effect().is_some() && self.cold_pages_per_sec == 0 {
            return bad(
                "cold_pages_per_sec is 0 with a cold_codec: give a positive rate, or no cold_codec"
                    .into(),
            );
        }
        if let Some(problem) = self
            .cold_codec
            .as_ref()
            .and_then(|cold| cold_codec_problem(&self.codec, cold))
        {
            return bad(format!("cold_codec {problem}"));
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

/// A budget's cold recompression settings, from its [`BudgetConfig`]
/// (`None` without a cold codec).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdConfig {
    /// Pages with no quick reuse go out with the cold codec.
    pub at_eviction: bool,
    pub after: std::time::Duration,
    pub pages_per_sec: u32,
}

impl ColdConfig {
    pub(crate) fn of(config: &BudgetConfig) -> Option<ColdConfig> {
        config.cold_codec_in_effect().map(|_| ColdConfig {
            at_eviction: config.cold_at_eviction,
            after: config.cold_after,
            pages_per_sec: config.cold_pages_per_sec,
        })
    }
}

/// Why `cold` cannot be the cold codec of a budget compressing with `codec`
/// (`None`: it can): it must be zstd or zstd with a dictionary, and not
/// `codec` itself. Front ends call it to refuse a setting before they start.
pub fn cold_codec_problem(codec: &CodecSpec, cold: &CodecSpec) -> Option<String> {
    use zpage_codec::CodecFamily;
    if !matches!(cold.family(), CodecFamily::Zstd | CodecFamily::ZstdDict) {
        return Some(format!(
            "{cold} is not stronger than {codec}: give zstd, zstd:LEVEL or zstd-dict, or none"
        ));
    }
    (cold == codec).then(|| {
        format!("{cold} is the codec itself: give a stronger one (zstd-dict, a higher zstd level) or none")
    })
}

/// Configuration of a [`crate::Region`] with a budget of its own. The budget's
/// fields are reached through it (`config.aging = ...`); to draw many regions
/// on one budget, make a [`crate::Budget`] and use [`crate::Region::with_budget`].
#[derive(Clone, Debug)]
pub struct RegionConfig {
    /// Size of the region in bytes (rounded up to 4 KiB).
    pub size_bytes: usize,
    /// The region's own budget.
    pub budget: BudgetConfig,
}

impl std::ops::Deref for RegionConfig {
    type Target = BudgetConfig;

    fn deref(&self) -> &BudgetConfig {
        &self.budget
    }
}

impl std::ops::DerefMut for RegionConfig {
    fn deref_mut(&mut self) -> &mut BudgetConfig {
        &mut self.budget
    }
}

/// Largest region: page indices must fit the reclaimer's records.
pub const MAX_REGION_BYTES: usize = MAX_REGION_PAGES * PAGE_SIZE;

impl RegionConfig {
    /// A region of `size_bytes` that keeps at most `budget_bytes` resident, with
    /// the defaults of [`BudgetConfig::new`].
    pub fn new(size_bytes: usize, budget_bytes: usize) -> Self {
        RegionConfig {
            size_bytes,
            budget: BudgetConfig::new(budget_bytes),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), RegionError> {
        validate_size(self.size_bytes)?;
        if self.budget.budget_bytes > self.size_bytes.next_multiple_of(PAGE_SIZE) {
            return Err(RegionError::InvalidConfig(format!(
                "budget_bytes ({}) is larger than size_bytes ({}): a budget above the size never evicts; lower it",
                self.budget.budget_bytes, self.size_bytes
            )));
        }
        self.budget.check()
    }
}

/// Checks a region's size.
pub(crate) fn validate_size(size_bytes: usize) -> Result<(), RegionError> {
    if size_bytes == 0 {
        return Err(RegionError::InvalidConfig(
            "size_bytes is 0: give the region a size".into(),
        ));
    }
    if size_bytes > MAX_REGION_BYTES {
        return Err(RegionError::InvalidConfig(format!(
            "size_bytes {size_bytes} is larger than {MAX_REGION_BYTES} (16 TiB): split it into several regions on one budget"
        )));
    }
    Ok(())
}

/// Smallest budget: 64 pages, room for the reclaimer to batch.
pub const MIN_BUDGET_BYTES: usize = 64 * PAGE_SIZE;

/// Smallest memory max: the least budget a memory max leaves (4 MiB) and
/// the least margin kept under the limit (4 MiB); the process's own memory
/// comes on top (checked when the budget starts).
pub const MIN_MEMORY_MAX_BYTES: u64 = 8 << 20;

impl BudgetConfig {
    /// The cold codec the budget uses: [`BudgetConfig::cold_codec`], or,
    /// when none is given, zstd (level 3) under a memory max with no tier
    /// below RAM and a codec weaker than zstd. There the pool must fit under
    /// the limit beside the pages it leaves resident, and nothing can leave
    /// it: with LZ4 alone, the suite's JVM, sqlite and sort passed half their
    /// plain peak by their pools (by 20, 1.1 and 20 MiB) and ran slower than
    /// with zstd for cold pages, which held all three (bench/programs/run.py
    /// --limit memory-max --fraction 0.5). With a tier, the oldest pages
    /// leave for it instead, at LZ4's speed.
    pub fn cold_codec_in_effect(&self) -> Option<CodecSpec> {
        use zpage_codec::CodecFamily;
        if self.cold_codec.is_some() {
            return self.cold_codec.clone();
        }
        let implied = self.memory_max_bytes.is_some()
            && self.backing.is_none()
            && self.tier.is_none()
            && !matches!(
                self.codec.family(),
                CodecFamily::Zstd | CodecFamily::ZstdDict
            );
        implied.then(CodecSpec::zstd)
    }

    /// The tier below RAM the budget writes back to: [`BudgetConfig::tier`],
    /// else [`BudgetConfig::backing`] opened now (when the budget starts).
    pub(crate) fn open_tier(&self) -> Result<Option<std::sync::Arc<dyn Tier>>, RegionError> {
        if let Some(tier) = &self.tier {
            return Ok(Some(std::sync::Arc::clone(tier)));
        }
        let Some(backing) = &self.backing else {
            return Ok(None);
        };
        let max_bytes = match self.backing_max_bytes {
            Some(bytes) => bytes,
            None => zpage_units::machine_memory_bytes().map_err(|why| {
                RegionError::InvalidConfig(format!(
                    "backing {}: its bound defaults to the machine's memory, which could not be read ({why}): give backing_max_bytes",
                    zpage_store::redact_url(backing)
                ))
            })?,
        };
        zpage_store::Backing::parse(backing, &self.backing_options, max_bytes)
            .and_then(|checked| checked.open())
            .map(Some)
            .map_err(|e| {
                RegionError::InvalidConfig(format!(
                    "backing {}: {e}",
                    zpage_store::redact_url(backing)
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_max_without_a_tier_implies_zstd_for_cold_pages() {
        let mut config = BudgetConfig::new(64 << 20);
        assert_eq!(config.cold_codec_in_effect(), None, "no memory max");
        config.memory_max_bytes = Some(256 << 20);
        let implied = config.cold_codec_in_effect().expect("implied");
        assert_eq!(implied.to_string(), "zstd");
        config.cold_codec = Some("zstd-dict:1".parse().unwrap());
        assert_eq!(
            config.cold_codec_in_effect(),
            config.cold_codec,
            "the one given"
        );
        config.cold_codec = None;
        config.backing = Some("/nonexistent/tier".into());
        assert_eq!(
            config.cold_codec_in_effect(),
            None,
            "a tier takes the oldest pages"
        );
        config.backing = None;
        config.codec = "zstd:1".parse().unwrap();
        assert_eq!(
            config.cold_codec_in_effect(),
            None,
            "the codec is zstd already"
        );
    }
}
