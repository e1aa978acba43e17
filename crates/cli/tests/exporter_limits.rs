//! `zpage exporter` under hostile clients: connections sending request heads
//! that never end, and thousands of idle connections. The exporter process
//! must stay under its unit's `MemoryMax=128M`, keep a bounded number of
//! threads, and still answer a scrape quickly.
//!
//! CI runs it small; `ZPAGE_TEST_EXPORTER_FULL=1` runs the sizes the issue
//! names (eight 100 MB heads with 5,000 idle connections; 1,000 idle
//! connections with scrapes under 10 ms).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zpage_kernel::exporter::server::SCRAPE_THREADS;

/// The unit's `MemoryMax`.
const MEMORY_MAX: u64 = 128 << 20;

struct Sizes {
    head_connections: usize,
    head_bytes: usize,
    idle_with_heads: usize,
    idle_alone: usize,
}

fn sizes() -> Sizes {
    if std::env::var_os("ZPAGE_TEST_EXPORTER_FULL").is_some() {
        Sizes {
            head_connections: 8,
            head_bytes: 100_000_000,
            idle_with_heads: 5_000,
            idle_alone: 1_000,
        }
    } else {
        Sizes {
            head_connections: 8,
            head_bytes: 8 << 20,
            idle_with_heads: 600,
            idle_alone: 300,
        }
    }
}

/// The exporter as its own process (as systemd runs it), killed on drop.
struct ExporterProcess {
    child: Child,
    address: SocketAddr,
}

impl ExporterProcess {
    fn start() -> ExporterProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_zpage"))
            .args([
                "exporter",
                "--listen",
                "127.0.0.1:0",
                "--no-process-metrics",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zpage exporter");
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // "zpage exporter: serving http://127.0.0.1:PORT/metrics"
        let address = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        ExporterProcess { child, address }
    }

    /// (VmRSS, VmHWM, Threads) of the exporter now.
    fn footprint(&self) -> (u64, u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {status}"))
        };
        (
            field("VmRSS:") << 10,
            field("VmHWM:") << 10,
            field("Threads:"),
        )
    }

    /// One scrape on a new connection: its time and whether it was whole.
    fn scrape(&self) -> Duration {
        let started = Instant::now();
        let mut stream = TcpStream::connect(self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let elapsed = started.elapsed();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains("zpage_build_info"), "{response}");
        elapsed
    }

    /// Connections the kernel has queued for the exporter that it has not
    /// taken yet (the listening socket's `rx_queue` in /proc/net/tcp).
    fn accept_queue(&self) -> u64 {
        let local = format!("0100007F:{:04X}", self.address.port());
        std::fs::read_to_string("/proc/net/tcp")
            .unwrap()
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.len() > 4 && f[1] == local && f[3] == "0A")
            .and_then(|f| f[4].split(':').nth(1).map(str::to_string))
            .and_then(|rx| u64::from_str_radix(&rx, 16).ok())
            .expect("the listening socket in /proc/net/tcp")
    }

    /// Waits until the exporter has taken every connection made so far.
    fn settle(&self) -> Duration {
        let started = Instant::now();
        while self.accept_queue() > 0 && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(5));
        }
        started.elapsed()
    }

    /// The median of five scrapes.
    fn median_scrape(&self) -> Duration {
        let mut times: Vec<Duration> = (0..5).map(|_| self.scrape()).collect();
        times.sort();
        times[2]
    }
}

impl Drop for ExporterProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Room for this many sockets in the test process.
fn allow_open_files(count: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let wanted = (count as libc::rlim_t + 256).min(limit.rlim_max);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
}

/// `count` connections that never finish a request: every other one sent
/// half a request head, the rest nothing.
fn idle_connections(address: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|i| {
            let mut stream = TcpStream::connect(address).unwrap();
            if i % 2 == 0 {
                // The server may already have closed it (the quietest goes first).
                let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
            }
            stream
        })
        .collect()
}

/// Sends a request head of `bytes` that never ends; returns how many bytes
/// the server took before it closed the connection.
fn endless_head(address: SocketAddr, bytes: usize) -> usize {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let chunk = vec![b'a'; 64 << 10];
    let mut sent = match stream.write(b"GET /metrics HTTP/1.1\r\nX-Long: ") {
        Ok(n) => n,
        Err(_) => return 0,
    };
    while sent < bytes {
        match stream.write(&chunk[..chunk.len().min(bytes - sent)]) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
    }
    sent
}

#[test]
fn hostile_clients_leave_the_exporter_small_and_quick() {
    let sizes = sizes();
    allow_open_files(sizes.idle_with_heads.max(sizes.idle_alone) + sizes.head_connections);
    let exporter = ExporterProcess::start();
    let quiet = exporter.median_scrape();

    // Idle connections alone: threads stay bounded, scrapes stay quick.
    let idle = idle_connections(exporter.address, sizes.idle_alone);
    exporter.settle();
    let with_idle = exporter.median_scrape();
    let (_, _, threads) = exporter.footprint();
    println!(
        "{} idle connections: median scrape {:.2} ms (alone {:.2} ms), {threads} threads",
        sizes.idle_alone,
        with_idle.as_secs_f64() * 1e3,
        quiet.as_secs_f64() * 1e3
    );
    assert!(
        threads <= 1 + SCRAPE_THREADS as u64,
        "{threads} threads with {} idle connections",
        sizes.idle_alone
    );
    assert!(
        with_idle < Duration::from_millis(10),
        "scrape took {with_idle:?} with {} idle connections",
        sizes.idle_alone
    );
    drop(idle);

    // Endless heads beside many idle connections.
    let address = exporter.address;
    let heads: Vec<_> = (0..sizes.head_connections)
        .map(|_| std::thread::spawn(move || endless_head(address, sizes.head_bytes)))
        .collect();
    let idle = idle_connections(exporter.address, sizes.idle_with_heads);
    // A scrape queued behind the flood waits for the exporter to take it;
    // one made once it has is what "under N idle connections" measures.
    let behind_the_flood = exporter.scrape();
    let settled = exporter.settle();
    let during = exporter.scrape();
    let taken: Vec<usize> = heads.into_iter().map(|h| h.join().unwrap()).collect();
    let after = exporter.median_scrape();
    let (rss, peak, threads) = exporter.footprint();
    println!(
        "{} heads of {} bytes (sent before the exporter closed each: {:?}) and {} idle connections: a scrape behind the flood {:.2} ms, the flood taken {:.2} ms later, then a scrape {:.2} ms, median {:.2} ms after the heads ended; RSS {:.1} MiB, peak {:.1} MiB, {threads} threads",
        sizes.head_connections,
        sizes.head_bytes,
        taken,
        sizes.idle_with_heads,
        behind_the_flood.as_secs_f64() * 1e3,
        settled.as_secs_f64() * 1e3,
        during.as_secs_f64() * 1e3,
        after.as_secs_f64() * 1e3,
        rss as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
    );
    assert!(
        peak < MEMORY_MAX,
        "peak RSS {peak} bytes, over the unit's MemoryMax"
    );
    assert!(threads <= 1 + SCRAPE_THREADS as u64, "{threads} threads");
    assert!(
        during < Duration::from_millis(100),
        "scrape took {during:?}"
    );
    assert!(
        behind_the_flood < Duration::from_secs(2),
        "a scrape behind the flood took {behind_the_flood:?}"
    );
    assert!(after < Duration::from_millis(100), "scrape took {after:?}");
    // A head is refused long before its end: the exporter reads at most its
    // buffer (what was sent beyond it sat in the kernel's socket buffers).
    for &bytes in &taken {
        assert!(
            bytes < sizes.head_bytes,
            "the exporter read a {bytes}-byte request head to its end"
        );
    }
    drop(idle);
}

#[test]
fn an_oversized_head_is_answered_431_and_a_silent_client_is_closed() {
    let exporter = ExporterProcess::start();
    let mut stream = TcpStream::connect(exporter.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = b"GET /metrics HTTP/1.1\r\nX-Long: ".to_vec();
    head.resize(head.len() + (16 << 10), b'a');
    let _ = stream.write_all(&head);
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 431"), "{response:?}");

    // A client that connects and says nothing is closed at the header timeout.
    let timeout = zpage_kernel::exporter::server::HEADER_TIMEOUT;
    let mut silent = TcpStream::connect(exporter.address).unwrap();
    silent
        .set_read_timeout(Some(timeout + Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut said = Vec::new();
    // Whatever the server says before it closes (nothing, or a 408), then EOF.
    let _ = silent.read_to_end(&mut said);
    let waited = started.elapsed();
    assert!(
        waited >= timeout - Duration::from_secs(1) && waited < timeout + Duration::from_secs(5),
        "closed after {waited:?}, the timeout is {timeout:?}"
    );
}
