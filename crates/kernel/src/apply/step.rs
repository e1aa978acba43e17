//! The steps of a plan: each changes one thing and knows how to undo itself.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{Created, ZramSnapshot};
use crate::procfs::{self};
use crate::swapdev;
use crate::zram::ZramDevice;
use crate::{KernelError, Result};

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
        /// Backing device for writeback (set before disksize).
        #[serde(default)]
        backing_dev: Option<String>,
        /// Recompression algorithms by priority (set before disksize).
        #[serde(default)]
        recompress_algorithms: Vec<String>,
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
        /// Swapped-out data it held when planned (moved back into RAM).
        #[serde(default)]
        used_bytes: u64,
    },
    /// Measure zram (or disk) against file reads on a temporary device, then
    /// set vm.swappiness to 200*r/(1+r): `swappiness = "auto"`.
    MeasureSwappiness {
        /// zram algorithm to measure (the first [[zram]]'s); `None`: a disk tier.
        zram_algorithm: Option<String>,
        /// vm.swappiness before.
        previous: String,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::WriteValue { path, value, previous } => write!(f, "write {value} to {} (was {previous})", path.display()),
            Step::ZramHotAdd { index } => write!(f, "create zram{index} (hot_add)"),
            Step::ZramHotRemove { index } => write!(f, "remove zram{index} (hot_remove)"),
            Step::ZramSetup { index, algorithm, algorithm_params, disksize, mem_limit, backing_dev, recompress_algorithms, .. } => write!(
                f,
                "reset zram{index}, set algorithm {algorithm}{}{}{}, disksize {} bytes, mem_limit {}, write swap signature",
                algorithm_params.as_ref().map(|p| format!(" ({p})")).unwrap_or_default(),
                if recompress_algorithms.is_empty() { String::new() } else { format!(", recompression algorithms {}", recompress_algorithms.join(" then ")) },
                backing_dev.as_ref().map(|b| format!(", writeback to {b}")).unwrap_or_default(),
                disksize,
                if *mem_limit == 0 { "none".to_string() } else { format!("{mem_limit} bytes") }
            ),
            Step::MeasureSwappiness { zram_algorithm, previous } => write!(
                f,
                "measure random 4 KiB reads from {} against reads from a file in /var/tmp, then set vm.swappiness to 200*r/(1+r) (now {previous})",
                zram_algorithm.as_ref().map(|a| format!("a temporary zram device ({a}, removed afterwards)")).unwrap_or_else(|| "the disk".into())
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
            Step::SwapOff { path, used_bytes: 0, .. } => write!(f, "swapoff {} (empty)", path.display()),
            Step::SwapOff { path, used_bytes, .. } => write!(f, "swapoff {}: moves {} of swapped-out memory back into RAM", path.display(), zpage_units::format_bytes(*used_bytes)),
        }
    }
}

pub(super) fn restore_zram(snapshot: &ZramSnapshot) -> Result<()> {
    let device = ZramDevice::open(snapshot.index)?;
    device.reset()?;
    crate::write_file(device.attr_path("comp_algorithm"), &snapshot.algorithm)?;
    set_before_disksize(
        &device,
        snapshot.backing_dev.as_deref(),
        &snapshot.recompress_algorithms,
    )?;
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

/// Writes what the kernel accepts only before `disksize`: the backing
/// device and the recompression algorithms (priority 1, 2, ...).
fn set_before_disksize(
    device: &ZramDevice,
    backing_dev: Option<&str>,
    recompress_algorithms: &[String],
) -> Result<()> {
    if let Some(backing) = backing_dev {
        device.write_attribute("backing_dev", backing)?;
    }
    for (i, algorithm) in recompress_algorithms.iter().enumerate() {
        device.write_attribute(
            "recomp_algorithm",
            &format!("algo={algorithm} priority={}", i + 1),
        )?;
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
                backing_dev,
                recompress_algorithms,
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
                let result =
                    set_before_disksize(&device, backing_dev.as_deref(), recompress_algorithms)
                        .and_then(|()| {
                            crate::write_file(device.attr_path("disksize"), &disksize.to_string())
                        })
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
                    used_bytes: 0,
                }))
            }
            Step::MeasureSwappiness {
                zram_algorithm,
                previous,
            } => {
                let measured = crate::measure::swap_to_file_speed(zram_algorithm.as_deref())?;
                let path = procfs::sysctl_path("vm.swappiness");
                crate::write_file(&path, &measured.swappiness.to_string())?;
                Ok(Some(Step::WriteValue {
                    path,
                    value: previous.clone(),
                    previous: measured.swappiness.to_string(),
                }))
            }
            Step::SwapOff { path, priority, .. } => {
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

pub(super) fn same_path(kernel_path: &str, path: &Path) -> bool {
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
