//! The few system calls std does not offer. All `unsafe` of the crate lives here.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

// From <sys/swap.h>; the libc crate does not export them.
const SWAP_FLAG_PREFER: i32 = 0x8000;
const SWAP_FLAG_PRIO_MASK: i32 = 0x7fff;
const SWAP_FLAG_DISCARD: i32 = 0x10000;

/// Effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// True when running as root (most kernel knobs need it).
pub fn is_root() -> bool {
    effective_uid() == 0
}

/// Blocks until an exclusive flock on `file` is held; released when the file is closed.
pub fn flock_exclusive(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor is valid for the lifetime of `file`, which we borrow.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Enables swap on `path`; `priority` None lets the kernel choose (negative, decreasing).
pub fn swapon(path: &Path, priority: Option<i16>, discard: bool) -> io::Result<()> {
    let c = c_path(path)?;
    let mut flags = 0;
    if let Some(prio) = priority {
        // The kernel accepts 0..=32767 through SWAP_FLAG_PREFER; negative ones are kernel-assigned.
        let prio = i32::from(prio.max(0));
        flags |= SWAP_FLAG_PREFER | (prio & SWAP_FLAG_PRIO_MASK);
    }
    if discard {
        flags |= SWAP_FLAG_DISCARD;
    }
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::swapon(c.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Disables swap on `path` (moves its pages back to RAM first; may take a while).
pub fn swapoff(path: &Path) -> io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::swapoff(c.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `struct pm_scan_arg` of `<linux/fs.h>` (Linux 6.7+).
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

const PAGE_IS_FILE: u64 = 1 << 2;
const PAGE_IS_PRESENT: u64 = 1 << 3;
/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 =
    (3 << 30) | ((std::mem::size_of::<PmScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

/// Resident anonymous (present, not file-backed, not shared) address ranges
/// in `[start, end)` of the process whose `/proc/PID/pagemap` is `pagemap`,
/// at most `max_pages` pages in all, found with the `PAGEMAP_SCAN` ioctl:
/// the kernel skips unpopulated page tables, so a sparse terabyte mapping
/// costs what its resident pages cost. `Ok(None)` when the kernel lacks the
/// ioctl (before Linux 6.7).
pub fn resident_anonymous_ranges(
    pagemap: &File,
    start: u64,
    end: u64,
    max_pages: u64,
) -> io::Result<Option<Vec<(u64, u64)>>> {
    let mut found = Vec::new();
    let mut regions = vec![PageRegion::default(); 512];
    let mut next = start;
    let mut pages = 0u64;
    while next < end && pages < max_pages {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            start: next,
            end,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: max_pages - pages,
            category_inverted: PAGE_IS_FILE,
            category_mask: PAGE_IS_PRESENT | PAGE_IS_FILE,
            return_mask: PAGE_IS_PRESENT,
            ..PmScanArg::default()
        };
        // SAFETY: `arg` is a valid pm_scan_arg whose `vec` points at `regions`,
        // `vec_len` entries long, both alive across the call; the descriptor
        // is valid for the lifetime of `pagemap`.
        let rc = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOTTY) | Some(libc::EINVAL) if found.is_empty() && next == start => {
                    Ok(None)
                }
                _ => Err(err),
            };
        }
        for region in &regions[..rc as usize] {
            found.push((region.start, region.end));
            pages += (region.end - region.start) / zpage_codec::PAGE_SIZE as u64;
        }
        if arg.walk_end <= next {
            break;
        }
        next = arg.walk_end;
    }
    Ok(Some(found))
}

/// Allocates every block of `file` up to `len` bytes (no holes, unlike `set_len`).
pub fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length too large"))?;
    // SAFETY: the descriptor is valid for the lifetime of `file`; the kernel checks the range.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
