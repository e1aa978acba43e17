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
        "this worker belongs to another store: create one with PageStore::worker on the store you call"
    )]
    ForeignWorker,
    /// Writing to the tier below RAM failed; the page stays in memory.
    #[error(transparent)]
    Tier(#[from] zpage_tier::TierError),
    /// A configuration value that cannot work.
    #[error("invalid store configuration: {0}")]
    InvalidConfig(String),
}

/// Result with a [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;
