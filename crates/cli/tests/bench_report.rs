//! `zpage bench --report FILE.html`: the page, rendered by headless Chromium,
//! draws its plots (throughput and latency per tier, latency CDFs) from the
//! results; and the terminal shows fio-style latency bars.

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
        ])
        .arg("--scratch-dir")
        .arg(&dir)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Terminal: the table, faults per touch, and the latency bars.
    assert!(
        stdout.contains("faults/touch") && !stdout.contains("faults %"),
        "{stdout}"
    );
    assert!(
        stdout.contains("zpage replay random-read: touch latency") && stdout.contains('█'),
        "{stdout}"
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("id=\"zpage-data\""));

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
    let plots = |kind: &str| dom.matches(&format!("data-plot=\"{kind}\"")).count();
    assert_eq!(plots("throughput"), 1, "{dom}");
    assert_eq!(plots("latency-p99"), 1);
    // One CDF per phase the run measured.
    let phases = [
        "sequential-read",
        "random-read",
        "hotcold-read",
        "sequential-write",
        "random-write",
        "hotcold-write",
    ];
    assert_eq!(plots("cdf"), phases.len(), "{dom}");
    for tier in ["zpage", "zpage-fifo"] {
        assert!(
            dom.contains(&format!("data-tier=\"{tier}\"")),
            "no CDF line of {tier}"
        );
    }
    assert!(dom.matches("class=\"bar\"").count() >= 4 * 8, "bars drawn");
    assert!(dom.matches("class=\"cdf-line\"").count() >= phases.len());
    assert!(dom.contains("<td>random-read</td>"), "results table");
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
