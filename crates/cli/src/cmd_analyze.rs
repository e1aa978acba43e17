//! `zpage analyze`: how well does this memory compress, with which codec and
//! pool, beside the kernel's zram.

use crate::table::{bar, ratio_text, Table, MISSING};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use zpage_analyze::{
    analyze_source, compare_with_zram, save_pages, scan_machine, AnalyzeOptions, ChainSource,
    FileSource, MachineScan, PageSource, ProcessSource, Progress, Report,
};
use zpage_codec::{CodecSpec, RejectThreshold};
use zpage_pool::{format_classes, PoolKind};
use zpage_units::format_bytes;

/// Arguments of `zpage analyze`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "With no image and no --pid, every process you may read is analysed and ranked by the memory compression would save."
)]
pub struct Args {
    /// Memory image files: raw dumps of whole 4 KiB pages (analysed together).
    pub images: Vec<PathBuf>,
    /// A live process to analyse (its resident private anonymous pages); repeatable.
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Codec to measure, repeatable: lz4, lz4:ACCEL, lz4-flex, zstd, zstd:LEVEL, zstd-dict[:LEVEL]
    /// [default: lz4 zstd:-1 zstd:3 zstd-dict:3; the machine view uses lz4]
    #[arg(long = "codec", value_parser = parse_codec)]
    pub codecs: Vec<CodecSpec>,
    /// Pool to pack blobs into, repeatable: zsmalloc, tri-page, zbud [default: all]
    #[arg(long = "pool", value_parser = parse_pool)]
    pub pools: Vec<PoolKind>,
    /// Reject threshold: bytes (3632, zsmalloc's huge class, as zram) or a percentage (70%, as Zircon).
    #[arg(long, default_value = "3632", value_parser = parse_threshold)]
    pub threshold: RejectThreshold,
    /// Also write the pages into a free zram device once per kernel algorithm and show zram's mm_stat (root).
    #[arg(long)]
    pub kernel: bool,
    /// zram device index for --kernel [default: the first free device, or a new one].
    #[arg(long, requires = "kernel")]
    pub zram_device: Option<u32>,
    /// Decompress each page this many times and keep its fastest time (0 skips latency).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Read at most this many pages per process.
    #[arg(long)]
    pub max_pages: Option<u64>,
    /// Read at most SIZE bytes of each image (e.g. 4G); needed for a device or pipe, which has no end.
    #[arg(long, value_parser = zpage_units::parse_size)]
    pub size: Option<u64>,
    /// Save the captured pages of --pid to this new file (raw image, for later analysis or `zpage bench --image`); created readable by you alone (0600), never over an existing file or through a link.
    #[arg(long)]
    pub save_image: Option<PathBuf>,
    /// Show zsmalloc-style per-class tables for each pool.
    #[arg(long)]
    pub classes: bool,
    /// Rows in the machine view.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Print JSON (a stable interface, see docs/analyze-json.md).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print one table as CSV, raw numbers: codecs, pools or kernel (the machine view has one table).
    #[arg(long, value_name = "TABLE", num_args = 0..=1, default_missing_value = "codecs")]
    pub csv: Option<CsvTable>,
}

/// The tables `--csv` can print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CsvTable {
    /// One row per codec.
    Codecs,
    /// One row per codec and pool.
    Pools,
    /// One row per zram algorithm (with --kernel).
    Kernel,
}

fn parse_codec(text: &str) -> Result<CodecSpec, String> {
    text.parse()
        .map_err(|e: zpage_codec::CodecError| e.to_string())
}

fn parse_pool(text: &str) -> Result<PoolKind, String> {
    text.parse()
        .map_err(|e: zpage_pool::PoolError| e.to_string())
}

fn parse_threshold(text: &str) -> Result<RejectThreshold, String> {
    text.parse()
        .map_err(|e: zpage_codec::CodecError| e.to_string())
}

/// A progress bar that follows the analysis' phases (hidden when stderr is not a terminal).
fn progress_bar() -> impl FnMut(Progress) {
    let mut bar: Option<ProgressBar> = None;
    move |event| match event {
        Progress::Phase { name, total } => {
            if let Some(old) = bar.take() {
                old.finish_and_clear();
            }
            let new = ProgressBar::new(total);
            new.set_style(
                ProgressStyle::with_template(
                    "{msg:>24} [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            new.set_message(name);
            bar = Some(new);
        }
        Progress::Advance { done } => {
            if let Some(bar) = &bar {
                bar.set_position(done);
            }
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.images.is_empty() && args.pids.is_empty() {
        if args.kernel || args.save_image.is_some() {
            bail!("--kernel and --save-image need images or --pid: give the memory to analyse");
        }
        return run_machine(&args);
    }
    if args.save_image.is_some() && (args.pids.len() != 1 || !args.images.is_empty()) {
        bail!(
            "--save-image saves the pages of exactly one --pid: give one --pid and no image files"
        );
    }
    let mut sources: Vec<Box<dyn PageSource>> = Vec::new();
    for path in &args.images {
        let source = FileSource::open(path, args.size)?;
        if let zpage_analyze::Source::File { skipped_bytes, .. } = source.source() {
            if skipped_bytes > 0 {
                eprintln!(
                    "zpage: warning: {} is not a whole number of 4096-byte pages: analysing {} pages, skipping the last {skipped_bytes} bytes",
                    path.display(),
                    source.total_pages()
                );
            }
        }
        sources.push(Box::new(source));
    }
    for &pid in &args.pids {
        let mut source = ProcessSource::open(pid, args.max_pages)?;
        if source.total_pages() == 0 {
            bail!("PID {pid} has no resident private anonymous pages to analyse (it holds no data, or all of it is swapped out)");
        }
        if let Some(path) = &args.save_image {
            // Analyse exactly the pages saved.
            let pages = save_pages(&mut source, path)?;
            eprintln!(
                "zpage: saved {pages} pages of PID {pid} to {}",
                path.display()
            );
            sources.push(Box::new(FileSource::open(path, None)?));
            continue;
        }
        sources.push(Box::new(source));
    }
    let mut memory = ChainSource::new(sources);
    let label = memory.label();
    if let (true, Some(label)) = (args.kernel, memory.read_once()) {
        // zram gets the pages after the analysis has read them.
        return Err(zpage_analyze::AnalyzeError::ReadOnce { label }.into());
    }

    let options = AnalyzeOptions {
        codecs: if args.codecs.is_empty() {
            AnalyzeOptions::default_codecs()
        } else {
            args.codecs.clone()
        },
        pools: if args.pools.is_empty() {
            PoolKind::all().to_vec()
        } else {
            args.pools.clone()
        },
        threshold: args.threshold,
        decompress_rounds: args.rounds,
        with_classes: args.classes,
        ..AnalyzeOptions::default()
    };
    let mut progress = progress_bar();
    let analysis = analyze_source(&mut memory, &options, &mut progress)?;
    let mut report = Report::new(memory.sources(), analysis);
    if args.kernel {
        // Other zpage commands wait while this one uses a zram device.
        let lock = zpage_kernel::KernelStateLock::try_acquire()?;
        let (device, kernel) =
            compare_with_zram(&mut memory, &[], args.zram_device, &lock, &mut progress)?;
        report = report.with_kernel(device, kernel);
    }
    progress(Progress::Phase {
        name: String::new(),
        total: 0,
    });

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if let Some(which) = args.csv {
        let name = match which {
            CsvTable::Codecs => "codecs",
            CsvTable::Pools => "pools",
            CsvTable::Kernel => "kernel",
        };
        let table = tables(&report, false)
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| t)
            .context("--csv kernel needs --kernel")?;
        print!("{}", table.csv());
    } else {
        print_human(&label, &report, args.classes);
    }
    Ok(())
}

/// A ratio for a table: the number, or `-` when there is none.
fn ratio_cell(ratio: Option<f64>) -> String {
    ratio.map_or_else(|| MISSING.to_string(), |r| format!("{r:.2}"))
}

/// A value for CSV or a human table: raw, or a human size.
fn bytes_cell(bytes: u64, human: bool) -> String {
    if human {
        format_bytes(bytes)
    } else {
        bytes.to_string()
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// The report's tables: raw numbers (CSV) or sizes for people (`human`).
fn tables(report: &Report, human: bool) -> Vec<(&'static str, Table)> {
    let analysis = &report.analysis;
    let size_header =
        |raw: &'static str, readable: &'static str| if human { readable } else { raw };
    let optional_ns = |v: Option<u64>| v.map_or_else(|| MISSING.to_string(), |v| v.to_string());
    let mut codecs = Table::new(&[
        "codec",
        "level",
        "compress_MiB/s",
        "pass_MiB/s",
        "decompress_MiB/s",
        "dec_p50_ns",
        "dec_p99_ns",
        "dec_max_ns",
        size_header("compressed_bytes", "compressed"),
        "incompressible_pages",
        "ratio",
    ]);
    for c in &analysis.codecs {
        codecs.row(vec![
            c.name.clone(),
            c.level.to_string(),
            c.compress_mib_s
                .map_or_else(|| MISSING.to_string(), |v| format!("{v:.0}")),
            format!("{:.0}", c.pass_mib_s),
            c.decompress_mib_s
                .map_or_else(|| MISSING.to_string(), |v| format!("{v:.0}")),
            optional_ns(c.decompress_p50_ns),
            optional_ns(c.decompress_p99_ns),
            optional_ns(c.decompress_max_ns),
            bytes_cell(c.compressed_bytes, human),
            c.incompressible_pages.to_string(),
            match c.ratio {
                None if human && c.same_filled_pages > 0 => "same-filled only".to_string(),
                r => ratio_cell(r),
            },
        ]);
    }
    let mut pools = Table::new(&[
        "pool",
        "codec",
        size_header("memory_used_bytes", "memory used"),
        "ratio",
        "fragmentation",
    ]);
    for p in &analysis.pools {
        pools.row(vec![
            p.name.clone(),
            p.codec.clone(),
            bytes_cell(p.memory_used_bytes, human),
            ratio_cell(p.ratio),
            p.fragmentation.map_or_else(
                || MISSING.to_string(),
                |f| {
                    if human {
                        format!("{:.1}%", f * 100.0)
                    } else {
                        format!("{f:.4}")
                    }
                },
            ),
        ]);
    }
    let mut out = vec![("codecs", codecs), ("pools", pools)];
    if let Some(kernel) = &report.kernel {
        let mut table = Table::new(&[
            "zram_algorithm",
            "orig_data_size",
            "compr_data_size",
            "mem_used_total",
            "same_pages",
            "huge_pages",
            "ratio",
            "effective_ratio",
        ]);
        for k in kernel {
            table.row(vec![
                k.algorithm.clone(),
                bytes_cell(k.mm_stat.orig_data_size, human),
                bytes_cell(k.mm_stat.compr_data_size, human),
                bytes_cell(k.mm_stat.mem_used_total, human),
                k.mm_stat.same_pages.to_string(),
                k.mm_stat.huge_pages.to_string(),
                ratio_cell(k.ratio),
                ratio_cell(k.effective_ratio),
            ]);
        }
        out.push(("kernel", table));
    }
    out
}

fn print_human(label: &str, report: &Report, classes: bool) {
    let a = &report.analysis;
    println!("{label}: {} pages ({})", a.pages, format_bytes(a.bytes));
    println!(
        "same-filled pages: {} ({}), of which zero pages: {}; reject threshold: {} bytes\n",
        a.same_filled_pages,
        pct(a.same_filled_pages, a.pages),
        a.zero_pages,
        a.threshold_bytes
    );
    for (name, table) in tables(report, true) {
        let title = match name {
            "codecs" => "Codecs (speeds on one core; latency per page, fastest of the rounds)",
            "pools" => "Pools (ratio = image bytes / pool memory)",
            _ => "Kernel zram, same pages (from mm_stat)",
        };
        println!("{title}\n{}", table.render());
        if name == "codecs" {
            for skipped in &a.skipped_codecs {
                println!("{}: not measured: {}\n", skipped.codec, skipped.reason);
            }
        }
    }
    if classes {
        for pool in &a.pools {
            if let Some(classes) = &pool.classes {
                println!(
                    "{} / {} classes\n{}",
                    pool.name,
                    pool.codec,
                    format_classes(classes)
                );
            }
        }
    }
    if let Some(c) = &report.comparison {
        println!(
            "same-filled pages: zpage {} vs zram {} ({})",
            c.same_filled_pages,
            c.zram_same_pages,
            if c.same_pages_match {
                "match"
            } else {
                "DIFFER"
            }
        );
        if let (Some(ours), Some(theirs), Some(rel)) = (
            c.zpage_memory_used_bytes,
            c.zram_mem_used_total,
            c.memory_used_vs_zram,
        ) {
            println!(
                "memory used with lz4: zpage zsmalloc {} vs zram {} ({:+.1}%)",
                format_bytes(ours),
                format_bytes(theirs),
                (rel - 1.0) * 100.0
            );
        }
    }
}

fn run_machine(args: &Args) -> Result<()> {
    let codec = args.codecs.first().cloned().unwrap_or_else(CodecSpec::lz4);
    let pool = args.pools.first().copied().unwrap_or(PoolKind::SizeClass);
    let mut progress = progress_bar();
    let scan = scan_machine(&codec, pool, args.threshold, args.max_pages, &mut progress)?;
    progress(Progress::Phase {
        name: String::new(),
        total: 0,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&scan)?);
        return Ok(());
    }
    if args.csv.is_some() {
        print!("{}", machine_table(&scan, args.top, false).csv());
        return Ok(());
    }
    let table = machine_table(&scan, args.top, true);
    println!(
        "Every readable process: resident private anonymous memory, compressed with {} into {}\n",
        scan.codec, scan.pool
    );
    print!("{}", table.render());
    println!(
        "\ntotal: {} anonymous -> {} saved ({} of it) across {} processes",
        format_bytes(scan.total_anonymous_bytes),
        format_bytes(scan.total_saved_bytes),
        pct(scan.total_saved_bytes, scan.total_anonymous_bytes),
        scan.processes.len()
    );
    if scan.skipped_processes > 0 {
        println!(
            "skipped {} {} you may not read (first reason: {})",
            scan.skipped_processes,
            if scan.skipped_processes == 1 {
                "process"
            } else {
                "processes"
            },
            scan.skipped_reason.as_deref().unwrap_or("unknown")
        );
    }
    Ok(())
}

fn machine_table(scan: &MachineScan, top: usize, with_bars: bool) -> Table {
    let mut header = vec![
        "command",
        "pid",
        "anonymous",
        "same_filled",
        "compressed",
        "ratio",
        "saved",
    ];
    if with_bars {
        header.push("");
    }
    let mut table = Table::new(&header);
    let most = scan.processes.first().map_or(0, |p| p.saved_bytes) as f64;
    for p in scan.processes.iter().take(top) {
        let mut row = vec![
            p.command.clone(),
            p.pid.to_string(),
            bytes_cell(p.anonymous_bytes, with_bars),
            p.same_filled_pages.to_string(),
            bytes_cell(p.compressed_memory_bytes, with_bars),
            ratio_text(p.anonymous_bytes, p.compressed_memory_bytes),
            bytes_cell(p.saved_bytes, with_bars),
        ];
        if with_bars {
            row.push(bar(p.saved_bytes as f64, most, 30));
        }
        table.row(row);
    }
    table
}
