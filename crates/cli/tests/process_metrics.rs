//! A program's regions reach the exporter: the region library publishes this
//! process's figures per the contract in docs/process-metrics.md, and
//! `zpage exporter` merges them into its scrape, which promtool accepts;
//! the file is private and links planted in its place are not followed.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use zpage_region::{Region, RegionConfig, PAGE_SIZE};

#[test]
fn a_process_regions_are_scraped() {
    let dir = std::env::temp_dir().join(format!("zpage-process-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let region = Region::new(RegionConfig::new(8 << 20, 1 << 20)).expect("region");
    let base = region.as_ptr();
    for page in 0..region.len() / PAGE_SIZE {
        // SAFETY: in bounds of the region, aligned.
        unsafe { (base.add(page * PAGE_SIZE) as *mut u64).write_volatile(page as u64 + 1) };
    }
    // Links planted where the writer writes are replaced, never followed.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = std::env::temp_dir().join(format!("zpage-metrics-victim-{}", std::process::id()));
    std::fs::write(&victim, "precious\n").unwrap();
    let pid = std::process::id();
    for name in [
        format!(".zpage-{pid}.prom.tmp"),
        format!("zpage-{pid}.prom"),
    ] {
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    }
    let file = zpage_region::publish_metrics_to(&dir).expect("publish");
    assert_eq!(file, dir.join(format!("zpage-{pid}.prom")));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let _ = std::fs::remove_file(&victim);
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "private");
    let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
        .args(["exporter", "--once", "--process-metrics-dir"])
        .arg(&dir)
        .output()
        .expect("run zpage exporter");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let scrape = String::from_utf8(output.stdout).unwrap();
    let pid = format!("pid=\"{}\"", std::process::id());
    let sample = |family: &str| {
        scrape
            .lines()
            .find(|l| l.starts_with(&format!("{family}{{")) && l.contains(&pid))
            .unwrap_or_else(|| {
                panic!("no {family} sample of this process in the scrape:\n{scrape}")
            })
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    assert!(sample("zpage_region_fault_total") > 0.0);
    assert!(sample("zpage_region_eviction_total") > 0.0);
    assert_eq!(sample("zpage_region_size_bytes"), (8 << 20) as f64);
    assert_eq!(sample("zpage_process_regions"), 1.0);
    assert!(
        scrape.contains("zpage_exporter_process_files{state=\"merged\"} 1"),
        "{scrape}"
    );
    // Checked where promtool is installed (CI installs it).
    let _ = zpage_testsupport::promtool_check_metrics(&scrape);
    drop(region);
    let _ = std::fs::remove_dir_all(&dir);
}
