//! The daemon's schedule on a sysfs tree of plain files standing in for
//! zram attributes this kernel lacks (writeback, recompression): what it
//! writes, to which attribute, on which tick; and "not in this kernel" for
//! a device without them. The real zram0 is checked in zram_real.rs.

use std::path::{Path, PathBuf};

use zpage_kernel::config::KernelConfig;
use zpage_kernel::daemon::{Daemon, DaemonConfig, DaemonEvent};

struct FakeSysfs(PathBuf);

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn device(root: &Path, name: &str, attributes: &[(&str, &str)]) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (attribute, value) in attributes {
        std::fs::write(dir.join(attribute), value).unwrap();
    }
}

const COMMON: [(&str, &str); 6] = [
    ("initstate", "1"),
    ("disksize", "67108864"),
    ("comp_algorithm", "lzo [lz4] zstd"),
    ("mm_stat", "4096 100 8192 0 8192 0 0 0 0"),
    ("io_stat", "0 0 0 0"),
    ("idle", ""),
];

fn fake_tree(test: &str) -> FakeSysfs {
    let root = std::env::temp_dir().join(format!("zpage-fake-sysfs-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut full: Vec<(&str, &str)> = COMMON.to_vec();
    full.extend([
        ("backing_dev", "/dev/nvme0n1p3"),
        ("writeback", ""),
        ("writeback_limit", "0"),
        ("writeback_limit_enable", "0"),
        ("bd_stat", "0 0 0"),
        ("recomp_algorithm", "#1: lzo lz4 [zstd]"),
        ("recompress", ""),
    ]);
    device(&root, "zram0", &full);
    // A kernel without CONFIG_ZRAM_WRITEBACK and CONFIG_ZRAM_MULTI_COMP: only idle marking.
    device(&root, "zram1", &COMMON);
    FakeSysfs(root)
}

fn read(root: &Path, device: &str, attribute: &str) -> String {
    std::fs::read_to_string(root.join(device).join(attribute)).unwrap()
}

fn clear(root: &Path, device: &str, attributes: &[&str]) {
    for attribute in attributes {
        std::fs::write(root.join(device).join(attribute), "").unwrap();
    }
}

#[test]
fn idle_writeback_and_recompression_on_schedule() {
    let tree = fake_tree("schedule");
    let root = &tree.0;
    let config = KernelConfig::parse(
        r#"
        [[zram]]
        algorithm = "lz4"
        size = "64M"
        writeback_device = "/dev/nvme0n1p3"
        writeback = "huge_idle"
        recompress_algorithms = ["zstd"]
        [[zram]]
        algorithm = "lz4"
        size = "64M"
        writeback_device = "/dev/sdb1"
        recompress_algorithms = ["zstd"]
        [daemon]
        interval_seconds = 60
        idle_after_seconds = 120
        writeback_budget = "64M"
        recompress_budget = "32M"
        "#,
    )
    .unwrap();
    let (schedule, policies) = DaemonConfig::from_config(&config).unwrap();
    assert_eq!(schedule.writeback_budget_pages, 16384);
    assert_eq!(schedule.recompress_budget_pages, 8192);
    let mut daemon = Daemon::with_policies(schedule, policies, root);

    let start = daemon.start();
    let not_in_kernel: Vec<String> = start
        .iter()
        .filter(|e| matches!(e, DaemonEvent::NotInKernel { .. }))
        .map(|e| e.to_string())
        .collect();
    assert_eq!(not_in_kernel.len(), 2, "{start:?}");
    assert!(
        not_in_kernel[0].contains("zram1: writeback (CONFIG_ZRAM_WRITEBACK) is not in this kernel"),
        "{not_in_kernel:?}"
    );
    assert!(not_in_kernel[1].contains("recompression (CONFIG_ZRAM_MULTI_COMP)"));

    // Tick 1: nothing was marked yet, so only the marking happens.
    let events = daemon.tick();
    assert_eq!(read(root, "zram0", "idle"), "all");
    assert_eq!(read(root, "zram0", "writeback"), "");
    assert_eq!(read(root, "zram0", "recompress"), "");
    assert!(events
        .iter()
        .any(|e| matches!(e, DaemonEvent::MarkedIdle { device } if device == "zram0")));
    clear(root, "zram0", &["idle"]);

    // Tick 2, 60 s later: pages have not been idle for 120 s yet.
    daemon.tick();
    for attribute in ["idle", "writeback", "recompress"] {
        assert_eq!(
            read(root, "zram0", attribute),
            "",
            "{attribute} written too early"
        );
    }

    // Tick 3, 120 s after the mark: act on what stayed idle, within budgets, then mark again.
    let events = daemon.tick();
    assert_eq!(read(root, "zram0", "writeback_limit_enable"), "1");
    assert_eq!(read(root, "zram0", "writeback_limit"), "16384");
    assert_eq!(read(root, "zram0", "writeback"), "huge_idle");
    assert_eq!(
        read(root, "zram0", "recompress"),
        "type=idle max_pages=8192"
    );
    assert_eq!(read(root, "zram0", "idle"), "all");
    assert!(
        events
            .iter()
            .any(|e| e.to_string() == "zram0: wrote back huge_idle pages (budget 16384 pages)"),
        "{events:?}"
    );
    assert!(events
        .iter()
        .any(|e| e.to_string() == "zram0: recompressed idle pages (budget 8192 pages)"));

    // The device without writeback or recompression was never written to.
    assert_eq!(read(root, "zram1", "idle"), "", "zram1 marked");
    assert!(!root.join("zram1/writeback").exists() && !root.join("zram1/recompress").exists());
}

#[test]
fn a_device_the_config_does_not_name_is_left_alone() {
    let tree = fake_tree("unnamed");
    let config = KernelConfig::parse(
        "[[zram]]\nindex = 1\nalgorithm = \"lz4\"\nsize = \"64M\"\n[daemon]\nidle_after_seconds = 1\n",
    )
    .unwrap();
    let (schedule, policies) = DaemonConfig::from_config(&config).unwrap();
    let mut daemon = Daemon::with_policies(schedule, policies, &tree.0);
    daemon.start();
    for _ in 0..3 {
        daemon.tick();
    }
    assert_eq!(read(&tree.0, "zram0", "idle"), "");
    assert_eq!(read(&tree.0, "zram0", "writeback"), "");
}
