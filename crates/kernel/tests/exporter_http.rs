//! Done-when 4: the exporter is scraped over HTTP by this test and by curl,
//! and its output parses as Prometheus text format (our validator, and the
//! official Python client's parser where installed).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use zpage_kernel::exporter::{self, Exporter};

fn scrape(address: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

#[test]
fn scraped_over_http_and_by_curl() {
    let exporter = Exporter::bind("127.0.0.1:0").unwrap().with_extra(Box::new(|| "# HELP zpage_test_extra Extra source.\n# TYPE zpage_test_extra gauge\nzpage_test_extra 1\n".to_string()));
    let address = exporter.local_addr().unwrap();
    assert!(address.ip().is_loopback());
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        // Three requests: ours, a 404, and curl's. Then the server returns by itself.
        std::thread::spawn(move || exporter.serve(Some(3), &stop).unwrap())
    };

    let (head, body) = scrape(address, "/metrics");
    assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    let samples = exporter::validate_text_format(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    println!(
        "{samples} samples; first lines:\n{}",
        body.lines().take(12).collect::<Vec<_>>().join("\n")
    );
    for name in [
        "node_zram_orig_data_bytes{device=\"zram0\"}",
        "node_zswap_enabled",
        "node_memory_Zswap_bytes",
        "node_vmstat_zswpout",
        "node_sysctl_vm_swappiness",
        "zpage_test_extra 1",
    ] {
        if name.contains("zram0") && !std::path::Path::new("/sys/block/zram0").exists() {
            continue;
        }
        assert!(body.contains(name), "{name} missing");
    }
    let (head, _) = scrape(address, "/nope");
    assert!(head.starts_with("HTTP/1.0 404"), "{head}");

    let curl = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-"])
        .arg(format!("http://{address}/metrics"))
        .output();
    match curl {
        Ok(output) => {
            assert!(
                output.status.success(),
                "curl: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let text = String::from_utf8_lossy(&output.stdout).to_string();
            let (_, body) = text.split_once("\r\n\r\n").unwrap();
            exporter::validate_text_format(body).unwrap();
            check_with_python_client(body);
        }
        Err(e) => {
            println!("SKIP curl part: {e}");
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    assert_eq!(
        server.join().unwrap(),
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            2
        } else {
            3
        }
    );
}

fn check_with_python_client(body: &str) {
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families\nfams = list(text_string_to_metric_families(sys.stdin.read()))\nprint(len(fams), sum(len(f.samples) for f in fams))\n";
    // Debian's python3 (where apt installs the client) before any other on PATH.
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let child = Command::new(python)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        println!("SKIP python parser: no python3");
        return;
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("No module named") {
        println!(
            "SKIP python parser: prometheus_client not installed (apt: python3-prometheus-client)"
        );
        return;
    }
    assert!(
        output.status.success(),
        "prometheus_client parser rejected the output: {stderr}"
    );
    println!(
        "prometheus_client parsed: {} (families samples)",
        String::from_utf8_lossy(&output.stdout).trim()
    );
}

#[test]
fn validator_rejects_broken_text() {
    assert!(exporter::validate_text_format("# TYPE a gauge\na 1\n").is_ok());
    assert!(exporter::validate_text_format("a 1\n").is_err());
    assert!(exporter::validate_text_format("# TYPE a gauge\na{x=\"1} 1\n").is_err());
    assert!(exporter::validate_text_format("# TYPE a gauge\na one\n").is_err());
    assert!(exporter::validate_text_format("# TYPE 1a gauge\n").is_err());
}

#[test]
fn bind_refuses_a_taken_port_with_a_fix() {
    let first = Exporter::bind("127.0.0.1:0").unwrap();
    let address = first.local_addr().unwrap().to_string();
    let err = Exporter::bind(&address).unwrap_err().to_string();
    assert!(err.contains("--listen"), "{err}");
}

#[test]
fn textfile_metrics_are_appended_when_valid() {
    let dir = std::path::PathBuf::from(format!("/tmp/zpage-textfile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("region.prom"), "# HELP zpage_region_stored_bytes Bytes stored.\n# TYPE zpage_region_stored_bytes gauge\nzpage_region_stored_bytes{region=\"cache\"} 4096\n").unwrap();
    std::fs::write(dir.join("broken.prom"), "not metrics at all\n").unwrap();
    std::fs::write(dir.join("ignored.txt"), "x 1\n").unwrap();
    let text = exporter::textfile_metrics(&dir);
    assert!(
        text.contains("zpage_region_stored_bytes{region=\"cache\"} 4096"),
        "{text}"
    );
    assert!(
        text.contains("# zpage: skipped") && text.contains("broken.prom"),
        "{text}"
    );
    assert!(!text.contains("x 1"));
    exporter::validate_text_format(&text).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
