//! Done-when 2 and 5: apply -> status -> revert on the real machine leaves
//! swap, zram and sysctls exactly as before; a config failing midway, or an
//! invalid one, changes nothing.

mod common;

use common::{skip_unless_kernel_state_allowed, MachineGuard};
use zpage_kernel::apply::{self, ApplyOptions, PlanOptions, SavedState, Step};
use zpage_kernel::config::KernelConfig;
use zpage_kernel::zram::ZramDevice;
use zpage_kernel::{status, zswap, KernelError, KernelStateLock};

/// The parts of the machine state that apply/revert change.
fn comparable(s: &SavedState) -> SavedState {
    SavedState {
        created: Default::default(),
        applied_zram_params: Default::default(),
        auto_swappiness: None,
        ..s.clone()
    }
}

fn zram0_free(test: &str) -> bool {
    match ZramDevice::open(0).and_then(|d| d.in_use_reason()) {
        Ok(None) => true,
        Ok(Some(reason)) => {
            println!("SKIP {test}: zram0 is in use ({reason}); not touching it");
            false
        }
        Err(e) => {
            println!("SKIP {test}: {e}");
            false
        }
    }
}

fn options(guard: &MachineGuard) -> ApplyOptions {
    ApplyOptions {
        plan: PlanOptions {
            swappiness_override: None,
            state_file: Some(guard.state_file.clone()),
            force: false,
        },
        fail_before_step: None,
    }
}

#[test]
fn apply_status_revert_round_trip() {
    if skip_unless_kernel_state_allowed("apply_status_revert_round_trip") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    if !zram0_free("apply_status_revert_round_trip") {
        return;
    }
    let mut guard = MachineGuard::save("roundtrip");
    let swapfile = format!("/var/tmp/zpage-test-swapfile-{}", std::process::id());
    guard.files.push(swapfile.clone().into());
    let config = KernelConfig::parse(&format!(
        r#"
        [[zram]]
        index = 0
        algorithm = "lz4"
        algorithm_params = "level=1"
        size = "64M"
        mem_limit = "32M"
        swap_priority = 100

        [zswap]
        enabled = true
        max_pool_percent = 25
        accept_threshold_percent = 80
        shrinker = true

        [[swap]]
        path = "{swapfile}"
        size = "64M"
        priority = 10

        [[swap]]
        path = "/dev/zpage-no-such-disk"
        # optional (nofail): missing hardware must not stop the rest

        [sysctl]
        swappiness = "auto"
        page_cluster = 0
        watermark_scale_factor = 125
        extfrag_threshold = 0
        "#
    ))
    .unwrap();
    let before = MachineGuard::now();
    let opts = options(&guard);

    // Dry run: a plan, nothing changed.
    let plan = apply::plan(&config, &opts.plan).unwrap();
    println!("plan:\n{plan}");
    assert!(
        plan.notes
            .iter()
            .any(|n| n.contains("skipping optional swap[1]")),
        "{plan}"
    );
    assert_eq!(comparable(&MachineGuard::now()), comparable(&before));

    let report = apply::apply(&config, &opts).unwrap();
    println!("applied:\n{}", report.plan);
    let snapshot = status::collect();
    let zram0 = snapshot.zram.iter().find(|z| z.name == "zram0").unwrap();
    assert_eq!(zram0.algorithm.as_deref(), Some("lz4"));
    assert_eq!(zram0.disksize_bytes, 64 << 20);
    assert_eq!(zram0.swap_priority, Some(100));
    assert_eq!(zram0.mm_stat.unwrap().mem_limit, 32 << 20);
    let file_swap = snapshot
        .swaps
        .iter()
        .find(|s| s.path == swapfile)
        .expect("swap file active");
    assert_eq!(file_swap.priority, 10);
    assert_eq!(file_swap.size_bytes, (64 << 20) - 4096);
    assert_eq!(snapshot.sysctls["vm.page-cluster"], "0");
    assert_eq!(snapshot.sysctls["vm.watermark_scale_factor"], "125");
    assert_eq!(snapshot.sysctls["vm.extfrag_threshold"], "0");
    let swappiness: u32 = snapshot.sysctls["vm.swappiness"].parse().unwrap();
    assert!(
        (100..=200).contains(&swappiness),
        "zram is faster than file I/O, so swappiness > 100: {swappiness}"
    );
    let params = zswap::parameters().unwrap();
    assert_eq!(params["enabled"], "Y");
    assert_eq!(params["max_pool_percent"], "25");
    assert_eq!(params["accept_threshold_percent"], "80");
    assert_eq!(params["shrinker_enabled"], "Y");
    println!("status after apply:\n{}", snapshot.render_text());

    // Idempotent: a second apply has nothing to do.
    let again = apply::plan(&config, &opts.plan).unwrap();
    assert!(again.steps.is_empty(), "second plan not empty:\n{again}");

    // A swap area someone else turns on meanwhile is not revert's to turn off.
    let foreign = std::path::PathBuf::from(format!(
        "/var/tmp/zpage-test-foreign-swap-{}",
        std::process::id()
    ));
    guard.files.push(foreign.clone());
    zpage_kernel::swapdev::create_swap_file(&foreign, 8 << 20).unwrap();
    zpage_kernel::swapdev::swap_on(&foreign, Some(5), false).unwrap();

    let revert = apply::revert(&guard.state_file).unwrap();
    let foreign_still_on = zpage_kernel::procfs::swaps()
        .unwrap()
        .iter()
        .any(|s| std::path::Path::new(&s.path) == foreign);
    assert!(
        foreign_still_on,
        "revert turned off a swap area it did not turn on"
    );
    zpage_kernel::swapdev::swap_off(&foreign).unwrap();
    std::fs::remove_file(&foreign).unwrap();
    println!("revert: {revert:?}");
    assert!(revert.failed.is_empty(), "{revert:?}");
    let after = MachineGuard::now();
    assert_eq!(comparable(&after), comparable(&before));
    assert!(!std::path::Path::new(&swapfile).exists());
    assert!(!guard.state_file.exists());
}

#[test]
fn failure_midway_rolls_everything_back() {
    if skip_unless_kernel_state_allowed("failure_midway_rolls_everything_back") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    if !zram0_free("failure_midway_rolls_everything_back") {
        return;
    }
    let mut guard = MachineGuard::save("midway");
    // A required swap file that passes every check (exists, has a swap
    // signature) but that the kernel refuses at swapon: it is sparse.
    let sparse = std::path::PathBuf::from(format!(
        "/var/tmp/zpage-test-sparse-swap-{}",
        std::process::id()
    ));
    guard.files.push(sparse.clone());
    {
        let file = std::fs::File::create(&sparse).unwrap();
        file.set_len(16 << 20).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sparse, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    zpage_kernel::swapdev::make_swap(&sparse, 16 << 20).unwrap();
    let config = KernelConfig::parse(&format!(
        r#"
        [[zram]]
        algorithm = "lzo"
        size = "32M"
        [zswap]
        max_pool_percent = 33
        [[swap]]
        path = "{}"
        required = true
        [sysctl]
        page_cluster = 1
        "#,
        sparse.display()
    ))
    .unwrap();
    let before = MachineGuard::now();
    let opts = options(&guard);
    let plan = apply::plan(&config, &opts.plan).unwrap();
    assert!(plan
        .steps
        .iter()
        .any(|s| matches!(s, Step::ZramSetup { .. })));
    let err = apply::apply(&config, &opts).unwrap_err();
    println!("midway failure: {err}");
    assert!(
        matches!(err, KernelError::RolledBack { ref rollback_note, .. } if rollback_note.is_empty()),
        "{err}"
    );
    assert!(
        err.to_string().contains(&sparse.display().to_string()),
        "{err}"
    );
    assert_eq!(comparable(&MachineGuard::now()), comparable(&before));
    assert!(
        !guard.state_file.exists(),
        "a rolled-back first apply leaves no state file"
    );

    // Injected failure at each step: always back to the start.
    let steps = plan.steps.len();
    let good = KernelConfig::parse("[[zram]]\nalgorithm = \"lzo\"\nsize = \"32M\"\n[zswap]\nmax_pool_percent = 33\n[sysctl]\npage_cluster = 1\n").unwrap();
    for n in 1..steps {
        let mut o = options(&guard);
        o.fail_before_step = Some(n);
        if apply::apply(&good, &o).is_ok() {
            // n is past the last step of `good`: it applied; undo it.
            apply::revert(&guard.state_file).unwrap();
        }
        assert_eq!(
            comparable(&MachineGuard::now()),
            comparable(&before),
            "after failing before step {n}"
        );
    }
}

#[test]
fn invalid_configs_change_nothing() {
    if skip_unless_kernel_state_allowed("invalid_configs_change_nothing") {
        return;
    }
    let _lock = KernelStateLock::acquire();
    let guard = MachineGuard::save("invalid");
    let before = MachineGuard::now();
    let opts = options(&guard);
    let cases = [
        (
            "[[zram]]\nalgorithm = \"zstd-turbo\"\nsize = \"64M\"\n",
            "zram[0].algorithm",
        ),
        (
            "[[zram]]\nalgorithm = \"lz4\"\nsize = \"1000T\"\n",
            "zram[0].size",
        ),
        ("[[zram]]\nalgorithm = \"lz4\"\nsize = 0\n", "zram[0].size"),
        (
            "[[zram]]\nindex = 7\nalgorithm = \"lz4\"\nsize = \"64M\"\n",
            "zram[0].index",
        ),
        ("[zswap]\ncompressor = \"brotli\"\n", "zswap.compressor"),
        (
            "[[swap]]\npath = \"/dev/zpage-no-such-disk\"\nrequired = true\n",
            "swap[0].path",
        ),
        (
            "[[swap]]\npath = \"/etc/hostname\"\nrequired = true\n",
            "swap[0].path",
        ),
        (
            "[[swap]]\npath = \"/var/tmp/x\"\nencrypted = true\nrequired = true\n",
            "swap[0].path",
        ),
    ];
    for (text, key) in cases {
        let config = KernelConfig::parse(text).unwrap();
        let err = apply::apply(&config, &opts).unwrap_err();
        println!("{key}: {err}");
        assert!(err.to_string().contains(key), "expected {key} in: {err}");
        assert!(
            !matches!(err, KernelError::RolledBack { .. }),
            "caught before any change: {err}"
        );
        assert_eq!(comparable(&MachineGuard::now()), comparable(&before));
    }
}

#[test]
fn apply_needs_root_and_says_so() {
    let config = KernelConfig::parse("[sysctl]\nwatermark_scale_factor = 3000\n").unwrap();
    if !zpage_kernel::is_root() {
        // The unprivileged side (run directly, or by the root test below).
        let options = ApplyOptions {
            plan: PlanOptions {
                swappiness_override: None,
                state_file: Some("/tmp/zpage-kernel-test-notroot.json".into()),
                force: false,
            },
            fail_before_step: None,
        };
        let err = apply::apply(&config, &options).unwrap_err();
        println!("unprivileged apply: {err}");
        assert!(matches!(err, KernelError::NeedsRoot { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("run as root or with CAP_SYS_ADMIN"),
            "{err}"
        );
        assert!(!std::path::Path::new("/tmp/zpage-kernel-test-notroot.json").exists());
        return;
    }
    let _lock = KernelStateLock::acquire();
    let before = MachineGuard::now();
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args([
            "--exact",
            "apply_needs_root_and_says_so",
            "--nocapture",
            "--test-threads=1",
        ])
        .output();
    let Ok(output) = output else {
        println!("SKIP apply_needs_root_and_says_so: setpriv (util-linux) not available");
        return;
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    if stdout.contains("Permission denied") || (!output.status.success() && stdout.is_empty()) {
        println!(
            "SKIP apply_needs_root_and_says_so: nobody cannot run {}",
            exe.display()
        );
        return;
    }
    println!("{stdout}");
    assert!(
        output.status.success(),
        "unprivileged run failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("needs root"), "{stdout}");
    assert_eq!(comparable(&MachineGuard::now()), comparable(&before));
}

#[test]
fn data_on_a_device_needs_force_and_the_plan_says_what_is_lost() {
    if skip_unless_kernel_state_allowed(
        "data_on_a_device_needs_force_and_the_plan_says_what_is_lost",
    ) {
        return;
    }
    let _lock = KernelStateLock::acquire();
    let Ok(device) = ZramDevice::open(0) else {
        println!("SKIP data_on_a_device_needs_force_and_the_plan_says_what_is_lost: no zram0");
        return;
    };
    let Some(guard) = common::FreeZramGuard::save(device, "data_on_a_device_needs_force") else {
        return;
    };
    // zram0 holds 40 pages of data and is not a swap area (a raw user, e.g. a filesystem unmounted for a moment).
    guard.device.configure("lzo", 8 << 20).unwrap();
    let pages: Vec<Box<[u8; 4096]>> = (0..40).map(common::text_page).collect();
    guard
        .device
        .write_pages(pages.iter().map(|p| &**p))
        .unwrap();
    let config =
        KernelConfig::parse("[[zram]]\nindex = 0\nalgorithm = \"lz4\"\nsize = \"16M\"\n").unwrap();
    let state_file = std::path::PathBuf::from(format!(
        "/tmp/zpage-kernel-test-force-{}.json",
        std::process::id()
    ));
    let mut options = PlanOptions {
        swappiness_override: None,
        state_file: Some(state_file.clone()),
        force: false,
    };
    let err = apply::plan(&config, &options).unwrap_err().to_string();
    println!("without --force: {err}");
    assert!(
        err.contains("160.0 KiB") && err.contains("--force") && err.contains("discard"),
        "{err}"
    );
    options.force = true;
    let plan = apply::plan(&config, &options).unwrap();
    println!("with --force:\n{plan}");
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("discards the 160.0 KiB")),
        "{plan}"
    );
    assert!(plan
        .to_string()
        .contains("warning: zram0 is initialised but not a swap area"));
    assert_eq!(
        guard.device.mm_stat().unwrap().orig_data_size,
        40 * 4096,
        "planning changed nothing"
    );
    assert!(!state_file.exists());
}
