//! `zpage analyze` from the outside: outputs, and the errors a user meets.

use std::path::PathBuf;
use std::process::{Command, Output};
use zpage_testsupport::TempDir;

fn zpage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(args)
        .output()
        .expect("the zpage binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// 64 pages: 8 zero pages, then text with a little noise.
fn write_image(dir: &TempDir, extra_bytes: usize) -> PathBuf {
    let mut bytes = vec![0u8; 8 * 4096];
    for i in 0..56 * 4096usize {
        bytes.push(if i % 97 == 0 {
            (i / 97) as u8
        } else {
            b"zpage text "[i % 11]
        });
    }
    bytes.extend(std::iter::repeat_n(1u8, extra_bytes));
    let path = dir.0.join("image.bin");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn json_report_has_the_documented_fields() {
    let dir = TempDir::new("cli-json");
    let image = write_image(&dir, 0);
    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--json",
        "--codec",
        "lz4",
        "--codec",
        "zstd:-1",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["schema"], "zpage-analyze/1");
    assert_eq!(report["pages"], 64);
    assert_eq!(report["same_filled_pages"], 8);
    assert_eq!(report["codecs"].as_array().unwrap().len(), 2);
    assert_eq!(report["codecs"][1]["name"], "zstd");
    assert_eq!(report["codecs"][1]["level"], -1);
    assert_eq!(report["pools"].as_array().unwrap().len(), 6);
    assert_eq!(report["sources"][0]["kind"], "file");
}

#[test]
fn csv_and_human_output() {
    let dir = TempDir::new("cli-csv");
    let image = write_image(&dir, 0);
    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--csv",
        "--codec",
        "lz4",
        "--pool",
        "zsmalloc",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("codec,level,compress_MiB/s,"), "{text}");
    assert!(!text.contains("pool,codec"), "one table per CSV: {text}");
    assert!(
        !text.contains(" KiB") && !text.contains(" MiB"),
        "raw numbers: {text}"
    );
    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--csv",
        "pools",
        "--codec",
        "lz4",
        "--pool",
        "zsmalloc",
    ]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.starts_with("pool,codec,memory_used_bytes,"), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");

    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--codec",
        "lz4",
        "--classes",
    ]);
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("same-filled pages: 8"), "{text}");
    assert!(text.contains("obj_allocated"), "per-class table: {text}");
}

#[test]
fn a_partial_last_page_is_skipped_with_a_warning() {
    let dir = TempDir::new("cli-partial");
    let image = write_image(&dir, 1000);
    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--json",
        "--codec",
        "lz4",
    ]);
    assert!(output.status.success());
    assert!(
        stderr(&output).contains("skipping the last 1000 bytes"),
        "{}",
        stderr(&output)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["sources"][0]["skipped_bytes"], 1000);
    assert_eq!(report["pages"], 64);
}

#[test]
fn bad_input_fails_with_errors_that_name_the_problem() {
    let dir = TempDir::new("cli-errors");
    let missing = dir.0.join("nope.img");
    let output = zpage(&["analyze", missing.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("nope.img") && stderr(&output).contains("cannot read"),
        "{}",
        stderr(&output)
    );

    let small = dir.0.join("small.img");
    std::fs::write(&small, [0u8; 100]).unwrap();
    let output = zpage(&["analyze", small.to_str().unwrap()]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no whole 4096-byte page"),
        "{}",
        stderr(&output)
    );

    let output = zpage(&["analyze", "--pid", "4999999"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no process with PID 4999999"),
        "{}",
        stderr(&output)
    );

    let output = zpage(&["analyze", "--pid", "1", "--codec", "brotli"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("unknown codec 'brotli'")
            && stderr(&output).contains("zstd:LEVEL"),
        "{}",
        stderr(&output)
    );

    let output = zpage(&["analyze", "--pid", "1", "--pool", "slab"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("slab"), "{}", stderr(&output));

    let output = zpage(&["analyze", "--kernel"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("need images or --pid"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn another_users_process_is_refused_with_the_permission_named() {
    if effective_uid() != 0 {
        eprintln!("skipped: needs root to run zpage as another user (CI runs as root)");
        return;
    }
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let output = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_zpage"),
            "analyze",
            "--pid",
        ])
        .arg(sleeper.id().to_string())
        .output()
        .unwrap();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(
        message.contains(&format!("may not read the memory of PID {}", sleeper.id())),
        "{message}"
    );
    assert!(message.contains("CAP_SYS_PTRACE"), "{message}");
}

fn effective_uid() -> u32 {
    // /proc/self/status "Uid:" line: real, effective, saved, fs.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn the_machine_view_ranks_readable_processes() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let output = zpage(&["analyze", "--json", "--max-pages", "64"]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(output.status.success(), "{}", stderr(&output));
    let scan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let processes = scan["processes"].as_array().unwrap();
    assert!(
        processes.iter().any(|p| p["pid"] == sleeper.id()),
        "the sleeper is listed"
    );
    let saved: Vec<u64> = processes
        .iter()
        .map(|p| p["saved_bytes"].as_u64().unwrap())
        .collect();
    assert!(
        saved.windows(2).all(|w| w[0] >= w[1]),
        "largest saving first"
    );
    assert!(processes
        .iter()
        .all(|p| p["anonymous_bytes"].as_u64().unwrap() <= 64 * 4096));
}

/// Runs zpage and returns its output and peak resident memory (KiB), from wait4's rusage.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's Child does not know about
fn zpage_with_peak_rss(args: &[&str]) -> (Output, u64) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_end(&mut stdout)
        .unwrap();
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child (not yet reaped: Child::wait was not called);
    // both pointers are to live locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    use std::os::unix::process::ExitStatusExt;
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout,
        stderr,
    };
    (output, usage.ru_maxrss as u64)
}

#[test]
fn analysing_more_memory_than_the_bound_stays_within_it() {
    // 512 MiB that does not compress: every page goes to the pool raw, so a
    // pool holding all of them would need 512 MiB.
    let (output, peak_kib) = zpage_with_peak_rss(&[
        "analyze",
        "/dev/urandom",
        "--size",
        "512M",
        "--codec",
        "lz4",
        "--pool",
        "zsmalloc",
        "--rounds",
        "0",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["pages"], 131072);
    assert_eq!(report["codecs"][0]["incompressible_pages"], 131072);
    assert!(report["pools"][0]["sample_stride"].as_u64().unwrap() >= 8);
    println!("peak RSS analysing 512 MiB: {} MiB", peak_kib / 1024);
    assert!(peak_kib < 256 * 1024, "peak RSS {peak_kib} KiB");

    let output = zpage(&["analyze", "/dev/zero"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("not a regular file") && stderr(&output).contains("--size"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn kernel_side_by_side_streams_the_image_into_zram_and_restores_it() {
    if !zpage_kernel::kernel_state_tests_enabled(
        "kernel_side_by_side_streams_the_image_into_zram_and_restores_it",
    ) {
        return;
    }
    let dir = TempDir::new("cli-kernel");
    let image = write_image(&dir, 0);
    let disksize = || std::fs::read_to_string("/sys/block/zram0/disksize").ok();
    let before = disksize();
    let output = zpage(&[
        "analyze",
        image.to_str().unwrap(),
        "--kernel",
        "--codec",
        "lz4",
        "--pool",
        "zsmalloc",
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let kernel = report["kernel"].as_array().unwrap();
    assert!(!kernel.is_empty());
    for k in kernel {
        assert_eq!(k["orig_data_size"], 64 * 4096, "{k}");
        assert_eq!(k["same_pages"], 8, "{k}");
    }
    assert_eq!(report["comparison"]["same_pages_match"], true);
    assert_eq!(disksize(), before, "zram0 left as found");
}
