//! `zpage kernel recommend`: from what compression does to the running
//! system's anonymous memory, propose an algorithm, a zram size, swappiness
//! and page-cluster, with the expected saving.
//!
//! The memory figures come in as an [`Observation`], which the CLI makes from
//! `zpage analyze`'s whole-machine scan (zpage-analyze depends on this crate,
//! so this crate does not measure memory itself).

use serde::{Deserialize, Serialize};
use zpage_codec::PAGE_SIZE;

use crate::{procfs, KernelError, Result};

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
    /// What makes the proposal doubtful (a ratio too low for zram to pay).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Below this ratio a page swapped to zram frees less than a third of a
/// page of RAM, yet costs a compression on the way out and a decompression
/// on every fault back: the trade stops paying (typical memory compresses
/// 2.5-4:1 with lz4).
pub const POOR_RATIO: f64 = 1.5;

/// Why zram at `ratio` (uncompressed bytes per byte of RAM used) is a poor
/// trade, when it is.
pub fn ratio_warning(ratio: f64) -> Option<String> {
    if !ratio.is_finite() || ratio >= POOR_RATIO {
        return None;
    }
    let freed = (1.0 - 1.0 / ratio.max(1.0)) * 100.0;
    Some(format!(
        "this memory compresses only {ratio:.2}:1, so each page zram holds frees {freed:.0}% of a page of RAM while every swap-out compresses and every fault back decompresses: below {POOR_RATIO}:1 zram is a poor trade. Find what fills memory with incompressible data (encrypted or compressed buffers, random data) first; otherwise prefer disk swap (or zswap in front of it), or more RAM"
    ))
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
    let mem_total = meminfo.mem_total;
    let anon = meminfo.anon_pages.unwrap_or(0);
    // Spend at most a quarter of RAM on compressed data when the device is full;
    // keep disksize between 25% and 150% of RAM.
    let finite_ratio = if ratio.is_finite() { ratio } else { 10.0 };
    let fraction = (0.25 * finite_ratio).clamp(0.25, 1.5);
    let zram_size_bytes =
        ((mem_total as f64 * fraction) as u64) / PAGE_SIZE as u64 * PAGE_SIZE as u64;
    let saving = |bytes: u64| (bytes as f64 * (1.0 - 1.0 / finite_ratio)).max(0.0) as u64;
    let (swappiness, swappiness_reason) = measured_swappiness.unwrap_or_else(|| {
        let assumed = crate::measure::swappiness_for_ratio(10.0);
        (assumed, "estimated, not measured: assumed zram reads a page 10x as fast as a file; `zpage kernel recommend --measure` (root) or `swappiness = \"auto\"` in the config measures it".to_string())
    });
    let warnings: Vec<String> = ratio_warning(ratio).into_iter().collect();
    let mut config_toml = config_toml(&algorithm, fraction, zram_size_bytes, swappiness);
    for warning in &warnings {
        config_toml.insert_str(0, &format!("# WARNING: {warning}\n"));
    }
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
        warnings,
    })
}

/// Recommends from `observation`. Reads only, unless `measure_swappiness`:
/// then a temporary zram device and file are created to time swap against
/// file reads (root only; removed afterwards).
pub fn recommend(observation: Observation, measure_swappiness: bool) -> Result<Recommendation> {
    let algorithms = kernel_algorithms()?;
    let mut recommendation = recommend_from(observation, &algorithms, None)?;
    if measure_swappiness {
        let m = crate::measure::swap_to_file_speed(Some(&recommendation.algorithm))?;
        recommendation.swappiness = m.swappiness;
        recommendation.swappiness_reason = format!("measured: {} reads a random page in {:.1} us, a file in {:.1} us (r = {:.2}); 200*r/(1+r)", m.swap_tier, m.swap_us_per_page, m.file_us_per_page, m.ratio);
        let fraction =
            recommendation.zram_size_bytes as f64 / procfs::mem_total_bytes()?.max(1) as f64;
        let warnings: String = recommendation
            .warnings
            .iter()
            .map(|w| format!("# WARNING: {w}\n"))
            .collect();
        recommendation.config_toml = warnings
            + &config_toml(
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
        "# zpage kernel recommend\n[[zram]]\nalgorithm = \"{algorithm}\"\nsize = {fraction:.2}  # of RAM ({} MiB now)\nswap_priority = 100\n\n[sysctl]\nswappiness = {swappiness}  # \"auto\" measures it at apply\npage_cluster = 0\n",
        zram_size_bytes >> 20
    )
}

impl Recommendation {
    /// Human-readable report.
    pub fn render_text(&self) -> String {
        use zpage_units::format_bytes;
        let o = &self.observation;
        let mut out = format!(
            "observed {} of anonymous memory in {} processes ({} skipped), from {}\n",
            format_bytes(o.observed_bytes),
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
                format_bytes(c.estimated_memory_bytes),
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
            format_bytes(self.zram_size_bytes)
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
            format_bytes(self.saving_when_full_bytes),
            format_bytes(self.saving_on_current_anon_bytes)
        );
        for warning in &self.warnings {
            out += &format!("WARNING: {warning}\n");
        }
        out += "config for `zpage kernel apply`:\n";
        out += &self.config_toml;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation(ratio: f64) -> Observation {
        Observation {
            source: "test".into(),
            observed_bytes: 1 << 30,
            processes: 1,
            skipped_processes: 0,
            codecs: vec![CodecResult {
                codec: "lz4".into(),
                kernel_algorithm: "lz4".into(),
                same_filled_pages: 0,
                incompressible_pages: None,
                estimated_memory_bytes: ((1u64 << 30) as f64 / ratio) as u64,
                ratio,
                compress_mib_per_s: None,
            }],
        }
    }

    #[test]
    fn a_poor_ratio_is_warned_about_in_the_text_and_the_config() {
        let algorithms = ["lz4".to_string()];
        let poor = recommend_from(observation(1.10), &algorithms, None).unwrap();
        assert_eq!(poor.warnings.len(), 1, "{:?}", poor.warnings);
        assert!(poor.warnings[0].contains("1.10:1"), "{}", poor.warnings[0]);
        assert!(
            poor.render_text().contains("WARNING: "),
            "{}",
            poor.render_text()
        );
        assert!(
            poor.config_toml.starts_with("# WARNING: "),
            "{}",
            poor.config_toml
        );
        // The config still parses with the warning in it.
        crate::config::KernelConfig::parse(&poor.config_toml).unwrap();
        let good = recommend_from(observation(3.2), &algorithms, None).unwrap();
        assert!(good.warnings.is_empty(), "{:?}", good.warnings);
        assert!(!good.render_text().contains("WARNING"));
        assert!(ratio_warning(f64::INFINITY).is_none());
    }
}
