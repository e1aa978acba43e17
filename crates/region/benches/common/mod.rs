//! Helpers shared by the region crate's benchmarks.
#![allow(dead_code)]

use zpage_region::uffd_abi::{
    UffdioApi, UffdioMove, UffdioRange, UffdioRegister, REGISTER_MODE_MISSING, UFFDIO_API,
    UFFDIO_MOVE, UFFDIO_REGISTER, UFFD_API, UFFD_USER_MODE_ONLY,
};

pub const PAGE: usize = zpage_region::PAGE_SIZE;

/// A whole number from the environment variable `name`, or `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Text-like data that compresses about 3:1 with LZ4: mostly small numbers
/// and repeated words, one word in four noise. Words come page by page, in
/// order; every benchmark that generates data makes the same words.
pub struct TextLike {
    state: u64,
}

impl TextLike {
    pub fn new() -> TextLike {
        TextLike {
            state: 0x2545_F491_4F6C_DD1D,
        }
    }

    /// The next word: word `word` (0..512) of page `page`.
    pub fn next_word(&mut self, page: usize, word: usize) -> u64 {
        let x = &mut self.state;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        if word.is_multiple_of(4) {
            *x
        } else {
            (*x & 0x0f0f) | ((page as u64) << 32)
        }
    }
}

/// A fresh private anonymous mapping of `pages` pages, without huge pages
/// (as a region's).
pub fn anonymous(pages: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert!(p != libc::MAP_FAILED, "mmap failed");
    // SAFETY: the mapping made above.
    unsafe { libc::madvise(p, pages * PAGE, libc::MADV_NOHUGEPAGE) };
    p.cast()
}

/// A user-mode userfaultfd with `features` (and `extra_flags`, e.g.
/// `O_NONBLOCK`), its API handshake done.
pub fn userfaultfd(features: u64, extra_flags: libc::c_int) -> libc::c_int {
    // SAFETY: plain system calls; the struct matches the kernel's layout
    // (`uffd_abi` checks its size).
    unsafe {
        let uffd = libc::syscall(
            libc::SYS_userfaultfd,
            libc::O_CLOEXEC | extra_flags | UFFD_USER_MODE_ONLY,
        ) as libc::c_int;
        assert!(
            uffd >= 0,
            "userfaultfd: {}",
            std::io::Error::last_os_error()
        );
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        assert_eq!(
            libc::ioctl(uffd, UFFDIO_API as _, &mut api),
            0,
            "UFFDIO_API"
        );
        uffd
    }
}

/// Registers `pages` pages at `start` with `uffd` for missing-page faults.
pub fn register_missing(uffd: libc::c_int, start: *mut u8, pages: usize) {
    let mut register = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: (pages * PAGE) as u64,
        },
        mode: REGISTER_MODE_MISSING,
        ioctls: 0,
    };
    // SAFETY: the struct matches the kernel's layout; the range is a mapping
    // the caller made.
    let registered = unsafe { libc::ioctl(uffd, UFFDIO_REGISTER as _, &mut register) };
    assert_eq!(
        registered,
        0,
        "UFFDIO_REGISTER: {}",
        std::io::Error::last_os_error()
    );
}

/// `UFFDIO_MOVE` of the one page at `src` to `dst`; the ioctl's result (0,
/// or -1 with `errno` set). Async-signal-safe (one ioctl).
pub fn move_page(uffd: libc::c_int, dst: usize, src: usize) -> libc::c_int {
    let mut moved = UffdioMove {
        dst: dst as u64,
        src: src as u64,
        len: PAGE as u64,
        mode: 0,
        moved: 0,
    };
    // SAFETY: the struct matches the kernel's layout (`uffd_abi` checks its
    // size); the kernel checks both addresses and fails the call on a bad one.
    unsafe { libc::ioctl(uffd, UFFDIO_MOVE as _, &mut moved) }
}
