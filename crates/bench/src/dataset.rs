//! What the benchmarked memory holds: a deterministic realistic data set, a
//! raw memory image, or seed 000's high/low-entropy fills.
//!
//! Every source produces page `i` on demand, so a 2 GiB data set never needs
//! a second 2 GiB copy (which, in a kernel tier's cgroup, would be charged to
//! the budget under test).

use crate::rng::{mix64, SplitMix64};
use crate::{BenchError, PAGE_SIZE};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Where page contents come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DataSource {
    /// [`generate_realistic_page`]: text, pointer-heavy structs, numbers, zero and random pages.
    Realistic {
        /// Seed of the content.
        seed: u64,
    },
    /// A raw memory image (whole pages); shorter images repeat.
    Image {
        /// Path of the image file.
        path: PathBuf,
    },
    /// bench.c's `init_random`: every byte random (does not compress).
    HighEntropy {
        /// Seed of the content.
        seed: u64,
    },
    /// bench.c's `init_sequential`: byte `i` is `i % 8` (compresses extremely well).
    LowEntropy,
}

impl DataSource {
    /// Short description for tables and logs.
    pub fn describe(&self) -> String {
        match self {
            DataSource::Realistic { seed } => format!("generated realistic data set (seed {seed})"),
            DataSource::Image { path } => format!("memory image {}", path.display()),
            DataSource::HighEntropy { .. } => "high-entropy bytes (bench.c init_random)".into(),
            DataSource::LowEntropy => "low-entropy bytes, i % 8 (bench.c init_sequential)".into(),
        }
    }

    /// Opens the source for reading pages.
    pub fn open(&self) -> Result<PageSource, BenchError> {
        Ok(match self {
            DataSource::Image { path } => PageSource::Image(ImageReader::open(path)?),
            other => PageSource::Computed(other.clone()),
        })
    }
}

/// An opened [`DataSource`].
#[derive(Debug)]
pub enum PageSource {
    /// Pages computed from the page index.
    Computed(DataSource),
    /// Pages read from an image file.
    Image(ImageReader),
}

impl PageSource {
    /// Writes page `index` of the source into `page` (exactly [`PAGE_SIZE`] bytes).
    pub fn fill_page(&mut self, index: u64, page: &mut [u8]) -> Result<(), BenchError> {
        debug_assert_eq!(page.len(), PAGE_SIZE);
        match self {
            PageSource::Computed(DataSource::Realistic { seed }) => {
                generate_realistic_page(*seed, index, page)
            }
            PageSource::Computed(DataSource::HighEntropy { seed }) => {
                let mut rng =
                    SplitMix64::new(mix64(*seed ^ index.wrapping_mul(0x2545_F491_4F6C_DD1D)));
                for chunk in page.chunks_exact_mut(8) {
                    chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
                }
            }
            PageSource::Computed(DataSource::LowEntropy) => {
                // PAGE_SIZE is a multiple of 8, so `i % 8` restarts at every page.
                for (i, byte) in page.iter_mut().enumerate() {
                    *byte = (i % 8) as u8;
                }
            }
            PageSource::Computed(DataSource::Image { .. }) => {
                unreachable!("DataSource::open turns images into PageSource::Image")
            }
            PageSource::Image(reader) => reader.read_page(index, page)?,
        }
        Ok(())
    }
}

/// Reads whole pages from a raw memory image, dropping them from the page
/// cache as it goes (so filling a kernel tier does not charge the image's
/// page cache to the cgroup under test).
#[derive(Debug)]
pub struct ImageReader {
    file: File,
    path: PathBuf,
    pages: u64,
    read_since_drop: u64,
}

/// Drop the image's page cache after reading this many bytes.
const DROP_CACHE_EVERY: u64 = 32 << 20;

impl ImageReader {
    /// Opens an image; errors if it holds not even one whole page.
    pub fn open(path: &Path) -> Result<Self, BenchError> {
        let file =
            File::open(path).map_err(|e| BenchError::io(path, "open the memory image", e))?;
        let len = file
            .metadata()
            .map_err(|e| BenchError::io(path, "stat the memory image", e))?
            .len();
        let pages = len / PAGE_SIZE as u64;
        if pages == 0 {
            return Err(BenchError::Invalid(format!(
                "memory image {} holds no whole 4096-byte page ({len} bytes)",
                path.display()
            )));
        }
        Ok(ImageReader {
            file,
            path: path.to_path_buf(),
            pages,
            read_since_drop: 0,
        })
    }

    /// Whole pages in the image (a trailing partial page is ignored).
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Reads page `index % pages` (short images repeat).
    pub fn read_page(&mut self, index: u64, page: &mut [u8]) -> Result<(), BenchError> {
        let offset = (index % self.pages) * PAGE_SIZE as u64;
        self.file
            .read_exact_at(page, offset)
            .map_err(|e| BenchError::io(&self.path, "read the memory image", e))?;
        self.read_since_drop += PAGE_SIZE as u64;
        if self.read_since_drop >= DROP_CACHE_EVERY {
            self.read_since_drop = 0;
            // SAFETY: fadvise only takes a descriptor we own and plain integers;
            // it is advice, so its result does not matter.
            unsafe {
                libc::posix_fadvise(self.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
        Ok(())
    }
}

/// Image size in whole pages, with a warning text when the file is not a multiple of the page size.
pub fn image_pages(path: &Path) -> Result<(u64, Option<String>), BenchError> {
    let len = std::fs::metadata(path)
        .map_err(|e| BenchError::io(path, "stat the memory image", e))?
        .len();
    let pages = len / PAGE_SIZE as u64;
    let warning = (len % PAGE_SIZE as u64 != 0).then(|| {
        format!(
            "{} is {len} bytes, not a multiple of {PAGE_SIZE}: the last {} bytes are ignored",
            path.display(),
            len % PAGE_SIZE as u64
        )
    });
    Ok((pages, warning))
}

const WORDS: &[&str] = &[
    "the",
    "request",
    "user",
    "session",
    "error",
    "value",
    "status",
    "config",
    "memory",
    "page",
    "compressed",
    "index",
    "table",
    "server",
    "client",
    "response",
    "timeout",
    "cache",
    "buffer",
    "id",
    "name",
    "type",
    "count",
    "items",
    "path",
    "http",
    "GET",
    "POST",
    "200",
    "404",
    "true",
    "false",
    "null",
    "data",
    "key",
    "node",
    "worker",
    "thread",
    "queue",
    "latency",
    "ok",
];

const LEVELS: &[&str] = &["INFO", "DEBUG", "WARN", "INFO", "INFO", "ERROR"];

/// What kind of content a generated page holds (by share of pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// 15%: all zeroes (freed heap, untouched arrays).
    Zero,
    /// 4%: one non-zero word repeated (memset patterns, poisoned memory).
    SameFilled,
    /// 28%: log lines and JSON-ish text.
    Text,
    /// 33%: 64-byte heap objects full of pointers, small integers and padding.
    Structs,
    /// 12%: numeric arrays (status codes, small counters, timestamps).
    Numbers,
    /// 8%: high-entropy bytes (hashes, compressed or encrypted buffers).
    Random,
}

/// The kind of page `index` of the realistic data set with `seed`.
pub fn realistic_page_kind(seed: u64, index: u64) -> PageKind {
    match mix64(seed ^ mix64(index)) % 100 {
        0..=14 => PageKind::Zero,
        15..=18 => PageKind::SameFilled,
        19..=46 => PageKind::Text,
        47..=79 => PageKind::Structs,
        80..=91 => PageKind::Numbers,
        _ => PageKind::Random,
    }
}

/// Writes page `index` of the realistic data set: a deterministic mix that
/// compresses like a real program's heap (about 3:1 with LZ4 overall,
/// zero pages included).
pub fn generate_realistic_page(seed: u64, index: u64, page: &mut [u8]) {
    let page_seed = mix64(seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let mut rng = SplitMix64::new(page_seed);
    match realistic_page_kind(seed, index) {
        PageKind::Zero => page.fill(0),
        PageKind::SameFilled => {
            let word = [
                0xFFFF_FFFF_FFFF_FFFFu64,
                0xDEAD_BEEF_DEAD_BEEF,
                0x0101_0101_0101_0101,
            ][(page_seed % 3) as usize];
            for chunk in page.chunks_exact_mut(8) {
                chunk.copy_from_slice(&word.to_le_bytes());
            }
        }
        PageKind::Text => {
            let mut at = 0;
            let mut line = String::with_capacity(160);
            while at < page.len() {
                line.clear();
                // Timestamps and request ids advance slowly, as in a real log.
                let t = 1_700_000_000 + index * 7 + (at as u64 / 512);
                line.push_str(&format!(
                    "{t} {} req={} ",
                    LEVELS[rng.below(LEVELS.len() as u64) as usize],
                    index * 40 + at as u64 / 100
                ));
                for _ in 0..(4 + rng.below(8)) {
                    line.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
                    line.push(if rng.percent(20) { '=' } else { ' ' });
                }
                line.push('\n');
                let n = line.len().min(page.len() - at);
                page[at..at + n].copy_from_slice(&line.as_bytes()[..n]);
                at += n;
            }
        }
        PageKind::Structs => {
            // A heap arena of one allocator size class: pointers share their high bits.
            let arena = 0x0000_7F3A_0000_0000u64 + (rng.below(1 << 20) << 12);
            for (slot, object) in page.chunks_exact_mut(64).enumerate() {
                // Neighbouring objects point to neighbours: pointers differ in few low bits.
                let next = arena + (slot as u64 + 1) * 64;
                let prev = arena + (slot as u64).saturating_sub(1) * 64;
                let key = index * 64 + slot as u64;
                let value = arena + 0x10_0000 + rng.below(256) * 64;
                let refcount = 1 + u64::from(rng.percent(10));
                let flags = if rng.percent(80) { 1u64 } else { 3 };
                let hash = if rng.percent(25) { rng.next_u64() } else { 0 };
                let fields = [next, prev, key, value, refcount | (flags << 32), hash, 0, 0];
                for (field, bytes) in fields.iter().zip(object.chunks_exact_mut(8)) {
                    bytes.copy_from_slice(&field.to_le_bytes());
                }
            }
        }
        PageKind::Numbers => {
            // Status codes and small counters: few distinct values, long runs.
            let codes = [0u32, 0, 0, 1, 1, 2, 200, 404];
            let mut value = 0u32;
            for chunk in page.chunks_exact_mut(4) {
                if rng.percent(30) {
                    value = codes[rng.below(codes.len() as u64) as usize];
                }
                chunk.copy_from_slice(&value.to_le_bytes());
            }
        }
        PageKind::Random => {
            for chunk in page.chunks_exact_mut(8) {
                chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn page_of(source: &DataSource, index: u64) -> Vec<u8> {
        let mut page = vec![0u8; PAGE_SIZE];
        source.open().unwrap().fill_page(index, &mut page).unwrap();
        page
    }

    #[test]
    fn realistic_pages_are_deterministic_and_differ_by_index() {
        let source = DataSource::Realistic { seed: 1 };
        assert_eq!(page_of(&source, 17), page_of(&source, 17));
        assert_ne!(
            page_of(&source, 17),
            page_of(&DataSource::Realistic { seed: 2 }, 17)
        );
    }

    #[test]
    fn realistic_mix_has_every_kind_in_roughly_its_share() {
        let mut counts = std::collections::HashMap::new();
        for index in 0..10_000 {
            *counts.entry(realistic_page_kind(3, index)).or_insert(0u32) += 1;
        }
        let share = |kind| counts[&kind] as f64 / 10_000.0;
        assert!((0.13..0.17).contains(&share(PageKind::Zero)));
        assert!((0.30..0.36).contains(&share(PageKind::Structs)));
        assert!((0.06..0.10).contains(&share(PageKind::Random)));
    }

    #[test]
    fn realistic_kinds_look_like_what_they_claim() {
        let mut page = vec![0u8; PAGE_SIZE];
        let mut seen_text = false;
        for index in 0..200 {
            generate_realistic_page(5, index, &mut page);
            match realistic_page_kind(5, index) {
                PageKind::Zero => assert!(page.iter().all(|&b| b == 0)),
                PageKind::Text => {
                    seen_text = true;
                    assert!(page.iter().all(|b| b.is_ascii()));
                    assert!(page.contains(&b'\n'));
                }
                PageKind::Structs => {
                    // The high half of the first pointer is the arena's.
                    assert_eq!(&page[4..8], &0x0000_7F3Au32.to_le_bytes());
                }
                _ => {}
            }
        }
        assert!(seen_text);
    }

    #[test]
    fn bench_c_fills() {
        let low = page_of(&DataSource::LowEntropy, 3);
        assert_eq!(&low[..10], &[0, 1, 2, 3, 4, 5, 6, 7, 0, 1]);
        let high = page_of(&DataSource::HighEntropy { seed: 1 }, 3);
        let distinct: std::collections::HashSet<u8> = high.iter().copied().collect();
        assert!(distinct.len() > 200);
    }

    #[test]
    fn image_pages_repeat_and_partial_tail_is_reported() {
        let dir = std::env::temp_dir().join(format!("zpage-bench-image-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("image.bin");
        let mut file = File::create(&path).unwrap();
        file.write_all(&[1u8; PAGE_SIZE]).unwrap();
        file.write_all(&[2u8; PAGE_SIZE]).unwrap();
        file.write_all(&[3u8; 100]).unwrap();
        drop(file);
        let (pages, warning) = image_pages(&path).unwrap();
        assert_eq!(pages, 2);
        assert!(warning.unwrap().contains("last 100 bytes"));
        let source = DataSource::Image { path: path.clone() };
        assert_eq!(page_of(&source, 1)[0], 2);
        assert_eq!(page_of(&source, 2)[0], 1, "short images repeat");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
