//! Memory to analyse: raw image files, and the resident anonymous pages of
//! live processes read through `/proc/PID/{maps,pagemap,mem}`.

use crate::{AnalyzeError, Result};
use serde::Serialize;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use zpage_codec::{Page, PAGE_SIZE};

/// Where an image's pages came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A raw dump of whole pages.
    File {
        /// The file.
        path: PathBuf,
        /// Trailing bytes that did not make a whole page and were not analysed.
        skipped_bytes: u64,
    },
    /// A live process.
    Process {
        /// Its PID.
        pid: u32,
        /// Its command name (`/proc/PID/comm`).
        command: String,
        /// Private writable mappings read.
        mappings: usize,
        /// Resident pages that could not be read (the process changed meanwhile).
        unreadable_pages: u64,
    },
}

/// Pages to analyse, contiguous in memory, with where they came from.
#[derive(Clone, Debug)]
pub struct MemoryImage {
    source: Source,
    data: Vec<u8>,
}

impl MemoryImage {
    /// An image made of these pages (generated data, tests).
    pub fn from_pages(source: Source, pages: &[Page]) -> Self {
        Self {
            source,
            data: pages.as_flattened().to_vec(),
        }
    }

    /// Reads a raw image file. A size that is not a multiple of 4096 is analysed
    /// in whole pages and the rest reported in `skipped_bytes`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let unreadable = |source| AnalyzeError::ImageUnreadable {
            path: path.to_path_buf(),
            source,
        };
        let mut data = std::fs::read(path).map_err(unreadable)?;
        let bytes = data.len() as u64;
        let whole = data.len() / PAGE_SIZE * PAGE_SIZE;
        if whole == 0 {
            return Err(AnalyzeError::ImageTooSmall {
                path: path.to_path_buf(),
                bytes,
            });
        }
        data.truncate(whole);
        Ok(Self {
            source: Source::File {
                path: path.to_path_buf(),
                skipped_bytes: bytes - whole as u64,
            },
            data,
        })
    }

    /// Where the pages came from.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// A short name for tables: the file name, or `command[pid]`.
    pub fn label(&self) -> String {
        match &self.source {
            Source::File { path, .. } => path.display().to_string(),
            Source::Process { pid, command, .. } => format!("{command}[{pid}]"),
        }
    }

    /// The pages.
    pub fn pages(&self) -> &[Page] {
        self.data.as_chunks::<PAGE_SIZE>().0
    }

    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.data.len() / PAGE_SIZE
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.data.len() as u64
    }

    /// Writes the pages as a raw image (for `zpage bench --image` and later analysis).
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, &self.data).map_err(|source| AnalyzeError::ImageWrite {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Concatenates images (analysing several files as one memory).
    pub fn concat(images: Vec<MemoryImage>) -> Option<MemoryImage> {
        let mut images = images.into_iter();
        let mut first = images.next()?;
        for image in images {
            first.data.extend_from_slice(&image.data);
        }
        Some(first)
    }
}

/// One line of `/proc/PID/maps` worth reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, empty when anonymous).
    pub name: String,
}

/// The private writable mappings of a maps file: what swap (and zpage) could compress.
pub fn private_writable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            let name = fields.nth(3).unwrap_or("").to_string();
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            let kernel_provided = matches!(
                name.as_str(),
                "[vvar]" | "[vvar_vclock]" | "[vdso]" | "[vsyscall]"
            );
            (perms.starts_with("rw") && perms.ends_with('p') && !kernel_provided && end > start)
                .then_some(Mapping { start, end, name })
        })
        .collect()
}

/// pagemap bits (Documentation/admin-guide/mm/pagemap.rst).
const PAGEMAP_PRESENT: u64 = 1 << 63;
const PAGEMAP_FILE_OR_SHARED_ANON: u64 = 1 << 61;
/// Entries read from pagemap per call.
const PAGEMAP_BATCH: usize = 512;

fn proc_error(pid: u32, path: PathBuf, source: std::io::Error) -> AnalyzeError {
    match source.kind() {
        ErrorKind::NotFound => AnalyzeError::NoSuchProcess { pid },
        ErrorKind::PermissionDenied => AnalyzeError::ProcessUnreadable { pid, path, source },
        _ if source.raw_os_error() == Some(libc::EPERM) => {
            AnalyzeError::ProcessUnreadable { pid, path, source }
        }
        _ => AnalyzeError::Proc { path, source },
    }
}

/// Reads the resident, private, anonymous pages of process `pid` (what zram or
/// zswap would be asked to compress), up to `max_pages`.
///
/// Pages still shared with a file (never written private file mappings) are
/// left out: the kernel drops those instead of swapping them.
pub fn capture_process(pid: u32, max_pages: Option<u64>) -> Result<MemoryImage> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if !proc_dir.exists() {
        return Err(AnalyzeError::NoSuchProcess { pid });
    }
    let read_text = |name: &str| {
        let path = proc_dir.join(name);
        std::fs::read_to_string(&path).map_err(|e| proc_error(pid, path, e))
    };
    let open = |name: &str| {
        let path = proc_dir.join(name);
        File::open(&path).map_err(|e| proc_error(pid, path, e))
    };
    let command = read_text("comm")?.trim().to_string();
    let maps = read_text("maps")?;
    let pagemap = open("pagemap")?;
    let mem = open("mem")?;
    let mappings = private_writable_mappings(&maps);
    let limit = max_pages.unwrap_or(u64::MAX);
    let mut data = Vec::new();
    let mut unreadable_pages = 0;
    let mut entries = vec![0u8; PAGEMAP_BATCH * 8];
    let mut page = vec![0u8; PAGE_SIZE];
    'mappings: for mapping in &mappings {
        let mut address = mapping.start;
        while address < mapping.end {
            let batch = (((mapping.end - address) / PAGE_SIZE as u64) as usize).min(PAGEMAP_BATCH);
            let offset = address / PAGE_SIZE as u64 * 8;
            let read = match pagemap.read_at(&mut entries[..batch * 8], offset) {
                Ok(read) => read / 8,
                Err(e) => return Err(proc_error(pid, proc_dir.join("pagemap"), e)),
            };
            if read == 0 {
                break;
            }
            for (i, entry) in entries[..read * 8].chunks_exact(8).enumerate() {
                let entry = u64::from_le_bytes(entry.try_into().expect("chunks of 8"));
                if entry & PAGEMAP_PRESENT == 0 || entry & PAGEMAP_FILE_OR_SHARED_ANON != 0 {
                    continue;
                }
                if data.len() as u64 / PAGE_SIZE as u64 >= limit {
                    break 'mappings;
                }
                match mem.read_exact_at(&mut page, address + (i * PAGE_SIZE) as u64) {
                    Ok(()) => data.extend_from_slice(&page),
                    Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                        return Err(proc_error(pid, proc_dir.join("mem"), e))
                    }
                    Err(_) => unreadable_pages += 1,
                }
            }
            address += (read * PAGE_SIZE) as u64;
        }
    }
    Ok(MemoryImage {
        source: Source::Process {
            pid,
            command,
            mappings: mappings.len(),
            unreadable_pages,
        },
        data,
    })
}

/// PIDs of every process in /proc, ascending.
pub fn all_pids() -> Result<Vec<u32>> {
    let entries = std::fs::read_dir("/proc").map_err(|source| AnalyzeError::Proc {
        path: "/proc".into(),
        source,
    })?;
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parsing_keeps_private_writable_memory_only() {
        let maps = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000100000 rw-p 00000000 00:00 0 
7f0000100000-7f0000200000 r--p 00000000 fd:01 123                        /usr/lib/libc.so.6
7f0000200000-7f0000201000 rw-s 00000000 00:05 77                         /dev/shm/x
7f0000201000-7f0000202000 rw-p 00001000 fd:01 124                        /usr/lib/libc.so.6
7ffd00000000-7ffd00002000 r--p 00000000 00:00 0                          [vvar]
7ffd00002000-7ffd00003000 rw-p 00000000 00:00 0                          [vvar_vclock]
7ffe00000000-7ffe00021000 rw-p 00000000 00:00 0                          [stack]
";
        let names: Vec<_> = private_writable_mappings(maps)
            .into_iter()
            .map(|m| (m.name, m.end - m.start))
            .collect();
        assert_eq!(
            names,
            [
                ("[heap]".to_string(), 0x21000),
                (String::new(), 0x100000),
                ("/usr/lib/libc.so.6".to_string(), 0x1000),
                ("[stack]".to_string(), 0x21000),
            ]
        );
    }
}
