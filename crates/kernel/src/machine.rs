//! Compressed swap for a budgeted run, set up and taken down again: a zram
//! device with a chosen algorithm, or zswap in front of a swap file, with
//! everything it changes (swap areas, the zram device, zswap parameters,
//! `vm.page-cluster`) recorded first in a [`MachineGuard`] and put back when
//! the guard is dropped, whether the run succeeded, failed or was interrupted.
//!
//! The guard holds the machine-wide [`KernelStateLock`](crate::KernelStateLock)
//! for its whole life, so two runs (or a run and a test) never overlap.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::apply::SavedState;
use crate::memcg;
use crate::procfs::{self, SwapArea};
use crate::zram::ZramDevice;
use crate::{swapdev, zswap, KernelError, KernelStateLock, Result};

/// Prefix of the cgroups budgeted runs make, so leftovers can be recognised.
pub const CGROUP_PREFIX: &str = "zpage-";

/// memory.swappiness of a run's cgroup (v1): anonymous and file pages cost the same to reclaim.
pub const CGROUP_SWAPPINESS: u32 = 100;

/// Where the pages a budget pushes out go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SwapBackend {
    /// Swap on a zram device compressing with this algorithm.
    Zram(String),
    /// zswap with this compressor in front of a swap file.
    Zswap(String),
}

impl SwapBackend {
    /// "zram-lz4", "zswap-lzo".
    pub fn name(&self) -> String {
        match self {
            SwapBackend::Zram(alg) => format!("zram-{alg}"),
            SwapBackend::Zswap(alg) => format!("zswap-{alg}"),
        }
    }

    /// Parses "zram-lz4" / "zswap-lzo".
    pub fn parse(text: &str) -> Result<Self> {
        if let Some(alg) = text.strip_prefix("zram-").filter(|a| !a.is_empty()) {
            Ok(SwapBackend::Zram(alg.to_string()))
        } else if let Some(alg) = text.strip_prefix("zswap-").filter(|a| !a.is_empty()) {
            Ok(SwapBackend::Zswap(alg.to_string()))
        } else {
            Err(KernelError::config(
                "swap backend",
                format!("unknown swap backend {text:?}"),
                "write zram-ALGORITHM (e.g. zram-lz4) or zswap-COMPRESSOR (e.g. zswap-lzo)",
            ))
        }
    }

    /// Every backend this machine offers: zram with each of its algorithms,
    /// zswap with its current compressor.
    pub fn all_available() -> Result<Vec<SwapBackend>> {
        let mut backends: Vec<SwapBackend> = zram_algorithms()?
            .into_iter()
            .map(SwapBackend::Zram)
            .collect();
        let compressor = zswap::parameters()?
            .get("compressor")
            .cloned()
            .ok_or_else(|| KernelError::Unsupported {
                feature: "zswap".into(),
                missing: "its `compressor` parameter".into(),
            })?;
        backends.push(SwapBackend::Zswap(compressor));
        Ok(backends)
    }
}

/// The algorithms zram offers (read from any zram device).
pub fn zram_algorithms() -> Result<Vec<String>> {
    match ZramDevice::list()?.first() {
        Some(device) => device.algorithms(),
        None => {
            // A module with no device: make one to ask, and remove it again.
            let device = ZramDevice::hot_add()?;
            let algorithms = device.algorithms();
            device.hot_remove()?;
            algorithms
        }
    }
}

/// Everything about swap a budgeted run changes, as found: the kernel
/// crate's saved state (swap areas, zram devices, zswap parameters, swap
/// sysctls), and cgroups an earlier run may have left.
#[derive(Clone, Debug, Serialize)]
pub struct MachineState {
    /// Swap areas, zram devices, zswap parameters and sysctls.
    pub kernel: SavedState,
    /// Cgroups named `zpage-*` under the memory controller (should be empty).
    pub leftover_cgroups: Vec<String>,
}

impl PartialEq for MachineState {
    /// Equal configurations: how much of a swap area is in use moves with
    /// memory pressure, so it is not compared.
    fn eq(&self, other: &Self) -> bool {
        let configuration = |s: &SavedState| {
            let swaps: Vec<SwapArea> = s
                .swaps
                .iter()
                .map(|a| SwapArea {
                    used_bytes: 0,
                    ..a.clone()
                })
                .collect();
            (swaps, s.zram.clone(), s.zswap.clone(), s.sysctls.clone())
        };
        configuration(&self.kernel) == configuration(&other.kernel)
            && self.leftover_cgroups == other.leftover_cgroups
    }
}

impl MachineState {
    /// Reads the current state.
    pub fn capture() -> Result<Self> {
        let leftover_cgroups = memcg::memory_controller()
            .ok()
            .and_then(|controller| std::fs::read_dir(controller.root).ok())
            .map(|dir| {
                let mut names: Vec<String> = dir
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .filter(|name| name.starts_with(CGROUP_PREFIX))
                    .collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        Ok(MachineState {
            kernel: SavedState::capture()?,
            leftover_cgroups,
        })
    }

    /// `vm.page-cluster` as found.
    pub fn page_cluster(&self) -> &str {
        self.kernel
            .sysctls
            .get("vm.page-cluster")
            .map_or("?", String::as_str)
    }
}

/// How a [`MachineGuard`] treats the swap areas already active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OtherSwap {
    /// Turn them off for the guard's life, so only the run's swap is used
    /// (benchmarks: nothing else may take the pages).
    TurnOff,
    /// Leave them on; the run's swap gets the highest priority, so the
    /// kernel fills it first.
    KeepOn,
}

/// The zram device a guard uses: always one it added (`hot_add`) and
/// removes again, never one already there. An unused `zram0` is usually
/// the device a zram-generator or zram-tools set-up expects to find at
/// boot or on its next start.
#[derive(Debug)]
struct ZramChoice {
    device: ZramDevice,
}

/// Records the machine's swap state, lets a run change it, and restores it
/// on drop (or on [`MachineGuard::restore`], which reports failures).
#[derive(Debug)]
pub struct MachineGuard {
    saved: MachineState,
    swapfile_dir: PathBuf,
    swapfile: Option<PathBuf>,
    zram: Option<ZramChoice>,
    turned_off: Vec<SwapArea>,
    restored: bool,
    _lock: KernelStateLock,
}

/// Why the machine cannot be taken, in one message.
fn unavailable(reason: impl Into<String>) -> KernelError {
    KernelError::KernelModeUnavailable {
        reason: reason.into(),
    }
}

impl MachineGuard {
    /// Takes the machine lock (waiting for another run to finish), checks
    /// the prerequisites, records the state and, with [`OtherSwap::TurnOff`],
    /// turns off the active swap areas for the guard's life. A swap file,
    /// when a backend needs one, is made in `swapfile_dir`.
    pub fn take(swapfile_dir: &Path, other_swap: OtherSwap) -> Result<Self> {
        if !crate::is_root() {
            return Err(unavailable(
                "needs root (swapon, zram, cgroups): run it as root",
            ));
        }
        memcg::memory_controller()?;
        let lock = KernelStateLock::try_acquire()?;
        let saved = MachineState::capture()?;
        if !saved.leftover_cgroups.is_empty() {
            return Err(unavailable(format!(
                "cgroups of an earlier run are still there: {:?} (another run going on? if not, kill their processes and rmdir them)",
                saved.leftover_cgroups
            )));
        }
        let mut guard = MachineGuard {
            saved: saved.clone(),
            swapfile_dir: swapfile_dir.to_path_buf(),
            swapfile: None,
            zram: None,
            turned_off: Vec::new(),
            restored: false,
            _lock: lock,
        };
        if other_swap == OtherSwap::TurnOff {
            for swap in &saved.kernel.swaps {
                swapdev::swap_off(Path::new(&swap.path))?;
                guard.turned_off.push(swap.clone());
            }
        }
        Ok(guard)
    }

    /// The state recorded before anything changed.
    pub fn saved(&self) -> &MachineState {
        &self.saved
    }

    /// The zram device in use, once [`Self::set_up`] chose one for a zram backend.
    pub fn zram_device(&self) -> Option<&ZramDevice> {
        self.zram.as_ref().map(|z| &z.device)
    }

    /// The guard's own zram device, added on first use.
    fn choose_zram(&mut self) -> Result<ZramDevice> {
        if let Some(choice) = &self.zram {
            return Ok(choice.device.clone());
        }
        let device = ZramDevice::hot_add()?;
        self.zram = Some(ZramChoice {
            device: device.clone(),
        });
        Ok(device)
    }

    /// Sets up `backend` with a swap area of `swap_bytes` (rounded up to a page).
    pub fn set_up(&mut self, backend: &SwapBackend, swap_bytes: u64) -> Result<()> {
        self.tear_down()?;
        let page = zpage_codec::PAGE_SIZE as u64;
        let swap_bytes = swap_bytes.div_ceil(page).max(16) * page;
        // No swap readahead on compressed swap: one page per fault for every backend.
        procfs::sysctl_write("vm.page-cluster", "0")?;
        match backend {
            SwapBackend::Zram(alg) => {
                // zswap in front of zram would compress every page twice.
                if self.saved.kernel.zswap.get("enabled").map(String::as_str) == Some("Y") {
                    zswap::set_parameter("enabled", "N")?;
                }
                let device = self.choose_zram()?;
                device.configure(alg, swap_bytes)?;
                swapdev::make_swap(&device.dev_path(), swap_bytes)?;
                swapdev::swap_on(&device.dev_path(), Some(i16::MAX), false)?;
            }
            SwapBackend::Zswap(compressor) => {
                let offered = zswap::available_compressors()?;
                if !offered.iter().any(|c| c == compressor) {
                    return Err(KernelError::Unsupported {
                        feature: format!("zswap compressor {compressor:?}"),
                        missing: format!(
                            "it is not registered with the Crypto API (registered: {}); pick one of those, e.g. zswap-{}",
                            offered.join(" "),
                            offered.first().map_or("lzo", String::as_str)
                        ),
                    });
                }
                let path = self
                    .swapfile_dir
                    .join(format!("zpage-swapfile-{}", std::process::id()));
                self.swapfile = Some(path.clone());
                swapdev::create_swap_file(&path, swap_bytes)?;
                zswap::set_parameter("compressor", compressor)?;
                zswap::set_parameter("enabled", "Y")?;
                swapdev::swap_on(&path, Some(i16::MAX), false)?;
            }
        }
        Ok(())
    }

    /// Caps zswap's pool near `bytes`, so that zswap writes its oldest pages
    /// back to the swap device beyond it (as zpage's `--pool-max` does with
    /// its tier). zswap takes the cap as a whole percentage of RAM
    /// (`max_pool_percent`), so the cap is `bytes` rounded up to the next
    /// percent (at least 1); returns the cap in bytes. [`Self::restore`]
    /// puts the machine's own value back.
    pub fn cap_zswap_pool(&mut self, bytes: u64) -> Result<u64> {
        let ram = procfs::mem_total_bytes()?;
        let percent = zswap_pool_percent(bytes, ram);
        zswap::set_parameter("max_pool_percent", &percent.to_string())?;
        Ok(ram / 100 * percent)
    }

    /// Undoes [`Self::set_up`] (between backends; [`Self::restore`] does the rest).
    pub fn tear_down(&mut self) -> Result<()> {
        let mut problems = Vec::new();
        let active = procfs::swaps().unwrap_or_default();
        let is_active = |path: &Path| active.iter().any(|s| Path::new(&s.path) == path);
        if let Some(choice) = &self.zram {
            let device = &choice.device;
            if is_active(&device.dev_path()) {
                if let Err(e) = swapdev::swap_off(&device.dev_path()) {
                    problems.push(e.to_string());
                }
            }
            if device.disksize().map(|d| d > 0).unwrap_or(false) {
                if let Err(e) = device.reset() {
                    problems.push(e.to_string());
                }
            }
        }
        if let Some(path) = self.swapfile.take() {
            if is_active(&path) {
                if let Err(e) = swapdev::swap_off(&path) {
                    problems.push(e.to_string());
                }
            }
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    problems.push(format!("remove {}: {e}", path.display()));
                }
            }
        }
        if let Some(enabled) = self.saved.kernel.zswap.get("enabled") {
            if zswap::parameters()
                .ok()
                .and_then(|p| p.get("enabled").cloned())
                != Some(enabled.clone())
            {
                if let Err(e) = zswap::set_parameter("enabled", enabled) {
                    problems.push(e.to_string());
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(KernelError::NotRestored {
                problems: problems.join("; "),
            })
        }
    }

    /// Puts everything back and checks that the machine's state equals the recorded one.
    pub fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        let mut problems = Vec::new();
        if let Err(e) = self.tear_down() {
            problems.push(e.to_string());
        }
        if let Some(choice) = self.zram.take() {
            if let Err(e) = choice.device.hot_remove() {
                problems.push(e.to_string());
            }
        }
        // `enabled` last, so zswap never runs with a half-restored configuration.
        let now = zswap::parameters().unwrap_or_default();
        let mut names: Vec<&String> = self.saved.kernel.zswap.keys().collect();
        names.sort_by_key(|n| n.as_str() == "enabled");
        for name in names {
            let value = &self.saved.kernel.zswap[name];
            if now.get(name) != Some(value) {
                if let Err(e) = zswap::set_parameter(name, value) {
                    problems.push(e.to_string());
                }
            }
        }
        if let Err(e) = procfs::sysctl_write("vm.page-cluster", self.saved.page_cluster()) {
            problems.push(e.to_string());
        }
        for swap in std::mem::take(&mut self.turned_off) {
            let priority =
                (swap.priority >= 0).then(|| i16::try_from(swap.priority).unwrap_or(i16::MAX));
            if let Err(e) = swapdev::swap_on(Path::new(&swap.path), priority, false) {
                problems.push(format!("swapon {} again: {e}", swap.path));
            }
        }
        match MachineState::capture() {
            Ok(now) if now == self.saved => {}
            Ok(now) => problems.push(format!(
                "state differs: before {:?}, after {:?}",
                self.saved, now
            )),
            Err(e) => problems.push(e.to_string()),
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(KernelError::NotRestored {
                problems: problems.join("; "),
            })
        }
    }
}

impl Drop for MachineGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("zpage: {e}");
        }
    }
}

/// The whole percentage of `ram` zswap's `max_pool_percent` needs so the
/// pool may hold at least `bytes` (1 to 100).
fn zswap_pool_percent(bytes: u64, ram: u64) -> u64 {
    (bytes.saturating_mul(100))
        .div_ceil(ram.max(1))
        .clamp(1, 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zswap_pool_caps_round_up_to_a_whole_percent() {
        let ram = 24 << 30;
        assert_eq!(zswap_pool_percent(128 << 20, ram), 1);
        assert_eq!(zswap_pool_percent(ram / 100 + 1, ram), 2);
        assert_eq!(zswap_pool_percent(ram / 100 * 7, ram), 7);
        assert_eq!(zswap_pool_percent(2 * ram, ram), 100);
        assert_eq!(zswap_pool_percent(0, ram), 1);
    }

    #[test]
    fn parses_backend_names() {
        assert_eq!(
            SwapBackend::parse("zram-lz4").unwrap(),
            SwapBackend::Zram("lz4".into())
        );
        assert_eq!(SwapBackend::parse("zswap-lzo").unwrap().name(), "zswap-lzo");
        let error = SwapBackend::parse("disk").unwrap_err().to_string();
        assert!(error.contains("zram-ALGORITHM"), "{error}");
        assert!(SwapBackend::parse("zram-").is_err());
    }
}
