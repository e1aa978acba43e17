//! `zpage run --memory-max SIZE`: a limit on each process's whole memory,
//! and what each mode makes of it.
//!
//! User mode: the option reaches each process's budget like any other
//! (`memory_max_bytes`); the region layer caps the budget at what the rest
//! of the process leaves under the limit (`crates/region/src/memory_max.rs`).
//! Without `--budget` the budget is the memory max itself: zpage chooses
//! the split between resident pages and the pool as the pool grows.

use anyhow::Result;
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
            "the compressed pool alone reached {}: the data does not compress enough to fit (a stronger codec, --codec zstd or --cold-codec zstd, or a larger limit)",
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
