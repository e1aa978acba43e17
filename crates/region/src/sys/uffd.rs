//! The userfaultfd system calls: creating one, the API handshake, and the
//! ioctls that register ranges and install, move, protect and poison pages.
//! Each is a thin wrapper, async-signal-safe like the rest of `sys`.
//!
//! The ioctl numbers and struct layouts are those checked on the target kernel
//! (6.18) in `shared/notes/userfaultfd.md` §3.2; the system headers predate
//! `UFFDIO_MOVE`, so they are spelled out in `uffd_abi.rs`.
#![allow(unsafe_code)]

use super::{close, ioctl, page_present, Errno, PAGE_SIZE};
use crate::uffd_abi::*;

/// One 32-byte `uffd_msg`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdMsg {
    pub event: u8,
    /// Page faults: flags; remove/unmap: start; remap: from.
    pub a: u64,
    /// Page faults: address; remove/unmap: end; remap: to.
    pub b: u64,
    /// Remap: len.
    pub c: u64,
}

/// `userfaultfd(flags)`; returns the fd.
pub fn userfaultfd(flags: i32) -> Result<i32, Errno> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
    if fd < 0 {
        Err(Errno::last())
    } else {
        Ok(fd as i32)
    }
}

/// `open("/dev/userfaultfd")` + `USERFAULTFD_IOC_NEW(flags)`.
pub fn userfaultfd_dev(flags: i32) -> Result<i32, Errno> {
    let path = b"/dev/userfaultfd\0";
    // SAFETY: path is NUL-terminated.
    let dev = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if dev < 0 {
        return Err(Errno::last());
    }
    // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value.
    let fd = unsafe { libc::ioctl(dev, USERFAULTFD_IOC_NEW as _, flags as libc::c_ulong) };
    let err = Errno::last();
    close(dev);
    if fd < 0 {
        Err(err)
    } else {
        Ok(fd)
    }
}

/// `UFFDIO_API` handshake; returns the features the kernel supports.
pub fn uffd_api(fd: i32, features: u64) -> Result<u64, Errno> {
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_API, &mut api)?;
    Ok(api.features)
}

/// `UFFDIO_REGISTER`; returns the ioctls allowed on the range.
pub fn uffd_register(fd: i32, start: usize, len: usize, mode: u64) -> Result<u64, Errno> {
    let mut reg = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode,
        ioctls: 0,
    };
    ioctl(fd, UFFDIO_REGISTER, &mut reg)?;
    Ok(reg.ioctls)
}

/// `UFFDIO_UNREGISTER`.
pub fn uffd_unregister(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut range = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_UNREGISTER, &mut range)
}

/// `UFFDIO_WAKE` (handler-thread mode, after `EEXIST`).
pub fn uffd_wake(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut range = UffdioRange {
        start: start as u64,
        len: len as u64,
    };
    ioctl(fd, UFFDIO_WAKE, &mut range)
}

/// `UFFDIO_COPY` of one page from `src` (any readable memory) to `dst`.
pub fn uffd_copy(fd: i32, dst: usize, src: *const u8, mode: u64) -> Result<(), Errno> {
    uffd_copy_run(fd, dst, src, PAGE_SIZE, mode)
        .map(drop)
        .map_err(|(e, _)| e)
}

/// `UFFDIO_COPY` of `len` bytes from `src` to `dst`; returns the bytes
/// copied, or the errno with the bytes copied before it (the kernel stops
/// at the first page already present and answers `EAGAIN` with the count).
pub fn uffd_copy_run(
    fd: i32,
    dst: usize,
    src: *const u8,
    len: usize,
    mode: u64,
) -> Result<usize, (Errno, usize)> {
    let mut copy = UffdioCopy {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode,
        copy: 0,
    };
    let r = ioctl(fd, UFFDIO_COPY, &mut copy);
    done_bytes(r, copy.copy, len)
}

/// `UFFDIO_ZEROPAGE` of `len` bytes; answers as [`uffd_copy_run`].
pub fn uffd_zeropage_run(
    fd: i32,
    dst: usize,
    len: usize,
    mode: u64,
) -> Result<usize, (Errno, usize)> {
    let mut zero = UffdioZeropage {
        range: UffdioRange {
            start: dst as u64,
            len: len as u64,
        },
        mode,
        zeropage: 0,
    };
    let r = ioctl(fd, UFFDIO_ZEROPAGE, &mut zero);
    done_bytes(r, zero.zeropage, len)
}

/// A filling ioctl's answer: its count field holds the bytes done, or a
/// negative errno when it did none.
fn done_bytes(r: Result<(), Errno>, count: i64, len: usize) -> Result<usize, (Errno, usize)> {
    match r {
        Ok(()) => Ok(len),
        Err(e) => Err((e, count.max(0) as usize)),
    }
}

/// `UFFDIO_WRITEPROTECT` of one page: `protect` or lift the protection
/// (which also wakes a handler-thread-mode waiter).
pub fn uffd_writeprotect(fd: i32, addr: usize, protect: bool) -> Result<(), Errno> {
    let mut wp = UffdioWriteprotect {
        range: UffdioRange {
            start: addr as u64,
            len: PAGE_SIZE as u64,
        },
        mode: protect as u64,
    };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp)
}

/// `UFFDIO_POISON` of `len` bytes: accesses fault with SIGBUS until the
/// range is filled again (`UFFDIO_COPY` replaces the marker) or discarded.
/// An evicted page carries one so that it can never read as zeros, even if
/// the program closes the userfaultfd and the range is unregistered.
pub fn uffd_poison(fd: i32, start: usize, len: usize) -> Result<(), Errno> {
    let mut poison = UffdioPoison {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: 0,
        updated: 0,
    };
    ioctl(fd, UFFDIO_POISON, &mut poison)
}

/// `UFFDIO_MOVE` of `len` bytes; returns the bytes moved, or the errno with
/// the bytes moved before the failure (the kernel may move a prefix).
pub fn uffd_move(
    fd: i32,
    dst: usize,
    src: usize,
    len: usize,
    mode: u64,
) -> Result<usize, (Errno, usize)> {
    let mut mv = UffdioMove {
        dst: dst as u64,
        src: src as u64,
        len: len as u64,
        mode,
        moved: 0,
    };
    match ioctl(fd, UFFDIO_MOVE, &mut mv) {
        Ok(()) => Ok(mv.moved.max(0) as usize),
        Err(e) => Err((e, mv.moved.max(0) as usize)),
    }
}

/// `UFFDIO_MOVE` of one page from `src` to `dst`, judged by where the page
/// ended up rather than by the ioctl's answer alone.
///
/// Linux 6.18 can fail a MOVE that did move the page: when the source is the
/// shared zero page and a write replaces it with a private copy during the
/// MOVE, the ioctl returns `EEXIST` with no bytes counted, though the page
/// now sits at `dst` and `src` is empty (a page restored by a read fault is
/// the zero page, and the program's write often follows at once). Taken at
/// its word, that answer loses the page: the caller keeps it as if still
/// mapped, and the next MOVE finds nothing to move. So after a failure the
/// two addresses are looked at (`mincore`): the source gone and the
/// destination present means moved. Async-signal-safe (two system calls).
pub fn move_page(fd: i32, dst: usize, src: usize) -> Result<(), Errno> {
    match uffd_move(fd, dst, src, PAGE_SIZE, 0) {
        Ok(_) | Err((_, PAGE_SIZE)) => Ok(()),
        Err((e, _)) => {
            if !page_present(src) && page_present(dst) {
                Ok(())
            } else {
                Err(e)
            }
        }
    }
}

/// Reads pending `uffd_msg`s from a non-blocking uffd into `out`; returns how many.
pub fn uffd_read(fd: i32, out: &mut [UffdMsg]) -> Result<usize, Errno> {
    let mut raw = [0u8; UFFD_MSG_BYTES * 16];
    let want = out.len().min(16) * UFFD_MSG_BYTES;
    // SAFETY: `raw` is a live buffer of at least `want` bytes.
    let n = unsafe { libc::read(fd, raw.as_mut_ptr().cast(), want) };
    if n < 0 {
        return Err(Errno::last());
    }
    let count = n as usize / UFFD_MSG_BYTES;
    for (i, msg) in out.iter_mut().take(count).enumerate() {
        let m = &raw[i * UFFD_MSG_BYTES..(i + 1) * UFFD_MSG_BYTES];
        let word = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&m[o..o + 8]);
            u64::from_ne_bytes(b)
        };
        *msg = UffdMsg {
            event: m[0],
            a: word(8),
            b: word(16),
            c: word(24),
        };
    }
    Ok(count)
}
