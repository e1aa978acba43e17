//! Memory mapped by a library's constructor before the preload library's
//! own constructor has run (the loader runs the constructors of the
//! libraries a program links to, jemalloc's in Redis, before that of a
//! library preloaded ahead of them) is compressed memory like the rest.

mod common;

use common::{cc, run_with_budget};
use std::path::Path;
use std::process::Command;

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
    let r = run_with_budget(Command::new(&exe), &BUDGET_BYTES.to_string(), true);
    let (stdout, stderr) = (&r.stdout, &r.stderr);
    assert!(
        r.output.status.success(),
        "{:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        r.output.status
    );
    let report = r.report();
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
