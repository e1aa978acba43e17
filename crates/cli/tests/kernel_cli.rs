//! `zpage kernel` from the outside: the zramctl-style view, `--watch` when
//! piped, and the errors a user meets.

use std::process::{Command, Output};

fn zpage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(args)
        .output()
        .expect("the zpage binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn devices_view_follows_zramctl_options() {
    if !std::path::Path::new("/sys/block/zram0").exists() {
        println!("SKIP devices_view_follows_zramctl_options: no zram0");
        return;
    }
    let output = zpage(&[
        "kernel",
        "devices",
        "--all",
        "--bytes",
        "--noheadings",
        "--raw",
        "-o",
        "NAME,DISKSIZE,ALGORITHM",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("/dev/zram0 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let fields: Vec<&str> = line.split(' ').collect();
    let disksize = std::fs::read_to_string("/sys/block/zram0/disksize").unwrap();
    assert_eq!(
        fields[1],
        disksize.trim(),
        "--bytes prints the raw disksize"
    );
    assert!(!stdout.contains("NAME"), "--noheadings: {stdout}");

    let output = zpage(&["kernel", "zramctl", "--all", "--output-all"]);
    let stdout = text(&output.stdout);
    let header = stdout.lines().next().unwrap();
    for column in [
        "NAME",
        "DISKSIZE",
        "DATA",
        "COMPR",
        "ALGORITHM",
        "STREAMS",
        "ZERO-PAGES",
        "TOTAL",
        "MEM-LIMIT",
        "MEM-USED",
        "MIGRATED",
        "COMP-RATIO",
        "MOUNTPOINT",
    ] {
        assert!(
            header.split_whitespace().any(|h| h == column),
            "{column} missing: {header}"
        );
    }

    let output = zpage(&[
        "kernel",
        "devices",
        "--all",
        "--json",
        "-o",
        "NAME,COMP-RATIO",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let zram0 = json["zramdevices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "/dev/zram0")
        .unwrap();
    let data: u64 = std::fs::read_to_string("/sys/block/zram0/mm_stat")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    if data == 0 {
        assert!(
            zram0["comp-ratio"].is_null(),
            "an empty device has no ratio: {zram0}"
        );
    }

    let output = zpage(&["kernel", "devices", "-o", "NAME,NOPE"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("unknown column \"NOPE\""),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn watch_when_piped_prints_rates_and_no_escape_codes() {
    let output = zpage(&["kernel", "status", "--watch", "0.2", "--count", "2"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(!stdout.contains('\x1b'), "escape codes in piped output");
    assert_eq!(stdout.matches("rates over the last").count(), 1, "{stdout}");
    assert!(stdout.contains("since boot: stored (zswpout)"), "{stdout}");

    let output = zpage(&[
        "kernel", "status", "--watch", "0.2", "--count", "2", "--json",
    ]);
    let lines: Vec<serde_json::Value> = text(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "JSON Lines, one per refresh");
    assert!(lines[0]["rates"].is_null());
    assert!(lines[1]["rates"]["seconds"].as_f64().unwrap() > 0.1);
}

#[test]
fn config_errors_say_where_and_the_os_error_once() {
    let dir = std::env::temp_dir().join(format!("zpage-kernel-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_syntax = dir.join("syntax.toml");
    std::fs::write(
        &bad_syntax,
        "[zswap]\nenabled = true\n[[zram]\nalgorithm = \"lz4\"\n",
    )
    .unwrap();
    let output = zpage(&[
        "kernel",
        "export",
        bad_syntax.to_str().unwrap(),
        "--format",
        "sysctl",
    ]);
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("line 3") && !stderr.contains("config key"),
        "{stderr}"
    );

    let priority = dir.join("priority.toml");
    std::fs::write(
        &priority,
        "[[zram]]\nalgorithm = \"lz4\"\nsize = \"1G\"\nswap_priority = 40000\n",
    )
    .unwrap();
    let stderr = text(
        &zpage(&[
            "kernel",
            "export",
            priority.to_str().unwrap(),
            "--format",
            "sysctl",
        ])
        .stderr,
    );
    assert!(
        stderr.contains("zram[0].swap_priority")
            && stderr.contains("0..=32767")
            && !stderr.contains("i16"),
        "{stderr}"
    );

    let missing = dir.join("missing.toml");
    let stderr = text(
        &zpage(&[
            "kernel",
            "export",
            missing.to_str().unwrap(),
            "--format",
            "sysctl",
        ])
        .stderr,
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zramctl_options_that_configure_are_refused_with_zramctls_meaning() {
    for args in [
        &["-a", "lz4"][..],
        &["--algorithm", "zstd"],
        &["-s", "1G"],
        &["--reset"],
    ] {
        let output = zpage(&[&["kernel", "devices"][..], args].concat());
        assert!(!output.status.success(), "{args:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("configures a device in zramctl"),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("zpage kernel apply"), "{args:?}: {stderr}");
    }
    let output = zpage(&["kernel", "devices", "/dev/zram4095"]);
    assert!(!output.status.success());
    assert!(
        text(&output.stderr).contains("no such zram device"),
        "{}",
        text(&output.stderr)
    );
    if std::path::Path::new("/sys/block/zram0").exists() {
        let output = zpage(&["kernel", "zramctl", "-J", "/dev/zram0"]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let devices = json["zramdevices"].as_array().unwrap();
        assert_eq!(devices.len(), 1, "{json}");
        assert_eq!(devices[0]["name"], "/dev/zram0");
    }
}

#[test]
fn import_prints_a_config_that_exports_back_to_the_file() {
    let dir = std::env::temp_dir().join(format!("zpage-import-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("zram-generator.conf");
    let original =
        "[zram0]\nzram-size = ram * 0.25\ncompression-algorithm = zstd\nswap-priority = 100\n";
    std::fs::write(&conf, original).unwrap();
    let output = zpage(&[
        "kernel",
        "import",
        conf.to_str().unwrap(),
        "--from",
        "zram-generator",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let toml = dir.join("kernel.toml");
    std::fs::write(&toml, &output.stdout).unwrap();
    let output = zpage(&[
        "kernel",
        "export",
        toml.to_str().unwrap(),
        "--format",
        "zram-generator",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains(original),
        "{}",
        text(&output.stdout)
    );
    std::fs::write(
        &conf,
        "[zram0]\nzram-size = min(ram / 2, 4096)\ncompression-algorithm = zstd\n",
    )
    .unwrap();
    let output = zpage(&[
        "kernel",
        "import",
        conf.to_str().unwrap(),
        "--from",
        "zram-generator",
    ]);
    assert!(!output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("[zram0] zram-size") && stderr.contains("pick one side"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
