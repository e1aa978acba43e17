//! Readers for the procfs files that describe swap and memory pressure:
//! `/proc/meminfo`, `/proc/vmstat`, `/proc/swaps`, `/proc/mounts`,
//! `/proc/sys/vm/*`, `/proc/pressure/memory`.
//!
//! The files are read here (so an error names the file, and tests can give
//! other text); `/proc/meminfo` is parsed by `procfs-core`. The rest stays
//! here, short: `procfs` has no reader of `/proc/swaps`; its PSI figures are
//! `f32`, which would print the kernel's two-decimal averages (0.13) as
//! 0.12999999523162842 in JSON; its `/proc/mounts` parser leaves `\040`
//! (a space) escaped; its vmstat reader reads `/proc/vmstat` only, where the
//! same "name value" lines are also a cgroup's `memory.stat`; and a sysctl
//! is a path under `/proc/sys`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use procfs_core::Meminfo;
use serde::{Deserialize, Serialize};

use crate::{read_file, read_trimmed, write_file, KernelError, Result};

const MEMINFO: &str = "/proc/meminfo";

/// `/proc/meminfo`: every size in bytes, fields a kernel may lack as `Option`.
pub fn meminfo() -> Result<Meminfo> {
    parse_meminfo(&read_file(MEMINFO)?)
}

/// Parses `/proc/meminfo` content ("kB" values become bytes).
pub fn parse_meminfo(text: &str) -> Result<Meminfo> {
    procfs_core::FromRead::from_read(text.as_bytes()).map_err(|e| KernelError::Parse {
        path: MEMINFO.into(),
        content: text.chars().take(120).collect(),
        problem: format!("not /proc/meminfo as Linux writes it: {e}"),
    })
}

/// Total RAM in bytes (`MemTotal`).
pub fn mem_total_bytes() -> Result<u64> {
    Ok(meminfo()?.mem_total)
}

/// `/proc/vmstat` as counter name -> value.
pub fn vmstat() -> Result<BTreeMap<String, u64>> {
    Ok(parse_vmstat(&read_file("/proc/vmstat")?))
}

/// Parses `/proc/vmstat` content.
pub fn parse_vmstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let value = words.next()?.parse().ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

/// One active swap area from `/proc/swaps`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwapArea {
    /// Device or file path (as the kernel prints it; spaces are `\040`-escaped).
    pub path: String,
    /// "partition" or "file".
    pub kind: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Used in bytes.
    pub used_bytes: u64,
    /// Priority: higher is used first; negative ones are kernel-assigned.
    pub priority: i32,
}

/// The active swap areas.
pub fn swaps() -> Result<Vec<SwapArea>> {
    Ok(parse_swaps(&read_file("/proc/swaps")?))
}

/// Parses `/proc/swaps` content (sizes there are in KiB).
pub fn parse_swaps(text: &str) -> Vec<SwapArea> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 5 {
                return None;
            }
            Some(SwapArea {
                path: fields[0].to_string(),
                kind: fields[1].to_string(),
                size_bytes: fields[2].parse::<u64>().ok()? * 1024,
                used_bytes: fields[3].parse::<u64>().ok()? * 1024,
                priority: fields[4].parse().ok()?,
            })
        })
        .collect()
}

/// Where `device` (e.g. `/dev/zram0`) is mounted, from `/proc/mounts`.
pub fn mountpoint_of(device: &str) -> Option<String> {
    mountpoint_in(&read_file("/proc/mounts").ok()?, device)
}

/// Where `device` is mounted according to `mounts` (`/proc/mounts` content).
pub fn mountpoint_in(mounts: &str, device: &str) -> Option<String> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split(' ');
        (fields.next().map(unescape_octal).as_deref() == Some(device))
            .then(|| fields.next().map(unescape_octal))
            .flatten()
    })
}

/// A `/proc/mounts` field with the kernel's octal escapes (`\040` space,
/// `\011` tab, `\012` newline, `\134` backslash) undone.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)))
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The sysctls that steer swapping, as shown by `status` and set by `apply`.
pub const RELEVANT_SYSCTLS: [&str; 4] = [
    "vm.swappiness",
    "vm.page-cluster",
    "vm.watermark_scale_factor",
    "vm.extfrag_threshold",
];

/// `/proc/sys` path of a dotted sysctl name (`vm.swappiness` -> `/proc/sys/vm/swappiness`).
pub fn sysctl_path(name: &str) -> PathBuf {
    Path::new("/proc/sys").join(name.replace('.', "/"))
}

/// Reads a sysctl.
pub fn sysctl_read(name: &str) -> Result<String> {
    read_trimmed(sysctl_path(name))
}

/// Writes a sysctl.
pub fn sysctl_write(name: &str, value: &str) -> Result<()> {
    write_file(sysctl_path(name), value)
}

/// One line of a PSI file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureLine {
    /// Share of time stalled, averaged over 10 s (percent).
    pub avg10: f64,
    /// Averaged over 60 s (percent).
    pub avg60: f64,
    /// Averaged over 300 s (percent).
    pub avg300: f64,
    /// Total stall time (microseconds).
    pub total_us: u64,
}

/// `/proc/pressure/memory`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPressure {
    /// Some task stalled on memory.
    pub some: PressureLine,
    /// All non-idle tasks stalled on memory.
    pub full: PressureLine,
}

/// Reads memory PSI (needs CONFIG_PSI and psi not disabled at boot).
pub fn memory_pressure() -> Result<MemoryPressure> {
    let path = "/proc/pressure/memory";
    let text = read_file(path)?;
    parse_pressure(&text).ok_or_else(|| KernelError::Parse {
        path: path.into(),
        content: text.chars().take(120).collect(),
        problem: "expected `some avg10=.. avg60=.. avg300=.. total=..` and `full ...` lines".into(),
    })
}

/// Parses PSI content.
pub fn parse_pressure(text: &str) -> Option<MemoryPressure> {
    let mut result = MemoryPressure::default();
    let mut seen_some = false;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let mut parsed = PressureLine::default();
        for word in words {
            let (key, value) = word.split_once('=')?;
            match key {
                "avg10" => parsed.avg10 = value.parse().ok()?,
                "avg60" => parsed.avg60 = value.parse().ok()?,
                "avg300" => parsed.avg300 = value.parse().ok()?,
                "total" => parsed.total_us = value.parse().ok()?,
                _ => {}
            }
        }
        match kind {
            "some" => {
                result.some = parsed;
                seen_some = true;
            }
            "full" => result.full = parsed,
            _ => {}
        }
    }
    seen_some.then_some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// /proc/meminfo of a Linux 6.18 machine with zswap in use.
    const MEMINFO_SAMPLE: &str = "MemTotal:       24732288 kB
MemFree:          268228 kB
MemAvailable:   23790620 kB
Buffers:           78388 kB
Cached:         22938956 kB
SwapCached:            0 kB
Active:          2411704 kB
Inactive:       21298904 kB
Active(anon):     473748 kB
Inactive(anon):   228472 kB
Active(file):    1937956 kB
Inactive(file): 21070432 kB
Unevictable:           0 kB
Mlocked:               0 kB
SwapTotal:       1048572 kB
SwapFree:        1048572 kB
Zswap:                12 kB
Zswapped:             40 kB
Dirty:               356 kB
Writeback:             0 kB
AnonPages:        553628 kB
Mapped:           156932 kB
Shmem:              8436 kB
KReclaimable:     540152 kB
Slab:             668724 kB
SReclaimable:     540152 kB
SUnreclaim:       128572 kB
KernelStack:        7216 kB
PageTables:        10736 kB
SecPageTables:         0 kB
NFS_Unstable:          0 kB
Bounce:                0 kB
WritebackTmp:          0 kB
CommitLimit:    13414716 kB
Committed_AS:    2004424 kB
VmallocTotal:   34359738367 kB
VmallocUsed:       25172 kB
VmallocChunk:          0 kB
Percpu:             1216 kB
AnonHugePages:    198656 kB
ShmemHugePages:        0 kB
ShmemPmdMapped:        0 kB
FileHugePages:         0 kB
FilePmdMapped:         0 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
DirectMap4k:      114688 kB
DirectMap2M:    25051136 kB
";

    #[test]
    fn parses_sample_files() {
        let mem = parse_meminfo(MEMINFO_SAMPLE).unwrap();
        assert_eq!(mem.mem_total, 24_732_288 * 1024);
        assert_eq!(mem.anon_pages, Some(553_628 * 1024));
        assert_eq!(mem.z_swap, Some(12 * 1024));
        assert_eq!(mem.z_swapped, Some(40 * 1024));
        assert_eq!(mem.hugepages_total, Some(0));
        // This machine's own.
        let here = meminfo().unwrap();
        assert!(here.mem_total > 0 && here.mem_total >= here.mem_free);
        let said = parse_meminfo("MemTotal: lots\n").unwrap_err().to_string();
        assert!(said.contains("/proc/meminfo"), "{said}");
        let mounts =
            "/dev/zram1 /mnt/zram\\040scratch\\134x ext4 rw,relatime 0 0\nproc /proc proc rw 0 0\n";
        assert_eq!(
            mountpoint_in(mounts, "/dev/zram1").as_deref(),
            Some("/mnt/zram scratch\\x")
        );
        assert_eq!(mountpoint_in(mounts, "/dev/zram0"), None);
        let vm = parse_vmstat("zswpin 3\nzswpout 5\n");
        assert_eq!(vm["zswpout"], 5);
        let swaps = parse_swaps(
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n/dev/zram0                              partition\t65532\t\t4\t\t100\n/swapfile file 1024 0 -2\n",
        );
        assert_eq!(swaps.len(), 2);
        assert_eq!(swaps[0].size_bytes, 65532 * 1024);
        assert_eq!(swaps[0].priority, 100);
        assert_eq!(swaps[1].priority, -2);
        let psi = parse_pressure(
            "some avg10=1.50 avg60=0.00 avg300=0.00 total=42\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=7\n",
        )
        .unwrap();
        assert_eq!(psi.some.avg10, 1.5);
        assert_eq!(psi.full.total_us, 7);
        assert_eq!(
            sysctl_path("vm.page-cluster"),
            Path::new("/proc/sys/vm/page-cluster")
        );
    }
}
