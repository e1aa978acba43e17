//! Kernel mode on the real kernel (root and ZPAGE_TEST_KERNEL_STATE=1): a
//! program that writes and verifies more memory than its budget runs to
//! success in a memory cgroup swapping to zram; its swap-out shows in the
//! outcome; a failing, a killed and a signalled program report how they
//! ended; and every time the machine's state afterwards equals the state before.

use std::process::Command;
use std::time::{Duration, Instant};

use zpage_kernel::machine::{MachineGuard, MachineState, OtherSwap, SwapBackend};
use zpage_kernel::run::{self, ChildExit, KernelRun, RunOptions};

/// Environment variable that turns this test binary into the test program:
/// `MODE:MIB` with MODE `verify`, `fail` or `hold`.
const CHILD_ENV: &str = "ZPAGE_RUN_TEST_CHILD";
const BUDGET: u64 = 16 << 20;
const DATA_MIB: usize = 64;

/// Text-like content of page `index` (compresses about 3:1, never same-filled).
fn fill_page(page: &mut [u8], index: usize) {
    const WORDS: [&str; 8] = [
        "budget ", "cgroup ", "page ", "swap ", "zram ", "memory ", "the ", "of ",
    ];
    let mut state = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut at = 0;
    while at < page.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let word = WORDS[(state % 8) as usize].as_bytes();
        let n = word.len().min(page.len() - at);
        page[at..at + n].copy_from_slice(&word[..n]);
        at += n;
    }
    page[..8].copy_from_slice(&(index as u64).to_le_bytes());
}

/// The test program: writes MIB of pages, reads every one back twice and
/// checks it; then exits 0 (`verify`), exits 3 (`fail`) or waits to be
/// killed (`hold`). A wrong byte exits 1.
#[test]
fn program_under_test() {
    let Ok(request) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, mib) = request.split_once(':').expect("MODE:MIB");
    let mib: usize = mib.parse().expect("MIB");
    let page_size = 4096;
    let pages = mib << 20 >> 12;
    let mut memory = vec![0u8; pages * page_size];
    for (index, page) in memory.chunks_exact_mut(page_size).enumerate() {
        fill_page(page, index);
    }
    let mut expected = vec![0u8; page_size];
    for _ in 0..2 {
        for (index, page) in memory.chunks_exact(page_size).enumerate() {
            fill_page(&mut expected, index);
            if page != expected.as_slice() {
                eprintln!("page {index} read back wrong");
                std::process::exit(1);
            }
        }
    }
    match mode {
        "verify" => std::process::exit(0),
        "fail" => std::process::exit(3),
        _ => {
            // Tells the test the reads are over: from now on the pages stay
            // where the kernel put them.
            std::fs::write(holding_marker(std::process::id()), b"").expect("holding marker");
            loop {
                std::thread::sleep(Duration::from_secs(1));
                std::hint::black_box(&memory);
            }
        }
    }
}

/// The file a `hold` program with this pid creates once it holds its data.
fn holding_marker(pid: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("zpage-run-real-holding-{pid}"))
}

fn program(mode: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .args([
            "program_under_test",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{mode}:{DATA_MIB}"))
        .stdout(std::process::Stdio::null());
    command
}

fn enabled(test: &str) -> bool {
    if !zpage_kernel::kernel_state_tests_enabled(test) {
        return false;
    }
    if let Err(e) = run::check_available(&RunOptions::new(BUDGET)) {
        println!("SKIP {test}: {e}");
        return false;
    }
    true
}

/// The state to compare, taken under the machine lock so no other test is
/// halfway through a change of its own.
fn state_now() -> MachineState {
    let _lock = zpage_kernel::KernelStateLock::acquire();
    MachineState::capture().expect("read the machine state")
}

#[test]
fn a_program_four_times_its_budget_succeeds_swapping_to_zram_and_the_machine_is_restored() {
    let test =
        "a_program_four_times_its_budget_succeeds_swapping_to_zram_and_the_machine_is_restored";
    if !enabled(test) {
        return;
    }
    let before = state_now();
    let outcome = run::run(program("verify"), &RunOptions::new(BUDGET)).expect("kernel mode run");
    assert_eq!(state_now(), before, "the machine differs after the run");
    println!("{}", serde_json::to_string_pretty(&outcome).unwrap());
    assert_eq!(outcome.exit, ChildExit::Code(0), "{outcome:?}");
    assert_eq!(outcome.backend, "zram-lz4");
    assert!(outcome.cgroup_peak_bytes <= BUDGET, "{outcome:?}");
    assert!(
        outcome.swap_outs >= (DATA_MIB as u64 - 16) << 20 >> 12,
        "{outcome:?}"
    );
    assert!(outcome.swap_ins > 0, "{outcome:?}");
    assert!(outcome.major_faults > 0, "{outcome:?}");
    assert!(outcome.swap_peak_bytes >= 32 << 20, "{outcome:?}");
    assert!(
        outcome.footprint_peak_bytes > (DATA_MIB as u64) << 20,
        "{outcome:?}"
    );
    let at_peak = &outcome.compressed_at_peak;
    assert!(at_peak.original_bytes >= 32 << 20, "{outcome:?}");
    assert!(
        at_peak.compressed_bytes > 0 && at_peak.compressed_bytes < at_peak.original_bytes / 2,
        "{outcome:?}"
    );
    // What the run held at its peak (RAM + the compressed store) is well
    // below what it would have held uncompressed.
    assert!(
        outcome.compressed_memory_peak_bytes >= at_peak.memory_used_bytes,
        "{outcome:?}"
    );
    let held = outcome.cgroup_peak_bytes + outcome.compressed_memory_peak_bytes;
    assert!(
        outcome.footprint_peak_bytes > held + (16 << 20),
        "{outcome:?}"
    );
    assert_eq!(outcome.oom_kills, 0);
}

#[test]
fn zswap_in_front_of_a_swap_file_works_too_and_is_restored() {
    let test = "zswap_in_front_of_a_swap_file_works_too_and_is_restored";
    if !enabled(test) {
        return;
    }
    let compressor = match zpage_kernel::zswap::available_compressors() {
        Ok(c) if c.iter().any(|c| c == "lzo") => "lzo".to_string(),
        Ok(c) if !c.is_empty() => c[0].clone(),
        _ => {
            println!("SKIP {test}: no compressor registered for zswap");
            return;
        }
    };
    let before = state_now();
    let mut options = RunOptions::new(BUDGET);
    options.backend = SwapBackend::Zswap(compressor);
    let outcome = run::run(program("verify"), &options).expect("kernel mode run");
    assert_eq!(state_now(), before, "the machine differs after the run");
    assert_eq!(outcome.exit, ChildExit::Code(0), "{outcome:?}");
    assert!(outcome.swap_peak_bytes >= 32 << 20, "{outcome:?}");
    assert!(outcome.compressed_at_peak.original_bytes > 0, "{outcome:?}");
    assert_eq!(outcome.compressed_source, "meminfo Zswap/Zswapped");
}

#[test]
fn a_failing_program_reports_its_exit_code_and_the_machine_is_restored() {
    let test = "a_failing_program_reports_its_exit_code_and_the_machine_is_restored";
    if !enabled(test) {
        return;
    }
    let before = state_now();
    let outcome = run::run(program("fail"), &RunOptions::new(BUDGET)).expect("kernel mode run");
    assert_eq!(state_now(), before);
    assert_eq!(outcome.exit, ChildExit::Code(3));
    assert_eq!(outcome.exit.shell_status(), 3);

    let missing = run::run(
        Command::new("/nonexistent/zpage-test-program"),
        &RunOptions::new(BUDGET),
    )
    .unwrap_err()
    .to_string();
    assert!(missing.contains("cannot start it"), "{missing}");
    assert_eq!(state_now(), before);
}

/// Waits until the running program has pushed at least `bytes` to swap.
/// For the tests that stop a program midway: the machine's state before,
/// and a run of the "hold" program once `swap_bytes` of it are swapped out;
/// `None` when kernel-state tests are not enabled here.
fn holding(test: &str, swap_bytes: u64) -> Option<(MachineState, KernelRun)> {
    if !enabled(test) {
        return None;
    }
    let before = state_now();
    let mut run = KernelRun::start(program("hold"), &RunOptions::new(BUDGET)).unwrap();
    wait_for_swap(&mut run, swap_bytes);
    Some((before, run))
}

fn wait_for_swap(run: &mut KernelRun, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let marker = holding_marker(run.pid());
    while !marker.exists() {
        assert!(!run.poll().unwrap(), "the program ended early");
        assert!(
            Instant::now() < deadline,
            "the program did not finish its reads within 2 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_file(&marker).unwrap();
    loop {
        assert!(!run.poll().unwrap(), "the program ended early");
        let stat = std::fs::read_to_string(run.cgroup_dir().unwrap().join("memory.stat"))
            .or_else(|_| {
                std::fs::read_to_string(run.cgroup_dir().unwrap().join("memory.swap.current"))
                    .map(|s| format!("swap {s}"))
            })
            .unwrap();
        let swapped = stat
            .lines()
            .find_map(|l| l.strip_prefix("swap "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if swapped >= bytes {
            // Let the run's own sampler (every 50 ms) see it too.
            std::thread::sleep(Duration::from_millis(300));
            return;
        }
        assert!(Instant::now() < deadline, "no swap-out within 2 minutes");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_killed_program_reports_the_signal_and_the_machine_is_restored() {
    let Some((before, run)) = holding(
        "a_killed_program_reports_the_signal_and_the_machine_is_restored",
        32 << 20,
    ) else {
        return;
    };
    // SAFETY: kill takes plain integers; the pid is our own child, not yet reaped.
    unsafe {
        libc::kill(run.pid() as i32, libc::SIGKILL);
    }
    let outcome = run.wait().unwrap();
    assert_eq!(outcome.exit, ChildExit::Signal(libc::SIGKILL));
    assert_eq!(outcome.exit.shell_status(), 137);
    assert!(outcome.swap_peak_bytes >= 32 << 20, "{outcome:?}");
    // The last sample can fall inside the exit, while the kernel frees the
    // killed program's memory, so it is only known to be below the peak.
    assert!(
        outcome.swap_last_bytes <= outcome.swap_peak_bytes,
        "{outcome:?}"
    );
    assert!(
        outcome.compressed_at_peak.original_bytes >= 32 << 20,
        "{outcome:?}"
    );
    assert!(
        outcome.compressed_at_end.original_bytes <= outcome.compressed_at_peak.original_bytes,
        "{outcome:?}"
    );
    assert_eq!(state_now(), before);
}

#[test]
fn sigterm_to_the_supervisor_goes_to_the_program_then_the_machine_is_restored() {
    let Some((before, run)) = holding(
        "sigterm_to_the_supervisor_goes_to_the_program_then_the_machine_is_restored",
        32 << 20,
    ) else {
        return;
    };
    // The supervisor (this process) is told to stop, as by `kill` or systemd:
    // it must survive, pass the signal on, and restore after the program ends.
    // SAFETY: kill takes plain integers; SIGTERM is forwarded while `run` lives.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    let outcome = run.wait().unwrap();
    assert_eq!(outcome.exit, ChildExit::Signal(libc::SIGTERM));
    assert_eq!(state_now(), before);
}

#[test]
fn a_run_swaps_to_a_zram_device_of_its_own_and_removes_it() {
    let test = "a_run_swaps_to_a_zram_device_of_its_own_and_removes_it";
    let names = || -> Vec<String> {
        let mut names: Vec<String> = zpage_kernel::zram::ZramDevice::list()
            .unwrap_or_default()
            .iter()
            .map(|d| d.name())
            .collect();
        names.sort();
        names
    };
    let before_names = names();
    let Some((before, run)) = holding(test, 16 << 20) else {
        return;
    };
    // The devices that were there (an unused zram0 a zram-generator set-up
    // expects, say) are left alone: the run's swap is on a device it added.
    // Other tests of this binary run programs of their own meanwhile, each
    // on a device it added: one may have ended and its device's number
    // been given to this run's, so the run's device is asked for, not
    // found by difference.
    let during = names();
    let own = run.zram_device_name().expect("a zram run has a device");
    assert!(during.contains(&own), "{own} not in {during:?}");
    let added = [&own];
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap();
    assert!(swaps.contains(&format!("/dev/{}", added[0])), "{swaps}");
    for name in before_names.iter().filter(|n| **n != own) {
        let path = format!("/dev/{name}");
        let was_swap = before.kernel.swaps.iter().any(|s| s.path == path);
        assert!(
            was_swap || !swaps.contains(&format!("{path} ")),
            "{name} taken: {swaps}"
        );
    }
    // The program holds its memory until told to stop.
    // SAFETY: kill takes plain integers; the pid is our own child, not yet reaped.
    unsafe {
        libc::kill(run.pid() as i32, libc::SIGTERM);
    }
    run.wait().unwrap();
    let after = names();
    assert!(
        !after.contains(&own),
        "the run's device {own} was not removed: {after:?}"
    );
    assert_eq!(state_now(), before);
}

#[test]
fn dropping_a_run_kills_the_program_and_restores_the_machine() {
    let Some((before, run)) = holding(
        "dropping_a_run_kills_the_program_and_restores_the_machine",
        16 << 20,
    ) else {
        return;
    };
    let pid = run.pid() as i32;
    drop(run);
    // SAFETY: signal 0 only checks whether the pid exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    assert!(!alive, "the program outlived its run");
    assert_eq!(state_now(), before);
}

/// A zswap compressor the kernel lacks is refused before anything changes,
/// naming the ones it has; a capped zswap pool is put back with the rest.
#[test]
fn zswap_set_up_refuses_a_missing_compressor_and_restores_a_pool_cap() {
    let test = "zswap_set_up_refuses_a_missing_compressor_and_restores_a_pool_cap";
    if !enabled(test) {
        return;
    }
    let before = state_now();
    let registered = zpage_kernel::zswap::available_compressors().unwrap();
    let mut guard = MachineGuard::take(&std::env::temp_dir(), OtherSwap::KeepOn).unwrap();
    let error = guard
        .set_up(&SwapBackend::Zswap("no-such-compressor".into()), 64 << 20)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("no-such-compressor") && error.contains(&registered.join(" ")),
        "{error}"
    );
    let cap = guard.cap_zswap_pool(128 << 20).unwrap();
    assert!(cap >= 128 << 20, "{cap}");
    let ram = std::fs::read_to_string("/proc/meminfo").unwrap();
    let ram_kib: u64 = ram
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let percent = zpage_kernel::zswap::parameters().unwrap()["max_pool_percent"].clone();
    assert_eq!(
        percent.parse::<u64>().unwrap(),
        cap / (ram_kib * 1024 / 100),
        "{cap}"
    );
    guard.restore().unwrap();
    drop(guard);
    assert_eq!(state_now(), before);
}

/// Read-only: whether kernel mode can run here, and why not, named.
#[test]
fn availability_names_what_is_missing() {
    let mut options = RunOptions::new(BUDGET);
    options.backend = SwapBackend::Zram("no-such-algorithm".into());
    let error = run::check_available(&options).unwrap_err().to_string();
    if zpage_kernel::is_root() {
        assert!(error.contains("no-such-algorithm"), "{error}");
    } else {
        assert!(error.contains("needs root"), "{error}");
    }
    options.backend = SwapBackend::Zswap("no-such-compressor".into());
    options.budget_bytes = 1 << 20;
    let error = run::check_available(&options).unwrap_err().to_string();
    assert!(error.contains("give a larger budget"), "{error}");
    if zpage_kernel::zswap::parameters().is_ok() {
        assert!(error.contains("no-such-compressor"), "{error}");
    }
    // As root with the memory controller and a zram device, the default (zram-lz4) is judged by lz4 alone.
    let has_zram_device = zpage_kernel::zram::ZramDevice::list().is_ok_and(|d| !d.is_empty());
    if zpage_kernel::is_root()
        && zpage_kernel::memcg::memory_controller().is_ok()
        && has_zram_device
    {
        // Read-only: the algorithms of an existing device (no hot_add here).
        let offered = zpage_kernel::zram::ZramDevice::list()
            .ok()
            .and_then(|devices| devices.first().map(|d| d.algorithms()))
            .and_then(Result::ok)
            .unwrap_or_default();
        let verdict = run::check_available(&RunOptions::new(BUDGET));
        assert_eq!(
            verdict.is_ok(),
            offered.iter().any(|a| a == "lz4"),
            "{verdict:?}"
        );
    }
}
