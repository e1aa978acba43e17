//! zram on the real kernel: write known data into a free device and check
//! the kernel's counters. Restores the device afterwards.

mod common;

use common::{
    random_page, same_filled_page, skip_unless_kernel_state_allowed, skip_unless_root, text_page,
    FreeZramGuard,
};
use zpage_kernel::zram::ZramDevice;
use zpage_kernel::{KernelError, KernelStateLock};

#[test]
fn lists_and_opens_devices() {
    let devices = match ZramDevice::list() {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP lists_and_opens_devices: {e}");
            return;
        }
    };
    for device in &devices {
        let again = ZramDevice::open(device.index()).unwrap();
        assert_eq!(again.name(), format!("zram{}", device.index()));
        assert_eq!(
            again.dev_path().to_str().unwrap(),
            format!("/dev/zram{}", device.index())
        );
        let algorithms = device.algorithms().unwrap();
        assert!(algorithms.contains(&device.current_algorithm().unwrap()));
    }
    match ZramDevice::open(999_999) {
        Err(KernelError::NoSuchZramDevice { index }) => assert_eq!(index, 999_999),
        Err(KernelError::ZramModuleNotLoaded) => {}
        other => panic!("expected NoSuchZramDevice, got {other:?}"),
    }
}

#[test]
fn known_data_shows_in_mm_stat() {
    if skip_unless_kernel_state_allowed("known_data_shows_in_mm_stat") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    let Ok(device) = ZramDevice::open(0) else {
        println!("SKIP known_data_shows_in_mm_stat: no zram0");
        return;
    };
    let Some(guard) = FreeZramGuard::save(device, "known_data_shows_in_mm_stat") else {
        return;
    };
    let device = &guard.device;

    // Unknown algorithm: refused, nothing changed.
    let err = device.configure("no-such-algo", 16 << 20).unwrap_err();
    assert!(err.to_string().contains("no-such-algo"), "{err}");
    assert_eq!(device.disksize().unwrap(), 0);

    device.configure("lz4", 16 << 20).unwrap();
    assert_eq!(device.current_algorithm().unwrap(), "lz4");
    assert_eq!(device.disksize().unwrap(), 16 << 20);
    // Initialised devices are in use: configure refuses and says how to fix it.
    let busy = device.configure("lzo", 16 << 20).unwrap_err();
    assert!(matches!(busy, KernelError::DeviceBusy { .. }), "{busy}");
    assert!(busy.to_string().contains("zram0"), "{busy}");

    const ZERO: usize = 64;
    const SAME: usize = 32;
    const RANDOM: usize = 16;
    const TEXT: usize = 48;
    let mut pages: Vec<Box<[u8; 4096]>> = Vec::new();
    pages.extend((0..ZERO).map(|_| same_filled_page(0)));
    pages.extend((0..SAME).map(|i| same_filled_page(0x0101_0101_0101_0101 * (i as u64 % 7 + 1))));
    pages.extend((0..RANDOM).map(|i| random_page(i as u64 + 1)));
    pages.extend((0..TEXT).map(|i| text_page(i as u64 + 1)));
    let written = device.write_pages(pages.iter().map(|p| &**p)).unwrap();
    assert_eq!(written, (pages.len() * 4096) as u64);

    let stat = device.mm_stat().unwrap();
    println!("mm_stat after writing {ZERO} zero, {SAME} same-filled, {RANDOM} random, {TEXT} text pages: {stat:?}");
    assert_eq!(stat.same_pages, (ZERO + SAME) as u64);
    assert_eq!(stat.orig_data_size, (pages.len() * 4096) as u64);
    assert_eq!(stat.huge_pages, RANDOM as u64);
    assert!(stat.huge_pages_since >= RANDOM as u64);
    // Random pages are stored raw, text compresses: compressed size lies between.
    assert!(stat.compr_data_size >= (RANDOM * 4096) as u64);
    assert!(stat.compr_data_size < ((RANDOM + TEXT) * 4096) as u64);
    assert!(stat.mem_used_total > 0);
    let io = device.io_stat().unwrap();
    assert_eq!(io.failed_writes, 0);

    // Rewriting only zero pages over everything drops the stored data.
    let zeros: Vec<Box<[u8; 4096]>> = (0..pages.len()).map(|_| same_filled_page(0)).collect();
    device.write_pages(zeros.iter().map(|p| &**p)).unwrap();
    let stat = device.mm_stat().unwrap();
    assert_eq!(stat.same_pages, pages.len() as u64);
    assert_eq!(stat.huge_pages, 0);

    device.reset().unwrap();
    assert_eq!(device.mm_stat().unwrap().orig_data_size, 0);
    assert_eq!(device.in_use_reason().unwrap(), None);
}

#[test]
fn hot_add_and_remove() {
    if skip_unless_kernel_state_allowed("hot_add_and_remove") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    let before = ZramDevice::list().unwrap();
    let added = match ZramDevice::hot_add() {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP hot_add_and_remove: {e}");
            return;
        }
    };
    assert!(!before.contains(&added));
    assert!(ZramDevice::list().unwrap().contains(&added));
    assert_eq!(added.in_use_reason().unwrap(), None);
    added.hot_remove().unwrap();
    assert_eq!(ZramDevice::list().unwrap(), before);
}

#[test]
fn daemon_says_exactly_what_is_missing() {
    use zpage_kernel::daemon::{capabilities, Daemon, DaemonConfig, DaemonEvent};
    // On kernels with writeback or recompression the daemon acts on devices: keep others out.
    let _lock = KernelStateLock::acquire();
    let Ok(device) = ZramDevice::open(0) else {
        println!("SKIP daemon_says_exactly_what_is_missing: no zram0");
        return;
    };
    let caps = capabilities(&device);
    println!("{}", DaemonEvent::Capabilities(caps.clone()));
    // This kernel: no CONFIG_ZRAM_WRITEBACK, no CONFIG_ZRAM_MULTI_COMP.
    if !device.has_attr("backing_dev") {
        assert!(
            caps.missing
                .iter()
                .any(|m| m.contains("CONFIG_ZRAM_WRITEBACK") && m.contains("backing_dev")),
            "{caps:?}"
        );
    }
    if !device.has_attr("recomp_algorithm") {
        assert!(
            caps.missing
                .iter()
                .any(|m| m.contains("CONFIG_ZRAM_MULTI_COMP")),
            "{caps:?}"
        );
    }
    let mut daemon = Daemon::new(DaemonConfig {
        interval: std::time::Duration::from_millis(50),
        pressure_threshold_us: 0,
        ..DaemonConfig::default()
    });
    let mut events = Vec::new();
    daemon.run(Some(2), |e| events.push(e.clone())).unwrap();
    assert!(matches!(events[0], DaemonEvent::Capabilities(_)));
    // Threshold 0: every tick logs pressure (PSI present here).
    if std::path::Path::new("/proc/pressure/memory").exists() {
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, DaemonEvent::Pressure { .. }))
                .count(),
            2,
            "{events:?}"
        );
    }
    // Nothing acts on idle pages here, so the daemon does not touch the device.
    if !caps.features.writeback && !caps.features.recompress {
        assert!(!events
            .iter()
            .any(|e| matches!(e, DaemonEvent::MarkedIdle { .. })));
    }
}

#[test]
fn recommend_follows_the_observation_and_the_kernel_offer() {
    use zpage_kernel::recommend::{recommend, CodecResult, Observation};
    if skip_unless_root("recommend_follows_the_observation_and_the_kernel_offer") {
        return;
    }
    // What `zpage analyze` reports for 64 MiB of memory that compresses 2.5:1 with lz4.
    let observed_bytes = 64 << 20;
    let observation = Observation {
        source: "test".into(),
        observed_bytes,
        processes: 3,
        skipped_processes: 0,
        codecs: vec![CodecResult {
            codec: "lz4".into(),
            kernel_algorithm: "lz4".into(),
            same_filled_pages: 100,
            incompressible_pages: None,
            estimated_memory_bytes: (observed_bytes as f64 / 2.5) as u64,
            ratio: 2.5,
            compress_mib_per_s: None,
        }],
    };
    let r = match recommend(observation, false) {
        Ok(r) => r,
        Err(zpage_kernel::KernelError::ZramModuleNotLoaded) => {
            println!("SKIP recommend_follows_the_observation_and_the_kernel_offer: no zram");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    println!("{}", r.render_text());
    assert!(ZramDevice::open(0)
        .unwrap()
        .algorithms()
        .unwrap()
        .contains(&r.algorithm));
    assert_eq!(
        r.algorithm, "lz4",
        "lz4 is offered and no stronger codec was observed"
    );
    assert_eq!(r.page_cluster, 0);
    assert!(r.saving_when_full_bytes > 0 && r.saving_when_full_bytes < r.zram_size_bytes);
    let expected_saving = r.zram_size_bytes as f64 * (1.0 - 1.0 / 2.5);
    assert!((r.saving_when_full_bytes as f64 - expected_saving).abs() < 4096.0);
    zpage_kernel::config::KernelConfig::parse(&r.config_toml).unwrap();
}
