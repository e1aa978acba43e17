//! `zpage exporter`: Prometheus text exposition (format 0.0.4) of zram,
//! zswap, swap areas and memory pressure, with node_exporter-style names,
//! served over a small, bounded HTTP/1.0 server.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::status::{self, KernelStatus};
use crate::zswap::DebugfsCounters;
use crate::{KernelError, Result};

/// Default listen address: loopback only (metrics can reveal memory use).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9586";
/// Content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Extra metrics appended to each scrape (e.g. zpage regions), already in text format.
pub type ExtraMetrics = Box<dyn Fn() -> String + Send + Sync>;

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}",
            help.replace('\\', "\\\\").replace('\n', "\\n")
        );
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }
    /// One family with one sample per (labels, value).
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: &[(Vec<(&str, &str)>, f64)]) {
        if samples.is_empty() {
            return;
        }
        self.header(name, kind, help);
        for (labels, value) in samples {
            self.sample(name, labels, *value);
        }
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

fn sanitize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Renders a status snapshot as Prometheus text.
pub fn render(snapshot: &KernelStatus) -> String {
    let mut out = String::new();
    let mut f = Family { out: &mut out };

    // zram, one label per device.
    let per_zram =
        |get: &dyn Fn(&status::ZramStatus) -> Option<f64>| -> Vec<(Vec<(&str, &str)>, f64)> {
            snapshot
                .zram
                .iter()
                .filter_map(|z| get(z).map(|v| (vec![("device", z.name.as_str())], v)))
                .collect()
        };
    f.family(
        "node_zram_disksize_bytes",
        "gauge",
        "zram capacity for uncompressed data (disksize).",
        &per_zram(&|z| Some(z.disksize_bytes as f64)),
    );
    let mm = |pick: fn(&crate::zram::MmStat) -> u64| {
        move |z: &status::ZramStatus| z.mm_stat.map(|m| pick(&m) as f64)
    };
    f.family(
        "node_zram_orig_data_bytes",
        "gauge",
        "Uncompressed size of the data stored in zram (mm_stat orig_data_size).",
        &per_zram(&mm(|m| m.orig_data_size)),
    );
    f.family(
        "node_zram_compr_data_bytes",
        "gauge",
        "Compressed size of the data stored in zram (mm_stat compr_data_size).",
        &per_zram(&mm(|m| m.compr_data_size)),
    );
    f.family(
        "node_zram_mem_used_total_bytes",
        "gauge",
        "RAM used by zram, allocator overhead included (mm_stat mem_used_total).",
        &per_zram(&mm(|m| m.mem_used_total)),
    );
    f.family(
        "node_zram_mem_limit_bytes",
        "gauge",
        "Limit on RAM used by zram, 0 = none (mm_stat mem_limit).",
        &per_zram(&mm(|m| m.mem_limit)),
    );
    f.family(
        "node_zram_mem_used_max_bytes",
        "gauge",
        "Peak RAM used by zram since reset (mm_stat mem_used_max).",
        &per_zram(&mm(|m| m.mem_used_max)),
    );
    f.family(
        "node_zram_same_pages",
        "gauge",
        "Same-filled pages stored without allocation (mm_stat same_pages).",
        &per_zram(&mm(|m| m.same_pages)),
    );
    f.family(
        "node_zram_huge_pages",
        "gauge",
        "Incompressible pages stored uncompressed (mm_stat huge_pages).",
        &per_zram(&mm(|m| m.huge_pages)),
    );
    f.family(
        "node_zram_huge_pages_since_total",
        "counter",
        "Pages stored as huge since initialisation (mm_stat huge_pages_since).",
        &per_zram(&mm(|m| m.huge_pages_since)),
    );
    f.family(
        "node_zram_pages_compacted_total",
        "counter",
        "Pages freed by compaction (mm_stat pages_compacted).",
        &per_zram(&mm(|m| m.pages_compacted)),
    );
    let io = |pick: fn(&crate::zram::IoStat) -> u64| {
        move |z: &status::ZramStatus| z.io_stat.map(|i| pick(&i) as f64)
    };
    f.family(
        "node_zram_failed_reads_total",
        "counter",
        "Failed zram reads (io_stat).",
        &per_zram(&io(|i| i.failed_reads)),
    );
    f.family(
        "node_zram_failed_writes_total",
        "counter",
        "Failed zram writes (io_stat).",
        &per_zram(&io(|i| i.failed_writes)),
    );
    f.family(
        "node_zram_notify_free_total",
        "counter",
        "zram pages freed because their swap slot was freed (io_stat notify_free).",
        &per_zram(&io(|i| i.notify_free)),
    );
    let info: Vec<(Vec<(&str, &str)>, f64)> = snapshot
        .zram
        .iter()
        .map(|z| {
            (
                vec![
                    ("device", z.name.as_str()),
                    ("algorithm", z.algorithm.as_deref().unwrap_or("")),
                ],
                1.0,
            )
        })
        .collect();
    f.family(
        "node_zram_info",
        "gauge",
        "zram device information (value is always 1).",
        &info,
    );

    // zswap.
    let zs = &snapshot.zswap;
    let param = |name: &str| zs.parameters.get(name);
    let flag = |v: Option<&String>| v.map(|v| if v == "Y" || v == "1" { 1.0 } else { 0.0 });
    if let Some(v) = flag(param("enabled")) {
        f.family(
            "node_zswap_enabled",
            "gauge",
            "zswap enabled (module parameter).",
            &[(vec![], v)],
        );
    }
    if let Some(v) = flag(param("shrinker_enabled")) {
        f.family(
            "node_zswap_shrinker_enabled",
            "gauge",
            "zswap shrinker enabled (module parameter).",
            &[(vec![], v)],
        );
    }
    if let Some(v) = param("max_pool_percent").and_then(|v| v.parse::<f64>().ok()) {
        f.family(
            "node_zswap_max_pool_percent",
            "gauge",
            "zswap pool limit in percent of RAM.",
            &[(vec![], v)],
        );
    }
    if let Some(v) = param("accept_threshold_percent").and_then(|v| v.parse::<f64>().ok()) {
        f.family(
            "node_zswap_accept_threshold_percent",
            "gauge",
            "zswap accepts pages again below this percent of its limit.",
            &[(vec![], v)],
        );
    }
    if let Some(c) = param("compressor") {
        f.family(
            "node_zswap_info",
            "gauge",
            "zswap information (value is always 1).",
            &[(vec![("compressor", c.as_str())], 1.0)],
        );
    }
    if let Some(v) = zs.pool_bytes {
        f.family(
            "node_memory_Zswap_bytes",
            "gauge",
            "Memory information field Zswap_bytes (compressed pool size).",
            &[(vec![], v as f64)],
        );
    }
    if let Some(v) = zs.stored_bytes {
        f.family(
            "node_memory_Zswapped_bytes",
            "gauge",
            "Memory information field Zswapped_bytes (uncompressed size stored).",
            &[(vec![], v as f64)],
        );
    }
    for (name, value) in [
        ("zswpin", zs.zswpin),
        ("zswpout", zs.zswpout),
        ("zswpwb", zs.zswpwb),
    ] {
        if let Some(v) = value {
            f.family(
                &format!("node_vmstat_{name}"),
                "untyped",
                &format!("/proc/vmstat information field {name}."),
                &[(vec![], v as f64)],
            );
        }
    }
    let debugfs_readable = matches!(zs.debugfs, DebugfsCounters::Readable { .. });
    f.family(
        "node_zswap_debugfs_readable",
        "gauge",
        "1 when zswap's debugfs counters could be read (needs root and debugfs).",
        &[(vec![], if debugfs_readable { 1.0 } else { 0.0 })],
    );
    if let DebugfsCounters::Readable { counters } = &zs.debugfs {
        for (name, value) in counters {
            let metric = format!("node_zswap_{}", sanitize_name(name));
            f.family(
                &metric,
                "untyped",
                &format!("zswap debugfs counter {name}."),
                &[(vec![], *value as f64)],
            );
        }
    }

    // Swap areas.
    let swaps = |pick: fn(&crate::procfs::SwapArea) -> f64| -> Vec<(Vec<(&str, &str)>, f64)> {
        snapshot
            .swaps
            .iter()
            .map(|s| {
                (
                    vec![("device", s.path.as_str()), ("type", s.kind.as_str())],
                    pick(s),
                )
            })
            .collect()
    };
    f.family(
        "node_swap_size_bytes",
        "gauge",
        "Size of the swap area (/proc/swaps).",
        &swaps(|s| s.size_bytes as f64),
    );
    f.family(
        "node_swap_used_bytes",
        "gauge",
        "Used part of the swap area (/proc/swaps).",
        &swaps(|s| s.used_bytes as f64),
    );
    f.family(
        "node_swap_priority",
        "gauge",
        "Priority of the swap area; higher is used first.",
        &swaps(|s| f64::from(s.priority)),
    );
    if let Some(v) = snapshot.swap_total_bytes {
        f.family(
            "node_memory_SwapTotal_bytes",
            "gauge",
            "Memory information field SwapTotal_bytes.",
            &[(vec![], v as f64)],
        );
    }
    if let Some(v) = snapshot.swap_free_bytes {
        f.family(
            "node_memory_SwapFree_bytes",
            "gauge",
            "Memory information field SwapFree_bytes.",
            &[(vec![], v as f64)],
        );
    }

    // Sysctls and pressure.
    for (name, value) in &snapshot.sysctls {
        if let Ok(v) = value.parse::<f64>() {
            let metric = format!("node_sysctl_{}", sanitize_name(name));
            f.family(&metric, "gauge", &format!("sysctl {name}."), &[(vec![], v)]);
        }
    }
    if let Some(p) = &snapshot.memory_pressure {
        f.family(
            "node_pressure_memory_waiting_seconds_total",
            "counter",
            "Total time in seconds that processes have waited for memory.",
            &[(vec![], p.some.total_us as f64 / 1e6)],
        );
        f.family(
            "node_pressure_memory_stalled_seconds_total",
            "counter",
            "Total time in seconds no process could make progress due to memory congestion.",
            &[(vec![], p.full.total_us as f64 / 1e6)],
        );
    }
    out
}

/// Metrics files (`*.prom`) that zpage regions or other programs drop into
/// `dir`, node_exporter textfile-collector style: appended to every scrape.
/// Files that do not parse are skipped with a comment; at most 100 files of
/// 1 MiB each are read.
pub fn textfile_metrics(dir: &std::path::Path) -> String {
    let mut out = String::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return format!(
            "# zpage: textfile directory {} is not readable\n",
            dir.display()
        );
    };
    let mut files: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "prom"))
        .collect();
    files.sort();
    for path in files.into_iter().take(100) {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.len() > 1 << 20 {
            let _ = writeln!(
                out,
                "# zpage: skipped {} (larger than 1 MiB)",
                path.display()
            );
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => match validate_text_format(&text) {
                Ok(_) => {
                    out.push_str(&text);
                    if !text.ends_with('\n') {
                        out.push('\n');
                    }
                }
                Err(e) => {
                    let _ = writeln!(
                        out,
                        "# zpage: skipped {}: {}",
                        path.display(),
                        e.replace('\n', " ")
                    );
                }
            },
            Err(e) => {
                let _ = writeln!(out, "# zpage: skipped {}: {e}", path.display());
            }
        }
    }
    out
}

/// A bounded exporter server.
pub struct Exporter {
    listener: TcpListener,
    extra: Option<ExtraMetrics>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

const MAX_REQUEST_BYTES: usize = 8192;
const IO_TIMEOUT: Duration = Duration::from_secs(5);

impl Exporter {
    /// Binds `address` (e.g. [`DEFAULT_LISTEN`]; port 0 picks a free port).
    pub fn bind(address: &str) -> Result<Exporter> {
        let listener = TcpListener::bind(address).map_err(|e| KernelError::Command {
            command: format!("listen on {address}"),
            detail: e.to_string(),
            fix: "pick another address with --listen (e.g. 127.0.0.1:9587)".into(),
        })?;
        Ok(Exporter {
            listener,
            extra: None,
        })
    }

    /// Adds metrics from another source (e.g. zpage regions) to every scrape.
    pub fn with_extra(mut self, extra: ExtraMetrics) -> Exporter {
        self.extra = Some(extra);
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        self.listener
            .local_addr()
            .map_err(|e| KernelError::io("socket", "get the local address", e))
    }

    /// Serves requests one at a time until `stop` is set or `max_requests`
    /// were answered. Each connection has a 5 s timeout and an 8 KiB request cap.
    pub fn serve(&self, max_requests: Option<u64>, stop: &AtomicBool) -> Result<u64> {
        self.listener
            .set_nonblocking(true)
            .map_err(|e| KernelError::io("socket", "set non-blocking", e))?;
        let mut served = 0u64;
        while !stop.load(Ordering::Relaxed) && max_requests.is_none_or(|m| served < m) {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // A misbehaving client only costs its own connection.
                    let _ = self.handle(stream);
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(KernelError::io("socket", "accept", e)),
            }
        }
        Ok(served)
    }

    fn handle(&self, mut stream: TcpStream) -> std::io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut request = Vec::new();
        let mut buffer = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n")
            && !request.windows(2).any(|w| w == b"\n\n")
        {
            let n = stream.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buffer[..n]);
            if request.len() > MAX_REQUEST_BYTES {
                return respond(
                    &mut stream,
                    "431 Request Header Fields Too Large",
                    "text/plain",
                    "request too large\n",
                    true,
                );
            }
        }
        let text = String::from_utf8_lossy(&request);
        let mut words = text.lines().next().unwrap_or("").split_whitespace();
        let method = words.next().unwrap_or("");
        let path = words.next().unwrap_or("");
        let with_body = method != "HEAD";
        match (method, path.split('?').next().unwrap_or("")) {
            ("GET" | "HEAD", "/metrics") => {
                let mut body = render(&status::collect());
                if let Some(extra) = &self.extra {
                    body.push_str(&extra());
                }
                respond(&mut stream, "200 OK", CONTENT_TYPE, &body, with_body)
            }
            ("GET" | "HEAD", "/") => respond(&mut stream, "200 OK", "text/html", "<html><body><h1>zpage exporter</h1><a href=\"/metrics\">Metrics</a></body></html>\n", with_body),
            ("GET" | "HEAD", _) => respond(&mut stream, "404 Not Found", "text/plain", "not found: try /metrics\n", with_body),
            _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", "only GET and HEAD\n", true),
        }
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
    with_body: bool,
) -> std::io::Result<()> {
    let header = format!("HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    stream.write_all(header.as_bytes())?;
    if with_body {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// Checks text against the exposition format: metric and label names,
/// label quoting, values, and HELP/TYPE lines that precede their samples.
/// Returns the number of samples.
pub fn validate_text_format(text: &str) -> std::result::Result<usize, String> {
    fn valid_name(name: &str) -> bool {
        let mut chars = name.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    let mut typed = std::collections::HashMap::new();
    let mut samples = 0;
    for (n, line) in text.lines().enumerate() {
        let at = |msg: &str| format!("line {}: {msg}: {line}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !valid_name(name)
                        || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
                    {
                        return Err(at("bad TYPE"));
                    }
                    if typed.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(at("second TYPE for the same metric"));
                    }
                }
                (Some("HELP"), Some(name), _) if !valid_name(name) => {
                    return Err(at("bad HELP name"))
                }
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name_and_labels, value) = match line.rfind('}') {
            Some(close) => (&line[..=close], line[close + 1..].trim()),
            None => {
                let mut parts = line.splitn(2, ' ');
                (
                    parts.next().unwrap_or(""),
                    parts.next().unwrap_or("").trim(),
                )
            }
        };
        let name = name_and_labels.split('{').next().unwrap_or("");
        if !valid_name(name) {
            return Err(at("bad metric name"));
        }
        if let Some(labels) = name_and_labels
            .strip_prefix(name)
            .and_then(|l| l.strip_prefix('{'))
            .and_then(|l| l.strip_suffix('}'))
        {
            let mut rest = labels;
            while !rest.is_empty() {
                let eq = rest.find('=').ok_or_else(|| at("label without ="))?;
                if !valid_name(&rest[..eq]) || !rest[eq + 1..].starts_with('"') {
                    return Err(at("bad label"));
                }
                let mut end = None;
                let mut escaped = false;
                for (i, c) in rest[eq + 2..].char_indices() {
                    match c {
                        '\\' if !escaped => escaped = true,
                        '"' if !escaped => {
                            end = Some(eq + 2 + i);
                            break;
                        }
                        _ => escaped = false,
                    }
                }
                let end = end.ok_or_else(|| at("unterminated label value"))?;
                rest = rest[end + 1..]
                    .strip_prefix(',')
                    .unwrap_or(&rest[end + 1..]);
            }
        }
        let value = value.split(' ').next().unwrap_or("");
        if value.parse::<f64>().is_err() && !["NaN", "+Inf", "-Inf"].contains(&value) {
            return Err(at("bad value"));
        }
        if !typed.contains_key(name) && !typed.keys().any(|t| name.starts_with(t.as_str())) {
            return Err(at("sample before its TYPE line"));
        }
        samples += 1;
    }
    Ok(samples)
}
