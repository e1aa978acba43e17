//! Swap areas: writing the swap signature (what `mkswap` does), swapon and
//! swapoff, swap files, and dm-crypt plain mappings with a random key.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{KernelError, Result};

const PAGE: u64 = 4096;
const MAGIC: &[u8; 10] = b"SWAPSPACE2";

/// Builds the first page of a version-1 swap area of `size_bytes`, the
/// layout `mkswap` writes: version, last page index, no bad pages, a UUID
/// and the magic at the end of the page.
pub fn swap_header(size_bytes: u64, uuid: [u8; 16]) -> Result<[u8; 4096]> {
    let pages = size_bytes / PAGE;
    if pages < 10 {
        return Err(KernelError::config(
            "size",
            format!("{size_bytes} bytes is too small for a swap area"),
            "give at least 40 KiB (10 pages)",
        ));
    }
    let last_page = u32::try_from(pages - 1).map_err(|_| {
        KernelError::config(
            "size",
            "larger than a swap area can be (2^32 pages)",
            "use a smaller size",
        )
    })?;
    let mut page = [0u8; 4096];
    page[1024..1028].copy_from_slice(&1u32.to_ne_bytes()); // version
    page[1028..1032].copy_from_slice(&last_page.to_ne_bytes());
    page[1032..1036].copy_from_slice(&0u32.to_ne_bytes()); // nr_badpages
    page[1036..1052].copy_from_slice(&uuid);
    page[4086..4096].copy_from_slice(MAGIC);
    Ok(page)
}

fn random_uuid() -> [u8; 16] {
    let mut uuid = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut uuid);
    }
    uuid[6] = (uuid[6] & 0x0f) | 0x40; // version 4
    uuid[8] = (uuid[8] & 0x3f) | 0x80; // RFC 4122 variant
    uuid
}

/// Writes a swap signature over the whole of `path` (a file or block device
/// of `size_bytes`), like `mkswap`.
pub fn make_swap(path: &Path, size_bytes: u64) -> Result<()> {
    let header = swap_header(size_bytes, random_uuid())?;
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| KernelError::io(path, "open for mkswap", e))?;
    file.write_all_at(&header, 0)
        .map_err(|e| KernelError::io(path, "write the swap signature", e))?;
    file.sync_all()
        .map_err(|e| KernelError::io(path, "fsync", e))
}

/// True when `path` starts with a swap signature.
pub fn has_swap_signature(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut page = [0u8; 4096];
    file.read_exact_at(&mut page, 0).is_ok() && &page[4086..4096] == MAGIC
}

/// Size of a file or block device in bytes.
pub fn size_of(path: &Path) -> Result<u64> {
    let file = std::fs::File::open(path).map_err(|e| KernelError::io(path, "open", e))?;
    let meta = file
        .metadata()
        .map_err(|e| KernelError::io(path, "stat", e))?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    let mut f = file;
    std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0))
        .map_err(|e| KernelError::io(path, "find the size of", e))
}

/// Creates a swap file of `size_bytes` with every block allocated (swap
/// files must have no holes), mode 0600, and writes the signature.
/// Blocks are allocated with fallocate where the filesystem supports it,
/// else written with zeros.
pub fn create_swap_file(path: &Path, size_bytes: u64) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| KernelError::io(path, "create the swap file", e))?;
    if crate::sys::fallocate(&file, size_bytes).is_ok() {
        drop(file);
        return make_swap(path, size_bytes);
    }
    let chunk = vec![0u8; 1 << 20];
    let mut left = size_bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n])
            .map_err(|e| KernelError::io(path, "fill the swap file", e))?;
        left -= n as u64;
    }
    file.sync_all()
        .map_err(|e| KernelError::io(path, "fsync", e))?;
    drop(file);
    make_swap(path, size_bytes)
}

/// Turns swap on, with a message that says what to do on failure.
pub fn swap_on(path: &Path, priority: Option<i16>, discard: bool) -> Result<()> {
    crate::sys::swapon(path, priority, discard).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => KernelError::NeedsRoot { path: path.into(), action: "swapon".into() },
        Some(libc::EINVAL) => KernelError::Command {
            command: format!("swapon {}", path.display()),
            detail: "the kernel rejected it (EINVAL): no valid swap signature, a file with holes, or a filesystem that cannot hold swap files".into(),
            fix: "let zpage create the file (give `size` and a path that does not exist yet) on a filesystem such as ext4/xfs".into(),
        },
        Some(libc::EBUSY) => KernelError::DeviceBusy {
            device: path.display().to_string(),
            reason: "already a swap area or open exclusively".into(),
            fix: "see `zpage kernel status`".into(),
        },
        _ => KernelError::io(path, "swapon", e),
    })
}

/// Turns swap off (its pages move back to RAM first).
pub fn swap_off(path: &Path) -> Result<()> {
    crate::sys::swapoff(path).map_err(|e| match e.raw_os_error() {
        Some(libc::EPERM) => KernelError::NeedsRoot {
            path: path.into(),
            action: "swapoff".into(),
        },
        Some(libc::ENOMEM) => KernelError::Command {
            command: format!("swapoff {}", path.display()),
            detail: "not enough free RAM to take back the swapped pages".into(),
            fix: "free memory first (stop programs), then retry".into(),
        },
        _ => KernelError::io(path, "swapoff", e),
    })
}

/// Why dm-crypt swap cannot be set up here, or `None` when it can.
pub fn encryption_unavailable_reason() -> Option<String> {
    let misc = std::fs::read_to_string("/proc/misc").unwrap_or_default();
    if !misc
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("device-mapper"))
    {
        return Some("the kernel has no device-mapper (no `device-mapper` in /proc/misc): encrypted swap needs CONFIG_BLK_DEV_DM and CONFIG_DM_CRYPT (or `modprobe dm-crypt`)".into());
    }
    if Command::new("cryptsetup")
        .arg("--version")
        .output()
        .is_err()
    {
        return Some("`cryptsetup` is not installed: install it (Debian: cryptsetup-bin)".into());
    }
    None
}

/// Name of the dm-crypt mapping zpage uses for a swap path.
pub fn crypt_name(path: &Path) -> String {
    let mut name: String = path
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name = name.trim_matches('-').to_string();
    format!("zpage-swap-{name}")
}

/// Opens a dm-crypt plain mapping over `path` with a fresh random key (it is
/// never stored, so the swap content is unreadable after a reboot) and
/// returns the mapped device.
pub fn crypt_open(path: &Path) -> Result<PathBuf> {
    if let Some(reason) = encryption_unavailable_reason() {
        return Err(KernelError::Unsupported {
            feature: "encrypted swap".into(),
            missing: reason,
        });
    }
    let name = crypt_name(path);
    let output = Command::new("cryptsetup")
        .args([
            "open",
            "--type",
            "plain",
            "--cipher",
            "aes-xts-plain64",
            "--key-size",
            "512",
            "--key-file",
            "/dev/urandom",
        ])
        .arg(path)
        .arg(&name)
        .output()
        .map_err(|e| KernelError::io("cryptsetup", "run", e))?;
    if !output.status.success() {
        return Err(KernelError::Command {
            command: format!("cryptsetup open --type plain {} {name}", path.display()),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            fix: "check that the device exists and is not in use".into(),
        });
    }
    Ok(PathBuf::from(format!("/dev/mapper/{name}")))
}

/// Closes a mapping made by [`crypt_open`].
pub fn crypt_close(name: &str) -> Result<()> {
    let output = Command::new("cryptsetup")
        .args(["close", name])
        .output()
        .map_err(|e| KernelError::io("cryptsetup", "run", e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(KernelError::Command {
            command: format!("cryptsetup close {name}"),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            fix: "swapoff the mapping first".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_mkswap() {
        let header = swap_header(64 << 20, [7; 16]).unwrap();
        assert_eq!(&header[4086..], b"SWAPSPACE2");
        assert_eq!(
            u32::from_ne_bytes(header[1024..1028].try_into().unwrap()),
            1
        );
        assert_eq!(
            u32::from_ne_bytes(header[1028..1032].try_into().unwrap()),
            16383
        );
        assert!(swap_header(4096, [0; 16]).is_err());
        assert_eq!(
            crypt_name(Path::new("/var/tmp/swap file")),
            "zpage-swap-var-tmp-swap-file"
        );
    }
}
