//! What the preload library's tests share: the library itself, their C
//! programs, scratch directories, and one way to run a program under the
//! library and find its process's report.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use zpage_region::run_report::{ProcessReport, REPORT_DIR_ENV};

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

/// A program's run under the library (or plainly): its output, and the
/// report its process left.
pub struct Run {
    pub output: Output,
    pub stdout: String,
    pub stderr: String,
    /// The report of the process running `command`'s program (`None`: it
    /// left none, as a plain run does).
    pub report: Option<ProcessReport>,
}

impl Run {
    /// The report, which the test needs: failing with the program's
    /// output when there is none.
    pub fn report(&self) -> &ProcessReport {
        self.report.as_ref().unwrap_or_else(|| {
            panic!(
                "no report from the program; stdout:\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Runs `command` with `budget` (`ZPAGE_RUN_BUDGET_BYTES`) for each of its
/// processes, under the library when `preload`, in a scratch directory
/// of its own that also takes the processes' reports (removed after).
pub fn run_with_budget(mut command: Command, budget: &str, preload: bool) -> Run {
    let program = Path::new(command.get_program())
        .file_name()
        .expect("a program with a file name")
        .to_string_lossy()
        .into_owned();
    let dir = tempdir(&program);
    command
        .env("ZPAGE_RUN_BUDGET_BYTES", budget)
        .env(REPORT_DIR_ENV, &dir)
        .current_dir(&dir);
    if preload {
        command.env("LD_PRELOAD", preload_library());
    }
    let output = command.output().expect("running the test program");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let reports = ProcessReport::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{e}; stdout:\n{stdout}\nstderr:\n{stderr}"));
    let _ = std::fs::remove_dir_all(&dir);
    let suffix = format!("/{program}");
    let report = reports.into_iter().find(|r| r.program.ends_with(&suffix));
    Run {
        output,
        stdout,
        stderr,
        report,
    }
}
