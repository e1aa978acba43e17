//! Each hazard of real programs, run by a small C program (`c/hazards.c`)
//! under the preload library with a budget a quarter of its data, so most of
//! the data is evicted when the hazard happens. The program checks every
//! byte against its pattern (the shadow copy is the pattern function) and
//! the process's report proves zpage was in the way (evictions, the
//! fallbacks and pins the hazard should cause).

mod common;

use common::{compile_c, run_with_budget, Run};
use std::process::Command;

const DATA_MIB: usize = 32;
const BUDGET_BYTES: usize = DATA_MIB * 1024 * 1024 / 4;

fn run(mode: &str) -> Run {
    run_with(mode, &[])
}

fn run_with(mode: &str, env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(compile_c("hazards"));
    command
        .arg(mode)
        .arg(DATA_MIB.to_string())
        .envs(env.iter().copied());
    run_with_budget(command, &BUDGET_BYTES.to_string(), true)
}

fn assert_ok(mode: &str, r: &Run) {
    assert!(
        r.output.status.success() && r.stdout.contains(&format!("ok {mode}")),
        "{mode} failed ({}):\n{}\n{}",
        r.output.status,
        r.stdout,
        r.stderr
    );
    assert!(
        r.report().active,
        "zpage was not active: {:?}",
        r.report().inactive_reason
    );
    assert!(
        r.report().eviction_count > 0,
        "nothing was evicted: the test proves nothing ({:?})",
        r.report()
    );
}

#[test]
fn mremap_and_realloc_keep_every_byte() {
    let r = run("mremap");
    assert_ok("mremap", &r);
    // The arena follows moves, growth and shrinking in place: nothing is
    // made plain.
    assert_eq!(r.report().regions_made, 1, "{:?}", r.report());
    assert_eq!(
        r.report().fallback.ejected_mappings,
        0,
        "{:?}",
        r.report().fallback
    );
}

#[test]
fn map_fixed_over_part_of_a_region_keeps_the_rest() {
    let r = run("fixed");
    assert_ok("fixed", &r);
    // The arena follows it in place: nothing is made plain.
    assert_eq!(
        r.report().fallback.ejected_mappings,
        0,
        "{:?}",
        r.report().fallback
    );
}

/// The JVM's class-data archive: a writable private file mapping over a
/// reservation is arena memory holding the file's bytes (the C program
/// checks the bytes, that its pages were evicted, that writes stay out of
/// the file, and that read-only and past-the-end mappings stay the
/// kernel's).
#[test]
fn a_private_file_mapping_over_a_reservation_is_compressed_memory() {
    let r = run("file_private");
    assert_ok("file_private", &r);
    assert_eq!(
        r.report().fallback.ejected_mappings,
        0,
        "{:?}",
        r.report().fallback
    );
}

#[test]
fn mprotect_of_part_keeps_every_byte() {
    let r = run("mprotect");
    assert_ok("mprotect", &r);
    // The arena follows it in place: nothing is made plain.
    assert_eq!(
        r.report().fallback.ejected_mappings,
        0,
        "{:?}",
        r.report().fallback
    );
}

#[test]
fn partial_munmap_keeps_the_rest() {
    let r = run("munmap");
    assert_ok("munmap", &r);
    // The arena follows it in place: nothing is made plain.
    assert_eq!(
        r.report().fallback.ejected_mappings,
        0,
        "{:?}",
        r.report().fallback
    );
}

#[test]
fn madvise_dontneed_reads_zeros_and_keeps_the_rest() {
    let r = run("dontneed");
    assert_ok("dontneed", &r);
}

#[test]
fn madvise_free_discards_at_once_and_keeps_what_is_written_after() {
    let r = run("free");
    assert_ok("free", &r);
}

#[test]
fn fork_child_and_parent_see_their_own_contents() {
    let r = run("fork");
    assert_ok("fork", &r);
    assert_eq!(r.report().forks, 2, "{:?}", r.report());
}

#[test]
fn a_vfork_child_reads_evicted_pages_and_poll_works_on_one() {
    let r = run("vfork");
    assert_ok("vfork", &r);
    assert!(r.report().restore_count > 0, "{:?}", r.report());
}

/// A thread started while the locale's data (allocated by the C library
/// in `setlocale`) is evicted reads it before it unblocks signals: zpage
/// keeps that data in its own heap (without it, the JVM was killed by
/// SIGBUS at its first threads under `zpage run`).
#[test]
fn threads_start_while_the_locale_data_would_be_evicted() {
    let r = run("locale_threads");
    assert_ok("locale_threads", &r);
}

#[test]
fn a_vfork_child_that_closed_every_descriptor_reads_evicted_pages_and_execs() {
    let r = run("vfork_closed");
    assert_ok("vfork_closed", &r);
    assert!(
        r.stdout.contains("exec saw 2984 bytes"),
        "the new program did not get its environment: {}",
        r.stdout
    );
    let absent: Vec<usize> = r
        .stdout
        .lines()
        .find(|l| l.starts_with("absent before vfork"))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        absent.len() == 2 && absent[0] > 0 && absent[1] > 0,
        "the data and the exec's strings must be evicted at the vfork: {}",
        r.stdout
    );
}

#[test]
fn read_write_send_recv_futex_on_evicted_pages_work() {
    let r = run("io");
    assert_ok("io", &r);
    assert!(
        r.stdout.contains("futex word resident before wait: no"),
        "{}",
        r.stdout
    );
    assert!(r.report().syscalls_pinned > 0, "{:?}", r.report());
}

#[test]
fn threads_and_handlers_that_block_every_signal_read_evicted_pages() {
    let r = run("masked");
    assert_ok("masked", &r);
    assert!(
        r.stdout
            .contains("SIGBUS blocked after blocking everything: no"),
        "{}",
        r.stdout
    );
    assert!(r.report().restore_count > 0, "{:?}", r.report());
}

/// The budget (and zpage's SIGBUS handler) starts with the first region: a
/// handler the program set before then is in the kernel, and zpage chains
/// genuine SIGBUSes to it once its own handler is in front; one set later
/// is recorded and chained to.
#[test]
fn the_programs_sigbus_handlers_get_genuine_faults_before_and_after_the_first_region() {
    let r = run("sigbus_handlers");
    assert_ok("sigbus_handlers", &r);
    assert!(r.report().restore_count > 0, "{:?}", r.report());
}

/// A raw `syscall(SYS_read)` into an evicted page: the system-call trap
/// serves it (the page reads what the kernel wrote).
#[test]
fn a_raw_syscall_on_an_evicted_page_is_served() {
    let r = run("raw");
    assert_ok("raw", &r);
    assert!(r.stdout.contains("raw read: 4096 errno 0"), "{}", r.stdout);
    assert!(r.report().syscalls_trapped > 0, "{:?}", r.report());
}

/// With the trap off (`ZPAGE_RUN_SYSCALLS=wrappers`), the same call fails
/// with `EFAULT`, never wrong bytes, and a line names it.
#[test]
fn without_the_trap_a_raw_syscall_fails_and_is_named() {
    let r = run_with("raw", &[("ZPAGE_RUN_SYSCALLS", "wrappers")]);
    assert_ok("raw", &r);
    assert!(r.stdout.contains("raw read: -1 errno 14"), "{}", r.stdout);
    assert!(
        r.stderr.contains("syscall(0) failed with EFAULT"),
        "no diagnostic naming the call:\n{}",
        r.stderr
    );
    assert_eq!(r.report().syscalls_trapped, 0, "{:?}", r.report());
}

#[test]
fn a_bad_budget_is_named_and_the_program_runs_without_zpage() {
    let mut command = Command::new(compile_c("hazards"));
    command.args(["dontneed", "4"]);
    let r = run_with_budget(command, "lots", true);
    assert!(r.output.status.success(), "{}", r.stderr);
    assert!(
        r.stderr.contains("ZPAGE_RUN_BUDGET_BYTES=\"lots\"") && r.stderr.contains("without zpage"),
        "{}",
        r.stderr
    );
    let report = r.report();
    assert!(!report.active);
    assert!(report
        .inactive_reason
        .as_deref()
        .unwrap()
        .contains("plain integer"));
}
