//! The report `zpage analyze` prints, and its stable JSON form.

use crate::analysis::Analysis;
use crate::image::Source;
use crate::kernel_compare::KernelResult;
use serde::Serialize;

/// Version tag of the JSON layout; bumped only on incompatible changes.
pub const REPORT_SCHEMA: &str = "zpage-analyze/1";

/// zpage beside zram on the points users compare.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Same-filled pages zpage found.
    pub same_filled_pages: u64,
    /// zram's `same_pages` for the same pages (first algorithm).
    pub zram_same_pages: u64,
    /// Whether the two agree.
    pub same_pages_match: bool,
    /// The zram algorithm compared with zpage's LZ4 + size-class pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zram_algorithm: Option<String>,
    /// zpage's memory for LZ4 in the size-class pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zpage_memory_used_bytes: Option<u64>,
    /// zram's `mem_used_total` with lz4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zram_mem_used_total: Option<u64>,
    /// zpage's memory / zram's memory (below 1 means zpage uses less).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_vs_zram: Option<f64>,
}

/// Everything `zpage analyze` found for a set of images.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// What was analysed.
    pub sources: Vec<Source>,
    /// The measurements (flattened: `pages`, `codecs`, `pools`, ...).
    #[serde(flatten)]
    pub analysis: Analysis,
    /// zram's device used for `kernel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zram_device: Option<String>,
    /// zram's figures, one per algorithm (with `--kernel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Vec<KernelResult>>,
    /// zpage beside zram (with `--kernel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

impl Report {
    /// A report without kernel figures.
    pub fn new(sources: Vec<Source>, analysis: Analysis) -> Self {
        Self {
            schema: REPORT_SCHEMA,
            sources,
            analysis,
            zram_device: None,
            kernel: None,
            comparison: None,
        }
    }

    /// Adds zram's figures and the comparison zpage makes with them.
    pub fn with_kernel(mut self, device: String, kernel: Vec<KernelResult>) -> Self {
        let zram_lz4 = kernel.iter().find(|k| k.algorithm == "lz4");
        let zpage_lz4 = self
            .analysis
            .pools
            .iter()
            .find(|p| p.name == "zsmalloc" && p.codec == "lz4");
        let memory = zram_lz4.zip(zpage_lz4);
        self.comparison = kernel.first().map(|first| Comparison {
            same_filled_pages: self.analysis.same_filled_pages,
            zram_same_pages: first.mm_stat.same_pages,
            same_pages_match: self.analysis.same_filled_pages == first.mm_stat.same_pages,
            zram_algorithm: memory.map(|(zram, _)| zram.algorithm.clone()),
            zpage_memory_used_bytes: memory.map(|(_, ours)| ours.memory_used_bytes),
            zram_mem_used_total: memory.map(|(zram, _)| zram.mm_stat.mem_used_total),
            memory_used_vs_zram: memory.map(|(zram, ours)| {
                ours.memory_used_bytes as f64 / zram.mm_stat.mem_used_total.max(1) as f64
            }),
        });
        self.zram_device = Some(device);
        self.kernel = Some(kernel);
        self
    }
}
