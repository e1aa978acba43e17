//! `--backing` and the options that go with it, as every subcommand with a
//! tier below RAM takes them, checked into a `zpage_store::Backing` before
//! anything runs.

use anyhow::Result;
use std::path::PathBuf;

/// Where a region writes its oldest compressed pages back, and how it gets in.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackingArgs {
    /// Where the region writes its oldest compressed pages back: a new file
    /// (created mode 0600, removed at exit; an existing file, a link, a
    /// character device such as /dev/null, a FIFO or a directory is refused)
    /// or a block device not in use (PATH), a Redis server
    /// (redis://[USER@]HOST:PORT[/DB], rediss://... for TLS) or a Redis
    /// Cluster (redis+cluster://HOST:PORT,HOST:PORT,...). Encrypted and
    /// authenticated with a per-process key: unreadable after the run. The
    /// Redis password goes in $ZPAGE_REDIS_PASSWORD or
    /// --backing-password-file, not in the URL (`ps` shows it). Needs
    /// --pool-max.
    #[arg(long, value_name = "PATH|URL", requires = "pool_max")]
    pub backing: Option<String>,
    /// A file holding the Redis password (one line; refused unless private:
    /// chmod 600).
    #[arg(long, value_name = "FILE", requires = "backing")]
    pub backing_password_file: Option<PathBuf>,
    /// For rediss://: the CA certificate(s) (PEM) the server's certificate
    /// is checked against, instead of the system's store.
    #[arg(long, value_name = "FILE", requires = "backing")]
    pub backing_ca_file: Option<PathBuf>,
    /// For rediss://: a client certificate (PEM), for servers that ask for
    /// one (Redis's tls-auth-clients); needs --backing-key-file.
    #[arg(long, value_name = "FILE", requires = "backing_key_file")]
    pub backing_cert_file: Option<PathBuf>,
    /// For rediss://: the client certificate's private key (PEM; refused
    /// unless private: chmod 600).
    #[arg(long, value_name = "FILE", requires = "backing_cert_file")]
    pub backing_key_file: Option<PathBuf>,
}

impl BackingArgs {
    /// The checked backing for a tier that may take `max_bytes`, or `None`
    /// without `--backing`. Errors name the option, the problem and the
    /// fix, never a password.
    pub fn check(&self, max_bytes: u64) -> Result<Option<zpage_store::Backing>> {
        let Some(text) = &self.backing else {
            return Ok(None);
        };
        let options = zpage_store::BackingOptions {
            password_file: self.backing_password_file.clone(),
            tls: zpage_store::RedisTls {
                ca_file: self.backing_ca_file.clone(),
                cert_file: self.backing_cert_file.clone(),
                key_file: self.backing_key_file.clone(),
            },
            file: zpage_store::TierFile::RemovedWhenDropped,
        };
        zpage_store::Backing::parse(text, &options, max_bytes)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("--backing {}: {e}", zpage_store::redact_url(text)))
    }
}
