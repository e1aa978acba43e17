//! Sealing: every blob a tier holds is encrypted and authenticated with
//! AES-256-GCM (the `ring` crate, whose AES-NI/VAES and carry-less multiply
//! code seals a 1.5 KiB blob about five times faster than a portable
//! implementation on this kind of CPU: that is what keeps sealing a small
//! share of a tier's time; `cargo bench -p zpage-tier` measures it beside
//! the tier's own work).
//!
//! **Key.** By default a random 256-bit key drawn from the operating system
//! when the tier is made and held only in this process's memory: nothing a
//! tier wrote can be read by anyone after the process ends, which is what a
//! cache of cold pages needs. A tier that must outlive the process (or be
//! shared by two processes) names a key file ([`KeySource::File`]): 32 raw
//! bytes, created with mode 0600 from the operating system's generator when
//! it does not exist.
//!
//! **Nonces, unique by construction.** Each sealer draws a random 128-bit
//! salt and seals with its own subkey, derived from the key with HKDF-SHA256
//! (the salt as HKDF's salt, a fixed label as its info). Its nonces are its
//! blobs' versions: a counter that starts at 1 and that the sealer refuses
//! to wrap, so no two blobs of one sealer share a nonce. Two sealers on one
//! key file (two processes, or one restarted) use different subkeys unless
//! their random salts collide, with probability about n²/2¹²⁹ for n
//! sealers; a 96-bit random nonce under one shared key would instead come
//! within reach of the birthday bound on a busy key file.
//!
//! **Associated data.** Each blob is bound to the page it belongs to (the
//! caller's 64-bit page identity), its version and its length. The tier's
//! index remembers all three; a blob read back is opened with what the index
//! says it should be. A blob moved to another page's place, two blobs
//! swapped, a stale version of the same page replayed, a blob cut short, or a
//! single flipped bit all fail the tag check: the read is an error, never
//! wrong bytes.
//!
//! Opening works in place on the caller's buffer and allocates nothing, so a
//! fault handler can call it. `ring` detects the CPU's features once, the
//! first time a key is made: [`Sealer::new`] does that, so a fault handler
//! never runs the detection (it is not async-signal-safe).

//!
//! **Measuring the cost.** Built with the feature `measure-without-encryption`
//! (never by default), sealing copies the blob and appends a zero tag, and
//! opening checks nothing: the same blob layout and the same tier code
//! without the cipher, so that `zpage bench` built both ways measures what
//! encryption costs ([`SEALING`] names which build is running; such a
//! build warns on stderr when it makes a sealer).

use crate::{ReadFailure, TierError};
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::hkdf::{Salt, HKDF_SHA256};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes a sealed blob takes beyond its plaintext: the Poly1305 tag.
pub const TAG_BYTES: usize = 16;
/// Bytes of a key.
pub const KEY_BYTES: usize = 32;
const SALT_BYTES: usize = 16;
/// HKDF's info: what the derived key is for.
const SUBKEY_LABEL: &[u8] = b"zpage tier blob sealing subkey v1";

/// What this build does to a blob before it leaves RAM.
pub const SEALING: &str = if cfg!(feature = "measure-without-encryption") {
    "none (built with measure-without-encryption, for measuring only)"
} else {
    "AES-256-GCM"
};

/// Where a tier's key comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KeySource {
    /// A random key made when the tier is made, held only in memory (the
    /// default): the tier's contents die with the process.
    #[default]
    Ephemeral,
    /// A key file of 32 raw bytes, created (mode 0600, random) when missing:
    /// for tiers that must outlive the process or be shared.
    File(PathBuf),
}

/// Seals and opens blobs with one key; each sealer has its own subkey
/// (from a random salt) and version counter.
pub struct Sealer {
    cipher: LessSafeKey,
    next_version: AtomicU64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the key nor the salt is shown.
        f.debug_struct("Sealer")
            .field("next_version", &self.next_version.load(Relaxed))
            .finish_non_exhaustive()
    }
}

fn read_or_create_key(path: &Path) -> Result<[u8; KEY_BYTES], TierError> {
    let key_error = |action: &'static str, source: std::io::Error| TierError::Key {
        path: path.to_path_buf(),
        action,
        source,
    };
    match std::fs::read(path) {
        Ok(bytes) => bytes
            .as_slice()
            .try_into()
            .map_err(|_| TierError::KeyLength {
                path: path.to_path_buf(),
                found: bytes.len(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; KEY_BYTES];
            rand::rngs::OsRng.fill_bytes(&mut key);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| key_error("create", e))?;
            file.write_all(&key)
                .and_then(|()| file.sync_all())
                .map_err(|e| key_error("write", e))?;
            Ok(key)
        }
        Err(e) => Err(key_error("read", e)),
    }
}

impl Sealer {
    /// A sealer with the key `source` names and a fresh random nonce prefix.
    pub fn new(source: &KeySource) -> Result<Sealer, TierError> {
        let key = match source {
            KeySource::Ephemeral => {
                let mut key = [0u8; KEY_BYTES];
                rand::rngs::OsRng.fill_bytes(&mut key);
                key
            }
            KeySource::File(path) => read_or_create_key(path)?,
        };
        let mut salt = [0u8; SALT_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut salt);
        let derivation_failed = || TierError::InvalidBlob {
            len: KEY_BYTES,
            why: "the key derivation refused the key",
        };
        let subkey: UnboundKey = Salt::new(HKDF_SHA256, &salt)
            .extract(&key)
            .expand(&[SUBKEY_LABEL], &AES_256_GCM)
            .map_err(|_| derivation_failed())?
            .into();
        if cfg!(feature = "measure-without-encryption") {
            eprintln!("zpage: this build seals nothing: tier blobs are neither encrypted nor authenticated (feature measure-without-encryption, for measuring encryption's cost only)");
        }
        Ok(Sealer {
            cipher: LessSafeKey::new(subkey),
            next_version: AtomicU64::new(1),
        })
    }

    fn nonce(version: u64) -> Nonce {
        let mut nonce = [0u8; NONCE_LEN];
        nonce[4..].copy_from_slice(&version.to_le_bytes());
        Nonce::assume_unique_for_key(nonce)
    }

    fn associated_data(page: u64, version: u64, plain_len: usize) -> [u8; 20] {
        let mut ad = [0u8; 20];
        ad[..8].copy_from_slice(&page.to_le_bytes());
        ad[8..16].copy_from_slice(&version.to_le_bytes());
        ad[16..].copy_from_slice(&(plain_len as u32).to_le_bytes());
        ad
    }

    /// Seals `plain` for `page` into `out` (ciphertext then tag, replacing
    /// what `out` held); returns the blob's version, which the reader must
    /// present to open it.
    pub fn seal(&self, page: u64, plain: &[u8], out: &mut Vec<u8>) -> Result<u64, TierError> {
        let version = self
            .next_version
            .fetch_update(Relaxed, Relaxed, |v| v.checked_add(1))
            .map_err(|_| TierError::VersionsExhausted)?;
        out.clear();
        out.extend_from_slice(plain);
        if cfg!(feature = "measure-without-encryption") {
            out.extend_from_slice(&[0; TAG_BYTES]);
            return Ok(version);
        }
        let ad = Self::associated_data(page, version, plain.len());
        let tag: Tag = self
            .cipher
            .seal_in_place_separate_tag(Self::nonce(version), Aad::from(ad), out)
            .map_err(|_| TierError::InvalidBlob {
                len: plain.len(),
                why: "the cipher refused it",
            })?;
        out.extend_from_slice(tag.as_ref());
        Ok(version)
    }

    /// Opens a sealed blob in place: on success `sealed[..n]` holds the
    /// plaintext and `n` is returned. Allocates nothing.
    pub fn open(&self, page: u64, version: u64, sealed: &mut [u8]) -> Result<usize, ReadFailure> {
        let Some(plain_len) = sealed.len().checked_sub(TAG_BYTES) else {
            return Err(ReadFailure::Authentication);
        };
        if cfg!(feature = "measure-without-encryption") {
            return Ok(plain_len);
        }
        let ad = Self::associated_data(page, version, plain_len);
        let plain = self
            .cipher
            .open_in_place(Self::nonce(version), Aad::from(ad), sealed)
            .map_err(|_| ReadFailure::Authentication)?;
        Ok(plain.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_opens_only_as_the_page_and_version_it_was_sealed_for() {
        let sealer = Sealer::new(&KeySource::Ephemeral).unwrap();
        let mut sealed = Vec::new();
        let version = sealer.seal(7, b"hello page", &mut sealed).unwrap();
        assert_eq!(sealed.len(), 10 + TAG_BYTES);
        // Encrypted: a build with `measure-without-encryption` turned on
        // (by feature unification, say) fails here.
        assert_ne!(&sealed[..10], b"hello page");
        assert_eq!(SEALING, "AES-256-GCM");
        let mut copy = sealed.clone();
        assert_eq!(sealer.open(7, version, &mut copy), Ok(10));
        assert_eq!(&copy[..10], b"hello page");
        for (page, v) in [(8, version), (7, version + 1)] {
            let mut copy = sealed.clone();
            assert_eq!(
                sealer.open(page, v, &mut copy),
                Err(ReadFailure::Authentication)
            );
        }
        let mut short = sealed[..sealed.len() - 1].to_vec();
        assert_eq!(
            sealer.open(7, version, &mut short),
            Err(ReadFailure::Authentication)
        );
        // Another sealer (another key) cannot open it.
        let other = Sealer::new(&KeySource::Ephemeral).unwrap();
        let mut copy = sealed.clone();
        assert_eq!(
            other.open(7, version, &mut copy),
            Err(ReadFailure::Authentication)
        );
    }

    #[test]
    fn versions_never_repeat_and_a_key_file_is_reused() {
        let dir = std::env::temp_dir().join(format!("zpage-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        let _ = std::fs::remove_file(&path);
        let first = Sealer::new(&KeySource::File(path.clone())).unwrap();
        let second = Sealer::new(&KeySource::File(path.clone())).unwrap();
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_BYTES);
        let mut sealed = Vec::new();
        let v1 = first.seal(1, b"x", &mut sealed).unwrap();
        let v2 = first.seal(1, b"x", &mut Vec::new()).unwrap();
        assert_ne!(v1, v2);
        // Same key, different salts and so different subkeys: equal versions
        // of the two sealers never share a key and nonce.
        let mut copy = sealed.clone();
        assert_eq!(
            second.open(1, v1, &mut copy),
            Err(ReadFailure::Authentication)
        );
        std::fs::write(&path, b"short").unwrap();
        let err = Sealer::new(&KeySource::File(path.clone())).unwrap_err();
        assert!(err.to_string().contains("32"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
