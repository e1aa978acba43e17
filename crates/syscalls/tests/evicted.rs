//! The wrappers on evicted region memory, with the real C library and the
//! default (SIGBUS) fault mode: without them the kernel fails each call
//! with EFAULT; with them every byte arrives.
#![allow(unsafe_code)]

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use zpage_region::{Region, RegionConfig};
use zpage_syscalls::{calls, Policy};

const MIB: usize = 1 << 20;

/// Every region of the process is zpage's (the in-process rule).
struct AnyRegion;

impl Policy for AnyRegion {
    type Inside = ();
    fn passes_through(&self) -> bool {
        false
    }
    fn in_region(&self, addr: usize, len: usize) -> bool {
        zpage_region::overlaps_any_region(addr, len)
    }
    fn enter(&self) {}
    const ADVICE: &'static str = "(test)";
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// A region of `size` bytes on a budget of `budget` bytes, filled with the
/// pattern, every page evicted.
fn evicted(size: usize, budget: usize) -> Region {
    let mut region = Region::new(RegionConfig::new(size, budget)).expect("region");
    for (i, b) in region.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    region.advise_cold(0, region.len()).expect("cold");
    assert!(region.stats().resident_bytes < budget as u64);
    region
}

/// A destination the kernel must write into evicted pages: the first `len`
/// bytes of `region` zeroed, then every page evicted.
fn zero_and_evict(region: &mut Region, len: usize) {
    region.as_mut_slice()[..len].fill(0);
    region.advise_cold(0, region.len()).expect("cold");
}

/// Every byte of `bytes` is the pattern (from offset 0).
fn holds_pattern(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().all(|(i, &b)| b == pattern(i))
}

/// The first `len` bytes of `region`, checked after evicting every page
/// again: what a call wrote there was kept by the region, not just by the
/// page tables.
fn evict_and_check(region: &Region, len: usize) {
    region.advise_cold(0, region.len()).expect("cold");
    assert!(holds_pattern(&region.as_slice()[..len]));
}

fn write_fn() -> Option<calls::signature::write> {
    Some(libc::write)
}

#[test]
fn unwrapped_write_of_evicted_pages_fails_with_efault() {
    let region = evicted(4 * MIB, 2 * MIB);
    let file = tempfile();
    // SAFETY: a valid buffer of the region's length.
    let r = unsafe { libc::write(file.as_raw_fd(), region.as_ptr().cast(), MIB) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert!(
        r == -1 && err == Some(libc::EFAULT),
        "the kernel cannot fault pages in ({r}, {err:?}); the test below would prove nothing"
    );
}

#[test]
fn wrapped_write_and_read_move_every_byte() {
    let region = evicted(4 * MIB, 2 * MIB);
    let mut file = tempfile();
    // One MiB: within half the budget, pinned in one call.
    // SAFETY: a valid buffer inside the region.
    let n = unsafe {
        calls::write(
            &AnyRegion,
            write_fn(),
            file.as_raw_fd(),
            region.as_ptr().cast(),
            MIB,
        )
    };
    assert_eq!(n, MIB as isize);
    let mut back = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut back).unwrap();
    assert!(holds_pattern(&back));

    // Into evicted pages: the kernel writes them, the region keeps them.
    let mut region = region;
    zero_and_evict(&mut region, MIB);
    file.rewind().unwrap();
    // SAFETY: as above.
    let n = unsafe {
        calls::read(
            &AnyRegion,
            Some(libc::read),
            file.as_raw_fd(),
            region.as_ptr().cast(),
            MIB,
        )
    };
    assert_eq!(n, MIB as isize);
    evict_and_check(&region, MIB);
}

#[test]
fn a_buffer_larger_than_half_the_budget_goes_in_pieces() {
    // 12 MiB through a 2 MiB budget: no single pin could hold it.
    let region = evicted(12 * MIB, 2 * MIB);
    let mut file = tempfile();
    // SAFETY: the region's whole buffer.
    let n = unsafe {
        calls::write(
            &AnyRegion,
            write_fn(),
            file.as_raw_fd(),
            region.as_ptr().cast(),
            region.len(),
        )
    };
    assert_eq!(n, region.len() as isize);
    file.rewind().unwrap();
    let mut back = Vec::new();
    file.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), region.len());
    assert!(holds_pattern(&back));

    // fread into the evicted region, 8-byte items.
    let mut region = region;
    let len = region.len();
    zero_and_evict(&mut region, len);
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
    // SAFETY: valid NUL-terminated strings.
    let stream = unsafe { libc::fopen(path.as_ptr(), c"r".as_ptr()) };
    assert!(!stream.is_null());
    let items = region.len() / 8;
    // SAFETY: the region's buffer holds `items` items of 8 bytes; a valid stream.
    let got = unsafe {
        calls::fread(
            &AnyRegion,
            Some(libc::fread),
            region.as_ptr().cast(),
            8,
            items,
            stream,
        )
    };
    // SAFETY: the stream opened above.
    unsafe { libc::fclose(stream) };
    assert_eq!(got, items);
    evict_and_check(&region, region.len());
}

#[test]
fn a_socket_receive_into_evicted_pages_is_one_piece_and_exact() {
    let mut region = evicted(4 * MIB, 2 * MIB);
    zero_and_evict(&mut region, 64 * 1024);
    let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let sent: Vec<u8> = (0..64 * 1024).map(|i| pattern(i + 7)).collect();
    a.write_all(&sent).unwrap();
    drop(a);
    let mut got = 0;
    while got < sent.len() {
        // SAFETY: a buffer inside the region.
        let n = unsafe {
            calls::recv(
                &AnyRegion,
                Some(libc::recv),
                b.as_raw_fd(),
                region.as_ptr().add(got).cast(),
                sent.len() - got,
                0,
            )
        };
        assert!(n > 0, "recv returned {n}");
        got += n as usize;
    }
    assert_eq!(&region.as_slice()[..sent.len()], &sent[..]);
}

#[test]
fn memory_outside_regions_goes_straight_through() {
    let mut file = tempfile();
    let data = vec![7u8; 3 * MIB];
    // SAFETY: a valid buffer.
    let n = unsafe {
        calls::write(
            &AnyRegion,
            write_fn(),
            file.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
        )
    };
    assert_eq!(n, data.len() as isize);
    // Without the C function the call fails cleanly.
    // SAFETY: as above.
    let n = unsafe { calls::write(&AnyRegion, None, file.as_raw_fd(), data.as_ptr().cast(), 1) };
    assert_eq!(n, -1);
    assert_eq!(zpage_syscalls::errno(), libc::ENOSYS);
    file.flush().unwrap();
}

#[test]
fn installing_in_process_walks_the_loaded_objects_once() {
    let first = zpage_syscalls::inproc::install().expect("install");
    let again = zpage_syscalls::inproc::install().expect("install");
    assert_eq!(
        again,
        Default::default(),
        "nothing new was loaded: {again:?}"
    );
    let totals = zpage_syscalls::inproc::totals();
    assert!(
        totals.objects >= first.objects && totals.failed == 0,
        "{totals:?}"
    );
}

fn tempfile() -> std::fs::File {
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "zpage-syscalls-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}
