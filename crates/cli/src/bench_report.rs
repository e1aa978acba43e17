//! `zpage bench` output for people: the tables (through the one table
//! renderer), fio-style latency distributions as terminal bars, and
//! `--report FILE.html`, a self-contained page with the run's parameters,
//! the plots (throughput and latency per tier, latency CDFs, drawn in
//! `bench_plots`) and every figure exactly.

use crate::bench_plots::{cdf_svg, grouped, grouped_f64, BarPlot, Palette};
use crate::table::{bar, Table};
use zpage_bench::report::{self, BenchResult, Rows};

fn table(rows: Rows) -> Table {
    let mut table = Table::new(&rows.header);
    for row in rows.rows {
        table.row(row);
    }
    table
}

/// The results table, zpage/kernel ratios and hot/cold fault shares.
pub fn tables_text(results: &[BenchResult]) -> String {
    let mut text = table(report::results_rows(results)).render();
    let ratios = report::ratios_rows(results, "zpage");
    if !ratios.rows.is_empty() {
        text.push_str("\nzpage / kernel (touches/s above 1x: zpage faster; latency below 1x: zpage shorter)\n");
        text.push_str(&table(ratios).render());
    }
    let backing = report::backing_rows(results);
    if !backing.rows.is_empty() {
        text.push_str("\ntier below RAM at the end of each phase (on disk: the file's allocated blocks, as du counts them; payload: the live pages' compressed bytes)\n");
        text.push_str(&table(backing).render());
    }
    let shares = report::fault_share_rows(results);
    if !shares.rows.is_empty() {
        text.push_str("\nhot/cold: share of touches that faulted\n");
        text.push_str(&table(shares).render());
    }
    text
}

fn band_label(upper_us: f64) -> String {
    if !upper_us.is_finite() {
        ">2 s".into()
    } else if upper_us >= 1000.0 {
        format!("<={} ms", upper_us / 1000.0)
    } else {
        format!("<={upper_us} µs")
    }
}

/// Each result's latency distribution in fio's bands, as bars.
pub fn latency_charts(results: &[BenchResult]) -> String {
    let mut out = String::new();
    for r in results.iter().filter(|r| !r.latency_bands.is_empty()) {
        out.push_str(&format!(
            "\n{} {} {}: touch latency ({} touches)\n",
            r.tier, r.workload, r.pattern, r.touches
        ));
        for &(upper, share) in &r.latency_bands {
            if share < 0.0001 {
                continue;
            }
            out.push_str(&format!(
                "  {:>10} {:>7.2}%  {}\n",
                band_label(upper),
                share * 100.0,
                bar(share, 1.0, 40)
            ));
        }
    }
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A byte count as every byte and, for reading, in MiB: `67,108,864 (64 MiB)`.
pub fn bytes_text(bytes: u64) -> String {
    let mib = bytes as f64 / (1 << 20) as f64;
    let mib = if mib.fract() == 0.0 {
        grouped(mib as u64)
    } else {
        grouped_f64(mib, 1)
    };
    format!("{} ({mib} MiB)", grouped(bytes))
}

/// The page's table of every result: every figure exact (counts and bytes
/// to the unit, rates and times to fixed decimals), never rounded to a few
/// significant digits.
fn results_table(results: &[BenchResult]) -> String {
    type Cell = fn(&BenchResult) -> String;
    let columns: [(&str, Cell); 14] = [
        ("tier", |r| escape(&r.tier)),
        ("workload", |r| escape(&r.workload)),
        ("pattern", |r| escape(&r.pattern)),
        ("touches", |r| grouped(r.touches)),
        ("touches/s", |r| grouped_f64(r.touches_per_s, 0)),
        ("mean µs", |r| grouped_f64(r.mean_us, 2)),
        ("p50 µs", |r| grouped_f64(r.p50_us, 2)),
        ("p99 µs", |r| grouped_f64(r.p99_us, 2)),
        ("p99.9 µs", |r| grouped_f64(r.p999_us, 2)),
        ("max µs", |r| grouped_f64(r.max_us, 2)),
        ("resident max bytes", |r| grouped(r.resident_max_bytes)),
        ("compressed bytes", |r| grouped(r.compressed_bytes)),
        ("faults", |r| grouped(r.faults)),
        ("faults/touch", |r| format!("{:.4}", r.fault_share)),
    ];
    let mut html = String::from("<table id=\"results\">\n<tr>");
    for (name, _) in &columns {
        html.push_str(&format!("<th>{}</th>", escape(name)));
    }
    html.push_str("</tr>\n");
    for r in results {
        html.push_str("<tr>");
        for (i, (_, cell)) in columns.iter().enumerate() {
            let class = if i < 3 { " class=\"label\"" } else { "" };
            html.push_str(&format!("<td{class}>{}</td>", cell(r)));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    html
}

/// The HTML report: the run's parameters, the plots as inline SVG (no
/// script), and every result exactly. `parameters` are (name, value) rows.
pub fn html(
    results: &[BenchResult],
    title: &str,
    parameters: &[(&str, String)],
) -> Result<String, String> {
    let mut body = String::new();
    body.push_str("<h2>Run</h2>\n<table id=\"parameters\">\n");
    for (name, value) in parameters {
        body.push_str(&format!(
            "<tr><th>{}</th><td class=\"label\">{}</td></tr>\n",
            escape(name),
            escape(value)
        ));
    }
    body.push_str("</table>\n");
    let mut workloads: Vec<&str> = Vec::new();
    for r in results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let bar_plots = [
        (
            "throughput",
            BarPlot {
                title: "Throughput per tier",
                unit: "touches per second",
                value: |r| r.touches_per_s,
                log: false,
            },
        ),
        (
            "latency-p50",
            BarPlot {
                title: "Median touch latency per tier",
                unit: "touch latency (log scale)",
                value: |r| r.p50_us,
                log: true,
            },
        ),
        (
            "latency-p99",
            BarPlot {
                title: "p99 touch latency per tier",
                unit: "touch latency (log scale)",
                value: |r| r.p99_us,
                log: true,
            },
        ),
        (
            "latency-p999",
            BarPlot {
                title: "p99.9 touch latency per tier",
                unit: "touch latency (log scale)",
                value: |r| r.p999_us,
                log: true,
            },
        ),
    ];
    let palette = Palette::new(results);
    let figure = |kind: &str, phase: Option<&str>, svg: String, shown: &[&BenchResult]| {
        let mut html = format!("<figure class=\"zpage-plot\" data-plot=\"{kind}\"");
        if let Some(phase) = phase {
            html.push_str(&format!(" data-phase=\"{}\"", escape(phase)));
        }
        html.push_str(&format!(">\n{svg}\n<figcaption class=\"legend\">"));
        for (tier, color) in palette.legend(shown) {
            html.push_str(&format!(
                "<span class=\"tier\" data-tier=\"{0}\"><span class=\"swatch\" style=\"background:{color}\"></span>{0}</span>",
                escape(&tier)
            ));
        }
        html.push_str("</figcaption>\n</figure>\n");
        html
    };
    for workload in &workloads {
        let ours: Vec<&BenchResult> = results.iter().filter(|r| r.workload == *workload).collect();
        body.push_str(&format!("<h2>{}</h2>\n", escape(workload)));
        for (kind, plot) in &bar_plots {
            let svg = plot.svg(&ours, &palette)?;
            if !svg.is_empty() {
                body.push_str(&figure(kind, None, svg, &ours));
            }
        }
        let mut patterns: Vec<&str> = Vec::new();
        for r in &ours {
            if !patterns.contains(&r.pattern.as_str()) {
                patterns.push(&r.pattern);
            }
        }
        for pattern in patterns {
            let phase: Vec<&BenchResult> = ours
                .iter()
                .copied()
                .filter(|r| r.pattern == pattern && !r.latency_cdf.is_empty())
                .collect();
            let svg = cdf_svg(
                &format!("Latency CDF: {workload} {pattern}"),
                &phase,
                &palette,
            )?;
            if !svg.is_empty() {
                body.push_str(&figure("cdf", Some(pattern), svg, &phase));
            }
        }
    }
    body.push_str("<h2>All results</h2>\n");
    body.push_str(&results_table(results));
    let title = escape(title);
    Ok(format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
h2 {{ margin-top: 2em; }}
figure.zpage-plot {{ margin: 0.5em 0 1.5em; }}
figure.zpage-plot svg {{ border: 1px solid #ddd; max-width: 100%; height: auto; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; font-variant-numeric: tabular-nums; }}
th, td.label {{ text-align: left; }}
figcaption.legend {{ font-size: 13px; margin-top: 0.3em; }}
figcaption.legend .tier {{ margin-right: 1.5em; white-space: nowrap; }}
figcaption.legend .swatch {{ display: inline-block; width: 0.9em; height: 0.9em; margin-right: 0.4em; vertical-align: -0.1em; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>Throughput and touch latency of each tier on the same pages and access sequence; latency CDFs per phase; every figure in the table at the end.</p>
{body}</body>
</html>
"#
    ))
}
