//! `zpage run`: exit status passes through, the summary reports what the
//! budget did, and CPython's own regression tests give the same results
//! under a budget a quarter of each module's unconstrained peak (with the
//! default threshold: CPython's 1 MiB arenas stay out, see the preload
//! library's README for what `--min-mapping 1M` does to these tests).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use zpage_testsupport::installed;

/// The preload library next to the zpage binary, built now: `cargo test`
/// does not build a `cdylib` nothing links (and `cargo test -p zpage-cli`
/// would not build it at all), so the test asks cargo for it.
fn preload() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--profile", "test", "-p", "zpage-preload"])
            .status()
            .expect("running cargo to build the preload library");
        assert!(status.success(), "cargo build -p zpage-preload failed");
        let dir = Path::new(env!("CARGO_BIN_EXE_zpage")).parent().unwrap();
        let lib = dir.join("libzpage_preload.so");
        assert!(lib.exists(), "{} missing after the build", lib.display());
        lib
    })
    .clone()
}

/// `zpage run ARGS -- PROGRAM`, with this build's preload library.
fn zpage_run_command(args: &[&str], program: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zpage"));
    command
        .arg("run")
        .args(args)
        .arg("--")
        .args(program)
        .env("ZPAGE_PRELOAD", preload());
    command
}

fn zpage_run(args: &[&str], program: &[&str]) -> Output {
    zpage_run_command(args, program).output().unwrap()
}

/// What a program that must succeed printed.
/// The `--summary-json` file `zpage run` wrote at `path`.
fn summary_at(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Bytes in MiB, for messages.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn stdout_of(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zpage-run-test-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A C program that fills `MiB` of malloc'd memory, sleeps `MS`
/// milliseconds if given, checks it, and exits with the status given:
/// `filler MiB STATUS [MS]`.
fn filler() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        compile_c(
            &tempdir("filler"),
            "filler",
            r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    size_t n = strtoul(argv[1], 0, 10) << 20;
    uint64_t *p = malloc(n);
    for (size_t i = 0; i < n / 8; i++) p[i] = (i & 0xff) | ((i >> 9) << 32);
    if (argc > 3) usleep(strtoul(argv[3], 0, 10) * 1000);
    for (size_t i = 0; i < n / 8; i++)
        if (p[i] != ((i & 0xff) | ((i >> 9) << 32))) { puts("MISMATCH"); return 99; }
    puts("checked");
    return atoi(argv[2]);
}
"#,
            &[],
        )
    })
}

/// `dir/NAME`, compiled by `cc -O2 FLAGS` from the C `source`.
fn compile_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let out = Command::new("cc")
        .arg("-O2")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc must be installed");
    assert!(
        out.status.success(),
        "cc {flags:?} {name}.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn exit_status_passes_through_and_the_summary_counts_the_work() {
    let dir = tempdir("summary");
    let json = dir.join("summary.json");
    let out = zpage_run(
        &["--budget", "16M", "--summary-json", json.to_str().unwrap()],
        &[filler().to_str().unwrap(), "64", "3"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("checked"));
    for line in [
        "Peak under zpage (max RSS of the program and its descendants",
        "Program's own peak without zpage (estimated: ",
        "Memory saved (estimated: ",
        "Fault latency p50 / p99",
        "Time in fault handling",
        "Exit status: 3",
    ] {
        assert!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
    let summary = summary_at(&json);
    assert_eq!(summary["exit_status"], 3);
    assert!(summary["evictions"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["faults"].as_u64().unwrap() > 0, "{summary}");
    // Every region counter is there, and the summary's own figures are
    // made of them: restores are decompressions plus trial hits.
    let counters = &summary["region_counters"];
    let counter = |name: &str| {
        counters[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no region counter {name}: {summary}"))
    };
    assert_eq!(
        counter("restore_count") + counter("trial_hit_count"),
        summary["restores"].as_u64().unwrap(),
        "{summary}"
    );
    assert_eq!(
        counter("eviction_count"),
        summary["evictions"].as_u64().unwrap()
    );
    assert!(counter("compression_count") > 0, "{summary}");
    // 64 MiB of data under a 16 MiB budget: the peak stays well below the
    // data. It is the budget plus the pool, the staging area and zpage's
    // own memory: 37.3-38.2 MiB on a quiet machine, 40.4 MiB once in CI
    // with the other tests running (the same before and after pages went
    // out in bursts), so the bound is three quarters of the data.
    let peak = summary["peak_resident_bytes"].as_u64().unwrap();
    assert!(
        peak < 48 << 20,
        "peak {peak} with a 16 MiB budget over 64 MiB"
    );
    assert_eq!(summary["zpage_peak_bytes"], peak);
    // zpage's own heap is part of that peak: something (the pool's tables
    // for 12k pages at least), resident, and far below the peak.
    let heap = summary["own_heap_peak_bytes"].as_u64().unwrap();
    let heap_resident = summary["own_heap_resident_peak_bytes"].as_u64().unwrap();
    assert!(
        heap > 12_000 * 8 && heap_resident > 0 && heap_resident < peak / 4,
        "{summary}"
    );
    assert!(
        stderr.contains("zpage's own heap at peak: "),
        "no heap line in:\n{stderr}"
    );
    assert!(
        summary["saved_bytes"].as_i64().unwrap() > 16 << 20,
        "{summary}"
    );
    assert!(summary["plain_peak_bytes"].is_null(), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--budget auto`: a program that holds 64 MiB it does not touch for four
/// seconds ends with a budget below it (from what is resident and 32 MiB
/// of headroom, 2% a look, ten looks a second: about 43 MiB after four
/// seconds), the summary saying what the budget found and the stall it
/// measured; kernel mode and a bad target are refused with what to do.
#[test]
fn an_automatic_budget_finds_itself_and_says_so() {
    let dir = tempdir("auto-budget");
    let json = dir.join("summary.json");
    let out = zpage_run(
        &["--budget", "auto", "--summary-json", json.to_str().unwrap()],
        &[filler().to_str().unwrap(), "64", "0", "4000"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout_of(out), "checked\n");
    assert!(
        stderr.contains("Budget found by itself (stall target 1.00% of wall time)"),
        "{stderr}"
    );
    let summary = summary_at(&json);
    let auto = &summary["auto_budget"];
    assert_eq!(auto["stall_target"], 0.01, "{summary}");
    let lowest = auto["lowest_budget_bytes"].as_u64().unwrap();
    assert!(lowest > 0 && lowest < 56 << 20, "{summary}");
    assert!(auto["stall_share"].as_f64().unwrap() >= 0.0, "{summary}");
    assert!(summary["evictions"].as_u64().unwrap() > 0, "{summary}");
    for (args, words) in [
        (
            &["--budget", "auto", "--mode", "kernel"][..],
            "--budget auto is user mode's",
        ),
        (&["--budget", "auto:90%"][..], "auto:STALL%"),
    ] {
        let out = zpage_run(args, &["true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(words),
            "{args:?}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The JSON summary `zpage run --json` printed on stderr.
fn json_summary(out: &Output) -> serde_json::Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let start = stderr.find("{\n").unwrap_or(0);
    serde_json::from_str(&stderr[start..]).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// `--compare`'s figures: a plain run's peak measured, and saved equal to
/// it less the zpage peak (within 5%), from the summary's own figures.
fn assert_measured_saving(summary: &serde_json::Value, data_bytes: u64) {
    let plain = summary["plain_peak_bytes"].as_u64().unwrap();
    let zpage = summary["zpage_peak_bytes"].as_u64().unwrap();
    let saved = summary["saved_bytes"].as_i64().unwrap();
    assert!(plain > data_bytes, "plain peak {plain}: {summary}");
    assert_eq!(summary["saved_method"], "measured", "{summary}");
    assert_eq!(summary["baseline_peak_bytes"], plain, "{summary}");
    let difference = plain as i64 - zpage as i64;
    assert!(
        (saved - difference).abs() * 20 <= difference.abs(),
        "saved {saved} against plain {plain} - zpage {zpage}: {summary}"
    );
    // The budget holds: a quarter of the data, with room for the pool.
    assert!(saved > (data_bytes / 4) as i64, "{summary}");
    assert!(
        summary["plain_wall_seconds"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
    assert_eq!(summary["plain_exit_status"], 0, "{summary}");
}

#[test]
fn compare_measures_a_plain_run_and_saves_against_its_peak() {
    let out = zpage_run(
        &["--compare", "--budget", "16M", "--json"],
        &[filler().to_str().unwrap(), "64", "0"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The plain run's output is discarded: "checked" once, from the run under zpage.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "checked\n",
        "{stderr}"
    );
    let summary = json_summary(&out);
    assert_measured_saving(&summary, 64 << 20);
    assert_eq!(summary["mode"], "user");
    assert_eq!(summary["zpage_peak_bytes"], summary["peak_resident_bytes"]);
    assert!(summary["evictions"].as_u64().unwrap() > 0, "{summary}");

    // The text says the same, measured.
    let out = zpage_run(
        &["--compare", "--budget", "16M"],
        &[filler().to_str().unwrap(), "64", "0"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for line in [
        "running the program plainly first",
        "Program's own peak without zpage (measured: a plain run first)",
        "Memory saved (measured): ",
        "Wall time plain / under zpage: ",
    ] {
        assert!(stderr.contains(line), "no {line:?} in:\n{stderr}");
    }
}

#[test]
fn compare_gives_both_runs_the_same_standard_input_or_refuses() {
    let dir = tempdir("compare-stdin");
    let input = dir.join("input");
    std::fs::write(&input, "0123456789\n").unwrap();
    // A regular file: the run under zpage reads it whole after the plain run did.
    let out = zpage_run_command(&["--compare", "--budget", "16M"], &["wc", "-c"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(stdout_of(out).trim(), "11");
    // A pipe cannot be read twice.
    let mut child = zpage_run_command(&["--compare", "--budget", "16M"], &["wc", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("standard input is a pipe"), "{stderr}");
    assert!(stderr.contains("< /dev/null"), "{stderr}");
    assert!(out.stdout.is_empty(), "the program ran: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--cold-codec`: the program's evicted pages go to zstd, its pool holds
/// far less than with LZ4 alone, and every word reads back (the filler
/// checks them and says "checked").
#[test]
fn a_cold_codec_shrinks_the_pool_and_keeps_every_word() {
    let dir = tempdir("cold");
    let pool_with = |extra: &[&str]| {
        let json = dir.join("summary.json");
        let mut args = vec!["--budget", "16M", "--summary-json", json.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = zpage_run(&args, &[filler().to_str().unwrap(), "64", "0"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("checked"),
            "{stderr}"
        );
        let summary = summary_at(&json);
        assert!(summary["evictions"].as_u64().unwrap() > 4096, "{summary}");
        (
            summary["pool_bytes"].as_u64().unwrap(),
            summary["codec"].as_str().unwrap().to_string(),
        )
    };
    let (lz4_pool, lz4_codec) = pool_with(&[]);
    let (cold_pool, cold_codec) = pool_with(&["--cold-codec", "zstd"]);
    assert_eq!(lz4_codec, "lz4");
    assert!(cold_codec.contains("cold pages zstd"), "{cold_codec}");
    assert!(
        cold_pool * 4 < lz4_pool * 3,
        "pool {cold_pool} bytes with zstd for cold pages against {lz4_pool} with lz4"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tests/programs/forkadvice.c`, compiled once.
fn forkadvice() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        compile_c(
            &tempdir("forkadvice"),
            "forkadvice",
            include_str!("programs/forkadvice.c"),
            &["-Wall", "-Wextra", "-Werror"],
        )
    })
}

/// `tests/programs/fastfill.c`, compiled once.
fn fastfill() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        compile_c(
            &tempdir("fastfill"),
            "fastfill",
            include_str!("programs/fastfill.c"),
            &["-Wall", "-Wextra", "-Werror", "-pthread"],
        )
    })
}

/// `VmRSS` of process `pid` in bytes (0 once it is gone).
fn vm_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The children of `pid` (of every thread of it).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A program that allocates 256 MiB of compressible data from two threads
/// as fast as it can, under `--memory-max 96M` (no budget: zpage splits the
/// limit between resident pages and the pool): the program's resident set,
/// sampled every 10 ms here and as the kernel's exact high-water mark in
/// the summary, stays at or under 96 MiB, and its output is a plain run's.
#[test]
fn a_memory_max_holds_while_a_program_allocates_as_fast_as_it_can() {
    const LIMIT: u64 = 96 << 20;
    let exe = fastfill().to_str().unwrap();
    let plain = stdout_of(Command::new(exe).args(["256", "2"]).output().unwrap());
    assert!(plain.contains("checked"), "{plain}");
    let dir = tempdir("memory-max");
    let json = dir.join("summary.json");
    let child = zpage_run_spawned(
        &[
            "--memory-max",
            "96M",
            "--summary-json",
            json.to_str().unwrap(),
        ],
        &[exe, "256", "2"],
    );
    let zpage = child.id();
    let mut sampled = 0;
    let mut samples = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while alive(zpage) && std::time::Instant::now() < deadline {
        for pid in children_of(zpage) {
            sampled = sampled.max(vm_rss(pid));
        }
        samples += 1;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = output_within(child, std::time::Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stdout_of(out), plain, "{stderr}");
    let summary = summary_at(&json);
    let peak = summary["peak_resident_bytes"].as_u64().unwrap();
    eprintln!(
        "256 MiB under --memory-max 96M: peak {:.1} MiB (kernel's high-water mark), {:.1} MiB at the highest of {samples} samples; {} evictions",
        mib(peak),
        mib(sampled),
        summary["evictions"]
    );
    assert_eq!(summary["memory_max_bytes"], LIMIT, "{summary}");
    assert!(peak <= LIMIT, "peak {peak} over the memory max:\n{stderr}");
    assert!(sampled <= LIMIT, "a sample of {sampled} over it:\n{stderr}");
    assert!(samples > 10, "only {samples} samples");
    assert_eq!(summary["memory_max_exceeded_bytes"], 0, "{summary}");
    assert_eq!(summary["memory_max_over_count"], 0, "{summary}");
    // 256 MiB cannot fit in 96 MiB uncompressed: most of it was evicted.
    assert!(summary["evictions"].as_u64().unwrap() > 40_000, "{summary}");
    assert!(
        stderr.contains("Memory max per process: 96.0 MiB (held"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--memory-max` with `--backing` and no `--pool-max`: a program fills
/// 128 MiB with bytes no codec compresses, so the pool alone would pass the
/// 96 MiB limit. zpage gives the pool its share of the limit and writes the
/// oldest pages to the file: the limit holds, the output is a plain run's,
/// and the file is gone afterwards.
///
/// The peak itself is not checked here: evicting pages that do not
/// compress frees nothing until the writeback does, so resident memory runs
/// at the limit less its margin, and with CI's other tests running beside
/// this one the high-water mark passed it by 0.7 and 2.6 MiB in two runs.
/// The region crate's `tests/memory_max.rs` checks the limit with this
/// data, run alone. Here: the options are accepted without `--pool-max`,
/// the pool stayed under its share of the limit, pages went through the
/// file and came back exact.
#[test]
fn a_memory_max_with_a_backing_holds_data_that_does_not_compress() {
    const LIMIT: u64 = 96 << 20;
    let exe = fastfill().to_str().unwrap();
    let plain = stdout_of(
        Command::new(exe)
            .args(["128", "1", "random"])
            .output()
            .unwrap(),
    );
    assert!(plain.contains("checked"), "{plain}");
    let dir = tempdir("memory-max-backing");
    let json = dir.join("summary.json");
    let tier = dir.join("tier");
    let out = zpage_run(
        &[
            "--memory-max",
            "96M",
            "--backing",
            tier.to_str().unwrap(),
            "--backing-max-bytes",
            "512M",
            "--summary-json",
            json.to_str().unwrap(),
        ],
        &[exe, "128", "1", "random"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stdout_of(out), plain, "{stderr}");
    let summary = summary_at(&json);
    let peak = summary["peak_resident_bytes"].as_u64().unwrap();
    eprintln!(
        "128 MiB of random bytes under --memory-max 96M with a backing: peak {:.1} MiB, pool at most {:.1} MiB, {} pages written to the file",
        mib(peak),
        mib(summary["peak_pool_bytes"].as_u64().unwrap()),
        summary["tier"]["written_pages"]
    );
    assert!(
        summary["peak_pool_bytes"].as_u64().unwrap() < LIMIT * 3 / 4,
        "{summary}"
    );
    assert!(
        summary["tier"]["written_pages"].as_u64().unwrap() > 10_000,
        "{summary}"
    );
    assert_eq!(summary["tier"]["read_failures"], 0, "{summary}");
    assert!(
        stderr.contains("Memory max per process: 96.0 MiB"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tier"))
        .collect();
    assert!(left.is_empty(), "tier files left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `forkadvice MODE` under `zpage run` with a 16 MiB budget prints exactly
/// what it prints without zpage (what each child read where the program
/// advised `fork()`), and most of the advised range was compressed at the
/// fork (the program's stderr says how many of its pages were not
/// resident).
fn fork_advice_is_a_plain_runs(mode: &str) {
    let exe = forkadvice().to_str().unwrap();
    let plain = Command::new(exe).arg(mode).output().unwrap();
    let plain_stderr = String::from_utf8_lossy(&plain.stderr).into_owned();
    let plain = stdout_of(plain);
    assert!(
        plain.ends_with(&format!("ok {mode}\n")),
        "{plain}{plain_stderr}"
    );
    let out = zpage_run(&["--budget", "16M"], &[exe, mode]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stdout_of(out), plain, "{stderr}");
    // 8192 pages advised in every mode, a few read again before the fork.
    let absent: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("advised pages not resident at the fork: "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of absent pages:\n{stderr}"));
    assert!(
        absent > 4096,
        "{absent} advised pages compressed at the fork: the test proves little\n{stderr}"
    );
    assert!(stderr.contains("Exit status: 0"), "{stderr}");
}

/// `MADV_WIPEONFORK` on compressed pages: the child reads zeros there (it
/// read its copy of the pool once), twice in a row.
#[test]
fn wipeonfork_gives_the_child_zeros_for_compressed_pages() {
    fork_advice_is_a_plain_runs("wipe");
}

/// `MADV_KEEPONFORK` undoes `MADV_WIPEONFORK` on part of the range, then on
/// all of it.
#[test]
fn keeponfork_after_wipeonfork_keeps_the_pages() {
    fork_advice_is_a_plain_runs("keep");
}

/// `MADV_DONTFORK` on half a block and on a whole mapping: the child that
/// touches the half dies by SIGSEGV, one that frees the block exits, and
/// after `MADV_DOFORK` the next child has it all.
#[test]
fn dontfork_leaves_the_range_out_of_the_child() {
    fork_advice_is_a_plain_runs("dontfork");
}

/// `--pool-max` and `--backing FILE`: a real program's pages go through a
/// tier file and come back exact. Python builds 64 MiB of lists under a
/// 16 MiB budget whose pool is capped at 1 MiB, so most compressed pages
/// are written to the file and read back when it sums them: its output is
/// that of a plain run, the summary counts the tier's reads, and the file
/// (one per process, `FILE.PID`) is gone afterwards unless
/// `--keep-backing` keeps it.
#[test]
fn a_backing_file_holds_pages_and_the_output_is_a_plain_runs() {
    if !installed(
        "a_backing_file_holds_pages_and_the_output_is_a_plain_runs",
        "python3",
        "python3",
    ) {
        return;
    }
    let dir = tempdir("backing");
    let script = "import hashlib\n\
        rows = [list(range(i, i + 1000)) for i in range(2000)]\n\
        h = hashlib.sha256()\n\
        for row in rows: h.update(repr(sum(row)).encode())\n\
        print(h.hexdigest(), len(rows))";
    let plain = Command::new("python3")
        .args(["-c", script])
        .output()
        .unwrap();
    let plain = stdout_of(plain);
    let tier = dir.join("tier");
    let json = dir.join("summary.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--budget",
            "16M",
            "--min-mapping",
            "64K",
            "--pool-max",
            "1M",
            "--backing",
            tier.to_str().unwrap(),
            "--backing-max-bytes",
            "256M",
            "--summary-json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = zpage_run(&args, &["python3", "-c", script]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(stdout_of(out), plain, "{stderr}");
        let summary = summary_at(&json);
        (summary, stderr)
    };
    let (summary, stderr) = run(&[]);
    let tier_figures = &summary["tier"];
    assert!(
        tier_figures["written_pages"].as_u64().unwrap() > 0,
        "{summary}\n{stderr}"
    );
    assert!(
        tier_figures["read_pages"].as_u64().unwrap() > 0,
        "{summary}"
    );
    assert_eq!(tier_figures["read_failures"], 0, "{summary}");
    assert!(tier_figures["down_cause"].is_null(), "{summary}");
    assert!(stderr.contains("Tier below RAM: "), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tier"))
        .collect();
    assert!(left.is_empty(), "tier files left behind: {left:?}");

    let (summary, _) = run(&["--keep-backing"]);
    assert!(
        summary["tier"]["written_pages"].as_u64().unwrap() > 0,
        "{summary}"
    );
    let kept: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("tier."))
        .collect();
    // One per program a process runs: python3 may be a launcher script
    // whose shells keep (empty) files too, and the interpreter a shell
    // `exec`s keeps its own under `PATH.PID.N`. One holds the pages.
    let written: Vec<_> = kept
        .iter()
        .filter(|name| std::fs::metadata(dir.join(name)).is_ok_and(|m| m.len() > 0))
        .collect();
    assert_eq!(written.len(), 1, "{kept:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a Python program sees of its descriptors: the number a new file
/// gets, and, for each anonymous-inode descriptor, its number, what it is
/// and whether it closes on `exec`.
fn own_descriptors(under_zpage: bool) -> String {
    let script = "import os, fcntl\n\
        keep = [bytearray(64) for _ in range(100000)]\n\
        fd = os.open('/dev/null', os.O_RDONLY)\n\
        print('NEW', fd)\n\
        for f in sorted(int(f) for f in os.listdir('/proc/self/fd')):\n\
        \x20   try: what = os.readlink('/proc/self/fd/%d' % f)\n\
        \x20   except OSError: continue\n\
        \x20   if what.startswith('anon_inode:'):\n\
        \x20       print('ANON', f, what, bool(fcntl.fcntl(f, fcntl.F_GETFD) & fcntl.FD_CLOEXEC))\n";
    let args = ["python3", "-c", script];
    if under_zpage {
        stdout_of(zpage_run(&["--budget", "16M"], &args))
    } else {
        stdout_of(Command::new(args[0]).args(&args[1..]).output().unwrap())
    }
}

/// Programs that count their own descriptors (CPython's `test_subprocess`
/// checks what a child inherits; servers expect the lowest free number)
/// find zpage's far above theirs: every heap is in a region from the first
/// `malloc`, so the budget's userfaultfd exists from then on, but it sits
/// at 512 or above, closes on `exec`, and a new file gets the number it
/// gets without zpage.
#[test]
fn zpage_descriptors_stay_out_of_the_programs_way() {
    let plain = own_descriptors(false);
    let under = own_descriptors(true);
    let new_fd = |out: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix("NEW "))
            .map(str::to_owned)
    };
    assert_eq!(
        new_fd(&under),
        new_fd(&plain),
        "plain:\n{plain}\nunder zpage:\n{under}"
    );
    assert!(
        under.contains("anon_inode:[userfaultfd]"),
        "the heap is in a region, yet no userfaultfd: {under}"
    );
    for line in under.lines().filter(|l| l.starts_with("ANON ")) {
        let fields: Vec<&str> = line.split(' ').collect();
        if plain.contains(fields[2]) {
            continue;
        }
        let number: u32 = fields[1].parse().unwrap();
        assert!(
            number >= 512,
            "zpage's descriptor among the program's: {line}"
        );
        assert_eq!(
            fields[3], "True",
            "zpage's descriptor survives exec: {line}"
        );
    }
}

/// What a Python program under `zpage run` finds of its own metrics file
/// after placing 8 MiB in a region: the directory it was told, and the
/// file's mode and its process sample, or NOFILE.
fn own_metrics_file(args: &[&str], metrics_dir: Option<&Path>) -> String {
    let script = "import os\nkeep = bytearray(8 << 20)\n\
        d = os.environ.get('ZPAGE_METRICS_DIR')\nprint('DIR', d)\n\
        f = os.path.join(d or '', 'zpage-%d.prom' % os.getpid())\n\
        print('FILE %o %d' % (os.stat(f).st_mode & 0o777, open(f).read().count('zpage_process_regions{')) if d and os.path.exists(f) else 'NOFILE')\n";
    let mut budget_and = vec!["--budget", "16M"];
    budget_and.extend(args);
    let mut command = zpage_run_command(&budget_and, &["python3", "-c", script]);
    match metrics_dir {
        Some(dir) => command.env("ZPAGE_METRICS_DIR", dir),
        None => command.env_remove("ZPAGE_METRICS_DIR"),
    };
    stdout_of(command.output().unwrap())
}

/// `zpage run` publishes each process's region figures for the exporter by
/// default (a private file, removed at exit); `--no-metrics` turns it off.
#[test]
fn zpage_run_publishes_metrics_unless_told_not_to() {
    let dir = tempdir("metrics").join("published");
    let said = own_metrics_file(&[], Some(&dir));
    assert!(said.contains("FILE 600 1"), "{said}");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "removed at exit: {left:?}");
    let said = own_metrics_file(&["--no-metrics"], Some(&dir));
    assert!(
        said.contains("DIR None") && said.contains("NOFILE"),
        "{said}"
    );
    // Nothing set: the program is told the default directory (read with no
    // region made, so nothing is written to the machine's default one).
    let told = stdout_of(
        zpage_run_command(
            &["--budget", "16M"],
            &[
                "python3",
                "-c",
                "import os; print(os.environ.get('ZPAGE_METRICS_DIR'))",
            ],
        )
        .env_remove("ZPAGE_METRICS_DIR")
        .output()
        .unwrap(),
    );
    let default = zpage_region::default_metrics_dir();
    assert_eq!(told.trim(), default.to_str().unwrap());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_signal_death_ends_zpage_by_the_same_signal() {
    use std::os::unix::process::ExitStatusExt;
    let out = zpage_run(&["--budget", "8M"], &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Exit status: 137 (killed by SIGKILL)"),
        "{stderr}"
    );
    // A shell sees what it would see of the program itself: 128 + 9.
    let shell = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} run --budget 8M -- sh -c 'kill -KILL $$' 2>/dev/null; echo $?",
            env!("CARGO_BIN_EXE_zpage")
        ))
        .env("ZPAGE_PRELOAD", preload())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shell.stdout).trim(), "137");
}

#[test]
fn a_missing_program_is_127_and_one_that_cannot_run_126() {
    let dir = tempdir("launch");
    let plain = dir.join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\necho ran\n").unwrap();
    for mode in ["user", "kernel"] {
        let out = zpage_run(&["--mode", mode], &["no-such-program-zpage"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{mode}: {err}");
        assert!(err.contains("command not found"), "{mode}: {err}");
        let out = zpage_run(&["--mode", mode], &[plain.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{mode}: {err}");
        assert!(err.contains("chmod +x"), "{mode}: {err}");
    }
    // As env(1) and timeout(1) say it.
    let env = Command::new("env")
        .arg("no-such-program-zpage")
        .output()
        .unwrap();
    assert_eq!(env.status.code(), Some(127));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zpage run` started in the background, its stderr collected.
fn zpage_run_spawned(args: &[&str], program: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_zpage"));
    command
        .arg("run")
        .args(args)
        .arg("--")
        .args(program)
        .env("ZPAGE_PRELOAD", preload())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // Tests run under `nohup` or as a shell's background job inherit
    // SIGHUP, SIGINT and SIGQUIT ignored, and `zpage run` keeps a signal
    // ignored at its start ignored, as a supervisor does: the program
    // would never see the signals these tests send it.
    // SAFETY: signal() is async-signal-safe, as code between fork and exec
    // must be, and touches only the child's dispositions.
    unsafe {
        command.pre_exec(|| {
            for s in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    command.spawn().unwrap()
}

/// The pid of `parent`'s only child, once it has one that runs `program`.
fn child_running(parent: u32, program: &str) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let children = Command::new("pgrep")
            .args(["-P", &parent.to_string(), "-x", program])
            .output()
            .unwrap();
        if let Some(pid) = String::from_utf8_lossy(&children.stdout)
            .split_whitespace()
            .next()
        {
            return pid.parse().unwrap();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{program} never started under zpage run"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Waits at most `limit` for `child`, and returns its output.
fn output_within(mut child: std::process::Child, limit: std::time::Duration) -> Output {
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("zpage run still running {limit:?} after the signal");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The lines a child writes, read on a thread of their own so that a test
/// waiting for one can give up (a lost signal fails the test, not CI).
fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The child's next line, trimmed; kills it and fails if none comes
/// within 10 s.
fn line_within(
    lines: &std::sync::mpsc::Receiver<String>,
    child: &mut std::process::Child,
    when: &str,
) -> String {
    match lines.recv_timeout(std::time::Duration::from_secs(10)) {
        Ok(line) => line.trim().to_string(),
        Err(e) => {
            let _ = child.kill();
            panic!("no line from the program within 10 s {when} ({e})");
        }
    }
}

#[test]
fn sigterm_to_zpage_run_ends_the_program_and_prints_the_summary() {
    use std::os::unix::process::ExitStatusExt;
    let zpage = zpage_run_spawned(&["--budget", "16M"], &["sleep", "600"]);
    let sleep = child_running(zpage.id(), "sleep");
    signal(zpage.id(), libc::SIGTERM);
    let out = output_within(zpage, std::time::Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{stderr}");
    assert!(
        stderr.contains("Exit status: 143 (killed by SIGTERM)"),
        "{stderr}"
    );
    assert!(!alive(sleep), "the program outlived zpage run");
}

#[test]
fn every_signal_a_supervisor_sends_reaches_the_program() {
    // The program says which signal it got, last of all SIGTERM, and exits 7.
    let script =
        "for s in HUP INT QUIT USR1 USR2 WINCH CONT ALRM; do trap \"echo got-$s\" $s; done; \
                  trap 'echo got-TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done";
    let mut zpage = zpage_run_spawned(&["--budget", "16M"], &["bash", "-c", script]);
    let lines = lines_of(zpage.stdout.take().unwrap());
    assert_eq!(line_within(&lines, &mut zpage, "at its start"), "ready");
    let sent = [
        (libc::SIGHUP, "HUP"),
        (libc::SIGINT, "INT"),
        (libc::SIGQUIT, "QUIT"),
        (libc::SIGUSR1, "USR1"),
        (libc::SIGUSR2, "USR2"),
        (libc::SIGWINCH, "WINCH"),
        (libc::SIGCONT, "CONT"),
        (libc::SIGALRM, "ALRM"),
    ];
    for (number, name) in sent {
        signal(zpage.id(), number);
        let line = line_within(&lines, &mut zpage, &format!("after SIG{name}"));
        assert_eq!(line, format!("got-{name}"), "after SIG{name}");
    }
    signal(zpage.id(), libc::SIGTERM);
    let out = output_within(zpage, std::time::Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("Exit status: 7"), "{stderr}");
}

#[test]
fn redis_ends_cleanly_within_its_shutdown_time_on_sigterm_to_zpage_run() {
    if !installed(
        "redis_ends_cleanly_within_its_shutdown_time_on_sigterm_to_zpage_run",
        "redis-server",
        "redis-server",
    ) {
        return;
    }
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port().to_string()
    };
    let dir = tempdir("redis-term");
    let zpage = zpage_run_spawned(
        &["--budget", "32M"],
        &[
            "redis-server",
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            dir.to_str().unwrap(),
        ],
    );
    let redis = child_running(zpage.id(), "redis-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "redis-server never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let sent = std::time::Instant::now();
    signal(zpage.id(), libc::SIGTERM);
    // redis's own shutdown takes well under a second without data to save.
    let out = output_within(zpage, std::time::Duration::from_secs(10));
    let took = sent.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "redis exits 0 on SIGTERM: {stderr}"
    );
    assert!(
        stderr.contains("Processes: 1 (0 without zpage)"),
        "{stderr}"
    );
    assert!(stderr.contains("Exit status: 0"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ready to exit, bye bye"),
        "redis did not shut down itself"
    );
    assert!(!alive(redis));
    println!("redis under zpage run ended {took:?} after SIGTERM");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_summary_says_why_no_process_reported() {
    let dir = tempdir("no-report");
    // -static needs the C library's archive (libc6-dev).
    let static_exe = compile_c(
        &dir,
        "hello-static",
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
        &["-static"],
    );
    let why = |program: &[&str]| {
        let out = zpage_run(&["--budget", "16M"], program);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = why(&[static_exe.to_str().unwrap()]);
    assert!(said.contains("Processes: 0 (no report: "), "{said}");
    assert!(said.contains("statically linked"), "{said}");
    // A program that lowers its descriptor limit to 3 (its standard
    // streams) leaves the library none for its report.
    let lowering_exe = compile_c(
        &dir,
        "nofile3",
        "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <sys/resource.h>\n\
         int main(void) { struct rlimit r = {3, 3}; setrlimit(RLIMIT_NOFILE, &r);\n\
         char *p = malloc(8 << 20); memset(p, 1, 8 << 20); printf(\"%d\\n\", p[4096]); return 0; }\n",
        &[],
    );
    let said = why(&[lowering_exe.to_str().unwrap()]);
    assert!(said.contains("Processes: 0 (no report: "), "{said}");
    assert!(
        said.contains("RLIMIT_NOFILE lowered inside the program"),
        "{said}"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // A set-user-ID program owned by someone else: secure execution.
        let setuid = dir.join("true-setuid");
        std::fs::copy("/bin/true", &setuid).unwrap();
        let nobody = 65534;
        std::os::unix::fs::chown(&setuid, Some(nobody), None).unwrap();
        std::fs::set_permissions(
            &setuid,
            std::os::unix::fs::PermissionsExt::from_mode(0o4755),
        )
        .unwrap();
        let said = why(&[setuid.to_str().unwrap()]);
        assert!(said.contains("set-user-ID"), "{said}");
        assert!(said.contains("ignores LD_PRELOAD"), "{said}");
    } else {
        println!("the set-user-ID case needs root to chown: skipped");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_death_by_sigbus_on_compressed_memory_is_explained() {
    use std::os::unix::process::ExitStatusExt;
    // Fills 64 MiB under a 16 MiB budget, blocks SIGBUS with the raw
    // system call (as the C library's wrapper would not let it), and reads
    // the memory back: the first compressed page kills it.
    let dir = tempdir("sigbus");
    let exe = compile_c(
        &dir,
        "blocked",
        r#"
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    size_t n = 64u << 20;
    volatile uint64_t *p = malloc(n);
    for (size_t i = 0; i < n / 8; i++) p[i] = i * 2654435761u;
    uint64_t set = 1ull << (SIGBUS - 1);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 8);
    uint64_t sum = 0;
    for (size_t i = 0; i < n / 8; i++) sum += p[i];
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
"#,
        &[],
    );
    let out = zpage_run(&["--budget", "16M"], &[exe.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{stderr}");
    assert!(stderr.contains("Note: killed by SIGBUS"), "{stderr}");
    assert!(stderr.contains("rt_sigprocmask"), "{stderr}");
    assert!(
        stderr.contains("Exit status: 135 (killed by SIGBUS)"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zpage run OPTIONS -- true` is refused before the program starts (exit
/// 125), with every one of `words` in its message.
fn refused_naming(options: &[&str], words: &[&str]) {
    let out = zpage_run(options, &["true"]);
    assert_eq!(out.status.code(), Some(125), "{options:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    for word in words {
        assert!(err.contains(word), "{options:?}: no {word:?} in {err}");
    }
}

#[test]
fn bad_options_and_kernel_mode_say_what_to_do() {
    refused_naming(&["--budget", "4K"], &["raise it"]);
    // Below the smallest budget kernel mode can start a program with,
    // root or not: the error lists what is missing and names user mode.
    refused_naming(
        &["--mode", "kernel", "--budget", "1M"],
        &["--mode kernel", "--mode user"],
    );
    refused_naming(&["--codec", "gzip"], &["--codec"]);
    refused_naming(&["--cold-codec", "lz4"], &["--cold-codec", "not stronger"]);
    refused_naming(&["--pool-max", "12Q"], &["--pool-max", "not a size"]);
    refused_naming(&["--memory-max", "lots"], &["--memory-max", "not a size"]);
    refused_naming(
        &["--memory-max", "1M"],
        &["--memory-max", "below the smallest"],
    );
    refused_naming(
        &[
            "--mode",
            "kernel",
            "--memory-max",
            "256M",
            "--kernel-swap",
            "zswap",
        ],
        &["--memory-max", "zram"],
    );
    refused_naming(&["--backing", "/tmp/zpage-t"], &["--pool-max"]);
    refused_naming(
        &["--pool-max", "1M", "--backing", "/dev/null"],
        &["--backing /dev/null", "character device"],
    );
    refused_naming(
        &["--mode", "kernel", "--pool-max", "1M"],
        &["--pool-max", "--mode user"],
    );
    refused_naming(
        &["--mode", "kernel", "--cold-codec", "zstd"],
        &["--cold-codec", "--mode user"],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(["run", "--", "true"])
        .env("ZPAGE_PRELOAD", "/nonexistent/libzpage_preload.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ZPAGE_PRELOAD"));
}

/// Kernel mode changes the machine's swap, zram and cgroups (and puts them
/// back): run only as root when kernel-state tests are asked for.
fn kernel_mode_here() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    root && std::env::var("ZPAGE_TEST_KERNEL_STATE").as_deref() == Ok("1")
}

/// 64 MiB written and read back by a program in a 16 MiB budget.
const VERIFY_64M: &str = "b = bytearray(64 << 20)\nfor i in range(0, len(b), 4096): b[i] = i // 4096 % 251\nassert all(b[i] == i // 4096 % 251 for i in range(0, len(b), 4096))";

#[test]
fn kernel_mode_runs_the_program_over_its_budget_and_reports_the_swap() {
    if !kernel_mode_here() {
        eprintln!("skipped: needs root and ZPAGE_TEST_KERNEL_STATE=1");
        return;
    }
    let json = std::env::temp_dir().join(format!("zpage-run-kernel-{}.json", std::process::id()));
    let out = zpage_run(
        &[
            "--mode",
            "kernel",
            "--budget",
            "16M",
            "--summary-json",
            json.to_str().unwrap(),
        ],
        &["python3", "-c", VERIFY_64M],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("Mode: kernel (zram-lz4"), "{err}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(summary["mode"], "kernel");
    assert!(
        summary["swap_peak_bytes"].as_u64().unwrap() > 16 << 20,
        "{summary}"
    );
    assert!(
        summary["cgroup_peak_bytes"].as_u64().unwrap() <= 17 << 20,
        "{summary}"
    );

    // The exit status passes through, and auto picks kernel mode as root.
    let out = zpage_run(
        &["--mode", "auto", "--budget", "16M"],
        &["sh", "-c", "exit 3"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("Mode: kernel"), "{err}");
}

/// Kernel mode with `--compare`: the same figures as user mode's. The
/// cgroup's OOM killer now and then ends such a run on some kernels; the
/// summary then says so and has no saving, and the run is tried again.
#[test]
fn kernel_mode_compare_saves_against_the_plain_peak() {
    if !kernel_mode_here() {
        eprintln!("skipped: needs root and ZPAGE_TEST_KERNEL_STATE=1");
        return;
    }
    for attempt in 1..=3 {
        let out = zpage_run(
            &["--mode", "kernel", "--compare", "--budget", "16M", "--json"],
            &["python3", "-c", VERIFY_64M],
        );
        let summary = json_summary(&out);
        if summary["oom_kills"].as_u64().unwrap_or(0) > 0 && out.status.code() != Some(0) {
            assert!(summary["saved_bytes"].is_null(), "{summary}");
            assert!(
                summary["saved_method"]
                    .as_str()
                    .unwrap()
                    .contains("OOM-killed"),
                "{summary}"
            );
            eprintln!("attempt {attempt}: OOM-killed, and the summary says so");
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{summary}");
        assert_eq!(summary["mode"], "kernel");
        assert_measured_saving(&summary, 64 << 20);
        assert_eq!(
            summary["zpage_peak_bytes"].as_u64().unwrap(),
            summary["cgroup_peak_bytes"].as_u64().unwrap()
                + summary["compressed_memory_peak_bytes"].as_u64().unwrap(),
            "{summary}"
        );
        return;
    }
    panic!("kernel mode was OOM-killed three times in a row");
}

// ---- CPython's regression tests -------------------------------------------

/// Modules run in CI (small and fast); `ZPAGE_PYTHON_TESTS=all` runs the
/// full list, `ZPAGE_PYTHON_TESTS="test_x test_y"` any others.
const CI_MODULES: &[&str] = &[
    "test_dict",
    "test_list",
    "test_json",
    "test_struct",
    "test_zlib",
];
const ALL_MODULES: &[&str] = &[
    "test_dict",
    "test_list",
    "test_json",
    "test_unicode",
    "test_re",
    "test_pickle",
    "test_io",
    "test_mmap",
    "test_threading",
    "test_subprocess",
    "test_socket",
    "test_gc",
    "test_bytes",
    "test_array",
    "test_collections",
    "test_multiprocessing_forkserver",
    "test_signal",
    "test_select",
    "test_os",
    "test_tempfile",
    "test_zlib",
    "test_struct",
    "test_sort",
    "test_set",
    "test_itertools",
    "test_queue",
    "test_fileio",
    "test_bufio",
    "test_weakref",
    "test_memoryview",
    "test_deque",
    "test_zipfile",
    "test_heapq",
];

/// A test that hangs fails (with regrtest's traceback) instead of hanging
/// the suite.
const REGRTEST_TIMEOUT: &str = "--timeout=600";

/// A python3 whose regression tests are installed (Debian splits them into
/// libpython3.X-testsuite).
fn python_with_tests() -> Option<String> {
    ["python3", "/usr/bin/python3"].into_iter().find_map(|py| {
        let ok = Command::new(py)
            .args(["-c", "import test.test_dict"])
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then(|| py.to_string())
    })
}

/// The summary lines of a regrtest run that must match with and without
/// zpage ("Total tests: run=N failures=..." and "Result: ...").
fn outcome(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| {
            l.starts_with("Total tests:") || l.starts_with("Result:") || l.contains("tests OK")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// regrtest's verdict ("SUCCESS", "FAILURE", ...) from its "Result:" line.
fn regrtest_result(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.strip_prefix("Result:"))
        .next_back()
        .map_or_else(|| "none".to_string(), |r| r.trim().to_string())
}

fn peak_kib_without_zpage(python: &str, module: &str) -> (Output, u64) {
    let dir = tempdir(&format!("peak-{module}"));
    let file = dir.join("rss");
    let out = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&file)
        .args([python, "-m", "test", "-q", REGRTEST_TIMEOUT, module])
        .output()
        .expect("/usr/bin/time (Debian package time) must be installed");
    let kib = std::fs::read_to_string(&file)
        .unwrap_or_default()
        .trim()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    (out, kib)
}

#[test]
fn cpython_regression_tests_pass_with_a_quarter_of_their_peak() {
    let Some(python) = python_with_tests() else {
        eprintln!(
            "skipped: no python3 with its regression tests (install libpython3.11-testsuite)"
        );
        return;
    };
    let chosen = std::env::var("ZPAGE_PYTHON_TESTS").unwrap_or_default();
    let modules: Vec<String> = match chosen.trim() {
        "" => CI_MODULES.iter().map(|s| s.to_string()).collect(),
        "all" => ALL_MODULES.iter().map(|s| s.to_string()).collect(),
        list => list.split_whitespace().map(String::from).collect(),
    };
    // `ZPAGE_PYTHON_TESTS_MIN_MAPPING=1M` puts CPython's arenas in regions too.
    let min_mapping = std::env::var("ZPAGE_PYTHON_TESTS_MIN_MAPPING").ok();
    let mut failures = Vec::new();
    let mut table = vec![
        "module | peak without zpage | budget | peak under zpage | evictions | regrtest's result without zpage | under zpage".to_string(),
    ];
    for module in &modules {
        let (plain, peak_kib) = peak_kib_without_zpage(&python, module);
        let budget = (peak_kib * 1024 / 4).max(1 << 20);
        let dir = tempdir(&format!("py-{module}"));
        let json = dir.join("summary.json");
        let budget_text = budget.to_string();
        let mut args = vec![
            "--budget",
            budget_text.as_str(),
            "--summary-json",
            json.to_str().unwrap(),
        ];
        if let Some(min) = min_mapping.as_deref() {
            args.extend(["--min-mapping", min]);
        }
        let zp = zpage_run(
            &args,
            &[&python, "-m", "test", "-q", REGRTEST_TIMEOUT, module],
        );
        let summary: serde_json::Value = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let same = plain.status.code() == zp.status.code() && outcome(&plain) == outcome(&zp);
        let line = format!(
            "{module} | {} KiB | {} KiB | {} KiB | {} | {} | {}",
            peak_kib,
            budget / 1024,
            summary["peak_resident_bytes"].as_u64().unwrap_or(0) / 1024,
            summary["evictions"].as_u64().unwrap_or(0),
            regrtest_result(&plain),
            if same { "same" } else { "DIFFERENT" }
        );
        eprintln!("{line}");
        table.push(line);
        if !same {
            failures.push(format!(
                "{module}: without zpage {:?} {:?}, under zpage {:?} {:?}\nstdout under zpage:\n{}\nstderr under zpage:\n{}",
                plain.status.code(),
                outcome(&plain),
                zp.status.code(),
                outcome(&zp),
                String::from_utf8_lossy(&zp.stdout),
                String::from_utf8_lossy(&zp.stderr),
            ));
        }
    }
    eprintln!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Debian's redis-server links jemalloc, whose extents `--min-mapping 1M`
/// puts in regions: loaded past its budget over a pipeline (SETs of real
/// text), every value reads back, and the RDB a `BGSAVE` writes loads with
/// the same digest. Two bugs this caught: `free` of a pointer at the first
/// byte of a jemalloc extent unmapped the whole extent, and jemalloc's
/// background threads (every signal blocked) were killed at their first
/// evicted page.
#[test]
fn redis_server_with_jemalloc_extents_in_regions_keeps_every_value() {
    if !installed(
        "redis_server_with_jemalloc_extents_in_regions_keeps_every_value",
        "redis-server",
        "redis-server",
    ) {
        return;
    }
    redis_under_zpage_run_keeps_every_value("redis", &[]);
    // With a cold codec the budget builds zstd contexts, which it does from
    // inside jemalloc's mmap of the first extent: they must not call back
    // into jemalloc (it hung there, holding its own lock), and the
    // dictionary is trained from redis's own pages.
    redis_under_zpage_run_keeps_every_value("redis-cold", &["--cold-codec", "zstd-dict"]);
}

/// `zpage bench redis` of a small set through `zpage run` with `extra`
/// options: every value and the digest come back, and pages were evicted.
fn redis_under_zpage_run_keeps_every_value(tag: &str, extra: &[&str]) {
    let zpage = env!("CARGO_BIN_EXE_zpage");
    let summary_path = tempdir(tag).join("summary.json");
    // A hang (a deadlock in the fault path) fails the test in ten minutes
    // instead of holding the suite.
    let output = Command::new("timeout")
        .args(["-k", "10", "600", zpage])
        .args([
            "bench", "redis", "--size", "24M", "--gets", "5000", "--json",
        ])
        .args(["--scratch-dir", &std::env::temp_dir().display().to_string()])
        .args(["--", zpage, "run", "--budget", "6M", "--min-mapping", "1M"])
        .args(extra)
        .args(["--summary-json", &summary_path.display().to_string()])
        .args(["--", "redis-server"])
        .env("ZPAGE_PRELOAD", preload())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{tag}: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["wrong_values"], 0, "{report}");
    assert_eq!(report["verified_keys"], report["keys"], "{report}");
    assert_eq!(
        report["digest"], report["bgsave"]["loaded_digest"],
        "{report}"
    );
    let summary = summary_at(&summary_path);
    let evictions = summary["evictions"].as_u64().unwrap_or(0);
    assert!(
        evictions > 0,
        "{tag}: nothing was evicted, the test proves nothing: {summary}"
    );
}

/// A second runtime with its own heap manager: node's large Buffers (made
/// with the `malloc` family) land in regions, its V8 heap stays out. A
/// workload four times its budget gives the digest it gives without zpage,
/// with every Buffer checked against the digest taken when it was filled.
/// Size from ZPAGE_NODE_TEST_MIB (default 64).
#[test]
fn node_runs_a_verified_workload_four_times_its_budget() {
    if !installed(
        "node_runs_a_verified_workload_four_times_its_budget",
        "node",
        "nodejs",
    ) {
        return;
    }
    let mib: u64 = std::env::var("ZPAGE_NODE_TEST_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/node-buffers.js");
    let script = script.display().to_string();
    let size = mib.to_string();
    let plain = Command::new("node")
        .args([&script, &size])
        .output()
        .unwrap();
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(plain.status.success(), "{}", stderr(&plain));
    let summary = tempdir("node").join("summary.json");
    let budget = format!("{}M", mib / 4);
    let summary_arg = summary.display().to_string();
    let under = zpage_run(
        &["--budget", &budget, "--summary-json", &summary_arg],
        &["node", &script, &size],
    );
    assert!(under.status.success(), "{}", stderr(&under));
    let digest = |o: &Output| String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(digest(&plain).contains("wrong 0"), "{}", digest(&plain));
    assert_eq!(digest(&under), digest(&plain));
    let summary = summary_at(&summary);
    assert!(
        summary["evictions"].as_u64().unwrap_or(0) > 0
            && summary["regions_made"].as_u64().unwrap_or(0) > 0,
        "nothing was evicted, the test proves nothing: {summary}"
    );
}

/// A C program that fills `HEAP` MiB of `malloc`'d memory, maps `FILE`
/// (`MiB` of it, private, read-only) and reads it all, then for `MS`
/// milliseconds reads its heap over and over (keeping its budget full),
/// prints its `RssFile` in KiB, and reads the file again and checks every
/// word: `filemapper FILE MiB MS HEAP`.
fn filemapper() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        compile_c(
            &tempdir("filemapper"),
            "filemapper",
            r#"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
static uint64_t sum(const uint64_t *p, size_t words) {
    uint64_t s = 0;
    for (size_t i = 0; i < words; i += 512) s += p[i] ^ i;
    return s;
}
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    size_t n = strtoul(argv[2], 0, 10) << 20, heap_bytes = strtoul(argv[4], 0, 10) << 20;
    uint64_t *heap = malloc(heap_bytes);
    for (size_t i = 0; i < heap_bytes / 8; i++) heap[i] = i;
    int fd = open(argv[1], O_RDONLY);
    const uint64_t *p = mmap(0, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 2; }
    uint64_t first = sum(p, n / 8);
    double until = now() + strtoul(argv[3], 0, 10) / 1e3;
    while (now() < until)
        if (sum(heap, heap_bytes / 8) == 1) puts("never");
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    while (fgets(line, sizeof line, status))
        if (!strncmp(line, "RssFile:", 8)) printf("RssFile %lu\n", strtoul(line + 8, 0, 10));
    if (sum(p, n / 8) != first) { puts("MISMATCH"); return 99; }
    puts("checked");
    return 0;
}
"#,
            &[],
        )
    })
}

#[test]
fn file_pages_the_program_stopped_using_leave_its_resident_memory() {
    // A file of its own (on the build's disk, not a tmpfs), mapped by no
    // other process: the kernel reclaims only what one process maps alone.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("filemapper-{}.data", std::process::id()));
    let words: Vec<u8> = (0..16u64 << 17)
        .flat_map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).to_le_bytes())
        .collect();
    std::fs::write(&file, &words).unwrap();
    let path = file.to_str().unwrap();
    let rss_file_kib = |every: &str| {
        let out = zpage_run(
            &["--budget", "8M", "--file-pages-every", every, "--json"],
            &[filemapper().to_str().unwrap(), path, "16", "1500", "32"],
        );
        let summary = json_summary(&out);
        let stdout = stdout_of(out);
        assert!(stdout.ends_with("checked\n"), "{stdout}");
        let kib: u64 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RssFile "))
            .unwrap()
            .parse()
            .unwrap();
        (kib, summary["file_page_passes"].as_u64().unwrap())
    };
    let (kept, kept_passes) = rss_file_kib("0");
    let (given_back, passes) = rss_file_kib("200ms");
    std::fs::remove_file(&file).unwrap();
    assert_eq!(kept_passes, 0);
    assert!(
        kept >= 16 << 10,
        "the mapped file alone is 16 MiB: RssFile {kept} KiB"
    );
    assert!(passes >= 1, "no pass in 1.5 s at 200 ms, the budget full");
    assert!(
        given_back + (12 << 10) <= kept,
        "RssFile {given_back} KiB with file pages given back, {kept} KiB kept"
    );
}
