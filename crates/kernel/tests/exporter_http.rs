//! The exporter as Prometheus sees it: scraped over HTTP (by this test, curl
//! and a real Prometheus server on loopback), its output accepted by
//! `promtool check metrics` and the official Python parser, concurrent
//! scrapes unaffected by idle connections, and the per-process metrics files
//! merged or skipped as the contract says.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zpage_kernel::exporter::{self, text_format, Exporter, Scraper};

fn http_get(address: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// A running exporter, stopped on drop.
struct Running {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Running {
    fn start(process_metrics_dir: Option<PathBuf>) -> Running {
        let exporter = Exporter::bind("127.0.0.1:0", Scraper::new(process_metrics_dir)).unwrap();
        let address = exporter.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || exporter.serve(None, &stop).unwrap())
        };
        Running {
            address,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn tool(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

#[test]
fn scraped_over_http_and_accepted_by_the_real_tools() {
    let running = Running::start(None);
    assert!(running.address.ip().is_loopback());
    let (head, body) = http_get(running.address, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let samples = exporter::validate_text_format(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert!(samples > 10, "{body}");
    // Nothing node_exporter already exports, nothing outside zpage's namespace.
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("zpage_"), "{line}");
    }
    for name in [
        "zpage_build_info{version=",
        "zpage_exporter_scrape_errors_total{source=\"zram\"} 0",
        "zpage_zswap_enabled ",
        "zpage_zswap_stored_pages_total ",
        "zpage_vm_swappiness ",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    if Path::new("/sys/block/zram0").exists() {
        assert!(body.contains("zpage_zram_orig_data_bytes{device=\"zram0\"}"));
        assert!(body.contains("zpage_zram_kernel_feature{device=\"zram0\",feature=\"writeback\"}"));
    }
    let (head, _) = http_get(running.address, "/nope");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    match tool("curl") {
        Some(curl) => {
            let output = Command::new(curl)
                .args(["-sS", "--max-time", "10"])
                .arg(format!("http://{}/metrics", running.address))
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "curl: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            exporter::validate_text_format(&String::from_utf8_lossy(&output.stdout)).unwrap();
        }
        None => println!("SKIP curl part: curl not installed"),
    }
    check_with_promtool(&body);
    check_with_python_client(&body);
}

/// `promtool check metrics` (Debian's `prometheus` package): exit 0 and no
/// lint complaint; where promtool is not installed, the part is skipped and
/// says so.
fn check_with_promtool(body: &str) {
    if zpage_testsupport::promtool_check_metrics(body).is_none() {
        println!("SKIP promtool part: promtool not installed (apt: prometheus)");
    }
}

fn check_with_python_client(body: &str) {
    let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families\nfams = list(text_string_to_metric_families(sys.stdin.read()))\nprint(len(fams), sum(len(f.samples) for f in fams))\n";
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let Ok(mut child) = Command::new(python)
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
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
        "prometheus_client rejected the output: {stderr}"
    );
}

#[test]
fn idle_connections_do_not_delay_a_scrape() {
    let running = Running::start(None);
    let idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(running.address).unwrap())
        .collect();
    // Half-sent requests too: a slow client is an idle one that started talking.
    for stream in idle.iter().step_by(2) {
        (&*stream)
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();
    }
    let started = Instant::now();
    let (head, body) = http_get(running.address, "/metrics");
    let elapsed = started.elapsed();
    println!(
        "scrape with 200 idle connections open: {:.1} ms",
        elapsed.as_secs_f64() * 1e3
    );
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    exporter::validate_text_format(&body).unwrap();
    // The old one-connection-at-a-time server needed its 5 s timeout per idle client.
    assert!(elapsed < Duration::from_secs(3), "scrape took {elapsed:?}");
    drop(idle);
}

#[test]
fn serve_stops_after_max_requests() {
    let exporter = Exporter::bind("127.0.0.1:0", Scraper::new(None)).unwrap();
    let address = exporter.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let server = std::thread::spawn(move || exporter.serve(Some(2), &stop).unwrap());
    http_get(address, "/");
    http_get(address, "/metrics");
    assert_eq!(server.join().unwrap(), 2);
}

#[test]
fn bind_refuses_a_taken_port_with_a_fix() {
    let first = Exporter::bind("127.0.0.1:0", Scraper::new(None)).unwrap();
    let address = first.local_addr().unwrap().to_string();
    let err = Exporter::bind(&address, Scraper::new(None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("--listen"), "{err}");
}

fn own_comm() -> String {
    std::fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim()
        .to_string()
}

fn region_file(pid: u32, comm: &str, stored: u64) -> String {
    format!(
        "# HELP zpage_region_stored_pages Pages the region holds compressed.\n# TYPE zpage_region_stored_pages gauge\nzpage_region_stored_pages{{pid=\"{pid}\",comm=\"{comm}\",region=\"0\"}} {stored}\n# HELP zpage_process_faults_total Faults resolved.\n# TYPE zpage_process_faults_total counter\nzpage_process_faults_total{{pid=\"{pid}\",comm=\"{comm}\"}} 7\n"
    )
}

struct ChildGuard(std::process::Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn process_files_are_merged_or_skipped_per_the_contract() {
    let dir = std::env::temp_dir().join(format!("zpage-process-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let me = std::process::id();
    let sleeper = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    let other = sleeper.0.id();
    let gone = {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write(
        &format!("zpage-{me}.prom"),
        &region_file(me, &own_comm(), 10),
    );
    write(
        &format!("zpage-{other}.prom"),
        &region_file(other, "sleep", 20),
    );
    write(
        &format!("zpage-{gone}.prom"),
        &region_file(gone, "true", 30),
    );
    // PID reuse: the comm does not match the live process.
    let reused = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    write(
        &format!("zpage-{}.prom", reused.0.id()),
        &region_file(reused.0.id(), "postgres", 40),
    );
    // Outside the namespaces, and malformed.
    let intruder = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    write(
        &format!("zpage-{}.prom", intruder.0.id()),
        &format!(
            "# TYPE node_memory_x gauge\nnode_memory_x{{pid=\"{0}\",comm=\"sleep\"}} 1\n",
            intruder.0.id()
        ),
    );
    let broken = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    write(
        &format!("zpage-{}.prom", broken.0.id()),
        "zpage_region_x{pid=\"1\" 3\n",
    );
    // Stale: a live process that stopped publishing.
    let stalled = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    let stale_path = dir.join(format!("zpage-{}.prom", stalled.0.id()));
    std::fs::write(&stale_path, region_file(stalled.0.id(), "sleep", 50)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale_path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
        .unwrap();
    // A symbolic link (to a file that would pass) and a FIFO in a file's
    // place: neither followed nor waited on.
    let linked = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    let elsewhere = dir.join("elsewhere");
    std::fs::write(&elsewhere, region_file(linked.0.id(), "sleep", 60)).unwrap();
    std::os::unix::fs::symlink(
        &elsewhere,
        dir.join(format!("zpage-{}.prom", linked.0.id())),
    )
    .unwrap();
    let piped = ChildGuard(Command::new("sleep").arg("60").spawn().unwrap());
    let fifo = dir.join(format!("zpage-{}.prom", piped.0.id()));
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Temporary files of a writer mid-update, and other names, are not read.
    write(&format!(".zpage-{me}.prom.tmp"), "garbage");
    write("notes.txt", "garbage");

    let running = Running::start(Some(dir.clone()));
    let (_, body) = http_get(running.address, "/metrics");
    let families = text_format::parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let stored = families
        .iter()
        .find(|f| f.name == "zpage_region_stored_pages")
        .expect("merged family");
    let mut pids: Vec<&str> = stored
        .samples
        .iter()
        .filter_map(|s| s.label("pid"))
        .collect();
    pids.sort();
    let mut expected = vec![me.to_string(), other.to_string()];
    expected.sort();
    assert_eq!(pids, expected, "{body}");
    assert_eq!(body.matches("# TYPE zpage_region_stored_pages ").count(), 1);
    assert_eq!(
        body.matches("# HELP zpage_process_faults_total ").count(),
        1
    );
    assert!(!body.contains("node_memory_x"));
    // The files that break the contract are scrape errors; the others are states.
    assert!(
        body.contains("zpage_exporter_scrape_errors_total{source=\"process_metrics\"} 5"),
        "{body}"
    );
    for (state, files) in [("merged", 2), ("gone", 1), ("stale", 1), ("rejected", 5)] {
        assert!(
            body.contains(&format!(
                "zpage_exporter_process_files{{state=\"{state}\"}} {files}\n"
            )),
            "{state}: {body}"
        );
    }
    // Errors accumulate across scrapes (a counter).
    let (_, again) = http_get(running.address, "/metrics");
    assert!(
        again.contains("zpage_exporter_scrape_errors_total{source=\"process_metrics\"} 10"),
        "{again}"
    );
    check_with_promtool(&body);
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_process_metrics_dir_is_no_error() {
    let scraper = Scraper::new(Some(PathBuf::from("/nonexistent/zpage-metrics")));
    let body = scraper.scrape();
    assert!(
        body.contains("zpage_exporter_scrape_errors_total{source=\"process_metrics\"} 0"),
        "{body}"
    );
    assert!(body.contains("zpage_exporter_process_files{state=\"merged\"} 0"));
}

/// A free loopback port (bound, then released for the real server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_real_prometheus_server_scrapes_the_exporter() {
    let Some(prometheus) = tool("prometheus") else {
        println!("SKIP a_real_prometheus_server_scrapes_the_exporter: prometheus not installed (apt: prometheus)");
        return;
    };
    let running = Running::start(None);
    let dir = std::env::temp_dir().join(format!("zpage-prometheus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: zpage\n    static_configs:\n      - targets: ['{}']\n",
            running.address
        ),
    )
    .unwrap();
    let port = free_port();
    let server = ChildGuard(
        Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let api: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let query = |q: &str| -> Option<String> {
        let mut stream = TcpStream::connect(api).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET /api/v1/query?query={q} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let mut seen = false;
    while Instant::now() < deadline {
        if let Some(response) = query("zpage_build_info") {
            if response.contains("\"__name__\":\"zpage_build_info\"")
                && response.contains("\"job\":\"zpage\"")
            {
                seen = true;
                break;
            }
            last = response;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        seen,
        "Prometheus never stored zpage_build_info; last answer: {last}"
    );
    let up = query("up%7Bjob%3D%22zpage%22%7D").unwrap_or_default();
    assert!(up.contains("\"1\"]"), "target not up: {up}");
    drop(server);
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}
