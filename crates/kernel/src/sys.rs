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
