use std::path::{Path, PathBuf};

/// Everything that can go wrong while benchmarking.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or kernel interface could not be used.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// What we were doing.
        action: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An argument or input that cannot be benchmarked.
    #[error("{0}")]
    Invalid(String),
    /// The machine is not in a state we may change (e.g. zram0 already in use).
    #[error("refusing to touch the machine's swap setup: {0}")]
    MachineBusy(String),
    /// A kernel tier's child process failed.
    #[error("kernel tier {tier}: {message}")]
    KernelTier {
        /// The tier (e.g. "zram-lz4").
        tier: String,
        /// What happened.
        message: String,
    },
    /// The zpage region refused something.
    #[error("zpage region: {0}")]
    Region(String),
    /// The run was interrupted (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// Reading or changing the kernel's swap, zram or zswap state failed.
    #[error(transparent)]
    Kernel(#[from] zpage_kernel::KernelError),
    /// Restoring the machine's state failed; the message lists what is left to fix by hand.
    #[error("could not fully restore the machine's swap state: {0}")]
    Restore(String),
}

impl BenchError {
    pub(crate) fn io(path: impl AsRef<Path>, action: &str, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.as_ref().to_path_buf(),
            action: action.to_string(),
            source,
        }
    }
}
