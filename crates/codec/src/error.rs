use thiserror::Error;

/// Errors from building codecs and from decoding blobs.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The codec name is not one zpage knows.
    #[error("unknown codec '{name}': use one of {known}")]
    UnknownCodec {
        /// What was asked for.
        name: String,
        /// The accepted spellings.
        known: &'static str,
    },
    /// A level outside what the codec accepts.
    #[error("{codec} does not accept level {level}: use a level from {min} to {max}")]
    InvalidLevel {
        /// The codec family.
        codec: &'static str,
        /// What was asked for.
        level: i32,
        /// Lowest accepted.
        min: i32,
        /// Highest accepted.
        max: i32,
    },
    /// A reject threshold that makes no sense for a 4 KiB page.
    #[error("reject threshold {0} is not usable: give bytes from 64 to 4096, or a percentage from 2% to 100%")]
    InvalidThreshold(String),
    /// The blob does not decode to exactly one page.
    ///
    /// Every field is `Copy` and owns nothing: this error is built on the
    /// fault path, which may run in a signal handler that interrupted `malloc`.
    #[error("corrupt {codec} blob of {blob_len} bytes: {reason}")]
    Corrupt {
        /// The codec that rejected the blob.
        codec: &'static str,
        /// Length of the blob that was given.
        blob_len: usize,
        /// What went wrong.
        reason: Corruption,
    },
    /// A compressor reported an internal failure (not a poor ratio, which is an outcome).
    #[error("{codec} compression failed: {reason}")]
    CompressFailed {
        /// The codec.
        codec: &'static str,
        /// What the compressor said.
        reason: String,
    },
    /// Dictionary training failed.
    #[error("zstd dictionary training failed: {0} (give more, and more varied, sample pages)")]
    DictionaryTraining(String),
    /// A dictionary was required but not given, or given to a codec that cannot use it.
    #[error("{0}")]
    Dictionary(String),
}

/// Why a blob did not decode to one page (the `reason` of [`CodecError::Corrupt`]).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// The decompressor refused the blob, in its own words (zstd's error name,
    /// or what `lz4_flex` or liblz4 reports).
    #[error("{0}")]
    Rejected(&'static str),
    /// The blob decoded without error, but to this many bytes instead of one page.
    #[error("decoded {0} bytes, not one page")]
    WrongLength(usize),
}

/// Result with a [`CodecError`].
pub type Result<T> = std::result::Result<T, CodecError>;
