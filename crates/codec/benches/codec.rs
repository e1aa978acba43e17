//! Per-page compression and decompression on 4 KiB pages, one page per
//! iteration: a cycle over a heap-like page set (throughput), and the page of
//! median compressed size alone (the typical page's latency).
//!
//! `cargo bench -p zpage-codec`; set `ZPAGE_BENCH_IMAGE=FILE` to use a real
//! memory image (`zpage analyze --pid PID --save-image FILE`) instead of the
//! generated pages.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use zpage_codec::{CodecSpec, Decoder, Encoded, Encoder, Page, RejectThreshold, PAGE_SIZE};

/// Pages that compress like real program heaps (LZ4 ratio around 2-3).
fn heap_like_pages(count: usize) -> Vec<Box<Page>> {
    let mut rng = StdRng::seed_from_u64(42);
    (0..count)
        .map(|i| {
            let mut page = Box::new([0u8; PAGE_SIZE]);
            for chunk in page.chunks_exact_mut(8) {
                let word: u64 = match (i + rng.gen_range(0..4)) % 4 {
                    0 => 0x0000_55d0_0000_0000 | u64::from(rng.gen::<u16>()) << 3,
                    1 => u64::from(rng.gen_range(0u32..1000)),
                    2 => u64::from_le_bytes(*b"name=abc"),
                    _ => 0,
                };
                chunk.copy_from_slice(&word.to_le_bytes());
            }
            for byte in page.iter_mut().step_by(rng.gen_range(48..160)) {
                *byte = rng.gen();
            }
            page
        })
        .collect()
}

fn bench_pages() -> Vec<Box<Page>> {
    let Ok(path) = std::env::var("ZPAGE_BENCH_IMAGE") else {
        return heap_like_pages(256);
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("ZPAGE_BENCH_IMAGE={path}: {e}"));
    let (pages, _) = bytes.as_chunks::<PAGE_SIZE>();
    pages
        .iter()
        .filter(|page| zpage_codec::same_filled_word(page).is_none())
        .take(4096)
        .map(|page| Box::new(*page))
        .collect()
}

fn codecs(c: &mut Criterion) {
    let pages = bench_pages();
    let mut group = c.benchmark_group("page");
    group.throughput(Throughput::Bytes(PAGE_SIZE as u64));
    for name in ["lz4", "lz4-flex", "zstd:-1", "zstd:3"] {
        let spec: CodecSpec = name.parse().unwrap();
        let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
        let mut decoder = Decoder::new(&spec).unwrap();
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        let mut blobs = Vec::new();
        for page in &pages {
            if let Encoded::Compressed(len) = encoder.compress(page, &mut blob).unwrap() {
                blobs.push(blob[..len].to_vec());
            }
        }
        let mut next = 0;
        group.bench_function(BenchmarkId::new("compress", name), |b| {
            b.iter(|| {
                next = (next + 1) % pages.len();
                encoder.compress(&pages[next], &mut blob).unwrap()
            })
        });
        let mut out = Box::new([0u8; PAGE_SIZE]);
        group.bench_function(BenchmarkId::new("decompress", name), |b| {
            b.iter(|| {
                next = (next + 1) % blobs.len();
                decoder.decode(&blobs[next], &mut out).unwrap()
            })
        });
        let mut by_size: Vec<&Vec<u8>> = blobs.iter().collect();
        by_size.sort_by_key(|blob| blob.len());
        let median = by_size[by_size.len() / 2];
        group.bench_function(BenchmarkId::new("decompress_median_page", name), |b| {
            b.iter(|| decoder.decode(median, &mut out).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, codecs);
criterion_main!(benches);
