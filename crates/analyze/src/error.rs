use std::path::PathBuf;
use thiserror::Error;

/// Errors from reading memory and analysing it.
#[derive(Debug, Error)]
pub enum AnalyzeError {
    /// A memory image file could not be read.
    #[error("cannot read memory image {path}: {source} (check the path and that you may read it)")]
    ImageUnreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A memory image with not even one whole page.
    #[error("memory image {path} holds no whole 4096-byte page ({bytes} bytes): give a raw dump of whole pages")]
    ImageTooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// A device or pipe given without a size.
    #[error("{path} is not a regular file: a device or pipe (such as /dev/zero) has no end to read to; give --size to read that many bytes from it")]
    NotARegularFile {
        /// The path.
        path: PathBuf,
    },
    /// No such process.
    #[error("no process with PID {pid}: check the PID with `ps` (it may have exited)")]
    NoSuchProcess {
        /// The PID asked for.
        pid: u32,
    },
    /// The process exists but its memory may not be read.
    #[error("may not read the memory of PID {pid} ({path}: {source}): reading another user's process needs root or CAP_SYS_PTRACE; your own processes need kernel.yama.ptrace_scope <= 1")]
    ProcessUnreadable {
        /// The PID.
        pid: u32,
        /// The /proc file that refused.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Reading a /proc file failed for another reason.
    #[error("reading {path} failed: {source}")]
    Proc {
        /// The /proc file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A codec could not be built.
    #[error(transparent)]
    Codec(#[from] zpage_codec::CodecError),
    /// The pool refused a blob.
    #[error(transparent)]
    Pool(#[from] zpage_pool::PoolError),
    /// The kernel comparison failed.
    #[error(transparent)]
    Kernel(#[from] zpage_kernel::KernelError),
    /// Writing a captured image failed.
    #[error("cannot write image {path}: {source}")]
    ImageWrite {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The analysis was asked to do nothing.
    #[error("{0}")]
    Invalid(String),
}

/// Result with an [`AnalyzeError`].
pub type Result<T> = std::result::Result<T, AnalyzeError>;
