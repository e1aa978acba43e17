//! `zpage bench`: the workloads on a zpage region, optionally side by
//! side with the kernel's zram and zswap (`--vs-kernel`), with a final table,
//! zpage/kernel ratios and `--json`.

#[path = "bench_progress.rs"]
pub mod bench_progress;
#[path = "cmd_bench_redis.rs"]
pub mod cmd_bench_redis;

use anyhow::{bail, Context, Result};
use bench_progress::BarObserver;
use std::path::{Path, PathBuf};
use zpage_bench::kernel::{self, SwapBackend};
use zpage_bench::report::{self, BenchResult};
use zpage_bench::{AgingPolicy, DataSource, FaultMode, WorkloadKind, WorkloadSpec, ZpageOptions};
use zpage_units::format_bytes as mib;

/// Arguments of `zpage bench`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// A real program to benchmark instead of the built-in workloads.
    #[command(subcommand)]
    pub program: Option<BenchProgram>,
    /// Workloads to run (repeatable or comma-separated): replay (fill, then
    /// sequential, uniform and hot/cold touches), bench-c (sequential and random
    /// access over high- and low-entropy data), swapdemo (a memory-mapped file
    /// read at random while anonymous data is walked), trace (a real program's
    /// page access order, from --trace), all.
    #[arg(long = "workload", value_enum, value_delimiter = ',', default_values_t = [WorkloadArg::Replay])]
    pub workloads: Vec<WorkloadArg>,
    /// Raw memory image to fill the region from (whole 4 KiB pages); default:
    /// a generated realistic data set (text, pointer-heavy structs, numbers, zero and random pages).
    #[arg(long, value_name = "FILE")]
    pub image: Option<PathBuf>,
    /// The trace workload's recording: a program's faults in order, from `zpage
    /// run --budget SMALL --fault-trace FILE -- PROGRAM` (a budget far below its
    /// memory, so nearly every access faults). Its pages become the data's
    /// pages in the order first touched, read or written as recorded; by
    /// default the data is that many pages and the phase replays the trace once.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// First capture --image from this live process's private writable memory (/proc/PID/mem).
    #[arg(long, value_name = "PID", requires = "image")]
    pub capture_pid: Option<u32>,
    /// Data size (e.g. 2G, 512M). Default: the pages --trace touched, the image's size, or 256M.
    #[arg(long, value_parser = zpage_units::parse_size)]
    pub size: Option<u64>,
    /// Resident budget: the region's budget and the kernel tiers' cgroup limit. Default: a quarter of the size.
    #[arg(long, value_parser = zpage_units::parse_size)]
    pub budget: Option<u64>,
    /// Touches of each random phase. Default: one per page (hot/cold gets at
    /// least 32 per hot page, after a warm-up of as many), or the trace's length.
    #[arg(long)]
    pub touches: Option<u64>,
    /// Seed of the access sequences and of the generated data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also run the same workloads, on the same pages and access sequences, in
    /// a memory cgroup limited to the budget swapping to zram (each algorithm)
    /// and to zswap in front of a swapfile. Needs root; restores the swap state afterwards.
    #[arg(long)]
    pub vs_kernel: bool,
    /// Kernel tiers for --vs-kernel (comma-separated, e.g. zram-lz4,zswap-lzo). Default: all this machine has.
    #[arg(long = "kernel-tier", value_delimiter = ',')]
    pub kernel_tiers: Vec<String>,
    /// Run only the phases whose names start with these (comma-separated, e.g.
    /// random-read,hotcold); all phases when absent.
    #[arg(long, value_delimiter = ',')]
    pub phases: Vec<String>,
    /// Resident-memory sampling period in milliseconds (each sample is a mincore over the data).
    #[arg(long, default_value_t = zpage_bench::workload::DEFAULT_SAMPLE_EVERY_MS)]
    pub sample_ms: u64,
    /// Threads touching memory at once in every timed phase (the touches are
    /// split between them; every tier runs the same threads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Skip the FIFO-aging region that the hot/cold phases and a trace are compared with.
    #[arg(long)]
    pub no_fifo: bool,
    /// How the region resolves faults.
    #[arg(long, value_enum, default_value_t = FaultModeArg::Sigbus)]
    pub fault_mode: FaultModeArg,
    /// Codec of the region's evicted pages (lz4, lz4-flex, zstd, zstd:LEVEL).
    #[arg(long, default_value = "lz4")]
    pub codec: String,
    /// A stronger codec for cold pages (zstd, zstd:LEVEL, zstd-dict[:LEVEL]: a
    /// dictionary trained from the region's own pages): evicted pages with no
    /// quick reuse go straight to it, and pages that have stayed compressed
    /// --cold-after-ms are recompressed with it, kept when they take less memory.
    #[arg(long, value_name = "CODEC")]
    pub cold_codec: Option<String>,
    /// With --cold-codec: every eviction takes --codec, and only recompression
    /// by age uses the cold codec (as zram's recompress).
    #[arg(long, requires = "cold_codec")]
    pub cold_by_age_only: bool,
    /// Milliseconds a page stays compressed before cold recompression.
    #[arg(long, default_value_t = 1000, requires = "cold_codec")]
    pub cold_after_ms: u64,
    /// The region keeps a restored page's compressed copy while it stays
    /// unwritten (no compression when it is evicted again; more pool memory).
    #[arg(long)]
    pub keep_clean_copies: bool,
    /// The region stores identical evicted pages once (a content hash,
    /// checked byte for byte; a write to a restored copy stays private).
    /// Rows count the pages that shared a blob in `deduplicated_pages`.
    #[arg(long)]
    pub dedup: bool,
    /// Cap on the region's compressed pool (e.g. 128M). With --backing the
    /// oldest compressed pages are written back as the pool nears it;
    /// without, evictions at the cap are refused. With --vs-kernel, zswap's
    /// pool is capped to match (rounded up to a whole percent of RAM), so it
    /// writes back to its swap file too.
    #[arg(long, value_parser = zpage_units::parse_size, value_name = "SIZE")]
    pub pool_max: Option<u64>,
    #[command(flatten)]
    pub backing: crate::backing_args::BackingArgs,
    /// swapdemo's library file size. Default: half the budget.
    #[arg(long, value_parser = zpage_units::parse_size)]
    pub library_size: Option<u64>,
    /// Directory for zswap's swapfile and swapdemo's library (a filesystem that supports swapfiles).
    #[arg(long, default_value = "/var/tmp")]
    pub scratch_dir: PathBuf,
    /// Print the results as JSON on stdout (one object per tier × workload × pattern); tables go to stderr.
    #[arg(long)]
    pub json: bool,
    /// Also write an HTML report with plots (throughput and latency per tier, latency CDFs) to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Leave out the latency distribution bars.
    #[arg(long)]
    pub no_charts: bool,
}

/// Real programs `zpage bench` drives.
#[derive(Debug, clap::Subcommand)]
pub enum BenchProgram {
    /// redis-server loaded with real text: every value checked, DEBUG DIGEST
    /// compared through a BGSAVE, GET throughput and p50/p99 at random keys.
    Redis(Box<cmd_bench_redis::Args>),
}

/// `--workload` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkloadArg {
    /// Fill, then sequential, uniform and hot/cold touches.
    Replay,
    /// Sequential and random access over high- and low-entropy data.
    BenchC,
    /// A memory-mapped file read at random while anonymous data is walked.
    Swapdemo,
    /// A real program's recorded page access order (--trace FILE).
    Trace,
    /// All of them.
    All,
}

/// `--fault-mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultModeArg {
    /// The faulting thread resolves its fault (no privilege needed).
    Sigbus,
    /// A handler thread resolves faults.
    HandlerThread,
}

/// Deletes swapdemo's library file when the run ends.
struct ScratchFile(PathBuf);

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn write_library(path: &Path, bytes: u64, seed: u64) -> Result<ScratchFile> {
    use std::io::Write;
    let guard = ScratchFile(path.to_path_buf());
    let file = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut writer = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut page = vec![0u8; zpage_bench::PAGE_SIZE];
    for index in 0..bytes / zpage_bench::PAGE_SIZE as u64 {
        // "Code": the realistic generator with another seed (text and pointer tables).
        zpage_bench::dataset::generate_realistic_page(seed ^ 0x11b, index, &mut page);
        writer.write_all(&page)?;
    }
    writer.flush()?;
    writer.get_ref().sync_all()?;
    Ok(guard)
}

/// Emits a line for humans: stdout normally, stderr when stdout carries JSON.
fn say(json: bool, text: &str) {
    if json {
        eprintln!("{text}");
    } else {
        println!("{text}");
    }
}

pub fn run(mut args: Args) -> Result<()> {
    if let Some(BenchProgram::Redis(redis)) = args.program.take() {
        return cmd_bench_redis::run(*redis);
    }
    // A kernel tier's child is this same program, started with a request in its environment.
    if kernel::run_child_if_requested() {
        return Ok(());
    }
    zpage_bench::install_interrupt_handler().context("install the Ctrl-C handler")?;
    let results = measure(&args)?;
    print_report(&args, &results)
}

/// Runs every requested workload on every tier; returns one result per tier × workload × phase.
fn measure(args: &Args) -> Result<Vec<BenchResult>> {
    if let (Some(pid), Some(image)) = (args.capture_pid, &args.image) {
        // The resident anonymous pages, as `zpage analyze --pid PID --save-image` captures them.
        let max_pages = args.size.map(|bytes| bytes / zpage_bench::PAGE_SIZE as u64);
        let captured = zpage_analyze::capture_process(pid, max_pages)
            .with_context(|| format!("capture process {pid}"))?;
        captured.save(image)?;
        say(
            args.json,
            &format!(
                "captured {} of process {pid} ({}) into {}",
                mib(captured.bytes()),
                captured.label(),
                image.display()
            ),
        );
    }

    let page = zpage_bench::PAGE_SIZE as u64;
    let (source, default_size) = match &args.image {
        Some(path) => {
            let (pages, warning) = zpage_bench::dataset::image_pages(path)?;
            if let Some(warning) = warning {
                eprintln!("zpage bench: warning: {warning}");
            }
            if pages == 0 {
                bail!("{} holds no whole page", path.display());
            }
            (DataSource::Image { path: path.clone() }, pages * page)
        }
        None => (DataSource::Realistic { seed: args.seed }, 256 << 20),
    };
    let trace_asked = args
        .workloads
        .iter()
        .any(|w| matches!(w, WorkloadArg::Trace | WorkloadArg::All));
    let trace = match (&args.trace, args.workloads.contains(&WorkloadArg::Trace)) {
        // Without the trace workload a trace would only change the other
        // workloads' default size and touches.
        (Some(_), _) if !trace_asked => bail!(
            "--trace is the trace workload's recording: add --workload trace (or all)"
        ),
        (Some(path), _) => Some(zpage_bench::trace::PageTrace::load(path)?),
        (None, true) => bail!(
            "--workload trace needs --trace FILE: record one with `zpage run --budget 4M --fault-trace FILE -- PROGRAM`"
        ),
        (None, false) => None,
    };
    if let Some(trace) = &trace {
        if trace.truncated() {
            eprintln!(
                "zpage bench: warning: {} filled up before the program ended: only its first {} faults replay",
                args.trace.as_deref().unwrap_or(Path::new("")).display(),
                trace.len()
            );
        }
    }
    let default_size = trace
        .as_ref()
        .map_or(default_size, |t| t.distinct_pages() * page);
    let size = args.size.unwrap_or(default_size) / page * page;
    if args.image.is_some() && size > default_size {
        eprintln!(
            "zpage bench: warning: --size {} is larger than the image ({}): the image repeats",
            mib(size),
            mib(default_size)
        );
    }
    let budget = args.budget.unwrap_or(size / 4) / page * page;
    if size == 0 || budget == 0 || budget >= size {
        bail!("need 0 < --budget < --size (got size {size}, budget {budget})");
    }
    let touches = args
        .touches
        .unwrap_or(trace.as_ref().map_or(size / page, |t| t.len()));
    // Checked before anything runs: a backing that cannot hold pages
    // would otherwise end the run at its first read-back.
    let backing = args
        .backing
        .check(zpage_bench::zpage_tier::backing_bound(size))?;

    let mut workloads: Vec<WorkloadArg> = args.workloads.clone();
    if workloads.contains(&WorkloadArg::All) {
        workloads = vec![
            WorkloadArg::Replay,
            WorkloadArg::BenchC,
            WorkloadArg::Swapdemo,
        ];
        if args.trace.is_some() {
            workloads.push(WorkloadArg::Trace);
        }
    }
    workloads.dedup();

    let base = |kind: WorkloadKind, source: DataSource| WorkloadSpec {
        kind,
        source,
        size_bytes: size,
        touches,
        seed: args.seed,
        only_phases: args.phases.clone(),
        sample_every_ms: args.sample_ms,
        threads: args.threads,
    };
    let mut specs = Vec::new();
    let mut scratch = Vec::new();
    for workload in &workloads {
        match workload {
            WorkloadArg::Replay => specs.push(base(WorkloadKind::Replay, source.clone())),
            WorkloadArg::BenchC => {
                specs.push(base(
                    WorkloadKind::BenchC,
                    DataSource::HighEntropy { seed: args.seed },
                ));
                specs.push(base(WorkloadKind::BenchC, DataSource::LowEntropy));
            }
            WorkloadArg::Swapdemo => {
                let library_bytes = args.library_size.unwrap_or(budget / 2) / page * page;
                let path = args
                    .scratch_dir
                    .join(format!("zpage-bench-library-{}.bin", std::process::id()));
                scratch.push(write_library(&path, library_bytes, args.seed)?);
                specs.push(base(
                    WorkloadKind::SwapDemo { library_path: path },
                    source.clone(),
                ));
            }
            WorkloadArg::Trace => specs.push(base(
                WorkloadKind::Trace {
                    trace_path: args.trace.clone().expect("checked above"),
                },
                source.clone(),
            )),
            WorkloadArg::All => unreachable!("expanded above"),
        }
    }

    let codec = args
        .codec
        .parse()
        .map_err(|e| anyhow::anyhow!("--codec {}: {e}", args.codec))?;
    let cold_codec = args
        .cold_codec
        .as_deref()
        .map(|c| {
            c.parse()
                .map_err(|e| anyhow::anyhow!("--cold-codec {c}: {e}"))
        })
        .transpose()?;
    let mode = match args.fault_mode {
        FaultModeArg::Sigbus => FaultMode::Sigbus,
        FaultModeArg::HandlerThread => FaultMode::HandlerThread,
    };
    let zpage = ZpageOptions {
        aging: AgingPolicy::Refault,
        mode,
        codec,
        cold_codec,
        cold_by_age_only: args.cold_by_age_only,
        cold_after: std::time::Duration::from_millis(args.cold_after_ms),
        keep_clean_copies: args.keep_clean_copies,
        dedup: args.dedup,
        pool_max_bytes: args.pool_max,
        backing,
    };
    let fifo = ZpageOptions {
        aging: AgingPolicy::Fifo,
        ..zpage.clone()
    };

    // Take the machine first, so a busy machine or a missing privilege fails before a long run.
    let mut machine = if args.vs_kernel {
        Some(kernel::take_machine(&args.scratch_dir)?)
    } else {
        None
    };
    let tiers: Vec<SwapBackend> = if !args.vs_kernel {
        vec![]
    } else if args.kernel_tiers.is_empty() {
        SwapBackend::all_available()?
    } else {
        args.kernel_tiers
            .iter()
            .map(|t| SwapBackend::parse(t))
            .collect::<Result<_, _>>()?
    };

    say(
        args.json,
        &format!(
            "zpage bench: data {} ({}), budget {}, {} touches per random phase, seed {}, codec {}{}{}, fault mode {:?}",
            mib(size),
            source.describe(),
            mib(budget),
            touches,
            args.seed,
            args.codec,
            args.cold_codec
                .as_deref()
                .map_or(String::new(), |c| format!(
                    " (cold: {c}{} after {} ms)",
                    if args.cold_by_age_only { " by age only," } else { " at eviction and" },
                    args.cold_after_ms
                )),
            if args.dedup { ", dedup" } else { "" },
            args.fault_mode
        ),
    );
    if let Some(machine) = &machine {
        say(
            args.json,
            &format!(
                "kernel tiers: {} in a memory cgroup limited to {} (memory.swappiness {}, memsw unlimited), vm.page-cluster 0 (was {}); swap state restored afterwards",
                tiers.iter().map(SwapBackend::name).collect::<Vec<_>>().join(", "),
                mib(budget),
                kernel::CGROUP_SWAPPINESS,
                machine.saved().page_cluster()
            ),
        );
    }

    let mut results: Vec<BenchResult> = Vec::new();
    let launcher = || {
        let mut command = std::process::Command::new(std::env::current_exe().expect("own path"));
        command.arg("bench");
        command
    };
    for spec in &specs {
        let workload = spec.name();
        // zpage with its aging policy, then FIFO aging on the hot/cold phases for comparison.
        let mut zpage_runs = vec![(zpage.clone(), spec.clone())];
        let hot_cold_asked =
            args.phases.is_empty() || args.phases.iter().any(|p| p.starts_with("hotcold"));
        if matches!(spec.kind, WorkloadKind::Trace { .. }) && !args.no_fifo {
            zpage_runs.push((fifo.clone(), spec.clone()));
        } else if spec.kind == WorkloadKind::Replay && !args.no_fifo && hot_cold_asked {
            let mut hot_cold = spec.clone();
            hot_cold.only_phases = match args
                .phases
                .iter()
                .filter(|p| p.starts_with("hotcold"))
                .cloned()
                .collect::<Vec<_>>()
            {
                asked if asked.is_empty() => vec!["hotcold".into()],
                asked => asked,
            };
            zpage_runs.push((fifo.clone(), hot_cold));
        }
        for (options, spec) in zpage_runs {
            let tier_name = options.tier_name();
            let mut observer = BarObserver::new(format!("{tier_name} {workload}"));
            results.extend(zpage_bench::run_zpage_tier(
                &spec,
                budget,
                &options,
                &mut observer,
            )?);
            eprintln!("  done: {tier_name} {workload}");
        }
        if let Some(machine) = machine.as_mut() {
            for tier in &tiers {
                if let (SwapBackend::Zswap(_), Some(pool_max)) = (tier, args.pool_max) {
                    let cap = machine.cap_zswap_pool(pool_max)?;
                    say(
                        args.json,
                        &format!(
                            "{}: zswap's pool capped at {} (max_pool_percent, whole percents of RAM) to match --pool-max {}",
                            tier.name(),
                            mib(cap),
                            mib(pool_max)
                        ),
                    );
                }
                let mut observer = BarObserver::new(format!("{} {workload}", tier.name()));
                let tier_results =
                    kernel::run_kernel_tier(machine, tier, spec, budget, &launcher, &mut observer)?;
                eprintln!("  done: {} {workload}", tier.name());
                results.extend(tier_results);
            }
        }
    }
    if let Some(mut machine) = machine.take() {
        machine.restore()?;
        say(
            args.json,
            "machine swap state restored and checked (swaps, zram, zswap, page-cluster, cgroups)",
        );
    }

    drop(scratch);
    Ok(results)
}

/// The first line of `/proc/...` `file` that starts with `key`, after its `:`.
fn proc_field(file: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .find_map(|line| {
            line.strip_prefix(key)
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, value)| value.trim().to_string())
        })
}

fn proc_text(file: &str) -> String {
    std::fs::read_to_string(file)
        .map(|text| text.trim().to_string())
        .unwrap_or_else(|_| "-".into())
}

/// What the report says about the run: the data, the budget, the codecs and
/// tiers, the host, zpage's version and when.
fn run_parameters(args: &Args, results: &[BenchResult]) -> Vec<(&'static str, String)> {
    use crate::bench_report::bytes_text;
    let first = results.first();
    let distinct = |field: fn(&BenchResult) -> &str| {
        let mut seen: Vec<&str> = Vec::new();
        for r in results {
            if !seen.contains(&field(r)) {
                seen.push(field(r));
            }
        }
        seen.join(", ")
    };
    let mut rows = vec![
        (
            "data",
            match &args.image {
                Some(image) => format!("memory image {}", image.display()),
                None => format!("generated (seed {})", args.seed),
            },
        ),
        (
            "size",
            first.map_or("-".into(), |r| bytes_text(r.size_bytes)),
        ),
        (
            "budget",
            first.map_or("-".into(), |r| bytes_text(r.budget_bytes)),
        ),
        (
            "codec",
            match &args.cold_codec {
                Some(cold) => format!("{}, cold pages {cold}", args.codec),
                None => args.codec.clone(),
            },
        ),
        ("tiers", distinct(|r| &r.tier)),
        ("workloads", distinct(|r| &r.workload)),
        ("phases", distinct(|r| &r.pattern)),
        (
            "touches per random phase",
            args.touches
                .map_or("one per page".into(), crate::bench_plots::grouped),
        ),
        ("threads", args.threads.to_string()),
        ("fault mode", format!("{:?}", args.fault_mode)),
    ];
    if let Some(cap) = args.pool_max {
        rows.push(("pool cap", bytes_text(cap)));
    }
    if let Some(backing) = &args.backing.backing {
        // The URL with its user and without its password (shown as ***).
        rows.push(("tier below RAM", zpage_store::redact_url(backing)));
    }
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    rows.extend([
        (
            "host",
            format!(
                "{}, Linux {}, {cpus} CPUs ({}), {} RAM",
                proc_text("/proc/sys/kernel/hostname"),
                proc_text("/proc/sys/kernel/osrelease"),
                proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| "-".into()),
                zpage_kernel::procfs::mem_total_bytes().map_or("-".into(), bytes_text),
            ),
        ),
        ("zpage version", env!("CARGO_PKG_VERSION").to_string()),
        (
            "date",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        ),
    ]);
    rows
}

fn print_report(args: &Args, results: &[BenchResult]) -> Result<()> {
    let mut text = crate::bench_report::tables_text(results);
    for tier in ["zpage", "zpage-fifo"] {
        if let Some(peak) = report::budget_overshoot(results, tier) {
            text.push_str(&format!(
                "\nbudget check {tier}: highest resident memory sampled = {:.3} x budget ({})",
                peak,
                if peak <= 1.05 {
                    "within 5%"
                } else {
                    "OVER the 5% allowance"
                }
            ));
        }
    }
    if !args.no_charts {
        text.push('\n');
        text.push_str(&crate::bench_report::latency_charts(results));
    }
    say(args.json, text.trim_end());
    if let Some(path) = &args.report {
        let html =
            crate::bench_report::html(results, "zpage bench", &run_parameters(args, results))
                .map_err(|e| anyhow::anyhow!("the report {}: {e}", path.display()))?;
        std::fs::write(path, html)
            .with_context(|| format!("write the report {}", path.display()))?;
        say(args.json, &format!("report with plots: {}", path.display()));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct TestCli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Args {
        TestCli::parse_from(std::iter::once("bench").chain(argv.iter().copied())).args
    }

    #[test]
    fn a_pool_cap_with_backing_writes_back_and_reports_the_tier() {
        let _watchdog =
            zpage_bench::Watchdog::arm(std::time::Duration::from_secs(150), "backing bench");
        let backing =
            std::env::temp_dir().join(format!("zpage-bench-backing-{}", std::process::id()));
        let args = parse(&[
            "--size",
            "32M",
            "--budget",
            "4M",
            "--pool-max",
            "2M",
            "--backing",
            backing.to_str().unwrap(),
            "--touches",
            "4000",
            "--workload",
            "replay",
            "--no-fifo",
        ]);
        let results = measure(&args).unwrap();
        let _ = std::fs::remove_file(&backing);
        let random = results
            .iter()
            .find(|r| r.tier == "zpage" && r.pattern == "random-read")
            .unwrap();
        assert!(random.backing_bytes > 0, "{random:?}");
        assert!(
            random.tier_reads > 0 && random.tier_read_mean_us > 0.0,
            "{random:?}"
        );
        assert!(random.compressed_bytes > 0, "{random:?}");
        assert_eq!(random.tier_sealing.as_deref(), Some("AES-256-GCM"));
        // The file's blocks on disk, the live pages' compressed bytes, and
        // the one per the other as the tier computed it.
        let disk = random
            .backing_disk_bytes
            .expect("a file tier has disk bytes");
        let payload = random.backing_live_payload_bytes.expect("a tier");
        let ratio = random.disk_bytes_per_payload_byte.expect("a ratio");
        assert!(disk > 0 && payload > 0, "{random:?}");
        assert!(
            (ratio - disk as f64 / payload as f64).abs() < 0.2,
            "{random:?}"
        );
        let json = serde_json::to_string(&random).unwrap();
        for field in [
            "compressed_bytes",
            "backing_bytes",
            "tier_read_mean_us",
            "backing_disk_bytes",
            "backing_live_payload_bytes",
            "disk_bytes_per_payload_byte",
        ] {
            assert!(json.contains(field), "{json}");
        }
        // --backing without --pool-max is refused by the parser.
        assert!(TestCli::try_parse_from(["bench", "--backing", "/tmp/x"]).is_err());
    }

    #[test]
    fn a_cold_codec_recompresses_and_the_rows_say_how_many() {
        let _watchdog =
            zpage_bench::Watchdog::arm(std::time::Duration::from_secs(150), "cold bench");
        let args = parse(&[
            "--size",
            "32M",
            "--budget",
            "4M",
            "--cold-codec",
            "zstd",
            "--cold-after-ms",
            "0",
            "--touches",
            "4000",
            "--workload",
            "replay",
            "--phases",
            "sequential-read,random-read",
            "--no-fifo",
        ]);
        let results = measure(&args).unwrap();
        let random = results
            .iter()
            .find(|r| r.tier == "zpage" && r.pattern == "random-read")
            .unwrap();
        assert!(random.recompressed_pages > 0, "{random:?}");
        assert!(random.compressed_bytes > 0, "{random:?}");
        let json = serde_json::to_string(&random).unwrap();
        assert!(json.contains("\"recompressed_pages\""), "{json}");

        let bad = parse(&["--size", "8M", "--cold-codec", "brotli"]);
        let error = measure(&bad).unwrap_err().to_string();
        assert!(error.contains("--cold-codec brotli"), "{error}");
    }

    #[test]
    fn dedup_stores_a_repeated_image_once_and_the_rows_say_how_many_pages_shared() {
        let _watchdog =
            zpage_bench::Watchdog::arm(std::time::Duration::from_secs(150), "dedup bench");
        // A 4 MiB image of distinct pages, repeated four times over 16 MiB.
        let image = std::env::temp_dir().join(format!("zpage-bench-dedup-{}", std::process::id()));
        let pages: Vec<u8> = (0..1024u32)
            .flat_map(|p| {
                (0..zpage_bench::PAGE_SIZE as u32 / 4)
                    .flat_map(move |w| (p.wrapping_mul(31) ^ (w % 97)).to_le_bytes())
            })
            .collect();
        std::fs::write(&image, &pages).unwrap();
        let run = |dedup: bool| {
            let mut argv = vec![
                "--image",
                image.to_str().unwrap(),
                "--size",
                "16M",
                "--budget",
                "2M",
                "--touches",
                "2000",
                "--phases",
                "random-read",
                "--no-fifo",
            ];
            if dedup {
                argv.push("--dedup");
            }
            let results = measure(&parse(&argv)).unwrap();
            results
                .into_iter()
                .find(|r| r.tier == "zpage" && r.pattern == "random-read")
                .unwrap()
        };
        let plain = run(false);
        let shared = run(true);
        let _ = std::fs::remove_file(&image);
        assert_eq!(plain.deduplicated_pages, 0, "{plain:?}");
        assert!(shared.deduplicated_pages > 1024, "{shared:?}");
        assert!(
            shared.compressed_bytes * 2 < plain.compressed_bytes,
            "with dedup {shared:?}\nwithout {plain:?}"
        );
        let json = serde_json::to_string(&shared).unwrap();
        assert!(json.contains("\"deduplicated_pages\""), "{json}");
    }

    #[test]
    fn tiny_bench_runs_every_workload_on_a_region_within_budget() {
        let _watchdog =
            zpage_bench::Watchdog::arm(std::time::Duration::from_secs(150), "tiny bench");
        let scratch = std::env::temp_dir();
        let args = parse(&[
            "--size",
            "8M",
            "--budget",
            "2M",
            "--touches",
            "2000",
            "--workload",
            "all",
            "--scratch-dir",
            scratch.to_str().unwrap(),
        ]);
        let results = measure(&args).unwrap();
        let rows: Vec<(String, String, String)> = results
            .iter()
            .map(|r| (r.tier.clone(), r.workload.clone(), r.pattern.clone()))
            .collect();
        for expected in [
            ("zpage", "replay", "random-read"),
            ("zpage", "replay", "hotcold-write"),
            ("zpage-fifo", "replay", "hotcold-read"),
            ("zpage", "bench-c-high-entropy", "sequential-scan"),
            ("zpage", "bench-c-low-entropy", "random-read"),
            ("zpage", "swapdemo", "library-random+data-sequential"),
        ] {
            let expected = (
                expected.0.to_string(),
                expected.1.to_string(),
                expected.2.to_string(),
            );
            assert!(
                rows.contains(&expected),
                "{expected:?} missing from {rows:?}"
            );
        }
        assert_eq!(results.len(), 6 + 2 + 2 + 2 + 1);
        for r in &results {
            assert!(
                r.touches >= 2000 || r.pattern.starts_with("sequential"),
                "{r:?}"
            );
            assert!(r.p50_us <= r.p99_us && r.p99_us <= r.max_us, "{r:?}");
            assert!(
                r.resident_max_bytes.max(r.fill_resident_max_bytes) <= r.budget_bytes * 105 / 100,
                "{} {} {}: resident {} over budget {}",
                r.tier,
                r.workload,
                r.pattern,
                r.resident_max_bytes,
                r.budget_bytes
            );
        }
        // 8 MiB through a 2 MiB budget: random touches must fault and the store must hold data.
        let random = results
            .iter()
            .find(|r| r.tier == "zpage" && r.pattern == "random-read")
            .unwrap();
        assert!(
            random.fault_share > 0.3 && random.compressed_bytes > 0,
            "{random:?}"
        );
        print_report(&args, &results).unwrap();
    }

    #[test]
    fn refuses_a_budget_not_below_the_size() {
        let args = parse(&["--size", "4M", "--budget", "4M"]);
        assert!(measure(&args).unwrap_err().to_string().contains("--budget"));
    }
}
