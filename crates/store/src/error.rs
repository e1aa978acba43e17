use thiserror::Error;
use zpage_codec::CodecError;
use zpage_pool::PoolError;

/// Errors from the compressed page store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// No page is stored under this key.
    #[error("no page stored under key {0}")]
    NotFound(u64),
    /// Building a codec, or decoding a stored blob, failed.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The pool refused or lost an object.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A stored page could not be read back.
    #[error("the stored page cannot be read: {0}")]
    Load(#[from] crate::LoadError),
    /// A worker made for another store was used with this one.
    #[error(
        "this worker belongs to another store: create one with Store::worker on the store you call"
    )]
    ForeignWorker,
    /// The backing file failed.
    #[error("backing file {path}: {action} failed: {source} (check the disk and the file's permissions; pages stay in memory)")]
    Backing {
        /// The file.
        path: std::path::PathBuf,
        /// What was being done.
        action: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The backing file has no free slot.
    #[error("backing file {path} is full: give it a larger max_bytes; pages stay in memory")]
    BackingFull {
        /// The file.
        path: std::path::PathBuf,
    },
    /// A page read back from the backing file does not match its checksum.
    #[error("backing file {path}: slot {slot} does not match its checksum (the file was modified or the disk is failing); the page is not returned")]
    BackingCorrupt {
        /// The file.
        path: std::path::PathBuf,
        /// The slot.
        slot: u32,
    },
    /// A configuration value that cannot work.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
}

impl StoreError {
    pub(crate) fn backing(
        path: &std::path::Path,
        action: &'static str,
        source: std::io::Error,
    ) -> Self {
        StoreError::Backing {
            path: path.to_path_buf(),
            action,
            source,
        }
    }
}

/// Result with a [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;
