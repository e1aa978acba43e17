//! Capturing a real program's memory image: the private writable mappings
//! of a live process (heap, stacks, anonymous and data segments), read
//! through `/proc/PID/mem`, as the platform notes recommend.
//!
//! (The lead's `zpage analyze` crate had no capture function when this was
//! written, so this small one lives here.)

use crate::{BenchError, PAGE_SIZE};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One mapping of `/proc/PID/maps` worth capturing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The path or pseudo-name (`[heap]`, `[stack]`, empty for anonymous).
    pub name: String,
}

/// Parses `/proc/PID/maps` text, keeping private writable mappings that are
/// real memory (not `[vvar]`, `[vsyscall]` or guard pages).
pub fn private_writable_mappings(maps: &str) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let name = fields.nth(3).unwrap_or("").to_string();
            let (start, end) = range.split_once('-')?;
            let start = u64::from_str_radix(start, 16).ok()?;
            let end = u64::from_str_radix(end, 16).ok()?;
            let wanted = perms.starts_with("rw") && perms.ends_with('p');
            let special = matches!(
                name.as_str(),
                "[vvar]" | "[vsyscall]" | "[vdso]" | "[vvar_vclock]"
            );
            (wanted && !special && end > start).then_some(Mapping { start, end, name })
        })
        .collect()
}

/// What a capture wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Pages written to the image.
    pub pages: u64,
    /// Mappings read.
    pub mappings: usize,
    /// Pages that could not be read (skipped).
    pub unreadable_pages: u64,
}

/// Copies the private writable memory of process `pid` into `out`, page by
/// page, stopping after `max_bytes`. Pages the process never touched read as
/// zeroes and are kept (they are part of what a region would hold).
pub fn capture_process(pid: u32, out: &Path, max_bytes: u64) -> Result<CaptureSummary, BenchError> {
    let maps_path = format!("/proc/{pid}/maps");
    let maps =
        std::fs::read_to_string(&maps_path).map_err(|e| BenchError::io(&maps_path, "read", e))?;
    let mem_path = format!("/proc/{pid}/mem");
    let mem = File::open(&mem_path).map_err(|e| BenchError::io(&mem_path, "open", e))?;
    let file = File::create(out).map_err(|e| BenchError::io(out, "create the image", e))?;
    let mut writer = BufWriter::with_capacity(1 << 20, file);
    let mut summary = CaptureSummary::default();
    let mut page = vec![0u8; PAGE_SIZE];
    let max_pages = max_bytes / PAGE_SIZE as u64;
    'mappings: for mapping in private_writable_mappings(&maps) {
        summary.mappings += 1;
        let mut address = mapping.start;
        while address < mapping.end {
            if summary.pages >= max_pages {
                break 'mappings;
            }
            match mem.read_exact_at(&mut page, address) {
                Ok(()) => {
                    writer
                        .write_all(&page)
                        .map_err(|e| BenchError::io(out, "write the image", e))?;
                    summary.pages += 1;
                }
                Err(_) => summary.unreadable_pages += 1,
            }
            address += PAGE_SIZE as u64;
        }
    }
    writer
        .flush()
        .map_err(|e| BenchError::io(out, "write the image", e))?;
    if summary.pages == 0 {
        return Err(BenchError::Invalid(format!(
            "process {pid} has no readable private writable memory"
        )));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_private_writable_mappings_only() {
        let maps = "\
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0          [heap]
7f0000000000-7f0000001000 r--p 00000000 08:01 123        /usr/lib/libc.so.6
7f0000001000-7f0000003000 rw-p 00001000 08:01 123        /usr/lib/libc.so.6
7f0000003000-7f0000004000 rw-s 00000000 00:05 9          /dev/shm/x
7f0000004000-7f0000008000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00002000 r--p 00000000 00:00 0          [vvar]
7ffe00000000-7ffe00021000 rw-p 00000000 00:00 0          [stack]
";
        let kept = private_writable_mappings(maps);
        let names: Vec<&str> = kept.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["[heap]", "/usr/lib/libc.so.6", "", "[stack]"]);
        assert_eq!(kept[0].end - kept[0].start, 0x21000);
    }

    #[test]
    fn captures_our_own_memory() {
        let marker = vec![0x5Au8; 64 * PAGE_SIZE];
        let out = std::env::temp_dir().join(format!("zpage-capture-{}.img", std::process::id()));
        let summary = capture_process(std::process::id(), &out, 1 << 30).unwrap();
        assert!(summary.pages > 64);
        let image = std::fs::read(&out).unwrap();
        assert_eq!(image.len() as u64, summary.pages * PAGE_SIZE as u64);
        assert!(image
            .chunks_exact(PAGE_SIZE)
            .any(|p| p.iter().all(|&b| b == 0x5A)));
        std::hint::black_box(&marker);
        std::fs::remove_file(&out).unwrap();
    }
}
