//! `zpage bench --backing redis://...` and `--backing redis+cluster://...`:
//! the region writes its oldest compressed pages back to a real
//! `redis-server` (one, then a three-node cluster) started on loopback, every
//! checked touch reads the right bytes, and the JSON rows report the bytes
//! held in Redis and the tier's read latency. Skipped, with a message,
//! where redis-server is not installed.

#[path = "../../tier/tests/redis_server/mod.rs"]
mod redis_server;

use redis_server::{available, RedisCluster, RedisServer, TempDir};
use std::process::Command;

fn bench_json(backing: &str, scratch: &TempDir) -> Vec<serde_json::Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args([
            "bench",
            "--size",
            "16M",
            "--budget",
            "4M",
            "--pool-max",
            "1M",
        ])
        .args(["--backing", backing, "--phases", "random-read"])
        .args([
            "--touches",
            "2000",
            "--workload",
            "replay",
            "--no-fifo",
            "--json",
        ])
        .arg("--scratch-dir")
        .arg(&scratch.0)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn check_rows(rows: &[serde_json::Value], what: &str) {
    let random = rows
        .iter()
        .find(|r| r["tier"] == "zpage" && r["pattern"] == "random-read")
        .unwrap_or_else(|| panic!("{what}: no zpage random-read row in {rows:?}"));
    assert!(
        random["backing_bytes"].as_u64().unwrap() > 0,
        "{what}: {random}"
    );
    assert!(
        random["tier_reads"].as_u64().unwrap() > 0,
        "{what}: {random}"
    );
    assert!(
        random["tier_read_mean_us"].as_f64().unwrap() > 0.0,
        "{what}: {random}"
    );
}

#[test]
fn bench_writes_back_to_redis_and_to_a_redis_cluster() {
    if !available("bench --backing redis") {
        return;
    }
    let dir = TempDir::new("bench");
    let server = RedisServer::start(&dir, &[]);
    check_rows(&bench_json(&server.url(), &dir), "redis");
    let cluster = RedisCluster::start(&dir, 3);
    check_rows(&bench_json(&cluster.url(), &dir), "redis cluster");
    // The run's tier deleted its keys when it was dropped.
    for node in &cluster.nodes {
        let keys: u64 = redis::cmd("DBSIZE").query(&mut node.connection()).unwrap();
        assert_eq!(keys, 0, "node {} kept keys after the run", node.port);
    }
    drop(cluster);
    // A URL without a node is refused with the syntax to use.
    let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args([
            "bench",
            "--size",
            "8M",
            "--budget",
            "2M",
            "--pool-max",
            "1M",
        ])
        .args(["--backing", "redis+cluster://", "--workload", "replay"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("redis+cluster://"), "{stderr}");
}
