//! `zpage kernel` and `zpage exporter`: the CLI edge over `zpage_kernel`.

use std::time::Duration;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use zpage_kernel::apply::{self, ApplyOptions, PlanOptions, SavedState};
use zpage_kernel::config::KernelConfig;
use zpage_kernel::daemon::{Daemon, DaemonConfig};
use zpage_kernel::export::{export, ExportFormat};
use zpage_kernel::exporter::{self, Exporter, Scraper};
use zpage_kernel::status;

/// Arguments of `zpage kernel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: KernelCommand,
}

#[derive(Debug, clap::Subcommand)]
enum KernelCommand {
    /// zram devices, zswap, swap areas, sysctls and memory pressure, with units.
    Status(StatusArgs),
    /// One row per zram device, as zramctl lists them (its columns and listing options; configuring is `apply`'s).
    #[command(visible_alias = "zramctl")]
    Devices(DevicesArgs),
    /// Configure zram, zswap, disk swap and sysctls from a TOML file (rolls back on failure).
    Apply(ApplyArgs),
    /// Restore the state saved before the first `apply`.
    Revert(RevertArgs),
    /// Print the boot-time configuration that reproduces a config file.
    Export(ExportArgs),
    /// Read a zram-generator.conf or a NixOS zramSwap setting into a config file (TOML on stdout).
    Import(ImportArgs),
    /// Idle writeback/recompression where the kernel allows it; logs pressure and tier fill levels.
    Daemon(DaemonArgs),
    /// Sample this system's memory and propose algorithm, zram size, swappiness and page-cluster.
    Recommend(RecommendArgs),
}

#[derive(Debug, clap::Args)]
struct RecommendArgs {
    /// Read at most --max-pages-per-process pages of each process instead of all of its memory.
    #[arg(long)]
    quick: bool,
    /// With --quick: pages per process at most (4 KiB each).
    #[arg(long, default_value_t = 4_096)]
    max_pages_per_process: u64,
    /// Measure zram against file reads for swappiness: creates a temporary zram
    /// device and file (removed afterwards); needs root. Without it nothing on
    /// the machine changes and swappiness is estimated.
    #[arg(long)]
    measure: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = CONFIG_HELP)]
struct ApplyArgs {
    /// TOML configuration file.
    config: PathBuf,
    /// Print the plan and change nothing (nothing is measured either).
    #[arg(long)]
    dry_run: bool,
    /// Allow steps that move swapped-out data back into RAM (swapoff of a
    /// swap area in use) or discard a zram device's data.
    #[arg(long)]
    force: bool,
    /// Print the plan/result as JSON.
    #[arg(long)]
    json: bool,
    /// State file kept for `revert` (default: $ZPAGE_KERNEL_STATE or /var/lib/zpage/kernel-state.json).
    #[arg(long)]
    state: Option<PathBuf>,
}

const CONFIG_HELP: &str = "Config keys:
  [[zram]]   index, algorithm, algorithm_params, size (bytes | \"4G\" | \"25%\" | 0.25), mem_limit, swap_priority (default 100),
             writeback_device, writeback (idle | huge | huge_idle | incompressible), recompress_algorithms ([\"zstd\"]), recompress (idle | huge | huge_idle)
  [zswap]    enabled, compressor, max_pool_percent, accept_threshold_percent, shrinker
  [[swap]]   path, size (creates the file), priority (default 10), encrypted, required (default false = nofail), discard
  [sysctl]   swappiness (0..200 or \"auto\"), page_cluster, watermark_scale_factor, extfrag_threshold
  [daemon]   interval_seconds (60), idle_after_seconds (3600), writeback_budget (\"256M\"), recompress_budget (\"256M\")";

#[derive(Debug, clap::Args)]
struct RevertArgs {
    /// State file written by `apply`.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ExportArgs {
    /// TOML configuration file (the one given to `apply`).
    config: PathBuf,
    /// zram-generator, sysctl, nixos, systemd or zram-tools.
    #[arg(long, value_parser = zpage_kernel::export::FORMAT_NAMES)]
    format: String,
    /// Value for swappiness = "auto" (default: the one measured by the last apply).
    #[arg(long)]
    swappiness: Option<u8>,
    /// State file written by `apply` (for the measured swappiness).
    #[arg(long)]
    state: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "zram-generator: /etc/systemd/zram-generator.conf (or a file of zram-generator.conf.d). NixOS: a module file (evaluated by nix-instantiate with empty config/lib/pkgs, taking zramSwap or services.zram-generator.settings), or FILE.json holding `nix eval --json .#nixosConfigurations.HOST.config.zramSwap`. Exporting the result in the same format gives the same settings; what a zpage config cannot say (a size capped with min(), a mount point, a host memory limit) is refused, naming the key."
)]
struct ImportArgs {
    /// The file to read.
    file: PathBuf,
    /// Its format: zram-generator or nixos.
    #[arg(long, value_parser = zpage_kernel::import::IMPORT_FORMAT_NAMES)]
    from: String,
}

#[derive(Debug, clap::Args)]
struct DaemonArgs {
    /// The config given to `apply`: its [daemon] schedule, and per [[zram]] writeback
    /// (with writeback_device) and recompression (with recompress_algorithms).
    /// Without it: idle writeback and recompression on every device that has them.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seconds between ticks.
    #[arg(long, default_value_t = 10.0)]
    interval: f64,
    /// Seconds after which an untouched page counts as idle.
    #[arg(long, default_value_t = 3600.0)]
    idle_age: f64,
    /// Pages written back per round at most (without --config).
    #[arg(long, default_value_t = 65_536)]
    writeback_budget: u64,
    /// Pages recompressed per round at most (without --config).
    #[arg(long, default_value_t = 65_536)]
    recompress_budget: u64,
    /// Log pressure when tasks stalled on memory longer than this many milliseconds in a tick.
    #[arg(long, default_value_t = 100)]
    pressure_threshold_ms: u64,
    /// Stop after this many ticks (default: run until killed).
    #[arg(long)]
    ticks: Option<u64>,
    /// One JSON object per event.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
#[command(after_help = DEVICE_COLUMNS_HELP)]
struct DevicesArgs {
    /// Columns to print, comma-separated (see below) [default: NAME,ALGORITHM,DISKSIZE,DATA,COMPR,TOTAL,STREAMS,MOUNTPOINT].
    #[arg(
        short = 'o',
        long,
        value_delimiter = ',',
        conflicts_with = "output_all"
    )]
    output: Vec<String>,
    /// Print every column.
    #[arg(long)]
    output_all: bool,
    /// Sizes in bytes instead of 1.5M-style units.
    #[arg(short = 'b', long)]
    bytes: bool,
    /// No heading line.
    #[arg(short = 'n', long)]
    noheadings: bool,
    /// Columns separated by one space, unaligned.
    #[arg(short = 'r', long)]
    raw: bool,
    /// Also list devices that are not initialised (zramctl lists only used ones).
    #[arg(long)]
    all: bool,
    /// Print JSON: {"zramdevices": [...]}, sizes in bytes, null where there is no value.
    #[arg(short = 'J', long)]
    json: bool,
    /// Only this device (/dev/zram0 or zram0), as `zramctl DEVICE` shows it.
    device: Option<String>,
    /// zramctl's options that configure a device (-a/--algorithm, -s/--size,
    /// -t/--streams, -p/--algorithm-params, -f/--find, -R/--reset) are
    /// recognised only to say that this view does not configure.
    #[command(flatten)]
    configure: ZramctlConfigureArgs,
}

/// zramctl's configuring options, taken with zramctl's meaning and refused:
/// `zpage kernel devices` only lists (so `-a` never silently means
/// something else than zramctl's `--algorithm`).
#[derive(Debug, clap::Args)]
struct ZramctlConfigureArgs {
    #[arg(short = 'a', long = "algorithm", hide = true, value_name = "ALGORITHM")]
    algorithm: Option<String>,
    #[arg(short = 's', long = "size", hide = true, value_name = "SIZE")]
    size: Option<String>,
    #[arg(short = 't', long = "streams", hide = true, value_name = "NUMBER")]
    streams: Option<String>,
    #[arg(
        short = 'p',
        long = "algorithm-params",
        hide = true,
        value_name = "PARAMS"
    )]
    algorithm_params: Option<String>,
    #[arg(short = 'f', long = "find", hide = true)]
    find: bool,
    #[arg(short = 'R', long = "reset", hide = true)]
    reset: bool,
}

impl ZramctlConfigureArgs {
    /// The zramctl option given, as typed, if any.
    fn given(&self) -> Option<&'static str> {
        [
            (self.algorithm.is_some(), "-a/--algorithm"),
            (self.size.is_some(), "-s/--size"),
            (self.streams.is_some(), "-t/--streams"),
            (self.algorithm_params.is_some(), "-p/--algorithm-params"),
            (self.find, "-f/--find"),
            (self.reset, "-R/--reset"),
        ]
        .into_iter()
        .find_map(|(set, name)| set.then_some(name))
    }
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    /// Print JSON (the raw kernel figures, bytes and pages).
    #[arg(long)]
    json: bool,
    /// Redraw every INTERVAL seconds until interrupted.
    #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "2")]
    watch: Option<f64>,
    /// With --watch: stop after this many refreshes.
    #[arg(long, requires = "watch")]
    count: Option<u64>,
}

const DEVICE_COLUMNS_HELP: &str = "Columns (zramctl's, then zpage's):
  NAME        device path              DISKSIZE    capacity for uncompressed data
  DATA        uncompressed data stored COMPR       compressed size of that data
  ALGORITHM   compression algorithm    STREAMS     compression streams (one per CPU)
  ZERO-PAGES  same-filled pages        TOTAL       RAM used now, overhead included
  MEM-LIMIT   RAM limit (0: none)      MEM-USED    PEAK RAM used since reset (mm_stat mem_used_max)
  MIGRATED    pages freed by compaction COMP-RATIO DATA / COMPR (\"same-filled only\" when COMPR is 0)
  MOUNTPOINT  mount point, or [SWAP]   BACKING-DEV writeback device
  WB-DATA     data written back now    RECOMP      recompression algorithms";

/// One column of `zpage kernel devices`: its zramctl name and how to get it.
struct DeviceColumn {
    name: &'static str,
    /// Bytes (shown compact unless --bytes), a count, or text.
    value: fn(&status::ZramStatus) -> DeviceValue,
}

enum DeviceValue {
    Bytes(Option<u64>),
    Count(Option<u64>),
    Text(Option<String>),
}

fn streams() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

const DEVICE_COLUMNS: &[DeviceColumn] = &[
    DeviceColumn {
        name: "NAME",
        value: |z| DeviceValue::Text(Some(format!("/dev/{}", z.name))),
    },
    DeviceColumn {
        name: "DISKSIZE",
        value: |z| DeviceValue::Bytes(Some(z.disksize_bytes)),
    },
    DeviceColumn {
        name: "DATA",
        value: |z| DeviceValue::Bytes(z.mm_stat.map(|m| m.orig_data_size)),
    },
    DeviceColumn {
        name: "COMPR",
        value: |z| DeviceValue::Bytes(z.mm_stat.map(|m| m.compr_data_size)),
    },
    DeviceColumn {
        name: "ALGORITHM",
        value: |z| DeviceValue::Text(z.algorithm.clone()),
    },
    DeviceColumn {
        name: "STREAMS",
        value: |_| DeviceValue::Count(Some(streams())),
    },
    DeviceColumn {
        name: "ZERO-PAGES",
        value: |z| DeviceValue::Count(z.mm_stat.map(|m| m.same_pages)),
    },
    DeviceColumn {
        name: "TOTAL",
        value: |z| DeviceValue::Bytes(z.mm_stat.map(|m| m.mem_used_total)),
    },
    DeviceColumn {
        name: "MEM-LIMIT",
        value: |z| DeviceValue::Bytes(z.mm_stat.map(|m| m.mem_limit)),
    },
    DeviceColumn {
        name: "MEM-USED",
        value: |z| DeviceValue::Bytes(z.mm_stat.map(|m| m.mem_used_max)),
    },
    DeviceColumn {
        name: "MIGRATED",
        value: |z| DeviceValue::Count(z.mm_stat.map(|m| m.pages_compacted)),
    },
    DeviceColumn {
        name: "COMP-RATIO",
        value: |z| {
            DeviceValue::Text(z.mm_stat.and_then(|m| {
                let text = crate::table::ratio_text(m.orig_data_size, m.compr_data_size);
                (text != crate::table::MISSING).then_some(text)
            }))
        },
    },
    DeviceColumn {
        name: "MOUNTPOINT",
        value: |z| {
            DeviceValue::Text(
                z.mountpoint
                    .clone()
                    .or_else(|| z.swap_priority.map(|_| "[SWAP]".to_string())),
            )
        },
    },
    DeviceColumn {
        name: "BACKING-DEV",
        value: |z| DeviceValue::Text(z.backing_dev.clone()),
    },
    DeviceColumn {
        name: "WB-DATA",
        value: |z| {
            DeviceValue::Bytes(
                z.bd_stat
                    .map(|b| b.bd_count * zpage_kernel::zram::ZRAM_BD_UNIT_BYTES),
            )
        },
    },
    DeviceColumn {
        name: "RECOMP",
        value: |z| {
            DeviceValue::Text(
                (!z.recompression_algorithms.is_empty())
                    .then(|| z.recompression_algorithms.join(",")),
            )
        },
    },
];

const DEFAULT_DEVICE_COLUMNS: [&str; 8] = [
    "NAME",
    "ALGORITHM",
    "DISKSIZE",
    "DATA",
    "COMPR",
    "TOTAL",
    "STREAMS",
    "MOUNTPOINT",
];

fn run_devices(args: DevicesArgs) -> anyhow::Result<()> {
    use crate::table::{compact_bytes, Style, Table, MISSING};
    if let Some(option) = args.configure.given() {
        anyhow::bail!(
            "{option} configures a device in zramctl; `zpage kernel devices` only lists them: configure zram with `zpage kernel apply CONFIG.toml` (undone by `zpage kernel revert`), or with zramctl itself"
        );
    }
    let wanted = args
        .device
        .as_deref()
        .map(|d| d.trim_start_matches("/dev/").to_string());
    let names: Vec<String> = if args.output_all {
        DEVICE_COLUMNS.iter().map(|c| c.name.to_string()).collect()
    } else if args.output.is_empty() {
        DEFAULT_DEVICE_COLUMNS
            .iter()
            .map(|c| c.to_string())
            .collect()
    } else {
        args.output
            .iter()
            .map(|c| c.trim().to_ascii_uppercase())
            .collect()
    };
    let columns: Vec<&DeviceColumn> = names
        .iter()
        .map(|name| {
            DEVICE_COLUMNS
                .iter()
                .find(|c| c.name == name)
                .with_context(|| {
                    format!(
                        "unknown column {name:?} in --output: use {}",
                        DEVICE_COLUMNS
                            .iter()
                            .map(|c| c.name)
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                })
        })
        .collect::<anyhow::Result<_>>()?;
    let snapshot = status::collect();
    if let Some(note) = &snapshot.zram_note {
        anyhow::ensure!(!snapshot.zram.is_empty() || args.json, "{note}");
    }
    let devices: Vec<&status::ZramStatus> = snapshot
        .zram
        .iter()
        .filter(|z| match &wanted {
            Some(name) => &z.name == name,
            None => args.all || z.initialised,
        })
        .collect();
    if let Some(name) = &wanted {
        anyhow::ensure!(
            !devices.is_empty(),
            "/dev/{name}: no such zram device (`zpage kernel devices --all` lists them)"
        );
    }
    if args.json {
        let rows: Vec<serde_json::Value> = devices
            .iter()
            .map(|z| {
                let fields = columns.iter().map(|c| {
                    let value = match (c.value)(z) {
                        DeviceValue::Bytes(v) | DeviceValue::Count(v) => serde_json::json!(v),
                        DeviceValue::Text(t) => serde_json::json!(t),
                    };
                    (c.name.to_ascii_lowercase(), value)
                });
                serde_json::Value::Object(fields.collect())
            })
            .collect();
        return write_stdout(
            &(serde_json::to_string_pretty(&serde_json::json!({ "zramdevices": rows }))? + "\n"),
        );
    }
    let header: Vec<&str> = columns.iter().map(|c| c.name).collect();
    let mut table = Table::new(&header);
    for z in devices {
        table.row(
            columns
                .iter()
                .map(|c| match (c.value)(z) {
                    DeviceValue::Bytes(Some(b)) if args.bytes => b.to_string(),
                    DeviceValue::Bytes(Some(b)) => compact_bytes(b),
                    DeviceValue::Count(Some(n)) => n.to_string(),
                    DeviceValue::Text(Some(t)) => t,
                    _ => MISSING.to_string(),
                })
                .collect(),
        );
    }
    let style = Style {
        no_headings: args.noheadings,
        raw: args.raw,
    };
    write_stdout(&table.render_with(style))
}

/// Runs `zpage kernel ...`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        KernelCommand::Status(a) => run_status(a),
        KernelCommand::Devices(a) => run_devices(a),
        KernelCommand::Apply(a) => run_apply(a),
        KernelCommand::Revert(a) => run_revert(a),
        KernelCommand::Export(a) => run_export(a),
        KernelCommand::Import(a) => run_import(a),
        KernelCommand::Daemon(a) => run_daemon(a),
        KernelCommand::Recommend(a) => run_recommend(a),
    }
}

fn run_recommend(args: RecommendArgs) -> anyhow::Result<()> {
    use zpage_kernel::recommend;
    let algorithms = recommend::kernel_algorithms()?;
    anyhow::ensure!(
        args.max_pages_per_process > 0,
        "--max-pages-per-process must be positive"
    );
    let max_pages_per_process = args.quick.then_some(args.max_pages_per_process);
    let observation = observe_with_analyze(&algorithms, max_pages_per_process, !args.json)?;
    let recommendation = recommend::recommend(observation, args.measure)?;
    let text = if args.json {
        serde_json::to_string_pretty(&recommendation)? + "\n"
    } else {
        recommendation.render_text()
    };
    write_stdout(&text)
}

/// `zpage analyze`'s whole-machine scan (zsmalloc pool), once per codec the kernel offers.
fn observe_with_analyze(
    kernel_algorithms: &[String],
    max_pages_per_process: Option<u64>,
    show_progress: bool,
) -> anyhow::Result<zpage_kernel::recommend::Observation> {
    let mut codecs = Vec::new();
    let mut first_scan = None;
    let mut names = vec!["lz4"];
    if kernel_algorithms.iter().any(|a| a == "zstd") {
        names.push("zstd");
    }
    for name in names {
        let spec: zpage_codec::CodecSpec = name.parse()?;
        let bar = if show_progress {
            indicatif::ProgressBar::new(0)
        } else {
            indicatif::ProgressBar::hidden()
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} processes")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("zpage analyze ({name})"));
        let scan = zpage_analyze::scan_machine(
            &spec,
            zpage_pool::PoolKind::SizeClass,
            zpage_codec::RejectThreshold::default(),
            max_pages_per_process,
            &mut |progress| match progress {
                zpage_analyze::Progress::Phase { total, .. } => bar.set_length(total),
                zpage_analyze::Progress::Advance { done } => bar.set_position(done),
            },
        )?;
        bar.finish_and_clear();
        let same_filled_pages = scan.processes.iter().map(|p| p.same_filled_pages).sum();
        let memory: u64 = scan
            .processes
            .iter()
            .map(|p| p.compressed_memory_bytes)
            .sum();
        codecs.push(zpage_kernel::recommend::CodecResult {
            codec: name.to_string(),
            kernel_algorithm: name.to_string(),
            same_filled_pages,
            incompressible_pages: None,
            estimated_memory_bytes: memory,
            ratio: if memory == 0 {
                1.0
            } else {
                scan.total_anonymous_bytes as f64 / memory as f64
            },
            compress_mib_per_s: None,
        });
        first_scan.get_or_insert(scan);
    }
    let scan = first_scan.context("no scan ran")?;
    anyhow::ensure!(
        scan.total_anonymous_bytes > 0,
        "no process memory could be read ({} processes skipped: {}); run as root",
        scan.skipped_processes,
        scan.skipped_reason.as_deref().unwrap_or("?")
    );
    Ok(zpage_kernel::recommend::Observation {
        source: format!(
            "zpage analyze scan of every readable process ({} pool)",
            scan.pool
        ),
        observed_bytes: scan.total_anonymous_bytes,
        processes: scan.processes.len() as u64,
        skipped_processes: scan.skipped_processes,
        codecs,
    })
}

fn load_config(path: &std::path::Path) -> anyhow::Result<KernelConfig> {
    KernelConfig::load(path).with_context(|| format!("config {}", path.display()))
}

fn run_apply(args: ApplyArgs) -> anyhow::Result<()> {
    let config = load_config(&args.config)?;
    let options = ApplyOptions {
        plan: PlanOptions {
            swappiness_override: None,
            state_file: args.state,
            force: args.force,
        },
        fail_before_step: None,
    };
    if args.dry_run {
        let plan = apply::plan(&config, &options.plan)?;
        let text = if args.json {
            serde_json::to_string_pretty(&plan)? + "\n"
        } else {
            format!("dry run, nothing changed; the plan:\n{plan}")
        };
        return write_stdout(&text);
    }
    let report = apply::apply(&config, &options)?;
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else if report.plan.steps.is_empty() {
        format!("{}", report.plan)
    } else {
        format!(
            "applied:\n{}state saved for `zpage kernel revert` in {}\n",
            report.plan,
            report.state_file.display()
        )
    };
    write_stdout(&text)
}

fn run_revert(args: RevertArgs) -> anyhow::Result<()> {
    let state = args.state.unwrap_or_else(apply::state_file_path);
    let report = apply::revert(&state)?;
    let mut text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        report
            .done
            .iter()
            .map(|d| format!("done: {d}\n"))
            .collect::<String>()
            + &report
                .failed
                .iter()
                .map(|f| format!("FAILED: {f}\n"))
                .collect::<String>()
    };
    if !args.json && report.done.is_empty() && report.failed.is_empty() {
        text = "nothing to revert\n".into();
    }
    write_stdout(&text)?;
    anyhow::ensure!(
        report.failed.is_empty(),
        "{} revert step(s) failed; the state file was kept so you can retry",
        report.failed.len()
    );
    Ok(())
}

fn run_export(args: ExportArgs) -> anyhow::Result<()> {
    let config = load_config(&args.config)?;
    let format: ExportFormat = args.format.parse()?;
    let state = args.state.unwrap_or_else(apply::state_file_path);
    let measured = SavedState::load(&state)
        .ok()
        .flatten()
        .and_then(|s| s.auto_swappiness);
    write_stdout(&export(&config, format, args.swappiness.or(measured))?)
}

fn run_import(args: ImportArgs) -> anyhow::Result<()> {
    use zpage_kernel::import;
    let format: import::ImportFormat = args.from.parse()?;
    let config = import::import_file(&args.file, format)
        .with_context(|| format!("importing {} ({})", args.file.display(), args.from))?;
    let text = format!(
        "# Imported from {} ({}) by `zpage kernel import`.\n{}",
        args.file.display(),
        args.from,
        import::to_toml(&config)?
    );
    write_stdout(&text)
}

fn run_daemon(args: DaemonArgs) -> anyhow::Result<()> {
    let seconds = |v: f64, flag: &str| -> anyhow::Result<Duration> {
        anyhow::ensure!(
            v.is_finite() && v >= 0.01,
            "--{flag} must be a positive number of seconds"
        );
        Ok(Duration::from_secs_f64(v))
    };
    let mut daemon = match &args.config {
        Some(path) => {
            let (mut config, policies) = DaemonConfig::from_config(&load_config(path)?)?;
            config.pressure_threshold_us = args.pressure_threshold_ms.saturating_mul(1000);
            Daemon::with_policies(config, policies, std::path::Path::new("/sys/block"))
        }
        None => Daemon::new(DaemonConfig {
            interval: seconds(args.interval, "interval")?,
            idle_age: seconds(args.idle_age, "idle-age")?,
            writeback_budget_pages: args.writeback_budget,
            recompress_budget_pages: args.recompress_budget,
            pressure_threshold_us: args.pressure_threshold_ms.saturating_mul(1000),
        }),
    };
    let json = args.json;
    let mut failure = None;
    daemon.run(args.ticks, |event| {
        let line = if json {
            serde_json::to_string(event).unwrap_or_default()
        } else {
            event.to_string()
        };
        if let Err(e) = write_stdout(&format!("{line}\n")) {
            failure.get_or_insert(e);
        }
    })?;
    failure.map_or(Ok(()), Err)
}

fn run_status(args: StatusArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal as _;
    let Some(interval) = args.watch else {
        return print_status(&status::collect(), None, args.json, false);
    };
    anyhow::ensure!(
        interval.is_finite() && interval >= 0.1,
        "--watch interval must be at least 0.1 seconds"
    );
    let terminal = std::io::stdout().is_terminal();
    let mut refreshes = 0u64;
    let mut previous: Option<(status::KernelStatus, std::time::Instant)> = None;
    loop {
        let now = status::collect();
        let taken = std::time::Instant::now();
        let rates = previous
            .as_ref()
            .map(|(before, at)| status::Rates::between(before, &now, taken.duration_since(*at)));
        if !args.json {
            if terminal {
                // Clear the screen and move home, so the view updates in place.
                write_stdout("\x1b[2J\x1b[H")?;
            } else if refreshes > 0 {
                write_stdout("\n")?;
            }
        }
        print_status(&now, rates.as_ref(), args.json, true)?;
        previous = Some((now, taken));
        refreshes += 1;
        if args.count.is_some_and(|c| refreshes >= c) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}

fn print_status(
    snapshot: &status::KernelStatus,
    rates: Option<&status::Rates>,
    json: bool,
    watching: bool,
) -> anyhow::Result<()> {
    let text = if json && watching {
        // One object per refresh, one per line (JSON Lines); no rates on the first.
        serde_json::to_string(&serde_json::json!({ "status": snapshot, "rates": rates }))? + "\n"
    } else if json {
        serde_json::to_string_pretty(snapshot).context("encode status as JSON")? + "\n"
    } else {
        let mut text = String::new();
        if let Some(rates) = rates {
            text.push_str(&rates.render_text());
        }
        text.push_str(&snapshot.render_text());
        text
    };
    write_stdout(&text)
}

/// Writes to stdout; a closed pipe (`| head`) ends quietly instead of panicking.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("write to stdout"),
    }
}

/// Arguments of `zpage exporter`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Programs using zpage regions publish DIR/zpage-<pid>.prom files (under `zpage run` by default; elsewhere when ZPAGE_METRICS_DIR is set); each scrape merges them (see docs/process-metrics.md). node_exporter's meminfo and pressure collectors cover SwapTotal, SwapFree, Zswap, Zswapped and PSI; zpage does not repeat them."
)]
pub struct ExporterArgs {
    /// Address to listen on (loopback by default: metrics reveal memory use).
    #[arg(long, default_value = exporter::DEFAULT_LISTEN)]
    listen: String,
    /// Stop after answering this many requests (default: serve until killed).
    #[arg(long)]
    max_requests: Option<u64>,
    /// Print one scrape to stdout and exit (no server).
    #[arg(long)]
    once: bool,
    /// Directory of the per-process metrics files [default: $ZPAGE_METRICS_DIR, /run/zpage for root, else $XDG_RUNTIME_DIR/zpage or /tmp/zpage-UID].
    #[arg(long, value_name = "DIR")]
    process_metrics_dir: Option<PathBuf>,
    /// Do not read per-process metrics files.
    #[arg(long, conflicts_with = "process_metrics_dir")]
    no_process_metrics: bool,
}

/// Runs `zpage exporter`.
pub fn run_exporter(args: ExporterArgs) -> anyhow::Result<()> {
    let dir = (!args.no_process_metrics).then(|| {
        args.process_metrics_dir
            .clone()
            .unwrap_or_else(exporter::process_metrics::default_dir)
    });
    let scraper = Scraper::new(dir.clone());
    if args.once {
        return write_stdout(&scraper.scrape());
    }
    let server = Exporter::bind(&args.listen, scraper)?;
    eprintln!(
        "zpage exporter: serving http://{}/metrics{}",
        server.local_addr()?,
        dir.map(|d| format!(", with the per-process files in {}", d.display()))
            .unwrap_or_default()
    );
    let stop = AtomicBool::new(false);
    server.serve(args.max_requests, &stop)?;
    Ok(())
}
