//! `zpage run --memory-max SIZE`: a limit on each process's whole memory,
//! and what each mode makes of it.
//!
//! User mode: the option reaches each process's budget like any other
//! (`memory_max_bytes`); the region layer caps the budget at what the rest
//! of the process leaves under the limit (`crates/region/src/memory_max.rs`).
//! Without `--budget` the budget is the memory max itself: zpage chooses
//! the split between resident pages and the pool as the pool grows.
//!
//! Kernel mode: two limits whose sum is the memory max, since neither the
//! memory cgroup (v1) nor its v2 form charges zram's pool to the cgroup:
//! the cgroup's limit for the program's RAM (`--budget` if given and
//! below the memory max, else half of it), and zram's `mem_limit` for the
//! compressed pool (the rest). What kernel mode cannot do: choose the
//! split as the pool grows (it is fixed at the start); count zram's own
//! table (a few bytes a page of the swap area) and the kernel's memory for
//! the cgroup; make a full pool wait (zram refuses the write, the page
//! stays in RAM, and the cgroup's OOM killer ends the program when
//! nothing else can go); hold the limit with zswap, whose pool a v1
//! memory cgroup does not charge.

use anyhow::{bail, Result};
use zpage_units::format_bytes as mib;

/// The budget option's name in the list.
pub const OPTION: &str = "memory_max_bytes";

/// The memory max given (`--memory-max`), read by the option's rules.
pub fn given(options: &zpage_region::BudgetOptions) -> Result<Option<u64>> {
    options
        .text(OPTION)
        .map(|text| zpage_units::parse_size(text).map_err(|e| anyhow::anyhow!("--memory-max: {e}")))
        .transpose()
}

/// Kernel mode's two limits for a memory max.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSplit {
    /// The memory cgroup's limit: the program's RAM.
    pub cgroup_limit_bytes: u64,
    /// zram's `mem_limit`: the compressed pool.
    pub zram_mem_limit_bytes: u64,
}

/// Splits `memory_max` between the cgroup and zram: `budget` (when given
/// and at most three quarters of the memory max, so the pool keeps a
/// quarter) for the cgroup, else half; the rest for zram.
pub fn kernel_split(memory_max: u64, budget: Option<u64>) -> Result<KernelSplit> {
    let page = zpage_codec::PAGE_SIZE as u64;
    let smallest = zpage_kernel::run::MIN_BUDGET_BYTES;
    if memory_max < 2 * smallest {
        bail!(
            "--memory-max {} is below {} in kernel mode: the cgroup needs {} for the program to start and zram at least as much; raise it",
            mib(memory_max),
            mib(2 * smallest),
            mib(smallest)
        );
    }
    let cgroup = match budget {
        Some(budget) if budget <= memory_max / 4 * 3 => budget.max(smallest),
        _ => memory_max / 2,
    } / page
        * page;
    Ok(KernelSplit {
        cgroup_limit_bytes: cgroup,
        zram_mem_limit_bytes: memory_max - cgroup,
    })
}

/// The summary's line on the memory max: held, or by how much it was
/// exceeded, and why as far as zpage can tell.
pub fn summary_line(
    memory_max: u64,
    peak_resident: u64,
    over_looks: u64,
    overshoot_faults: u64,
    peak_pool: u64,
) -> String {
    if peak_resident <= memory_max {
        return format!(
            "\tMemory max per process: {} (held: highest resident set {})",
            mib(memory_max),
            mib(peak_resident)
        );
    }
    let why = if peak_pool >= memory_max / 2 {
        format!(
            "the compressed pool alone reached {}: the data does not compress enough to fit, even with zstd for cold pages (the default under a memory max without a backing): a stronger cold codec (--cold-codec zstd-dict or zstd:9), a tier below RAM for the oldest pages (--backing FILE) or a larger limit",
            mib(peak_pool)
        )
    } else if overshoot_faults > 0 {
        "pages could not leave: the pool at its cap with no tier, a tier full or failing, or every resident page pinned or locked".to_string()
    } else {
        "memory outside compressed memory (code, stacks, files, memory taken before zpage started, a process without zpage) left too little room, or grew faster than zpage looked".to_string()
    };
    format!(
        "\tMemory max per process: {} EXCEEDED by {} (highest resident set {}; {} looks found it over): {why}",
        mib(memory_max),
        mib(peak_resident - memory_max),
        mib(peak_resident),
        over_looks
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_mode_splits_the_max_between_the_cgroup_and_zram() {
        let split = kernel_split(512 << 20, None).unwrap();
        assert_eq!(split.cgroup_limit_bytes, 256 << 20);
        assert_eq!(split.zram_mem_limit_bytes, 256 << 20);
        let split = kernel_split(512 << 20, Some(128 << 20)).unwrap();
        assert_eq!(split.cgroup_limit_bytes, 128 << 20);
        assert_eq!(split.zram_mem_limit_bytes, 384 << 20);
        // A budget that would leave the pool less than a quarter: half.
        let split = kernel_split(512 << 20, Some(500 << 20)).unwrap();
        assert_eq!(split.cgroup_limit_bytes, 256 << 20);
        let e = kernel_split(6 << 20, None).unwrap_err().to_string();
        assert!(e.contains("raise it"), "{e}");
    }

    #[test]
    fn the_line_says_held_or_by_how_much_it_was_exceeded() {
        let held = summary_line(96 << 20, 90 << 20, 0, 0, 0);
        assert!(held.contains("held"), "{held}");
        let over = summary_line(96 << 20, 100 << 20, 3, 0, 1 << 20);
        assert!(over.contains("EXCEEDED by 4.0 MiB"), "{over}");
        assert!(over.contains("outside compressed memory"), "{over}");
        let stuck = summary_line(96 << 20, 100 << 20, 3, 7, 1 << 20);
        assert!(stuck.contains("could not leave"), "{stuck}");
        let pool = summary_line(96 << 20, 100 << 20, 3, 7, 60 << 20);
        assert!(pool.contains("pool alone reached 60.0 MiB"), "{pool}");
    }
}
