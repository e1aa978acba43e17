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
fn free_port() -> u16 {
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
            if pong.is_ok() {
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

/// A Redis Cluster of masters without replicas on loopback, every node
/// serving its slots even while another is down
/// (`cluster-require-full-coverage no`).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(dir: &TempDir, masters: usize) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..masters)
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
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        let started = Instant::now();
        while !cluster.nodes.iter().all(|n| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut n.connection())
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        }) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// `redis+cluster://h1:p1,h2:p2,...`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| n.address()).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The slot ranges node `i` serves.
    pub fn slots_of(&self, i: usize) -> Vec<(u16, u16)> {
        let port = self.nodes[i].port;
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.nodes[i].connection())
            .unwrap();
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
