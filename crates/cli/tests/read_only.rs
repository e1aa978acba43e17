//! Commands that say they change nothing change nothing: the kernel state
//! (swap areas, every zram device and zram-control, zswap parameters, vm
//! sysctls, memory cgroups) is snapshotted around each of them and compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn cgroup_tree(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for name in list(dir) {
        let path = dir.join(&name);
        if path.is_dir() {
            let relative = format!("{prefix}/{name}");
            cgroup_tree(&path, &relative, out);
            out.push(relative);
        }
    }
}

/// Everything a command could change, as text by source.
fn kernel_state() -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    // Used bytes of a swap area move with memory pressure; what is swap, how big and its priority do not.
    let swaps: Vec<String> = read(Path::new("/proc/swaps"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{} {} {} {}", f[0], f[1], f[2], f.get(4).unwrap_or(&""))
        })
        .collect();
    state.insert("swaps".into(), swaps.join("\n"));
    state.insert(
        "zram-control".into(),
        list(Path::new("/sys/class/zram-control")).join(" "),
    );
    let devices: Vec<String> = list(Path::new("/sys/block"))
        .into_iter()
        .filter(|n| n.starts_with("zram"))
        .collect();
    state.insert("zram devices".into(), devices.join(" "));
    for device in devices {
        for attribute in [
            "disksize",
            "initstate",
            "comp_algorithm",
            "mm_stat",
            "io_stat",
            "backing_dev",
            "recomp_algorithm",
        ] {
            let path = PathBuf::from(format!("/sys/block/{device}/{attribute}"));
            if let Some(value) = read(&path) {
                state.insert(path.display().to_string(), value);
            }
        }
    }
    for name in list(Path::new("/sys/module/zswap/parameters")) {
        let path = Path::new("/sys/module/zswap/parameters").join(&name);
        state.insert(path.display().to_string(), read(&path).unwrap_or_default());
    }
    for name in list(Path::new("/proc/sys/vm")) {
        let path = Path::new("/proc/sys/vm").join(&name);
        if let Some(value) = read(&path) {
            state.insert(path.display().to_string(), value);
        }
    }
    let mut cgroups = Vec::new();
    cgroup_tree(Path::new("/sys/fs/cgroup/memory"), "", &mut cgroups);
    state.insert("memory cgroups".into(), cgroups.join(" "));
    state
}

struct Scratch(PathBuf);
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn read_only_commands_leave_the_kernel_state_as_it_was() {
    let scratch =
        Scratch(std::env::temp_dir().join(format!("zpage-read-only-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let config = scratch.0.join("kernel.toml");
    std::fs::write(
        &config,
        format!(
            "[[zram]]\nindex = 0\nalgorithm = \"lz4\"\nsize = \"64M\"\n[zswap]\nenabled = true\nmax_pool_percent = 25\n[[swap]]\npath = \"{}\"\nsize = \"16M\"\n[sysctl]\nswappiness = \"auto\"\npage_cluster = 0\n",
            scratch.0.join("swapfile").display()
        ),
    )
    .unwrap();
    let image = scratch.0.join("image.bin");
    let mut bytes = vec![0u8; 16 * 4096];
    bytes.extend((0..48 * 4096).map(|i| b"read only "[i % 10]));
    std::fs::write(&image, bytes).unwrap();
    let generator_conf = scratch.0.join("zram-generator.conf");
    std::fs::write(
        &generator_conf,
        "[zram0]\nzram-size = ram / 2\ncompression-algorithm = lz4\n",
    )
    .unwrap();
    let generator_conf = generator_conf.to_str().unwrap();
    let state_file = scratch.0.join("no-saved-state.json");
    let config = config.to_str().unwrap();
    let image = image.to_str().unwrap();
    let mut commands: Vec<Vec<&str>> = vec![
        vec!["kernel", "status"],
        vec!["kernel", "status", "--json"],
        vec!["kernel", "devices", "--all"],
        vec!["kernel", "zramctl", "--output-all", "--bytes", "--json"],
        vec!["kernel", "status", "--watch", "0.2", "--count", "2"],
        vec!["kernel", "apply", config, "--dry-run"],
        vec!["kernel", "apply", config, "--dry-run", "--json"],
        vec![
            "kernel",
            "recommend",
            "--quick",
            "--max-pages-per-process",
            "16",
            "--json",
        ],
        vec!["analyze", image, "--codec", "lz4", "--json"],
        vec!["analyze", "--max-pages", "16", "--json"],
        vec!["exporter", "--once"],
        vec![
            "kernel",
            "import",
            generator_conf,
            "--from",
            "zram-generator",
        ],
    ];
    for format in ["zram-generator", "sysctl", "nixos", "systemd", "zram-tools"] {
        commands.push(vec!["kernel", "export", config, "--format", format]);
    }
    // Other zpage tests change kernel state under this lock; hold it so only our commands run.
    let _lock = zpage_kernel::KernelStateLock::acquire();
    for args in commands {
        let before = kernel_state();
        let output = Command::new(env!("CARGO_BIN_EXE_zpage"))
            .args(&args)
            .env("ZPAGE_KERNEL_STATE", &state_file)
            .output()
            .unwrap();
        let after = kernel_state();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() || args.contains(&"recommend") || args.contains(&"zram-tools"),
            "zpage {}: {stderr}",
            args.join(" ")
        );
        let changed: Vec<String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .map(|k| format!("{k}: {:?} -> {:?}", before.get(k), after.get(k)))
            .collect();
        assert!(
            changed.is_empty(),
            "zpage {} changed the machine: {changed:#?}",
            args.join(" ")
        );
        if args.contains(&"--dry-run") && !args.contains(&"--json") {
            assert!(
                stdout.contains("measure random 4 KiB reads") && stdout.contains("nothing changed"),
                "{stdout}"
            );
        }
    }
    assert!(!state_file.exists(), "a dry run wrote the state file");
}
