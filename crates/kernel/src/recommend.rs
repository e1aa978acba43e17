//! `zpage kernel recommend`: samples the anonymous memory of the running
//! system, compresses it with zpage's codec, and proposes an algorithm, a
//! zram size, swappiness and page-cluster, with the expected saving.
//!
//! The memory figures come in as an [`Observation`]: the CLI makes it from
//! `zpage analyze`'s whole-machine scan (zpage-analyze depends on this
//! crate, so this crate cannot call it); [`observe_sample`] is a built-in,
//! bounded sampler on `zpage-codec` (present pages of private anonymous
//! mappings, read through `/proc/PID/pagemap` and `/proc/PID/mem`).

use std::fs::File;
use std::os::unix::fs::FileExt;

use serde::{Deserialize, Serialize};
use zpage_codec::{CodecSpec, Encoded, Encoder, RejectThreshold, PAGE_SIZE};

use crate::{procfs, KernelError, Result};

/// Sampling limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleLimits {
    /// Pages sampled in total at most.
    pub max_pages: usize,
    /// Pages per process at most (so one big process does not dominate).
    pub max_pages_per_process: usize,
}

impl Default for SampleLimits {
    fn default() -> Self {
        SampleLimits {
            max_pages: 32_768,
            max_pages_per_process: 4_096,
        }
    }
}

/// How one codec did on the observed memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodecResult {
    /// zpage codec used ("lz4", "zstd").
    pub codec: String,
    /// The kernel algorithm it stands for.
    pub kernel_algorithm: String,
    /// Pages that were one repeated word (zram stores them without RAM).
    pub same_filled_pages: u64,
    /// Pages at or above zsmalloc's huge class (stored raw by zram), when counted.
    pub incompressible_pages: Option<u64>,
    /// Estimated RAM zram would use for the memory observed (bytes).
    pub estimated_memory_bytes: u64,
    /// Observed bytes / estimated RAM.
    pub ratio: f64,
    /// Compression speed on this machine (MiB/s of input), when measured.
    pub compress_mib_per_s: Option<f64>,
}

/// What is known about the memory to compress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// Where the figures come from ("zpage analyze machine scan", "built-in sample").
    pub source: String,
    /// Bytes of anonymous memory observed.
    pub observed_bytes: u64,
    /// Processes read.
    pub processes: u64,
    /// Processes skipped (no permission, gone).
    pub skipped_processes: u64,
    /// Results per codec; the first is lz4.
    pub codecs: Vec<CodecResult>,
}

/// The proposal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// The memory figures it is based on.
    pub observation: Observation,
    /// Proposed zram algorithm (one the kernel offers).
    pub algorithm: String,
    /// Why that one.
    pub algorithm_reason: String,
    /// Proposed disksize (bytes of uncompressed data).
    pub zram_size_bytes: u64,
    /// Proposed swappiness.
    pub swappiness: u8,
    /// How swappiness was obtained.
    pub swappiness_reason: String,
    /// Proposed page-cluster (0 for zram: no read-ahead of neighbours).
    pub page_cluster: u8,
    /// RAM (bytes) freed if the zram device fills up: disksize - disksize/ratio.
    pub saving_when_full_bytes: u64,
    /// RAM (bytes) freed if today's anonymous memory (AnonPages) went to zram.
    pub saving_on_current_anon_bytes: u64,
    /// A config for `zpage kernel apply`.
    pub config_toml: String,
}

/// Sampled pages, read from processes.
#[derive(Debug, Default)]
pub struct Sample {
    /// The pages.
    pub pages: Vec<Box<[u8; PAGE_SIZE]>>,
    /// Processes read.
    pub processes: u64,
    /// Processes skipped.
    pub skipped: u64,
}

fn anonymous_ranges(pid: u32) -> Vec<(u64, u64)> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3).unwrap_or("");
            // Private writable memory without a file: what goes to swap.
            let anonymous = path.is_empty() || path == "[heap]" || path == "[stack]";
            if !anonymous || !perms.starts_with("rw") || !perms.ends_with('p') {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(end, 16).ok()?,
            ))
        })
        .collect()
}

/// Reads up to the limits from every readable process, biggest first.
pub fn sample_processes(limits: &SampleLimits) -> Sample {
    let mut sample = Sample::default();
    let mut pids: Vec<(u64, u32)> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| *pid != std::process::id())
                .map(|pid| {
                    let rss = std::fs::read_to_string(format!("/proc/{pid}/statm"))
                        .ok()
                        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
                        .unwrap_or(0);
                    (rss, pid)
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable_by(|a, b| b.cmp(a));
    for (_, pid) in pids {
        if sample.pages.len() >= limits.max_pages {
            break;
        }
        let (Ok(pagemap), Ok(mem)) = (
            File::open(format!("/proc/{pid}/pagemap")),
            File::open(format!("/proc/{pid}/mem")),
        ) else {
            sample.skipped += 1;
            continue;
        };
        let mut taken = 0usize;
        let budget = limits
            .max_pages_per_process
            .min(limits.max_pages - sample.pages.len());
        'ranges: for (start, end) in anonymous_ranges(pid) {
            let pages = (end - start) / PAGE_SIZE as u64;
            // Spread the samples over the range instead of taking its head.
            let step = (pages / budget.max(1) as u64).max(1);
            let mut index = 0;
            while index < pages {
                if taken >= budget {
                    break 'ranges;
                }
                let address = start + index * PAGE_SIZE as u64;
                let mut entry = [0u8; 8];
                let present = pagemap
                    .read_exact_at(&mut entry, address / PAGE_SIZE as u64 * 8)
                    .is_ok()
                    && u64::from_le_bytes(entry) & (1 << 63) != 0;
                if present {
                    let mut page = Box::new([0u8; PAGE_SIZE]);
                    if mem.read_exact_at(&mut page[..], address).is_ok() {
                        sample.pages.push(page);
                        taken += 1;
                    }
                }
                index += step;
            }
        }
        if taken > 0 {
            sample.processes += 1;
        } else {
            sample.skipped += 1;
        }
    }
    sample
}

/// Compresses the sample with `codec`, the way zram would store it.
pub fn evaluate(
    pages: &[Box<[u8; PAGE_SIZE]>],
    codec: &str,
    kernel_algorithm: &str,
) -> Result<CodecResult> {
    let spec: CodecSpec = codec
        .parse()
        .map_err(|e| KernelError::config("codec", format!("{e}"), "use lz4 or zstd"))?;
    let mut encoder = Encoder::new(&spec, RejectThreshold::default())
        .map_err(|e| KernelError::config("codec", format!("{e}"), "use lz4 or zstd"))?;
    let mut dst = Box::new([0u8; PAGE_SIZE]);
    let mut result = CodecResult {
        codec: codec.to_string(),
        kernel_algorithm: kernel_algorithm.to_string(),
        same_filled_pages: 0,
        incompressible_pages: Some(0),
        estimated_memory_bytes: 0,
        ratio: 0.0,
        compress_mib_per_s: None,
    };
    let mut incompressible = 0u64;
    let start = std::time::Instant::now();
    for page in pages {
        match encoder
            .encode(page, &mut dst)
            .map_err(|e| KernelError::config("codec", format!("{e}"), "use lz4 or zstd"))?
        {
            Encoded::SameFilled(_) => result.same_filled_pages += 1,
            Encoded::Compressed(len) => {
                // zsmalloc rounds objects up to 16-byte size classes (32 B minimum).
                result.estimated_memory_bytes += (len as u64).max(32).div_ceil(16) * 16;
            }
            Encoded::Incompressible => {
                incompressible += 1;
                result.estimated_memory_bytes += PAGE_SIZE as u64;
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    let input = (pages.len() * PAGE_SIZE) as f64;
    result.incompressible_pages = Some(incompressible);
    result.compress_mib_per_s = Some(input / seconds / (1 << 20) as f64);
    result.ratio = if result.estimated_memory_bytes > 0 {
        input / result.estimated_memory_bytes as f64
    } else if pages.is_empty() {
        1.0
    } else {
        f64::INFINITY
    };
    Ok(result)
}

/// Samples with the built-in sampler and evaluates lz4 (and zstd when the kernel offers it).
pub fn observe_sample(limits: &SampleLimits, kernel_algorithms: &[String]) -> Result<Observation> {
    let sample = sample_processes(limits);
    if sample.pages.is_empty() {
        return Err(KernelError::Command {
            command: "zpage kernel recommend".into(),
            detail: format!(
                "no process memory could be read ({} processes skipped)",
                sample.skipped
            ),
            fix: "run as root (reading other processes' memory needs CAP_SYS_PTRACE)".into(),
        });
    }
    let mut codecs = vec![evaluate(&sample.pages, "lz4", "lz4")?];
    if kernel_algorithms.iter().any(|a| a == "zstd") {
        codecs.push(evaluate(&sample.pages, "zstd", "zstd")?);
    }
    Ok(Observation {
        source: format!("built-in sample of up to {} pages", limits.max_pages),
        observed_bytes: (sample.pages.len() * PAGE_SIZE) as u64,
        processes: sample.processes,
        skipped_processes: sample.skipped,
        codecs,
    })
}

/// The algorithms the kernel's zram offers.
pub fn kernel_algorithms() -> Result<Vec<String>> {
    match crate::zram::ZramDevice::list()?.first() {
        Some(device) => device.algorithms(),
        None => Err(KernelError::ZramModuleNotLoaded),
    }
}

/// Builds the recommendation from an observation and the kernel's algorithms.
pub fn recommend_from(
    observation: Observation,
    kernel_algorithms: &[String],
    measured_swappiness: Option<(u8, String)>,
) -> Result<Recommendation> {
    let offered = |name: &str| kernel_algorithms.iter().any(|a| a == name);
    let Some(lz4) = observation.codecs.first() else {
        return Err(KernelError::Command {
            command: "zpage kernel recommend".into(),
            detail: "no codec results".into(),
            fix: "sample some memory first".into(),
        });
    };
    let codecs = &observation.codecs;
    let (algorithm, reason, ratio) = match codecs.get(1) {
        Some(zstd) if zstd.ratio > lz4.ratio * 1.25 => ("zstd".to_string(), format!("zstd stores this memory {:.0}% smaller than lz4; worth its slower decompression", (1.0 - lz4.ratio / zstd.ratio) * 100.0), zstd.ratio),
        _ if offered("lz4") => ("lz4".to_string(), "lz4 decompresses fastest (a swap-in waits for it) and the kernel offers it".to_string(), lz4.ratio),
        _ if offered("lzo-rle") => ("lzo-rle".to_string(), "lz4 is not offered by this kernel; lzo-rle compresses about as well (ratio estimated with lz4)".to_string(), lz4.ratio),
        _ => (kernel_algorithms.first().cloned().unwrap_or_else(|| "lzo".into()), "the kernel's only choice".to_string(), lz4.ratio),
    };
    let meminfo = procfs::meminfo()?;
    let mem_total = meminfo.get("MemTotal").copied().unwrap_or(0);
    let anon = meminfo.get("AnonPages").copied().unwrap_or(0);
    // Spend at most a quarter of RAM on compressed data when the device is full;
    // keep disksize between 25% and 150% of RAM.
    let finite_ratio = if ratio.is_finite() { ratio } else { 10.0 };
    let fraction = (0.25 * finite_ratio).clamp(0.25, 1.5);
    let zram_size_bytes =
        ((mem_total as f64 * fraction) as u64) / PAGE_SIZE as u64 * PAGE_SIZE as u64;
    let saving = |bytes: u64| (bytes as f64 * (1.0 - 1.0 / finite_ratio)).max(0.0) as u64;
    let (swappiness, swappiness_reason) = measured_swappiness.unwrap_or_else(|| {
        let assumed = crate::measure::swappiness_for_ratio(10.0);
        (assumed, "not measured (measuring needs root): assumed zram is 10x as fast as file I/O; `zpage kernel apply` with swappiness = \"auto\" measures it".to_string())
    });
    let config_toml = config_toml(&algorithm, fraction, zram_size_bytes, swappiness);
    Ok(Recommendation {
        observation,
        algorithm,
        algorithm_reason: reason,
        zram_size_bytes,
        swappiness,
        swappiness_reason,
        page_cluster: 0,
        saving_when_full_bytes: saving(zram_size_bytes),
        saving_on_current_anon_bytes: saving(anon),
        config_toml,
    })
}

/// Recommends from `observation`; measures swappiness when asked and root.
pub fn recommend(observation: Observation, measure_swappiness: bool) -> Result<Recommendation> {
    let algorithms = kernel_algorithms()?;
    let mut recommendation = recommend_from(observation, &algorithms, None)?;
    if measure_swappiness && crate::sys::is_root() {
        let m = crate::measure::swap_to_file_speed(Some(&recommendation.algorithm))?;
        recommendation.swappiness = m.swappiness;
        recommendation.swappiness_reason = format!("measured: {} reads a random page in {:.1} us, a file in {:.1} us (r = {:.2}); 200*r/(1+r)", m.swap_tier, m.swap_us_per_page, m.file_us_per_page, m.ratio);
        let fraction =
            recommendation.zram_size_bytes as f64 / procfs::mem_total_bytes()?.max(1) as f64;
        recommendation.config_toml = config_toml(
            &recommendation.algorithm,
            fraction,
            recommendation.zram_size_bytes,
            m.swappiness,
        );
    }
    Ok(recommendation)
}

fn config_toml(algorithm: &str, fraction: f64, zram_size_bytes: u64, swappiness: u8) -> String {
    format!(
        "# zpage kernel recommend\n[[zram]]\nalgorithm = \"{algorithm}\"\nsize = {fraction:.2}  # of RAM ({} MiB now)\nswap_priority = 100\n\n[sysctl]\nswappiness = \"auto\"  # {swappiness} here\npage_cluster = 0\n",
        zram_size_bytes >> 20
    )
}

impl Recommendation {
    /// Human-readable report.
    pub fn render_text(&self) -> String {
        use crate::status::human_bytes;
        let o = &self.observation;
        let mut out = format!(
            "observed {} of anonymous memory in {} processes ({} skipped), from {}\n",
            human_bytes(o.observed_bytes),
            o.processes,
            o.skipped_processes,
            o.source
        );
        for c in &o.codecs {
            out += &format!(
                "  {} (kernel {}): same-filled {} pages{}, RAM needed {} -> ratio {:.2}:1{}\n",
                c.codec,
                c.kernel_algorithm,
                c.same_filled_pages,
                c.incompressible_pages
                    .map(|n| format!(", incompressible {n} pages"))
                    .unwrap_or_default(),
                human_bytes(c.estimated_memory_bytes),
                c.ratio,
                c.compress_mib_per_s
                    .map(|s| format!(", compresses {s:.0} MiB/s"))
                    .unwrap_or_default()
            );
        }
        out += &format!(
            "algorithm:    {} ({})\n",
            self.algorithm, self.algorithm_reason
        );
        out += &format!(
            "zram size:    {} of uncompressed data (disksize)\n",
            human_bytes(self.zram_size_bytes)
        );
        out += &format!(
            "swappiness:   {} ({})\n",
            self.swappiness, self.swappiness_reason
        );
        out += &format!(
            "page-cluster: {} (zram reads pages one by one; read-ahead only wastes CPU)\n",
            self.page_cluster
        );
        out += &format!(
            "expected saving: {} of RAM when the zram device is full; {} if today's anonymous memory were all in zram\n",
            human_bytes(self.saving_when_full_bytes),
            human_bytes(self.saving_on_current_anon_bytes)
        );
        out += "config for `zpage kernel apply`:\n";
        out += &self.config_toml;
        out
    }
}
