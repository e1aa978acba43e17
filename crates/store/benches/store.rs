//! Store and load of 4 KiB pages through the whole store (codec + pool +
//! table), per pool. `cargo bench -p zpage-store`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use zpage_codec::{CodecSpec, Decoder, Encoded, Encoder, Page, RejectThreshold, PAGE_SIZE};
use zpage_store::{PoolKind, Store, StoreConfig};

fn heap_like_page(seed: u64) -> Box<Page> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut page = Box::new([0u8; PAGE_SIZE]);
    for chunk in page.chunks_exact_mut(8) {
        let word: u64 = match rng.gen_range(0..4) {
            0 => 0x0000_55d0_0000_0000 | u64::from(rng.gen::<u16>()) << 3,
            1 => u64::from(rng.gen_range(0u32..1000)),
            2 => u64::from_le_bytes(*b"name=abc"),
            _ => 0,
        };
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    page
}

fn store_and_load(c: &mut Criterion) {
    const KEYS: u64 = 4096;
    let pages: Vec<Box<Page>> = (0..KEYS).map(heap_like_page).collect();
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Bytes(PAGE_SIZE as u64));
    // The baseline: the codec alone on the same pages, so the store's own cost shows as the difference.
    let mut encoder = Encoder::new(&CodecSpec::lz4(), RejectThreshold::default()).unwrap();
    let mut decoder = Decoder::new(&CodecSpec::lz4()).unwrap();
    let mut buffer = Box::new([0u8; PAGE_SIZE]);
    let blobs: Vec<Vec<u8>> = pages
        .iter()
        .filter_map(|page| match encoder.encode(page, &mut buffer).unwrap() {
            Encoded::Compressed(len) => Some(buffer[..len].to_vec()),
            _ => None,
        })
        .collect();
    let mut next = 0;
    group.bench_function("decode_only/lz4", |b| {
        b.iter(|| {
            next = (next + 1) % blobs.len();
            decoder.decode(&blobs[next], &mut buffer).unwrap()
        })
    });
    for pool in PoolKind::all() {
        let store = Store::new(StoreConfig {
            pages: zpage_store::PageStoreConfig {
                pool,
                ..Default::default()
            },
            ..StoreConfig::default()
        })
        .unwrap();
        let mut worker = store.worker().unwrap();
        for key in 0..KEYS {
            store.store(&mut worker, key, &pages[key as usize]).unwrap();
        }
        let mut key = 0;
        group.bench_function(BenchmarkId::new("replace", pool.name()), |b| {
            b.iter(|| {
                key = (key + 1) % KEYS;
                store.store(&mut worker, key, &pages[key as usize]).unwrap()
            })
        });
        let mut out = Box::new([0u8; PAGE_SIZE]);
        group.bench_function(BenchmarkId::new("load", pool.name()), |b| {
            b.iter(|| {
                key = (key + 1) % KEYS;
                store.load(&mut worker, key, &mut out).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, store_and_load);
criterion_main!(benches);
