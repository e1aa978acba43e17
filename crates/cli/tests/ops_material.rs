//! The operations material in `ops/`: the Prometheus rules pass `promtool
//! check rules` and their unit tests (`promtool test rules`), every metric
//! a Grafana dashboard query uses exists in a real scrape (zpage's exporter
//! on this machine and on a sysfs tree with the zram features this kernel
//! lacks, this test process's own regions publishing their figures, and
//! node_exporter for the series zpage leaves to it), and the systemd units
//! pass `systemd-analyze verify`.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn ops() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ops")
}

fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

struct Scratch(PathBuf);
impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("zpage-ops-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(command: &mut Command) -> (bool, String) {
    let output = command.output().unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn prometheus_rules_check_and_pass_their_unit_tests() {
    let Some(promtool) = tool("promtool") else {
        println!("SKIP prometheus_rules_check_and_pass_their_unit_tests: promtool not installed (apt: prometheus)");
        return;
    };
    let dir = ops().join("prometheus");
    let (ok, said) = run(Command::new(&promtool)
        .args(["check", "rules"])
        .arg(dir.join("zpage-rules.yml")));
    assert!(ok, "promtool check rules: {said}");
    let (ok, said) = run(Command::new(&promtool)
        .args(["test", "rules", "zpage-rules.test.yml"])
        .current_dir(&dir));
    println!("{said}");
    assert!(
        ok && said.contains("SUCCESS"),
        "promtool test rules: {said}"
    );
}

/// The metric names a PromQL expression reads (not functions, keywords,
/// label names, label values or durations).
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: [&str; 11] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
    ];
    const AGGREGATIONS: [&str; 12] = [
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    let mut skip_next_group = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < chars.len() && chars[i] != close {
                    if chars[i] == '"' {
                        i += 1;
                        while i < chars.len() && chars[i] != '"' {
                            i += 1;
                        }
                    }
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_next_group => {
                skip_next_group = false;
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut j = i;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                let is_call = j < chars.len() && chars[j] == '(';
                if KEYWORDS.contains(&word.as_str()) {
                    skip_next_group = matches!(
                        word.as_str(),
                        "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                    );
                } else if !is_call && !AGGREGATIONS.contains(&word.as_str()) {
                    names.push(word);
                }
            }
            c if c.is_ascii_digit() => {
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

#[test]
fn promql_names_are_found() {
    assert_eq!(
        metric_names("sum by (device) (rate(zpage_a_total{instance=~\"$i\"}[5m])) / (zpage_b > 0) or on(x) node_c"),
        ["zpage_a_total", "zpage_b", "node_c"]
    );
}

fn families_of(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// A sysfs tree with every zram attribute a writeback- and recompression-capable kernel has.
fn full_featured_zram(dir: &Path) {
    let device = dir.join("zram0");
    std::fs::create_dir_all(&device).unwrap();
    for (attribute, value) in [
        ("initstate", "1"),
        ("disksize", "1073741824"),
        ("comp_algorithm", "lzo [lz4] zstd"),
        ("mm_stat", "409600 102400 122880 0 122880 10 0 2 3"),
        ("io_stat", "0 0 0 4"),
        ("bd_stat", "5 1 9"),
        ("backing_dev", "/dev/nvme0n1p3"),
        ("writeback", ""),
        ("writeback_limit_enable", "1"),
        ("writeback_limit", "1000"),
        ("recomp_algorithm", "#1: lzo lz4 [zstd]"),
        ("recompress", ""),
        ("idle", ""),
        ("algorithm_params", ""),
    ] {
        std::fs::write(device.join(attribute), value).unwrap();
    }
}

fn node_exporter_scrape() -> Option<String> {
    let binary = tool("prometheus-node-exporter").or_else(|| tool("node_exporter"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let mut child = Command::new(binary)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut body = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(
                stream,
                "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut response = String::new();
            if stream.read_to_string(&mut response).is_ok() && response.contains("node_") {
                body = Some(response);
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    body
}

#[test]
fn every_dashboard_query_reads_metrics_a_real_scrape_has() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ops().join("grafana/zpage-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut exprs: Vec<String> = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["definition"].as_str() {
            // label_values(METRIC_SELECTOR, label)
            let inner = query
                .trim_start_matches("label_values(")
                .trim_end_matches(')');
            let selector = inner.rsplit_once(',').map_or(inner, |(s, _)| s);
            exprs.push(selector.to_string());
        }
    }
    assert!(exprs.len() > 20, "{exprs:?}");

    // Real scrapes: this machine, a zram with every feature, node_exporter.
    let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(["exporter", "--once"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let mut available = families_of(&String::from_utf8_lossy(&output.stdout));
    let scratch = Scratch::new("dashboard");
    full_featured_zram(&scratch.0);
    let process_dir = scratch.0.join("process-metrics");
    let swaps = scratch.0.join("swaps");
    std::fs::write(
        &swaps,
        "Filename Type Size Used Priority\n/dev/zram0 partition 1048572 400 100\n",
    )
    .unwrap();
    let debugfs = scratch.0.join("zswap");
    std::fs::create_dir_all(&debugfs).unwrap();
    for counter in [
        "pool_limit_hit",
        "reject_reclaim_fail",
        "reject_alloc_fail",
        "reject_kmemcache_fail",
        "reject_compress_fail",
        "reject_compress_poor",
        "decompress_fail",
        "stored_pages",
        "stored_incompressible_pages",
        "written_back_pages",
        "pool_total_size",
    ] {
        std::fs::write(debugfs.join(counter), "3\n").unwrap();
    }
    // A process with regions publishing, for the region panels: this one,
    // its budget with a tier below RAM for the tier panels.
    let mut config = zpage_region::RegionConfig::new(8 << 20, 1 << 20);
    config.max_pool_bytes = Some(4 << 20);
    config.tier = Some(std::sync::Arc::new(
        zpage_store::MemoryTier::new(zpage_store::MemoryTierConfig {
            max_bytes: None,
            key: zpage_store::KeySource::Ephemeral,
        })
        .expect("memory tier"),
    ));
    let region = zpage_region::Region::new(config).expect("region");
    for page in 0..region.len() / zpage_region::PAGE_SIZE {
        // SAFETY: in bounds of the region, aligned.
        unsafe {
            (region.as_ptr().add(page * zpage_region::PAGE_SIZE) as *mut u64)
                .write_volatile(page as u64 + 1)
        };
    }
    zpage_region::publish_metrics_to(&process_dir).expect("publish this process's regions");
    let full = zpage_kernel::exporter::Scraper::new(Some(process_dir))
        .with_sources(zpage_kernel::status::Sources {
            sys_block: scratch.0.clone(),
            swaps,
            zswap_debugfs: debugfs,
        })
        .scrape();
    available.extend(families_of(&full));
    let node = node_exporter_scrape();
    match &node {
        Some(text) => available.extend(families_of(text)),
        None => println!("SKIP node_exporter metrics: prometheus-node-exporter not installed"),
    }

    assert!(
        available.contains("zpage_region_fault_duration_seconds"),
        "this process's regions are in the scrape: {full}"
    );
    assert!(
        available.contains("zpage_tier_up"),
        "this process's tier is in the scrape: {full}"
    );
    drop(region);
    // A histogram's series are its family's name and a suffix.
    let known = |name: &str| {
        available.contains(name)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .any(|family| available.contains(family))
    };
    let mut missing = Vec::new();
    for expr in &exprs {
        for name in metric_names(expr) {
            if name.starts_with("node_") && node.is_none() {
                continue;
            }
            if !known(&name) {
                missing.push(format!("{name} (in {expr})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "dashboard metrics no scrape has: {missing:#?}"
    );

    // Every query is valid PromQL: promtool parses it as a recording rule.
    if let Some(promtool) = tool("promtool") {
        let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
        for (i, expr) in exprs.iter().enumerate() {
            rules.push_str(&format!(
                "      - record: dashboard_query_{i}\n        expr: {}\n",
                serde_json::to_string(
                    &["$instance", "$device", "$process"]
                        .iter()
                        .fold(expr.clone(), |e, variable| e.replace(variable, ".*"))
                )
                .unwrap()
            ));
        }
        let file = scratch.0.join("dashboard-queries.yml");
        std::fs::write(&file, rules).unwrap();
        let (ok, said) = run(Command::new(promtool).args(["check", "rules"]).arg(&file));
        assert!(ok, "a dashboard query is not valid PromQL: {said}");
    }
}

#[test]
fn systemd_units_verify() {
    let Some(analyze) = tool("systemd-analyze") else {
        println!("SKIP systemd_units_verify: systemd-analyze not installed");
        return;
    };
    let scratch = Scratch::new("units");
    let mut units = Vec::new();
    for name in ["zpage-exporter.service", "zpage-kernel-daemon.service"] {
        let text = std::fs::read_to_string(ops().join("systemd").join(name)).unwrap();
        assert!(text.contains("ExecStart=/usr/local/bin/zpage "), "{name}");
        // Verify against the zpage just built, where the unit expects the installed one.
        let text = text.replace("/usr/local/bin/zpage", env!("CARGO_BIN_EXE_zpage"));
        let file = scratch.0.join(name);
        std::fs::write(&file, text).unwrap();
        units.push(file);
    }
    let (ok, said) = run(Command::new(analyze)
        .args(["verify", "--man=no"])
        .args(&units));
    println!("systemd-analyze verify: {said}");
    assert!(ok && said.trim().is_empty(), "{said}");
}
