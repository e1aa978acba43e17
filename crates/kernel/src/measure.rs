//! Measures how much faster the swap tier reads a random 4 KiB page than
//! the filesystem does, for `swappiness = "auto"`.
//!
//! The kernel's vm documentation: if random I/O against the swap device is
//! on average r times as fast as I/O from the filesystem, swappiness
//! should satisfy `x + r*x = 200`, i.e. swappiness = 200*r/(1+r).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::zram::ZramDevice;
use crate::{KernelError, Result};

/// Pages in each probe (16 MiB), and random reads timed on each side.
const PROBE_PAGES: u64 = 4096;
const READS: usize = 2048;

/// Outcome of [`swap_to_file_speed`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpeedMeasurement {
    /// What was measured as the swap tier ("zram (lz4)").
    pub swap_tier: String,
    /// Mean time of a random 4 KiB read from the swap tier (microseconds).
    pub swap_us_per_page: f64,
    /// Mean time of a random 4 KiB direct read from a file (microseconds).
    pub file_us_per_page: f64,
    /// file time / swap time.
    pub ratio: f64,
    /// 200*r/(1+r), rounded, within 0..=200.
    pub swappiness: u8,
}

/// swappiness from the speed ratio r (swap tier vs file I/O).
pub fn swappiness_for_ratio(ratio: f64) -> u8 {
    if !ratio.is_finite() || ratio <= 0.0 {
        return 100;
    }
    (200.0 * ratio / (1.0 + ratio)).round().clamp(0.0, 200.0) as u8
}

/// A 4 KiB-aligned 4 KiB buffer (O_DIRECT needs alignment), carved out of
/// an 8 KiB box without unsafe code.
struct AlignedPage {
    storage: Box<[u8; 8192]>,
    offset: usize,
}

impl AlignedPage {
    fn new() -> AlignedPage {
        let storage = Box::new([0u8; 8192]);
        let address = storage.as_ptr() as usize;
        let offset = (4096 - address % 4096) % 4096;
        AlignedPage { storage, offset }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + 4096]
    }
}

fn pseudo_random_offsets(seed: u64) -> Vec<u64> {
    let mut state = seed | 1;
    (0..READS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % PROBE_PAGES) * 4096
        })
        .collect()
}

fn sample_page(i: u64) -> [u8; 4096] {
    // Text-like data: compresses about as well as typical anonymous memory (2-3:1).
    let mut page = [0u8; 4096];
    let mut state = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for (n, byte) in page.iter_mut().enumerate() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *byte = if n.is_multiple_of(4) {
            (state >> 59) as u8 + b'a'
        } else {
            b"the page "[n % 9]
        };
    }
    page
}

fn time_reads(path: &std::path::Path) -> Result<f64> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| KernelError::io(path, "open with O_DIRECT", e))?;
    let mut buffer = AlignedPage::new();
    let offsets = pseudo_random_offsets(0x5eed);
    let start = Instant::now();
    for offset in offsets {
        file.read_exact_at(buffer.as_mut(), offset)
            .map_err(|e| KernelError::io(path, "read", e))?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / READS as f64)
}

/// Measures the zram tier (a temporary device with `algorithm`, removed
/// afterwards) against direct reads of a temporary file in /var/tmp. With
/// no zram algorithm the swap tier is a disk on the same filesystem: r = 1.
pub fn swap_to_file_speed(zram_algorithm: Option<&str>) -> Result<SpeedMeasurement> {
    if !crate::sys::is_root() {
        return Err(KernelError::NeedsRoot {
            path: "/sys/class/zram-control/hot_add".into(),
            action: "measure swap speed for swappiness = \"auto\" (or give a number)".into(),
        });
    }
    let pages: Vec<[u8; 4096]> = (0..PROBE_PAGES).map(sample_page).collect();
    // File side: written, flushed, then read with O_DIRECT so the page cache is bypassed.
    let file_path = PathBuf::from(format!(
        "/var/tmp/zpage-swappiness-probe.{}",
        std::process::id()
    ));
    let file_us = {
        let result = (|| {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&file_path)
                .map_err(|e| KernelError::io(&file_path, "create", e))?;
            for (i, page) in pages.iter().enumerate() {
                file.write_all_at(page, i as u64 * 4096)
                    .map_err(|e| KernelError::io(&file_path, "write", e))?;
            }
            file.sync_all()
                .map_err(|e| KernelError::io(&file_path, "fsync", e))?;
            time_reads(&file_path)
        })();
        let _ = std::fs::remove_file(&file_path);
        result?
    };
    let Some(algorithm) = zram_algorithm else {
        return Ok(SpeedMeasurement {
            swap_tier: "disk (same as files)".into(),
            swap_us_per_page: file_us,
            file_us_per_page: file_us,
            ratio: 1.0,
            swappiness: 100,
        });
    };
    let device = ZramDevice::hot_add()?;
    let result = (|| {
        device.configure(algorithm, PROBE_PAGES * 4096)?;
        device.write_pages(pages.iter())?;
        time_reads(&device.dev_path())
    })();
    let _ = device.reset();
    let _ = device.clone().hot_remove();
    let swap_us = result?;
    let ratio = file_us / swap_us.max(1e-3);
    Ok(SpeedMeasurement {
        swap_tier: format!("zram ({algorithm})"),
        swap_us_per_page: swap_us,
        file_us_per_page: file_us,
        ratio,
        swappiness: swappiness_for_ratio(ratio),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formula_of_the_kernel_documentation() {
        assert_eq!(swappiness_for_ratio(1.0), 100);
        assert_eq!(swappiness_for_ratio(2.0), 133);
        assert_eq!(swappiness_for_ratio(1000.0), 200);
        assert_eq!(swappiness_for_ratio(0.5), 67);
        assert_eq!(swappiness_for_ratio(f64::NAN), 100);
    }
}
