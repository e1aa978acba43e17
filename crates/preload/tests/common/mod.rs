//! What the preload library's tests share: the library itself, their C
//! programs, scratch directories.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The preload library, built now: `cargo test` does not build a
/// `cdylib` for integration tests (they cannot link it), so the test asks
/// cargo for it, with the test profile, next to this test's binary.
pub fn preload_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        // The library of the build this test binary belongs to: `cargo
        // test` builds the test profile into target/debug, `cargo test
        // --release` the bench profile into target/release, and neither
        // rebuilds the cdylib itself.
        let profile = if profile_dir.ends_with("release") {
            "bench"
        } else {
            "test"
        };
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--profile", profile, "-p", "zpage-preload"])
            .status()
            .expect("running cargo to build the preload library");
        assert!(status.success(), "cargo build -p zpage-preload failed");
        let lib = profile_dir.join("libzpage_preload.so");
        assert!(lib.exists(), "{} missing after the build", lib.display());
        lib
    })
    .clone()
}

/// `tests/c/NAME.c` compiled (once per test process) with warnings as
/// errors.
pub fn compile_c(name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let dir = std::env::temp_dir().join(format!("zpage-preload-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    cc([
        "-o".as_ref(),
        exe.as_os_str(),
        source.as_os_str(),
        "-lpthread".as_ref(),
    ]);
    built.push((name.to_string(), exe.clone()));
    exe
}

/// Runs the C compiler with warnings as errors on `args`; a failure fails
/// the test with the compiler's message.
pub fn cc<'a>(args: impl IntoIterator<Item = &'a OsStr>) {
    let args: Vec<&OsStr> = args.into_iter().collect();
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .args(&args)
        .output()
        .expect("cc (the C compiler) must be installed");
    assert!(
        out.status.success(),
        "cc {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh scratch directory.
pub fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "zpage-preload-{tag}-{}-{:?}",
        std::process::id(),
        std::time::SystemTime::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
