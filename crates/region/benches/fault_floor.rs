//! The least a user-space fault can cost on this machine, whatever zpage
//! does: a fault that reaches user space as SIGBUS (userfaultfd's SIGBUS
//! mode, the cheapest way there: the other is waking a thread) and is
//! resolved by the cheapest install, with no lookup, no eviction and no
//! other thread of the process running. Also the LZ4 decompression of the
//! same pages a region would decode, from blobs scattered in memory as a
//! pool holds them. Prints a table; the crate README's "Where a fault's
//! time goes" quotes it, beside the kernel's swap-in measured by
//! `zpage bench --vs-kernel` on the same machine.
//!
//!     ZPAGE_BENCH_IMAGE=python-heap.img cargo bench -p zpage-region --bench fault_floor
//!
//! Environment: `ZPAGE_BENCH_IMAGE` (a raw memory image; default: generated
//! text-like data), `ZPAGE_BENCH_FLOOR_PAGES` (pages per measurement,
//! default 65536).
//!
//! Installs measured:
//! - `UFFDIO_ZEROPAGE`: maps the shared zero page (no page allocated): the
//!   bare trip into the handler and back, plus one ioctl;
//! - `UFFDIO_COPY` from a buffer: what a region does after decompressing
//!   into its worker's buffer (a page allocated, charged, copied, mapped);
//! - writing a fresh page of a private scratch mapping, then `UFFDIO_MOVE`
//!   of it into place: decompressing straight into the page that gets
//!   installed (the scratch page's own fault instead of the copy, and the
//!   MOVE's TLB flush, local here because no other thread runs).
use std::io::Read;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicUsize, Ordering};
use std::time::Instant;

mod common;

use common::{anonymous, env_usize, move_page, register_missing, userfaultfd, TextLike, PAGE};
use zpage_codec::{CodecSpec, Decoder, Encoded, Encoder, Page, RejectThreshold};
use zpage_region::uffd_abi::{
    UffdioCopy, UffdioRange, UffdioZeropage, FEATURE_MOVE, FEATURE_SIGBUS, UFFDIO_COPY,
    UFFDIO_ZEROPAGE,
};

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Install {
    ZeroPage = 0,
    Copy = 1,
    MoveFreshPage = 2,
}

impl Install {
    fn describe(self) -> &'static str {
        match self {
            Install::ZeroPage => "SIGBUS, `UFFDIO_ZEROPAGE`, return",
            Install::Copy => "SIGBUS, `UFFDIO_COPY` of a 4 KiB buffer, return",
            Install::MoveFreshPage => {
                "SIGBUS, write a fresh scratch page, `UFFDIO_MOVE` it in, return"
            }
        }
    }
}

/// What the handler needs, set before the touches start (a signal handler
/// reads only atomics).
static UFFD: AtomicI32 = AtomicI32::new(-1);
static MODE: AtomicU8 = AtomicU8::new(0);
static REGION: AtomicUsize = AtomicUsize::new(0);
static SCRATCH: AtomicUsize = AtomicUsize::new(0);
static SOURCE: AtomicUsize = AtomicUsize::new(0);

/// The SIGBUS handler: resolves the faulting page with the install chosen in
/// `MODE`. Async-signal-safe: atomics, `memcpy` of a page and ioctls only.
extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize & !(PAGE - 1);
    let uffd = UFFD.load(Ordering::Relaxed);
    let source = SOURCE.load(Ordering::Relaxed);
    let done = match MODE.load(Ordering::Relaxed) {
        0 => {
            let mut zero = UffdioZeropage {
                range: UffdioRange {
                    start: addr as u64,
                    len: PAGE as u64,
                },
                mode: 0,
                zeropage: 0,
            };
            // SAFETY: the struct matches the kernel's layout (`uffd_abi` checks it).
            unsafe { libc::ioctl(uffd, UFFDIO_ZEROPAGE as _, &mut zero) }
        }
        1 => {
            let mut copy = UffdioCopy {
                dst: addr as u64,
                src: source as u64,
                len: PAGE as u64,
                mode: 0,
                copy: 0,
            };
            // SAFETY: as above; `source` is a readable page made in `main`.
            unsafe { libc::ioctl(uffd, UFFDIO_COPY as _, &mut copy) }
        }
        _ => {
            // The scratch page at the same index: never touched before, so
            // writing it costs what decompressing into a fresh page would.
            let scratch = SCRATCH.load(Ordering::Relaxed) + (addr - REGION.load(Ordering::Relaxed));
            // SAFETY: `scratch` is a page of the scratch mapping (same length
            // as the region), `source` a page made in `main`.
            unsafe { std::ptr::copy_nonoverlapping(source as *const u8, scratch as *mut u8, PAGE) };
            move_page(uffd, addr, scratch)
        }
    };
    if done != 0 {
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    }
}

/// Median and mean, in µs, of `ns`.
fn summary(ns: &mut [u32]) -> Summary {
    ns.sort_unstable();
    let median = f64::from(ns[ns.len() / 2]) / 1000.0;
    let mean = ns.iter().map(|&n| f64::from(n)).sum::<f64>() / ns.len() as f64 / 1000.0;
    (median, mean)
}

/// Times `pages` reads of missing pages, each resolved by the handler with
/// `install`; after `Install::Copy`, also the eviction of those pages.
type Summary = (f64, f64);
fn fault_floor(install: Install, pages: usize, source: &Page) -> (Summary, Option<Summary>) {
    let region = anonymous(pages);
    let scratch = anonymous(pages);
    let uffd = userfaultfd(FEATURE_SIGBUS | FEATURE_MOVE, 0);
    register_missing(uffd, region, pages);
    UFFD.store(uffd, Ordering::Relaxed);
    MODE.store(install as u8, Ordering::Relaxed);
    REGION.store(region as usize, Ordering::Relaxed);
    SCRATCH.store(scratch as usize, Ordering::Relaxed);
    SOURCE.store(source.as_ptr() as usize, Ordering::Relaxed);
    let mut ns = vec![0u32; pages];
    let mut sum = 0u8;
    for (i, slot) in ns.iter_mut().enumerate() {
        // A stride prime to `pages`: scattered, as random faults are.
        let page = (i * 7919) % pages;
        let started = Instant::now();
        // SAFETY: in bounds of the region; the handler makes the page present.
        sum = sum.wrapping_add(unsafe { region.add(page * PAGE).read_volatile() });
        *slot = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
    }
    std::hint::black_box(sum);
    let evict = (install == Install::Copy).then(|| evict_cost(uffd, region, scratch, pages));
    // SAFETY: closing and unmapping what was made above.
    unsafe {
        libc::close(uffd);
        libc::munmap(region.cast(), pages * PAGE);
        libc::munmap(scratch.cast(), pages * PAGE);
    }
    (summary(&mut ns), evict)
}

/// Takes the pages out again, as an eviction does: one `UFFDIO_MOVE` per
/// page, scattered, into the (empty) scratch mapping, no other thread
/// running (a reclaimer's burst while the faults sleep).
fn evict_cost(uffd: libc::c_int, region: *mut u8, scratch: *mut u8, pages: usize) -> Summary {
    // A MOVE's destination must be registered with the same userfaultfd
    // (a region's staging area is).
    register_missing(uffd, scratch, pages);
    let mut ns = vec![0u32; pages];
    for (i, slot) in ns.iter_mut().enumerate() {
        let page = (i * 7919) % pages;
        let started = Instant::now();
        let done = move_page(
            uffd,
            scratch as usize + page * PAGE,
            region as usize + page * PAGE,
        );
        *slot = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
        assert_eq!(
            done,
            0,
            "UFFDIO_MOVE out: {}",
            std::io::Error::last_os_error()
        );
    }
    summary(&mut ns)
}

/// `pages` pages of the image (or generated text-like data).
fn pages_to_decode(pages: usize) -> (Vec<Page>, String) {
    let mut out = vec![[0u8; PAGE]; pages];
    if let Some(path) = std::env::var_os("ZPAGE_BENCH_IMAGE") {
        let mut file = std::fs::File::open(&path).expect("open ZPAGE_BENCH_IMAGE");
        for page in out.iter_mut() {
            if file.read_exact(page).is_err() {
                break;
            }
        }
        return (out, path.to_string_lossy().into_owned());
    }
    let mut text = TextLike::new();
    for (p, page) in out.iter_mut().enumerate() {
        for (w, word) in page.chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&text.next_word(p, w).to_le_bytes());
        }
    }
    (out, "generated text-like data".into())
}

/// What the codec costs per page: LZ4 compression of the pages in a
/// scattered order, then decompression of the blobs in another (packed end
/// to end, as in a pool, and far larger than the caches). Same-filled and
/// incompressible pages are left out: a region compresses neither with LZ4
/// nor decodes them.
struct CodecCost {
    compress: (f64, f64),
    decompress: (f64, f64),
    blobs: usize,
}

fn codec_cost(pages: &[Page]) -> CodecCost {
    let spec = CodecSpec::lz4();
    let mut encoder = Encoder::new(&spec, RejectThreshold::default()).expect("lz4 encoder");
    let mut decoder = Decoder::new(&spec).expect("lz4 decoder");
    let mut packed = Vec::new();
    let mut blobs = Vec::new();
    let mut buffer = [0u8; PAGE];
    let mut compress_ns = Vec::with_capacity(pages.len());
    for i in 0..pages.len() {
        let page = &pages[(i * 7919) % pages.len()];
        let started = Instant::now();
        let encoded = encoder.encode(page, &mut buffer);
        let ns = started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32;
        if let Ok(Encoded::Compressed(len)) = encoded {
            compress_ns.push(ns);
            blobs.push((packed.len(), len));
            packed.extend_from_slice(&buffer[..len]);
        }
    }
    let mut ns = Vec::with_capacity(blobs.len());
    for i in 0..blobs.len() {
        let (at, len) = blobs[(i * 7919) % blobs.len()];
        let started = Instant::now();
        decoder
            .decode(&packed[at..at + len], &mut buffer)
            .expect("a blob made here decodes");
        ns.push(started.elapsed().as_nanos().min(u128::from(u32::MAX)) as u32);
        std::hint::black_box(&buffer);
    }
    CodecCost {
        compress: summary(&mut compress_ns),
        decompress: summary(&mut ns),
        blobs: blobs.len(),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let pages = env_usize("ZPAGE_BENCH_FLOOR_PAGES", 65_536);
    // SAFETY: installing a handler for this benchmark's own faults; nothing
    // else in this process expects SIGBUS.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()),
            0
        );
    }
    let (data, data_name) = pages_to_decode(pages);
    let source: Box<Page> = Box::new(data[pages / 2]);
    println!("fault floor: {pages} scattered faults per row, one thread, no other thread running; decoding {data_name}");
    println!();
    println!("| one fault, seen by the program | p50 (µs) | mean (µs) |");
    println!("|---|---|---|");
    let mut copy = (0.0, 0.0);
    let mut evict = (0.0, 0.0);
    for install in [Install::ZeroPage, Install::Copy, Install::MoveFreshPage] {
        let ((median, mean), evicted) = fault_floor(install, pages, &source);
        println!("| {} | {median:.2} | {mean:.2} |", install.describe());
        if let Some(evicted) = evicted {
            copy = (median, mean);
            evict = evicted;
        }
    }
    let codec = codec_cost(&data);
    let blobs = codec.blobs;
    let (decode_median, decode_mean) = codec.decompress;
    let (compress_median, compress_mean) = codec.compress;
    println!("| LZ4 decompression of one page ({blobs} blobs, scattered) | {decode_median:.2} | {decode_mean:.2} |");
    println!("| LZ4 compression of one page | {compress_median:.2} | {compress_mean:.2} |");
    println!(
        "| eviction: `UFFDIO_MOVE` of one page out, scattered | {:.2} | {:.2} |",
        evict.0, evict.1
    );
    println!();
    let restore_median = copy.0 + decode_median;
    let restore_mean = copy.1 + decode_mean;
    println!("floor of a restore (SIGBUS + UFFDIO_COPY + LZ4 decompression): p50 {restore_median:.2} µs, mean {restore_mean:.2} µs");
    // One program thread: its faults sleep while the pages go out (a MOVE
    // while they run costs an interrupt on their CPU), and compression can
    // run beside them on the other CPU.
    let one_thread = restore_mean + evict.1;
    println!(
        "one faulting thread, at the budget, at best: {one_thread:.2} µs a fault (restore, and the wait for one MOVE out) = {:.0}k faults/s",
        1000.0 / one_thread
    );
    // Two program threads on two CPUs: every part of every fault is CPU
    // time on one of them.
    let cpu_per_fault = restore_mean + compress_mean + evict.1;
    println!(
        "two faulting threads on 2 CPUs, at best: {cpu_per_fault:.2} µs of CPU a fault (restore, compression, MOVE out) = {:.0}k faults/s",
        2000.0 / cpu_per_fault
    );
}
