//! `zpage bench redis` as a user runs it: `--json` on a plain Debian
//! redis-server passes every check; a server that loses values makes the
//! command fail, naming the wrong values.

use std::process::Command;

fn redis_server_present(test: &str) -> bool {
    zpage_testsupport::installed(test, "redis-server", "redis-server")
}

fn zpage() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zpage"))
}

#[test]
fn json_report_of_a_plain_server_passes_every_check() {
    if !redis_server_present("json_report_of_a_plain_server_passes_every_check") {
        return;
    }
    let output = zpage()
        .args(["bench", "redis", "--size", "8M", "--gets", "2000", "--json"])
        .args(["--scratch-dir", &std::env::temp_dir().display().to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["wrong_values"], 0, "{report}");
    assert_eq!(report["verified_keys"], report["keys"], "{report}");
    assert_eq!(
        report["digest"], report["bgsave"]["loaded_digest"],
        "{report}"
    );
    assert_eq!(report["get"]["requests"], 2000, "{report}");
    assert!(report["get"]["p99_us"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["kernel"].is_null());
}

#[test]
fn a_server_that_loses_values_fails_the_command() {
    if !redis_server_present("a_server_that_loses_values_fails_the_command") {
        return;
    }
    let output = zpage()
        .args(["bench", "redis", "--size", "8M", "--gets", "100"])
        .args(["--scratch-dir", &std::env::temp_dir().display().to_string()])
        .args(["--", "redis-server", "--maxmemory", "2mb"])
        .args(["--maxmemory-policy", "allkeys-random"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("redis check failed"), "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");
}
