//! `zpage bench --report FILE.html`: the page, rendered by headless Chromium,
//! shows the run's parameters, every result's figures exactly as the JSON
//! has them, and plots (throughput and latency per tier, latency CDFs)
//! whose axes carry several labelled ticks that overlap neither each other
//! nor the unit; and the terminal shows fio-style latency bars.

use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// `1234567` as `1,234,567`, written out here rather than borrowed from
/// the code under test.
fn grouped(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// One `<text>` of an SVG: where it is anchored, its size, whether it is
/// turned, and what it says.
#[derive(Debug)]
struct Label {
    x: f64,
    y: f64,
    size: f64,
    anchor_end: bool,
    rotated: bool,
    text: String,
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + tag[start..].find('"')?;
    Some(tag[start..end].to_string())
}

/// The SVGs of every figure of kind `plot` in the rendered page, each as its labels.
fn plots(dom: &str, plot: &str) -> Vec<Vec<Label>> {
    let marker = format!("data-plot=\"{plot}\"");
    dom.match_indices(&marker)
        .map(|(at, _)| {
            let svg = &dom[at..at + dom[at..].find("</svg>").expect("an svg in the figure")];
            svg.split("<text")
                .skip(1)
                .map(|text| {
                    let (tag, rest) = text.split_once('>').unwrap();
                    let number = |name| attribute(tag, name).and_then(|v| v.parse().ok()).unwrap();
                    Label {
                        x: number("x"),
                        y: number("y"),
                        size: number("font-size"),
                        anchor_end: attribute(tag, "text-anchor").as_deref() == Some("end"),
                        rotated: tag.contains("rotate("),
                        text: rest.split("</text>").next().unwrap().trim().to_string(),
                    }
                })
                .collect()
        })
        .collect()
}

/// The y axis's tick labels (right-aligned to the axis) and its unit (turned
/// text): several ticks, none overlapping another or the unit.
fn check_y_axis(labels: &[Label], plot: &str) -> Vec<String> {
    let ticks: Vec<&Label> = labels
        .iter()
        .filter(|l| l.anchor_end && !l.rotated)
        .collect();
    assert!(
        ticks.len() >= 3,
        "{plot}: only {} y ticks: {labels:?}",
        ticks.len()
    );
    let mut heights: Vec<f64> = ticks.iter().map(|t| t.y).collect();
    heights.sort_by(f64::total_cmp);
    for pair in heights.windows(2) {
        assert!(
            pair[1] - pair[0] >= ticks[0].size * 1.5,
            "{plot}: y tick labels {} px apart overlap: {ticks:?}",
            pair[1] - pair[0]
        );
    }
    let unit = labels
        .iter()
        .find(|l| l.rotated)
        .unwrap_or_else(|| panic!("{plot}: no unit beside the y axis: {labels:?}"));
    for tick in &ticks {
        // A right-aligned label spans at most 0.7 em per character leftwards.
        let left = tick.x - 0.7 * tick.size * tick.text.chars().count() as f64;
        assert!(
            unit.x + unit.size < left,
            "{plot}: the unit {:?} at x {} overlaps the tick {:?} reaching x {left}",
            unit.text,
            unit.x,
            tick.text
        );
    }
    ticks.iter().map(|t| t.text.clone()).collect()
}

#[test]
fn the_html_report_renders_its_plots_in_chromium() {
    let dir = std::env::temp_dir().join(format!("zpage-bench-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.html");
    let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args([
            "bench",
            "--size",
            "8M",
            "--budget",
            "2M",
            "--touches",
            "2000",
            "--workload",
            "replay",
            "--json",
        ])
        .arg("--scratch-dir")
        .arg(&dir)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // Terminal: the table, faults per touch, and the latency bars.
    assert!(
        stderr.contains("faults/touch") && !stderr.contains("faults %"),
        "{stderr}"
    );
    assert!(
        stderr.contains("zpage replay random-read: touch latency") && stderr.contains('█'),
        "{stderr}"
    );
    let results: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(!html.contains("<script"), "the page needs no script");

    let Some(browser) = chromium() else {
        println!("SKIP chromium part: chromium not installed (apt: chromium)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    };
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--dump-dom",
        ])
        .arg(format!("file://{}", report.display()))
        .env("HOME", &dir)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The run's parameters, exact.
    for (name, value) in [
        ("size", "8,388,608 (8 MiB)".to_string()),
        ("budget", "2,097,152 (2 MiB)".to_string()),
        ("codec", "lz4".to_string()),
        ("touches per random phase", "2,000".to_string()),
        ("zpage version", env!("CARGO_PKG_VERSION").to_string()),
    ] {
        let row = format!("<th>{name}</th><td class=\"label\">{value}</td>");
        assert!(dom.contains(&row), "no {row} in the page");
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert!(dom.contains(&format!(
        "<th>host</th><td class=\"label\">{}, Linux ",
        hostname.trim()
    )));
    assert!(
        dom.contains("<th>date</th><td class=\"label\">20"),
        "a date"
    );

    // Every result's counts and bytes exactly, as the JSON has them.
    for r in &results {
        for field in [
            "touches",
            "faults",
            "resident_max_bytes",
            "compressed_bytes",
        ] {
            let cell = format!("<td>{}</td>", grouped(r[field].as_u64().unwrap()));
            assert!(
                dom.contains(&cell),
                "{field} {cell} of {} {} missing",
                r["tier"],
                r["pattern"]
            );
        }
    }
    assert!(
        dom.contains("<td class=\"label\">random-read</td>"),
        "results table"
    );

    // The plots: one per figure and phase, each tier in its legend.
    let phases = [
        "sequential-read",
        "random-read",
        "hotcold-read",
        "sequential-write",
        "random-write",
        "hotcold-write",
    ];
    for (plot, count) in [
        ("throughput", 1),
        ("latency-p50", 1),
        ("latency-p99", 1),
        ("latency-p999", 1),
        ("cdf", phases.len()),
    ] {
        let figures = plots(&dom, plot);
        assert_eq!(figures.len(), count, "{plot} figures");
        for labels in &figures {
            let ticks = check_y_axis(labels, plot);
            if plot == "cdf" {
                assert_eq!(ticks, ["0", "0.9", "0.99", "0.999", "0.9999"], "{plot}");
            }
            if plot == "throughput" {
                assert!(
                    ticks
                        .iter()
                        .all(|t| t.chars().all(|c| c.is_ascii_digit() || c == ',')),
                    "{ticks:?}"
                );
            }
        }
    }
    for phase in phases {
        assert!(
            dom.contains(&format!("data-phase=\"{phase}\"")),
            "no CDF of {phase}"
        );
    }
    for tier in ["zpage", "zpage-fifo"] {
        assert!(
            dom.contains(&format!("data-tier=\"{tier}\"")),
            "no legend entry of {tier}"
        );
    }
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
