//! The zpage tier: the workload on a [`Region`] in this process.

use crate::report::BenchResult;
use crate::workload::{
    self, FileMapping, Memory, MemoryProbe, Observer, PhaseInputs, WorkloadSpec,
};
use crate::{BenchError, PAGE_SIZE};
use zpage_region::{AgingPolicy, CodecSpec, FaultMode, Region, RegionConfig};

/// How the zpage tier's region is configured.
#[derive(Clone, Debug)]
pub struct ZpageOptions {
    /// Aging policy (zpage's refault policy, or FIFO for comparison).
    pub aging: AgingPolicy,
    /// Fault mode.
    pub mode: FaultMode,
    /// Codec of evicted pages.
    pub codec: CodecSpec,
    /// Codec for cold pages: evictions of pages with no quick reuse (unless
    /// `cold_by_age_only`), and recompression of pages that have stayed
    /// compressed `cold_after` (`None`: off).
    pub cold_codec: Option<CodecSpec>,
    /// Every eviction takes `codec`; only recompression by age uses the cold
    /// codec (`BudgetConfig::cold_at_eviction` off).
    pub cold_by_age_only: bool,
    /// How long a page stays compressed before it is recompressed.
    pub cold_after: std::time::Duration,
    /// Keep restored pages' compressed copies while they stay unwritten.
    pub keep_clean_copies: bool,
    /// Store identical evicted pages once (`BudgetConfig::dedup`).
    pub dedup: bool,
    /// Cap on the compressed pool; with `backing`, the oldest compressed
    /// pages are written back to it as the pool nears the cap.
    pub pool_max_bytes: Option<u64>,
    /// Where pages are written back, checked (`zpage_store::Backing`): a
    /// new file or a block device (a packed, sealed tier bounded by
    /// [`backing_bound`] of the data size), or a Redis server or cluster (a
    /// sealed Redis tier, see `zpage_store::RedisTier`). A tier is made
    /// anew for each run (a file tier removes its file when the run ends).
    pub backing: Option<zpage_store::Backing>,
}

impl Default for ZpageOptions {
    fn default() -> Self {
        ZpageOptions {
            aging: AgingPolicy::Refault,
            mode: FaultMode::Sigbus,
            codec: CodecSpec::lz4(),
            cold_codec: None,
            cold_by_age_only: false,
            cold_after: std::time::Duration::from_secs(1),
            keep_clean_copies: false,
            dedup: false,
            pool_max_bytes: None,
            backing: None,
        }
    }
}

impl ZpageOptions {
    /// "zpage" for the default policy, "zpage-fifo" for FIFO aging.
    pub fn tier_name(&self) -> String {
        match self.aging {
            AgingPolicy::Refault => "zpage".into(),
            AgingPolicy::Fifo => "zpage-fifo".into(),
        }
    }
}

/// The bound on a file or device tier for `size_bytes` of data: room for
/// every page at its raw size, and the segment garbage collection keeps free.
pub fn backing_bound(size_bytes: u64) -> u64 {
    size_bytes + size_bytes / 8 + (8 << 20)
}

/// Probes a region: resident memory is the larger of the region's own count
/// (resident + staged pages) and an outside count (mincore over the region
/// plus the staged pages), so the budget check does not rest on self-reporting.
pub struct RegionProbe<'a> {
    /// The region.
    pub region: &'a Region,
    /// The region as benchmark memory.
    pub memory: Memory,
    /// swapdemo's library mapping, counted as resident too.
    pub library: Option<&'a FileMapping>,
}

impl std::fmt::Debug for RegionProbe<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionProbe")
            .field("memory", &self.memory)
            .finish()
    }
}

impl MemoryProbe for RegionProbe<'_> {
    fn resident_bytes(&self) -> u64 {
        let stats = self.region.stats();
        let outside = self.memory.resident_bytes().unwrap_or(0) + stats.staged_bytes;
        outside.max(stats.resident_bytes) + self.library.map_or(0, |l| l.resident_bytes())
    }
    /// The pool's memory (blobs and their fragmentation), as the kernel
    /// tiers report zram's `mem_used_total`.
    fn compressed_bytes(&self) -> u64 {
        let stats = self.region.stats();
        stats.pool_bytes
    }
    fn faults(&self) -> u64 {
        self.region.stats().fault_count
    }
    fn recompressed_pages(&self) -> u64 {
        self.region.stats().recompression_count
    }
    fn deduplicated_pages(&self) -> u64 {
        self.region.stats().dedup_hit_count
    }
    fn tier(&self) -> crate::workload::TierSample {
        let Some(tier) = self.region.budget().store_stats().tier else {
            return Default::default();
        };
        crate::workload::TierSample {
            backing_bytes: tier.backing_bytes,
            disk_bytes: tier.disk_bytes,
            live_payload_bytes: Some(tier.stored_bytes),
            disk_bytes_per_payload_byte: tier.disk_bytes_per_payload_byte(),
            gc_moved_bytes: tier.gc_moved_bytes,
            reads: tier.gets,
            read_ns: tier.get_ns,
            sealing: Some(zpage_store::SEALING),
        }
    }
}

/// Creates the region a workload runs on. For swapdemo the library's pages
/// share the budget (the kernel's cgroup charges both), so the region gets
/// the budget minus the library's size.
pub fn create_region(
    spec: &WorkloadSpec,
    budget_bytes: u64,
    library_bytes: u64,
    options: &ZpageOptions,
) -> Result<Region, BenchError> {
    let region_budget = budget_bytes.checked_sub(library_bytes).filter(|b| *b >= 64 * PAGE_SIZE as u64).ok_or_else(|| {
        BenchError::Invalid(format!(
            "the budget ({budget_bytes} bytes) must exceed swapdemo's library ({library_bytes} bytes) by at least 256 KiB"
        ))
    })?;
    let mut config = RegionConfig::new(spec.size_bytes as usize, region_budget as usize);
    config.aging = options.aging;
    config.mode = options.mode;
    config.codec = options.codec.clone();
    config.cold_codec = options.cold_codec.clone();
    config.cold_after = options.cold_after;
    config.cold_at_eviction = !options.cold_by_age_only;
    config.keep_clean_copies = options.keep_clean_copies;
    config.dedup = options.dedup;
    config.max_pool_bytes = options.pool_max_bytes;
    if let Some(backing) = &options.backing {
        let tier = backing
            .open()
            .map_err(|e| BenchError::Invalid(format!("--backing {}: {e}", backing.describe())))?;
        config.tier = Some(tier);
    }
    Region::new(config).map_err(|e| BenchError::Region(e.to_string()))
}

/// Runs `spec` on a fresh region with `budget_bytes` resident at most.
pub fn run_zpage_tier(
    spec: &WorkloadSpec,
    budget_bytes: u64,
    options: &ZpageOptions,
    observer: &mut dyn Observer,
) -> Result<Vec<BenchResult>, BenchError> {
    let inputs = PhaseInputs::open(&spec.kind)?;
    let region = create_region(spec, budget_bytes, inputs.library_bytes(), options)?;
    // SAFETY: the region is a page-aligned mapping of `len()` bytes, readable and
    // writable, alive until `region` drops at the end of this function, after
    // the last use of `memory`; we only touch it with volatile word accesses.
    let memory = unsafe { Memory::new(region.as_ptr(), region.len()) };
    let probe = RegionProbe {
        region: &region,
        memory,
        library: inputs.library.as_ref(),
    };
    let (fill, phases) = workload::execute(&memory, &inputs, spec, &probe, observer)?;
    let tier = options.tier_name();
    Ok(phases
        .iter()
        .map(|outcome| BenchResult::new(&tier, spec, budget_bytes, &fill, outcome))
        .collect())
}
