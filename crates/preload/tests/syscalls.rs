//! System calls on evicted memory under the preload library, made by the
//! C library itself and by the program (`c/syscalls.c`): each produces
//! exactly the output of a run without zpage, or the test fails. Every
//! object is evicted just before its call (the program checks the page
//! map, and exits 2 if it could not evict it: such a run proves nothing).
//!
//! `ZPAGE_TEST_FULL=1` runs the sizes of the acceptance runs (a
//! 96 MiB string under a 32 MiB budget, 10 million lock operations); CI
//! runs smaller ones.

mod common;

use common::{compile_c, run_with_budget, Run};
use std::process::Command;

fn full() -> bool {
    std::env::var("ZPAGE_TEST_FULL").is_ok_and(|v| v == "1")
}

const BUDGET_BYTES: usize = 32 << 20;

/// Runs `syscalls MODE ARG`; `preload` false runs it plainly.
fn run(mode: &str, arg: usize, preload: bool) -> Run {
    let mut command = Command::new(compile_c("syscalls"));
    command.arg(mode).arg(arg.to_string());
    if preload {
        command.env("SYSCALLS_EVICT", "1");
    }
    run_with_budget(command, &BUDGET_BYTES.to_string(), preload)
}

/// The run succeeded and said so.
fn assert_ok(mode: &str, r: &Run) {
    assert!(
        r.output.status.success() && r.stderr.contains(&format!("ok {mode}")),
        "{mode} failed ({}):\n{}",
        r.output.status,
        r.stderr
    );
}

/// The run succeeded, said so, zpage was active and evicted, and the trap
/// served calls.
fn assert_served(mode: &str, r: &Run) {
    assert_ok(mode, r);
    let report = r.report();
    assert!(
        report.active,
        "zpage was not active: {:?}",
        report.inactive_reason
    );
    assert!(report.eviction_count > 0, "nothing was evicted: {report:?}");
    assert!(
        report.syscalls_trapped > 0,
        "no call was trapped: {report:?}"
    );
}

/// A mode whose output goes to stdout: the same bytes as a plain run.
fn same_output_as_plain(mode: &str, arg: usize) {
    let zpage = run(mode, arg, true);
    assert_served(mode, &zpage);
    let plain = run(mode, arg, false);
    assert!(plain.output.status.success(), "plain run: {}", plain.stderr);
    assert_eq!(
        zpage.output.stdout.len(),
        plain.output.stdout.len(),
        "{mode}: output lost"
    );
    assert!(
        zpage.output.stdout == plain.output.stdout,
        "{mode}: output differs"
    );
}

fn string_mib() -> usize {
    if full() {
        96
    } else {
        48
    }
}

#[test]
fn fputs_of_a_string_larger_than_the_budget_arrives_whole() {
    same_output_as_plain("stdio-fputs", string_mib());
}

#[test]
fn printf_of_a_string_larger_than_the_budget_arrives_whole() {
    same_output_as_plain("stdio-printf", string_mib());
}

#[test]
fn puts_of_a_string_larger_than_the_budget_arrives_whole() {
    same_output_as_plain("stdio-puts", string_mib());
}

#[test]
fn dprintf_of_a_string_larger_than_the_budget_arrives_whole() {
    same_output_as_plain("stdio-dprintf", string_mib());
}

/// stdout fully buffered in an 8 MiB malloc'd buffer (a region), two
/// million lines printed while other memory pushes the buffer out.
#[test]
fn a_setvbuf_buffer_in_compressed_memory_loses_no_line() {
    same_output_as_plain("setvbuf", 0);
}

/// The C library's stream buffers (stdout's, a file's) come from zpage's
/// private heap, not from regions: the calls that fill and flush them
/// are not trapped. 300,000 lines to stdout and to a file, read back,
/// are over 1,000 calls on 4 KiB buffers; fewer than 100 calls in the
/// whole run are trapped.
#[test]
fn stream_buffers_are_not_region_memory() {
    let r = run("streams", 3, true);
    assert_ok("streams", &r);
    let plain = run("streams", 3, false);
    assert!(
        r.output.stdout == plain.output.stdout,
        "streams: output differs"
    );
    let report = r.report();
    assert!(
        report.active,
        "zpage was not active: {:?}",
        report.inactive_reason
    );
    assert!(
        report.syscalls_trapped < 100,
        "{} calls trapped: the stream buffers are in regions",
        report.syscalls_trapped
    );
}

/// accept(2) and waitpid(2) fill structures in evicted pages; both act
/// before they write (the connection is dequeued, the child reaped), so an
/// EFAULT there would lose the connection or the status.
#[test]
fn accept_and_waitpid_fill_evicted_structures() {
    let r = run("accept", 0, true);
    assert_served("accept", &r);
    let r = run("waitpid", 0, true);
    assert_served("waitpid", &r);
}

/// getcwd, uname, stat (path and buffer), pipe, socketpair, preadv2, poll,
/// writev/readv, sendmsg/recvmsg with a descriptor in the control data,
/// and path arguments (mkdir, open, rename, unlink, rmdir), each on
/// evicted objects.
#[test]
fn the_c_librarys_calls_on_evicted_objects_work() {
    let r = run("calls", 0, true);
    assert_served("calls", &r);
}

/// Four threads contend for four mutexes whose words live in evicted
/// memory: glibc's own futex calls (a wait on a word the filter sees in
/// the range is trapped and served; private wakes read no memory and pass).
#[test]
fn contended_mutexes_in_compressed_memory_lose_no_operation() {
    let millions = if full() { 10 } else { 1 };
    let r = run("futex", millions, true);
    assert_served("futex", &r);
    assert!(
        r.stderr
            .contains(&format!("lock operations {}", millions * 1_000_000)),
        "{}",
        r.stderr
    );
}

/// A handler on a 4 MiB malloc'd alternate signal stack (a region) uses
/// 256 KiB of it, 100 times, while everything else is pushed out: zpage
/// keeps the stack resident (without it: SIGSEGV at the first delivery
/// onto an evicted page).
#[test]
fn a_sigaltstack_in_compressed_memory_stays_deliverable() {
    let r = run("altstack", 0, true);
    assert_ok("altstack", &r);
}

/// A makecontext coroutine on an 8 MiB malloc'd stack, switched to 200
/// times with everything else pushed out in between.
#[test]
fn a_coroutine_stack_in_compressed_memory_survives() {
    let r = run("coroutine", 0, true);
    assert_ok("coroutine", &r);
}

/// mlock keeps its range resident while the rest is evicted; mlockall
/// keeps everything resident and new memory plain, and a write of twice
/// the budget after it finishes.
#[test]
fn mlock_and_mlockall_are_honoured() {
    for mode in ["mlock", "mlockall"] {
        let r = run(mode, 0, true);
        assert_ok(mode, &r);
    }
}

/// Programs started from evicted strings: posix_spawnp with its argv in
/// region memory (its child resets zpage's handlers before the exec),
/// system() and popen() of a command in region memory, and fork + execvp
/// (the exec trapped and served in the child).
#[test]
fn programs_start_from_strings_in_compressed_memory() {
    let r = run("spawn", 0, true);
    assert_ok("spawn", &r);
}
