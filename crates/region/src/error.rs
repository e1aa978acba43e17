//! Errors: each one names the problem and the fix.
use thiserror::Error;

/// Everything that can go wrong creating or driving a [`crate::Region`].
#[derive(Debug, Error)]
pub enum RegionError {
    /// The kernel refused to create a userfaultfd.
    #[error("userfaultfd is not available ({errno}): {fix}")]
    UffdUnavailable {
        /// What the kernel said.
        errno: String,
        /// How to get one.
        fix: &'static str,
    },
    /// The kernel lacks a userfaultfd feature zpage needs.
    #[error("the kernel lacks userfaultfd features {missing:#x} (has {available:#x}): zpage needs Linux >= 6.8 (UFFDIO_MOVE) with CONFIG_USERFAULTFD")]
    FeaturesMissing {
        /// Feature bits asked for but not offered.
        missing: u64,
        /// What the kernel offers.
        available: u64,
    },
    /// A configuration value that cannot work.
    #[error("invalid region configuration: {0}")]
    InvalidConfig(String),
    /// A range outside the region, or not page-aligned.
    #[error("range {offset:#x}+{len:#x} is not inside the region of {size:#x} bytes (offsets and lengths are rounded out to 4 KiB pages)")]
    OutOfRange {
        /// Start of the range.
        offset: usize,
        /// Its length.
        len: usize,
        /// The region size.
        size: usize,
    },
    /// A system call failed.
    #[error("{call} failed: {errno}")]
    Sys {
        /// Which call.
        call: &'static str,
        /// What the kernel said.
        errno: String,
    },
    /// The codec could not be set up.
    #[error("codec: {0}")]
    Codec(#[from] zpage_codec::CodecError),
    /// The compressed store could not be set up.
    #[error("store: {0}")]
    Store(#[from] zpage_store::StoreError),
    /// Too many live regions for the signal handler's fixed table.
    #[error("at most {0} regions may be live at once: drop one first")]
    TooManyRegions(usize),
    /// Pinning would leave the reclaimer nothing to work with.
    #[error("pinning {requested} more bytes would pin {total} bytes, more than half the budget ({budget} bytes): raise budget_bytes or pin less")]
    PinExceedsBudget {
        /// Bytes in this request.
        requested: usize,
        /// Pinned bytes after it.
        total: usize,
        /// The budget.
        budget: usize,
    },
    /// `unpin` on a page that is not pinned.
    #[error("page at offset {0:#x} is not pinned")]
    NotPinned(usize),
    /// The uffd was closed behind zpage's back (a close-all-fds loop, exec).
    #[error("the region's userfaultfd (fd {0}) was closed by the program: evicted pages can no longer be restored (touching one ends the process with a message naming it); make a fresh region, and do not close file descriptors you did not open")]
    UffdLost(i32),
    /// The object was inherited by a child process across fork().
    #[error("this region belongs to process {owner}; after fork() the child holds plain memory (its budget, in the handler-thread mode or with a tier below RAM, restored every page before the fork) and the region's machinery stays with the parent")]
    ForkedChild {
        /// The process that created the region.
        owner: i32,
    },
    /// The program unmapped (munmap / mmap MAP_FIXED / mremap) part of the region.
    #[error("the program unmapped or moved part of the region ({0}): the region is closed; its compressed pages were freed")]
    Unmapped(String),
    /// A feature of this build that is not available in this mode.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl RegionError {
    pub(crate) fn sys(call: &'static str, errno: crate::sys::Errno) -> Self {
        RegionError::Sys {
            call,
            errno: errno.to_string(),
        }
    }
}
