//! `zpage kernel apply` / `revert`: turn a [`KernelConfig`] into a plan of
//! steps, run it with rollback on failure, and keep the state saved before
//! the first apply so `revert` can put it back.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{KernelConfig, SysctlValue};
use crate::procfs::{self, SwapArea};
use crate::swapdev;
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
        })
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

/// One change to the machine. Each step knows how to undo itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Write a value to a zswap parameter or sysctl file.
    WriteValue {
        /// File.
        path: PathBuf,
        /// New value.
        value: String,
        /// Value before.
        previous: String,
    },
    /// Create a zram device (hot_add); must yield `index`.
    ZramHotAdd {
        /// Expected index.
        index: u32,
    },
    /// Remove a zram device.
    ZramHotRemove {
        /// Index.
        index: u32,
    },
    /// Reset and configure a zram device, then write a swap signature.
    ZramSetup {
        /// Index.
        index: u32,
        /// Algorithm.
        algorithm: String,
        /// algorithm_params, if any.
        algorithm_params: Option<String>,
        /// disksize in bytes.
        disksize: u64,
        /// mem_limit in bytes (0 = none).
        mem_limit: u64,
        /// Configuration before (to undo).
        previous: ZramSnapshot,
    },
    /// Put a zram device back as it was (undo of ZramSetup).
    ZramRestore {
        /// Configuration to restore.
        snapshot: ZramSnapshot,
    },
    /// Create a swap file (filled, mode 0600, with signature).
    CreateSwapFile {
        /// Path.
        path: PathBuf,
        /// Size in bytes.
        size: u64,
    },
    /// Delete a file we created.
    RemoveFile {
        /// Path.
        path: PathBuf,
    },
    /// Open a dm-crypt plain mapping with a random key and mkswap it.
    CryptOpen {
        /// Underlying file or device.
        path: PathBuf,
    },
    /// Close a dm-crypt mapping.
    CryptClose {
        /// Mapping name.
        name: String,
    },
    /// swapon.
    SwapOn {
        /// Path.
        path: PathBuf,
        /// Priority.
        priority: Option<i16>,
        /// Discard.
        discard: bool,
    },
    /// swapoff.
    SwapOff {
        /// Path.
        path: PathBuf,
        /// Priority it had (to undo).
        priority: i32,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::WriteValue { path, value, previous } => write!(f, "write {value} to {} (was {previous})", path.display()),
            Step::ZramHotAdd { index } => write!(f, "create zram{index} (hot_add)"),
            Step::ZramHotRemove { index } => write!(f, "remove zram{index} (hot_remove)"),
            Step::ZramSetup { index, algorithm, algorithm_params, disksize, mem_limit, .. } => write!(
                f,
                "reset zram{index}, set algorithm {algorithm}{}, disksize {} bytes, mem_limit {}, write swap signature",
                algorithm_params.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
                disksize,
                if *mem_limit == 0 { "none".to_string() } else { format!("{mem_limit} bytes") }
            ),
            Step::ZramRestore { snapshot } => write!(f, "restore zram{} (algorithm {}, disksize {})", snapshot.index, snapshot.algorithm, snapshot.disksize),
            Step::CreateSwapFile { path, size } => write!(f, "create swap file {} of {size} bytes", path.display()),
            Step::RemoveFile { path } => write!(f, "remove {}", path.display()),
            Step::CryptOpen { path } => write!(f, "open dm-crypt plain mapping {} over {} with a random key, mkswap it", swapdev::crypt_name(path), path.display()),
            Step::CryptClose { name } => write!(f, "close dm-crypt mapping {name}"),
            Step::SwapOn { path, priority, discard } => write!(
                f,
                "swapon {}{}{}",
                path.display(),
                priority.map(|p| format!(" priority {p}")).unwrap_or_default(),
                if *discard { " with discard" } else { "" }
            ),
            Step::SwapOff { path, .. } => write!(f, "swapoff {}", path.display()),
        }
    }
}

fn restore_zram(snapshot: &ZramSnapshot) -> Result<()> {
    let device = ZramDevice::open(snapshot.index)?;
    device.reset()?;
    crate::write_file(device.attr_path("comp_algorithm"), &snapshot.algorithm)?;
    if snapshot.initialised && snapshot.disksize > 0 {
        crate::write_file(device.attr_path("disksize"), &snapshot.disksize.to_string())?;
        if snapshot.mem_limit > 0 {
            device.set_mem_limit(snapshot.mem_limit)?;
        }
        if snapshot.swap_priority.is_some() {
            swapdev::make_swap(&device.dev_path(), snapshot.disksize)?;
        }
    }
    Ok(())
}

impl Step {
    /// Performs the step; returns the step that undoes it.
    pub fn execute(&self, created: &mut Created) -> Result<Option<Step>> {
        match self {
            Step::WriteValue {
                path,
                value,
                previous,
            } => {
                crate::write_file(path, value)?;
                Ok(Some(Step::WriteValue {
                    path: path.clone(),
                    value: previous.clone(),
                    previous: value.clone(),
                }))
            }
            Step::ZramHotAdd { index } => {
                let device = ZramDevice::hot_add()?;
                if device.index() != *index {
                    let got = device.index();
                    let _ = device.hot_remove();
                    return Err(KernelError::config(
                        "zram.index",
                        format!("hot_add created zram{got}, not zram{index}"),
                        "use consecutive indexes starting after the existing devices",
                    ));
                }
                created.zram_indexes.push(*index);
                Ok(Some(Step::ZramHotRemove { index: *index }))
            }
            Step::ZramHotRemove { index } => {
                ZramDevice::open(*index)?.hot_remove()?;
                created.zram_indexes.retain(|i| i != index);
                Ok(None)
            }
            Step::ZramSetup {
                index,
                algorithm,
                algorithm_params,
                disksize,
                mem_limit,
                previous,
            } => {
                let device = ZramDevice::open(*index)?;
                let undo = Some(Step::ZramRestore {
                    snapshot: previous.clone(),
                });
                device.reset()?;
                device.check_algorithm(algorithm)?;
                crate::write_file(device.attr_path("comp_algorithm"), algorithm)?;
                if let Some(params) = algorithm_params {
                    if let Err(e) = device.set_algorithm_params(params) {
                        let _ = restore_zram(previous);
                        return Err(e);
                    }
                }
                let result = crate::write_file(device.attr_path("disksize"), &disksize.to_string())
                    .and_then(|()| {
                        if *mem_limit > 0 {
                            device.set_mem_limit(*mem_limit)
                        } else {
                            Ok(())
                        }
                    })
                    .and_then(|()| swapdev::make_swap(&device.dev_path(), *disksize));
                if let Err(e) = result {
                    let _ = restore_zram(previous);
                    return Err(e);
                }
                Ok(undo)
            }
            Step::ZramRestore { snapshot } => {
                restore_zram(snapshot)?;
                Ok(None)
            }
            Step::CreateSwapFile { path, size } => {
                if let Err(e) = swapdev::create_swap_file(path, *size) {
                    let _ = std::fs::remove_file(path);
                    return Err(e);
                }
                created.files.push(path.clone());
                Ok(Some(Step::RemoveFile { path: path.clone() }))
            }
            Step::RemoveFile { path } => {
                std::fs::remove_file(path).map_err(|e| KernelError::io(path, "remove", e))?;
                created.files.retain(|p| p != path);
                Ok(None)
            }
            Step::CryptOpen { path } => {
                let mapped = swapdev::crypt_open(path)?;
                let name = swapdev::crypt_name(path);
                let size = swapdev::size_of(&mapped)?;
                if let Err(e) = swapdev::make_swap(&mapped, size) {
                    let _ = swapdev::crypt_close(&name);
                    return Err(e);
                }
                created.crypt_mappings.push(name.clone());
                Ok(Some(Step::CryptClose { name }))
            }
            Step::CryptClose { name } => {
                swapdev::crypt_close(name)?;
                created.crypt_mappings.retain(|n| n != name);
                Ok(None)
            }
            Step::SwapOn {
                path,
                priority,
                discard,
            } => {
                swapdev::swap_on(path, *priority, *discard)?;
                if !created.swap_areas.contains(path) {
                    created.swap_areas.push(path.clone());
                }
                let now = procfs::swaps()?
                    .into_iter()
                    .find(|s| same_path(&s.path, path))
                    .map(|s| s.priority)
                    .unwrap_or(-1);
                Ok(Some(Step::SwapOff {
                    path: path.clone(),
                    priority: now,
                }))
            }
            Step::SwapOff { path, priority } => {
                swapdev::swap_off(path)?;
                created.swap_areas.retain(|p| p != path);
                let priority =
                    (*priority >= 0).then(|| i16::try_from(*priority).unwrap_or(i16::MAX));
                Ok(Some(Step::SwapOn {
                    path: path.clone(),
                    priority,
                    discard: false,
                }))
            }
        }
    }
}

fn same_path(kernel_path: &str, path: &Path) -> bool {
    if Path::new(kernel_path) == path {
        return true;
    }
    match (
        std::fs::canonicalize(kernel_path),
        std::fs::canonicalize(path),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The plan `apply` would run, with notes (skipped optional devices, computed values).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Things worth telling (skips, computed swappiness, no-ops).
    pub notes: Vec<String>,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        if self.steps.is_empty() {
            writeln!(
                f,
                "nothing to change: the machine already matches the config"
            )?;
        }
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "{:>2}. {step}", i + 1)?;
        }
        Ok(())
    }
}

/// Options of [`plan`].
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Value to use for `swappiness = "auto"` instead of measuring (tests, dry runs).
    pub swappiness_override: Option<u8>,
    /// State file; `None` means [`state_file_path`].
    pub state_file: Option<PathBuf>,
}

impl PlanOptions {
    /// The state file in effect.
    pub fn state_file(&self) -> PathBuf {
        self.state_file.clone().unwrap_or_else(state_file_path)
    }
}

fn ensure_root(what: &str) -> Result<()> {
    if crate::sys::is_root() {
        Ok(())
    } else {
        Err(KernelError::NeedsRoot {
            path: PathBuf::from(what),
            action: "change kernel settings".into(),
        })
    }
}

/// Validates `config` against the running kernel and builds the plan.
/// Changes nothing (except that `swappiness = "auto"` measures on a
/// temporary zram device, removed afterwards).
pub fn plan(config: &KernelConfig, options: &PlanOptions) -> Result<Plan> {
    config.check_static()?;
    let mut plan = Plan::default();
    let mem_total = procfs::mem_total_bytes()?;
    let swaps = procfs::swaps()?;
    let saved = SavedState::load(&options.state_file()).ok().flatten();

    // zswap first: cheapest, and independent of devices.
    if let Some(zs) = &config.zswap {
        let current = zswap::parameters()?;
        let mut want: Vec<(&str, String, &str)> = Vec::new();
        if let Some(c) = &zs.compressor {
            let available = zswap::available_compressors()?;
            if !available.contains(c) && current.get("compressor") != Some(c) {
                return Err(KernelError::UnknownAlgorithm {
                    device: "zswap (key zswap.compressor)".into(),
                    algorithm: c.clone(),
                    available: available.join(" "),
                });
            }
            want.push(("compressor", c.clone(), "zswap.compressor"));
        }
        if let Some(p) = zs.max_pool_percent {
            want.push(("max_pool_percent", p.to_string(), "zswap.max_pool_percent"));
        }
        if let Some(p) = zs.accept_threshold_percent {
            want.push((
                "accept_threshold_percent",
                p.to_string(),
                "zswap.accept_threshold_percent",
            ));
        }
        if let Some(s) = zs.shrinker {
            want.push(("shrinker_enabled", yn(s), "zswap.shrinker"));
        }
        if let Some(e) = zs.enabled {
            want.push(("enabled", yn(e), "zswap.enabled"));
        }
        for (name, value, key) in want {
            let Some(previous) = current.get(name) else {
                return Err(KernelError::config(
                    key,
                    format!("this kernel has no zswap parameter {name}"),
                    "remove the key",
                ));
            };
            if previous != &value {
                plan.steps.push(Step::WriteValue {
                    path: zswap::parameter_path(name),
                    value,
                    previous: previous.clone(),
                });
            }
        }
    }

    // zram devices.
    let existing = ZramDevice::list().unwrap_or_default();
    let mut next_new_index = existing.iter().map(|d| d.index() + 1).max().unwrap_or(0);
    for (i, z) in config.zram.iter().enumerate() {
        let key = format!("zram[{i}]");
        let index = config.zram_index(i);
        let disksize = z.size.resolve(&format!("{key}.size"), mem_total)?;
        if disksize > mem_total.saturating_mul(4) {
            return Err(KernelError::config(format!("{key}.size"), format!("{disksize} bytes is more than 4 x RAM ({mem_total} bytes); zram holds data in RAM"), "use at most 1.5 x RAM (2:1 compression is typical)"));
        }
        let mem_limit = match &z.mem_limit {
            Some(l) => l.resolve(&format!("{key}.mem_limit"), mem_total)?,
            None => 0,
        };
        if mem_limit > mem_total {
            return Err(KernelError::config(
                format!("{key}.mem_limit"),
                "larger than RAM",
                "give at most the RAM size",
            ));
        }
        let device = existing.iter().find(|d| d.index() == index);
        let device = match device {
            Some(d) => d.clone(),
            None => {
                if existing.is_empty() && !Path::new("/sys/class/zram-control").exists() {
                    return Err(KernelError::ZramModuleNotLoaded);
                }
                if index != next_new_index {
                    return Err(KernelError::config(format!("{key}.index"), format!("zram{index} does not exist and hot_add would create zram{next_new_index}"), "use consecutive indexes after the existing devices"));
                }
                next_new_index += 1;
                plan.steps.push(Step::ZramHotAdd { index });
                // A fresh device offers the same algorithms as the others.
                if let Some(any) = existing.first() {
                    any.check_algorithm(&z.algorithm)
                        .map_err(|e| rename_key(e, &format!("{key}.algorithm")))?;
                }
                let previous = ZramSnapshot {
                    index,
                    initialised: false,
                    algorithm: z.algorithm.clone(),
                    disksize: 0,
                    mem_limit: 0,
                    swap_priority: None,
                };
                plan.steps.push(Step::ZramSetup {
                    index,
                    algorithm: z.algorithm.clone(),
                    algorithm_params: z.algorithm_params.clone(),
                    disksize,
                    mem_limit,
                    previous,
                });
                plan.steps.push(Step::SwapOn {
                    path: PathBuf::from(format!("/dev/zram{index}")),
                    priority: Some(z.priority()),
                    discard: true,
                });
                continue;
            }
        };
        device
            .check_algorithm(&z.algorithm)
            .map_err(|e| rename_key(e, &format!("{key}.algorithm")))?;
        if z.algorithm_params.is_some() && !device.has_attr("algorithm_params") {
            return Err(KernelError::config(
                format!("{key}.algorithm_params"),
                "this kernel has no algorithm_params (Linux 6.12+)",
                "remove the key",
            ));
        }
        let snapshot = ZramSnapshot::take(&device, &swaps)?;
        let params_applied = match &z.algorithm_params {
            None => true,
            Some(p) => {
                saved
                    .as_ref()
                    .and_then(|s| s.applied_zram_params.get(&index))
                    == Some(p)
            }
        };
        let matches = snapshot.initialised
            && snapshot.algorithm == z.algorithm
            && snapshot.disksize == disksize
            && snapshot.mem_limit == mem_limit
            && snapshot.swap_priority == Some(i32::from(z.priority()))
            && params_applied;
        if matches {
            plan.notes
                .push(format!("{} already matches {key}", device.name()));
            continue;
        }
        match device.in_use_reason()? {
            None => {}
            Some(_) if snapshot.swap_priority.is_some() => {
                // swapoff moves its pages back into RAM, so nothing is lost.
                plan.steps.push(Step::SwapOff {
                    path: device.dev_path(),
                    priority: snapshot.swap_priority.unwrap_or(-1),
                });
            }
            Some(reason) => {
                return Err(KernelError::DeviceBusy {
                    device: device.name(),
                    reason: format!(
                        "{reason}; it is not a swap area, so resetting it could destroy data"
                    ),
                    fix: format!(
                        "free it yourself (`echo 1 > {}`) or choose another index in {key}.index",
                        device.attr_path("reset").display()
                    ),
                });
            }
        }
        plan.steps.push(Step::ZramSetup {
            index,
            algorithm: z.algorithm.clone(),
            algorithm_params: z.algorithm_params.clone(),
            disksize,
            mem_limit,
            previous: snapshot,
        });
        plan.steps.push(Step::SwapOn {
            path: device.dev_path(),
            priority: Some(z.priority()),
            discard: true,
        });
    }

    // Disk swap: the lower tier. Missing optional hardware is skipped (nofail).
    for (i, s) in config.swap.iter().enumerate() {
        let key = format!("swap[{i}]");
        let path = PathBuf::from(&s.path);
        let skip_or_fail = |plan: &mut Plan, problem: String, fix: &str| -> Result<()> {
            if s.required {
                Err(KernelError::config(
                    format!("{key}.path"),
                    problem,
                    fix.to_string(),
                ))
            } else {
                plan.notes
                    .push(format!("skipping optional {key} ({}): {problem}", s.path));
                Ok(())
            }
        };
        if s.encrypted {
            if let Some(reason) = swapdev::encryption_unavailable_reason() {
                skip_or_fail(
                    &mut plan,
                    format!("encrypted = true but {reason}"),
                    "set encrypted = false, or use a kernel with dm-crypt",
                )?;
                continue;
            }
        }
        let swap_path = if s.encrypted {
            PathBuf::from(format!("/dev/mapper/{}", swapdev::crypt_name(&path)))
        } else {
            path.clone()
        };
        if let Some(active) = swaps.iter().find(|a| same_path(&a.path, &swap_path)) {
            if active.priority == i32::from(s.priority()) {
                plan.notes.push(format!(
                    "{} is already swap with priority {}",
                    s.path, active.priority
                ));
                continue;
            }
            plan.steps.push(Step::SwapOff {
                path: swap_path.clone(),
                priority: active.priority,
            });
            plan.steps.push(Step::SwapOn {
                path: swap_path,
                priority: Some(s.priority()),
                discard: s.discard,
            });
            continue;
        }
        if !path.exists() {
            match &s.size {
                Some(size) if !s.encrypted => {
                    let bytes = size.resolve(&format!("{key}.size"), mem_total)?;
                    let parent = path.parent().unwrap_or(Path::new("/"));
                    if !parent.is_dir() {
                        skip_or_fail(
                            &mut plan,
                            format!("directory {} does not exist", parent.display()),
                            "create the directory or fix the path",
                        )?;
                        continue;
                    }
                    plan.steps.push(Step::CreateSwapFile {
                        path: path.clone(),
                        size: bytes,
                    });
                }
                _ => {
                    skip_or_fail(&mut plan, format!("{} does not exist", s.path), "attach the device, fix the path, give `size` to create a swap file, or set required = false")?;
                    continue;
                }
            }
        } else if s.encrypted {
            plan.steps.push(Step::CryptOpen { path: path.clone() });
        } else if !swapdev::has_swap_signature(&path) {
            return Err(KernelError::config(
                format!("{key}.path"),
                format!("{} has no swap signature", s.path),
                "run `mkswap` on it, or remove it and give `size` so zpage creates the file",
            ));
        }
        plan.steps.push(Step::SwapOn {
            path: swap_path,
            priority: Some(s.priority()),
            discard: s.discard,
        });
    }

    // Sysctls last: they steer the tiers just configured.
    if let Some(sc) = &config.sysctl {
        let mut want: Vec<(&str, String)> = Vec::new();
        match &sc.swappiness {
            Some(SysctlValue::Number(n)) => want.push(("vm.swappiness", n.to_string())),
            Some(SysctlValue::Text(_)) => {
                let remembered = saved.as_ref().and_then(|s| s.auto_swappiness);
                let value = match (options.swappiness_override, remembered) {
                    (Some(v), _) => {
                        plan.notes
                            .push(format!("swappiness \"auto\" given as {v} (no measurement)"));
                        v
                    }
                    (None, Some(v)) => {
                        plan.notes.push(format!("swappiness \"auto\" = {v}, measured at the first apply (revert, then apply again to measure anew)"));
                        v
                    }
                    (None, None) => {
                        let algorithm = config.zram.first().map(|z| z.algorithm.as_str());
                        let m = crate::measure::swap_to_file_speed(algorithm)?;
                        plan.notes.push(format!(
                            "swappiness \"auto\": {} random 4 KiB read {:.1} us vs file {:.1} us: swap is {:.2}x as fast -> 200*r/(1+r) = {}",
                            m.swap_tier, m.swap_us_per_page, m.file_us_per_page, m.ratio, m.swappiness
                        ));
                        m.swappiness
                    }
                };
                want.push(("vm.swappiness", value.to_string()));
            }
            None => {}
        }
        if let Some(p) = sc.page_cluster {
            want.push(("vm.page-cluster", p.to_string()));
        }
        if let Some(w) = sc.watermark_scale_factor {
            want.push(("vm.watermark_scale_factor", w.to_string()));
        }
        if let Some(e) = sc.extfrag_threshold {
            want.push(("vm.extfrag_threshold", e.to_string()));
        }
        for (name, value) in want {
            let previous = procfs::sysctl_read(name)?;
            if previous != value {
                plan.steps.push(Step::WriteValue {
                    path: procfs::sysctl_path(name),
                    value,
                    previous,
                });
            }
        }
    }
    Ok(plan)
}

fn rename_key(error: KernelError, key: &str) -> KernelError {
    match error {
        KernelError::UnknownAlgorithm {
            algorithm,
            available,
            ..
        } => KernelError::UnknownAlgorithm {
            device: format!("key {key}"),
            algorithm,
            available,
        },
        other => other,
    }
}

fn yn(b: bool) -> String {
    if b { "Y" } else { "N" }.to_string()
}

/// Result of [`apply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// The plan that was carried out.
    pub plan: Plan,
    /// Where the pre-apply state is kept for `revert`.
    pub state_file: PathBuf,
}

/// Test seam: stop with an error before step number `n` (0-based), to
/// prove that rollback restores everything already changed.
#[derive(Clone, Debug, Default)]
pub struct ApplyOptions {
    /// Plan options.
    pub plan: PlanOptions,
    /// Inject a failure before this step (tests only).
    #[doc(hidden)]
    pub fail_before_step: Option<usize>,
}

/// Applies `config`: plans, saves the pre-apply state (first apply only),
/// runs the steps and, if one fails, undoes the ones already done.
pub fn apply(config: &KernelConfig, options: &ApplyOptions) -> Result<ApplyReport> {
    let plan = plan(config, &options.plan)?;
    let state_file = options.plan.state_file();
    if plan.steps.is_empty() {
        return Ok(ApplyReport { plan, state_file });
    }
    ensure_root("/sys and /proc/sys")?;
    let existing_state = SavedState::load(&state_file)?;
    let first_apply = existing_state.is_none();
    let mut state = match existing_state {
        Some(s) => s,
        None => SavedState::capture()?,
    };
    state.store(&state_file)?;

    let mut undo: Vec<Step> = Vec::new();
    let mut failure = None;
    for (n, step) in plan.steps.iter().enumerate() {
        if options.fail_before_step == Some(n) {
            failure = Some(KernelError::Command {
                command: format!("step {}: {step}", n + 1),
                detail: "injected failure (test)".into(),
                fix: "none needed".into(),
            });
            break;
        }
        match step.execute(&mut state.created) {
            Ok(Some(u)) => undo.push(u),
            Ok(None) => {}
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if let Some(cause) = failure {
        let mut rollback_errors = Vec::new();
        for step in undo.iter().rev() {
            if let Err(e) = step.execute(&mut state.created) {
                rollback_errors.push(format!("{step}: {e}"));
            }
        }
        if first_apply && rollback_errors.is_empty() {
            let _ = std::fs::remove_file(&state_file);
        } else {
            let _ = state.store(&state_file);
        }
        let rollback_note = if rollback_errors.is_empty() {
            String::new()
        } else {
            format!("; these undo steps failed: {}", rollback_errors.join("; "))
        };
        return Err(KernelError::RolledBack {
            cause: Box::new(cause),
            rollback_note,
        });
    }
    for (i, z) in config.zram.iter().enumerate() {
        if let Some(p) = &z.algorithm_params {
            state
                .applied_zram_params
                .insert(config.zram_index(i), p.clone());
        }
    }
    if let Some(SysctlValue::Text(_)) = config.sysctl.as_ref().and_then(|s| s.swappiness.as_ref()) {
        if let Some(Step::WriteValue { value, .. }) = plan.steps.iter().find(|s| matches!(s, Step::WriteValue { path, .. } if path == &procfs::sysctl_path("vm.swappiness"))) {
            state.auto_swappiness = value.parse().ok();
        }
    }
    state.store(&state_file)?;
    Ok(ApplyReport { plan, state_file })
}

/// Result of [`revert`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RevertReport {
    /// What was done.
    pub done: Vec<String>,
    /// Steps that failed (revert goes on past them).
    pub failed: Vec<String>,
}

/// Restores the state saved before the first apply, removes what applies
/// created, and deletes the state file. Goes on past failures and reports them.
pub fn revert(state_file: &Path) -> Result<RevertReport> {
    let state_file = state_file.to_path_buf();
    let Some(saved) = SavedState::load(&state_file)? else {
        return Err(KernelError::Command {
            command: "zpage kernel revert".into(),
            detail: format!("no saved state at {}", state_file.display()),
            fix: format!("nothing to revert (no apply since the last revert), or point {STATE_FILE_ENV} at the state file"),
        });
    };
    ensure_root("/sys and /proc/sys")?;
    let mut report = RevertReport::default();
    let mut created = saved.created.clone();
    let run = |step: Step, report: &mut RevertReport, created: &mut Created| {
        let text = step.to_string();
        match step.execute(created) {
            Ok(_) => report.done.push(text),
            Err(e) => report.failed.push(format!("{text}: {e}")),
        }
    };
    let current_swaps = procfs::swaps()?;
    let devices = ZramDevice::list().unwrap_or_default();
    let zram_changed = |index: u32| -> bool {
        let before = saved.zram.iter().find(|z| z.index == index);
        let Ok(device) = ZramDevice::open(index) else {
            return false;
        };
        let now = ZramSnapshot::take(&device, &current_swaps).ok();
        match (before, now) {
            (Some(b), Some(n)) => *b != n || saved.applied_zram_params.contains_key(&index),
            (None, _) => true,
            _ => false,
        }
    };
    // 1. swapoff what apply turned on, what had another priority before, and what sits on a zram device to restore.
    for active in &current_swaps {
        let was = saved.swaps.iter().find(|s| s.path == active.path);
        let turned_on_by_apply = saved
            .created
            .swap_areas
            .iter()
            .any(|p| same_path(&active.path, p));
        let priority_changed = was.is_some_and(|w| w.priority != active.priority);
        let on_changed_zram = devices
            .iter()
            .any(|d| d.dev_path().display().to_string() == active.path && zram_changed(d.index()));
        if turned_on_by_apply || priority_changed || on_changed_zram {
            run(
                Step::SwapOff {
                    path: PathBuf::from(&active.path),
                    priority: active.priority,
                },
                &mut report,
                &mut created,
            );
        }
    }
    // 2. zram devices: remove created ones, restore changed ones.
    for index in saved.created.zram_indexes.iter().rev() {
        if let Ok(device) = ZramDevice::open(*index) {
            if let Err(e) = device.reset() {
                report.failed.push(format!("reset zram{index}: {e}"));
            }
        }
        run(
            Step::ZramHotRemove { index: *index },
            &mut report,
            &mut created,
        );
    }
    for snapshot in &saved.zram {
        if zram_changed(snapshot.index) {
            run(
                Step::ZramRestore {
                    snapshot: snapshot.clone(),
                },
                &mut report,
                &mut created,
            );
        }
    }
    // 3. dm-crypt mappings and files we created.
    for name in &saved.created.crypt_mappings {
        run(
            Step::CryptClose { name: name.clone() },
            &mut report,
            &mut created,
        );
    }
    for path in &saved.created.files {
        run(
            Step::RemoveFile { path: path.clone() },
            &mut report,
            &mut created,
        );
    }
    // 4. swap areas that were active before.
    let now_swaps = procfs::swaps().unwrap_or_default();
    for was in &saved.swaps {
        if !now_swaps.iter().any(|s| s.path == was.path) {
            let priority =
                (was.priority >= 0).then(|| i16::try_from(was.priority).unwrap_or(i16::MAX));
            run(
                Step::SwapOn {
                    path: PathBuf::from(&was.path),
                    priority,
                    discard: false,
                },
                &mut report,
                &mut created,
            );
        }
    }
    // 5. zswap parameters and sysctls.
    let zswap_now = zswap::parameters().unwrap_or_default();
    // Restore `enabled` last so the compressor is right before zswap accepts pages.
    let mut names: Vec<&String> = saved.zswap.keys().collect();
    names.sort_by_key(|n| n.as_str() == "enabled");
    for name in names {
        let value = &saved.zswap[name];
        if zswap_now.get(name) != Some(value) {
            let previous = zswap_now.get(name).cloned().unwrap_or_default();
            run(
                Step::WriteValue {
                    path: zswap::parameter_path(name),
                    value: value.clone(),
                    previous,
                },
                &mut report,
                &mut created,
            );
        }
    }
    for (name, value) in &saved.sysctls {
        let now = procfs::sysctl_read(name).unwrap_or_default();
        if &now != value {
            run(
                Step::WriteValue {
                    path: procfs::sysctl_path(name),
                    value: value.clone(),
                    previous: now,
                },
                &mut report,
                &mut created,
            );
        }
    }
    if report.failed.is_empty() {
        std::fs::remove_file(&state_file)
            .map_err(|e| KernelError::io(&state_file, "remove the state file", e))?;
        report
            .done
            .push(format!("removed {}", state_file.display()));
    } else {
        let mut kept = saved.clone();
        kept.created = created;
        let _ = kept.store(&state_file);
    }
    Ok(report)
}
