//! Redis credentials and TLS files, and URLs that are safe to print.
//!
//! A password can come from three places, checked in this order by
//! [`RedisPassword::from_file`] and [`RedisPassword::from_env`] and by
//! the URL itself:
//!
//! - a file (`--backing-password-file FILE`): read once, refused when it is
//!   not a regular file owned by this user (or root), or when its mode lets
//!   anyone else read or write it (fix: `chmod 600 FILE`), as ssh does with
//!   its keys. One line; a trailing newline is dropped.
//! - the environment variable [`PASSWORD_ENV`]: not shown by `ps` (only the
//!   process's owner and root can read `/proc/PID/environ`).
//! - the URL (`redis://:PASSWORD@host`): still accepted, but anyone on the
//!   machine sees it in `ps`; front ends warn about it.
//!
//! However it came, the password leaves the URL before anything is made of
//! it: the client is given the URL without it and the password apart, the
//! tier's description (every "tier is down" line, every error) shows
//! `***` in its place ([`redact_url`]), and [`RedisPassword`]'s `Debug`
//! prints nothing of it.

use crate::TierError;
use secrecy::{ExposeSecret, SecretString};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The environment variable a Redis tier's password may come from.
pub const PASSWORD_ENV: &str = "ZPAGE_REDIS_PASSWORD";

/// What a printed URL shows where its password was.
pub const PASSWORD_MARK: &str = "***";

/// A password file larger than this is not a password file.
const MAX_PASSWORD_FILE_BYTES: u64 = 4096;

/// The URL scheme that names a cluster's seed nodes.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// A cluster over TLS: recognised, and refused as not supported yet.
pub(crate) const TLS_CLUSTER_SCHEME: &str = "rediss+cluster://";

/// A Redis password. Its `Debug` prints `REDACTED`; it has no `Display`;
/// its memory is zeroed when dropped (copies the `redis` crate keeps for
/// reconnecting are its own).
#[derive(Clone)]
pub struct RedisPassword(SecretString);

impl std::fmt::Debug for RedisPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisPassword(REDACTED)")
    }
}

impl RedisPassword {
    /// A password given in code.
    pub fn new(password: impl Into<String>) -> RedisPassword {
        RedisPassword(SecretString::from(password.into()))
    }

    pub(crate) fn expose(&self) -> &str {
        self.0.expose_secret()
    }

    /// The password in [`PASSWORD_ENV`], if set. Set but empty, or not
    /// UTF-8, is an error naming the variable (never its value).
    pub fn from_env() -> Result<Option<RedisPassword>, TierError> {
        match std::env::var(PASSWORD_ENV) {
            Ok(value) if value.is_empty() => Err(TierError::InvalidConfig(format!(
                "{PASSWORD_ENV} is set but empty: give the Redis password in it, or unset it"
            ))),
            Ok(value) => Ok(Some(RedisPassword::new(value))),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(TierError::InvalidConfig(format!(
                "{PASSWORD_ENV} is not UTF-8: Redis passwords are text"
            ))),
        }
    }

    /// The password in `path`: a regular file owned by this user (or root)
    /// that nobody else may read or write, holding one line.
    pub fn from_file(path: &Path) -> Result<RedisPassword, TierError> {
        let problem = |why: String| {
            TierError::InvalidConfig(format!("Redis password file {}: {why}", path.display()))
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            // A FIFO planted at the path must not block us.
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
            .map_err(|e| problem(format!("cannot be opened: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| problem(format!("cannot be examined: {e}")))?;
        private_regular_file(&meta).map_err(problem)?;
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_PASSWORD_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        if bytes.len() as u64 > MAX_PASSWORD_FILE_BYTES {
            return Err(problem(format!(
                "is larger than {MAX_PASSWORD_FILE_BYTES} bytes: give a file holding only the password"
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| problem("is not UTF-8 text: Redis passwords are text".into()))?;
        let line = text
            .strip_suffix('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .unwrap_or(&text);
        if line.is_empty() {
            return Err(problem("is empty: write the password in it".into()));
        }
        if line.contains('\n') {
            return Err(problem(
                "holds more than one line: give a file holding only the password".into(),
            ));
        }
        Ok(RedisPassword::new(line))
    }
}

/// Why a file holding a secret may not be trusted, if it may not: it must
/// be a regular file owned by this user or root, unreadable and unwritable
/// by anyone else.
pub(crate) fn private_regular_file(meta: &std::fs::Metadata) -> Result<(), String> {
    if !meta.file_type().is_file() {
        return Err("is not a regular file".into());
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Err(format!(
            "belongs to user {}, not to you (user {me}) or root: use a file of your own",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "has mode {mode:04o}: others may read or change it; make it private (chmod 600)"
        ));
    }
    Ok(())
}

/// Files for a `rediss://` connection, PEM-encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// The certificate authorities the server's certificate is checked
    /// against, instead of the system's store (which is used without it).
    pub ca_file: Option<PathBuf>,
    /// A client certificate, for servers that ask for one
    /// (`tls-auth-clients yes`, Redis's default); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key: a private file (checked as the
    /// password file is).
    pub key_file: Option<PathBuf>,
}

impl RedisTls {
    /// Whether any file is named.
    pub fn any(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some() || self.key_file.is_some()
    }

    /// The certificates as the `redis` crate takes them.
    pub(crate) fn certificates(&self) -> Result<redis::TlsCertificates, TierError> {
        let read = |what: &str, path: &Path, private: bool| {
            let problem =
                |why: String| TierError::InvalidConfig(format!("{what} {}: {why}", path.display()));
            let meta = std::fs::metadata(path).map_err(|e| problem(e.to_string()))?;
            if private {
                private_regular_file(&meta).map_err(problem)?;
            }
            std::fs::read(path).map_err(|e| problem(e.to_string()))
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read("TLS client certificate", cert, false)?,
                client_key: read("TLS client key", key, true)?,
            }),
            (None, None) => None,
            _ => {
                return Err(TierError::InvalidConfig(
                    "a TLS client certificate needs both its certificate and its key file".into(),
                ))
            }
        };
        let root_cert = match &self.ca_file {
            Some(ca) => Some(read("TLS CA file", ca, false)?),
            None => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}

/// A Redis URL with its password taken out.
#[derive(Debug)]
pub(crate) struct SplitUrl {
    /// The URL without the password: given to the client, and printed
    /// (with [`PASSWORD_MARK`] in the password's place, [`show`]).
    pub url: String,
    pub password: Option<RedisPassword>,
}

/// Takes the password out of `text`: the userinfo of a TCP or cluster URL
/// (`redis://user:PASSWORD@host`), or the `pass` query parameter of a Unix
/// socket URL (`redis+unix:///path?pass=PASSWORD`), as the `redis` crate
/// reads them, percent-decoded. Errors never quote the URL.
pub(crate) fn split_password(text: &str) -> Result<SplitUrl, TierError> {
    if text.starts_with(TLS_CLUSTER_SCHEME) {
        return Err(TierError::InvalidConfig(format!(
            "{TLS_CLUSTER_SCHEME}: TLS to a Redis Cluster is not supported yet: use rediss:// to one server, or {CLUSTER_SCHEME} on a network you trust"
        )));
    }
    if let Some(rest) = text.strip_prefix(CLUSTER_SCHEME) {
        // A list of hosts is not a URL the url crate parses ("h1:1,h2:2"
        // is no host), so the userinfo is cut off by hand.
        let Some((userinfo, hosts)) = rest.rsplit_once('@') else {
            return Ok(SplitUrl {
                url: text.to_string(),
                password: None,
            });
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(decode(password)?)),
            None => (userinfo, None),
        };
        let url = if user.is_empty() {
            format!("{CLUSTER_SCHEME}{hosts}")
        } else {
            format!("{CLUSTER_SCHEME}{user}@{hosts}")
        };
        return Ok(SplitUrl { url, password });
    }
    let mut url = url::Url::parse(text).map_err(|e| {
        TierError::InvalidConfig(format!(
            "{} is not a URL ({e}): give redis://HOST:PORT[/DB], rediss://HOST:PORT, redis+unix:///PATH or {CLUSTER_SCHEME}HOST:PORT,HOST:PORT,...",
            redact_unparsed(text)
        ))
    })?;
    let password = if url.host().is_some() {
        let password = url.password().map(decode).transpose()?;
        if password.is_some() {
            // Cannot fail: the URL has a host.
            let _ = url.set_password(None);
        }
        password
    } else {
        let mut password = None;
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter_map(|(k, v)| {
                if k == "pass" {
                    password = Some(RedisPassword::new(v.into_owned()));
                    None
                } else {
                    Some((k.into_owned(), v.into_owned()))
                }
            })
            .collect();
        if password.is_some() {
            if kept.is_empty() {
                url.set_query(None);
            } else {
                url.query_pairs_mut().clear().extend_pairs(kept);
            }
        }
        password
    };
    Ok(SplitUrl {
        url: url.to_string(),
        password,
    })
}

fn decode(encoded: &str) -> Result<RedisPassword, TierError> {
    percent_encoding::percent_decode_str(encoded)
        .decode_utf8()
        .map(|p| RedisPassword::new(p.into_owned()))
        .map_err(|_| {
            TierError::InvalidConfig(
                "the password in the Redis URL is not UTF-8 once percent-decoded".into(),
            )
        })
}

/// `url` (without a password) as printed when the tier has a password:
/// [`PASSWORD_MARK`] where the password goes.
pub(crate) fn show(url: &str, has_password: bool) -> String {
    if !has_password {
        return url.to_string();
    }
    if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
        return match rest.rsplit_once('@') {
            Some((user, hosts)) => format!("{CLUSTER_SCHEME}{user}:{PASSWORD_MARK}@{hosts}"),
            None => format!("{CLUSTER_SCHEME}:{PASSWORD_MARK}@{rest}"),
        };
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_string();
    };
    if parsed.host().is_some() {
        let _ = parsed.set_password(Some(PASSWORD_MARK));
    } else {
        parsed.query_pairs_mut().append_pair("pass", PASSWORD_MARK);
    }
    parsed.to_string()
}

/// `text` as it may be printed: a Redis URL's password replaced by
/// [`PASSWORD_MARK`] (the user is kept); a path, or anything without a
/// password, as it is. Text that looks like a URL but does not parse has
/// everything between `://` and its last `@` replaced.
pub fn redact_url(text: &str) -> String {
    if !text.contains("://") {
        return text.to_string();
    }
    match split_password(text) {
        Ok(split) => show(&split.url, split.password.is_some()),
        Err(_) => redact_unparsed(text),
    }
}

/// Text that does not parse as a URL with everything between `://` and
/// its last `@` (the userinfo, if any) replaced.
fn redact_unparsed(text: &str) -> String {
    match (text.find("://"), text.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}{PASSWORD_MARK}{}", &text[..start + 3], &text[at..])
        }
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> (String, Option<String>) {
        let s = split_password(text).unwrap();
        (s.url, s.password.map(|p| p.expose().to_string()))
    }

    #[test]
    fn passwords_leave_every_kind_of_url() {
        assert_eq!(
            split("redis://:s3cr%40t@10.0.0.1:6379/2"),
            ("redis://10.0.0.1:6379/2".into(), Some("s3cr@t".into()))
        );
        assert_eq!(
            split("rediss://zpage:pw@cache.example:6380"),
            (
                "rediss://zpage@cache.example:6380".into(),
                Some("pw".into())
            )
        );
        assert_eq!(
            split("redis+unix:///run/redis.sock?db=1&pass=pw"),
            (
                "redis+unix:///run/redis.sock?db=1".into(),
                Some("pw".into())
            )
        );
        assert_eq!(
            split("redis+cluster://zpage:pw@h1:7000,h2:7000"),
            (
                "redis+cluster://zpage@h1:7000,h2:7000".into(),
                Some("pw".into())
            )
        );
        assert_eq!(
            split("redis://127.0.0.1:6379"),
            ("redis://127.0.0.1:6379".into(), None)
        );
    }

    #[test]
    fn printed_urls_keep_the_user_and_hide_the_password() {
        for (text, shown) in [
            ("redis://:hunter2@h:1", "redis://:***@h:1"),
            ("redis://me:hunter2@h:1/3", "redis://me:***@h:1/3"),
            ("redis+unix:///s?pass=hunter2", "redis+unix:///s?pass=***"),
            (
                "redis+cluster://me:hunter2@a:1,b:2",
                "redis+cluster://me:***@a:1,b:2",
            ),
            ("redis://me@h:1", "redis://me@h:1"),
            ("/var/tmp/tier", "/var/tmp/tier"),
            // Not a URL the parser takes: all of the userinfo goes.
            ("redis://me:hunter2@h:99999999", "redis://***@h:99999999"),
        ] {
            assert_eq!(redact_url(text), shown, "{text}");
            assert!(!redact_url(text).contains("hunter2"));
        }
        let password = RedisPassword::new("hunter2");
        assert!(!format!("{password:?}").contains("hunter2"));
    }

    #[test]
    fn a_password_file_must_be_private_and_hold_one_line() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("zpage-pwfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pw");
        std::fs::write(&path, "hunter2\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = RedisPassword::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("mode 0644") && err.contains("chmod 600"),
            "{err}"
        );
        assert!(!err.contains("hunter2"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(RedisPassword::from_file(&path).unwrap().expose(), "hunter2");
        std::fs::write(&path, "a\nb\n").unwrap();
        let err = RedisPassword::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("more than one line"), "{err}");
        std::fs::write(&path, "").unwrap();
        assert!(RedisPassword::from_file(&path).is_err());
        let err = RedisPassword::from_file(&dir).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
