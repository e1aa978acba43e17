//! The one error type of this crate.

/// Result of pool operations.
pub type Result<T> = std::result::Result<T, PoolError>;

/// The blob lengths every pool accepts: 1 to `PAGE_SIZE` bytes.
pub(crate) fn check_blob_len(len: usize) -> Result<()> {
    if len == 0 {
        return Err(PoolError::EmptyBlob);
    }
    if len > crate::PAGE_SIZE {
        return Err(PoolError::BlobTooLarge {
            len,
            max: crate::PAGE_SIZE,
        });
    }
    Ok(())
}

/// Everything a pool can refuse. Every variant leaves the pool unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// `store` was given zero bytes; an empty page is a same-filled page and
    /// should be recorded by the caller without touching the pool.
    #[error("cannot store an empty blob: record empty or same-filled pages without the pool")]
    EmptyBlob,

    /// `store` was given more than a page; the caller should have stored the
    /// page uncompressed (at most `PAGE_SIZE` bytes).
    #[error(
        "blob of {len} bytes is larger than a {max} byte page: store the page uncompressed instead"
    )]
    BlobTooLarge {
        /// Length of the rejected blob.
        len: usize,
        /// Largest length the pool accepts (`PAGE_SIZE`).
        max: usize,
    },

    /// The handle was not issued by this pool (another pool instance or
    /// design, or a corrupted raw value).
    #[error(
        "handle {raw:#018x} was not issued by this {pool} pool: pass handles only to the pool that returned them"
    )]
    ForeignHandle {
        /// The handle's raw value.
        raw: u64,
        /// Name of the pool that rejected it.
        pool: &'static str,
    },

    /// The handle was issued by this pool but its object has been freed
    /// (double free or use after free).
    #[error(
        "handle {raw:#018x} refers to an object that was already freed: drop handles once they are passed to free"
    )]
    StaleHandle {
        /// The handle's raw value.
        raw: u64,
    },

    /// The kernel refused the memory for new pages (out of address space,
    /// or over the machine's commit limit).
    #[error("no memory for {pages} more pages of the pool: the kernel refused it (address space or commit limit)")]
    OutOfMemory {
        /// The pages asked for.
        pages: usize,
    },

    /// A pool kind name was not recognised.
    #[error("unknown pool kind {given:?}: choose one of {choices}")]
    UnknownKind {
        /// The text that failed to parse.
        given: String,
        /// Every accepted spelling, comma-separated.
        choices: String,
    },
}
