//! What sealing costs next to the tier's own work, on blobs of a compressed
//! page's size: `seal+open` alone, and a packed file tier's put, get and
//! free (which include it). Run it again with `--features
//! measure-without-encryption` (the same tier, sealing nothing): the two
//! runs' ratio is encryption's share of the tier's throughput (figures in
//! the README's "What encryption costs"). The file goes to `ZPAGE_BENCH_DIR` (default the
//! system's temporary directory).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::{Rng, SeedableRng};
use zpage_tier::{KeySource, PackedConfig, PackedTier, Sealer, Tier, READ_BUFFER_BYTES};

const BLOB_BYTES: usize = 1536;

fn blob() -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    (0..BLOB_BYTES).map(|_| rng.gen()).collect()
}

fn sealing(c: &mut Criterion) {
    let sealer = Sealer::new(&KeySource::Ephemeral).unwrap();
    let plain = blob();
    let mut group = c.benchmark_group("tier");
    group.throughput(Throughput::Bytes(BLOB_BYTES as u64));
    let mut sealed = Vec::with_capacity(READ_BUFFER_BYTES);
    group.bench_function("seal+open 1536 B", |b| {
        b.iter(|| {
            let version = sealer.seal(7, &plain, &mut sealed).unwrap();
            sealer.open(7, version, &mut sealed).unwrap()
        })
    });
    let dir = std::env::var_os("ZPAGE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let path = dir.join(format!("zpage-tier-bench-{}", std::process::id()));
    let tier = PackedTier::new(PackedConfig::new(&path, 256 << 20)).unwrap();
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    group.bench_function("packed put+get+free 1536 B", |b| {
        b.iter(|| {
            let r = tier.put(7, &plain).unwrap();
            tier.get(r, 7, &mut buf).unwrap();
            tier.free(r);
        })
    });
    let refs: Vec<_> = (0..4096u64)
        .map(|p| (p, tier.put(p, &plain).unwrap()))
        .collect();
    let mut i = 0;
    group.bench_function("packed get 1536 B", |b| {
        b.iter_batched(
            || {
                i = (i + 1) % refs.len();
                refs[i]
            },
            |(p, r)| tier.get(r, p, &mut buf).unwrap(),
            BatchSize::SmallInput,
        )
    });
    let mut sealed_one = Vec::new();
    let version = sealer.seal(7, &plain, &mut sealed_one).unwrap();
    group.bench_function("open 1536 B", |b| {
        b.iter_batched_ref(
            || sealed_one.clone(),
            |s| sealer.open(7, version, s).unwrap(),
            BatchSize::SmallInput,
        )
    });
    group.finish();
    drop(tier);
    let _ = std::fs::remove_file(path);
}

criterion_group!(benches, sealing);
criterion_main!(benches);
