//! A redis-server workload with real text and checked answers: load N bytes
//! of text values (windows of this machine's own text files, e.g. under
//! `/usr/share` and `/usr/include`), read every key back and compare,
//! record `DEBUG DIGEST`, `BGSAVE` while reading and load the RDB into a
//! second server to check it has the same digest, then time GETs at
//! uniform random keys. The server runs under any command prefix (plain,
//! `zpage run ...`), or in kernel mode through [`zpage_kernel::run`], or is
//! one already running.
//!
//! Values are not kept in memory: value `i` is a window of the text corpus
//! chosen by a seeded hash of `i`, so the checker regenerates it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use zpage_kernel::run::{KernelRun, RunOptions, RunOutcome};

use crate::histogram::LatencyHistogram;
use crate::rng::{mix64, SplitMix64};
use crate::workload::Observer;
use crate::BenchError;

/// Keys per pipelined batch when loading and reading back.
const BATCH: u64 = 500;
/// Tells the scratch directories of runs in one process apart.
static RUN_SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
/// Largest text file read into the corpus.
const MAX_TEXT_FILE: u64 = 8 << 20;

/// The text values are cut from.
#[derive(Debug)]
pub struct TextCorpus {
    text: Vec<u8>,
    files: usize,
}

/// What the corpus was made of.
#[derive(Clone, Debug, Serialize)]
pub struct CorpusInfo {
    /// Directories searched.
    pub roots: Vec<PathBuf>,
    /// Text files read.
    pub files: usize,
    /// Bytes of text.
    pub bytes: u64,
}

fn looks_like_text(head: &[u8]) -> bool {
    if head.is_empty() || head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        // A multi-byte character cut at the end of the sample is still text.
        Err(e) => e.error_len().is_none() && e.valid_up_to() + 4 >= head.len(),
    }
}

impl TextCorpus {
    /// Reads text files under `roots` (sorted, so the same machine gives the
    /// same corpus) until `cap_bytes`: regular files of at most 8 MiB whose
    /// first 4 KiB are UTF-8 without NUL bytes; compressed files are skipped.
    pub fn gather(roots: &[PathBuf], cap_bytes: u64) -> Result<TextCorpus, BenchError> {
        let mut corpus = TextCorpus {
            text: Vec::new(),
            files: 0,
        };
        let mut stack: Vec<PathBuf> = roots.iter().rev().cloned().collect();
        while let Some(path) = stack.pop() {
            if corpus.text.len() as u64 >= cap_bytes {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                let Ok(entries) = std::fs::read_dir(&path) else {
                    continue;
                };
                let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                children.sort();
                stack.extend(children.into_iter().rev());
                continue;
            }
            let compressed = path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
                matches!(
                    e,
                    "gz" | "xz" | "bz2" | "zst" | "lz4" | "zip" | "png" | "jpg"
                )
            });
            if !meta.is_file() || compressed || meta.len() < 64 || meta.len() > MAX_TEXT_FILE {
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            if !looks_like_text(&bytes[..bytes.len().min(4096)]) || bytes.contains(&0) {
                continue;
            }
            let room = (cap_bytes as usize).saturating_sub(corpus.text.len());
            corpus
                .text
                .extend_from_slice(&bytes[..bytes.len().min(room)]);
            corpus.files += 1;
        }
        if corpus.text.len() < 1 << 20 {
            return Err(BenchError::Invalid(format!(
                "found only {} bytes of text under {}: give --text-from a directory with at least 1 MiB of plain text files",
                corpus.text.len(),
                roots
                    .iter()
                    .map(|r| r.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(corpus)
    }

    /// Bytes of text.
    pub fn len(&self) -> usize {
        self.text.len()
    }

    /// True when no text was found.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// Which value goes with which key: key `i` holds a window of the corpus
/// whose place and length (half to one and a half times the mean) come
/// from a seeded hash of `i`.
#[derive(Debug)]
pub struct ValuePlan<'a> {
    corpus: &'a TextCorpus,
    seed: u64,
    mean_value_bytes: usize,
    /// Number of keys.
    pub keys: u64,
}

impl<'a> ValuePlan<'a> {
    /// Enough keys for `data_bytes` of values of `mean_value_bytes` on average.
    pub fn new(
        corpus: &'a TextCorpus,
        data_bytes: u64,
        mean_value_bytes: usize,
        seed: u64,
    ) -> Result<Self, BenchError> {
        if mean_value_bytes < 2 {
            return Err(BenchError::Invalid(
                "--value-size must be at least 2 bytes".into(),
            ));
        }
        if corpus.len() < mean_value_bytes * 4 {
            return Err(BenchError::Invalid(format!(
                "the text corpus ({} bytes) is too small for values of {mean_value_bytes} bytes: give a smaller --value-size or more text",
                corpus.len()
            )));
        }
        Ok(ValuePlan {
            corpus,
            seed,
            mean_value_bytes,
            keys: (data_bytes / mean_value_bytes as u64).max(1),
        })
    }

    /// Key `index`'s name.
    pub fn key(&self, index: u64) -> String {
        format!("zpage:{index:010}")
    }

    /// Key `index`'s value.
    pub fn value(&self, index: u64) -> &'a [u8] {
        let hash = mix64(self.seed ^ index.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        let half = self.mean_value_bytes / 2;
        let len = half + (hash % (self.mean_value_bytes as u64 + 1)) as usize;
        let start = ((hash >> 20) % (self.corpus.len() - len) as u64) as usize;
        &self.corpus.text[start..start + len]
    }
}

/// Where the server comes from.
#[derive(Clone, Debug)]
pub enum ServerSource {
    /// Start this command (a redis-server, maybe behind a prefix such as
    /// `zpage run --budget 256M --`); the driver appends the server's own
    /// options (socket, directory, no persistence, DEBUG allowed).
    Start(Vec<String>),
    /// Start this command in kernel mode: a memory cgroup limited to the
    /// options' budget, swapping to compressed swap.
    StartInKernelMode(Vec<String>, RunOptions),
    /// Use a running server at this URL (`redis://HOST:PORT`,
    /// `unix:///PATH`); its database must be empty, and it must allow DEBUG.
    Connect(String),
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RedisBenchOptions {
    /// The server.
    pub server: ServerSource,
    /// redis-server binary for the second server that loads the RDB.
    pub redis_server: PathBuf,
    /// Bytes of values to load.
    pub data_bytes: u64,
    /// Mean value size.
    pub mean_value_bytes: usize,
    /// Directories the text comes from.
    pub text_roots: Vec<PathBuf>,
    /// At most this much text is read.
    pub corpus_cap_bytes: u64,
    /// Timed GETs at uniform random keys.
    pub get_requests: u64,
    /// Seed of the values and of the GET keys.
    pub seed: u64,
    /// Directory for the socket, the RDB and the server logs (a fresh
    /// subdirectory is made and removed).
    pub scratch_dir: PathBuf,
    /// A label for the report ("no budget", "kernel zram-lz4 256M" ...).
    pub label: String,
    /// BGSAVEs in all (at least one): the first while the values are read
    /// back, the others one after another once the timed GETs are done;
    /// each RDB is loaded into a plain server and its digest compared.
    pub bgsaves: u32,
}

/// The BGSAVE check.
#[derive(Clone, Debug, Serialize)]
pub struct BgsaveCheck {
    /// Seconds from BGSAVE to its end (reads went on meanwhile).
    pub seconds: f64,
    /// Size of the RDB file.
    pub rdb_bytes: u64,
    /// Keys in the server that loaded the RDB.
    pub loaded_keys: u64,
    /// That server's DEBUG DIGEST.
    pub loaded_digest: String,
}

/// The timed GETs.
#[derive(Clone, Debug, Serialize)]
pub struct GetFigures {
    /// GETs done (one at a time, each checked).
    pub requests: u64,
    /// Their wall time.
    pub seconds: f64,
    /// GETs per second.
    pub ops_per_sec: f64,
    /// Median latency (microseconds).
    pub p50_us: f64,
    /// 99th percentile latency (microseconds).
    pub p99_us: f64,
    /// Slowest (microseconds).
    pub max_us: f64,
}

/// Everything one run measured and checked.
#[derive(Clone, Debug, Serialize)]
pub struct RedisReport {
    /// The run's label.
    pub label: String,
    /// The server command (or URL).
    pub server: String,
    /// Where the values' text came from.
    pub corpus: CorpusInfo,
    /// Keys loaded.
    pub keys: u64,
    /// Bytes of values loaded.
    pub value_bytes: u64,
    /// Seconds to load them (pipelined SETs).
    pub load_seconds: f64,
    /// Keys read back (pipelined GETs) and compared.
    pub verified_keys: u64,
    /// Keys whose value read back wrong or missing (read-back and timed GETs).
    pub wrong_values: u64,
    /// First few wrong keys.
    pub wrong_examples: Vec<String>,
    /// DEBUG DIGEST after loading.
    pub digest: String,
    /// DEBUG DIGEST after every read (must equal `digest`).
    pub digest_after_reads: String,
    /// The BGSAVE taken while reading back, loaded into a second server.
    pub bgsave: BgsaveCheck,
    /// The BGSAVEs after it (`RedisBenchOptions::bgsaves` less one), each
    /// loaded and checked the same way.
    pub later_bgsaves: Vec<BgsaveCheck>,
    /// Timed GETs at uniform random keys.
    pub get: GetFigures,
    /// INFO memory's used_memory_peak (the server's own accounting).
    pub server_used_memory_peak_bytes: u64,
    /// INFO memory's used_memory_rss at the end.
    pub server_rss_bytes: u64,
    /// Kernel mode's figures, when the server ran in kernel mode.
    pub kernel: Option<RunOutcome>,
}

impl RedisReport {
    /// Every value read back right and the digests (live, after reads, RDB) agree.
    pub fn passed(&self) -> bool {
        self.wrong_values == 0
            && self.verified_keys == self.keys
            && self.digest == self.digest_after_reads
            && std::iter::once(&self.bgsave)
                .chain(&self.later_bgsaves)
                .all(|b| b.loaded_digest == self.digest && b.loaded_keys == self.keys)
    }
}

fn redis_error(what: &str, e: redis::RedisError) -> BenchError {
    BenchError::Invalid(format!("redis: {what}: {e}"))
}

/// A server the driver started, stopped on drop.
enum Server {
    Plain(Child),
    Kernel(Box<KernelRun>),
    External,
}

impl Server {
    fn kill(&mut self) {
        match self {
            Server::Plain(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Server::Kernel(run) => {
                let _ = run.child_mut().kill();
            }
            Server::External => {}
        }
    }

    fn exited(&mut self) -> bool {
        match self {
            Server::Plain(child) => !matches!(child.try_wait(), Ok(None)),
            Server::Kernel(run) => run.poll().unwrap_or(true),
            Server::External => false,
        }
    }
}

/// A scratch directory removed on drop.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn server_args(dir: &Path, socket: &Path, rdb: &str) -> Vec<String> {
    [
        "--port",
        "0",
        "--unixsocket",
        &socket.display().to_string(),
        "--dir",
        &dir.display().to_string(),
        "--dbfilename",
        rdb,
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "yes",
        "--daemonize",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join(" | ")
}

/// Connects to `url`, retrying for up to a minute while the server starts.
fn connect(
    url: &str,
    server: &mut Server,
    log: Option<&Path>,
) -> Result<redis::Connection, BenchError> {
    let client = redis::Client::open(url).map_err(|e| redis_error("bad server URL", e))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.get_connection() {
            Ok(mut connection) => {
                match redis::cmd("PING").query::<String>(&mut connection) {
                    Ok(_) => return Ok(connection),
                    // Still loading an RDB: wait.
                    Err(e) if e.to_string().to_ascii_lowercase().contains("loading") => {}
                    Err(e) => return Err(redis_error("PING", e)),
                }
            }
            Err(e) if Instant::now() > deadline => {
                return Err(redis_error("the server did not answer within a minute", e))
            }
            Err(_) => {}
        }
        if server.exited() {
            return Err(BenchError::Invalid(format!(
                "the redis server ended before answering; its log: {}",
                log.map(log_tail).unwrap_or_default()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start(command: &[String], extra: &[String], log: &Path) -> Result<Child, BenchError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| BenchError::Invalid("empty server command".into()))?;
    let log_file = std::fs::File::create(log).map_err(|e| BenchError::io(log, "create", e))?;
    let log_err = log_file
        .try_clone()
        .map_err(|e| BenchError::io(log, "open", e))?;
    Command::new(program)
        .args(args)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(|e| {
            BenchError::Invalid(format!(
                "cannot start {program:?}: {e}: install redis-server (Debian: apt-get install redis-server) or give its path"
            ))
        })
}

fn info_field(connection: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(connection).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn digest(connection: &mut redis::Connection) -> Result<String, BenchError> {
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(connection)
        .map_err(|e| {
            redis_error(
                "DEBUG DIGEST (a server started elsewhere needs `enable-debug-command yes`)",
                e,
            )
        })
}

/// Records a wrong value.
fn wrong(report_examples: &mut Vec<String>, key: &str, got: &Option<Vec<u8>>) {
    if report_examples.len() < 5 {
        report_examples.push(match got {
            None => format!("{key}: missing"),
            Some(v) => format!("{key}: {} bytes, not the value written", v.len()),
        });
    }
}

/// Runs the whole workload; see the module docs. Returns the report even
/// when a check failed (see [`RedisReport::passed`]); errors are for a run
/// that could not be carried out.
pub fn run_redis_bench(
    options: &RedisBenchOptions,
    observer: &mut dyn Observer,
) -> Result<RedisReport, BenchError> {
    let corpus = TextCorpus::gather(&options.text_roots, options.corpus_cap_bytes)?;
    let plan = ValuePlan::new(
        &corpus,
        options.data_bytes,
        options.mean_value_bytes,
        options.seed,
    )?;
    let work = WorkDir(options.scratch_dir.join(format!(
        "zpage-redis-{}-{}",
        std::process::id(),
        RUN_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )));
    std::fs::create_dir_all(&work.0).map_err(|e| BenchError::io(&work.0, "create", e))?;
    let socket = work.0.join("redis.sock");
    let log = work.0.join("server.log");
    let rdb_name = "bench.rdb";
    let extra = server_args(&work.0, &socket, rdb_name);
    let socket_url = format!("unix://{}", socket.display());
    let (mut server, url, server_text) = match &options.server {
        ServerSource::Start(command) => (
            Server::Plain(start(command, &extra, &log)?),
            socket_url,
            command.join(" "),
        ),
        ServerSource::StartInKernelMode(command, run_options) => {
            let (program, args) = command
                .split_first()
                .ok_or_else(|| BenchError::Invalid("empty server command".into()))?;
            let log_file =
                std::fs::File::create(&log).map_err(|e| BenchError::io(&log, "create", e))?;
            let log_err = log_file
                .try_clone()
                .map_err(|e| BenchError::io(&log, "open", e))?;
            let mut server_command = Command::new(program);
            server_command
                .args(args)
                .args(&extra)
                .stdin(Stdio::null())
                .stdout(log_file)
                .stderr(log_err);
            let run = KernelRun::start(server_command, run_options)?;
            (
                Server::Kernel(Box::new(run)),
                socket_url,
                format!(
                    "kernel mode {} budget {} MiB: {}",
                    run_options.backend.name(),
                    run_options.budget_bytes >> 20,
                    command.join(" ")
                ),
            )
        }
        ServerSource::Connect(url) => (Server::External, url.clone(), url.clone()),
    };
    let result = drive(
        options,
        &plan,
        &mut server,
        &url,
        &log,
        &work.0,
        rdb_name,
        observer,
    );
    let mut report = match result {
        Ok(report) => report,
        Err(e) => {
            server.kill();
            return Err(e);
        }
    };
    report.server = server_text;
    report.corpus = CorpusInfo {
        roots: options.text_roots.clone(),
        files: corpus.files,
        bytes: corpus.len() as u64,
    };
    // Stop the server and collect kernel mode's figures.
    match server {
        Server::External => {}
        Server::Plain(mut child) => {
            child
                .wait()
                .map_err(|e| BenchError::io(&log, "wait for the server of", e))?;
        }
        Server::Kernel(run) => report.kernel = Some(run.wait()?),
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn drive(
    options: &RedisBenchOptions,
    plan: &ValuePlan<'_>,
    server: &mut Server,
    url: &str,
    log: &Path,
    work: &Path,
    rdb_name: &str,
    observer: &mut dyn Observer,
) -> Result<RedisReport, BenchError> {
    let mut connection = connect(url, server, Some(log))?;
    let existing: u64 = redis::cmd("DBSIZE")
        .query(&mut connection)
        .map_err(|e| redis_error("DBSIZE", e))?;
    if existing != 0 {
        return Err(BenchError::Invalid(format!(
            "the server already holds {existing} keys: give an empty server (the check compares digests of exactly what was loaded)"
        )));
    }

    // Load.
    observer.phase_started("load", plan.keys);
    let started = Instant::now();
    let mut value_bytes = 0u64;
    let mut index = 0;
    while index < plan.keys {
        let end = (index + BATCH).min(plan.keys);
        let mut pipe = redis::pipe();
        for i in index..end {
            let value = plan.value(i);
            value_bytes += value.len() as u64;
            pipe.cmd("SET").arg(plan.key(i)).arg(value).ignore();
        }
        pipe.query::<()>(&mut connection)
            .map_err(|e| redis_error("SET", e))?;
        index = end;
        observer.progress(index);
        if crate::stop_requested() {
            return Err(BenchError::Interrupted);
        }
    }
    let load_seconds = started.elapsed().as_secs_f64();
    observer.phase_finished("load");
    let digest_after_load = digest(&mut connection)?;

    // BGSAVE, then read everything back while the snapshot is written.
    let bgsave_started = Instant::now();
    let _: String = redis::cmd("BGSAVE")
        .query(&mut connection)
        .map_err(|e| redis_error("BGSAVE", e))?;
    let mut wrong_values = 0u64;
    let mut wrong_examples = Vec::new();
    let mut verified_keys = 0u64;
    observer.phase_started("read back", plan.keys);
    let mut index = 0;
    while index < plan.keys {
        let end = (index + BATCH).min(plan.keys);
        let mut pipe = redis::pipe();
        for i in index..end {
            pipe.cmd("GET").arg(plan.key(i));
        }
        let values: Vec<Option<Vec<u8>>> = pipe
            .query(&mut connection)
            .map_err(|e| redis_error("GET", e))?;
        for (i, got) in (index..end).zip(values.iter()) {
            verified_keys += 1;
            if got.as_deref() != Some(plan.value(i)) {
                wrong_values += 1;
                wrong(&mut wrong_examples, &plan.key(i), got);
            }
        }
        index = end;
        observer.progress(index);
        if crate::stop_requested() {
            return Err(BenchError::Interrupted);
        }
    }
    observer.phase_finished("read back");

    // Timed GETs at uniform random keys, one at a time.
    let mut histogram = LatencyHistogram::new();
    let mut rng = SplitMix64::new(options.seed ^ 0x6E7);
    observer.phase_started("random GET", options.get_requests);
    let get_started = Instant::now();
    for n in 0..options.get_requests {
        let i = rng.below(plan.keys);
        let key = plan.key(i);
        let t = Instant::now();
        let got: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&key)
            .query(&mut connection)
            .map_err(|e| redis_error("GET", e))?;
        histogram.record(t.elapsed().as_nanos() as u64);
        if got.as_deref() != Some(plan.value(i)) {
            wrong_values += 1;
            wrong(&mut wrong_examples, &key, &got);
        }
        if n % 1024 == 0 {
            observer.progress(n);
            if crate::stop_requested() {
                return Err(BenchError::Interrupted);
            }
        }
    }
    let get_seconds = get_started.elapsed().as_secs_f64();
    observer.phase_finished("random GET");

    // The snapshot must be complete and good.
    wait_for_bgsave(&mut connection, log)?;
    let bgsave_seconds = bgsave_started.elapsed().as_secs_f64();
    let digest_after_reads = digest(&mut connection)?;
    // The first RDB is kept aside while the later BGSAVEs overwrite it.
    let first_rdb = work.join("first.rdb");
    let path = rdb_path_of(&*server, &mut connection, work, rdb_name)?;
    std::fs::copy(&path, &first_rdb).map_err(|e| BenchError::io(&path, "copy the RDB", e))?;
    let mut later_bgsaves = Vec::new();
    for n in 2..=options.bgsaves {
        let phase = format!("BGSAVE {n}");
        observer.phase_started(&phase, 1);
        let started = Instant::now();
        let _: String = redis::cmd("BGSAVE")
            .query(&mut connection)
            .map_err(|e| redis_error("BGSAVE", e))?;
        wait_for_bgsave(&mut connection, log)?;
        let seconds = started.elapsed().as_secs_f64();
        let path = rdb_path_of(&*server, &mut connection, work, rdb_name)?;
        let (rdb_bytes, loaded_keys, loaded_digest) =
            load_in_plain_server(options, &path, work, &format!("check{n}"), rdb_name)?;
        later_bgsaves.push(BgsaveCheck {
            seconds,
            rdb_bytes,
            loaded_keys,
            loaded_digest,
        });
        observer.phase_finished(&phase);
    }
    let used_memory_peak = info_field(&mut connection, "memory", "used_memory_peak")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rss = info_field(&mut connection, "memory", "used_memory_rss")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if !matches!(server, Server::External) {
        // Stop our server now: the second one should not compete with it for memory.
        let _ = redis::cmd("SHUTDOWN")
            .arg("NOSAVE")
            .query::<()>(&mut connection);
    }
    // A second, plain server loads the first RDB.
    let (rdb_bytes, loaded_keys, loaded_digest) =
        load_in_plain_server(options, &first_rdb, work, "check", rdb_name)?;

    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(RedisReport {
        label: options.label.clone(),
        server: String::new(),
        corpus: CorpusInfo {
            roots: Vec::new(),
            files: 0,
            bytes: 0,
        },
        keys: plan.keys,
        value_bytes,
        load_seconds,
        verified_keys,
        wrong_values,
        wrong_examples,
        digest: digest_after_load,
        digest_after_reads,
        bgsave: BgsaveCheck {
            seconds: bgsave_seconds,
            rdb_bytes,
            loaded_keys,
            loaded_digest,
        },
        later_bgsaves,
        get: GetFigures {
            requests: options.get_requests,
            seconds: get_seconds,
            ops_per_sec: options.get_requests as f64 / get_seconds.max(1e-9),
            p50_us: us(histogram.percentile_ns(0.50)),
            p99_us: us(histogram.percentile_ns(0.99)),
            max_us: us(histogram.max_ns()),
        },
        server_used_memory_peak_bytes: used_memory_peak,
        server_rss_bytes: rss,
        kernel: None,
    })
}

/// Waits for the BGSAVE in progress to end (an hour at most) and checks
/// it succeeded.
fn wait_for_bgsave(connection: &mut redis::Connection, log: &Path) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let in_progress = info_field(connection, "persistence", "rdb_bgsave_in_progress");
        if in_progress.as_deref() == Some("0") {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Invalid(
                "BGSAVE did not finish within an hour".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = info_field(connection, "persistence", "rdb_last_bgsave_status");
    if status.as_deref() != Some("ok") {
        return Err(BenchError::Invalid(format!(
            "BGSAVE failed (rdb_last_bgsave_status {status:?}); the server log: {}",
            log_tail(log)
        )));
    }
    Ok(())
}

/// Where the server writes its RDB: ours, or the running server's own.
fn rdb_path_of(
    server: &Server,
    connection: &mut redis::Connection,
    work: &Path,
    rdb_name: &str,
) -> Result<PathBuf, BenchError> {
    if !matches!(server, Server::External) {
        return Ok(work.join(rdb_name));
    }
    let dir: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dir")
        .query(connection)
        .map_err(|e| redis_error("CONFIG GET dir", e))?;
    let file: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("dbfilename")
        .query(connection)
        .map_err(|e| redis_error("CONFIG GET dbfilename", e))?;
    Ok(Path::new(dir.get(1).map_or("", String::as_str))
        .join(file.get(1).map_or("", String::as_str)))
}

/// Loads a copy of the RDB at `rdb` into a plain server of its own (in
/// `work/subdir`); returns the RDB's size, the keys loaded and the digest.
fn load_in_plain_server(
    options: &RedisBenchOptions,
    rdb: &Path,
    work: &Path,
    subdir: &str,
    rdb_name: &str,
) -> Result<(u64, u64, String), BenchError> {
    let rdb_bytes = std::fs::metadata(rdb)
        .map_err(|e| BenchError::io(rdb, "stat the RDB", e))?
        .len();
    let check_dir = work.join(subdir);
    std::fs::create_dir_all(&check_dir).map_err(|e| BenchError::io(&check_dir, "create", e))?;
    std::fs::copy(rdb, check_dir.join(rdb_name))
        .map_err(|e| BenchError::io(rdb, "copy the RDB", e))?;
    let check_socket = check_dir.join("redis.sock");
    let check_log = check_dir.join("server.log");
    let mut checker = Server::Plain(start(
        &[options.redis_server.display().to_string()],
        &server_args(&check_dir, &check_socket, rdb_name),
        &check_log,
    )?);
    let check_url = format!("unix://{}", check_socket.display());
    let checked = (|| {
        let mut check = connect(&check_url, &mut checker, Some(&check_log))?;
        let loaded_keys: u64 = redis::cmd("DBSIZE")
            .query(&mut check)
            .map_err(|e| redis_error("DBSIZE", e))?;
        let loaded_digest = digest(&mut check)?;
        let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut check);
        Ok::<_, BenchError>((loaded_keys, loaded_digest))
    })();
    checker.kill();
    let _ = std::fs::remove_dir_all(&check_dir);
    let (loaded_keys, loaded_digest) = checked?;
    Ok((rdb_bytes, loaded_keys, loaded_digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus_of(text: &str) -> TextCorpus {
        TextCorpus {
            text: text.as_bytes().repeat(4096),
            files: 1,
        }
    }

    #[test]
    fn values_are_windows_of_the_text_and_reproducible() {
        let corpus = corpus_of("The quick brown fox jumps over the lazy dog. ");
        let plan = ValuePlan::new(&corpus, 1 << 20, 1000, 7).unwrap();
        assert_eq!(plan.keys, 1048);
        let mut total = 0;
        for i in 0..plan.keys {
            let value = plan.value(i);
            assert!((500..=1500).contains(&value.len()), "{}", value.len());
            assert_eq!(value, plan.value(i));
            assert!(std::str::from_utf8(value).is_ok());
            total += value.len();
        }
        // The mean is about what was asked for.
        assert!((900_000..1_200_000).contains(&total), "{total}");
        let other = ValuePlan::new(&corpus, 1 << 20, 1000, 8).unwrap();
        assert!((0..50).any(|i| plan.value(i) != other.value(i)));
        assert_eq!(plan.key(42), "zpage:0000000042");
    }

    #[test]
    fn tells_text_from_binary() {
        assert!(looks_like_text(b"hello, world\n"));
        assert!(looks_like_text("naïve café".as_bytes()));
        assert!(!looks_like_text(b"ELF\0\x01\x02"));
        assert!(!looks_like_text(&[
            0xff, 0xfe, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46
        ]));
        assert!(!looks_like_text(b""));
    }

    #[test]
    fn too_little_text_is_an_error_naming_the_fix() {
        let dir = std::env::temp_dir().join(format!("zpage-redis-corpus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("a.txt"),
            "a little text, not a megabyte\n".repeat(10),
        )
        .unwrap();
        let error = TextCorpus::gather(std::slice::from_ref(&dir), 64 << 20)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--text-from"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
        let corpus = TextCorpus::gather(&[PathBuf::from("/usr/share")], 2 << 20).unwrap();
        assert!(corpus.len() >= 1 << 20 && corpus.files > 0);
        assert!(ValuePlan::new(&corpus, 1 << 20, 1, 1).is_err());
    }
}
