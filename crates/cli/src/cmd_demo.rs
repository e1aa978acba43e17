//! `zpage demo`: a realistic data set several times the budget lives in a
//! compressed region while a hot/cold workload runs over it; live stats every
//! second, then a summary of the memory saved and what it cost.

use crate::cmd_bench::bench_progress::BarObserver;
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};
use zpage_bench::dataset::generate_realistic_page;
use zpage_bench::pattern::{Pattern, TouchPlan};
use zpage_bench::workload::{self, AnonMapping, Memory, QuietObserver};
use zpage_bench::zpage_tier::{create_region, RegionProbe};
use zpage_bench::{
    DataSource, LatencyHistogram, Observer, WorkloadKind, WorkloadSpec, ZpageOptions, PAGE_SIZE,
};
use zpage_units::format_bytes as mib;

/// Arguments of `zpage demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Size of the data set (e.g. 1G, 512M).
    #[arg(long, default_value = "1G", value_parser = zpage_units::parse_size)]
    pub size: u64,
    /// Resident budget. Default: a quarter of the size.
    #[arg(long, value_parser = zpage_units::parse_size)]
    pub budget: Option<u64>,
    /// How long the workload runs.
    #[arg(long, default_value_t = 15)]
    pub seconds: u64,
    /// Seed of the data set and the access sequence.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Skip the comparison run on plain (uncompressed) memory.
    #[arg(long)]
    pub no_baseline: bool,
    /// Print the summary as JSON on stdout (live lines go to stderr).
    #[arg(long)]
    pub json: bool,
}

/// What one run of the workload measured.
#[derive(Debug, Default, zpage_bench::serde::Serialize)]
#[serde(crate = "zpage_bench::serde")]
struct WorkloadFigures {
    touches: u64,
    seconds: f64,
    touches_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

impl WorkloadFigures {
    fn from(latency: &LatencyHistogram, seconds: f64) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        WorkloadFigures {
            touches: latency.count(),
            seconds,
            touches_per_s: latency.count() as f64 / seconds.max(1e-9),
            p50_us: us(latency.percentile_ns(0.5)),
            p99_us: us(latency.percentile_ns(0.99)),
            p999_us: us(latency.percentile_ns(0.999)),
            max_us: us(latency.max_ns()),
        }
    }
}

#[derive(Debug, zpage_bench::serde::Serialize)]
#[serde(crate = "zpage_bench::serde")]
struct Summary {
    data_bytes: u64,
    budget_bytes: u64,
    resident_max_bytes: u64,
    compressed_bytes: u64,
    stored_pages: u64,
    same_filled_pages: u64,
    saved_bytes: i64,
    saved_percent: f64,
    fault_share: f64,
    fault_mean_us: f64,
    zpage: WorkloadFigures,
    plain_memory: Option<WorkloadFigures>,
    pages_verified: u64,
}

/// The demo's workload: 80% of touches on a scattered 20% of the data
/// (a cache's working set), one touch in twenty a write that stores back the
/// value it read, so the data set stays checkable at the end.
fn touch_loop(
    memory: &Memory,
    seed: u64,
    duration: Duration,
    mut every_second: impl FnMut(u64, &LatencyHistogram, Duration),
) -> (LatencyHistogram, f64) {
    let plan = TouchPlan {
        pages: memory.pages(),
        pattern: Pattern::HOT_COLD_80_20,
        touches: u64::MAX,
        seed,
        stream: 0,
    };
    let mut total = LatencyHistogram::new();
    let mut window = LatencyHistogram::new();
    let start = Instant::now();
    let mut next_report = Duration::from_secs(1);
    for (n, (page, word)) in plan.iter().enumerate() {
        let t0 = Instant::now();
        let value = memory.read_word(page, word);
        if n.is_multiple_of(20) {
            memory.write_word(page, word, value);
        }
        let nanos = t0.elapsed().as_nanos() as u64;
        total.record(nanos);
        window.record(nanos);
        if n.is_multiple_of(1024) {
            let elapsed = start.elapsed();
            if elapsed >= next_report {
                every_second(n as u64, &window, elapsed);
                window.reset();
                next_report += Duration::from_secs(1);
            }
            if elapsed >= duration || zpage_bench::stop_requested() {
                break;
            }
        }
    }
    (total, start.elapsed().as_secs_f64())
}

fn fill(
    memory: &Memory,
    spec: &WorkloadSpec,
    probe: &dyn zpage_bench::MemoryProbe,
    label: &str,
) -> Result<()> {
    let mut observer = BarObserver::new(label.to_string());
    workload::fill(memory, spec, probe, &mut observer)?;
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    zpage_bench::install_interrupt_handler().context("install the Ctrl-C handler")?;
    demo(args)
}

fn demo(args: Args) -> Result<()> {
    let page = PAGE_SIZE as u64;
    let size = args.size / page * page;
    let budget = args.budget.unwrap_or(size / 4) / page * page;
    if budget == 0 || budget >= size {
        bail!("need 0 < --budget < --size");
    }
    let say = |text: String| {
        if args.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    let spec = WorkloadSpec {
        kind: WorkloadKind::Replay,
        source: DataSource::Realistic { seed: args.seed },
        size_bytes: size,
        touches: 0,
        seed: args.seed,
        only_phases: vec![],
        sample_every_ms: 0,
        threads: 1,
    };
    say(format!(
        "zpage demo: a {} data set (log text, pointer-heavy objects, counters, zero and random pages) \
         in a region with a {} resident budget ({:.1}x smaller), lz4, zpage's refault aging",
        mib(size),
        mib(budget),
        size as f64 / budget as f64
    ));

    // Plain memory first, for the cost comparison (and so the region's run is the last thing shown).
    let plain = if args.no_baseline {
        None
    } else {
        say(format!(
            "baseline: the same workload on {} of plain memory for {} s",
            mib(size),
            args.seconds.min(5)
        ));
        let mapping = AnonMapping::new(size as usize)?;
        let probe = workload::PlainProbe {
            memory: mapping.memory(),
            library: None,
            compressed: Box::new(|| 0),
        };
        fill(&mapping.memory(), &spec, &probe, "plain memory")?;
        let (latency, seconds) = touch_loop(
            &mapping.memory(),
            args.seed,
            Duration::from_secs(args.seconds.min(5)),
            |_, _, _| {},
        );
        Some(WorkloadFigures::from(&latency, seconds))
    };

    let region = create_region(&spec, budget, 0, &ZpageOptions::default())?;
    // SAFETY: the region is a page-aligned read-write mapping of `len()` bytes that
    // outlives every use of `memory` below; it is only touched with volatile words.
    let memory = unsafe { Memory::new(region.as_ptr(), region.len()) };
    let probe = RegionProbe {
        region: &region,
        memory,
        library: None,
    };
    fill(&memory, &spec, &probe, "zpage region")?;
    let after_fill = region.stats();
    say(format!(
        "filled: {} resident, {} pages stored in {} compressed",
        mib(after_fill.resident_bytes as u64),
        after_fill.stored_pages,
        mib(after_fill.compressed_bytes as u64)
    ));
    say(format!(
        "running the workload for {} s (80% of touches on 20% of the data, 5% writes):",
        args.seconds
    ));
    let live = crate::table::LiveTable::new(
        &[
            "time",
            "resident MiB",
            "compressed MiB",
            "ratio",
            "touches/s",
            "faults/s",
            "p50 µs",
            "p99 µs",
        ],
        5,
    );
    say(live.header());
    let faults_before = region.stats().fault_count;
    let mut last_faults = faults_before;
    let mut last_touches = 0;
    let mut resident_max = 0u64;
    let (latency, seconds) = touch_loop(
        &memory,
        args.seed,
        Duration::from_secs(args.seconds),
        |n, window, elapsed| {
            let stats = region.stats();
            let resident = probe_resident(&probe);
            resident_max = resident_max.max(resident);
            let with_data = (stats.stored_pages - stats.same_filled_pages) * PAGE_SIZE as u64;
            let line = live.line(&[
                format!("{}s", elapsed.as_secs()),
                format!("{:.1}", resident as f64 / (1 << 20) as f64),
                format!("{:.1}", stats.compressed_bytes as f64 / (1 << 20) as f64),
                crate::table::ratio_text(with_data, stats.compressed_bytes as u64),
                format!("{:.0}", (n - last_touches) as f64),
                format!("{:.0}", (stats.fault_count - last_faults) as f64),
                format!("{:.2}", window.percentile_ns(0.5) as f64 / 1000.0),
                format!("{:.2}", window.percentile_ns(0.99) as f64 / 1000.0),
            ]);
            last_faults = stats.fault_count;
            last_touches = n;
            if args.json {
                eprintln!("{line}");
            } else {
                println!("{line}");
            }
        },
    );
    let stats = region.stats();
    resident_max = resident_max.max(probe_resident(&probe));
    let faults = stats.fault_count - faults_before;

    // Every page must read back exactly as generated (writes stored what they read).
    let mut expected = vec![0u8; PAGE_SIZE];
    let mut verify = BarObserver::new("verify".into());
    verify.phase_started("every page", memory.pages());
    for index in 0..memory.pages() {
        generate_realistic_page(args.seed, index, &mut expected);
        for (word, bytes) in expected.chunks_exact(8).enumerate() {
            let want = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            if memory.read_word(index, word as u64) != want {
                bail!(
                    "page {index} word {word} differs from the data set: zpage returned wrong data"
                );
            }
        }
        if index.is_multiple_of(4096) {
            verify.progress(index);
        }
    }
    verify.phase_finished("every page");
    let _ = QuietObserver;

    let footprint = resident_max + stats.compressed_bytes as u64;
    let saved = size as i64 - footprint as i64;
    let figures = WorkloadFigures::from(&latency, seconds);
    let summary = Summary {
        data_bytes: size,
        budget_bytes: budget,
        resident_max_bytes: resident_max,
        compressed_bytes: stats.compressed_bytes as u64,
        stored_pages: stats.stored_pages as u64,
        same_filled_pages: stats.same_filled_pages as u64,
        saved_bytes: saved,
        saved_percent: saved as f64 * 100.0 / size as f64,
        fault_share: faults as f64 / latency.count().max(1) as f64,
        fault_mean_us: stats.fault_latency.mean_ns as f64 / 1000.0,
        zpage: figures,
        plain_memory: plain,
        pages_verified: memory.pages(),
    };
    drop(region);

    say(String::new());
    say(format!(
        "memory: {} of data held in {} resident (budget {}) + {} compressed = {}; saved {} ({:.0}%)",
        mib(size),
        mib(summary.resident_max_bytes),
        mib(budget),
        mib(summary.compressed_bytes),
        mib(footprint),
        mib(saved.max(0) as u64),
        summary.saved_percent
    ));
    let z = &summary.zpage;
    let mut cost = format!(
        "cost: {:.1}% of touches faulted (handler mean {:.1} µs); touches p50 {:.2} µs, p99 {:.2} µs, p99.9 {:.1} µs, {:.2}M touches/s",
        summary.fault_share * 100.0,
        summary.fault_mean_us,
        z.p50_us,
        z.p99_us,
        z.p999_us,
        z.touches_per_s / 1e6
    );
    if let Some(p) = &summary.plain_memory {
        cost.push_str(&format!(
            "; plain memory: p50 {:.2} µs, p99 {:.2} µs, {:.2}M touches/s ({:.1}x the throughput)",
            p.p50_us,
            p.p99_us,
            p.touches_per_s / 1e6,
            p.touches_per_s / z.touches_per_s.max(1e-9)
        ));
    }
    say(cost);
    say(format!(
        "integrity: all {} pages read back identical to the data set",
        summary.pages_verified
    ));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    }
    Ok(())
}

fn probe_resident(probe: &RegionProbe<'_>) -> u64 {
    use zpage_bench::MemoryProbe;
    probe.resident_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_demo_runs_and_verifies_every_page() {
        let _watchdog = zpage_bench::Watchdog::arm(Duration::from_secs(120), "tiny demo");
        demo(Args {
            size: 8 << 20,
            budget: Some(2 << 20),
            seconds: 1,
            seed: 3,
            no_baseline: false,
            json: true,
        })
        .unwrap();
    }
}
