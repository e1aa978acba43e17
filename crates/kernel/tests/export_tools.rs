//! Done-when 3: each export format checked by its ecosystem's own tool
//! (zram-generator, sysctl -p, nix-instantiate --parse, systemd-analyze
//! verify) where installed, plus golden checks of the text.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{skip_unless_kernel_state_allowed, skip_unless_root};
use zpage_kernel::config::KernelConfig;
use zpage_kernel::export::{export, split_files, ExportFormat};
use zpage_kernel::{procfs, KernelStateLock};

const CONFIG: &str = r#"
[[zram]]
algorithm = "lz4"
size = 0.5
mem_limit = "2G"
[[zram]]
algorithm = "lzo"
size = "512M"
swap_priority = 90
writeback_device = "/dev/nvme1n1p2"
[zswap]
enabled = true
compressor = "lzo"
max_pool_percent = 25
[[swap]]
path = "/var/swapfile"
size = "1G"
[[swap]]
path = "/dev/nvme1n1p1"
encrypted = true
discard = true
[sysctl]
swappiness = "auto"
page_cluster = 0
watermark_scale_factor = 125
extfrag_threshold = 0
"#;

fn config() -> KernelConfig {
    KernelConfig::parse(CONFIG).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/zpage-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tool(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if p.exists() {
        return Some(p.to_path_buf());
    }
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&found.stdout).trim().to_string();
    (!text.is_empty()).then(|| PathBuf::from(text))
}

#[test]
fn zram_generator_accepts_the_export() {
    let text = export(&config(), ExportFormat::ZramGenerator, Some(150)).unwrap();
    assert!(
        text.contains(
            "[zram0]\nzram-size = ram * 0.5\ncompression-algorithm = lz4\nswap-priority = 100\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "[zram1]\nzram-size = 512\ncompression-algorithm = lzo\nswap-priority = 90\nwriteback-device = /dev/nvme1n1p2\n"
        ),
        "{text}"
    );
    let Some(generator) = tool("/lib/systemd/system-generators/zram-generator") else {
        println!("SKIP zram_generator_accepts_the_export: zram-generator not installed (apt: systemd-zram-generator); golden check only");
        return;
    };
    if skip_unless_root("zram_generator_accepts_the_export (dmesg)") {
        return;
    }
    // The generator only writes units, but it looks at zram devices: keep other tests out.
    let _lock = KernelStateLock::acquire();
    let devices_before = std::fs::read_dir("/sys/block").unwrap().count();
    let dir = scratch("zg");
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("etc/systemd")).unwrap();
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::write(root.join("etc/systemd/zram-generator.conf"), &text).unwrap();
    std::fs::copy("/proc/meminfo", root.join("proc/meminfo")).unwrap();
    std::fs::write(root.join("proc/cmdline"), "").unwrap();
    let out = dir.join("units");
    std::fs::create_dir_all(&out).unwrap();
    let child = Command::new(&generator)
        .arg(&out)
        .env("ZRAM_GENERATOR_ROOT", &root)
        .spawn()
        .unwrap();
    let pid = child.id();
    let status = child.wait_with_output().unwrap().status;
    assert!(status.success(), "zram-generator failed: {status}");
    // It logs to the kernel log (/dev/kmsg), tagged with its pid.
    let dmesg = Command::new("dmesg").output().unwrap();
    let log: Vec<String> = String::from_utf8_lossy(&dmesg.stdout)
        .lines()
        .filter(|l| l.contains(&format!("[{pid}]")))
        .map(str::to_string)
        .collect();
    println!("zram-generator log:\n{}", log.join("\n"));
    for line in &log {
        let tolerated = line.contains("zram-resident-limit")
            || line.contains("modprobe")
            || line.contains("Scanning directory");
        assert!(
            tolerated
                || !(line.contains("unknown key")
                    || line.contains("Failed")
                    || line.contains("Warning")),
            "{line}"
        );
    }
    let half_ram_mb = procfs::mem_total_bytes().unwrap() / 2 / 1024 / 1024;
    assert!(
        log.iter()
            .any(|l| l.contains(&format!("/dev/zram0 with {half_ram_mb}MB"))
                || l.contains(&format!("/dev/zram0 with {}MB", half_ram_mb + 1))),
        "size not evaluated as ram/2"
    );
    assert!(log.iter().any(|l| l.contains("/dev/zram1 with 512MB")));
    let swap0 = std::fs::read_to_string(out.join("dev-zram0.swap")).unwrap();
    assert!(swap0.contains("Priority=100"), "{swap0}");
    let swap1 = std::fs::read_to_string(out.join("dev-zram1.swap")).unwrap();
    assert!(swap1.contains("Priority=90"), "{swap1}");
    assert_eq!(
        std::fs::read_dir("/sys/block").unwrap().count(),
        devices_before,
        "the generator must not create devices"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Restores the given sysctls on drop.
struct SysctlGuard(Vec<(String, String)>);
impl Drop for SysctlGuard {
    fn drop(&mut self) {
        for (name, value) in &self.0 {
            if let Err(e) = procfs::sysctl_write(name, value) {
                eprintln!("restore {name}={value}: {e}");
            }
        }
    }
}

#[test]
fn sysctl_p_accepts_the_export() {
    let text = export(&config(), ExportFormat::Sysctl, Some(166)).unwrap();
    assert!(text.contains("vm.swappiness = 166\nvm.page-cluster = 0\nvm.watermark_scale_factor = 125\nvm.extfrag_threshold = 0\n"), "{text}");
    assert!(
        text.contains("zswap.compressor=lzo zswap.max_pool_percent=25 zswap.enabled=Y"),
        "{text}"
    );
    let without = export(&config(), ExportFormat::Sysctl, None).unwrap();
    assert!(
        !without.lines().any(|l| l.starts_with("vm.swappiness")),
        "auto without a measurement is left out: {without}"
    );
    if skip_unless_kernel_state_allowed("sysctl_p_accepts_the_export") {
        return;
    }
    let Some(sysctl) = tool("sysctl") else {
        println!("SKIP sysctl_p_accepts_the_export: no sysctl (procps)");
        return;
    };
    let _lock = KernelStateLock::acquire();
    let names = [
        "vm.swappiness",
        "vm.page-cluster",
        "vm.watermark_scale_factor",
        "vm.extfrag_threshold",
    ];
    let _guard = SysctlGuard(
        names
            .iter()
            .map(|n| (n.to_string(), procfs::sysctl_read(n).unwrap()))
            .collect(),
    );
    let dir = scratch("sysctl");
    let file = dir.join("90-zpage.conf");
    std::fs::write(&file, &text).unwrap();
    let output = Command::new(sysctl).arg("-p").arg(&file).output().unwrap();
    println!(
        "sysctl -p: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "sysctl -p rejected the file"
    );
    assert_eq!(procfs::sysctl_read("vm.swappiness").unwrap(), "166");
    assert_eq!(procfs::sysctl_read("vm.page-cluster").unwrap(), "0");
    assert_eq!(
        procfs::sysctl_read("vm.watermark_scale_factor").unwrap(),
        "125"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Evaluates `attribute` of the exported NixOS module with nix-instantiate
/// (the module applied to empty arguments), as JSON; `None` without nix.
fn nix_eval(text: &str, attribute: &str, name: &str) -> Option<serde_json::Value> {
    let nix = tool("nix-instantiate")?;
    let dir = scratch(name);
    let file = dir.join("zpage.nix");
    std::fs::write(&file, text).unwrap();
    // Every call gets this test's own state directory: two tests sharing
    // the system's Nix database found it busy.
    let nix_command = || {
        let mut command = Command::new(&nix);
        command.env("NIX_STATE_DIR", dir.join("state"));
        command
    };
    let parse = nix_command().arg("--parse").arg(&file).output().unwrap();
    assert!(
        parse.status.success(),
        "nix-instantiate --parse: {}",
        String::from_utf8_lossy(&parse.stderr)
    );
    let expression = format!(
        "(import {} {{ config = {{}}; lib = {{}}; pkgs = {{}}; }}).{attribute}",
        file.display()
    );
    let output = nix_command()
        .args(["--eval", "--strict", "--json", "-E", &expression])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "nix-instantiate --eval: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).unwrap())
}

#[test]
fn nix_evaluates_the_export_of_several_devices() {
    // Three different devices: zramSwap cannot express them, zram-generator's settings can.
    let config = KernelConfig::parse(
        r#"
        [[zram]]
        algorithm = "lz4"
        size = "4G"
        [[zram]]
        algorithm = "zstd"
        size = "25%"
        swap_priority = 90
        [[zram]]
        algorithm = "lzo-rle"
        size = "1G"
        swap_priority = 80
        [[swap]]
        path = "/dev/nvme1n1p1"
        encrypted = true
        [sysctl]
        swappiness = "auto"
        page_cluster = 0
        "#,
    )
    .unwrap();
    let text = export(&config, ExportFormat::Nixos, Some(166)).unwrap();
    assert!(!text.contains("zramSwap = {"), "{text}");
    assert!(text.contains("randomEncryption.enable = true;"), "{text}");
    let Some(settings) = nix_eval(&text, "services.zram-generator.settings", "nix-multi") else {
        println!("SKIP nix_evaluates_the_export_of_several_devices: nix-instantiate not installed (apt: nix-bin); golden check only");
        assert!(text.contains("zram1 = {\n        \"zram-size\" = \"ram * 25 / 100\";\n        \"compression-algorithm\" = \"zstd\";\n        \"swap-priority\" = \"90\";"), "{text}");
        return;
    };
    assert_eq!(
        settings,
        serde_json::json!({
            "zram0": {"zram-size": "4096", "compression-algorithm": "lz4", "swap-priority": "100"},
            "zram1": {"zram-size": "ram * 25 / 100", "compression-algorithm": "zstd", "swap-priority": "90"},
            "zram2": {"zram-size": "1024", "compression-algorithm": "lzo-rle", "swap-priority": "80"},
        })
    );
    let sysctl = nix_eval(&text, "boot.kernel.sysctl", "nix-multi-sysctl").unwrap();
    assert_eq!(
        sysctl,
        serde_json::json!({"vm.swappiness": 166, "vm.page-cluster": 0})
    );
}

#[test]
fn nix_evaluates_the_export_of_one_device_as_zramswap() {
    let config = KernelConfig::parse(
        "[[zram]]\nalgorithm = \"zstd\"\nsize = 0.5\nwriteback_device = \"/dev/sdb2\"\n",
    )
    .unwrap();
    let text = export(&config, ExportFormat::Nixos, None).unwrap();
    assert!(!text.contains("zram-generator"), "{text}");
    let Some(zram) = nix_eval(&text, "zramSwap", "nix-one") else {
        println!("SKIP nix_evaluates_the_export_of_one_device_as_zramswap: nix-instantiate not installed");
        return;
    };
    assert_eq!(
        zram,
        serde_json::json!({"enable": true, "swapDevices": 1, "algorithm": "zstd", "memoryPercent": 50, "priority": 100, "writebackDevice": "/dev/sdb2"})
    );
}

#[test]
fn zram_tools_export_is_read_by_sh_and_refuses_what_it_cannot_say() {
    let one =
        KernelConfig::parse("[[zram]]\nalgorithm = \"lz4\"\nsize = \"25%\"\nswap_priority = 50\n")
            .unwrap();
    let text = export(&one, ExportFormat::ZramTools, None).unwrap();
    let dir = scratch("zram-tools");
    let file = dir.join("zramswap");
    std::fs::write(&file, &text).unwrap();
    // The zramswap script sources this file.
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            ". {}; echo \"$ALGO $PERCENT $SIZE $PRIORITY\"",
            file.display()
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "lz4 25  50");
    let fixed = KernelConfig::parse("[[zram]]\nalgorithm = \"lzo\"\nsize = \"1G\"\n").unwrap();
    assert!(export(&fixed, ExportFormat::ZramTools, None)
        .unwrap()
        .contains("SIZE=1024\n"));
    for (text, problem) in [
        (CONFIG, "one device"),
        (
            "[[zram]]\nalgorithm = \"lz4\"\nsize = \"1G\"\nmem_limit = \"512M\"\n",
            "mem_limit",
        ),
        ("[zswap]\nenabled = true\n", "no [[zram]]"),
    ] {
        let err = export(
            &KernelConfig::parse(text).unwrap(),
            ExportFormat::ZramTools,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(problem) && err.contains("--format zram-generator"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn writeback_and_recompression_reach_every_format_that_has_them() {
    let config = KernelConfig::parse(
        r#"
        [[zram]]
        algorithm = "lz4"
        size = 0.5
        writeback_device = "/dev/nvme0n1p3"
        writeback = "huge_idle"
        recompress_algorithms = ["zstd"]
        recompress = "idle"
        [daemon]
        idle_after_seconds = 7200
        "#,
    )
    .unwrap();
    let zg = export(&config, ExportFormat::ZramGenerator, None).unwrap();
    assert!(
        zg.contains("compression-algorithm = lz4 zstd (type=idle)\n"),
        "{zg}"
    );
    assert!(zg.contains("writeback-device = /dev/nvme0n1p3\n"), "{zg}");
    assert!(zg.contains("zpage kernel daemon"), "{zg}");
    let units = split_files(&export(&config, ExportFormat::Systemd, None).unwrap());
    let zram0 = &units
        .iter()
        .find(|(p, _)| p.ends_with("zpage-zram0.service"))
        .unwrap()
        .1;
    let backing = zram0.find("backing_dev").unwrap();
    let recomp = zram0.find("algo=zstd priority=1").unwrap();
    let disksize = zram0.find("/disksize").unwrap();
    assert!(
        backing < disksize && recomp < disksize,
        "set before disksize:\n{zram0}"
    );
    assert!(units
        .iter()
        .any(|(p, c)| p.ends_with("zpage-kernel-daemon.service")
            && c.contains("zpage kernel daemon --config")));
    let nix = export(&config, ExportFormat::Nixos, None).unwrap();
    assert!(
        nix.contains("\"compression-algorithm\" = \"lz4 zstd (type=idle)\";"),
        "{nix}"
    );
    assert!(
        nix.contains("\"writeback-device\" = \"/dev/nvme0n1p3\";"),
        "{nix}"
    );
}

#[test]
fn systemd_analyze_verifies_the_units() {
    let text = export(&config(), ExportFormat::Systemd, Some(166)).unwrap();
    let files = split_files(&text);
    let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/etc/modules-load.d/zpage-zram.conf",
            "/etc/systemd/system/zpage-zram0.service",
            "/etc/systemd/system/zpage-zram1.service",
            "/etc/systemd/system/zpage-swapfile-var-swapfile.service",
            "/etc/systemd/system/var-swapfile.swap",
            "/etc/crypttab",
            "/etc/systemd/system/dev-mapper-zpage\\x2dswap\\x2ddev\\x2dnvme1n1p1.swap",
            "/etc/systemd/system/zpage-kernel-daemon.service",
            "/etc/sysctl.d/90-zpage.conf",
            "/etc/tmpfiles.d/zpage-zswap.conf",
        ]
    );
    let crypttab = &files[5].1;
    assert_eq!(crypttab.trim(), "zpage-swap-dev-nvme1n1p1 /dev/nvme1n1p1 /dev/urandom swap,cipher=aes-xts-plain64,size=512,nofail");
    // The RAM-fraction disksize line, as systemd hands it to sh ($$ -> $), computes half of MemTotal.
    let unit0 = &files[1].1;
    let line = unit0.lines().find(|l| l.contains("disksize")).unwrap();
    let script = line
        .trim_start_matches("ExecStart=/bin/sh -c '")
        .trim_end_matches('\'')
        .replace("$$", "$")
        .replace("/sys/block/zram0/disksize", "/dev/stdout");
    let output = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    let computed: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap();
    let half = procfs::mem_total_bytes().unwrap() / 2 / 4096 * 4096;
    assert!(computed.abs_diff(half) <= 4096, "{computed} vs {half}");
    let Some(analyze) = tool("systemd-analyze") else {
        println!("SKIP systemd_analyze_verifies_the_units: systemd-analyze not installed; golden check only");
        return;
    };
    let dir = scratch("systemd");
    let mut units = Vec::new();
    for (path, content) in &files {
        if path.starts_with("/etc/systemd/system/") {
            let file = dir.join(Path::new(path).file_name().unwrap());
            std::fs::write(&file, content).unwrap();
            units.push(file);
        }
    }
    let output = Command::new(analyze)
        .arg("verify")
        .arg("--man=no")
        .args(&units)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    println!("systemd-analyze verify: status {} {stderr}", output.status);
    // Device units for hardware absent here (the nvme mapping), and the zpage
    // binary where the unit expects it installed, are not errors of the files.
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            !l.contains("dev-mapper")
                && !l.contains("/usr/local/bin/zpage is not executable")
                && !l.trim().is_empty()
        })
        .collect();
    assert!(problems.is_empty(), "{problems:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `key = value` of an INI file by section, comments and blank lines left out.
fn ini_keys(
    text: &str,
) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> {
    let mut sections = std::collections::BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            sections.insert(current.clone(), std::collections::BTreeMap::new());
        } else if let Some((k, v)) = line.split_once('=') {
            sections
                .get_mut(&current)
                .unwrap()
                .insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    sections
}

/// A zram-generator.conf as an administrator writes one (zram-generator
/// 1.2 syntax: parameters, recompression and its type group).
const ZRAM_GENERATOR_CONF: &str = "\
# /etc/systemd/zram-generator.conf
[zram0]
zram-size = ram * 0.5
compression-algorithm = zstd(level=3) lzo-rle (type=idle)
swap-priority = 100
writeback-device = /dev/sdb2

; a second, smaller device
[zram1]
zram-size = 2048
compression-algorithm = lz4
swap-priority = 50
zram-resident-limit = 1024
";

#[test]
fn a_zram_generator_conf_exports_back_to_itself() {
    use zpage_kernel::import::{import_file, to_toml, ImportFormat};
    let dir = scratch("import-zg");
    let file = dir.join("zram-generator.conf");
    std::fs::write(&file, ZRAM_GENERATOR_CONF).unwrap();
    let config = import_file(&file, ImportFormat::ZramGenerator).unwrap();
    // What `zpage kernel import` prints is a config `apply` and `export` take.
    let reparsed = KernelConfig::parse(&to_toml(&config).unwrap()).unwrap();
    assert_eq!(reparsed, config);
    let exported = export(&reparsed, ExportFormat::ZramGenerator, None).unwrap();
    assert_eq!(
        ini_keys(&exported),
        ini_keys(ZRAM_GENERATOR_CONF),
        "{exported}"
    );
    // Other spellings of the same sizes import to the same values.
    std::fs::write(
        &file,
        "[zram0]\nzram-size = ram / 2\ncompression-algorithm = lz4\n[zram1]\nzram-size = 50 / 100 * ram\ncompression-algorithm = lz4\n",
    )
    .unwrap();
    let config = import_file(&file, ImportFormat::ZramGenerator).unwrap();
    let ram = 8 << 30;
    for z in &config.zram {
        assert_eq!(
            z.size.resolve("size", ram).unwrap(),
            ram / 2,
            "{:?}",
            z.size
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A NixOS module as an administrator writes one.
const NIXOS_MODULE: &str = r#"{ config, lib, pkgs, ... }:
{
  # compressed swap in RAM
  zramSwap = {
    enable = true;
    swapDevices = 1;
    algorithm = "lz4";
    memoryPercent = 25;
    priority = 100;
    writebackDevice = "/dev/sdb2";
  };
}
"#;

#[test]
fn a_nixos_zramswap_exports_back_to_itself() {
    use zpage_kernel::import::{import_file, ImportFormat};
    let Some(original) = nix_eval(NIXOS_MODULE, "zramSwap", "import-nix-original") else {
        println!("SKIP a_nixos_zramswap_exports_back_to_itself: nix-instantiate not installed (apt: nix-bin)");
        return;
    };
    let dir = scratch("import-nix");
    let module = dir.join("zram.nix");
    std::fs::write(&module, NIXOS_MODULE).unwrap();
    let config = import_file(&module, ImportFormat::Nixos).unwrap();
    let exported = export(&config, ExportFormat::Nixos, None).unwrap();
    let again = nix_eval(&exported, "zramSwap", "import-nix-again").unwrap();
    assert_eq!(again, original, "{exported}");
    // The JSON a NixOS machine prints for config.zramSwap imports the same.
    let json = dir.join("zram.json");
    std::fs::write(&json, original.to_string()).unwrap();
    assert_eq!(import_file(&json, ImportFormat::Nixos).unwrap(), config);
    // A module with several devices in zram-generator's settings imports those.
    let several = export(
        &KernelConfig::parse(
            "[[zram]]\nalgorithm = \"lz4\"\nsize = \"4G\"\n[[zram]]\nalgorithm = \"zstd\"\nsize = \"25%\"\nswap_priority = 90\n",
        )
        .unwrap(),
        ExportFormat::Nixos,
        None,
    )
    .unwrap();
    std::fs::write(&module, &several).unwrap();
    let config = import_file(&module, ImportFormat::Nixos).unwrap();
    assert_eq!(export(&config, ExportFormat::Nixos, None).unwrap(), several);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_swap_file_is_created_by_the_systemd_export_or_refused() {
    let config = KernelConfig::parse("[[swap]]\npath = \"/var/swapfile\"\n").unwrap();
    let error = export(&config, ExportFormat::Systemd, None)
        .unwrap_err()
        .to_string();
    assert!(error.contains("swap[0].size"), "{error}");
    let dir = PathBuf::from(format!(
        "/var/tmp/zpage-swapfile-test-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("swapfile");
    let config = KernelConfig::parse(&format!(
        "[[swap]]\npath = \"{}\"\nsize = \"16M\"\n",
        path.display()
    ))
    .unwrap();
    let files = split_files(&export(&config, ExportFormat::Systemd, None).unwrap());
    let (creator_path, creator) = files
        .iter()
        .find(|(p, _)| p.contains("zpage-swapfile-"))
        .expect("a unit that creates the swap file");
    let swap = &files.iter().find(|(p, _)| p.ends_with(".swap")).unwrap().1;
    let creator_name = Path::new(creator_path)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(swap.contains(&format!("Requires={creator_name}")), "{swap}");
    assert!(
        creator.contains(&format!("ConditionPathExists=!{}", path.display())),
        "{creator}"
    );
    // The unit's command, as systemd hands it to sh, makes a real swap file.
    let line = creator
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap();
    let script = line
        .trim_start_matches("ExecStart=/bin/sh -c '")
        .trim_end_matches('\'')
        .replace("$$", "$");
    let status = Command::new("sh").arg("-c").arg(&script).status().unwrap();
    assert!(status.success());
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 16 << 20);
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let header = std::fs::read(&path).unwrap();
    assert_eq!(&header[4086..4096], b"SWAPSPACE2", "no swap signature");
    assert!(!dir.join("swapfile.new").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
