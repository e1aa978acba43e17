//! What a front end's `--backing PATH|URL` names, checked before anything
//! runs, and the tier made from it. One place for every front end (the
//! bench, `zpage run`, the Python and C settings), so each refuses the same
//! things with the same words.
//!
//! A path must be able to hold pages: a new file on a file system with room
//! for the tier's bound, or a block device at least that large and not in
//! use ([`check_path`], [`check_room`]). A Redis URL gets its password from
//! [`BackingOptions::password_file`], else [`PASSWORD_ENV`], else the URL
//! itself, which is warned about (`ps` shows it); the URL is printed only
//! with the password replaced ([`Backing::describe`]).

use crate::packed::{check_path, check_room};
use crate::redis_auth::{self, RedisPassword, RedisTls, PASSWORD_ENV};
use crate::{PackedConfig, PackedTier, RedisConfig, RedisTier, Tier, TierError, TierFile};
use std::path::PathBuf;
use std::sync::Arc;

/// The options that go with `--backing`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackingOptions {
    /// A file holding the Redis password (mode 0600 or stricter).
    pub password_file: Option<PathBuf>,
    /// Certificate files for `rediss://`.
    pub tls: RedisTls,
    /// What becomes of a tier file (a path's backing).
    pub file: TierFile,
}

/// A checked `--backing`.
#[derive(Clone, Debug)]
pub enum Backing {
    /// A packed tier on a new file or a block device.
    Packed {
        /// The path.
        path: PathBuf,
        /// The tier's bound.
        max_bytes: u64,
        /// What becomes of the file, when the path is a new file.
        file: TierFile,
    },
    /// A Redis server or cluster (the password is apart from the URL).
    Redis(RedisConfig),
}

impl Backing {
    /// Parses and checks `text` for a tier that may take up to `max_bytes`
    /// (a packed tier's bound; a Redis server's room is its own business).
    /// Every problem is an error naming it and the fix; none quotes a
    /// password.
    pub fn parse(
        text: &str,
        options: &BackingOptions,
        max_bytes: u64,
    ) -> Result<Backing, TierError> {
        if RedisConfig::is_redis_url(text) {
            return Self::parse_redis(text, options).map(Backing::Redis);
        }
        if options.password_file.is_some() || options.tls.any() {
            return Err(TierError::InvalidConfig(format!(
                "{text} is a path, not a Redis URL: a password file and TLS files go with redis:// or rediss:// backings only"
            )));
        }
        let path = PathBuf::from(text);
        check_path(&path, max_bytes)?;
        check_room(&path, max_bytes)?;
        Ok(Backing::Packed {
            path,
            max_bytes,
            file: options.file,
        })
    }

    fn parse_redis(text: &str, options: &BackingOptions) -> Result<RedisConfig, TierError> {
        let split = redis_auth::split_password(text)?;
        let apart = match &options.password_file {
            Some(file) => Some(RedisPassword::from_file(file)?),
            None => RedisPassword::from_env()?,
        };
        let password = match (split.password, apart) {
            (Some(_), Some(_)) => {
                let source = match &options.password_file {
                    Some(file) => format!("in {}", file.display()),
                    None => PASSWORD_ENV.to_string(),
                };
                return Err(TierError::InvalidConfig(format!(
                    "{}: the Redis password is in the URL and in {source}: give it once, not in the URL (`ps` shows it)",
                    redis_auth::redact_url(text)
                )));
            }
            (Some(in_url), None) => {
                eprintln!(
                    "zpage: warning: the Redis password is written in the backing URL, where `ps` shows it to every user of this machine: give it in {PASSWORD_ENV} or in a password file (mode 0600) instead"
                );
                Some(in_url)
            }
            (None, apart) => apart,
        };
        let mut config = RedisConfig::new(split.url);
        config.password = password;
        config.tls = options.tls.clone();
        config.validate()?;
        Ok(config)
    }

    /// What it is, as it may be printed (a password shown as `***`).
    pub fn describe(&self) -> String {
        match self {
            Backing::Packed { path, .. } => path.display().to_string(),
            Backing::Redis(config) => redis_auth::show(&config.url, config.password.is_some()),
        }
    }

    /// The tier.
    pub fn open(&self) -> Result<Arc<dyn Tier>, TierError> {
        Ok(match self {
            Backing::Packed {
                path,
                max_bytes,
                file,
            } => Arc::new(PackedTier::new(PackedConfig {
                file: *file,
                ..PackedConfig::new(path, *max_bytes)
            })?),
            Backing::Redis(config) => Arc::new(RedisTier::new(config.clone())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        Backing::parse(text, &BackingOptions::default(), 8 << 20)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn paths_that_cannot_hold_pages_are_refused_naming_why() {
        assert!(refusal("/dev/null").contains("character device"));
        assert!(refusal("/dev/zero").contains("character device"));
        assert!(refusal("/tmp").contains("is a directory"));
        let dir = std::env::temp_dir().join(format!("zpage-backing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert!(refusal(fifo.to_str().unwrap()).contains("FIFO"));
        let socket = dir.join("socket");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert!(refusal(socket.to_str().unwrap()).contains("socket"));
        let file = dir.join("precious");
        std::fs::write(&file, b"keep me").unwrap();
        assert!(refusal(file.to_str().unwrap()).contains("never overwrites"));
        assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(refusal(link.to_str().unwrap()).contains("symbolic link"));
        let dangling = dir.join("dangling");
        std::os::unix::fs::symlink(dir.join("nothing"), &dangling).unwrap();
        assert!(refusal(dangling.to_str().unwrap()).contains("symbolic link to nothing"));
        // Room: no file system here has an exabyte free.
        let new = dir.join("tier");
        let err = Backing::parse(new.to_str().unwrap(), &BackingOptions::default(), 1 << 60)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bytes free, less than"), "{err}");
        let ok =
            Backing::parse(new.to_str().unwrap(), &BackingOptions::default(), 8 << 20).unwrap();
        assert!(!new.exists(), "parsing creates nothing");
        drop(ok);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redis_options_do_not_go_with_a_path() {
        let options = BackingOptions {
            password_file: Some("/nonexistent".into()),
            ..Default::default()
        };
        let err = Backing::parse("/var/tmp/tier", &options, 8 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a Redis URL"), "{err}");
    }
}
