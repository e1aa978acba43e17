//! Store+free and get throughput of each pool on LZ4-sized blobs.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::hint::black_box;
use zpage_pool::{Handle, PoolKind};

/// Blob lengths shaped like LZ4 output for anonymous pages (median ~1.6 KB).
fn lz4_like_lengths(count: usize) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    (0..count).map(|_| rng.gen_range(1000..=2100)).collect()
}

fn bench_pools(c: &mut Criterion) {
    let lengths = lz4_like_lengths(4096);
    let payload = vec![0xa5u8; 4096];
    let mut group = c.benchmark_group("pool");
    group.throughput(Throughput::Elements(lengths.len() as u64));
    for kind in PoolKind::all() {
        group.bench_function(format!("{kind}/store_free"), |b| {
            let mut pool = kind.build();
            let mut handles: Vec<Handle> = Vec::with_capacity(lengths.len());
            b.iter(|| {
                for &len in &lengths {
                    handles.push(pool.store(&payload[..len]).expect("valid blob"));
                }
                for handle in handles.drain(..) {
                    black_box(pool.free(handle).expect("live handle"));
                }
            });
        });
        group.bench_function(format!("{kind}/get"), |b| {
            b.iter_batched_ref(
                || {
                    let mut pool = kind.build();
                    let handles: Vec<Handle> = lengths
                        .iter()
                        .map(|&len| pool.store(&payload[..len]).expect("valid blob"))
                        .collect();
                    (pool, handles)
                },
                |(pool, handles)| {
                    for &handle in handles.iter() {
                        black_box(pool.get(handle).expect("live handle"));
                    }
                },
                BatchSize::LargeInput,
            );
        });
    }
    group.finish();
}

criterion_group!(benches, bench_pools);
criterion_main!(benches);
