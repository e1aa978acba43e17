//! The C example, built as a C user would: header, library and zpage.pc
//! installed into a prefix, `cc $(pkg-config --cflags --libs zpage)`, run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo put libzpage.so and libzpage.a: `cargo test` leaves them in
/// target/<profile>/deps (next to this test), `cargo build` in target/<profile>.
fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
    if deps.join("libzpage.so").exists() {
        deps
    } else {
        deps.parent().expect("target/<profile>").to_path_buf()
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn install(prefix: &Path) {
    run(Command::new("sh")
        .arg(repo_root().join("crates/ffi/install.sh"))
        .arg(prefix)
        .arg(build_dir()));
}

fn compile_and_run(prefix: &Path, pkg_config_flags: &str, extra: &str, exe: &Path) -> String {
    compile_and_run_example(
        "bench_region.c",
        &["16", "4"],
        prefix,
        pkg_config_flags,
        extra,
        exe,
    )
}

fn compile_and_run_example(
    example: &str,
    args: &[&str],
    prefix: &Path,
    pkg_config_flags: &str,
    extra: &str,
    exe: &Path,
) -> String {
    let source = repo_root().join("examples/c").join(example);
    let script = format!(
        "cc -O2 -Wall -Wextra -Werror {} -o {} $(pkg-config {pkg_config_flags} --cflags --libs zpage) {extra}",
        source.display(),
        exe.display()
    );
    run(Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
    // `timeout`: a hung example must fail the test, not hang CI.
    // cargo test sets LD_LIBRARY_PATH to its target directories, which would
    // win over the rpath and load whatever libzpage.so lies there.
    run(Command::new("timeout")
        .args(["-s", "KILL", "120"])
        .arg(exe)
        .args(args)
        .env_remove("LD_LIBRARY_PATH"))
}

#[test]
fn c_example_builds_and_runs() {
    if !zpage_testsupport::runs("cc") || !zpage_testsupport::runs("pkg-config") {
        panic!("the C example needs cc and pkg-config (listed in .ci/apt-packages)");
    }
    for lib in ["libzpage.so", "libzpage.a"] {
        assert!(
            build_dir().join(lib).exists(),
            "{lib} was not built in {}",
            build_dir().display()
        );
    }
    let scratch = std::env::temp_dir().join(format!("zpage-ffi-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);

    // Shared library, found at run time through the rpath.
    let shared = scratch.join("shared");
    install(&shared);
    let pc = std::fs::read_to_string(shared.join("lib/pkgconfig/zpage.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={}", shared.display())) && !pc.contains('@'));
    let rpath = format!("-Wl,-rpath,{}", shared.join("lib").display());
    let exe = scratch.join("bench_region_shared");
    let out = compile_and_run(&shared, "", &rpath, &exe);
    // The library has a SONAME, and the program records it (not the file name).
    let major = env!("CARGO_PKG_VERSION_MAJOR");
    let dynamic = run(Command::new("readelf")
        .arg("-d")
        .arg(shared.join("lib/libzpage.so")));
    assert!(
        dynamic.contains(&format!("Library soname: [libzpage.so.{major}]")),
        "{dynamic}"
    );
    let needed = run(Command::new("readelf").arg("-d").arg(&exe));
    assert!(
        needed.contains(&format!("Shared library: [libzpage.so.{major}]")),
        "{needed}"
    );
    assert!(
        out.contains("error reporting works: zpage_region_create: out is NULL"),
        "{out}"
    );
    assert!(
        out.contains("Sequential Access Low Entropy") && out.contains("Random Access High Entropy"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("zpage C example: OK"), "{out}");

    // A program's 10 kHz timer-signal handler reads region memory while the
    // main thread faults, prefaults, pins and reads stats: no hang (the
    // timeout kills a hung run and fails the test), no wrong word.
    let out = compile_and_run_example(
        "signal_handler.c",
        &["3"],
        &shared,
        "",
        &rpath,
        &scratch.join("signal_handler"),
    );
    assert!(
        out.trim_end().ends_with("zpage signal example: OK"),
        "{out}"
    );

    // Static library only: pkg-config --static adds what the Rust runtime needs.
    let fixed = scratch.join("static");
    install(&fixed);
    for entry in std::fs::read_dir(fixed.join("lib")).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("libzpage.so")
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let out = compile_and_run(&fixed, "--static", "", &scratch.join("bench_region_static"));
    assert!(out.trim_end().ends_with("zpage C example: OK"), "{out}");

    std::fs::remove_dir_all(&scratch).unwrap();
}
