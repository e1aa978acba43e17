//! Memory cgroups that confine one program to a memory budget, on either
//! cgroup version: v1 (`/sys/fs/cgroup/memory`, the memory controller
//! mounted on its own) or v2 (`/sys/fs/cgroup` with `memory` among the root's
//! controllers). A [`MemoryCgroup`] limits RAM only (swap unlimited), so
//! whatever its processes use beyond the budget is swapped out, and it reads
//! the cgroup's own counters: peak usage, swap in use, major faults, OOM kills.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{read_file, write_file, KernelError, Result};

/// Where the v1 memory controller is mounted on most distributions.
pub const MEMCG_V1_ROOT: &str = "/sys/fs/cgroup/memory";
/// Where the v2 unified hierarchy is mounted when it is the only one.
pub const CGROUP_V2_ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup interface the memory controller speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// Legacy hierarchy: `memory.limit_in_bytes`, `memory.max_usage_in_bytes`.
    V1,
    /// Unified hierarchy: `memory.max`, `memory.peak`, `memory.swap.current`.
    V2,
}

/// The memory controller found on this machine: its version and the
/// directory under which cgroups are made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryController {
    /// Interface version.
    pub version: CgroupVersion,
    /// Directory new cgroups are created in.
    pub root: PathBuf,
}

/// Finds the memory controller: v1 when mounted at [`MEMCG_V1_ROOT`], else v2
/// when [`CGROUP_V2_ROOT`] lists `memory` among its controllers.
pub fn memory_controller() -> Result<MemoryController> {
    memory_controller_in(Path::new(MEMCG_V1_ROOT), Path::new(CGROUP_V2_ROOT))
}

fn memory_controller_in(v1_root: &Path, v2_root: &Path) -> Result<MemoryController> {
    if v1_root.join("memory.limit_in_bytes").exists() {
        return Ok(MemoryController {
            version: CgroupVersion::V1,
            root: v1_root.to_path_buf(),
        });
    }
    let controllers = read_file(v2_root.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        return Ok(MemoryController {
            version: CgroupVersion::V2,
            root: v2_root.to_path_buf(),
        });
    }
    Err(KernelError::Unsupported {
        feature: "memory cgroups".into(),
        missing: format!(
            "neither {} (cgroup v1) nor `memory` in {}/cgroup.controllers (cgroup v2): boot with the memory controller enabled (cgroup_enable=memory) and mount it",
            v1_root.display(),
            v2_root.display()
        ),
    })
}

/// A memory cgroup made for one run, removed on drop (its remaining
/// processes are killed first, so nothing the run started outlives it).
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    version: CgroupVersion,
    /// v2 only: `+memory` was written to the parent's `cgroup.subtree_control`
    /// by us and is taken back on drop.
    enabled_memory_in_parent: bool,
}

/// The cgroup's own counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupCounters {
    /// RAM charged now (bytes; page cache included).
    pub usage_bytes: u64,
    /// Highest RAM charged since the cgroup was made (v1
    /// `memory.max_usage_in_bytes`, v2 `memory.peak`; bytes).
    pub peak_bytes: Option<u64>,
    /// Swap used by the cgroup now (v1 `memory.stat` `swap`, which needs swap
    /// accounting; v2 `memory.swap.current`; bytes).
    pub swap_bytes: Option<u64>,
    /// Highest swap use (v2 `memory.swap.peak` only; bytes).
    pub swap_peak_bytes: Option<u64>,
    /// Major faults of the cgroup's processes (`memory.stat`).
    pub major_faults: Option<u64>,
    /// Pages swapped in/out by the cgroup (v2 `memory.stat` on recent kernels).
    pub swap_ins: Option<u64>,
    /// See `swap_ins`.
    pub swap_outs: Option<u64>,
    /// OOM kills inside the cgroup (v1 `memory.oom_control`, v2 `memory.events`).
    pub oom_kills: Option<u64>,
}

impl MemoryCgroup {
    /// Creates cgroup `name` under the memory controller, limited to
    /// `limit_bytes` of RAM with unlimited swap; `swappiness` is set where
    /// the interface has it (v1).
    pub fn create(
        controller: &MemoryController,
        name: &str,
        limit_bytes: u64,
        swappiness: u32,
    ) -> Result<MemoryCgroup> {
        let mut enabled_memory_in_parent = false;
        if controller.version == CgroupVersion::V2 {
            let subtree = controller.root.join("cgroup.subtree_control");
            let enabled = read_file(&subtree)?;
            if !enabled.split_whitespace().any(|c| c == "memory") {
                write_file(&subtree, "+memory")?;
                enabled_memory_in_parent = true;
            }
        }
        let dir = controller.root.join(name);
        std::fs::create_dir(&dir).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => KernelError::DeviceBusy {
                device: dir.display().to_string(),
                reason: "the cgroup already exists".into(),
                fix: format!(
                    "a run of the same name is going on, or one was killed before it could clean up: check `cat {0}/cgroup.procs`, then `rmdir {0}`",
                    dir.display()
                ),
            },
            _ => KernelError::io(&dir, "create the cgroup", e),
        })?;
        let cgroup = MemoryCgroup {
            dir,
            version: controller.version,
            enabled_memory_in_parent,
        };
        match cgroup.version {
            CgroupVersion::V1 => {
                write_file(
                    cgroup.dir.join("memory.swappiness"),
                    &swappiness.to_string(),
                )?;
                write_file(
                    cgroup.dir.join("memory.limit_in_bytes"),
                    &limit_bytes.to_string(),
                )?;
                // memsw is memory + swap: unlimited, so only RAM is capped and swap absorbs the rest.
                let memsw = cgroup.dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write_file(memsw, "-1")?;
                }
            }
            CgroupVersion::V2 => {
                write_file(cgroup.dir.join("memory.max"), &limit_bytes.to_string())?;
                let swap_max = cgroup.dir.join("memory.swap.max");
                if swap_max.exists() {
                    write_file(swap_max, "max")?;
                }
            }
        }
        Ok(cgroup)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its interface version.
    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// `cgroup.procs`: writing a pid (or `0`, the writer itself) moves that process in.
    pub fn procs_path(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Processes in the cgroup now.
    pub fn pids(&self) -> Vec<i32> {
        read_file(self.procs_path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Reads the counters now.
    pub fn counters(&self) -> Result<CgroupCounters> {
        read_counters(&self.dir, self.version)
    }

    /// Kills every process left in the cgroup (a daemon the program started).
    pub fn kill_all(&self) {
        for pid in self.pids() {
            crate::sys::send_signal(pid, libc::SIGKILL);
        }
    }
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` lines (memory.stat, memory.events, memory.oom_control).
fn read_keyed(path: &Path) -> BTreeMap<String, u64> {
    crate::procfs::parse_vmstat(&std::fs::read_to_string(path).unwrap_or_default())
}

/// Reads the counters of the cgroup at `dir` (for a reader that does not own it).
pub fn read_counters(dir: &Path, version: CgroupVersion) -> Result<CgroupCounters> {
    let stat = read_keyed(&dir.join("memory.stat"));
    Ok(match version {
        CgroupVersion::V1 => {
            let usage_path = dir.join("memory.usage_in_bytes");
            let usage_bytes = crate::parse_u64(&usage_path, &read_file(&usage_path)?)?;
            CgroupCounters {
                usage_bytes,
                peak_bytes: read_u64(&dir.join("memory.max_usage_in_bytes")),
                // total_* include descendants; v1 prints `swap` only with swap accounting.
                swap_bytes: stat.get("total_swap").or(stat.get("swap")).copied(),
                swap_peak_bytes: None,
                major_faults: stat
                    .get("total_pgmajfault")
                    .or(stat.get("pgmajfault"))
                    .copied(),
                swap_ins: None,
                swap_outs: None,
                oom_kills: read_keyed(&dir.join("memory.oom_control"))
                    .get("oom_kill")
                    .copied(),
            }
        }
        CgroupVersion::V2 => {
            let usage_path = dir.join("memory.current");
            let usage_bytes = crate::parse_u64(&usage_path, &read_file(&usage_path)?)?;
            CgroupCounters {
                usage_bytes,
                peak_bytes: read_u64(&dir.join("memory.peak")),
                swap_bytes: read_u64(&dir.join("memory.swap.current")),
                swap_peak_bytes: read_u64(&dir.join("memory.swap.peak")),
                major_faults: stat.get("pgmajfault").copied(),
                swap_ins: stat.get("pswpin").copied(),
                swap_outs: stat.get("pswpout").copied(),
                oom_kills: read_keyed(&dir.join("memory.events"))
                    .get("oom_kill")
                    .copied(),
            }
        }
    })
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        self.kill_all();
        // Charges of exited processes go away asynchronously; retry briefly.
        let mut removed = false;
        for _ in 0..250 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                removed = true;
                break;
            }
            self.kill_all();
            std::thread::sleep(Duration::from_millis(20));
        }
        if !removed {
            eprintln!(
                "zpage: could not remove cgroup {}: remove it with `rmdir {}` once its processes are gone",
                self.dir.display(),
                self.dir.display()
            );
        }
        if self.enabled_memory_in_parent {
            if let Some(parent) = self.dir.parent() {
                let _ = write_file(parent.join("cgroup.subtree_control"), "-memory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zpage-memcg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn finds_v1_first_then_v2_and_explains_when_neither() {
        let dir = scratch("detect");
        let v1 = dir.join("memory");
        let v2 = dir.join("unified");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::create_dir_all(&v2).unwrap();
        let error = memory_controller_in(&v1, &v2).unwrap_err().to_string();
        assert!(error.contains("cgroup_enable=memory"), "{error}");
        write(&v2, "cgroup.controllers", "cpu io memory pids\n");
        assert_eq!(
            memory_controller_in(&v1, &v2).unwrap().version,
            CgroupVersion::V2
        );
        write(&v1, "memory.limit_in_bytes", "9223372036854771712\n");
        assert_eq!(
            memory_controller_in(&v1, &v2).unwrap(),
            MemoryController {
                version: CgroupVersion::V1,
                root: v1
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_counters_of_both_versions() {
        let dir = scratch("counters");
        write(&dir, "memory.usage_in_bytes", "1000\n");
        write(&dir, "memory.max_usage_in_bytes", "5000\n");
        write(
            &dir,
            "memory.stat",
            "swap 40\npgmajfault 3\ntotal_swap 4096\ntotal_pgmajfault 7\n",
        );
        write(
            &dir,
            "memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        );
        let v1 = read_counters(&dir, CgroupVersion::V1).unwrap();
        assert_eq!(
            (
                v1.usage_bytes,
                v1.peak_bytes,
                v1.swap_bytes,
                v1.major_faults
            ),
            (1000, Some(5000), Some(4096), Some(7))
        );
        assert_eq!(v1.oom_kills, Some(1));
        write(&dir, "memory.current", "2000\n");
        write(&dir, "memory.peak", "6000\n");
        write(&dir, "memory.swap.current", "8192\n");
        write(&dir, "memory.swap.peak", "12288\n");
        write(
            &dir,
            "memory.events",
            "low 0\nhigh 0\nmax 9\noom 0\noom_kill 0\n",
        );
        write(
            &dir,
            "memory.stat",
            "anon 1\npgmajfault 11\npswpin 2\npswpout 5\n",
        );
        let v2 = read_counters(&dir, CgroupVersion::V2).unwrap();
        assert_eq!(
            v2,
            CgroupCounters {
                usage_bytes: 2000,
                peak_bytes: Some(6000),
                swap_bytes: Some(8192),
                swap_peak_bytes: Some(12288),
                major_faults: Some(11),
                swap_ins: Some(2),
                swap_outs: Some(5),
                oom_kills: Some(0),
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
