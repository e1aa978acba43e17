//! The redis driver against a real redis-server (Debian's; CI installs it):
//! every value reads back right and the digests agree through a BGSAVE; a
//! server that loses values is caught; and in kernel mode (root,
//! ZPAGE_TEST_KERNEL_STATE=1) the same holds with the server's memory over
//! its budget. Size from ZPAGE_REDIS_TEST_SIZE (default 32M).

use std::path::PathBuf;

use zpage_bench::redis_load::{run_redis_bench, RedisBenchOptions, ServerSource};
use zpage_bench::workload::QuietObserver;
use zpage_kernel::run::RunOptions;

fn redis_server_present(test: &str) -> bool {
    zpage_testsupport::installed(test, "redis-server", "redis-server")
}

fn test_size() -> u64 {
    std::env::var("ZPAGE_REDIS_TEST_SIZE")
        .ok()
        .map(|s| zpage_units::parse_size(&s).expect("ZPAGE_REDIS_TEST_SIZE"))
        .unwrap_or(32 << 20)
}

fn options(server: ServerSource, data_bytes: u64) -> RedisBenchOptions {
    RedisBenchOptions {
        server,
        redis_server: PathBuf::from("redis-server"),
        data_bytes,
        mean_value_bytes: 1024,
        text_roots: vec![PathBuf::from("/usr/share"), PathBuf::from("/usr/include")],
        corpus_cap_bytes: 16 << 20,
        get_requests: 20_000,
        seed: 3,
        scratch_dir: std::env::temp_dir(),
        label: "test".into(),
        bgsaves: 2,
    }
}

#[test]
fn every_value_reads_back_and_the_rdb_has_the_same_digest() {
    let test = "every_value_reads_back_and_the_rdb_has_the_same_digest";
    if !redis_server_present(test) {
        return;
    }
    let size = test_size();
    let report = run_redis_bench(
        &options(ServerSource::Start(vec!["redis-server".into()]), size),
        &mut QuietObserver,
    )
    .expect("redis run");
    assert!(report.passed(), "{report:#?}");
    assert_eq!(report.wrong_values, 0);
    assert_eq!(report.verified_keys, report.keys);
    assert!(report.value_bytes >= size * 9 / 10, "{report:#?}");
    assert_eq!(report.digest.len(), 40, "{report:#?}");
    assert_eq!(report.bgsave.loaded_digest, report.digest);
    assert_eq!(report.bgsave.loaded_keys, report.keys);
    assert!(report.bgsave.rdb_bytes > 0);
    assert_eq!(report.get.requests, 20_000);
    assert!(report.get.p99_us >= report.get.p50_us && report.get.p50_us > 0.0);
    assert!(report.corpus.files > 0);
}

#[test]
fn a_server_that_drops_values_fails_the_check() {
    let test = "a_server_that_drops_values_fails_the_check";
    if !redis_server_present(test) {
        return;
    }
    // A server capped at 4 MiB that evicts keys at random loses most of 16 MiB.
    let server = ServerSource::Start(
        [
            "redis-server",
            "--maxmemory",
            "4mb",
            "--maxmemory-policy",
            "allkeys-random",
        ]
        .map(String::from)
        .to_vec(),
    );
    let report =
        run_redis_bench(&options(server, 16 << 20), &mut QuietObserver).expect("redis run");
    assert!(!report.passed(), "{report:#?}");
    assert!(report.wrong_values > report.keys / 2, "{report:#?}");
    assert!(!report.wrong_examples.is_empty());
    assert!(report.wrong_examples[0].contains("missing"), "{report:#?}");
}

#[test]
fn in_kernel_mode_over_its_budget_every_value_reads_back() {
    let test = "in_kernel_mode_over_its_budget_every_value_reads_back";
    if !redis_server_present(test) || !zpage_kernel::kernel_state_tests_enabled(test) {
        return;
    }
    let size = test_size();
    let run_options = RunOptions::new(size * 3 / 8);
    if let Err(e) = zpage_kernel::run::check_available(&run_options) {
        println!("SKIP {test}: {e}");
        return;
    }
    let server = ServerSource::StartInKernelMode(vec!["redis-server".into()], run_options);
    let report = run_redis_bench(&options(server, size), &mut QuietObserver).expect("redis run");
    assert!(report.passed(), "{report:#?}");
    let kernel = report.kernel.as_ref().expect("kernel mode figures");
    assert!(kernel.exit.success(), "{kernel:?}");
    assert!(kernel.cgroup_peak_bytes <= size * 3 / 8, "{kernel:?}");
    assert!(kernel.swap_peak_bytes > size / 4, "{kernel:?}");
    assert!(kernel.compressed_at_peak.original_bytes > 0, "{kernel:?}");
}
