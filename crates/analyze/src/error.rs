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
    #[error("{path} is {kind}, not a regular file: a device or pipe (such as /dev/zero) has no end to read to; give --size to read that many bytes from it")]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// A device or pipe ended before the size given.
    #[error("{path} ended after {read_bytes} bytes, before the {size} bytes --size asked for (a pipe ends when its writer closes it, at once if it has none): give a smaller --size, or start the writer first")]
    ImageEndedEarly {
        /// The path.
        path: PathBuf,
        /// Bytes read before the end.
        read_bytes: u64,
        /// Bytes asked for.
        size: u64,
    },
    /// A pipe or socket that the analysis would have to read more than once.
    #[error("{label} is a pipe or socket: its bytes can be read only once, but this analysis reads the memory again for each codec, once more to train zstd-dict's dictionary, and once per zram algorithm with --kernel: give one --codec other than zstd-dict and no --kernel, or copy it to a file first (cat PIPE > image.bin) and analyse that")]
    ReadOnce {
        /// The source's label (its path).
        label: String,
    },
    /// The image file to write exists already (or a link sits at its path).
    #[error("{path} already exists (a file, or a symbolic link): zpage writes memory images only to a new file it creates itself, readable by you alone (mode 0600), never through a link; remove it first (rm {path}) or give another path")]
    ImageExists {
        /// The path.
        path: PathBuf,
    },
    /// No such process.
    #[error("no process with PID {pid}: check the PID with `ps` (it may have exited)")]
    NoSuchProcess {
        /// The PID asked for.
        pid: u32,
    },
    /// A kernel thread: it has no user memory.
    #[error("PID {pid} ({command}) is a kernel thread: it has no user memory to analyse; give the PID of a user process")]
    KernelThread {
        /// The PID.
        pid: u32,
        /// Its name.
        command: String,
    },
    /// A process that has exited and waits for its parent to reap it.
    #[error("PID {pid} ({command}) has exited (a zombie its parent has not reaped yet): its memory is gone, there is nothing to analyse")]
    Zombie {
        /// The PID.
        pid: u32,
        /// Its name.
        command: String,
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
