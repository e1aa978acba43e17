//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod hazard;

use std::sync::atomic::{AtomicU64, Ordering};
use zpage_region::{Region, PAGE_SIZE};

pub const MIB: usize = 1 << 20;

/// The 8-byte word `w` of page `p` of `region`, as an atomic.
pub fn word(region: &Region, p: usize, w: usize) -> &AtomicU64 {
    assert!(p * PAGE_SIZE + w * 8 + 8 <= region.len());
    // SAFETY: in bounds of the region's live mapping, 8-byte aligned; the
    // reference lives no longer than the region borrow.
    unsafe { &*(region.as_ptr().add(p * PAGE_SIZE + w * 8) as *const AtomicU64) }
}

pub fn read(region: &Region, p: usize, w: usize) -> u64 {
    word(region, p, w).load(Ordering::Relaxed)
}

pub fn write(region: &Region, p: usize, w: usize, v: u64) {
    word(region, p, w).store(v, Ordering::Relaxed)
}

/// Installs `handler` for SIGALRM and arms the process-wide real-time
/// timer to fire every `interval_us` (a process-directed signal, so any
/// thread may take it: zpage's own threads must not).
pub fn start_alarm(handler: extern "C" fn(libc::c_int), interval_us: i64) {
    // SAFETY: installs the caller's handler (the tests' handlers only read
    // memory and bump atomics) and arms the timer.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler as *const () as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGALRM, &act, std::ptr::null_mut()),
            0
        );
        let tick = libc::timeval {
            tv_sec: 0,
            tv_usec: interval_us,
        };
        let timer = libc::itimerval {
            it_interval: tick,
            it_value: tick,
        };
        assert_eq!(
            libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()),
            0
        );
    }
}

/// Disarms the timer [`start_alarm`] armed (the handler stays installed).
pub fn stop_alarm() {
    // SAFETY: disarms the timer.
    unsafe {
        let zero: libc::itimerval = std::mem::zeroed();
        libc::setitimer(libc::ITIMER_REAL, &zero, std::ptr::null_mut());
    }
}

/// Rss (bytes) of the mapping that starts at `base`, from /proc/self/smaps.
pub fn rss_of(base: usize) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((start, _)) = range.split_once('-') {
                if start.chars().all(|c| c.is_ascii_hexdigit()) && !start.is_empty() {
                    inside = usize::from_str_radix(start, 16).ok() == Some(base);
                    continue;
                }
            }
        }
        if inside {
            if let Some(rest) = line.strip_prefix("Rss:") {
                let kb: usize = rest
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                return kb * 1024;
            }
        }
    }
    0
}

/// A small xorshift generator (deterministic per seed, no allocation).
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// This test binary, to run the test named `name` alone in a child process
/// with `ZPAGE_CHILD=1` (see [`is_child`]).
fn child_command(name: &str) -> std::process::Command {
    let exe = std::env::current_exe().expect("test binary");
    let mut command = std::process::Command::new(exe);
    command
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("ZPAGE_CHILD", "1");
    command
}

/// Runs the test named `name` of this test binary in a child process with
/// `ZPAGE_CHILD=1`, returning its exit status. A child that does not finish
/// within 60 s is killed (its status then says SIGKILL).
pub fn run_child(name: &str) -> std::process::ExitStatus {
    watched(
        child_command(name),
        name,
        std::time::Duration::from_secs(60),
    )
    .status
}

/// Like [`run_child`], with the child's stderr captured; a child that does
/// not finish within 120 s is killed.
pub fn run_child_output(name: &str) -> std::process::Output {
    run_child_output_within(name, std::time::Duration::from_secs(120))
}

/// Like [`run_child_output`], killing the child after `limit` (for tests
/// whose size is set from the environment).
pub fn run_child_output_within(name: &str, limit: std::time::Duration) -> std::process::Output {
    let mut command = child_command(name);
    command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    watched(command, name, limit)
}

/// Runs `command` (the child test `name`) to its end, killing it after
/// `limit`; what it printed is in the output only where `command` pipes it.
fn watched(
    mut command: std::process::Command,
    name: &str,
    limit: std::time::Duration,
) -> std::process::Output {
    let child = command.spawn().expect("spawn child");
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = std::sync::Arc::clone(&done);
        let name = name.to_owned();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + limit;
            while !done.load(Ordering::Acquire) {
                if std::time::Instant::now() > deadline {
                    eprintln!("child test {name} still running after {limit:?}: killed");
                    // SAFETY: kill(2) on our unreaped child (its pid cannot
                    // have been reused: `done` is set only after the wait).
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let output = child.wait_with_output().expect("wait child");
    done.store(true, Ordering::Release);
    watchdog.join().expect("watchdog");
    output
}

/// Runs the test named `name` in a child process (as [`run_child_output`])
/// that must end by `abort` (SIGABRT: how the fault path ends the process
/// for a page it cannot give back); returns the child's stderr, for the
/// caller to check what the message names.
pub fn run_child_expecting_abort(name: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let output = run_child_output(name);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "{:?}\n{stderr}",
        output.status
    );
    stderr
}

pub fn is_child() -> bool {
    std::env::var_os("ZPAGE_CHILD").is_some()
}

/// Word `w` of a text-like page `p` (version `round`): one of sixteen
/// 8-byte tokens picked by a hash, the page's own number in word 1. LZ4
/// finds the repeats; zstd's entropy coding shrinks them further, so cold
/// recompression has something to gain.
pub fn text_word(p: usize, w: usize, round: u64) -> u64 {
    const TOKENS: [&[u8; 8]; 16] = [
        b"memory  ",
        b"{\"id\":  ",
        b"null,   ",
        b"\"name\": ",
        b"page    ",
        b"zram    ",
        b"cold    ",
        b"hot     ",
        b"\n       ",
        b"true,   ",
        b"false,  ",
        b"value   ",
        b"key     ",
        b"[1, 2,  ",
        b"3, 4]   ",
        b"}\n      ",
    ];
    if w == 1 {
        return (p as u64) << 16 | round;
    }
    let mut x = (p as u64) << 24 ^ (w as u64) ^ round.wrapping_mul(0x2545_F491_4F6C_DD1D);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 29;
    u64::from_le_bytes(*TOKENS[(x % 16) as usize])
}

/// Writes text page `p` (version `round`) into `region`.
pub fn write_text_page(region: &Region, p: usize, round: u64) {
    for w in 0..PAGE_SIZE / 8 {
        write(region, p, w, text_word(p, w, round));
    }
}

/// Panics unless page `p` of `region` is text page `p` version `round`.
pub fn check_text_page(region: &Region, p: usize, round: u64) {
    for w in 0..PAGE_SIZE / 8 {
        let got = read(region, p, w);
        assert_eq!(
            got,
            text_word(p, w, round),
            "page {p} word {w} (version {round})"
        );
    }
}
