//! The userfaultfd ABI as Linux 6.18 defines it (`include/uapi/linux/userfaultfd.h`):
//! ioctl numbers, feature and mode bits, and the argument layouts, each
//! checked against the size its ioctl number encodes. The system headers
//! predate `UFFDIO_MOVE` and `UFFDIO_POISON`, so they are spelled out here,
//! once: the crate's `sys` wrappers and the `move_cost` bench use them.
//! Plain numbers and `repr(C)` structs; no code.

pub const UFFD_API: u64 = 0xAA;
pub const UFFD_USER_MODE_ONLY: i32 = 1;
pub const UFFDIO_API: u64 = 0xc018_aa3f;
pub const UFFDIO_REGISTER: u64 = 0xc020_aa00;
pub const UFFDIO_UNREGISTER: u64 = 0x8010_aa01;
pub const UFFDIO_WAKE: u64 = 0x8010_aa02;
pub const UFFDIO_COPY: u64 = 0xc028_aa03;
pub const UFFDIO_ZEROPAGE: u64 = 0xc020_aa04;
pub const UFFDIO_MOVE: u64 = 0xc028_aa05;
pub const UFFDIO_WRITEPROTECT: u64 = 0xc018_aa06;
pub const UFFDIO_POISON: u64 = 0xc020_aa08;
pub const COPY_MODE_WP: u64 = 2;
pub const PAGEFAULT_FLAG_WP: u64 = 1 << 1;
pub const USERFAULTFD_IOC_NEW: u64 = 0xaa00;

pub const FEATURE_EVENT_REMAP: u64 = 1 << 2;
pub const FEATURE_EVENT_REMOVE: u64 = 1 << 3;
pub const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
pub const FEATURE_SIGBUS: u64 = 1 << 7;
pub const FEATURE_POISON: u64 = 1 << 14;
pub const FEATURE_MOVE: u64 = 1 << 16;

pub const REGISTER_MODE_MISSING: u64 = 1;
pub const REGISTER_MODE_WP: u64 = 2;

pub const EVENT_PAGEFAULT: u8 = 0x12;
pub const EVENT_REMAP: u8 = 0x14;
pub const EVENT_REMOVE: u8 = 0x15;
pub const EVENT_UNMAP: u8 = 0x16;
pub const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioZeropage {
    pub range: UffdioRange,
    pub mode: u64,
    pub zeropage: i64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioMove {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub moved: i64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioPoison {
    pub range: UffdioRange,
    pub mode: u64,
    pub updated: i64,
}

#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// The size an ioctl request number encodes (bits 16-29 of `_IOC`).
pub const fn ioctl_size(request: u64) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

// Every ioctl number above carries the size of its argument; a struct that
// does not match would make the kernel read or write the wrong bytes.
const _: () = {
    use std::mem::size_of;
    assert!(ioctl_size(UFFDIO_API) == size_of::<UffdioApi>());
    assert!(ioctl_size(UFFDIO_REGISTER) == size_of::<UffdioRegister>());
    assert!(ioctl_size(UFFDIO_UNREGISTER) == size_of::<UffdioRange>());
    assert!(ioctl_size(UFFDIO_WAKE) == size_of::<UffdioRange>());
    assert!(ioctl_size(UFFDIO_COPY) == size_of::<UffdioCopy>());
    assert!(ioctl_size(UFFDIO_ZEROPAGE) == size_of::<UffdioZeropage>());
    assert!(ioctl_size(UFFDIO_MOVE) == size_of::<UffdioMove>());
    assert!(ioctl_size(UFFDIO_WRITEPROTECT) == size_of::<UffdioWriteprotect>());
    assert!(ioctl_size(UFFDIO_POISON) == size_of::<UffdioPoison>());
    assert!(size_of::<UffdMsgRaw>() == UFFD_MSG_BYTES);
};

/// Bytes of one `struct uffd_msg`.
pub const UFFD_MSG_BYTES: usize = 32;
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct UffdMsgRaw {
    pub event: u8,
    pub reserved: [u8; 7],
    pub args: [u64; 3],
}
