//! The Redis tier: sealed blobs as values in a Redis server or a Redis
//! Cluster, so the cold pages of many processes (or machines) share one
//! store that already exists, is already monitored and may be replicated.
//!
//! **Where it connects.** [`RedisConfig::url`] is either a Redis URL as the
//! `redis` crate and `redis-cli -u` take it (`redis://[user@]host:port[/db]`,
//! `rediss://...` for TLS, `redis+unix:///path/to/socket`) for one server, or
//! `redis+cluster://[user@]host1:port1,host2:port2,...` for a
//! cluster: any reachable subset of its nodes (the rest are learned from
//! `CLUSTER SLOTS`).
//!
//! **Passwords** ([`RedisConfig::password`]) come from a private file or
//! the environment (module `redis_auth`); one written in the URL
//! (`redis://:PASSWORD@host`) is taken out of it before the URL is used, and
//! every message shows `***` in its place.
//!
//! **TLS.** `rediss://` connects with rustls, checking the server's
//! certificate against the system's certificate store (`/etc/ssl/certs`,
//! or `SSL_CERT_FILE`), or against [`RedisTls::ca_file`] when given (a
//! private CA, as most Redis TLS set-ups use); a client certificate and key
//! can be given for servers that ask for one. There is no way to skip the
//! check (`rediss://...#insecure` is refused).
//!
//! **Keys.** `zpage:<namespace>:<reference>`, both in hex; the namespace is
//! 64 random bits drawn when the tier is made, so two processes (or two
//! tiers of one process) sharing a server never touch each other's keys. No
//! hash tag is used on purpose: the whole key is hashed, so a process's pages
//! spread over every slot and every node of a cluster instead of all landing
//! on one. Values are sealed blobs (the compressed page and its 16-byte tag):
//! whoever can read the server sees ciphertext, and a value modified,
//! swapped with another, or replayed from an older write of the same page
//! fails its check on the way back (see module `seal`).
//!
//! **What stays here.** The index (reference to page, version and length)
//! lives in this process; without it, and without the per-process key, the
//! values cannot be opened. So a process's pages are garbage once it exits:
//! dropping the tier deletes its keys, but a process that is killed leaves
//! them behind (`redis-cli --scan --pattern 'zpage:*'` finds them; the
//! namespace is in the tier's description). A key file
//! ([`KeySource::File`]) does not change that: the index is still per
//! process.
//!
//! **A node that is down.** Every command has a timeout (connect and
//! response, [`RedisConfig::timeout`]): a dead server turns into a failed
//! `put` (the caller keeps the page in RAM; the tier says once that it is
//! down and is retried after `retry_interval`) or a [`ReadFailure::Unavailable`]
//! `get` (the caller reports the page lost), never a hang and never wrong
//! bytes. A server that comes back empty (restarted without persistence)
//! answers with no value: [`ReadFailure::Missing`]. In a cluster only the
//! pages whose slots the dead node served are affected, provided the nodes
//! run with `cluster-require-full-coverage no` (with the default `yes`, a
//! cluster missing one master refuses every key, so every page is lost).
//! What the caller does with a lost page: a region ends the process
//! naming the page, but only when the program touches one of
//! those pages; everything else keeps running.
//!
//! **Replicas and failover.** A cluster whose masters have replicas loses
//! nothing it had replicated when a master dies. For `cluster-node-timeout`
//! plus the election (the replica waits half a second to a second more,
//! then asks the other masters for their votes) the dead master's slots
//! have no server: reads of its pages fail with
//! [`ReadFailure::Unavailable`], each within about twice the tier's timeouts
//! (see below), and writes to its slots fail (the pages stay in RAM; the
//! tier is retried after `retry_interval`). Once the replica is promoted,
//! the same pages read back exact through the same tier. The `redis` crate
//! refreshes its slot map when a node answers `MOVED`, which a killed
//! master never does, so a cluster connection that fails below the protocol
//! (refused, timed out, dropped) is closed and the command tried once more
//! on a new one, which reads `CLUSTER SLOTS` afresh and finds the promoted
//! replica. A page reported lost during the election is only lost for the
//! caller that asked then: the tier forgets nothing. A region cannot wait
//! out an election (a faulting thread needs the bytes now): touching such
//! a page during it ends the process, so keep `cluster-node-timeout` short
//! where regions write back to a cluster.
//!
//! **Writes acknowledged but not replicated.** Redis replicates
//! asynchronously: a `SET` is acknowledged once the master has it, before
//! its replica does. A master that dies in between takes those values with
//! it; after the failover their pages read back as [`ReadFailure::Missing`]
//! (reported lost, as above), never as wrong bytes: every write is a new
//! key, and a value from another write fails its seal. The tier does not
//! send `WAIT` after its writes: it would cost a round trip to the replica
//! for every page written back, and even `WAIT` does not make Redis lose
//! nothing in a failover (with several replicas, one without the write may
//! still be elected). To bound the loss, run the masters with
//! `min-replicas-to-write 1` and `min-replicas-max-lag SECONDS`: a master
//! whose replica has not acknowledged for that long refuses writes (the
//! tier takes it as down; the pages stay in RAM).
//!
//! **Reads are not async-signal-safe**: the client allocates and the
//! connection pool takes locks, so [`Tier::reads_are_async_signal_safe`] is
//! false. A region hands such reads to a zpage thread (see the region crate).
//!
//! **Full.** A server at its `maxmemory` with the `noeviction` policy
//! answers `OOM`: the `put` fails with [`TierError::Full`] and the page stays
//! in RAM. A server with an evicting policy (`allkeys-lru`, ...) drops values
//! silently and they read back as [`ReadFailure::Missing`]: give zpage's keys
//! a server (or database) with `noeviction`.

use crate::health::Health;
use crate::redis_auth::{self, RedisPassword, RedisTls, CLUSTER_SCHEME};
use crate::seal::{KeySource, Sealer};
use crate::stats::{Counters, TierStats};
use crate::{ReadFailure, Tier, TierError, TierRef, READ_BUFFER_BYTES, TAG_BYTES};
use ::redis::{ConnectionLike, IntoConnectionInfo};
use parking_lot::Mutex;
use rand::RngCore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Where and how a [`RedisTier`] connects. Its `Debug` shows the URL with
/// any password in it replaced.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://host:port[/db]`, `rediss://host:port[/db]`,
    /// `redis+unix:///socket`, or `redis+cluster://host1:port1,host2:port2,...`
    /// (see the module docs). A password in it is taken out and used as
    /// [`RedisConfig::password`] (give it in one place only).
    pub url: String,
    /// The password (`AUTH`), from a file or the environment.
    pub password: Option<RedisPassword>,
    /// Certificate files for `rediss://`.
    pub tls: RedisTls,
    /// The key the blobs are sealed with.
    pub key: KeySource,
    /// Bound on connecting and on each command's response: past it the
    /// node counts as down.
    pub timeout: Duration,
    /// How long a tier that failed waits before writes try it again.
    pub retry_interval: Duration,
    /// Connections kept open (each carries one command at a time).
    pub connections: usize,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redis_auth::redact_url(&self.url))
            .field("password", &self.password)
            .field("tls", &self.tls)
            .field("key", &self.key)
            .field("timeout", &self.timeout)
            .field("retry_interval", &self.retry_interval)
            .field("connections", &self.connections)
            .finish()
    }
}

impl RedisConfig {
    /// A tier at `url` with a per-process key, a 500 ms timeout, a one-second
    /// retry and four connections.
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            password: None,
            tls: RedisTls::default(),
            key: KeySource::Ephemeral,
            timeout: Duration::from_millis(500),
            retry_interval: Duration::from_secs(1),
            connections: 4,
        }
    }

    /// Checks the URL, the password's placement and the TLS files without
    /// connecting: the errors [`RedisTier::new`] would return.
    pub fn validate(&self) -> Result<(), TierError> {
        build_client(self).map(|_| ())
    }

    /// Whether `text` names a Redis tier (rather than a file or device).
    pub fn is_redis_url(text: &str) -> bool {
        [
            "redis://",
            "rediss://",
            "redis+unix://",
            "unix://",
            CLUSTER_SCHEME,
            redis_auth::TLS_CLUSTER_SCHEME,
        ]
        .iter()
        .any(|scheme| text.starts_with(scheme))
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    page: u64,
    version: u64,
    sealed_len: u32,
}

enum Client {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

enum Connection {
    Single(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Connection {
    fn link(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Connection::Single(c) => c,
            Connection::Cluster(c) => &mut **c,
        }
    }
}

/// Sealed blobs in Redis or a Redis Cluster. See the module documentation.
pub struct RedisTier {
    config: RedisConfig,
    describe: String,
    namespace: u64,
    client: Client,
    connections: Box<[Mutex<Option<Connection>>]>,
    next_connection: AtomicUsize,
    sealer: Sealer,
    index: Mutex<HashMap<u64, Entry>>,
    next_ref: AtomicU64,
    /// References freed and not yet deleted on the server (deleted in batches).
    pending_frees: Mutex<Vec<u64>>,
    health: Health,
    backing_bytes: AtomicU64,
    counters: Counters,
}

impl std::fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTier")
            .field("describe", &self.describe)
            .field("pages", &self.counters.pages.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// Frees are deleted on the server in pipelines of this many.
const FREE_BATCH: usize = 64;

fn invalid(why: String) -> TierError {
    TierError::InvalidConfig(why)
}

/// The client `config` names, and its URL as printed (the password, from
/// wherever it came, shown as `***`).
fn build_client(config: &RedisConfig) -> Result<(Client, String), TierError> {
    let split = redis_auth::split_password(&config.url)?;
    let password = match (split.password, &config.password) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "the Redis password is given twice, in the URL and apart: give it once, and not in the URL (`ps` shows it)".into(),
            ))
        }
        (Some(in_url), None) => Some(in_url),
        (None, apart) => apart.clone(),
    };
    let shown = redis_auth::show(&split.url, password.is_some());
    let tls = split.url.starts_with("rediss://");
    if tls && split.url.contains('#') {
        return Err(invalid(format!(
            "{shown}: the server's certificate is always checked (no #insecure): give the CA that signed it as the TLS CA file"
        )));
    }
    if config.tls.any() && !tls {
        return Err(invalid(format!(
            "{shown}: TLS certificate files are given but the URL is not rediss:// (TLS)"
        )));
    }
    if let Some(rest) = split.url.strip_prefix(CLUSTER_SCHEME) {
        let (user, hosts) = match rest.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, rest),
        };
        let hosts = hosts.trim_end_matches('/');
        let seeds: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(|host| format!("redis://{host}"))
            .collect();
        if seeds.is_empty() {
            return Err(invalid(format!(
                "{shown}: name at least one node, as in {CLUSTER_SCHEME}10.0.0.1:7000,10.0.0.2:7000"
            )));
        }
        let mut builder = redis::cluster::ClusterClientBuilder::new(seeds)
            .connection_timeout(config.timeout)
            .response_timeout(config.timeout)
            // A node that does not answer is a lost page now, not after
            // rounds of back-off: the caller keeps or reports the page.
            .retries(1)
            .min_retry_wait(10)
            .max_retry_wait(50);
        if let Some(user) = user {
            let user = percent_encoding::percent_decode_str(user).decode_utf8_lossy();
            builder = builder.username(user);
        }
        if let Some(password) = &password {
            builder = builder.password(password.expose());
        }
        let client = builder
            .build()
            .map_err(|e| invalid(format!("{shown}: {e}")))?;
        Ok((Client::Cluster(client), shown))
    } else {
        let bad_url = |e: redis::RedisError| {
            invalid(format!(
                "{shown}: {e} (give redis://HOST:PORT[/DB], rediss://HOST:PORT[/DB], redis+unix:///PATH or {CLUSTER_SCHEME}HOST:PORT,HOST:PORT,...)"
            ))
        };
        let mut info = split.url.as_str().into_connection_info().map_err(bad_url)?;
        if let Some(password) = &password {
            let settings = info
                .redis_settings()
                .clone()
                .set_password(password.expose());
            info = info.set_redis_settings(settings);
        }
        let client = if config.tls.any() {
            redis::Client::build_with_tls(info, config.tls.certificates()?).map_err(bad_url)?
        } else {
            redis::Client::open(info).map_err(bad_url)?
        };
        Ok((Client::Single(client), shown))
    }
}

fn redis_io(error: &redis::RedisError) -> std::io::Error {
    std::io::Error::other(error.to_string())
}

impl RedisTier {
    /// A Redis tier. A URL that cannot be parsed is an error; a server that
    /// cannot be reached is not: the tier starts down, says why on standard
    /// error, and is retried on later writes (pages stay in memory).
    pub fn new(config: RedisConfig) -> Result<RedisTier, TierError> {
        if config.connections == 0 || config.connections > 256 {
            return Err(invalid(format!(
                "connections is {}: give 1 to 256",
                config.connections
            )));
        }
        if config.timeout.is_zero() {
            return Err(invalid(
                "timeout is 0: give the longest a command may take (e.g. 500 ms)".into(),
            ));
        }
        let (client, shown_url) = build_client(&config)?;
        let namespace = rand::rngs::OsRng.next_u64();
        let kind = match client {
            Client::Single(_) => "redis",
            Client::Cluster(_) => "redis cluster",
        };
        let describe = format!("{kind} {shown_url} (keys zpage:{namespace:016x}:*)");
        let tier = RedisTier {
            sealer: Sealer::new(&config.key)?,
            health: Health::new(&describe, config.retry_interval),
            describe,
            namespace,
            client,
            connections: (0..config.connections).map(|_| Mutex::new(None)).collect(),
            next_connection: AtomicUsize::new(0),
            index: Mutex::new(HashMap::new()),
            next_ref: AtomicU64::new(1),
            pending_frees: Mutex::new(Vec::new()),
            backing_bytes: AtomicU64::new(0),
            counters: Counters::default(),
            config,
        };
        // Learn now whether the server is there, so a wrong address is said
        // at start rather than at the first writeback.
        if let Err(error) = tier.with_connection(|c| redis::cmd("PING").query::<String>(c.link())) {
            tier.health.failed(&tier.command_error("connect", &error));
        }
        Ok(tier)
    }

    /// The server key of `tier_ref`.
    pub fn key_of(&self, tier_ref: TierRef) -> String {
        self.key(tier_ref.to_raw())
    }

    fn key(&self, raw: u64) -> String {
        format!("zpage:{:016x}:{raw:x}", self.namespace)
    }

    fn connect(&self) -> redis::RedisResult<Connection> {
        match &self.client {
            Client::Single(client) => {
                let connection = client.get_connection_with_timeout(self.config.timeout)?;
                connection.set_read_timeout(Some(self.config.timeout))?;
                connection.set_write_timeout(Some(self.config.timeout))?;
                Ok(Connection::Single(connection))
            }
            Client::Cluster(client) => Ok(Connection::Cluster(Box::new(client.get_connection()?))),
        }
    }

    /// Runs `f` on one of the pooled connections, connecting first when it
    /// has none. A connection that failed below the protocol (refused, timed
    /// out, dropped) is closed, so the next use connects again: a stream
    /// cut mid-reply must not hand the next command a stale answer.
    ///
    /// A cluster connection that failed so is also tried once more, on a
    /// new one: the `redis` crate refreshes its slot map when a node answers
    /// `MOVED`, but a master that died never answers, so after its replica
    /// is promoted the old connection would keep sending that master's slots
    /// to a dead address. A new connection reads `CLUSTER SLOTS` afresh: the
    /// first read after a failover finds the promoted replica, and during the
    /// failover the read fails as before, after at most twice the timeouts.
    fn with_connection<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        let n = self.connections.len();
        let start = self.next_connection.fetch_add(1, Relaxed);
        let mut guard = (0..n)
            .find_map(|i| self.connections[(start + i) % n].try_lock())
            .unwrap_or_else(|| self.connections[start % n].lock());
        let mut fresh = false;
        loop {
            if guard.is_none() {
                *guard = Some(self.connect()?);
                fresh = true;
            }
            let connection = guard.as_mut().expect("connected above");
            let result = f(connection);
            let Err(error) = &result else {
                return result;
            };
            let broken = error.is_io_error()
                || error.is_timeout()
                || error.is_connection_dropped()
                || error.is_connection_refusal();
            if !broken {
                return result;
            }
            let cluster = matches!(connection, Connection::Cluster(_));
            *guard = None;
            if !cluster || fresh {
                return result;
            }
        }
    }

    fn command_error(&self, action: &'static str, error: &redis::RedisError) -> TierError {
        if error.code() == Some("OOM") {
            return TierError::Full {
                tier: self.describe.clone(),
                capacity_bytes: 0,
            };
        }
        TierError::Io {
            tier: self.describe.clone(),
            action,
            source: redis_io(error),
        }
    }

    fn try_put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError> {
        self.health.may_try()?;
        let raw = self.next_ref.fetch_add(1, Relaxed);
        let tier_ref = TierRef::from_raw(raw).ok_or(TierError::VersionsExhausted)?;
        let mut sealed = Vec::with_capacity(blob.len() + TAG_BYTES);
        let version = self.sealer.seal(page, blob, &mut sealed)?;
        let key = self.key(raw);
        self.with_connection(|c| redis::cmd("SET").arg(&key).arg(&sealed).exec(c.link()))
            .map_err(|e| self.command_error("SET", &e))?;
        self.index.lock().insert(
            raw,
            Entry {
                page,
                version,
                sealed_len: sealed.len() as u32,
            },
        );
        self.backing_bytes.fetch_add(sealed.len() as u64, Relaxed);
        Ok(tier_ref)
    }

    /// Deletes the freed keys waiting in the batch (a pipeline of `UNLINK`s;
    /// a cluster pipeline sends each to its node). Best effort: a key on a
    /// node that is down stays there (its page was freed all the same).
    fn flush_frees(&self) {
        let raws = std::mem::take(&mut *self.pending_frees.lock());
        if raws.is_empty() {
            return;
        }
        let _ = self.with_connection(|c| match c {
            Connection::Single(connection) => {
                let mut pipe = redis::pipe();
                for &raw in &raws {
                    pipe.cmd("UNLINK").arg(self.key(raw)).ignore();
                }
                pipe.exec(connection)
            }
            Connection::Cluster(connection) => {
                let mut pipe = redis::cluster::cluster_pipe();
                for &raw in &raws {
                    pipe.cmd("UNLINK").arg(self.key(raw)).ignore();
                }
                pipe.exec(connection)
            }
        });
    }

    fn read(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure> {
        let raw = tier_ref.to_raw();
        let entry = *self.index.lock().get(&raw).ok_or(ReadFailure::Stale)?;
        if entry.page != page {
            return Err(ReadFailure::Stale);
        }
        if buf.len() < entry.sealed_len as usize {
            return Err(ReadFailure::BufferTooSmall);
        }
        let key = self.key(raw);
        let value: Option<Vec<u8>> = self
            .with_connection(|c| redis::cmd("GET").arg(&key).query(c.link()))
            .map_err(|_| ReadFailure::Unavailable)?;
        let value = value.ok_or(ReadFailure::Missing)?;
        // Longer than any blob, or than this one: not what was written.
        if value.len() > READ_BUFFER_BYTES || value.len() > buf.len() {
            return Err(ReadFailure::Authentication);
        }
        let dst = &mut buf[..value.len()];
        dst.copy_from_slice(&value);
        self.sealer.open(page, entry.version, dst)
    }
}

impl Tier for RedisTier {
    fn describe(&self) -> &str {
        &self.describe
    }

    fn put(&self, page: u64, blob: &[u8]) -> Result<TierRef, TierError> {
        let result = self
            .counters
            .accounted_put(&self.health, blob, || self.try_put(page, blob));
        if result.is_ok() && self.pending_frees.lock().len() >= FREE_BATCH {
            self.flush_frees();
        }
        result
    }

    fn get(&self, tier_ref: TierRef, page: u64, buf: &mut [u8]) -> Result<usize, ReadFailure> {
        let started = Instant::now();
        let result = self.read(tier_ref, page, buf);
        match result {
            Ok(_) => self.counters.count_get(started.elapsed().as_nanos() as u64),
            Err(failure) => self.counters.count_read_failure(failure),
        }
        result
    }

    fn free(&self, tier_ref: TierRef) {
        let raw = tier_ref.to_raw();
        let Some(entry) = self.index.lock().remove(&raw) else {
            return;
        };
        self.backing_bytes
            .fetch_sub(u64::from(entry.sealed_len), Relaxed);
        self.counters.count_free(u64::from(entry.sealed_len));
        let batch_full = {
            let mut pending = self.pending_frees.lock();
            pending.push(raw);
            pending.len() >= FREE_BATCH
        };
        if batch_full {
            self.flush_frees();
        }
    }

    fn stats(&self) -> TierStats {
        let down_cause = self.health.down_cause();
        TierStats {
            backing_bytes: self.backing_bytes.load(Relaxed),
            available: down_cause.is_none(),
            down_cause,
            ..TierStats::from_counters(&self.counters)
        }
    }

    fn reads_are_async_signal_safe(&self) -> bool {
        false
    }

    fn maintain(&self) {
        self.flush_frees();
    }
}

impl Drop for RedisTier {
    /// Deletes every key this tier still holds: nobody else can open them.
    fn drop(&mut self) {
        let live: Vec<u64> = self.index.lock().keys().copied().collect();
        for chunk in live.chunks(1024) {
            self.pending_frees.lock().extend_from_slice(chunk);
            self.flush_frees();
        }
        self.flush_frees();
    }
}
