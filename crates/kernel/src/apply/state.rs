//! The state saved before the first apply, and what applies created.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::procfs::{self, SwapArea};
use crate::zram::ZramDevice;
use crate::{zswap, KernelError, Result};

/// Default place of the saved state (root-owned).
pub const DEFAULT_STATE_FILE: &str = "/var/lib/zpage/kernel-state.json";
/// Environment variable that overrides [`DEFAULT_STATE_FILE`].
pub const STATE_FILE_ENV: &str = "ZPAGE_KERNEL_STATE";

/// The state file in effect: `$ZPAGE_KERNEL_STATE` or the default.
pub fn state_file_path() -> PathBuf {
    std::env::var_os(STATE_FILE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_FILE))
}

/// How a zram device was configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZramSnapshot {
    /// Device index.
    pub index: u32,
    /// `initstate`.
    pub initialised: bool,
    /// Selected algorithm.
    pub algorithm: String,
    /// `disksize` in bytes.
    pub disksize: u64,
    /// `mem_limit` in bytes (0 = none).
    pub mem_limit: u64,
    /// Swap priority when it was an active swap area.
    pub swap_priority: Option<i32>,
    /// Backing device for writeback, when one was set.
    #[serde(default)]
    pub backing_dev: Option<String>,
    /// Recompression algorithms by priority, when set.
    #[serde(default)]
    pub recompress_algorithms: Vec<String>,
}

impl ZramSnapshot {
    /// Reads the current configuration of `device`.
    pub fn take(device: &ZramDevice, swaps: &[SwapArea]) -> Result<ZramSnapshot> {
        let dev = device.dev_path().display().to_string();
        Ok(ZramSnapshot {
            index: device.index(),
            initialised: device.is_initialised()?,
            algorithm: device.current_algorithm()?,
            disksize: device.disksize()?,
            mem_limit: device.mm_stat()?.mem_limit,
            swap_priority: swaps.iter().find(|s| s.path == dev).map(|s| s.priority),
            backing_dev: device.backing_dev()?,
            recompress_algorithms: device.recompression_algorithms()?,
        })
    }

    /// A device about to be created with `hot_add` (undo: reset to this).
    pub fn fresh(index: u32, algorithm: &str) -> ZramSnapshot {
        ZramSnapshot {
            index,
            initialised: false,
            algorithm: algorithm.to_string(),
            disksize: 0,
            mem_limit: 0,
            swap_priority: None,
            backing_dev: None,
            recompress_algorithms: Vec::new(),
        }
    }
}

/// Resources an apply created (removed again by revert).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// zram devices added with hot_add.
    pub zram_indexes: Vec<u32>,
    /// Swap files created.
    pub files: Vec<PathBuf>,
    /// dm-crypt mappings opened.
    pub crypt_mappings: Vec<String>,
    /// Swap areas turned on (revert turns off only these, plus areas whose
    /// zram device it must reset, so swap others enabled meanwhile is left alone).
    #[serde(default)]
    pub swap_areas: Vec<PathBuf>,
}

/// What the machine looked like before the first apply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedState {
    /// Active swap areas.
    pub swaps: Vec<SwapArea>,
    /// zram devices.
    pub zram: Vec<ZramSnapshot>,
    /// zswap parameters (name -> value as the kernel prints it).
    pub zswap: BTreeMap<String, String>,
    /// Sysctls (dotted name -> value).
    pub sysctls: BTreeMap<String, String>,
    /// What applies created since.
    pub created: Created,
    /// Parameters written to write-only zram attributes (index -> algorithm_params),
    /// so a repeated apply can tell they are already set.
    #[serde(default)]
    pub applied_zram_params: BTreeMap<u32, String>,
    /// swappiness computed for `"auto"` at the first apply (kept so applies stay idempotent).
    #[serde(default)]
    pub auto_swappiness: Option<u8>,
}

impl SavedState {
    /// Snapshots the machine now.
    pub fn capture() -> Result<SavedState> {
        let swaps = procfs::swaps()?;
        let zram = match ZramDevice::list() {
            Ok(devices) => devices
                .iter()
                .map(|d| ZramSnapshot::take(d, &swaps))
                .collect::<Result<_>>()?,
            Err(_) => Vec::new(),
        };
        let zswap = zswap::parameters().unwrap_or_default();
        let sysctls = procfs::RELEVANT_SYSCTLS
            .iter()
            .filter_map(|name| {
                procfs::sysctl_read(name)
                    .ok()
                    .map(|v| (name.to_string(), v))
            })
            .collect();
        Ok(SavedState {
            swaps,
            zram,
            zswap,
            sysctls,
            created: Created::default(),
            applied_zram_params: BTreeMap::new(),
            auto_swappiness: None,
        })
    }

    /// Loads the saved state, `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<SavedState>> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| KernelError::Parse {
                    path: path.into(),
                    content: text.chars().take(80).collect(),
                    problem: format!("not a zpage state file ({e}); move it away if it is stale"),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(KernelError::io(path, "read the state file", e)),
        }
    }

    /// Writes the state file (mode 0600, parent created), atomically.
    pub fn store(&self, path: &Path) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| KernelError::io(parent, "create the state directory", e))?;
        }
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self).map_err(|e| KernelError::Parse {
            path: path.into(),
            content: String::new(),
            problem: e.to_string(),
        })?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| KernelError::io(&tmp, "write the state file", e))?;
        std::io::Write::write_all(&mut file, text.as_bytes())
            .map_err(|e| KernelError::io(&tmp, "write the state file", e))?;
        file.sync_all()
            .map_err(|e| KernelError::io(&tmp, "fsync the state file", e))?;
        std::fs::rename(&tmp, path).map_err(|e| KernelError::io(path, "replace the state file", e))
    }
}
