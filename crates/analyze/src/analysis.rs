//! Running codecs and pools over an image: the columns of RFC-0219's
//! evaluation tables and of seed 001's fio table.

use crate::{AnalyzeError, Result};
use serde::Serialize;
use std::time::{Duration, Instant};
use zpage_codec::{
    same_filled_word, CodecError, CodecSpec, Decoder, Dictionary, Encoded, Encoder, Page,
    RejectThreshold, PAGE_SIZE,
};
use zpage_pool::{ClassStats, Packing, PoolKind};

use crate::image::{PageSource, CHUNK_PAGES};

/// What to measure.
#[derive(Clone, Debug)]
pub struct AnalyzeOptions {
    /// Codecs to run, in order. A `zstd-dict` codec without a dictionary gets one trained from the image.
    pub codecs: Vec<CodecSpec>,
    /// Pools to pack each codec's blobs into.
    pub pools: Vec<PoolKind>,
    /// Blobs at or above this are stored raw.
    pub threshold: RejectThreshold,
    /// Each blob is decompressed this many times; its latency is the fastest
    /// (strips preemption noise from a shared VM, as the notes' method does).
    /// 0 skips decompression (sizes only).
    pub decompress_rounds: u32,
    /// Size of a dictionary trained for `zstd-dict`.
    pub dictionary_bytes: usize,
    /// Keep zsmalloc-style per-class tables in the pool results.
    pub with_classes: bool,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        Self {
            codecs: Self::default_codecs(),
            pools: PoolKind::all().to_vec(),
            threshold: RejectThreshold::default(),
            decompress_rounds: 3,
            dictionary_bytes: 32 * 1024,
            with_classes: false,
        }
    }
}

impl AnalyzeOptions {
    /// LZ4 (zram's and Zircon's), zstd at a fast and at the default level, and zstd with a dictionary.
    pub fn default_codecs() -> Vec<CodecSpec> {
        ["lz4", "zstd:-1", "zstd:3", "zstd-dict:3"]
            .iter()
            .map(|name| name.parse().expect("built-in codec names parse"))
            .collect()
    }
}

/// One codec over the image.
#[derive(Clone, Debug, Serialize)]
pub struct CodecResult {
    /// Codec family name (`lz4`, `zstd`, ...).
    pub name: String,
    /// Level (for LZ4, the acceleration).
    pub level: i32,
    /// Compression speed over the pages that were not same-filled (`None`: there were none).
    pub compress_mib_s: Option<f64>,
    /// The whole pass: same-filled check and compression, over every page of the image.
    pub pass_mib_s: f64,
    /// Decompression speed over the pages kept compressed (`None`: none were, or `--rounds 0`).
    pub decompress_mib_s: Option<f64>,
    /// Per-page decompression latency, median (`None`: nothing was decompressed).
    pub decompress_p50_ns: Option<u64>,
    /// Per-page decompression latency, 99th percentile.
    pub decompress_p99_ns: Option<u64>,
    /// Per-page decompression latency, worst page.
    pub decompress_max_ns: Option<u64>,
    /// Bytes kept: blobs, plus 4096 for every incompressible page (zram's `compr_data_size`).
    pub compressed_bytes: u64,
    /// Pages kept compressed.
    pub compressed_pages: u64,
    /// Pages at or over the reject threshold, kept raw.
    pub incompressible_pages: u64,
    /// Same-filled pages (nothing stored).
    pub same_filled_pages: u64,
    /// Image bytes / `compressed_bytes` (`None` when nothing is stored
    /// compressed, e.g. an image of same-filled pages only).
    pub ratio: Option<f64>,
    /// Size of the trained dictionary, for `zstd-dict`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dictionary_bytes: Option<usize>,
}

/// One codec's blobs packed into one pool.
#[derive(Clone, Debug, Serialize)]
pub struct PoolResult {
    /// Pool name (`zsmalloc`, `tri-page`, `zbud`).
    pub name: String,
    /// The codec whose blobs were packed (as `name` or `name:level`).
    pub codec: String,
    /// Memory the pool holds (zram's `mem_used_total`).
    pub memory_used_bytes: u64,
    /// Bytes of blobs in it.
    pub stored_bytes: u64,
    /// Image bytes / memory used: what compression really saves (`None`: the pool is empty).
    pub ratio: Option<f64>,
    /// Share of the pool's memory not holding blob bytes (`None`: the pool is empty).
    pub fragmentation: Option<f64>,
    /// Pool memory not holding blob bytes.
    pub fragmentation_bytes: u64,
    /// Per-class table (with `with_classes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassStats>>,
}

/// A codec that was asked for but could not be measured on this memory.
#[derive(Clone, Debug, Serialize)]
pub struct SkippedCodec {
    /// The codec, as `name:level`.
    pub codec: String,
    /// Why (for `zstd-dict`: its dictionary could not be trained on these pages).
    pub reason: String,
}

/// Everything measured on one image.
#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    /// Pages analysed.
    pub pages: u64,
    /// Their size in bytes.
    pub bytes: u64,
    /// Pages made of one repeated 8-byte word (zram's `same_pages`).
    pub same_filled_pages: u64,
    /// Of those, pages of zeros.
    pub zero_pages: u64,
    /// The reject threshold used.
    pub threshold_bytes: usize,
    /// One per codec.
    pub codecs: Vec<CodecResult>,
    /// One per codec and pool.
    pub pools: Vec<PoolResult>,
    /// Codecs asked for but not measured, and why (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_codecs: Vec<SkippedCodec>,
}

/// Progress reports while analysing, for a progress bar.
#[derive(Clone, Debug)]
pub enum Progress {
    /// Starting a phase of `total` pages.
    Phase {
        /// What is being done.
        name: String,
        /// Pages it covers.
        total: u64,
    },
    /// `done` pages of the phase are finished.
    Advance {
        /// Pages done so far.
        done: u64,
    },
}

/// Per-page decompression latencies kept for the percentiles (a uniform sample beyond).
const LATENCY_SAMPLES: usize = 1 << 16;

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds == 0.0 {
        return 0.0;
    }
    bytes as f64 / (1024.0 * 1024.0) / seconds
}

/// `numerator / denominator`, `None` when there is no data or nothing to divide by.
fn ratio(numerator: u64, denominator: u64) -> Option<f64> {
    (numerator > 0 && denominator > 0).then(|| numerator as f64 / denominator as f64)
}

/// The value at quantile `q` of sorted values (nearest rank).
fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Every `stride`-th value of a stream, the stride doubling whenever the
/// kept values reach the capacity: a uniform sample in bounded memory.
#[derive(Debug)]
struct SystematicSample {
    kept: Vec<u64>,
    stride: u64,
    seen: u64,
}

impl SystematicSample {
    fn new() -> Self {
        Self {
            kept: Vec::new(),
            stride: 1,
            seen: 0,
        }
    }

    fn push(&mut self, value: u64) {
        if self.seen.is_multiple_of(self.stride) {
            if self.kept.len() == LATENCY_SAMPLES {
                let halved: Vec<u64> = self.kept.iter().step_by(2).copied().collect();
                self.kept = halved;
                self.stride *= 2;
                if !self.seen.is_multiple_of(self.stride) {
                    self.seen += 1;
                    return;
                }
            }
            self.kept.push(value);
        }
        self.seen += 1;
    }
}

/// A pool's figures from its packing of one codec's blobs.
fn pool_result(
    packing: &dyn Packing,
    codec: &CodecSpec,
    image_bytes: u64,
    with_classes: bool,
) -> PoolResult {
    let packed = packing.packed();
    let memory_used_bytes = packed.memory_used_bytes();
    let fragmentation_bytes = memory_used_bytes.saturating_sub(packed.stored_bytes);
    PoolResult {
        name: packing.kind().name().to_string(),
        codec: codec.to_string(),
        memory_used_bytes,
        stored_bytes: packed.stored_bytes,
        ratio: ratio(image_bytes, memory_used_bytes),
        fragmentation: (memory_used_bytes > 0)
            .then(|| fragmentation_bytes as f64 / memory_used_bytes as f64),
        fragmentation_bytes,
        classes: with_classes.then(|| packing.classes()),
    }
}

/// Pages seen by one pass over the source.
#[derive(Clone, Copy, Debug, Default)]
struct PageCounts {
    pages: u64,
    same_filled: u64,
    zero: u64,
}

impl PageCounts {
    /// Counts a chunk whose pages' same-filled words are `words`.
    fn add(&mut self, words: &[Option<u64>]) {
        self.pages += words.len() as u64;
        self.same_filled += words.iter().flatten().count() as u64;
        self.zero += words.iter().filter(|w| **w == Some(0)).count() as u64;
    }
}

/// What one codec's pass over the source counted.
struct CodecPass {
    encoder: Encoder,
    decoder: Decoder,
    /// Each pool's packing of this codec's blobs, in page order.
    pools: Vec<Box<dyn Packing>>,
    compress_time: Duration,
    decompress_time: Duration,
    compressed_pages: u64,
    incompressible_pages: u64,
    blob_bytes: u64,
    latencies: SystematicSample,
    max_latency_ns: u64,
    /// This chunk's blobs back to back, and (page index in chunk, start, len).
    blobs: Vec<u8>,
    spans: Vec<(usize, usize, usize)>,
}

const PROGRESS_STEP: u64 = 4096;

/// Measures every codec and pool of `options` on `pages` (in memory).
pub fn analyze(
    pages: &[Page],
    options: &AnalyzeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Analysis> {
    let mut source = crate::image::PagesSource::new(
        pages,
        crate::image::Source::File {
            path: Default::default(),
            skipped_bytes: 0,
        },
    );
    analyze_source(&mut source, options, progress)
}

/// Measures every codec and pool of `options` on the pages of `source`,
/// reading it once per codec a chunk at a time: memory stays bounded
/// whatever the source's size. Pool figures are exact: each pool's packing
/// counts every blob's length in page order (`zpage_pool::Packing`) instead
/// of holding the blobs.
pub fn analyze_source(
    source: &mut dyn PageSource,
    options: &AnalyzeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Analysis> {
    if options.codecs.is_empty() {
        return Err(AnalyzeError::Invalid(
            "no codec to analyse with: give at least one --codec".into(),
        ));
    }
    let passes = options.codecs.len()
        + options
            .codecs
            .iter()
            .filter(|spec| spec.awaits_dictionary())
            .count();
    if let (Some(label), true) = (source.read_once(), passes > 1) {
        return Err(AnalyzeError::ReadOnce { label });
    }
    let total = source.total_pages();
    let mut chunk: Vec<Page> = Vec::with_capacity(CHUNK_PAGES);
    let mut codecs = Vec::new();
    let mut pools = Vec::new();
    let mut skipped_codecs = Vec::new();
    let mut counts = PageCounts::default();
    for spec in &options.codecs {
        let spec = match with_trained_dictionary(spec, source, options.dictionary_bytes)? {
            Trained::Ready(spec) => spec,
            Trained::Untrainable { seen, reason } => {
                counts = seen;
                skipped_codecs.push(SkippedCodec {
                    codec: spec.to_string(),
                    reason,
                });
                continue;
            }
        };
        source.rewind()?;
        let mut pass = CodecPass {
            encoder: Encoder::new(&spec, options.threshold)?,
            decoder: Decoder::new(&spec)?,
            pools: options.pools.iter().map(|&k| k.packing()).collect(),
            compress_time: Duration::ZERO,
            decompress_time: Duration::ZERO,
            compressed_pages: 0,
            incompressible_pages: 0,
            blob_bytes: 0,
            latencies: SystematicSample::new(),
            max_latency_ns: 0,
            blobs: Vec::with_capacity(CHUNK_PAGES * PAGE_SIZE),
            spans: Vec::with_capacity(CHUNK_PAGES),
        };
        progress(Progress::Phase {
            name: format!("{spec}"),
            total,
        });
        let mut seen = PageCounts::default();
        let mut same_filled_check = Duration::ZERO;
        let mut buffer = zpage_codec::zeroed_page();
        let mut out = zpage_codec::zeroed_page();
        let mut stored_lengths = Vec::with_capacity(CHUNK_PAGES);
        loop {
            chunk.clear();
            if source.next_chunk(&mut chunk, CHUNK_PAGES)? == 0 {
                break;
            }
            let started = Instant::now();
            let words: Vec<Option<u64>> = chunk.iter().map(same_filled_word).collect();
            same_filled_check += started.elapsed();
            pass.blobs.clear();
            pass.spans.clear();
            // What the pools store, in page order: blobs, and incompressible
            // pages raw (as zram keeps its huge pages).
            stored_lengths.clear();
            let started = Instant::now();
            let mut incompressible = 0u64;
            for (i, page) in chunk.iter().enumerate() {
                if words[i].is_some() {
                    continue;
                }
                match pass.encoder.compress(page, &mut buffer)? {
                    Encoded::Compressed(len) => {
                        pass.spans.push((i, pass.blobs.len(), len));
                        pass.blobs.extend_from_slice(&buffer[..len]);
                        stored_lengths.push(len);
                    }
                    Encoded::Incompressible => {
                        incompressible += 1;
                        stored_lengths.push(PAGE_SIZE);
                    }
                    Encoded::SameFilled(_) => {
                        unreachable!("compress() does not check for same-filled pages")
                    }
                }
            }
            pass.compress_time += started.elapsed();
            pass.compressed_pages += pass.spans.len() as u64;
            pass.incompressible_pages += incompressible;
            pass.blob_bytes += pass.blobs.len() as u64;
            for pool in &mut pass.pools {
                for &len in &stored_lengths {
                    pool.add(len)?;
                }
            }
            decompress_chunk(
                &mut pass,
                &chunk,
                options.decompress_rounds,
                &mut out,
                &spec,
            )?;
            seen.add(&words);
            if seen.pages % PROGRESS_STEP < CHUNK_PAGES as u64 || seen.pages == total {
                progress(Progress::Advance { done: seen.pages });
            }
        }
        let compressed_bytes = pass.blob_bytes + pass.incompressible_pages * PAGE_SIZE as u64;
        let compressed_input =
            (pass.compressed_pages + pass.incompressible_pages) * PAGE_SIZE as u64;
        let image_bytes = seen.pages * PAGE_SIZE as u64;
        let mut sorted = pass.latencies.kept.clone();
        sorted.sort_unstable();
        codecs.push(CodecResult {
            name: spec.family().name().to_string(),
            level: spec.level(),
            compress_mib_s: (compressed_input > 0)
                .then(|| mib_per_s(compressed_input, pass.compress_time)),
            pass_mib_s: mib_per_s(image_bytes, pass.compress_time + same_filled_check),
            decompress_mib_s: (!sorted.is_empty()).then(|| {
                mib_per_s(
                    pass.compressed_pages * PAGE_SIZE as u64,
                    pass.decompress_time,
                )
            }),
            decompress_p50_ns: (!sorted.is_empty()).then(|| percentile(&sorted, 0.50)),
            decompress_p99_ns: (!sorted.is_empty()).then(|| percentile(&sorted, 0.99)),
            decompress_max_ns: (!sorted.is_empty()).then_some(pass.max_latency_ns),
            compressed_bytes,
            compressed_pages: pass.compressed_pages,
            incompressible_pages: pass.incompressible_pages,
            same_filled_pages: seen.same_filled,
            ratio: ratio(image_bytes, compressed_bytes),
            dictionary_bytes: spec.dictionary().map(|d| d.bytes().len()),
        });
        for pool in &pass.pools {
            pools.push(pool_result(
                pool.as_ref(),
                &spec,
                image_bytes,
                options.with_classes,
            ));
        }
        counts = seen;
    }
    Ok(Analysis {
        pages: counts.pages,
        bytes: counts.pages * PAGE_SIZE as u64,
        same_filled_pages: counts.same_filled,
        zero_pages: counts.zero,
        threshold_bytes: options.threshold.bytes(),
        codecs,
        pools,
        skipped_codecs,
    })
}

/// Decompresses this chunk's blobs `rounds` times; each page's latency is
/// its fastest round, the chunk's time its fastest round.
fn decompress_chunk(
    pass: &mut CodecPass,
    chunk: &[Page],
    rounds: u32,
    out: &mut Page,
    spec: &CodecSpec,
) -> Result<()> {
    if rounds == 0 || pass.spans.is_empty() {
        return Ok(());
    }
    let mut per_page = vec![u64::MAX; pass.spans.len()];
    let mut best_round = Duration::MAX;
    for round in 0..rounds {
        let round_started = Instant::now();
        for (n, &(i, start, len)) in pass.spans.iter().enumerate() {
            let started = Instant::now();
            pass.decoder.decode(&pass.blobs[start..start + len], out)?;
            per_page[n] = per_page[n].min(started.elapsed().as_nanos() as u64);
            if round == 0 && out[..] != chunk[i][..] {
                return Err(AnalyzeError::Invalid(format!(
                    "{spec} decoded a page to different bytes: this is a zpage bug, please report it"
                )));
            }
        }
        best_round = best_round.min(round_started.elapsed());
    }
    pass.decompress_time += best_round;
    for ns in per_page {
        pass.max_latency_ns = pass.max_latency_ns.max(ns);
        pass.latencies.push(ns);
    }
    Ok(())
}

/// A codec ready to run, or a dictionary that could not be trained.
enum Trained {
    Ready(CodecSpec),
    /// The training pass saw these pages, and none or too few to train on.
    Untrainable {
        seen: PageCounts,
        reason: String,
    },
}

/// Trains a dictionary from non-same-filled pages spread over the source
/// (every 16th, fewer for large sources: at most 4096 samples) when `spec`
/// wants one and has none. Memory that gives it nothing to train on (every
/// page same-filled, or too few or too uniform pages) is `Untrainable`, so
/// the other codecs are still measured.
fn with_trained_dictionary(
    spec: &CodecSpec,
    source: &mut dyn PageSource,
    dictionary_bytes: usize,
) -> Result<Trained> {
    if !spec.awaits_dictionary() {
        return Ok(Trained::Ready(spec.clone()));
    }
    const MAX_SAMPLES: u64 = 4096;
    let step = (source.total_pages() / MAX_SAMPLES).max(16);
    source.rewind()?;
    let mut samples: Vec<Page> = Vec::new();
    let mut chunk = Vec::with_capacity(CHUNK_PAGES);
    let mut seen = PageCounts::default();
    let mut index = 0u64;
    loop {
        chunk.clear();
        if source.next_chunk(&mut chunk, CHUNK_PAGES)? == 0 {
            break;
        }
        let words: Vec<Option<u64>> = chunk.iter().map(same_filled_word).collect();
        seen.add(&words);
        for (page, word) in chunk.iter().zip(&words) {
            if word.is_none() {
                if index.is_multiple_of(step) {
                    samples.push(*page);
                }
                index += 1;
            }
        }
    }
    if samples.is_empty() {
        return Ok(Trained::Untrainable {
            seen,
            reason: "every page is same-filled: there is nothing to train a dictionary on (or to compress)".into(),
        });
    }
    match Dictionary::train(samples.iter(), dictionary_bytes) {
        Ok(dictionary) => Ok(Trained::Ready(spec.clone().with_dictionary(dictionary)?)),
        Err(error @ CodecError::DictionaryTraining(_)) => Ok(Trained::Untrainable {
            seen,
            reason: format!(
                "{error}; {} of the {} pages are not same-filled",
                index, seen.pages
            ),
        }),
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.5), 50);
        assert_eq!(percentile(&values, 0.99), 99);
        assert_eq!(percentile(&values, 1.0), 100);
        assert_eq!(percentile(&[7], 0.99), 7);
        assert_eq!(percentile(&[], 0.5), 0);
    }
}
