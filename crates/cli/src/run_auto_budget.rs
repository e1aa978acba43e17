//! `zpage run --budget auto[:STALL%]`: a budget that finds itself (the
//! region layer's `auto_budget` module), and what the summary says of it.
//!
//! The budget starts at what the program holds and goes down while the
//! time its threads lose to compressed memory (restores, waits for room)
//! stays under the stall target, 1% of wall time unless given; it goes
//! back up when the stall passes the target. The most it may be is a
//! quarter of the machine's memory, or the memory max when one is given.
//! Kernel mode would do the same with `memory.high` from the cgroup's
//! pressure stall information, which a v1 memory cgroup (this machine's)
//! does not have: there it is refused.

use anyhow::Result;
use zpage_region::run_report::ProcessReport;
use zpage_units::format_bytes as mib;

/// The budget option that carries the stall target to each process.
pub const OPTION: &str = zpage_region::AUTO_BUDGET_OPTION;

/// The stall target `--budget` asks for, in parts per million of wall
/// time, if it asks for an automatic budget (`auto`, `auto:0.5%`).
pub fn stall_target(budget: &str) -> Result<Option<u32>> {
    zpage_region::parse_auto_budget(budget).map_err(|e| anyhow::anyhow!("--{e}"))
}

/// What the summary says of an automatic budget: the main process's.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AutoBudgetSummary {
    /// The stall target, as a share of wall time.
    pub stall_target: f64,
    /// The budget in effect when the program ended, and the lowest it set.
    pub final_budget_bytes: u64,
    pub lowest_budget_bytes: u64,
    /// Time the program's threads lost to restores and waits for room,
    /// summed over them, and its share of the program's wall time.
    pub stall_seconds: f64,
    pub stall_share: f64,
}

impl AutoBudgetSummary {
    /// The main process's figures, if its budget was automatic;
    /// `stall_share` is set once the wall time is known.
    pub fn of(main: &ProcessReport) -> Option<AutoBudgetSummary> {
        (main.auto_budget_stall_target_ppm > 0).then(|| AutoBudgetSummary {
            stall_target: main.auto_budget_stall_target_ppm as f64 / 1e6,
            final_budget_bytes: main.auto_budget_final_bytes,
            lowest_budget_bytes: main.auto_budget_lowest_bytes,
            stall_seconds: main.stall_ns as f64 / 1e9,
            stall_share: 0.0,
        })
    }

    /// The summary's line.
    pub fn line(&self) -> String {
        let lowest = if self.lowest_budget_bytes == 0 {
            "never lowered".to_string()
        } else {
            format!("lowest {}", mib(self.lowest_budget_bytes))
        };
        format!(
            "\tBudget found by itself (stall target {:.2}% of wall time): {} at exit, {lowest}; stall measured {:.2}% ({:.3} s)",
            self.stall_target * 100.0,
            mib(self.final_budget_bytes),
            self.stall_share * 100.0,
            self.stall_seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_is_named_in_a_refusal() {
        assert_eq!(stall_target("auto:0.5%").unwrap(), Some(5_000));
        let e = stall_target("auto:2").unwrap_err().to_string();
        assert!(e.starts_with("--budget \"auto:2\""), "{e}");
    }
}
