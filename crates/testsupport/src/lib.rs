//! What the tests of several zpage crates share, kept in one place:
//!
//! - [`installed`]: whether a program a test needs (a `redis-server`, a
//!   `node`) is installed, skipping the test with a message where it is not,
//!   and failing it on CI, which installs everything `.ci/apt-packages` lists;
//! - [`TempDir`]: a scratch directory removed when dropped;
//! - [`kernel_thread`] and [`zombie`]: processes without user memory, for
//!   the tests of what reads a process's memory;
//! - [`promtool_check_metrics`]: `promtool check metrics` on a scrape;
//! - [`alloc`]: a global allocator that counts the calls each thread makes,
//!   for the tests that prove a path (a region's fault path, a store load, a
//!   decode) allocates nothing.
//!
//! A dev-dependency only: no library crate's normal build depends on it, and
//! it depends on no zpage crate, so every layer can use it without a cycle.

pub mod alloc;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Whether `program --version` runs and succeeds here.
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `program` (from the Debian package `debian_package`), which the
/// test `test` needs, is installed. Where it is not, the test should return
/// early: this says so on standard output (`SKIP ...`), so a skipped test is
/// visible. On CI (the `CI` variable set), where every package in
/// `.ci/apt-packages` is installed, a missing program is a failure instead.
pub fn installed(test: &str, program: &str, debian_package: &str) -> bool {
    if runs(program) {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: {program} is not installed (apt-get install {debian_package}; .ci/apt-packages lists it)"
    );
    println!("SKIP {test}: {program} is not installed (apt-get install {debian_package})");
    false
}

/// A directory under the system's temporary directory, removed with all it
/// holds when dropped (also when the test fails).
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `zpage-<name>-<pid>-<n>`, with `n` counted per process: tests running
    /// in parallel, and a test and its child process, never share one.
    pub fn new(name: &str) -> TempDir {
        static MADE: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "zpage-{name}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        // Left over by an earlier process that had this pid and was killed.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The PID of a kernel thread (`PF_KTHREAD` in `/proc/PID/stat`), if this
/// machine shows any (a container may not).
pub fn kernel_thread() -> Option<u32> {
    all_kernel_threads().into_iter().next()
}

/// The PIDs of every kernel thread visible in `/proc`.
pub fn all_kernel_threads() -> Vec<u32> {
    const PF_KTHREAD: u32 = 0x0020_0000;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command's closing parenthesis: state, ppid, pgrp,
            // session, tty, tpgid, flags.
            let flags: u32 = stat
                .rsplit_once(") ")?
                .1
                .split_whitespace()
                .nth(6)?
                .parse()
                .ok()?;
            (flags & PF_KTHREAD != 0).then_some(pid)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// A child that has exited and is not reaped: a zombie until the caller
/// waits for it.
#[allow(clippy::zombie_processes)] // a zombie is the point; the caller reaps it
pub fn zombie() -> std::process::Child {
    let child = Command::new("true").spawn().expect("`true` runs");
    let stat = format!("/proc/{}/stat", child.id());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(&stat).expect("an unreaped child stays in /proc");
        if state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
        {
            return child;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "`true` did not exit in 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Runs `promtool check metrics` (Debian's `prometheus` package) on `text`
/// and panics unless it exits 0 with no lint complaint. `None` when
/// promtool could not be started (not installed): the caller decides
/// whether that skips or fails its test.
pub fn promtool_check_metrics(text: &str) -> Option<()> {
    use std::io::Write;
    use std::process::Stdio;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    promtool
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape to promtool");
    let checked = promtool.wait_with_output().expect("wait for promtool");
    let problems = String::from_utf8_lossy(&checked.stdout).to_string()
        + &String::from_utf8_lossy(&checked.stderr);
    assert!(
        checked.status.success() && problems.trim().is_empty(),
        "promtool: {problems}"
    );
    Some(())
}
