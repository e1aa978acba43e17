//! A budget's tier below RAM reaches the exporter: a region whose pool is
//! capped writes pages to a small packed file until it is full, reads them
//! back, and the process's published figures, merged by `zpage exporter`,
//! have the tier's families (`zpage_tier_*`, see docs/process-metrics.md)
//! with what happened: pages written and read, writes refused as full, no
//! read failing, the tier up. Its own test binary: a process publishes once.

use std::process::Command;
use std::sync::Arc;
use zpage_region::{Region, RegionConfig, PAGE_SIZE};
use zpage_store::{PackedConfig, PackedTier, Tier};
use zpage_testsupport::TempDir;

const MIB: usize = 1 << 20;

/// Words no codec shrinks: each page is stored raw, a whole page.
fn word(page: usize, index: usize) -> u64 {
    let mut x = ((page as u64) << 20 | index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x.wrapping_mul(0xBF58_476D_1CE4_E5B9) | 1
}

#[test]
fn a_budgets_tier_is_published_and_scraped() {
    let scratch = TempDir::new("tier-metrics");
    let tier_path = scratch.0.join("tier");
    // Two segments of 1 MiB, one kept free for garbage collection: room
    // for about 250 of the region's 4096 pages, so writes are refused.
    let tier_bytes = 2 * MIB as u64;
    let tier: Arc<dyn Tier> =
        Arc::new(PackedTier::new(PackedConfig::new(&tier_path, tier_bytes)).expect("tier"));
    let mut config = RegionConfig::new(16 * MIB, 2 * MIB);
    config.max_pool_bytes = Some(MIB as u64);
    config.tier = Some(Arc::clone(&tier));
    let region = Region::new(config).expect("region");
    let words = PAGE_SIZE / 8;
    let base = region.as_ptr() as *mut u64;
    for page in 0..region.len() / PAGE_SIZE {
        for index in 0..words {
            // SAFETY: in bounds of the region, aligned.
            unsafe {
                base.add(page * words + index)
                    .write_volatile(word(page, index))
            };
        }
    }
    // Every page read back: those in the file come back through faults.
    for page in 0..region.len() / PAGE_SIZE {
        for index in (0..words).step_by(97) {
            // SAFETY: in bounds of the region, aligned.
            let got = unsafe { base.add(page * words + index).read_volatile() };
            assert_eq!(got, word(page, index), "page {page} word {index}");
        }
    }
    // Whether the reclaimer's own writeback meets the tier full depends on
    // timing (it stops trying once pages cannot leave, and goes over the
    // budget): fill what room is left directly, so the refusal the metrics
    // must show happens in every run. Pages far above the region's.
    let blob = vec![0xA5u8; PAGE_SIZE];
    for page in 0..4096u64 {
        if tier.stats().put_fail_full > 0 {
            break;
        }
        let _ = tier.put((1 << 40) | page, &blob);
    }
    let stats = tier.stats();
    assert!(
        stats.puts > 0 && stats.gets > 0 && stats.put_fail_full > 0,
        "the test needs writes, reads and a full tier: {stats:?}"
    );

    let dir = scratch.0.join("metrics");
    zpage_region::publish_metrics_to(&dir).expect("publish");
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
    assert!(
        scrape.contains("zpage_exporter_process_files{state=\"merged\"} 1"),
        "the exporter took the file with the tier's families: {scrape}"
    );
    let regions = zpage_region::sample_regions();
    assert_eq!(regions.len(), 1);
    let budget = format!("budget=\"{}\"", regions[0].budget);
    let pid = format!("pid=\"{}\"", std::process::id());
    // The value of the one sample of `family` with `extra` among its labels.
    let sample = |family: &str, extra: &str| -> f64 {
        let found: Vec<&str> = scrape
            .lines()
            .filter(|l| {
                l.starts_with(&format!("{family}{{"))
                    && l.contains(&pid)
                    && l.contains(&budget)
                    && l.contains(extra)
            })
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{family} {extra}: one sample of this budget wanted in:\n{scrape}"
        );
        found[0].rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(sample("zpage_tier_writes_total", "") > 0.0);
    assert!(sample("zpage_tier_written_bytes_total", "") > 0.0);
    assert!(sample("zpage_tier_reads_total", "") > 0.0);
    assert!(sample("zpage_tier_read_seconds_total", "") > 0.0);
    assert!(sample("zpage_tier_backing_bytes", "") > 0.0);
    assert_eq!(sample("zpage_tier_capacity_bytes", ""), tier_bytes as f64);
    assert!(sample("zpage_tier_write_failures_total", "cause=\"full\"") > 0.0);
    assert_eq!(
        sample("zpage_tier_write_failures_total", "cause=\"io\""),
        0.0
    );
    assert_eq!(
        sample("zpage_tier_read_failures_total", "cause=\"authentication\""),
        0.0
    );
    assert_eq!(sample("zpage_tier_up", ""), 1.0);
    // Held pages are a gauge that may be 0 by now; it is there.
    assert!(sample("zpage_tier_pages", "") >= 0.0);
    // Labels name the budget, never the tier (a path, or a Redis URL).
    assert!(
        !scrape.contains(tier_path.to_str().unwrap()),
        "the tier's path is in the scrape:\n{scrape}"
    );

    // Checked where promtool is installed (CI installs it).
    let _ = zpage_testsupport::promtool_check_metrics(&scrape);
    drop(region);
}
