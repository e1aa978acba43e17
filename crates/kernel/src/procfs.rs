//! Readers for the procfs files that describe swap and memory pressure:
//! `/proc/meminfo`, `/proc/vmstat`, `/proc/swaps`, `/proc/sys/vm/*`, `/proc/pressure/memory`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{read_file, read_trimmed, write_file, KernelError, Result};

/// `/proc/meminfo` as field name -> value in bytes (fields given in kB are converted).
pub fn meminfo() -> Result<BTreeMap<String, u64>> {
    Ok(parse_meminfo(&read_file("/proc/meminfo")?))
}

/// Parses `/proc/meminfo` content; "kB" values become bytes.
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let mut words = rest.split_whitespace();
            let value: u64 = words.next()?.parse().ok()?;
            let value = if words.next() == Some("kB") {
                value * 1024
            } else {
                value
            };
            Some((name.trim().to_string(), value))
        })
        .collect()
}

/// Total RAM in bytes (`MemTotal`).
pub fn mem_total_bytes() -> Result<u64> {
    meminfo()?
        .get("MemTotal")
        .copied()
        .ok_or_else(|| KernelError::Parse {
            path: "/proc/meminfo".into(),
            content: String::new(),
            problem: "no MemTotal line".into(),
        })
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
    let mounts = read_file("/proc/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        (fields.next() == Some(device))
            .then(|| fields.next().map(|m| m.replace("\\040", " ")))
            .flatten()
    })
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

    #[test]
    fn parses_sample_files() {
        let mem = parse_meminfo(
            "MemTotal:       24000000 kB\nZswap:              12 kB\nHugePages_Total:       0\n",
        );
        assert_eq!(mem["MemTotal"], 24000000 * 1024);
        assert_eq!(mem["Zswap"], 12 * 1024);
        assert_eq!(mem["HugePages_Total"], 0);
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
