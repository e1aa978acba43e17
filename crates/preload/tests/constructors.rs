//! Memory mapped by a library's constructor before the preload library's
//! own constructor has run (the loader runs the constructors of the
//! libraries a program links to, jemalloc's in Redis, before that of a
//! library preloaded ahead of them) is compressed memory like the rest.

mod common;

use common::{cc, preload_library};
use std::path::Path;
use std::process::Command;
use zpage_region::run_report::{ProcessReport, REPORT_DIR_ENV};

/// 4 MiB: a quarter of what the library's constructor fills.
const BUDGET_BYTES: usize = 4 << 20;

#[test]
fn memory_a_library_constructor_maps_is_compressed_memory() {
    // A path without spaces: it goes into the linker's -L and -rpath.
    let dir = std::env::temp_dir().join(format!("zpage-preload-early-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let lib = dir.join("libearly.so");
    let exe = dir.join("early_main");
    let (lib_source, main_source) = (c.join("early_lib.c"), c.join("early_main.c"));
    cc([
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        lib_source.as_os_str(),
    ]);
    let (search, rpath) = (
        format!("-L{}", dir.display()),
        format!("-Wl,-rpath,{}", dir.display()),
    );
    cc([
        "-o".as_ref(),
        exe.as_os_str(),
        main_source.as_os_str(),
        search.as_ref(),
        "-learly".as_ref(),
        rpath.as_ref(),
    ]);
    let reports = dir.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let output = Command::new(&exe)
        .env("LD_PRELOAD", preload_library())
        .env("ZPAGE_RUN_BUDGET_BYTES", BUDGET_BYTES.to_string())
        .env(REPORT_DIR_ENV, &reports)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let report = ProcessReport::read_dir(&reports)
        .unwrap()
        .into_iter()
        .find(|r| r.program.ends_with("/early_main"))
        .unwrap_or_else(|| panic!("no report; stdout:\n{stdout}\nstderr:\n{stderr}"));
    let _ = std::fs::remove_dir_all(&dir);
    // Filled under a budget of a quarter of it, most of it was evicted
    // (plain memory would be all resident: 4096 of 4096 pages).
    let resident: usize = stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no resident count in {stdout:?}"));
    assert!(
        resident <= 2 * BUDGET_BYTES / 4096,
        "{resident} of 4096 pages resident: the constructor's memory stayed plain\n{stdout}{stderr}"
    );
    assert!(report.eviction_count >= 2048, "{report:?}");
}
