//! zswap: module parameters (`/sys/module/zswap/parameters`), the counters
//! in meminfo/vmstat, the debugfs counters (root only), and per-cgroup use.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{read_file, read_trimmed, write_file, KernelError, Result};

/// Directory of zswap's module parameters.
pub const PARAMS_DIR: &str = "/sys/module/zswap/parameters";
/// Directory of zswap's debugfs counters.
pub const DEBUGFS_DIR: &str = "/sys/kernel/debug/zswap";

/// zswap's module parameters, raw strings as the kernel prints them
/// (`enabled` is `Y`/`N`). Absent parameters are not listed.
pub fn parameters() -> Result<BTreeMap<String, String>> {
    let dir = Path::new(PARAMS_DIR);
    let entries = std::fs::read_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => KernelError::Unsupported {
            feature: "zswap".into(),
            missing: format!("{PARAMS_DIR} (kernel built without CONFIG_ZSWAP)"),
        },
        _ => KernelError::io(dir, "list", e),
    })?;
    let mut params = BTreeMap::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().to_string();
        if let Ok(value) = read_trimmed(entry.path()) {
            params.insert(name, value);
        }
    }
    Ok(params)
}

/// Path of one zswap parameter.
pub fn parameter_path(name: &str) -> PathBuf {
    Path::new(PARAMS_DIR).join(name)
}

/// Writes one zswap parameter.
pub fn set_parameter(name: &str, value: &str) -> Result<()> {
    let path = parameter_path(name);
    if !path.exists() {
        return Err(KernelError::Unsupported {
            feature: format!("zswap parameter {name}"),
            missing: path.display().to_string(),
        });
    }
    write_file(path, value)
}

/// Compressors the Crypto API has registered (`/proc/crypto`, types
/// compression/scomp/acomp): what zswap's `compressor` accepts without
/// loading a module.
pub fn available_compressors() -> Result<Vec<String>> {
    let text = read_file("/proc/crypto")?;
    let mut names = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            name = None;
            continue;
        };
        match key.trim() {
            "name" => name = Some(value.trim().to_string()),
            "type" if matches!(value.trim(), "compression" | "scomp" | "acomp") => {
                if let Some(n) = name.take() {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(names)
}

/// The debugfs counters, or why they cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DebugfsCounters {
    /// Counter name -> value.
    Readable {
        /// Counters (e.g. `stored_pages`, `pool_total_size`, `written_back_pages`).
        counters: BTreeMap<String, u64>,
    },
    /// Not readable, with the reason and the fix.
    Unavailable {
        /// Why, and what to do.
        reason: String,
    },
}

/// Reads `/sys/kernel/debug/zswap/*` (needs root and a mounted debugfs).
pub fn debugfs_counters() -> DebugfsCounters {
    debugfs_counters_in(Path::new(DEBUGFS_DIR))
}

/// [`debugfs_counters`] from another directory (tests).
pub fn debugfs_counters_in(dir: &Path) -> DebugfsCounters {
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let counters = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let value = std::fs::read_to_string(e.path()).ok()?.trim().parse().ok()?;
                    Some((e.file_name().to_string_lossy().to_string(), value))
                })
                .collect();
            DebugfsCounters::Readable { counters }
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => DebugfsCounters::Unavailable {
            reason: format!("{DEBUGFS_DIR}: needs root (debugfs is root-only); meminfo Zswap/Zswapped and vmstat zswp* below are the unprivileged view"),
        },
        Err(_) => {
            let mounted = read_file("/proc/mounts")
                .map(|m| m.lines().any(|l| l.split_whitespace().nth(2) == Some("debugfs")))
                .unwrap_or(false);
            let reason = if mounted {
                format!("{DEBUGFS_DIR} does not exist (kernel without CONFIG_DEBUG_FS or zswap never initialised)")
            } else {
                format!("{DEBUGFS_DIR}: debugfs is not mounted: `mount -t debugfs none /sys/kernel/debug` (as root)")
            };
            DebugfsCounters::Unavailable { reason }
        }
    }
}

/// zswap use of one memory cgroup, where the kernel reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupZswap {
    /// Cgroup directory.
    pub path: String,
    /// `zswap`: compressed bytes in zswap (memory.stat).
    pub zswap_bytes: Option<u64>,
    /// `zswapped`: uncompressed bytes those stand for.
    pub zswapped_bytes: Option<u64>,
    /// `memory.zswap.current` (cgroup v2).
    pub zswap_current: Option<u64>,
    /// `memory.zswap.max` (cgroup v2), raw ("max" or bytes).
    pub zswap_max: Option<String>,
}

/// Per-cgroup zswap use from cgroup v2 (`memory.zswap.*`, `memory.stat`)
/// and v1 (`memory.stat`, if the kernel adds zswap lines there). Returns the
/// cgroups that report zswap and a note when none does.
pub fn cgroup_usage(max_cgroups: usize) -> (Vec<CgroupZswap>, Option<String>) {
    let mut found = Vec::new();
    let roots = [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/memory",
    ];
    let mut stack: Vec<PathBuf> = roots
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect();
    let mut visited = 0usize;
    let mut any_memory_controller = false;
    while let Some(dir) = stack.pop() {
        visited += 1;
        if visited > 4096 || found.len() >= max_cgroups {
            break;
        }
        let stat_path = dir.join("memory.stat");
        if stat_path.exists() {
            any_memory_controller = true;
            let stat = std::fs::read_to_string(&stat_path).unwrap_or_default();
            let fields = crate::procfs::parse_vmstat(&stat);
            let current = std::fs::read_to_string(dir.join("memory.zswap.current"))
                .ok()
                .and_then(|s| s.trim().parse().ok());
            let max = std::fs::read_to_string(dir.join("memory.zswap.max"))
                .ok()
                .map(|s| s.trim().to_string());
            let entry = CgroupZswap {
                path: dir.display().to_string(),
                zswap_bytes: fields.get("zswap").copied(),
                zswapped_bytes: fields.get("zswapped").copied(),
                zswap_current: current,
                zswap_max: max,
            };
            if entry.zswap_bytes.is_some() || entry.zswap_current.is_some() {
                found.push(entry);
            }
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.filter_map(|e| e.ok()) {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false)
                    && !roots.contains(&e.path().to_str().unwrap_or(""))
                {
                    stack.push(e.path());
                }
            }
        }
    }
    let note = if found.is_empty() {
        Some(if any_memory_controller {
            "no memory cgroup reports zswap use: the cgroup v1 memory controller has no zswap counters; they exist only in cgroup v2 (memory.zswap.current, memory.stat zswap/zswapped)".to_string()
        } else {
            "no memory cgroup controller is mounted".to_string()
        })
    } else {
        None
    };
    (found, note)
}
