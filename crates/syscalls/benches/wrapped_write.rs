//! The cost of the wrappers on a call whose buffer is resident: a `pwrite`
//! of 1 MiB to a file (page-cache copy) and to `/dev/null` (no copy: the
//! wrapper's own cost shows), three ways:
//!
//! - `direct`: the C library's `pwrite`, no wrapper;
//! - `wrapped/plain memory`: through the wrapper, buffer outside regions
//!   (one look at the region table);
//! - `wrapped/region, resident`: through the wrapper, buffer in a region
//!   with every page resident (pinned and unpinned around the call).
//!
//! `cargo bench -p zpage-syscalls --bench wrapped_write`; the figures are in
//! docs/ARCHITECTURE.md.
#![allow(unsafe_code)]

use criterion::{criterion_group, criterion_main, Criterion};
use std::os::fd::AsRawFd;
use zpage_region::{Region, RegionConfig};
use zpage_syscalls::{calls, inproc::InProcess};

const MIB: usize = 1 << 20;

fn bench(c: &mut Criterion) {
    let mut region = Region::new(RegionConfig::new(8 * MIB, 8 * MIB)).expect("region");
    region.as_mut_slice()[..MIB].fill(7);
    let plain = vec![7u8; MIB];
    let path = std::env::temp_dir().join(format!("zpage-wrapped-write-{}", std::process::id()));
    let file = std::fs::File::create(&path).expect("temp file");
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    for (target, fd) in [("file", file.as_raw_fd()), ("/dev/null", null.as_raw_fd())] {
        let mut group = c.benchmark_group(format!("pwrite 1 MiB to {target}"));
        group.bench_function("direct", |b| {
            b.iter(|| {
                // SAFETY: a valid 1 MiB buffer.
                let n = unsafe { libc::pwrite(fd, plain.as_ptr().cast(), MIB, 0) };
                assert_eq!(n, MIB as isize);
            })
        });
        group.bench_function("wrapped/plain memory", |b| {
            b.iter(|| {
                // SAFETY: as above.
                let n = unsafe {
                    calls::pwrite(
                        &InProcess,
                        Some(libc::pwrite),
                        fd,
                        plain.as_ptr().cast(),
                        MIB,
                        0,
                    )
                };
                assert_eq!(n, MIB as isize);
            })
        });
        group.bench_function("wrapped/region, resident", |b| {
            b.iter(|| {
                // SAFETY: 1 MiB inside the region.
                let n = unsafe {
                    calls::pwrite(
                        &InProcess,
                        Some(libc::pwrite),
                        fd,
                        region.as_ptr().cast(),
                        MIB,
                        0,
                    )
                };
                assert_eq!(n, MIB as isize);
            })
        });
        group.finish();
    }
    drop(file);
    let _ = std::fs::remove_file(path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
