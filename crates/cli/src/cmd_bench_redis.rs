//! `zpage bench redis`: a redis-server loaded with real text, every value
//! checked, digests compared through a BGSAVE, and GET throughput and
//! latency at uniform random keys; the server plain, behind a command
//! prefix (`-- zpage run --budget 256M -- redis-server`), in kernel mode, or
//! one already running.

use anyhow::{bail, Result};
use std::path::PathBuf;
use zpage_bench::redis_load::{self, RedisBenchOptions, RedisReport, ServerSource};
use zpage_kernel::machine::SwapBackend;
use zpage_kernel::run::RunOptions;

use super::bench_progress::BarObserver;
use crate::table::Table;

/// Arguments of `zpage bench redis`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Bytes of text values to load (e.g. 1G, 64M).
    #[arg(long, default_value = "64M", value_parser = zpage_units::parse_size)]
    pub size: u64,
    /// Mean value size in bytes (each value is half to one and a half times it).
    #[arg(long, default_value_t = 1024)]
    pub value_size: usize,
    /// Directories whose plain-text files the values are cut from (repeatable).
    #[arg(long = "text-from", default_values = ["/usr/share", "/usr/include"])]
    pub text_from: Vec<PathBuf>,
    /// Read at most this much text (values are windows of it).
    #[arg(long, default_value = "64M", value_parser = zpage_units::parse_size)]
    pub corpus_size: u64,
    /// Timed GETs at uniform random keys. Default: one per key, at most 200000.
    #[arg(long)]
    pub gets: Option<u64>,
    /// Seed of the values' places in the text and of the GET keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// BGSAVEs in all: the first while the values are read back, the rest
    /// one after another at the end; every RDB is loaded by a plain server
    /// and its DEBUG DIGEST compared.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub bgsaves: u32,
    /// How the server runs: plain (the command as given), kernel (in a memory
    /// cgroup limited to --budget, swapping to --kernel-backend; needs root).
    #[arg(long, value_enum, default_value_t = ModeArg::Plain)]
    pub mode: ModeArg,
    /// Memory budget of kernel mode (e.g. 256M).
    #[arg(long, value_parser = zpage_units::parse_size, required_if_eq("mode", "kernel"))]
    pub budget: Option<u64>,
    /// Swap of kernel mode: zram-ALGORITHM or zswap-COMPRESSOR.
    #[arg(long, default_value = "zram-lz4")]
    pub kernel_backend: String,
    /// Use a running, empty server that allows DEBUG (redis://HOST:PORT or
    /// unix:///PATH) instead of starting one.
    #[arg(long, conflicts_with = "mode")]
    pub connect: Option<String>,
    /// redis-server binary of the second server that loads the RDB.
    #[arg(long, default_value = "redis-server")]
    pub redis_server: PathBuf,
    /// Directory for the socket, RDB and logs (a subdirectory is made and removed).
    #[arg(long, default_value = "/var/tmp")]
    pub scratch_dir: PathBuf,
    /// Label of this run in the report. Default: from the mode.
    #[arg(long)]
    pub label: Option<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// The server command; the driver appends redis-server options (socket,
    /// directory, no persistence, DEBUG allowed), so a prefix such as
    /// `zpage run --budget 256M -- redis-server` works. Default: redis-server.
    #[arg(last = true, value_name = "SERVER_COMMAND")]
    pub server_command: Vec<String>,
}

/// `--mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// The server command as given.
    Plain,
    /// In a memory cgroup limited to --budget, swapping to compressed swap.
    Kernel,
}

pub fn run(args: Args) -> Result<()> {
    zpage_bench::install_interrupt_handler()?;
    let command = if args.server_command.is_empty() {
        vec!["redis-server".to_string()]
    } else {
        args.server_command.clone()
    };
    let (server, label) = match (&args.connect, args.mode) {
        (Some(url), _) => (
            ServerSource::Connect(url.clone()),
            format!("server at {url}"),
        ),
        (None, ModeArg::Plain) => (ServerSource::Start(command.clone()), command.join(" ")),
        (None, ModeArg::Kernel) => {
            let Some(budget) = args.budget else {
                bail!("--mode kernel needs --budget SIZE");
            };
            let mut options = RunOptions::new(budget);
            options.backend = SwapBackend::parse(&args.kernel_backend)?;
            options.scratch_dir = args.scratch_dir.clone();
            let label = format!(
                "kernel {} budget {}",
                options.backend.name(),
                zpage_units::format_bytes(budget)
            );
            (ServerSource::StartInKernelMode(command, options), label)
        }
    };
    let keys_estimate = (args.size / args.value_size.max(1) as u64).max(1);
    let options = RedisBenchOptions {
        server,
        redis_server: args.redis_server.clone(),
        data_bytes: args.size,
        mean_value_bytes: args.value_size,
        text_roots: args.text_from.clone(),
        corpus_cap_bytes: args.corpus_size,
        get_requests: args.gets.unwrap_or(keys_estimate.min(200_000)),
        seed: args.seed,
        scratch_dir: args.scratch_dir.clone(),
        label: args.label.clone().unwrap_or(label),
        bgsaves: args.bgsaves,
    };
    let mut observer = BarObserver::new(format!("redis {}", options.label));
    let report = redis_load::run_redis_bench(&options, &mut observer)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if !report.passed() {
        bail!(
            "redis check failed: {} wrong values (e.g. {:?}), {} of {} keys read back, digests: loaded {}, after reads {}, from the RDB {} ({} keys)",
            report.wrong_values,
            report.wrong_examples,
            report.verified_keys,
            report.keys,
            report.digest,
            report.digest_after_reads,
            report.bgsave.loaded_digest,
            report.bgsave.loaded_keys
        );
    }
    Ok(())
}

fn print_report(report: &RedisReport) {
    let mib = |b: u64| zpage_units::format_bytes(b);
    println!("redis: {}", report.server);
    println!(
        "  loaded {} keys, {} of text values ({} text files, {} of text) in {:.1} s",
        report.keys,
        mib(report.value_bytes),
        report.corpus.files,
        mib(report.corpus.bytes),
        report.load_seconds
    );
    println!(
        "  read back {} keys: {} wrong; DEBUG DIGEST {} (after reads {}); BGSAVE {} in {:.1} s, loaded by a second server: {} keys, digest {}",
        report.verified_keys,
        report.wrong_values,
        report.digest,
        if report.digest == report.digest_after_reads { "equal" } else { "DIFFERENT" },
        mib(report.bgsave.rdb_bytes),
        report.bgsave.seconds,
        report.bgsave.loaded_keys,
        if report.digest == report.bgsave.loaded_digest { "equal" } else { "DIFFERENT" },
    );
    for (n, b) in report.later_bgsaves.iter().enumerate() {
        println!(
            "  BGSAVE {} of {} in {:.1} s, loaded by a plain server: {} keys, digest {}",
            n + 2,
            mib(b.rdb_bytes),
            b.seconds,
            b.loaded_keys,
            if report.digest == b.loaded_digest {
                "equal"
            } else {
                "DIFFERENT"
            },
        );
    }
    let mut table = Table::new(&["GETs", "ops/s", "p50 µs", "p99 µs", "max µs", "server peak"]);
    table.row(vec![
        report.get.requests.to_string(),
        format!("{:.0}", report.get.ops_per_sec),
        format!("{:.1}", report.get.p50_us),
        format!("{:.1}", report.get.p99_us),
        format!("{:.0}", report.get.max_us),
        mib(report.server_used_memory_peak_bytes),
    ]);
    print!("{}", table.render());
    if let Some(kernel) = &report.kernel {
        println!(
            "  kernel mode {}: cgroup peak {}, swap peak {}, compressed at peak {} of {} ({} used), {} swap-ins, {} swap-outs ({}), {} major faults, wall {:.1} s",
            kernel.backend,
            mib(kernel.cgroup_peak_bytes),
            mib(kernel.swap_peak_bytes),
            mib(kernel.compressed_at_peak.compressed_bytes),
            mib(kernel.compressed_at_peak.original_bytes),
            mib(kernel.compressed_at_peak.memory_used_bytes),
            kernel.swap_ins,
            kernel.swap_outs,
            kernel.swap_counts_scope,
            kernel.major_faults,
            kernel.wall_seconds
        );
    }
}
