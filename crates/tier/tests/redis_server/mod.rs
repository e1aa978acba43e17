//! Real `redis-server` processes for tests: started on loopback on free
//! ports in a temporary directory, killed when dropped (also when the test
//! fails). Shared by the tier, store and region tests (`#[path]`-included).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use zpage_testsupport::TempDir;

/// Whether `redis-server` (and `redis-cli`, for clusters) can run here; when
/// not, the test is skipped, saying so (a failure on CI, which installs
/// both).
pub fn available(test: &str) -> bool {
    zpage_testsupport::installed(test, "redis-server", "redis-server")
        && zpage_testsupport::installed(test, "redis-cli", "redis-tools")
}

/// A port whose cluster bus port (port + 10000) is free too.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// One `redis-server` on 127.0.0.1.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without persistence in `dir`, with `extra` options.
    pub fn start(dir: &TempDir, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            dir: dir.0.clone(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.restart();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let log = self.dir.join(format!("redis-{}.log", self.port));
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(["--logfile", log.to_str().unwrap()])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).unwrap();
        let started = Instant::now();
        loop {
            let pong = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            // A server started with `requirepass` answers too, refusing.
            let refused = pong
                .as_ref()
                .is_err_and(|e| e.code() == Some("NOAUTH") || e.code() == Some("WRONGPASS"));
            if pong.is_ok() || refused {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not answer; see {}",
                self.port,
                log.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it was started and not killed since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, as a crashed node.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A plain connection, for inspecting and tampering with the data.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster on loopback, every node serving its slots even while
/// another is down (`cluster-require-full-coverage no`), with a one-second
/// `cluster-node-timeout` so a failover takes a few seconds.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// Every wait on the cluster gives up (the test fails) after this long.
const CLUSTER_DEADLINE: Duration = Duration::from_secs(30);

/// One field of an `INFO` reply (`field:value` lines).
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_string())
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < CLUSTER_DEADLINE,
            "{what}: not reached after {CLUSTER_DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl RedisCluster {
    /// `masters` masters without replicas.
    pub fn start(dir: &TempDir, masters: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(dir, masters, 0)
    }

    /// `masters` masters with `replicas` replicas each (`redis-cli --cluster
    /// create --cluster-replicas`), returned once every node says
    /// `cluster_state:ok` and every replica holds all its master has.
    pub fn start_with_replicas(dir: &TempDir, masters: usize, replicas: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|i| {
                let conf = format!("nodes-{i}-{}.conf", rand::random::<u32>());
                RedisServer::start(
                    dir,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &conf,
                        "--cluster-node-timeout",
                        "1000",
                        "--cluster-require-full-coverage",
                        "no",
                    ],
                )
            })
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| n.address()))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_state_ok();
        if replicas > 0 {
            wait_until("every master has its replicas", || {
                cluster.masters().len() == masters
                    && cluster
                        .masters()
                        .iter()
                        .all(|&m| cluster.replicas_of(m).len() == replicas)
            });
            cluster.wait_replicated();
        }
        cluster
    }

    fn live(&self) -> impl Iterator<Item = (usize, &RedisServer)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.is_running())
    }

    /// `INFO section` of node `i`.
    pub fn info(&self, i: usize, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.nodes[i].connection())
            .unwrap()
    }

    /// Waits until every running node says `cluster_state:ok`.
    pub fn wait_state_ok(&self) {
        wait_until("cluster_state:ok on every running node", || {
            self.live().all(|(_, n)| {
                redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut n.connection())
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
        });
    }

    /// The running nodes that are masters, by index.
    pub fn masters(&self) -> Vec<usize> {
        self.live()
            .filter(|&(i, _)| {
                info_field(&self.info(i, "replication"), "role").as_deref() == Some("master")
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The running replicas of node `master`, by index (whether or not their
    /// link to it is up).
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let port = self.nodes[master].port.to_string();
        self.live()
            .filter(|&(i, _)| {
                let info = self.info(i, "replication");
                info_field(&info, "role").as_deref() == Some("slave")
                    && info_field(&info, "master_port").as_deref() == Some(port.as_str())
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Waits until every replica of every running master has its link up
    /// and has processed the master's whole replication stream as it was
    /// when the wait began (`master_repl_offset` on the master, then
    /// `slave_repl_offset` on the replica). Offsets rather than `WAIT`:
    /// `WAIT` only covers the writes of the connection that sends it, and
    /// the writes to check were made by the tier's own connections.
    pub fn wait_replicated(&self) {
        for master in self.masters() {
            let target: u64 = info_field(&self.info(master, "replication"), "master_repl_offset")
                .and_then(|v| v.parse().ok())
                .expect("master_repl_offset");
            for replica in self.replicas_of(master) {
                wait_until(
                    &format!(
                        "replica on port {} caught up with offset {target} of port {}",
                        self.nodes[replica].port, self.nodes[master].port
                    ),
                    || {
                        let info = self.info(replica, "replication");
                        info_field(&info, "master_link_status").as_deref() == Some("up")
                            && info_field(&info, "slave_repl_offset")
                                .and_then(|v| v.parse::<u64>().ok())
                                .is_some_and(|offset| offset >= target)
                    },
                );
            }
        }
    }

    /// Waits until node `node` is a master serving exactly `slots`, as every
    /// running node sees it, and the cluster is ok again.
    pub fn wait_serves(&self, node: usize, slots: &[(u16, u16)]) {
        wait_until(
            &format!(
                "port {} serves {slots:?} on every node",
                self.nodes[node].port
            ),
            || {
                self.live()
                    .all(|(i, _)| self.slots_as_seen_by(i, node) == slots)
            },
        );
        self.wait_state_ok();
    }

    /// `redis+cluster://h1:p1,h2:p2,...`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| n.address()).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The slot ranges node `i` serves.
    pub fn slots_of(&self, i: usize) -> Vec<(u16, u16)> {
        self.slots_as_seen_by(i, i)
    }

    /// The slot ranges node `server` serves according to node `asked`.
    pub fn slots_as_seen_by(&self, asked: usize, server: usize) -> Vec<(u16, u16)> {
        let port = self.nodes[server].port;
        let Ok(slots) = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut self.nodes[asked].connection())
        else {
            return Vec::new();
        };
        let mut ranges = Vec::new();
        for range in slots {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                redis::from_redis_value_ref::<u16>(&fields[0]),
                redis::from_redis_value_ref::<u16>(&fields[1]),
            ) else {
                continue;
            };
            let redis::Value::Array(master) = &fields[2] else {
                continue;
            };
            if redis::from_redis_value_ref::<u16>(&master[1]).ok() == Some(port) {
                ranges.push((start, end));
            }
        }
        ranges.sort_unstable();
        ranges
    }

    /// The slot of `key`, asked of node `i`.
    pub fn slot_of(connection: &mut redis::Connection, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(connection)
            .unwrap()
    }
}
