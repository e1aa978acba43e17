//! `zpage analyze`: how well does this memory compress, with which codec and
//! pool, beside the kernel's zram.

use crate::table::{bar, ratio_text, Table};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use zpage_analyze::{
    analyze, capture_process, compare_with_zram, scan_machine, AnalyzeOptions, MachineScan,
    MemoryImage, Progress, Report,
};
use zpage_codec::{CodecSpec, RejectThreshold};
use zpage_kernel::status::human_bytes;
use zpage_pool::{format_classes, PoolKind};

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
    /// Save the captured pages of --pid to this file (raw image, for later analysis or `zpage bench --image`).
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
    /// Print CSV tables.
    #[arg(long)]
    pub csv: bool,
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
    let mut images = Vec::new();
    for path in &args.images {
        let image = MemoryImage::from_file(path)?;
        if let zpage_analyze::Source::File { skipped_bytes, .. } = image.source() {
            if *skipped_bytes > 0 {
                eprintln!(
                    "zpage: warning: {} is not a whole number of 4096-byte pages: analysing {} pages, skipping the last {skipped_bytes} bytes",
                    path.display(),
                    image.page_count()
                );
            }
        }
        images.push(image);
    }
    for &pid in &args.pids {
        let image = capture_process(pid, args.max_pages)?;
        if image.page_count() == 0 {
            bail!("PID {pid} has no resident private anonymous pages to analyse (a kernel thread, or a process that holds no data)");
        }
        if let Some(path) = &args.save_image {
            image.save(path)?;
            eprintln!(
                "zpage: saved {} pages of PID {pid} to {}",
                image.page_count(),
                path.display()
            );
        }
        images.push(image);
    }
    let sources = images.iter().map(|image| image.source().clone()).collect();
    let label = images
        .iter()
        .map(MemoryImage::label)
        .collect::<Vec<_>>()
        .join(", ");
    let image = MemoryImage::concat(images).context("no pages to analyse")?;

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
    let analysis = analyze(image.pages(), &options, &mut progress)?;
    let mut report = Report::new(sources, analysis);
    if args.kernel {
        // Other zpage commands wait while this one uses a zram device.
        let lock = zpage_kernel::KernelStateLock::try_acquire()?;
        let (device, kernel) =
            compare_with_zram(image.pages(), &[], args.zram_device, &lock, &mut progress)?;
        report = report.with_kernel(device, kernel);
    }
    progress(Progress::Phase {
        name: String::new(),
        total: 0,
    });

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.csv {
        let tables = tables(&report);
        let parts: Vec<String> = tables.iter().map(|(_, table)| table.csv()).collect();
        print!("{}", parts.join("\n"));
    } else {
        print_human(&label, &report, args.classes);
    }
    Ok(())
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0.0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

fn tables(report: &Report) -> Vec<(&'static str, Table)> {
    let analysis = &report.analysis;
    let mut codecs = Table::new(&[
        "codec",
        "level",
        "compress_MiB/s",
        "pass_MiB/s",
        "decompress_MiB/s",
        "dec_p50_ns",
        "dec_p99_ns",
        "dec_max_ns",
        "compressed_bytes",
        "incompressible_pages",
        "ratio",
    ]);
    for c in &analysis.codecs {
        codecs.row(vec![
            c.name.clone(),
            c.level.to_string(),
            format!("{:.0}", c.compress_mib_s),
            format!("{:.0}", c.pass_mib_s),
            format!("{:.0}", c.decompress_mib_s),
            c.decompress_p50_ns.to_string(),
            c.decompress_p99_ns.to_string(),
            c.decompress_max_ns.to_string(),
            c.compressed_bytes.to_string(),
            c.incompressible_pages.to_string(),
            format!("{:.2}", c.ratio),
        ]);
    }
    let mut pools = Table::new(&[
        "pool",
        "codec",
        "memory_used_bytes",
        "memory_used",
        "ratio",
        "fragmentation",
    ]);
    for p in &analysis.pools {
        pools.row(vec![
            p.name.clone(),
            p.codec.clone(),
            p.memory_used_bytes.to_string(),
            human_bytes(p.memory_used_bytes),
            format!("{:.2}", p.ratio),
            format!("{:.1}%", p.fragmentation * 100.0),
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
                k.mm_stat.orig_data_size.to_string(),
                k.mm_stat.compr_data_size.to_string(),
                k.mm_stat.mem_used_total.to_string(),
                k.mm_stat.same_pages.to_string(),
                k.mm_stat.huge_pages.to_string(),
                format!("{:.2}", k.ratio),
                format!("{:.2}", k.effective_ratio),
            ]);
        }
        out.push(("kernel", table));
    }
    out
}

fn print_human(label: &str, report: &Report, classes: bool) {
    let a = &report.analysis;
    println!("{label}: {} pages ({})", a.pages, human_bytes(a.bytes));
    println!(
        "same-filled pages: {} ({}), of which zero pages: {}; reject threshold: {} bytes\n",
        a.same_filled_pages,
        pct(a.same_filled_pages, a.pages),
        a.zero_pages,
        a.threshold_bytes
    );
    for (name, table) in tables(report) {
        let title = match name {
            "codecs" => "Codecs (speeds on one core; latency per page, fastest of the rounds)",
            "pools" => "Pools (ratio = image bytes / pool memory)",
            _ => "Kernel zram, same pages (sizes in bytes, from mm_stat)",
        };
        println!("{title}\n{}", table.render());
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
                human_bytes(ours),
                human_bytes(theirs),
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
    if args.csv {
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
        human_bytes(scan.total_anonymous_bytes),
        human_bytes(scan.total_saved_bytes),
        pct(scan.total_saved_bytes, scan.total_anonymous_bytes),
        scan.processes.len()
    );
    if scan.skipped_processes > 0 {
        println!(
            "skipped {} processes you may not read (first reason: {})",
            scan.skipped_processes,
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
            human_bytes(p.anonymous_bytes),
            p.same_filled_pages.to_string(),
            human_bytes(p.compressed_memory_bytes),
            ratio_text(p.anonymous_bytes, p.compressed_memory_bytes),
            human_bytes(p.saved_bytes),
        ];
        if with_bars {
            row.push(bar(p.saved_bytes as f64, most, 30));
        }
        table.row(row);
    }
    table
}
