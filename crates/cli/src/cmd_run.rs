//! `zpage run -- PROGRAM`: run an unmodified program with a compressed
//! memory budget, pass its exit status through, and say at exit what the
//! budget did (to stderr, in the style of `/usr/bin/time -v`).
//!
//! User mode (the default, no root): the program runs with
//! `libzpage_preload.so` in `LD_PRELOAD`; each process writes a report into
//! a directory this command makes, and the summary is built from those and
//! from `wait4`'s resource usage of the program and its descendants.
//!
//! Kernel mode (`--mode kernel`, root): the program runs in a memory cgroup
//! limited to the budget, swapping to zram or zswap, through
//! `zpage_kernel::run` (which restores the machine afterwards); the summary
//! comes from its figures. `--mode auto` takes kernel mode when
//! `check_available` says it can be set up, else user mode, and says why.
//!
//! As a supervisor (`env`, `timeout`, `tini`): a program that does not
//! exist exits 127, one that cannot be run 126; every signal `zpage run` is
//! sent that a supervisor passes on (SIGTERM, SIGINT, SIGHUP, SIGQUIT,
//! SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT...; `zpage_kernel::supervise`) goes
//! to the program, a terminal's own signals (which reach the program
//! directly) excepted; the summary is printed however the program ends;
//! and `zpage run` ends as the program did: with its exit code, or killed
//! by the same signal (re-raised, as `timeout` does), so a shell sees
//! 128+N and stops a script on Ctrl-C, and a service manager sees the
//! signal.
//!
//! `--budget` takes a size (`256M`, `2G`) or a percentage of the machine's
//! memory (`25%` of `MemTotal`): a percentage of the program's own
//! unconstrained peak would need a run without zpage first, which a command
//! that runs arbitrary programs (with side effects) must not do on its own.
//! Measure that peak with `/usr/bin/time -v` and pass a size instead.
//!
//! `--compare` asks for that run: the program runs once plainly first
//! (its output discarded), and the summary's "saved" is measured against
//! its peak rather than estimated. Both modes' figures share one
//! definition ([`crate::run_figures`]).
//!
//! `--memory-max` (a budget option) limits each process's whole resident
//! memory, pool and zpage's own memory included; without `--budget` the
//! budget is then the memory max, split by zpage as the pool grows. What
//! each mode makes of it: `run_memory_max.rs`.

use crate::budget_flags::BudgetFlags;
use crate::run_diagnosis::{self, ProgramFacts};
use crate::run_figures::{Estimate, MemoryFigures, PlainRun, ZpageRun};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zpage_kernel::supervise;
use zpage_region::run_report::{ProcessReport, TierReport, REPORT_DIR_ENV};
use zpage_region::BudgetOptions;

/// The environment variables the preload library reads, from its own
/// source (see that file for why it is included, not linked). Not every
/// one is set here: `ZPAGE_RUN_SYSCALLS` is the user's, inherited.
#[allow(dead_code)]
mod preload_env {
    include!("../../preload/src/env_names.rs");
}

/// Names the preload library explicitly, overriding where `zpage run`
/// looks for it.
pub const PRELOAD_ENV: &str = "ZPAGE_PRELOAD";
const PRELOAD_NAME: &str = "libzpage_preload.so";
/// Where an install puts the preload library, relative to the directory of
/// the `zpage` binary (`PREFIX/bin/zpage`, `PREFIX/lib/zpage/...`; see
/// `scripts/install.sh` and the Debian package).
const INSTALLED_PRELOAD_DIR: &str = "../lib/zpage";

/// How `zpage run` ends: as the program did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunExit {
    /// Exit with this code.
    Code(u8),
    /// The program was killed by this signal: end by it too.
    Signal(i32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The preload library and userfaultfd regions; needs no root.
    User,
    /// A cgroup with a compressed swap (zram) through the kernel; needs root.
    Kernel,
    /// `kernel` as root when a compressed swap can be set up, else `user`.
    Auto,
}

/// Kernel mode's compressed swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelSwap {
    /// A zram device.
    Zram,
    /// zswap in front of a swap file in /var/tmp.
    Zswap,
}

/// Arguments of `zpage run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Resident budget of each process: a size (256M, 2G) or a percentage
    /// of the machine's memory (25%). Default: 25%, or with --memory-max,
    /// the memory max (zpage splits it between resident pages and the pool).
    /// `auto[:STALL%]` (user mode): the budget finds itself, going down
    /// while the time the program loses to compressed memory stays under
    /// STALL% of wall time (default 1%), back up when it passes it.
    #[arg(long)]
    pub budget: Option<String>,
    /// The budget's options (`--codec`, `--cold-codec`, `--pool-max`,
    /// `--backing`...), from the one option list; each process's preload
    /// library gets them in its environment. Kernel mode takes `--codec`'s
    /// algorithm only.
    #[command(flatten)]
    pub options: BudgetFlags,
    /// How the budget is enforced.
    #[arg(long, value_enum, default_value_t = Mode::User)]
    pub mode: Mode,
    /// Where kernel mode swaps to: zram (compressing with --codec's
    /// algorithm) or zswap (the same compressor) in front of a swap file.
    #[arg(long, value_enum, default_value_t = KernelSwap::Zram)]
    pub kernel_swap: KernelSwap,
    /// Smallest mapping placed in compressed memory (user mode). The default,
    /// one page, places every private anonymous mapping and, through the
    /// library's allocator, every `malloc`: small objects included.
    #[arg(long, default_value = "4K", value_parser = zpage_units::parse_size)]
    pub min_mapping: u64,
    /// How often, while its budget is nearly full, the program's file pages
    /// are given back to the kernel (user mode): its read-only private file
    /// mappings (its binary, its libraries, files it maps to read) handed to
    /// the kernel's reclaim (`MADV_PAGEOUT`), so the pages it no longer uses
    /// leave its resident memory, as a memory cgroup's reclaim takes them at
    /// its limit in kernel mode. The pages it uses come back on their next
    /// access, from the page cache or the file. A duration (500ms, 2s); 0
    /// keeps file pages.
    #[arg(long, default_value = "500ms", value_parser = parse_file_pages_every)]
    pub file_pages_every: Duration,
    /// Do not publish the program's region figures for `zpage exporter`
    /// (user mode publishes them by default, one file per process in
    /// $ZPAGE_METRICS_DIR or the default directory: docs/process-metrics.md).
    #[arg(long)]
    pub no_metrics: bool,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Print the summary on stderr as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Run the program once plainly first, then under zpage, and report
    /// the memory saved against the plain run's measured peak instead of an
    /// estimate. The program runs twice, and has its side effects twice;
    /// the plain run gets the same arguments, environment, directory and
    /// standard input (which must be a regular file or /dev/null), and its
    /// output is discarded.
    #[arg(long)]
    pub compare: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub program: Vec<OsString>,
}

/// The budget in bytes from `SIZE` or `PCT%` (of `mem_total`).
pub fn budget_bytes(text: &str, mem_total: u64) -> Result<u64> {
    let bytes = zpage_units::parse_size_or_percent(text, || Ok(mem_total))
        .map_err(|e| anyhow::anyhow!("--budget: {e}"))?;
    if bytes < 256 * 1024 {
        bail!("--budget {text:?} is {bytes} bytes, below the smallest budget (256K): raise it");
    }
    Ok(bytes / 4096 * 4096)
}

/// `--file-pages-every`: a duration (`500ms`, `2s`), or `0` to keep file
/// pages. Below 10 ms the passes would cost more than the pages they free.
fn parse_file_pages_every(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    let every = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("{text:?} is not a duration ({e}): give one such as 500ms or 2s, or 0 to keep file pages")
    })?;
    if every < Duration::from_millis(10) {
        return Err(format!(
            "{text:?} is shorter than 10ms: each pass reads the program's memory map and its file pages then fault back in; give 10ms or more, or 0 to keep file pages"
        ));
    }
    Ok(every)
}

/// The preload library: `$ZPAGE_PRELOAD`, else installed with the `zpage`
/// binary (`PREFIX/lib/zpage/`), else next to it (a build's `target/release`;
/// `cargo test` leaves test binaries one level below, in `deps`).
pub fn find_preload(env: Option<OsString>, exe: &Path) -> Result<PathBuf> {
    if let Some(path) = env {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Ok(path);
        }
        bail!(
            "{PRELOAD_ENV}={} is not a file: point it at libzpage_preload.so, or unset it to use the installed one",
            path.display()
        );
    }
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(INSTALLED_PRELOAD_DIR).join(PRELOAD_NAME),
        dir.join(PRELOAD_NAME),
        dir.join("..").join(PRELOAD_NAME),
    ];
    if let Some(found) = candidates.iter().find(|c| c.is_file()) {
        return Ok(found.clone());
    }
    bail!(
        "{PRELOAD_NAME} is not installed with {}: install zpage with `scripts/install.sh` (or the Debian package), which puts it in {}, or set {PRELOAD_ENV} to its path",
        exe.display(),
        dir.join(INSTALLED_PRELOAD_DIR).display()
    )
}

fn mem_total() -> Result<u64> {
    zpage_kernel::procfs::mem_total_bytes().context("reading MemTotal from /proc/meminfo")
}

/// What `zpage run` prints at exit.
#[derive(Debug, serde::Serialize)]
pub struct Summary {
    pub command: Vec<String>,
    pub mode: &'static str,
    pub exit_status: i32,
    pub budget_bytes: u64,
    pub codec: String,
    pub processes: usize,
    /// Processes where zpage was not active, and why (first reason).
    pub processes_without_zpage: usize,
    pub without_zpage_reason: Option<String>,
    /// When no process reported at all: the most likely reason.
    pub no_report_reason: Option<String>,
    /// The signal that killed the program, if one did.
    pub killed_by_signal: Option<i32>,
    /// What that death most likely means under zpage (SIGBUS), and what to do.
    pub signal_note: Option<String>,
    /// `wait4`'s peak resident set of the program and its descendants.
    pub peak_resident_bytes: u64,
    /// The program's (first process's) own peak without zpage, estimated:
    /// resident memory plus the uncompressed size of what zpage held
    /// evicted, less the pool's memory, at the worst sample.
    pub unconstrained_peak_estimate_bytes: u64,
    /// The peaks and what was saved, as kernel mode gives them too.
    #[serde(flatten)]
    pub memory: MemoryFigures,
    pub compressed_bytes: u64,
    pub pool_bytes: u64,
    pub regions_made: u64,
    pub ejected_mappings: u64,
    pub refused_mappings: u64,
    pub faults: u64,
    pub restores: u64,
    pub evictions: u64,
    pub fault_latency_p50_ns: u64,
    pub fault_latency_p99_ns: u64,
    pub fault_handling_ns: u64,
    pub throttle_ns: u64,
    pub overshoot_count: u64,
    pub overshoot_peak_bytes: u64,
    /// `--memory-max`: the limit on each process's whole resident memory.
    pub memory_max_bytes: Option<u64>,
    /// How far the highest resident set of a process (`peak_resident_bytes`,
    /// the kernel's exact high-water mark) went over it (0: held).
    pub memory_max_exceeded_bytes: u64,
    /// Looks of the processes' memory max (about one a millisecond) that
    /// found resident memory over it, and the most it was over at one.
    pub memory_max_over_count: u64,
    pub memory_max_over_peak_bytes: u64,
    /// `--budget auto`: what the program's budget found.
    pub auto_budget: Option<crate::run_auto_budget::AutoBudgetSummary>,
    /// The most memory a process's compressed pool took (sampled).
    pub peak_pool_bytes: u64,
    /// The most of zpage's own heap a process held (sampled): its live
    /// allocations, and the heap's resident memory.
    pub own_heap_peak_bytes: u64,
    pub own_heap_resident_peak_bytes: u64,
    pub syscalls_pinned: u64,
    pub syscalls_retried: u64,
    pub syscalls_trapped: u64,
    /// The tier below RAM, summed over the processes that had one.
    pub tier: Option<TierReport>,
    pub forks: u64,
    /// File pages given back (`--file-pages-every`): passes, summed over the
    /// processes, and the most resident bytes one pass of a process found
    /// in the mappings it gave back.
    pub file_page_passes: u64,
    pub file_pages_peak_pass_bytes: u64,
    /// Every event counter of the regions, summed over the processes, by
    /// its name in `zpage_region::RegionStats::FIELDS`.
    pub region_counters: std::collections::BTreeMap<String, u64>,
    pub wall_seconds: f64,
    pub user_seconds: f64,
    pub system_seconds: f64,
}

/// Builds the summary from the processes' reports (the first is the
/// program itself: the lowest pid is not always it, so it is named).
pub fn summarize(reports: &[ProcessReport], main_pid: i32) -> Summary {
    let mut s = Summary {
        command: Vec::new(),
        mode: "user",
        exit_status: 0,
        budget_bytes: 0,
        codec: String::new(),
        processes: reports.len(),
        processes_without_zpage: 0,
        without_zpage_reason: None,
        no_report_reason: None,
        killed_by_signal: None,
        signal_note: None,
        peak_resident_bytes: 0,
        unconstrained_peak_estimate_bytes: 0,
        memory: MemoryFigures::default(),
        compressed_bytes: 0,
        pool_bytes: 0,
        regions_made: 0,
        ejected_mappings: 0,
        refused_mappings: 0,
        faults: 0,
        restores: 0,
        evictions: 0,
        fault_latency_p50_ns: 0,
        fault_latency_p99_ns: 0,
        fault_handling_ns: 0,
        throttle_ns: 0,
        overshoot_count: 0,
        overshoot_peak_bytes: 0,
        memory_max_bytes: None,
        memory_max_exceeded_bytes: 0,
        memory_max_over_count: 0,
        memory_max_over_peak_bytes: 0,
        auto_budget: None,
        peak_pool_bytes: 0,
        own_heap_peak_bytes: 0,
        own_heap_resident_peak_bytes: 0,
        syscalls_pinned: 0,
        syscalls_retried: 0,
        syscalls_trapped: 0,
        forks: 0,
        file_page_passes: 0,
        file_pages_peak_pass_bytes: 0,
        region_counters: Default::default(),
        tier: None,
        wall_seconds: 0.0,
        user_seconds: 0.0,
        system_seconds: 0.0,
    };
    let mut merged = ProcessReport::new(0, String::new());
    for r in reports {
        if !r.active {
            s.processes_without_zpage += 1;
            if s.without_zpage_reason.is_none() {
                s.without_zpage_reason = r.inactive_reason.clone();
            }
            continue;
        }
        if s.codec.is_empty() {
            s.codec = r.codec.clone();
        }
        s.compressed_bytes += r.compressed_bytes;
        s.pool_bytes += r.pool_bytes;
        s.regions_made += r.regions_made;
        s.ejected_mappings += r.fallback.ejected_mappings;
        s.refused_mappings += r.fallback.refused_mappings;
        s.restores += r.restore_count;
        s.evictions += r.eviction_count;
        s.throttle_ns += r.throttle_ns;
        s.overshoot_count += r.overshoot_count;
        s.overshoot_peak_bytes = s.overshoot_peak_bytes.max(r.overshoot_peak_bytes);
        s.memory_max_over_count += r.memory_max_over_count;
        s.memory_max_over_peak_bytes = s
            .memory_max_over_peak_bytes
            .max(r.memory_max_over_peak_bytes);
        s.peak_pool_bytes = s.peak_pool_bytes.max(r.peak_pool_bytes);
        s.own_heap_peak_bytes = s.own_heap_peak_bytes.max(r.own_heap_peak_bytes);
        s.own_heap_resident_peak_bytes = s
            .own_heap_resident_peak_bytes
            .max(r.own_heap_resident_peak_bytes);
        s.syscalls_pinned += r.syscalls_pinned;
        s.syscalls_retried += r.syscalls_retried;
        s.syscalls_trapped += r.syscalls_trapped;
        s.forks += r.forks;
        s.file_page_passes += r.file_page_passes;
        s.file_pages_peak_pass_bytes = s
            .file_pages_peak_pass_bytes
            .max(r.file_pages_peak_pass_bytes);
        if let Some(tier) = &r.tier {
            let sum = s.tier.get_or_insert_with(TierReport::default);
            sum.written_pages += tier.written_pages;
            sum.read_pages += tier.read_pages;
            sum.write_failures += tier.write_failures;
            sum.read_failures += tier.read_failures;
            sum.held_pages += tier.held_pages;
            if sum.down_cause.is_none() {
                sum.down_cause = tier.down_cause.clone();
            }
        }
        for (name, n) in &r.region_counters {
            *s.region_counters.entry(name.clone()).or_default() += n;
        }
        merged.fault_count += r.fault_count;
        merged.fault_ns += r.fault_ns;
        for (sum, n) in merged
            .fault_latency_log2_buckets
            .iter_mut()
            .zip(&r.fault_latency_log2_buckets)
        {
            *sum += n;
        }
    }
    let latency = merged.fault_latency();
    s.faults = merged.fault_count;
    s.fault_handling_ns = merged.fault_ns;
    s.fault_latency_p50_ns = latency.p50_ns;
    s.fault_latency_p99_ns = latency.p99_ns;
    if let Some(main) = reports.iter().find(|r| r.pid == main_pid && r.active) {
        s.unconstrained_peak_estimate_bytes = main.unconstrained_peak_estimate_bytes;
        s.auto_budget = crate::run_auto_budget::AutoBudgetSummary::of(main);
    }
    s
}

/// How user mode measures the run under zpage's peak.
const USER_PEAK_METHOD: &str = "max RSS of the program and its descendants, pool included";

/// User mode's figures: its peak is `peak_resident_bytes`; without a plain
/// run, the program's own estimate of its peak is the baseline.
fn user_figures(s: &Summary, plain: Option<&PlainRun>) -> MemoryFigures {
    MemoryFigures::new(
        ZpageRun {
            peak_bytes: s.peak_resident_bytes,
            peak_method: USER_PEAK_METHOD,
            wall_seconds: s.wall_seconds,
            exit_status: s.exit_status,
            cut_short: None,
        },
        plain,
        Some(Estimate {
            peak_bytes: s.unconstrained_peak_estimate_bytes,
            method: "resident + evicted pages' size - pool, at the program's worst sample",
        }),
    )
}

use zpage_units::format_bytes as mib;

fn us(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1000.0)
}

/// The summary as `/usr/bin/time -v` lays its lines out.
pub fn render(s: &Summary) -> String {
    let mut lines = vec![
        format!("\tCommand being run under zpage: {}", s.command.join(" ")),
        format!("\tMode: {}", s.mode),
        match s.memory_max_bytes {
            None if s.auto_budget.is_some() => format!(
                "\tBudget per process: found by itself, at most {} ({})",
                mib(s.budget_bytes),
                s.codec
            ),
            None => format!(
                "\tBudget per process: {} ({})",
                mib(s.budget_bytes),
                s.codec
            ),
            Some(_) => format!(
                "\tBudget per process: {} at most, less as the memory max requires ({})",
                mib(s.budget_bytes),
                s.codec
            ),
        },
        match &s.no_report_reason {
            Some(why) if s.processes == 0 => format!("\tProcesses: 0 (no report: {why})"),
            _ => format!(
                "\tProcesses: {} ({} without zpage)",
                s.processes, s.processes_without_zpage
            ),
        },
    ];
    if let Some(why) = &s.without_zpage_reason {
        lines.push(format!("\tWhy without zpage: {why}"));
    }
    if let Some(auto) = &s.auto_budget {
        lines.push(auto.line());
    }
    lines.extend([
        format!("\tElapsed (wall clock) time: {:.2} s", s.wall_seconds),
        format!("\tUser time: {:.2} s", s.user_seconds),
        format!("\tSystem time: {:.2} s", s.system_seconds),
    ]);
    lines.extend(s.memory.lines());
    lines.extend([
        format!(
            "\tCompressed at exit: {} in {} of pool",
            mib(s.compressed_bytes),
            mib(s.pool_bytes)
        ),
        format!(
            "\tRegions made: {} ({} made plain, {} refused)",
            s.regions_made, s.ejected_mappings, s.refused_mappings
        ),
        format!(
            "\tFaults: {} ({} restores), evictions: {}",
            s.faults, s.restores, s.evictions
        ),
        format!(
            "\tFault latency p50 / p99: {} / {}",
            us(s.fault_latency_p50_ns),
            us(s.fault_latency_p99_ns)
        ),
        format!(
            "\tTime in fault handling: {:.3} s (waiting for the budget: {:.3} s)",
            s.fault_handling_ns as f64 / 1e9,
            s.throttle_ns as f64 / 1e9
        ),
    ]);
    if s.own_heap_resident_peak_bytes > 0 {
        lines.push(format!(
            "\tzpage's own heap at peak: {} allocated, {} resident",
            mib(s.own_heap_peak_bytes),
            mib(s.own_heap_resident_peak_bytes)
        ));
    }
    if s.overshoot_count > 0 {
        lines.push(format!(
            "\tBudget exceeded: up to {} over, {} faults went over it (pages could not leave: the pool at its cap with no tier, a tier full or failing, or every resident page pinned or locked)",
            mib(s.overshoot_peak_bytes),
            s.overshoot_count
        ));
    }
    if let Some(max) = s.memory_max_bytes {
        lines.push(crate::run_memory_max::summary_line(
            max,
            s.peak_resident_bytes,
            s.memory_max_over_count,
            s.overshoot_count,
            s.peak_pool_bytes,
        ));
    }
    if let Some(tier) = &s.tier {
        lines.push(format!(
            "\tTier below RAM: {} pages written, {} read back, {} held at exit; {} writes failed (pages kept in memory), {} reads failed; {}",
            tier.written_pages,
            tier.read_pages,
            tier.held_pages,
            tier.write_failures,
            tier.read_failures,
            match &tier.down_cause {
                None => "up at exit".to_string(),
                Some(why) => format!("down at exit: {why}"),
            }
        ));
    }
    lines.extend([
        format!(
            "\tSystem calls on zpage memory: {} trapped and served, {} pinned by the wrappers, {} retried",
            s.syscalls_trapped, s.syscalls_pinned, s.syscalls_retried
        ),
        format!("\tForks: {}", s.forks),
    ]);
    if s.file_page_passes > 0 {
        lines.push(format!(
            "\tFile pages given back: {} passes, up to {} resident in the mappings of one pass",
            s.file_page_passes,
            mib(s.file_pages_peak_pass_bytes)
        ));
    }
    if let Some(note) = &s.signal_note {
        lines.push(format!("\tNote: {note}"));
    }
    lines.push(exit_line(s.exit_status, s.killed_by_signal));
    lines.join("\n") + "\n"
}

/// `Exit status: 143 (killed by SIGTERM)`.
fn exit_line(status: i32, killed_by: Option<i32>) -> String {
    match killed_by {
        Some(signal) => format!(
            "\tExit status: {status} (killed by {})",
            run_diagnosis::signal_name(signal)
        ),
        None => format!("\tExit status: {status}"),
    }
}

/// A directory for the processes' reports, removed when dropped.
struct ReportDir(PathBuf);

impl Drop for ReportDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the command; returns how to end. A program that cannot be
/// started is a [`supervise::LaunchError`] (exit status 127 or 126).
pub fn run(args: Args) -> Result<RunExit> {
    // Each value read by its option's rules, in every mode.
    let mut budget_options = args.options.options()?;
    let memory_max = crate::run_memory_max::given(&budget_options)?;
    let auto = args
        .budget
        .as_deref()
        .map(crate::run_auto_budget::stall_target)
        .transpose()?
        .flatten();
    let budget = match (&args.budget, memory_max) {
        (Some(text), _) if auto.is_none() => budget_bytes(text, mem_total()?)?,
        // zpage splits the memory max between resident pages and the pool;
        // an automatic budget stays under it.
        (_, Some(max)) => max / 4096 * 4096,
        // The default budget, which is also the most an automatic one may be.
        _ => budget_bytes(zpage_region::AUTO_BUDGET_MOST, mem_total()?)?,
    };
    if let Some(ppm) = auto {
        budget_options.set(
            crate::run_auto_budget::OPTION,
            &ppm.to_string(),
            zpage_region::Spelling::Flag,
        )?;
    }
    // Before anything is set up: a missing program is the caller's mistake.
    let program =
        supervise::resolve_program(&args.program[0], std::env::var_os("PATH").as_deref())?;
    // Standard input checked before anything runs: --compare gives it twice.
    let stdin = if args.compare {
        Some(ReusableStdin::check()?)
    } else {
        None
    };
    let kernel = match args.mode {
        Mode::User => None,
        Mode::Kernel => {
            let options = kernel_options(&args, &budget_options, budget)?;
            zpage_kernel::run::check_available(&options)
                .map_err(|e| anyhow::anyhow!("--mode kernel: {e}; or use --mode user (no root)"))?;
            Some(options)
        }
        Mode::Auto if user_mode_option(&budget_options).is_some() => {
            eprintln!(
                "zpage run: --mode auto: user mode, since --{} is user mode's",
                user_mode_option(&budget_options).unwrap_or_default()
            );
            None
        }
        Mode::Auto => {
            let options = kernel_options(&args, &budget_options, budget)?;
            match zpage_kernel::run::check_available(&options) {
                Ok(()) => Some(options),
                Err(why) => {
                    eprintln!("zpage run: --mode auto: user mode, since kernel mode cannot be set up here: {why}");
                    None
                }
            }
        }
    };
    // Every option checked before the plain run, not after it.
    let plan = match kernel {
        Some(options) => Plan::Kernel(options),
        None => Plan::User {
            preload: check_user_options(&args, &budget_options, budget)?,
        },
    };
    let plain = match stdin {
        None => None,
        Some(stdin) => {
            if !args.json {
                eprintln!("zpage run: --compare: running the program plainly first (its output discarded)");
            }
            let plain = run_plain(&args, &program)?;
            stdin.rewind()?;
            // Ctrl-C or a SIGTERM to zpage during the plain run ends it:
            // the user asked to stop, not for the run under zpage.
            if let Some(signal) = plain
                .killed_by
                .filter(|&signal| supervise::is_forwarded(signal))
            {
                eprintln!(
                    "zpage run: --compare: the plain run was killed by {}; not running it under zpage",
                    run_diagnosis::signal_name(signal)
                );
                return Ok(RunExit::Signal(signal));
            }
            Some(plain.run)
        }
    };
    match plan {
        Plan::Kernel(options) => run_kernel(&args, &program, &options, memory_max, plain.as_ref()),
        Plan::User { preload } => run_user(
            &args,
            &budget_options,
            &program,
            budget,
            &preload,
            plain.as_ref(),
        ),
    }
}

/// The mode chosen, with what it needs, all checked.
enum Plan {
    User { preload: PathBuf },
    Kernel(zpage_kernel::run::RunOptions),
}

/// Standard input as `--compare` can give it to the program twice: a
/// regular file, read from the same offset both times, or /dev/null.
struct ReusableStdin {
    /// A duplicate of descriptor 0 (sharing its offset) and that offset;
    /// `None` for /dev/null.
    file: Option<(std::fs::File, u64)>,
}

impl ReusableStdin {
    fn check() -> Result<ReusableStdin> {
        use std::io::Seek;
        use std::os::fd::AsFd;
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let file = std::fs::File::from(
            std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .context("--compare: duplicating standard input")?,
        );
        let meta = file
            .metadata()
            .context("--compare: reading what standard input is")?;
        let kind = meta.file_type();
        let is_null = kind.is_char_device()
            && std::fs::metadata("/dev/null").is_ok_and(|null| null.rdev() == meta.rdev());
        if is_null {
            return Ok(ReusableStdin { file: None });
        }
        if kind.is_file() {
            let mut file = file;
            let offset = file
                .stream_position()
                .context("--compare: reading standard input's offset")?;
            return Ok(ReusableStdin {
                file: Some((file, offset)),
            });
        }
        // SAFETY: isatty only reads the descriptor's state.
        let what = if unsafe { libc::isatty(0) } == 1 {
            "a terminal"
        } else if kind.is_fifo() {
            "a pipe"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_char_device() {
            "a character device"
        } else {
            "not a regular file"
        };
        bail!(
            "--compare runs the program twice, and its standard input is {what}, which cannot be given to it twice: redirect it from a file (`< FILE`) or from /dev/null (`< /dev/null`), or drop --compare"
        )
    }

    /// Back to where the plain run started reading, for the run under zpage.
    fn rewind(&self) -> Result<()> {
        use std::io::Seek;
        if let Some((file, offset)) = &self.file {
            let mut file = file;
            file.seek(std::io::SeekFrom::Start(*offset))
                .context("--compare: rewinding standard input for the run under zpage")?;
        }
        Ok(())
    }
}

/// The plain run, and the signal that ended it, if one did.
struct PlainOutcome {
    run: PlainRun,
    killed_by: Option<i32>,
}

/// Runs the program without zpage, as `zpage run` would (same arguments,
/// environment, directory and standard input; signals passed on), its
/// output discarded, as benchmark tools do by default; measures its peak
/// and wall time.
fn run_plain(args: &Args, program: &Path) -> Result<PlainOutcome> {
    let mut command = program_command(args, program);
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let (ended, wall) = spawn_and_wait(&mut command, program)?;
    Ok(PlainOutcome {
        run: PlainRun {
            peak_bytes: ended.peak_bytes,
            wall_seconds: wall,
            exit_status: ended.shell_status(),
        },
        killed_by: ended.killed_by(),
    })
}

/// How a program `wait4` reaped ended, and its resource use.
struct Ended {
    pid: i32,
    status: i32,
    usage: libc::rusage,
    /// `ru_maxrss` in bytes: the program's, or a descendant's it waited
    /// for, whichever was larger.
    peak_bytes: u64,
}

impl Ended {
    fn killed_by(&self) -> Option<i32> {
        libc::WIFSIGNALED(self.status).then(|| libc::WTERMSIG(self.status))
    }

    /// The exit code, or 128 + the signal, as a shell reports it.
    fn shell_status(&self) -> i32 {
        if libc::WIFEXITED(self.status) {
            libc::WEXITSTATUS(self.status)
        } else if let Some(signal) = self.killed_by() {
            128 + signal
        } else {
            1
        }
    }
}

/// Starts `command` with every signal zpage is sent passed on to it, and
/// waits for it: how it ended, and the wall time from spawn to reaping.
///
/// The peak is `wait4`'s of this one child (which counts the descendants
/// it waited for), not `getrusage(RUSAGE_CHILDREN)`: zpage is no
/// subreaper, so that would add no orphan, only the other runs (with
/// `--compare`, the plain run's peak).
fn spawn_and_wait(command: &mut std::process::Command, program: &Path) -> Result<(Ended, f64)> {
    // Held from before the start, so a signal sent meanwhile reaches the
    // program rather than ending zpage and orphaning it.
    let held = supervise::hold_signals(command).context("holding signals back")?;
    let started = std::time::Instant::now();
    let child = command
        .spawn()
        .map_err(|e| supervise::launch_error(program, &e))?;
    let pid = child.id() as i32;
    let forwarding = held
        .forward_to(pid)
        .context("passing signals on to the program")?;
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid out value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waits for our own child; both out pointers are valid.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            bail!(
                "waiting for the program: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    let wall = started.elapsed().as_secs_f64();
    // Signals act on zpage again (it prints the summary, then ends as the program did).
    drop(forwarding);
    let peak_bytes = u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
    Ok((
        Ended {
            pid,
            status,
            usage,
            peak_bytes,
        },
        wall,
    ))
}

/// A command for `program` (found on PATH) that the program sees started
/// under the name it was given.
fn program_command(args: &Args, program: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    command.arg0(&args.program[0]).args(&args.program[1..]);
    command
}

/// The program's command line, as the summary shows it.
fn command_words(args: &Args) -> Vec<String> {
    args.program
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The summary of either mode, as `--summary-json` and `--json` ask: its
/// JSON written to the file when one is named, and on stderr either that
/// JSON or the text `render` makes.
fn report_summary<S: serde::Serialize>(
    args: &Args,
    summary: &S,
    render: fn(&S) -> String,
) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    if let Some(path) = &args.summary_json {
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        eprintln!("{json}");
    } else {
        eprint!("{}", render(summary));
    }
    Ok(())
}

/// How to end after the program ended so.
fn run_exit(exit: zpage_kernel::run::ChildExit) -> RunExit {
    match exit {
        zpage_kernel::run::ChildExit::Signal(signal) => RunExit::Signal(signal),
        zpage_kernel::run::ChildExit::Code(code) => RunExit::Code(code.clamp(0, 255) as u8),
    }
}

/// Kernel mode's options from the command line: `--codec`'s algorithm
/// (`lz4`, `zstd`; a level or acceleration is zpage's and is dropped) for
/// the chosen swap.
fn kernel_options(
    args: &Args,
    budget_options: &BudgetOptions,
    budget: u64,
) -> Result<zpage_kernel::run::RunOptions> {
    if budget_options
        .text(crate::run_auto_budget::OPTION)
        .is_some()
    {
        bail!(
            "--budget auto is user mode's: kernel mode would set memory.high from the cgroup's pressure stall information, which a v1 memory cgroup (this machine's) does not have; give a size, or use --mode user"
        );
    }
    if let Some(flag) = user_mode_option(budget_options) {
        bail!(
            "--{flag} is for user mode: kernel mode's zram compresses with --codec only; drop --{flag} or use --mode user"
        );
    }
    let codec = budget_options.text("codec").unwrap_or("lz4");
    let algorithm = codec.split(':').next().unwrap_or_default().to_string();
    if algorithm.is_empty() || algorithm == "zstd-dict" {
        bail!(
            "--codec {codec:?}: kernel mode needs an algorithm the kernel has (lz4, zstd, lzo-rle...)"
        );
    }
    let mut options = zpage_kernel::run::RunOptions::new(budget);
    if let Some(max) = crate::run_memory_max::given(budget_options)? {
        if args.kernel_swap == KernelSwap::Zswap {
            bail!(
                "--memory-max in kernel mode needs --kernel-swap zram: the limit is the cgroup's for RAM plus zram's mem_limit for the pool, and a v1 memory cgroup does not charge zswap's pool; use zram, or --mode user"
            );
        }
        let given = args.budget.is_some().then_some(budget);
        let split = crate::run_memory_max::kernel_split(max, given)?;
        options.budget_bytes = split.cgroup_limit_bytes;
        options.zram_mem_limit_bytes = Some(split.zram_mem_limit_bytes);
    }
    options.backend = match args.kernel_swap {
        KernelSwap::Zram => zpage_kernel::machine::SwapBackend::Zram(algorithm),
        KernelSwap::Zswap => zpage_kernel::machine::SwapBackend::Zswap(algorithm),
    };
    Ok(options)
}

/// The flag of the first budget option given that only user mode has
/// (every one but `--codec` and `--memory-max`).
fn user_mode_option(budget_options: &BudgetOptions) -> Option<String> {
    budget_options
        .iter()
        .find(|(option, _)| option.name != "codec" && option.name != crate::run_memory_max::OPTION)
        .map(|(option, _)| option.flag())
}

/// What `zpage run --mode kernel` prints at exit: the kernel's figures.
#[derive(Debug, serde::Serialize)]
pub struct KernelSummary {
    pub command: Vec<String>,
    pub mode: &'static str,
    pub exit_status: i32,
    /// `--memory-max`: the cgroup's limit (`budget_bytes`) plus zram's
    /// `mem_limit` (`zram_mem_limit_bytes`).
    pub memory_max_bytes: Option<u64>,
    #[serde(flatten)]
    pub outcome: zpage_kernel::run::RunOutcome,
    /// The peaks and what was saved, as user mode gives them too.
    #[serde(flatten)]
    pub memory: MemoryFigures,
}

/// Kernel mode's figures: its peak is the cgroup's peak RAM plus the
/// compressed store's peak (what the program swapped out is not in its
/// RSS); without a plain run, the cgroup's highest RAM + swap is the
/// baseline. A program the cgroup's OOM killer ended is no measure of the
/// program's peak.
fn kernel_figures(
    outcome: &zpage_kernel::run::RunOutcome,
    plain: Option<&PlainRun>,
) -> MemoryFigures {
    let killed = matches!(
        outcome.exit,
        zpage_kernel::run::ChildExit::Signal(libc::SIGKILL)
    );
    let cut_short = (killed && outcome.oom_kills > 0).then(|| {
        format!(
            "was OOM-killed ({} kill(s) in its memory cgroup): raise --budget, or run it again (this kernel's cgroup reclaim now and then loses a race with the program)",
            outcome.oom_kills
        )
    });
    let zram = outcome.compressed_source.starts_with("zram");
    let mut figures = MemoryFigures::new(
        ZpageRun {
            peak_bytes: outcome.cgroup_peak_bytes + outcome.compressed_memory_peak_bytes,
            peak_method: if zram {
                "memory cgroup's peak RAM + zram's peak memory"
            } else {
                "memory cgroup's peak RAM + zswap's peak, machine-wide"
            },
            wall_seconds: outcome.wall_seconds,
            exit_status: outcome.exit.shell_status(),
            cut_short,
        },
        plain,
        Some(Estimate {
            peak_bytes: outcome.footprint_peak_bytes,
            method: "the cgroup's highest sampled RAM + swap",
        }),
    );
    if !killed && outcome.oom_kills > 0 {
        figures.notes.push(format!(
            "the memory cgroup's OOM killer killed {} of the program's processes",
            outcome.oom_kills
        ));
    }
    figures
}

/// The kernel summary as `/usr/bin/time -v` lays its lines out.
pub fn render_kernel(s: &KernelSummary) -> String {
    let o = &s.outcome;
    let memory_max = match (s.memory_max_bytes, o.zram_mem_limit_bytes) {
        (Some(max), Some(zram)) => Some(format!(
            "\tMemory max: {} = the cgroup's limit {} + zram's pool limit (mem_limit) {}; zram's table and the kernel's own memory for the cgroup are not counted, and a full pool ends in the cgroup's OOM killer, not a wait",
            mib(max),
            mib(o.budget_bytes),
            mib(zram)
        )),
        _ => None,
    };
    [
        format!("\tCommand being run under zpage: {}", s.command.join(" ")),
        format!(
            "\tMode: kernel ({}, cgroup {:?})",
            o.backend, o.cgroup_version
        ),
        format!(
            "\tBudget (memory cgroup limit): {}, swap area {}",
            mib(o.budget_bytes),
            mib(o.swap_area_bytes)
        ),
    ]
    .into_iter()
    .chain(memory_max)
    .chain([
        format!("\tElapsed (wall clock) time: {:.2} s", o.wall_seconds),
        format!("\tUser time: {:.2} s", o.user_seconds),
        format!("\tSystem time: {:.2} s", o.system_seconds),
        format!(
            "\tPeak resident of the program (wait4; what it swapped out is not in it): {}",
            mib(o.max_rss_bytes)
        ),
        format!(
            "\tCgroup's peak memory: {}; compressed store's: {}",
            mib(o.cgroup_peak_bytes),
            mib(o.compressed_memory_peak_bytes)
        ),
    ])
    .chain(s.memory.lines())
    .chain([
        format!(
            "\tSwap used: {} at peak, {} at end",
            mib(o.swap_peak_bytes),
            mib(o.swap_last_bytes)
        ),
        format!(
            "\tCompressed at peak ({}): {} of pages in {}",
            o.compressed_source,
            mib(o.compressed_at_peak.original_bytes),
            mib(o.compressed_at_peak.memory_used_bytes)
        ),
        format!(
            "\tSwap-ins / swap-outs ({}): {} / {}",
            o.swap_counts_scope, o.swap_ins, o.swap_outs
        ),
        format!(
            "\tMajor / minor page faults: {} / {}",
            o.major_faults, o.minor_faults
        ),
        format!("\tOOM kills: {}", o.oom_kills),
        exit_line(
            s.exit_status,
            match o.exit {
                zpage_kernel::run::ChildExit::Signal(signal) => Some(signal),
                zpage_kernel::run::ChildExit::Code(_) => None,
            },
        ),
    ])
    .collect::<Vec<_>>()
    .join("\n")
        + "\n"
}

fn run_kernel(
    args: &Args,
    program: &Path,
    options: &zpage_kernel::run::RunOptions,
    memory_max: Option<u64>,
    plain: Option<&PlainRun>,
) -> Result<RunExit> {
    let command = program_command(args, program);
    let outcome = zpage_kernel::run::run(command, options).with_context(|| {
        format!(
            "running {} in kernel mode",
            PathBuf::from(&args.program[0]).display()
        )
    })?;
    let summary = KernelSummary {
        command: command_words(args),
        mode: "kernel",
        exit_status: outcome.exit.shell_status(),
        memory_max_bytes: memory_max,
        memory: kernel_figures(&outcome, plain),
        outcome,
    };
    report_summary(args, &summary, render_kernel)?;
    Ok(run_exit(summary.outcome.exit))
}

/// Every user-mode option checked together before anything runs, as each
/// process's library will check them; a backing also for what it names (a
/// path that can hold pages, a password file that is private). Returns the
/// preload library.
fn check_user_options(args: &Args, budget_options: &BudgetOptions, budget: u64) -> Result<PathBuf> {
    let config = budget_options
        .config(usize::try_from(budget).unwrap_or(usize::MAX))
        .map_err(|e| {
            let given: Vec<String> = budget_options
                .iter()
                .map(|(option, text)| format!("--{} {text}", option.flag()))
                .collect();
            anyhow::anyhow!("{}: {e}", given.join(" "))
        })?;
    if let Some(backing) = &config.backing {
        let bound = match config.backing_max_bytes {
            Some(bytes) => bytes,
            None => zpage_units::machine_memory_bytes().map_err(|why| {
                anyhow::anyhow!("--backing: its bound defaults to the machine's memory, which could not be read ({why}): give --backing-max-bytes")
            })?,
        };
        zpage_store::Backing::parse(backing, &config.backing_options, bound)
            .map_err(|e| anyhow::anyhow!("--backing {}: {e}", zpage_store::redact_url(backing)))?;
    }
    if args.min_mapping < 4096 {
        bail!(
            "--min-mapping {} is below one page (4K): raise it",
            args.min_mapping
        );
    }
    let exe = std::env::current_exe().context("locating the zpage binary")?;
    find_preload(std::env::var_os(PRELOAD_ENV), &exe)
}

fn run_user(
    args: &Args,
    budget_options: &BudgetOptions,
    program: &Path,
    budget: u64,
    preload: &Path,
    plain: Option<&PlainRun>,
) -> Result<RunExit> {
    let reports = ReportDir(std::env::temp_dir().join(format!(
        "zpage-run-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )));
    std::fs::create_dir_all(&reports.0)
        .with_context(|| format!("creating {}", reports.0.display()))?;

    let mut preload_list = OsString::from(preload);
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload_list.push(":");
        preload_list.push(existing);
    }
    let mut command = program_command(args, program);
    command
        .env("LD_PRELOAD", preload_list)
        .env(preload_env::BUDGET_ENV, budget.to_string())
        .env(preload_env::MIN_MAPPING_ENV, args.min_mapping.to_string())
        .env(
            preload_env::FILE_PAGES_EVERY_ENV,
            args.file_pages_every.as_millis().to_string(),
        )
        .env(REPORT_DIR_ENV, &reports.0);
    // The options given, under the names the library reads; the others
    // removed, so none leaks in from an outer `zpage run`. Values only:
    // a Redis password travels as a file's path (ps shows the environment
    // to its owner, /proc/PID/environ too).
    for option in zpage_region::BUDGET_OPTIONS {
        match budget_options.text(option.name) {
            Some(text) => command.env(option.env(), text),
            None => command.env_remove(option.env()),
        };
    }
    // The program's budgets publish their figures when this is set; a
    // directory the user chose is kept.
    let metrics_dir = if args.no_metrics {
        command.env_remove(zpage_region::METRICS_DIR_ENV);
        None
    } else {
        let dir = std::env::var_os(zpage_region::METRICS_DIR_ENV)
            .map(std::path::PathBuf::from)
            .unwrap_or_else(zpage_region::default_metrics_dir);
        command.env(zpage_region::METRICS_DIR_ENV, &dir);
        Some(dir)
    };
    let facts = ProgramFacts::inspect(program);
    let descriptors = run_diagnosis::descriptor_limit();
    let (ended, wall) = spawn_and_wait(&mut command, program)?;
    let killed_by = ended.killed_by();
    let exit_code = ended.shell_status();
    let all = ProcessReport::read_dir(&reports.0).map_err(anyhow::Error::msg)?;
    // Processes an `exec` replaced (or that ended by `_exit` or a signal)
    // did not remove their published metrics.
    if let Some(dir) = &metrics_dir {
        for report in &all {
            zpage_region::remove_published_if_gone(dir, report.pid as u32);
        }
    }
    let mut summary = summarize(&all, ended.pid);
    summary.command = command_words(args);
    summary.exit_status = exit_code;
    summary.killed_by_signal = killed_by;
    if summary.processes == 0 {
        summary.no_report_reason = Some(run_diagnosis::why_no_report(
            program,
            &facts,
            killed_by,
            descriptors,
        ));
    }
    if killed_by == Some(libc::SIGBUS) {
        summary.signal_note = Some(run_diagnosis::SIGBUS_NOTE.to_string());
    }
    summary.budget_bytes = budget;
    summary.memory_max_bytes = crate::run_memory_max::given(budget_options)?;
    if summary.codec.is_empty() {
        summary.codec = budget_options.text("codec").unwrap_or("lz4").to_string();
    }
    summary.peak_resident_bytes = ended.peak_bytes;
    if let Some(max) = summary.memory_max_bytes {
        summary.memory_max_exceeded_bytes = summary.peak_resident_bytes.saturating_sub(max);
    }
    summary.wall_seconds = wall;
    if let Some(auto) = &mut summary.auto_budget {
        auto.stall_share = if wall > 0.0 {
            auto.stall_seconds / wall
        } else {
            0.0
        };
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    summary.user_seconds = secs(ended.usage.ru_utime);
    summary.system_seconds = secs(ended.usage.ru_stime);
    summary.memory = user_figures(&summary, plain);
    report_summary(args, &summary, render)?;
    Ok(match killed_by {
        Some(signal) => RunExit::Signal(signal),
        None => RunExit::Code(exit_code.clamp(0, 255) as u8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_are_sizes_or_percentages_of_memory() {
        assert_eq!(budget_bytes("256M", 1 << 30).unwrap(), 256 << 20);
        assert_eq!(budget_bytes("25%", 1 << 30).unwrap(), 256 << 20);
        assert_eq!(budget_bytes("150%", 1 << 30).unwrap(), 3 << 29);
        let e = budget_bytes("500%", 1 << 30).unwrap_err().to_string();
        assert!(e.contains("(0, 400]"), "{e}");
        let e = budget_bytes("4K", 1 << 30).unwrap_err().to_string();
        assert!(e.contains("raise it"), "{e}");
        assert!(budget_bytes("lots", 1 << 30).is_err());
    }

    #[test]
    fn a_missing_preload_library_names_how_to_install_it() {
        let e = find_preload(None, Path::new("/nonexistent/bin/zpage"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("scripts/install.sh"), "{e}");
        assert!(e.contains("/nonexistent/bin/../lib/zpage"), "{e}");
        let e = find_preload(Some("/nonexistent.so".into()), Path::new("/x"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(PRELOAD_ENV), "{e}");
    }

    #[test]
    fn the_summary_merges_processes_and_names_inactive_ones() {
        let mut a = ProcessReport::new(10, "a".into());
        a.active = true;
        a.fault_count = 2;
        a.fault_ns = 4000;
        a.fault_latency_log2_buckets[10] = 2;
        a.peak_rss_bytes = 100;
        a.unconstrained_peak_estimate_bytes = 400;
        let mut b = ProcessReport::new(11, "b".into());
        b.inactive_reason = Some("ZPAGE_RUN_BUDGET_BYTES is not set".into());
        let mut s = summarize(&[a, b], 10);
        assert_eq!(s.faults, 2);
        assert_eq!(s.fault_latency_p99_ns, 2048);
        // Without a plain run, saved is the estimate less the peak of the
        // program and its descendants.
        s.peak_resident_bytes = 150;
        s.memory = user_figures(&s, None);
        assert_eq!(s.memory.saved_bytes, Some(250));
        assert!(s.memory.saved_method.starts_with("estimated: "));
        let plain = PlainRun {
            peak_bytes: 120,
            wall_seconds: 1.0,
            exit_status: 0,
        };
        s.memory = user_figures(&s, Some(&plain));
        assert_eq!(s.memory.saved_bytes, Some(-30));
        assert_eq!(s.memory.saved_method, "measured");
        assert_eq!(s.processes_without_zpage, 1);
        assert!(render(&s).contains("Why without zpage"));
    }
}
