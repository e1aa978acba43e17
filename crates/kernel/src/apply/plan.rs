//! From a config and the machine as it is, the steps `apply` would run.
//! Planning only reads: a dry run changes nothing, and `swappiness = "auto"`
//! becomes a step that measures when it runs.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::{state_file_path, SavedState, ZramSnapshot};
use super::step::{same_path, Step};
use crate::config::{DiskSwapConfig, KernelConfig, SysctlTarget, ZramConfig};
use crate::procfs::{self, SwapArea};
use crate::swapdev;
use crate::zram::ZramDevice;
use crate::{zswap, KernelError, Result};
use zpage_units::format_bytes;

/// The plan `apply` would run, with notes (skipped optional devices, computed values).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Things worth telling (skips, computed swappiness, no-ops).
    pub notes: Vec<String>,
    /// What the steps put at risk (data moved back into RAM, discarded), allowed by `--force`.
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        for warning in &self.warnings {
            writeln!(f, "warning: {warning}")?;
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
    /// Value to use for `swappiness = "auto"` instead of measuring (tests).
    pub swappiness_override: Option<u8>,
    /// State file; `None` means [`state_file_path`].
    pub state_file: Option<PathBuf>,
    /// Allow steps that move data held in swap back into RAM or discard a
    /// device's data (`--force`).
    pub force: bool,
}

impl PlanOptions {
    /// The state file in effect.
    pub fn state_file(&self) -> PathBuf {
        self.state_file.clone().unwrap_or_else(state_file_path)
    }
}

/// What planning needs to know about the machine, read once.
struct Machine {
    mem_total: u64,
    swaps: Vec<SwapArea>,
    saved: Option<SavedState>,
}

/// Validates `config` against the running kernel and builds the plan.
/// Reads only: nothing on the machine changes.
pub fn plan(config: &KernelConfig, options: &PlanOptions) -> Result<Plan> {
    config.check_static()?;
    let machine = Machine {
        mem_total: procfs::mem_total_bytes()?,
        swaps: procfs::swaps()?,
        saved: SavedState::load(&options.state_file()).ok().flatten(),
    };
    let mut plan = Plan::default();
    // zswap first: cheapest, and independent of devices.
    plan_zswap(config, &mut plan)?;
    plan_zram(config, &machine, options, &mut plan)?;
    plan_disk_swap(config, &machine, options, &mut plan)?;
    // Sysctls last: they steer the tiers just configured.
    plan_sysctls(config, &machine, options, &mut plan)?;
    Ok(plan)
}

fn plan_zswap(config: &KernelConfig, plan: &mut Plan) -> Result<()> {
    let Some(zs) = &config.zswap else {
        return Ok(());
    };
    let current = zswap::parameters()?;
    if let Some(c) = &zs.compressor {
        let available = zswap::available_compressors()?;
        if !available.contains(c) && current.get("compressor") != Some(c) {
            return Err(KernelError::UnknownAlgorithm {
                device: "zswap (key zswap.compressor)".into(),
                algorithm: c.clone(),
                available: available.join(" "),
            });
        }
    }
    for (name, value, key) in zs.parameters() {
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
    Ok(())
}

/// The swapoff that reconfiguring an active swap area needs: allowed as is
/// when the area is empty, with `--force` when it holds data (its pages move
/// back into RAM, which needs that much free memory).
fn swapoff_step(area: &SwapArea, options: &PlanOptions, plan: &mut Plan) -> Result<Step> {
    if area.used_bytes > 0 {
        let what = format!(
            "{} holds {} of swapped-out memory: reconfiguring it runs swapoff, which moves all of it back into RAM (it needs that much free memory, and fails or invokes the OOM killer without it)",
            area.path,
            format_bytes(area.used_bytes)
        );
        if !options.force {
            return Err(KernelError::DeviceBusy {
                device: area.path.clone(),
                reason: what,
                fix: "give --force to do it anyway, or apply when the machine has swapped less (`zpage kernel status` shows the use)".into(),
            });
        }
        plan.warnings.push(what);
    }
    Ok(Step::SwapOff {
        path: PathBuf::from(&area.path),
        priority: area.priority,
        used_bytes: area.used_bytes,
    })
}

/// Checks the writeback and recompression keys against what the device offers.
fn check_zram_features(device: &ZramDevice, z: &ZramConfig, key: &str) -> Result<()> {
    let not_in_kernel = |k: &str, feature: &str, option: &str, attribute: &str| {
        KernelError::config(
            format!("{key}.{k}"),
            format!(
                "{feature} is not in this kernel: zram was built without {option} (no {})",
                device.attr_path(attribute).display()
            ),
            "remove the key, or use a kernel built with it",
        )
    };
    if z.algorithm_params.is_some() && !device.has_attr("algorithm_params") {
        return Err(KernelError::config(
            format!("{key}.algorithm_params"),
            "this kernel has no algorithm_params (Linux 6.12+)",
            "remove the key",
        ));
    }
    if z.writeback_device.is_some() && !device.has_attr("backing_dev") {
        return Err(not_in_kernel(
            "writeback_device",
            "writeback",
            "CONFIG_ZRAM_WRITEBACK",
            "backing_dev",
        ));
    }
    if !z.recompress_algorithms.is_empty() && !device.has_attr("recomp_algorithm") {
        return Err(not_in_kernel(
            "recompress_algorithms",
            "recompression",
            "CONFIG_ZRAM_MULTI_COMP",
            "recomp_algorithm",
        ));
    }
    for algorithm in &z.recompress_algorithms {
        device
            .check_algorithm(algorithm)
            .map_err(|e| rename_key(e, &format!("{key}.recompress_algorithms")))?;
    }
    if let Some(backing) = &z.writeback_device {
        if !Path::new(backing).exists() {
            return Err(KernelError::config(
                format!("{key}.writeback_device"),
                format!("{backing} does not exist"),
                "give an existing partition (zram needs a block device)",
            ));
        }
    }
    Ok(())
}

fn setup_step(
    index: u32,
    z: &ZramConfig,
    disksize: u64,
    mem_limit: u64,
    previous: ZramSnapshot,
) -> Step {
    Step::ZramSetup {
        index,
        algorithm: z.algorithm.clone(),
        algorithm_params: z.algorithm_params.clone(),
        disksize,
        mem_limit,
        backing_dev: z.writeback_device.clone(),
        recompress_algorithms: z.recompress_algorithms.clone(),
        previous,
    }
}

fn plan_zram(
    config: &KernelConfig,
    machine: &Machine,
    options: &PlanOptions,
    plan: &mut Plan,
) -> Result<()> {
    let existing = ZramDevice::list().unwrap_or_default();
    let first_new_index = existing.iter().map(|d| d.index() + 1).max().unwrap_or(0);
    for (i, z) in config.zram.iter().enumerate() {
        let key = format!("zram[{i}]");
        let index = config.zram_index(i);
        let mem_total = machine.mem_total;
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
        let Some(device) = existing.iter().find(|d| d.index() == index) else {
            if existing.is_empty() && !Path::new("/sys/class/zram-control").exists() {
                return Err(KernelError::ZramModuleNotLoaded);
            }
            let added_so_far = plan
                .steps
                .iter()
                .filter(|s| matches!(s, Step::ZramHotAdd { .. }))
                .count();
            let next_new_index = first_new_index + added_so_far as u32;
            if index != next_new_index {
                return Err(KernelError::config(
                    format!("{key}.index"),
                    format!(
                        "zram{index} does not exist and hot_add would create zram{next_new_index}"
                    ),
                    "use consecutive indexes after the existing devices",
                ));
            }
            // A fresh device offers what the others offer.
            if let Some(any) = existing.first() {
                any.check_algorithm(&z.algorithm)
                    .map_err(|e| rename_key(e, &format!("{key}.algorithm")))?;
                check_zram_features(any, z, &key)?;
            }
            plan.steps.push(Step::ZramHotAdd { index });
            let previous = ZramSnapshot::fresh(index, &z.algorithm);
            plan.steps
                .push(setup_step(index, z, disksize, mem_limit, previous));
            plan.steps.push(Step::SwapOn {
                path: PathBuf::from(format!("/dev/zram{index}")),
                priority: Some(z.priority()),
                discard: true,
            });
            continue;
        };
        device
            .check_algorithm(&z.algorithm)
            .map_err(|e| rename_key(e, &format!("{key}.algorithm")))?;
        check_zram_features(device, z, &key)?;
        let snapshot = ZramSnapshot::take(device, &machine.swaps)?;
        let params_applied = match &z.algorithm_params {
            None => true,
            Some(p) => {
                machine
                    .saved
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
            && snapshot.backing_dev == z.writeback_device
            && snapshot.recompress_algorithms == z.recompress_algorithms
            && params_applied;
        if matches {
            plan.notes
                .push(format!("{} already matches {key}", device.name()));
            continue;
        }
        let dev = device.dev_path().display().to_string();
        match (
            device.in_use_reason()?,
            machine.swaps.iter().find(|s| s.path == dev),
        ) {
            (None, _) => {}
            (Some(_), Some(area)) => {
                let step = swapoff_step(area, options, plan)?;
                plan.steps.push(step);
            }
            (Some(reason), None) => {
                let stored = device.mm_stat().map(|m| m.orig_data_size).unwrap_or(0);
                let mounted = reason.starts_with("mounted") || reason.starts_with("held by");
                if mounted || !options.force {
                    return Err(KernelError::DeviceBusy {
                        device: device.name(),
                        reason: format!(
                            "{reason}; it is not a swap area, so resetting it would discard the {} stored on it",
                            format_bytes(stored)
                        ),
                        fix: if mounted {
                            format!("unmount or release it first, or choose another index in {key}.index")
                        } else {
                            format!("give --force to discard its data, free it yourself (`echo 1 > {}`), or choose another index in {key}.index", device.attr_path("reset").display())
                        },
                    });
                }
                plan.warnings.push(format!(
                    "{} is initialised but not a swap area: resetting it discards the {} stored on it",
                    device.name(),
                    format_bytes(stored)
                ));
            }
        }
        plan.steps
            .push(setup_step(index, z, disksize, mem_limit, snapshot));
        plan.steps.push(Step::SwapOn {
            path: device.dev_path(),
            priority: Some(z.priority()),
            discard: true,
        });
    }
    Ok(())
}

fn plan_disk_swap(
    config: &KernelConfig,
    machine: &Machine,
    options: &PlanOptions,
    plan: &mut Plan,
) -> Result<()> {
    // Missing optional hardware is skipped (nofail).
    for (i, s) in config.swap.iter().enumerate() {
        plan_one_disk_swap(i, s, machine, options, plan)?;
    }
    Ok(())
}

fn plan_one_disk_swap(
    i: usize,
    s: &DiskSwapConfig,
    machine: &Machine,
    options: &PlanOptions,
    plan: &mut Plan,
) -> Result<()> {
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
            return skip_or_fail(
                plan,
                format!("encrypted = true but {reason}"),
                "set encrypted = false, or use a kernel with dm-crypt",
            );
        }
    }
    let swap_path = if s.encrypted {
        PathBuf::from(format!("/dev/mapper/{}", swapdev::crypt_name(&path)))
    } else {
        path.clone()
    };
    if let Some(active) = machine
        .swaps
        .iter()
        .find(|a| same_path(&a.path, &swap_path))
    {
        if active.priority == i32::from(s.priority()) {
            plan.notes.push(format!(
                "{} is already swap with priority {}",
                s.path, active.priority
            ));
            return Ok(());
        }
        let step = swapoff_step(active, options, plan)?;
        plan.steps.push(step);
        plan.steps.push(Step::SwapOn {
            path: swap_path,
            priority: Some(s.priority()),
            discard: s.discard,
        });
        return Ok(());
    }
    if !path.exists() {
        match &s.size {
            Some(size) if !s.encrypted => {
                let bytes = size.resolve(&format!("{key}.size"), machine.mem_total)?;
                let parent = path.parent().unwrap_or(Path::new("/"));
                if !parent.is_dir() {
                    return skip_or_fail(
                        plan,
                        format!("directory {} does not exist", parent.display()),
                        "create the directory or fix the path",
                    );
                }
                plan.steps.push(Step::CreateSwapFile {
                    path: path.clone(),
                    size: bytes,
                });
            }
            _ => {
                return skip_or_fail(plan, format!("{} does not exist", s.path), "attach the device, fix the path, give `size` to create a swap file, or set required = false");
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
    Ok(())
}

fn plan_sysctls(
    config: &KernelConfig,
    machine: &Machine,
    options: &PlanOptions,
    plan: &mut Plan,
) -> Result<()> {
    let Some(sc) = &config.sysctl else {
        return Ok(());
    };
    for (name, target) in sc.targets() {
        let previous = procfs::sysctl_read(name)?;
        let value = match target {
            SysctlTarget::Value(value) => value,
            SysctlTarget::MeasuredSwappiness => {
                let remembered = machine.saved.as_ref().and_then(|s| s.auto_swappiness);
                match (options.swappiness_override, remembered) {
                    (Some(v), _) => {
                        plan.notes
                            .push(format!("swappiness \"auto\" given as {v} (no measurement)"));
                        v.to_string()
                    }
                    (None, Some(v)) => {
                        plan.notes.push(format!("swappiness \"auto\" = {v}, measured at the first apply (revert, then apply again to measure anew)"));
                        v.to_string()
                    }
                    (None, None) => {
                        plan.steps.push(Step::MeasureSwappiness {
                            zram_algorithm: config.zram.first().map(|z| z.algorithm.clone()),
                            previous,
                        });
                        continue;
                    }
                }
            }
        };
        if previous != value {
            plan.steps.push(Step::WriteValue {
                path: procfs::sysctl_path(name),
                value,
                previous,
            });
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn zram0_in_use(used_bytes: u64) -> SwapArea {
        SwapArea {
            path: "/dev/zram0".into(),
            kind: "partition".into(),
            size_bytes: 4 << 30,
            used_bytes,
            priority: 100,
        }
    }

    #[test]
    fn swapoff_of_a_swap_area_holding_data_needs_force_and_says_how_much() {
        let area = zram0_in_use(1536 << 20);
        let mut plan = Plan::default();
        let err = swapoff_step(&area, &PlanOptions::default(), &mut plan)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1.5 GiB") && err.contains("back into RAM") && err.contains("--force"),
            "{err}"
        );
        assert!(plan.steps.is_empty() && plan.warnings.is_empty());

        let forced = PlanOptions {
            force: true,
            ..PlanOptions::default()
        };
        let step = swapoff_step(&area, &forced, &mut plan).unwrap();
        assert!(
            step.to_string()
                .contains("moves 1.5 GiB of swapped-out memory back into RAM"),
            "{step}"
        );
        assert_eq!(plan.warnings.len(), 1);

        // An empty swap area loses nothing: no --force needed, no warning.
        let mut plan = Plan::default();
        let step = swapoff_step(&zram0_in_use(0), &PlanOptions::default(), &mut plan).unwrap();
        assert!(step.to_string().ends_with("(empty)"), "{step}");
        assert!(plan.warnings.is_empty());
    }
}
