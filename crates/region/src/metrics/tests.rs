use super::*;
use std::os::unix::fs::PermissionsExt;

use zpage_testsupport::TempDir;

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn planted_symbolic_links_are_replaced_never_followed() {
    let scratch = TempDir::new("metrics-planted");
    let dir = scratch.0.join("metrics");
    let victim = scratch.0.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let target = Target::new(&dir);
    open_checked_dir(&dir).unwrap();
    assert_eq!(mode_of(&dir), 0o700, "made private");
    let pid = std::process::id();
    let temporary = dir.join(format!(".zpage-{pid}.prom.tmp"));
    let published = dir.join(format!("zpage-{pid}.prom"));
    std::os::unix::fs::symlink(&victim, &temporary).unwrap();
    std::os::unix::fs::symlink(&victim, &published).unwrap();
    target.write_once().unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let meta = std::fs::symlink_metadata(&published).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the link was replaced by the file"
    );
    assert_eq!(mode_of(&published), 0o600);
    assert!(std::fs::read_to_string(&published)
        .unwrap()
        .contains("zpage_process_regions{"));
    assert!(!temporary.exists() && std::fs::symlink_metadata(&temporary).is_err());
}

#[test]
fn a_directory_someone_else_can_write_is_refused() {
    let scratch = TempDir::new("metrics-refused");
    // A symbolic link in place of the directory.
    let real = scratch.0.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = scratch.0.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let said = open_checked_dir(&link).unwrap_err().to_string();
    assert!(said.contains("is a symbolic link"), "{said}");
    // Writable by others, as /tmp is.
    let shared = scratch.0.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let said = open_checked_dir(&shared).unwrap_err().to_string();
    assert!(
        said.contains("writable by group or others (mode 1777)"),
        "{said}"
    );
    assert!(said.contains(METRICS_DIR_ENV), "names the fix: {said}");
    // A plain file.
    let file = scratch.0.join("file");
    std::fs::write(&file, "").unwrap();
    let said = open_checked_dir(&file).unwrap_err().to_string();
    assert!(said.contains("is not a directory"), "{said}");
    // Made by another user (as /tmp/zpage-<uid> may be): needs root to stage.
    if sys::getuid() != 0 {
        println!("SKIP the other user's directory: needs root to chown");
        return;
    }
    let theirs = scratch.0.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let said = open_checked_dir(&theirs).unwrap_err().to_string();
    assert!(said.contains("is owned by uid 65534"), "{said}");
    assert!(
        std::fs::read_dir(&theirs).unwrap().next().is_none(),
        "nothing was written there"
    );
}

#[test]
fn families_follow_the_contract() {
    let mut stats = RegionStats {
        fault_count: 3,
        fault_ns: 3_000,
        resident_bytes: 4096,
        ..RegionStats::default()
    };
    stats.fault_latency.count = 3;
    stats.fault_latency.log2_buckets = vec![0; LATENCY_BUCKETS];
    stats.fault_latency.log2_buckets[9] = 3;
    let text = render(
        42,
        "a \"quoted\" name",
        &[RegionSample {
            region: 1,
            budget: 7,
            stats,
        }],
    );
    assert!(
        !text.contains("zpage_tier_"),
        "no tier, no tier families: {text}"
    );
    let labels = r#"pid="42",comm="a \"quoted\" name",region="1",budget="7""#;
    assert!(
        text.contains(&format!("zpage_region_fault_total{{{labels}}} 3\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "zpage_region_fault_seconds_total{{{labels}}} 0.000003\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("zpage_region_resident_bytes{{{labels}}} 4096\n")),
        "{text}"
    );
    assert!(
        text.contains("# TYPE zpage_region_eviction_total counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE zpage_region_resident_bytes gauge\n"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "zpage_region_fault_duration_seconds_count{{{labels}}} 3\n"
    )));
    assert_follows_the_contract(&text);
}

/// Every family is in the contract's namespaces, typed before its samples.
fn assert_follows_the_contract(text: &str) {
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            typed.insert(rest.split(' ').next().unwrap().to_string());
        } else if !line.starts_with('#') {
            let name = line.split('{').next().unwrap();
            assert!(
                ["zpage_region_", "zpage_tier_", "zpage_process_"]
                    .iter()
                    .any(|prefix| name.starts_with(prefix)),
                "{line}"
            );
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "{line} before its TYPE");
        }
    }
}

#[test]
fn a_budgets_tier_is_published_once_with_failures_by_cause() {
    let tier = TierStats {
        pages: 5,
        puts: 9,
        get_ns: 1_500,
        put_fail_full: 2,
        get_fail_authentication: 1,
        disk_bytes: None,
        available: false,
        down_cause: Some("write failed: No space left on device".into()),
        ..TierStats::default()
    };
    let mut tiered = RegionStats::default();
    tiered.store.tier = Some(tier);
    let sample = |region, budget, stats: &RegionStats| RegionSample {
        region,
        budget,
        stats: stats.clone(),
    };
    // Two regions of budget 7 share its tier; budget 8 has none.
    let text = render(
        42,
        "job",
        &[
            sample(1, 7, &tiered),
            sample(2, 7, &tiered),
            sample(3, 8, &RegionStats::default()),
        ],
    );
    assert_follows_the_contract(&text);
    let labels = r#"pid="42",comm="job",budget="7""#;
    for line in [
        format!("zpage_tier_pages{{{labels}}} 5"),
        format!("zpage_tier_writes_total{{{labels}}} 9"),
        format!("zpage_tier_read_seconds_total{{{labels}}} 0.0000015"),
        format!("zpage_tier_write_failures_total{{{labels},cause=\"full\"}} 2"),
        format!("zpage_tier_write_failures_total{{{labels},cause=\"io\"}} 0"),
        format!("zpage_tier_read_failures_total{{{labels},cause=\"authentication\"}} 1"),
        format!("zpage_tier_up{{{labels}}} 0"),
    ] {
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{line} once in:\n{text}"
        );
    }
    assert!(text.contains("# TYPE zpage_tier_write_failures_total counter\n"));
    assert!(text.contains("# TYPE zpage_tier_read_max_seconds gauge\n"));
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("zpage_tier_") && l.contains("budget=\"8\"")),
        "a budget without a tier has no tier samples"
    );
    assert!(
        !text.contains("zpage_tier_disk_bytes{"),
        "a figure the tier does not have is left out, not 0"
    );
    assert!(
        !text.contains("No space"),
        "why it is down is not published"
    );
    // Every figure of the tier's list is published.
    for field in TierStats::FIELDS {
        let kind = match field.kind {
            TierFieldKind::Gauge => StatKind::Gauge,
            TierFieldKind::Counter => StatKind::Counter,
        };
        let (name, _) = family("zpage_tier_", field.family, kind);
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing");
    }
}
