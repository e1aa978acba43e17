//! `zpage bench --trace`: the trace workload and its recording go
//! together; either alone is refused before anything runs, with the fix.
//! (Recording and replaying a real region's faults is tested in the bench
//! crate, `trace::tests`.)

use std::process::Command;

fn bench(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .arg("bench")
        .args(args)
        .output()
        .expect("zpage runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_trace_without_its_workload_is_refused() {
    let (ok, stderr) = bench(&["--trace", "/nonexistent/faults.trace", "--touches", "10"]);
    assert!(!ok);
    assert!(stderr.contains("add --workload trace"), "{stderr}");
}

#[test]
fn the_trace_workload_without_a_trace_is_refused() {
    let (ok, stderr) = bench(&["--workload", "trace", "--touches", "10"]);
    assert!(!ok);
    assert!(stderr.contains("--fault-trace FILE"), "{stderr}");
}

#[test]
fn a_file_that_is_not_a_trace_is_refused() {
    let path = std::env::temp_dir().join(format!("zpage-not-a-trace-{}", std::process::id()));
    std::fs::write(&path, b"no header here").unwrap();
    let (ok, stderr) = bench(&[
        "--workload",
        "trace",
        "--trace",
        path.to_str().unwrap(),
        "--touches",
        "10",
    ]);
    std::fs::remove_file(&path).unwrap();
    assert!(!ok);
    assert!(stderr.contains("not a zpage fault trace"), "{stderr}");
}
