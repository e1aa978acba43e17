//! `zpage kernel apply` / `revert`: turn a [`KernelConfig`] into a plan of
//! steps ([`plan()`]), run it with rollback on failure, and keep the state
//! saved before the first apply ([`SavedState`]) so `revert` can put it back.

mod plan;
mod state;
mod step;

pub use plan::{plan, Plan, PlanOptions};
pub use state::{
    state_file_path, Created, SavedState, ZramSnapshot, DEFAULT_STATE_FILE, STATE_FILE_ENV,
};
pub use step::Step;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{KernelConfig, SysctlValue};
use crate::procfs::{self};
use crate::zram::ZramDevice;
use crate::{zswap, KernelError, Result};

use step::same_path;

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
        // Measured (or remembered) and now in effect: keep it so applies stay idempotent.
        state.auto_swappiness = procfs::sysctl_read("vm.swappiness")?.parse().ok();
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
                    used_bytes: active.used_bytes,
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
