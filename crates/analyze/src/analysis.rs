//! Running codecs and pools over an image: the columns of RFC-0219's
//! evaluation tables and of seed 001's fio table.

use crate::{AnalyzeError, Result};
use serde::Serialize;
use std::time::{Duration, Instant};
use zpage_codec::{
    same_filled_word, CodecFamily, CodecSpec, Decoder, Dictionary, Encoded, Encoder, Page,
    RejectThreshold, PAGE_SIZE,
};
use zpage_pool::{ClassStats, PoolKind};

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
    /// Compression speed over the pages that were not same-filled.
    pub compress_mib_s: f64,
    /// The whole pass: same-filled check and compression, over every page of the image.
    pub pass_mib_s: f64,
    /// Decompression speed over the pages kept compressed.
    pub decompress_mib_s: f64,
    /// Per-page decompression latency, median.
    pub decompress_p50_ns: u64,
    /// Per-page decompression latency, 99th percentile.
    pub decompress_p99_ns: u64,
    /// Per-page decompression latency, worst page.
    pub decompress_max_ns: u64,
    /// Bytes kept: blobs, plus 4096 for every incompressible page (zram's `compr_data_size`).
    pub compressed_bytes: u64,
    /// Pages kept compressed.
    pub compressed_pages: u64,
    /// Pages at or over the reject threshold, kept raw.
    pub incompressible_pages: u64,
    /// Same-filled pages (nothing stored).
    pub same_filled_pages: u64,
    /// Image bytes / `compressed_bytes`.
    pub ratio: f64,
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
    /// Image bytes / memory used: what compression really saves.
    pub ratio: f64,
    /// Share of the pool's memory not holding blob bytes.
    pub fragmentation: f64,
    /// Pool memory not holding blob bytes.
    pub fragmentation_bytes: u64,
    /// Per-class table (with `with_classes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<ClassStats>>,
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

/// Blobs of one codec, back to back, with where each one is.
struct Blobs {
    bytes: Vec<u8>,
    /// (page index, start, len)
    spans: Vec<(usize, usize, usize)>,
    incompressible: Vec<usize>,
}

impl Blobs {
    fn get(&self, span: (usize, usize, usize)) -> &[u8] {
        &self.bytes[span.1..span.1 + span.2]
    }
}

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds == 0.0 {
        return 0.0;
    }
    bytes as f64 / (1024.0 * 1024.0) / seconds
}

fn ratio(numerator: u64, denominator: u64) -> f64 {
    if denominator == 0 {
        0.0
    } else {
        numerator as f64 / denominator as f64
    }
}

/// The value at quantile `q` of sorted values (nearest rank).
fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

const PROGRESS_STEP: usize = 4096;

/// Measures every codec and pool of `options` on `pages`.
pub fn analyze(
    pages: &[Page],
    options: &AnalyzeOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Analysis> {
    if options.codecs.is_empty() {
        return Err(AnalyzeError::Invalid(
            "no codec to analyse with: give at least one --codec".into(),
        ));
    }
    let started = Instant::now();
    let same_filled: Vec<Option<u64>> = pages.iter().map(same_filled_word).collect();
    let same_filled_check = started.elapsed();
    let same_filled_pages = same_filled.iter().flatten().count() as u64;
    let zero_pages = same_filled.iter().filter(|w| **w == Some(0)).count() as u64;
    let image_bytes = pages.len() as u64 * PAGE_SIZE as u64;

    let mut codecs = Vec::new();
    let mut pools = Vec::new();
    for spec in &options.codecs {
        let spec = with_trained_dictionary(spec, pages, &same_filled, options.dictionary_bytes)?;
        let (blobs, compress_time) =
            compress_all(&spec, options.threshold, pages, &same_filled, progress)?;
        let latencies = decompress_all(&spec, &blobs, pages, options.decompress_rounds, progress)?;
        let compressed_pages = blobs.spans.len() as u64;
        let incompressible_pages = blobs.incompressible.len() as u64;
        let compressed_bytes = blobs.bytes.len() as u64 + incompressible_pages * PAGE_SIZE as u64;
        let compressed_input = (compressed_pages + incompressible_pages) * PAGE_SIZE as u64;
        let mut sorted = latencies.per_page_ns.clone();
        sorted.sort_unstable();
        codecs.push(CodecResult {
            name: spec.family().name().to_string(),
            level: spec.level(),
            compress_mib_s: mib_per_s(compressed_input, compress_time),
            pass_mib_s: mib_per_s(image_bytes, compress_time + same_filled_check),
            decompress_mib_s: mib_per_s(compressed_pages * PAGE_SIZE as u64, latencies.best_round),
            decompress_p50_ns: percentile(&sorted, 0.50),
            decompress_p99_ns: percentile(&sorted, 0.99),
            decompress_max_ns: sorted.last().copied().unwrap_or(0),
            compressed_bytes,
            compressed_pages,
            incompressible_pages,
            same_filled_pages,
            ratio: ratio(image_bytes, compressed_bytes),
            dictionary_bytes: spec.dictionary().map(|d| d.bytes().len()),
        });
        for &kind in &options.pools {
            pools.push(pack(
                kind,
                &spec,
                &blobs,
                pages,
                image_bytes,
                options.with_classes,
            )?);
        }
    }
    Ok(Analysis {
        pages: pages.len() as u64,
        bytes: image_bytes,
        same_filled_pages,
        zero_pages,
        threshold_bytes: options.threshold.bytes(),
        codecs,
        pools,
    })
}

/// Trains a dictionary from every 16th non-same-filled page when `spec` wants one and has none.
fn with_trained_dictionary(
    spec: &CodecSpec,
    pages: &[Page],
    same_filled: &[Option<u64>],
    dictionary_bytes: usize,
) -> Result<CodecSpec> {
    if spec.family() != CodecFamily::ZstdDict || spec.dictionary().is_some() {
        return Ok(spec.clone());
    }
    let samples = pages
        .iter()
        .zip(same_filled)
        .filter(|(_, word)| word.is_none())
        .map(|(page, _)| page)
        .step_by(16);
    let dictionary = Dictionary::train(samples, dictionary_bytes)?;
    Ok(spec.clone().with_dictionary(dictionary)?)
}

fn compress_all(
    spec: &CodecSpec,
    threshold: RejectThreshold,
    pages: &[Page],
    same_filled: &[Option<u64>],
    progress: &mut dyn FnMut(Progress),
) -> Result<(Blobs, Duration)> {
    progress(Progress::Phase {
        name: format!("compress {spec}"),
        total: pages.len() as u64,
    });
    let mut encoder = Encoder::new(spec, threshold)?;
    let mut buffer = zpage_codec::zeroed_page();
    let mut blobs = Blobs {
        bytes: Vec::with_capacity(pages.len() * PAGE_SIZE / 2),
        spans: Vec::new(),
        incompressible: Vec::new(),
    };
    let mut elapsed = Duration::ZERO;
    for (chunk_index, chunk) in pages.chunks(PROGRESS_STEP).enumerate() {
        let first = chunk_index * PROGRESS_STEP;
        let started = Instant::now();
        for (offset, page) in chunk.iter().enumerate() {
            let index = first + offset;
            if same_filled[index].is_some() {
                continue;
            }
            match encoder.compress(page, &mut buffer)? {
                Encoded::Compressed(len) => {
                    blobs.spans.push((index, blobs.bytes.len(), len));
                    blobs.bytes.extend_from_slice(&buffer[..len]);
                }
                Encoded::Incompressible => blobs.incompressible.push(index),
                Encoded::SameFilled(_) => {
                    unreachable!("compress() does not check for same-filled pages")
                }
            }
        }
        elapsed += started.elapsed();
        progress(Progress::Advance {
            done: (first + chunk.len()) as u64,
        });
    }
    Ok((blobs, elapsed))
}

struct Latencies {
    per_page_ns: Vec<u64>,
    best_round: Duration,
}

fn decompress_all(
    spec: &CodecSpec,
    blobs: &Blobs,
    pages: &[Page],
    rounds: u32,
    progress: &mut dyn FnMut(Progress),
) -> Result<Latencies> {
    let mut decoder = Decoder::new(spec)?;
    let mut out = zpage_codec::zeroed_page();
    let mut per_page_ns = vec![u64::MAX; blobs.spans.len()];
    let mut best_round = Duration::MAX;
    if rounds == 0 {
        return Ok(Latencies {
            per_page_ns: Vec::new(),
            best_round: Duration::ZERO,
        });
    }
    progress(Progress::Phase {
        name: format!("decompress {spec}"),
        total: blobs.spans.len() as u64 * u64::from(rounds),
    });
    for round in 0..rounds {
        let round_started = Instant::now();
        for (i, &span) in blobs.spans.iter().enumerate() {
            let started = Instant::now();
            decoder.decode(blobs.get(span), &mut out)?;
            let ns = started.elapsed().as_nanos() as u64;
            per_page_ns[i] = per_page_ns[i].min(ns);
            if round == 0 && out[..] != pages[span.0][..] {
                return Err(AnalyzeError::Invalid(format!(
                    "{spec} decoded page {} to different bytes: this is a zpage bug, please report it",
                    span.0
                )));
            }
            if i % PROGRESS_STEP == 0 {
                progress(Progress::Advance {
                    done: (round as usize * blobs.spans.len() + i) as u64,
                });
            }
        }
        best_round = best_round.min(round_started.elapsed());
    }
    Ok(Latencies {
        per_page_ns,
        best_round: if blobs.spans.is_empty() {
            Duration::ZERO
        } else {
            best_round
        },
    })
}

fn pack(
    kind: PoolKind,
    spec: &CodecSpec,
    blobs: &Blobs,
    pages: &[Page],
    image_bytes: u64,
    with_classes: bool,
) -> Result<PoolResult> {
    let mut pool = kind.build();
    for &span in &blobs.spans {
        pool.store(blobs.get(span))?;
    }
    // Incompressible pages are kept raw, as zram keeps its huge pages.
    for &index in &blobs.incompressible {
        pool.store(&pages[index])?;
    }
    let stats = pool.stats();
    Ok(PoolResult {
        name: kind.name().to_string(),
        codec: spec.to_string(),
        memory_used_bytes: stats.memory_used_bytes,
        stored_bytes: stats.stored_bytes,
        ratio: ratio(image_bytes, stats.memory_used_bytes),
        fragmentation: stats.fragmentation(),
        fragmentation_bytes: stats.fragmentation_bytes(),
        classes: with_classes.then(|| pool.classes()),
    })
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
