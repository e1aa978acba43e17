//! What the system-call trap costs, against the wrappers and no zpage at
//! all, in one process (the filter, once installed, stays: the figures
//! without it are taken first).
//!
//! - a call that names no region memory (`getppid`, and a 64-byte `write`
//!   of a stack buffer to `/dev/null`): without the filter, then with it
//!   (the filter's own comparisons on every system call);
//! - a 64-byte `write` to `/dev/null` from region memory: through the
//!   wrapper, then trapped (SIGSYS, pin, re-issue from the trampoline,
//!   unpin), with the page resident and with it evicted before each call;
//! - a fault on an evicted page (read of one byte), without and with the
//!   filter (the fault path's own ioctls pass through it).
//!
//! `cargo bench -p zpage-syscalls --bench trap_cost`; the figures are in
//! README ("System calls on compressed memory").
#![allow(unsafe_code)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::os::fd::AsRawFd;
use zpage_region::{far, Region, RegionConfig};
use zpage_syscalls::{calls, inproc::InProcess};

const MIB: usize = 1 << 20;

fn bench(c: &mut Criterion) {
    // Regions in the far range, as under zpage run, before the filter.
    far::reserve().expect("the far range");
    let mut region = Region::new(RegionConfig::new(8 * MIB, 4 * MIB)).expect("region");
    region.as_mut_slice().fill(7);
    let base = region.as_ptr() as usize;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .expect("/dev/null");
    let fd = null.as_raw_fd();
    let stack = [7u8; 64];

    let no_region = |c: &mut Criterion, when: &str| {
        let mut group = c.benchmark_group(format!("no region memory, {when}"));
        group.bench_function("getppid", |b| {
            // SAFETY: no arguments.
            b.iter(|| unsafe { libc::getppid() })
        });
        group.bench_function("write 64 B to /dev/null", |b| {
            b.iter(|| {
                // SAFETY: a 64-byte stack buffer.
                let n = unsafe { libc::write(fd, stack.as_ptr().cast(), 64) };
                assert_eq!(n, 64);
            })
        });
        group.finish();
    };
    let fault = |c: &mut Criterion, when: &str| {
        let page = base + 4 * MIB;
        c.bench_function(&format!("fault on an evicted page, {when}"), |b| {
            b.iter_batched(
                || region.advise_cold(4 * MIB, 4096).expect("cold"),
                // SAFETY: a byte of the region.
                |()| unsafe { std::ptr::read_volatile(page as *const u8) },
                BatchSize::PerIteration,
            )
        });
    };
    no_region(c, "without the filter");
    fault(c, "without the filter");

    zpage_syscalls::trap::install().expect("install the trap");
    no_region(c, "with the filter");
    fault(c, "with the filter");

    let mut group = c.benchmark_group("write 64 B of region memory to /dev/null");
    group.bench_function("wrapper, page resident", |b| {
        b.iter(|| {
            // SAFETY: 64 bytes of the region.
            let n =
                unsafe { calls::write(&InProcess, Some(libc::write), fd, base as *const _, 64) };
            assert_eq!(n, 64);
        })
    });
    group.bench_function("trapped, page resident", |b| {
        b.iter(|| {
            // SAFETY: 64 bytes of the region.
            let n = unsafe { libc::write(fd, base as *const libc::c_void, 64) };
            assert_eq!(n, 64);
        })
    });
    group.bench_function("trapped, page evicted before each call", |b| {
        b.iter_batched(
            || region.advise_cold(0, 4096).expect("cold"),
            |()| {
                // SAFETY: 64 bytes of the region.
                let n = unsafe { libc::write(fd, base as *const libc::c_void, 64) };
                assert_eq!(n, 64);
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
