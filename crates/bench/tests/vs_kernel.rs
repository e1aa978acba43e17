//! A tiny `--vs-kernel` run (root only): the workload runs in a memory cgroup
//! swapping to zram and to zswap, and the machine's swap state afterwards
//! equals the state before.

use std::process::Command;
use zpage_bench::kernel::{self, MachineState, SwapBackend};
use zpage_bench::workload::QuietObserver;
use zpage_bench::{DataSource, WorkloadKind, WorkloadSpec};

/// The kernel tiers' child processes are this test binary, started on this
/// test alone with the request in the environment; in a normal run it does nothing.
#[test]
fn kernel_child_entry() {
    kernel::run_child_if_requested();
}

fn launcher() -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command.args([
        "kernel_child_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

#[test]
fn small_vs_kernel_run_measures_and_restores_the_machine() {
    if !zpage_kernel::kernel_state_tests_enabled(
        "small_vs_kernel_run_measures_and_restores_the_machine",
    ) {
        return;
    }
    if zpage_kernel::zram::ZramDevice::list().map_or(true, |d| d.is_empty())
        && !std::path::Path::new("/sys/class/zram-control").exists()
    {
        println!("SKIP small_vs_kernel_run_measures_and_restores_the_machine: needs zram and a memory cgroup");
        return;
    }
    let budget = 16 << 20;
    let spec = WorkloadSpec {
        kind: WorkloadKind::Replay,
        source: DataSource::Realistic { seed: 11 },
        size_bytes: 64 << 20,
        touches: 20_000,
        seed: 5,
        // Not hot/cold: in a cgroup this small, the kernel's LRU keeps the whole
        // hot set active and memcg reclaim sometimes gives up (OOM kill) on a
        // swap-in; that is the kernel's behaviour, not what this test checks.
        only_phases: vec!["sequential-read".into(), "random-read".into()],
        sample_every_ms: 0,
        threads: 1,
    };
    let swapfile_dir = std::env::temp_dir();
    let mut guard = kernel::take_machine(&swapfile_dir).expect("take the machine");
    let before = guard.saved().clone();
    for tier in [
        SwapBackend::Zram("lz4".into()),
        SwapBackend::Zswap("lzo".into()),
    ] {
        let results = kernel::run_kernel_tier(
            &mut guard,
            &tier,
            &spec,
            budget,
            &launcher,
            &mut QuietObserver,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", tier.name()));
        assert_eq!(results.len(), 2, "{results:?}");
        for r in &results {
            assert_eq!(r.tier, tier.name());
            assert!(r.touches >= 16_384, "one touch per page at least");
            assert!(r.p50_us > 0.0 && r.p99_us >= r.p50_us && r.max_us >= r.p999_us);
            // 64 MiB of data in a 16 MiB cgroup: most touches must swap in.
            assert!(
                r.fault_share > 0.3,
                "{}: fault share {}",
                r.pattern,
                r.fault_share
            );
            assert!(r.resident_max_bytes <= budget + budget / 20, "{r:?}");
            assert!(r.compressed_bytes > 0, "{r:?}");
        }
    }
    guard.restore().expect("restore");
    assert_eq!(MachineState::capture().unwrap(), before);
    drop(guard);
}
