//! `zpage bench --backing ...`: the region writes its oldest compressed
//! pages back to a real `redis-server` (one, then a three-node cluster,
//! then one with `requirepass`) started on loopback, or to a block device;
//! every checked touch reads the right bytes, and the JSON rows report the
//! bytes held below RAM and the tier's read latency. The Redis password
//! works from the environment, is refused from a file others may read, is
//! warned about in the URL, and never shows on stderr or in the report.
//! What cannot hold pages (/dev/null, a directory, a block device too small
//! or in use) is refused before the run. Skipped, with a message, where
//! redis-server is not installed; the block device test needs root and
//! ZPAGE_TEST_KERNEL_STATE=1.

#[path = "../../tier/tests/redis_server/mod.rs"]
mod redis_server;

use redis_server::{available, RedisCluster, RedisServer, TempDir};
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

/// `zpage bench` on a small replay with `--backing`, as a command to run.
fn bench_command(backing: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zpage"));
    command
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
        .env_remove("ZPAGE_REDIS_PASSWORD");
    command
}

/// The rows of a run that must succeed.
fn rows_of(output: std::process::Output) -> Vec<serde_json::Value> {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn bench_json(backing: &str, scratch: &TempDir) -> Vec<serde_json::Value> {
    rows_of(
        bench_command(backing)
            .arg("--scratch-dir")
            .arg(&scratch.0)
            .output()
            .unwrap(),
    )
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
    let output = bench_command("redis+cluster://").output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("redis+cluster://"), "{stderr}");
}

const PASSWORD: &str = "correct-horse-battery-staple";

#[test]
fn a_redis_password_works_from_the_environment_or_a_file_and_never_shows() {
    if !available("bench --backing redis with a password") {
        return;
    }
    let dir = TempDir::new("bench-auth");
    let server = RedisServer::start(&dir, &["--requirepass", PASSWORD]);
    let url = server.url();

    // From the environment: the run writes back, nothing says the password.
    let output = bench_command(&url)
        .env("ZPAGE_REDIS_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    check_rows(
        &rows_of(output),
        "redis with a password from the environment",
    );

    // From a file others may read: refused before anything runs.
    let file = dir.0.join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let output = bench_command(&url)
        .arg("--backing-password-file")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // In the URL: accepted, warned about, and shown as *** everywhere.
    let in_url = format!("redis://:{PASSWORD}@127.0.0.1:{}", server.port);
    let report = dir.0.join("report.html");
    let output = bench_command(&in_url)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("`ps` shows it"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");
    assert!(!String::from_utf8_lossy(&output.stdout).contains(PASSWORD));
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains(":***@127.0.0.1"), "the report names the tier");
    assert!(!html.contains(PASSWORD), "the report holds the password");

    // In the URL and the environment: refused, naming neither.
    let output = bench_command(&in_url)
        .env("ZPAGE_REDIS_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("give it once"), "{stderr}");
    assert!(!stderr.contains(PASSWORD), "{stderr}");

    // A wrong password in the URL: the "tier is down" line shows the URL
    // with *** for the password.
    let wrong = format!("{PASSWORD}-wrong");
    let mut child = bench_command(&format!("redis://:{wrong}@127.0.0.1:{}", server.port))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("is down") {
                break;
            }
        }
        seen
    });
    let started = std::time::Instant::now();
    while !lines.is_finished() && started.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let seen = lines.join().unwrap();
    assert!(
        seen.contains("is down") && seen.contains(":***@127.0.0.1"),
        "{seen}"
    );
    assert!(!seen.contains(&wrong), "{seen}");
}

#[test]
fn backings_that_cannot_hold_pages_are_refused_before_the_run() {
    let dir = TempDir::new("bench-backing-kinds");
    for (backing, says) in [
        ("/dev/null", "character device"),
        ("/dev/zero", "character device"),
        (dir.0.to_str().unwrap(), "is a directory"),
    ] {
        let started = std::time::Instant::now();
        let output = bench_command(backing).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{backing}: {stderr}");
        assert!(stderr.contains(says), "{backing}: {stderr}");
        // Refused at once, not at the first read-back.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{backing}"
        );
        assert!(!stderr.contains("zpage bench: data"), "{backing}: {stderr}");
    }
}

/// A loop device over a sparse file, detached when dropped.
struct Loop(String);

impl Loop {
    fn attach(dir: &TempDir, name: &str, bytes: u64) -> Loop {
        let file = dir.0.join(name);
        std::fs::File::create(&file)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let output = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Loop(String::from_utf8(output.stdout).unwrap().trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn block_devices_too_small_or_in_use_are_refused_and_a_free_one_holds_pages() {
    if !zpage_kernel::kernel_state_tests_enabled(
        "block_devices_too_small_or_in_use_are_refused_and_a_free_one_holds_pages",
    ) {
        return;
    }
    if !zpage_testsupport::installed("loop devices", "losetup", "mount") {
        return;
    }
    let _lock = zpage_kernel::KernelStateLock::acquire();
    let dir = TempDir::new("bench-loop");
    // The bound for 16 MiB of data is 16 + 2 + 8 MiB.
    let small = Loop::attach(&dir, "small", 16 << 20);
    let output = bench_command(&small.0).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("holds 16777216 bytes, less than"),
        "{stderr}"
    );

    let device = Loop::attach(&dir, "device", 64 << 20);
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&device.0)
        .unwrap();
    let output = bench_command(&device.0).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("is in use"), "{stderr}");
    drop(held);

    check_rows(
        &rows_of(bench_command(&device.0).output().unwrap()),
        "a free block device",
    );
}
