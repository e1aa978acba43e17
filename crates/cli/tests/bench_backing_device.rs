//! `zpage bench --backing /dev/loopN`: a block device smaller than the
//! tier's bound, or in use, is refused before the run; a free one large
//! enough holds the pages written back. Loop devices are machine state: the
//! test runs as root with ZPAGE_TEST_KERNEL_STATE=1, under the machine-wide
//! lock, and detaches what it attached.

use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;
use zpage_testsupport::TempDir;

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

fn bench(backing: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_zpage"))
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
        .output()
        .unwrap()
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
    let output = bench(&small.0);
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
    let output = bench(&device.0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("is in use"), "{stderr}");
    drop(held);

    let output = bench(&device.0);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let random = rows
        .iter()
        .find(|r| r["tier"] == "zpage" && r["pattern"] == "random-read")
        .unwrap_or_else(|| panic!("no zpage random-read row in {rows:?}"));
    assert!(random["backing_bytes"].as_u64().unwrap() > 0, "{random}");
    assert!(random["tier_reads"].as_u64().unwrap() > 0, "{random}");
}
