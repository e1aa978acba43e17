//! `zpage kernel export`: the persistent configuration that reproduces a
//! [`KernelConfig`] at boot, in each ecosystem's own format.

use std::fmt::Write as _;
use std::str::FromStr;

use crate::config::{DiskSwapConfig, KernelConfig, Size, SysctlTarget, ZramConfig};
use crate::{KernelError, Result};

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// `/etc/systemd/zram-generator.conf` (zram devices only).
    ZramGenerator,
    /// `/etc/sysctl.d/*.conf` (sysctls only).
    Sysctl,
    /// A NixOS module (`zramSwap`, `swapDevices`, `boot.kernel.sysctl`, zswap kernel parameters).
    Nixos,
    /// systemd units, udev rule, modules-load, crypttab, sysctl.d and tmpfiles.d files.
    Systemd,
    /// `/etc/default/zramswap` of zram-tools (one device).
    ZramTools,
}

/// Every format's name, as `--format` takes it.
pub const FORMAT_NAMES: [&str; 5] = ["zram-generator", "sysctl", "nixos", "systemd", "zram-tools"];

impl FromStr for ExportFormat {
    type Err = KernelError;
    fn from_str(s: &str) -> Result<ExportFormat> {
        match s {
            "zram-generator" => Ok(ExportFormat::ZramGenerator),
            "sysctl" => Ok(ExportFormat::Sysctl),
            "nixos" => Ok(ExportFormat::Nixos),
            "systemd" => Ok(ExportFormat::Systemd),
            "zram-tools" => Ok(ExportFormat::ZramTools),
            other => Err(KernelError::config(
                "--format",
                format!("unknown format {other:?}"),
                format!("use one of {}", FORMAT_NAMES.join(", ")),
            )),
        }
    }
}

/// Renders `config` in `format`. `auto_swappiness` is the value to write for
/// `swappiness = "auto"` (measured by apply, or computed by the caller);
/// without it the sysctl is left out with a comment. A format that cannot
/// express the config is refused with the reason and the format that can.
pub fn export(
    config: &KernelConfig,
    format: ExportFormat,
    auto_swappiness: Option<u8>,
) -> Result<String> {
    Ok(match format {
        ExportFormat::ZramGenerator => zram_generator(config),
        ExportFormat::Sysctl => sysctl_conf(config, auto_swappiness),
        ExportFormat::Nixos => nixos(config, auto_swappiness),
        ExportFormat::Systemd => systemd(config, auto_swappiness)?,
        ExportFormat::ZramTools => zram_tools(config)?,
    })
}

/// The daemon that triggers what zram only offers as one-shot triggers.
const DAEMON_NOTE: &str = "zram only writes back or recompresses when told to: run `zpage kernel daemon --config FILE` (the systemd export has a unit for it)";

fn needs_daemon(config: &KernelConfig) -> bool {
    config
        .zram
        .iter()
        .any(|z| z.writeback_device.is_some() || !z.recompress_algorithms.is_empty())
}

const MIB: u64 = 1 << 20;

/// The size as a zram-generator expression over `ram` (MiB).
fn size_expression(size: &Size) -> String {
    match size {
        Size::Bytes(b) => mib_text(*b),
        Size::Fraction(f) => format!("ram * {f}"),
        Size::Text(t) => {
            let t = t.trim();
            if let Some(p) = t.strip_suffix('%') {
                format!("ram * {p} / 100")
            } else {
                // Resolve units without RAM (they do not depend on it).
                match size.resolve("size", 0) {
                    Ok(b) => mib_text(b),
                    Err(_) => t.to_string(),
                }
            }
        }
    }
}

fn mib_text(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) {
        (bytes / MIB).to_string()
    } else {
        format!("{:.3}", bytes as f64 / MIB as f64)
    }
}

fn sysctl_pairs(
    config: &KernelConfig,
    auto_swappiness: Option<u8>,
) -> (Vec<(&'static str, String)>, Vec<String>) {
    let mut pairs = Vec::new();
    let mut notes = Vec::new();
    for (name, target) in config
        .sysctl
        .as_ref()
        .map(|s| s.targets())
        .unwrap_or_default()
    {
        match (target, auto_swappiness) {
            (SysctlTarget::Value(v), _) => pairs.push((name, v)),
            (SysctlTarget::MeasuredSwappiness, Some(v)) => pairs.push((name, v.to_string())),
            (SysctlTarget::MeasuredSwappiness, None) => notes.push(format!("{name} = \"auto\" is measured by `zpage kernel apply`; export after applying (or give --swappiness N) to get the number")),
        }
    }
    (pairs, notes)
}

fn zswap_pairs(config: &KernelConfig) -> Vec<(&'static str, String)> {
    config
        .zswap
        .as_ref()
        .map(|zs| {
            zs.parameters()
                .into_iter()
                .map(|(name, value, _)| (name, value))
                .collect()
        })
        .unwrap_or_default()
}

/// zram-generator's `compression-algorithm`: the primary (with its
/// parameters), then the recompression algorithms, then the recompression
/// parameters in a bare group (zram-generator 1.2+).
fn algorithm_with_params(z: &ZramConfig) -> String {
    let mut words = vec![match &z.algorithm_params {
        Some(p) => format!("{}({p})", z.algorithm),
        None => z.algorithm.clone(),
    }];
    words.extend(z.recompress_algorithms.iter().cloned());
    if !z.recompress_algorithms.is_empty() {
        words.push(format!(
            "(type={})",
            z.recompress.unwrap_or_default().kernel_name()
        ));
    }
    words.join(" ")
}

/// One device's zram-generator keys, in the order they are written (the
/// same keys go into NixOS's `services.zram-generator.settings`).
fn zram_generator_keys(z: &ZramConfig) -> Vec<(&'static str, String, Option<&'static str>)> {
    let mut keys = vec![("zram-size", size_expression(&z.size), None)];
    keys.push((
        "compression-algorithm",
        algorithm_with_params(z),
        (!z.recompress_algorithms.is_empty()).then_some(
            "recompression algorithms and their (type=...) group need zram-generator 1.2+",
        ),
    ));
    keys.push(("swap-priority", z.priority().to_string(), None));
    if let Some(limit) = &z.mem_limit {
        keys.push((
            "zram-resident-limit",
            size_expression(limit),
            Some("mem_limit (zram-generator 1.2+; older versions ignore this key)"),
        ));
    }
    if let Some(device) = &z.writeback_device {
        keys.push(("writeback-device", device.clone(), None));
    }
    keys
}

fn zram_generator(config: &KernelConfig) -> String {
    let mut out =
        String::from("# /etc/systemd/zram-generator.conf, written by `zpage kernel export`.\n");
    for (i, z) in config.zram.iter().enumerate() {
        let _ = writeln!(out, "\n[zram{}]", config.zram_index(i));
        for (key, value, comment) in zram_generator_keys(z) {
            if let Some(comment) = comment {
                let _ = writeln!(out, "# {comment}");
            }
            let _ = writeln!(out, "{key} = {value}");
        }
    }
    if config.zram.is_empty() {
        out.push_str("# (no [[zram]] in the config)\n");
    }
    if needs_daemon(config) {
        let _ = writeln!(out, "\n# {DAEMON_NOTE}.");
    }
    if config.zswap.is_some() || !config.swap.is_empty() || config.sysctl.is_some() {
        out.push_str("\n# zswap, disk swap and sysctls are not zram-generator's business:\n# export them with --format sysctl / systemd / nixos.\n");
    }
    out
}

/// zram-tools' `/etc/default/zramswap`: one device, its algorithm, size
/// (a percentage of RAM or MiB) and priority. Anything more is refused.
fn zram_tools(config: &KernelConfig) -> Result<String> {
    let refuse = |problem: String| {
        KernelError::config(
            "--format zram-tools",
            problem,
            "use --format zram-generator (or systemd / nixos), which can express it",
        )
    };
    let z = match config.zram.as_slice() {
        [] => return Err(refuse("the config has no [[zram]] device".into())),
        [z] => z,
        more => {
            return Err(refuse(format!(
                "zram-tools sets up one device (/dev/zram0); the config has {}",
                more.len()
            )))
        }
    };
    if config.zram_index(0) != 0 {
        return Err(refuse("zram-tools always uses zram0".into()));
    }
    let unsupported = [
        (z.mem_limit.is_some(), "mem_limit"),
        (z.algorithm_params.is_some(), "algorithm_params"),
        (z.writeback_device.is_some(), "writeback_device"),
        (!z.recompress_algorithms.is_empty(), "recompress_algorithms"),
    ];
    if let Some((_, key)) = unsupported.iter().find(|(set, _)| *set) {
        return Err(refuse(format!(
            "zram-tools has no setting for zram[0].{key}"
        )));
    }
    let mut out =
        String::from("# /etc/default/zramswap (zram-tools), written by `zpage kernel export`.\n");
    let _ = writeln!(out, "ALGO={}", z.algorithm);
    match &z.size {
        Size::Fraction(f) => {
            let _ = writeln!(out, "PERCENT={}", (f * 100.0).round() as u64);
        }
        Size::Text(t) if t.trim().ends_with('%') => {
            let _ = writeln!(out, "PERCENT={}", t.trim().trim_end_matches('%').trim());
        }
        other => {
            let bytes = other.resolve("zram[0].size", 0)?;
            let _ = writeln!(out, "SIZE={}", bytes.div_ceil(MIB));
        }
    }
    let _ = writeln!(out, "PRIORITY={}", z.priority());
    if config.zswap.is_some() || !config.swap.is_empty() || config.sysctl.is_some() {
        out.push_str("# zswap, disk swap and sysctls are not zram-tools' business:\n# export them with --format sysctl / systemd / nixos.\n");
    }
    Ok(out)
}

fn sysctl_conf(config: &KernelConfig, auto_swappiness: Option<u8>) -> String {
    let mut out =
        String::from("# /etc/sysctl.d/90-zpage.conf, written by `zpage kernel export`.\n");
    let (pairs, notes) = sysctl_pairs(config, auto_swappiness);
    for note in notes {
        let _ = writeln!(out, "# {note}");
    }
    for (k, v) in pairs {
        let _ = writeln!(out, "{k} = {v}");
    }
    let zswap = zswap_pairs(config);
    if !zswap.is_empty() {
        out.push_str("# zswap is set by kernel parameters, not sysctl; add to the kernel command line:\n#   ");
        let params: Vec<String> = zswap
            .iter()
            .map(|(k, v)| format!("zswap.{k}={v}"))
            .collect();
        out.push_str(&params.join(" "));
        out.push('\n');
    }
    out
}

fn nix_string(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace("${", "\\${");
    format!("\"{escaped}\"")
}

/// The RAM percentage NixOS's `zramSwap.memoryPercent` (an integer) can
/// express for `size`, when it can.
fn whole_percent(size: &Size) -> Option<u64> {
    let percent = match size {
        Size::Fraction(f) => f * 100.0,
        Size::Text(t) if t.trim().ends_with('%') => {
            t.trim().trim_end_matches('%').trim().parse().ok()?
        }
        _ => return None,
    };
    (percent.fract().abs() < 1e-9 && percent >= 1.0).then_some(percent as u64)
}

/// `zramSwap` configures one algorithm, one size and one priority for all
/// its devices, plus `writebackDevice` for a single one: enough for a
/// single zram0 sized as a whole percentage of RAM, and nothing more.
fn fits_nixos_zramswap(config: &KernelConfig) -> bool {
    match config.zram.as_slice() {
        [z] => {
            config.zram_index(0) == 0
                && whole_percent(&z.size).is_some()
                && z.mem_limit.is_none()
                && z.algorithm_params.is_none()
                && z.recompress_algorithms.is_empty()
        }
        _ => false,
    }
}

fn nixos(config: &KernelConfig, auto_swappiness: Option<u8>) -> String {
    let mut out = String::from("# NixOS module written by `zpage kernel export`; import it from configuration.nix.\n{ config, lib, pkgs, ... }:\n{\n");
    if fits_nixos_zramswap(config) {
        let z = &config.zram[0];
        out.push_str("  zramSwap = {\n    enable = true;\n    swapDevices = 1;\n");
        let _ = writeln!(out, "    algorithm = {};", nix_string(&z.algorithm));
        let _ = writeln!(
            out,
            "    memoryPercent = {};",
            whole_percent(&z.size).unwrap_or(50)
        );
        let _ = writeln!(out, "    priority = {};", z.priority());
        if let Some(device) = &z.writeback_device {
            let _ = writeln!(out, "    writebackDevice = {};", nix_string(device));
        }
        out.push_str("  };\n");
    } else if !config.zram.is_empty() {
        out.push_str("  # zramSwap gives every device the same algorithm, size and priority (and sizes only as a\n  # whole percentage of RAM): these devices are configured through zram-generator directly.\n");
        out.push_str("  services.zram-generator = {\n    enable = true;\n    settings = {\n");
        for (i, z) in config.zram.iter().enumerate() {
            let _ = writeln!(out, "      zram{} = {{", config.zram_index(i));
            for (key, value, comment) in zram_generator_keys(z) {
                if let Some(comment) = comment {
                    let _ = writeln!(out, "        # {comment}");
                }
                let _ = writeln!(out, "        {} = {};", nix_string(key), nix_string(&value));
            }
            out.push_str("      };\n");
        }
        out.push_str("    };\n  };\n");
    }
    if needs_daemon(config) {
        let _ = writeln!(out, "  # {DAEMON_NOTE}.");
    }
    if !config.swap.is_empty() {
        out.push_str("  swapDevices = [\n");
        for s in &config.swap {
            out.push_str(&nixos_swap(s));
        }
        out.push_str("  ];\n");
    }
    let (pairs, notes) = sysctl_pairs(config, auto_swappiness);
    for note in notes {
        let _ = writeln!(out, "  # {note}");
    }
    if !pairs.is_empty() {
        out.push_str("  boot.kernel.sysctl = {\n");
        for (k, v) in pairs {
            let _ = writeln!(out, "    {} = {v};", nix_string(k));
        }
        out.push_str("  };\n");
    }
    let zswap = zswap_pairs(config);
    if !zswap.is_empty() {
        let params: Vec<String> = zswap
            .iter()
            .map(|(k, v)| nix_string(&format!("zswap.{k}={v}")))
            .collect();
        let _ = writeln!(out, "  boot.kernelParams = [ {} ];", params.join(" "));
    }
    out.push_str("}\n");
    out
}

fn nixos_swap(s: &DiskSwapConfig) -> String {
    let mut out = String::from("    {\n");
    let _ = writeln!(out, "      device = {};", nix_string(&s.path));
    if let Some(size) = &s.size {
        if let Ok(bytes) = size.resolve("size", 0) {
            let _ = writeln!(out, "      size = {};", bytes / MIB);
        }
    }
    let _ = writeln!(out, "      priority = {};", s.priority());
    if s.encrypted {
        out.push_str("      randomEncryption.enable = true;\n");
    }
    if s.discard {
        out.push_str("      discardPolicy = \"both\";\n");
    }
    if !s.required {
        out.push_str("      options = [ \"defaults\" \"nofail\" ];\n");
    }
    out.push_str("    }\n");
    out
}

/// systemd's path escaping (`systemd-escape --path`).
pub fn systemd_escape_path(path: &str) -> String {
    let trimmed = path.trim_matches('/');
    if trimmed.is_empty() {
        return "-".into();
    }
    let mut out = String::new();
    for (i, byte) in trimmed.bytes().enumerate() {
        match byte {
            b'/' => out.push('-'),
            b'.' if i == 0 => out.push_str("\\x2e"),
            b if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b':' => {
                out.push(b as char)
            }
            b => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

fn systemd(config: &KernelConfig, auto_swappiness: Option<u8>) -> Result<String> {
    let mut out = String::from(
        "# systemd files written by `zpage kernel export`; each starts with its path.\n",
    );
    if !config.zram.is_empty() {
        out.push_str("\n# ==> /etc/modules-load.d/zpage-zram.conf\nzram\n");
        for (i, z) in config.zram.iter().enumerate() {
            let index = config.zram_index(i);
            let size = match &z.size {
                Size::Bytes(_) | Size::Text(_) if !matches!(&z.size, Size::Text(t) if t.trim().ends_with('%')) =>
                {
                    format!("{}", z.size.resolve("size", 0).unwrap_or(0))
                }
                _ => String::new(),
            };
            let _ = writeln!(out, "\n# ==> /etc/systemd/system/zpage-zram{index}.service");
            out.push_str("[Unit]\nDescription=zpage: compressed swap on zram");
            let _ = writeln!(out, "{index}");
            out.push_str("DefaultDependencies=no\nBefore=swap.target\nAfter=systemd-modules-load.service\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\n");
            let dev = format!("/sys/block/zram{index}");
            let _ = writeln!(
                out,
                "ExecStartPre=/bin/sh -c 'test -e {dev} || cat /sys/class/zram-control/hot_add'"
            );
            let _ = writeln!(
                out,
                "ExecStart=/bin/sh -c 'echo {} > {dev}/comp_algorithm'",
                z.algorithm
            );
            if let Some(p) = &z.algorithm_params {
                let _ = writeln!(
                    out,
                    "ExecStart=/bin/sh -c 'echo \"{p}\" > {dev}/algorithm_params'"
                );
            }
            // The kernel takes these only before disksize.
            if let Some(backing) = &z.writeback_device {
                let _ = writeln!(
                    out,
                    "ExecStart=/bin/sh -c 'echo {backing} > {dev}/backing_dev'"
                );
            }
            for (priority, algorithm) in z.recompress_algorithms.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "ExecStart=/bin/sh -c 'echo \"algo={algorithm} priority={}\" > {dev}/recomp_algorithm'",
                    priority + 1
                );
            }
            if size.is_empty() {
                // Fraction of RAM: computed from MemTotal at boot.
                let fraction = match &z.size {
                    Size::Fraction(f) => *f,
                    Size::Text(t) => {
                        t.trim()
                            .trim_end_matches('%')
                            .trim()
                            .parse::<f64>()
                            .unwrap_or(50.0)
                            / 100.0
                    }
                    Size::Bytes(_) => 0.5,
                };
                // Integer shell arithmetic in per-mille; `$$` is systemd's escape for `$`.
                let permille = (fraction * 1000.0).round() as u64;
                let _ = writeln!(
                    out,
                    "ExecStart=/bin/sh -c 'kb=$$(grep MemTotal /proc/meminfo | tr -dc 0-9); echo $$((kb * 1024 * {permille} / 1000 / 4096 * 4096)) > {dev}/disksize'"
                );
            } else {
                let _ = writeln!(out, "ExecStart=/bin/sh -c 'echo {size} > {dev}/disksize'");
            }
            if let Some(limit) = &z.mem_limit {
                if let Ok(bytes) = limit.resolve("mem_limit", 0) {
                    let _ = writeln!(out, "ExecStart=/bin/sh -c 'echo {bytes} > {dev}/mem_limit'");
                }
            }
            let _ = writeln!(out, "ExecStart=/sbin/mkswap /dev/zram{index}");
            let _ = writeln!(
                out,
                "ExecStart=/sbin/swapon --discard --priority {} /dev/zram{index}",
                z.priority()
            );
            let _ = writeln!(out, "ExecStop=/sbin/swapoff /dev/zram{index}");
            let _ = writeln!(out, "ExecStop=/bin/sh -c 'echo 1 > {dev}/reset'");
            out.push_str("\n[Install]\nWantedBy=swap.target\n");
        }
    }
    for (i, s) in config.swap.iter().enumerate() {
        let creator = swap_file_creator(i, s)?;
        let what = if s.encrypted {
            let name = crate::swapdev::crypt_name(std::path::Path::new(&s.path));
            out.push_str("\n# ==> /etc/crypttab (append; a new random key every boot)\n");
            let _ = writeln!(
                out,
                "{name} {} /dev/urandom swap,cipher=aes-xts-plain64,size=512{}",
                s.path,
                if s.required { "" } else { ",nofail" }
            );
            format!("/dev/mapper/{name}")
        } else {
            s.path.clone()
        };
        let unit = format!("{}.swap", systemd_escape_path(&what));
        if let Some(creator) = &creator {
            // The encrypted file is the backing of a cryptsetup unit that
            // systemd makes from crypttab: it must exist before that runs.
            let before = if s.encrypted {
                format!(
                    "systemd-cryptsetup@{}.service",
                    systemd_escape_path(&crate::swapdev::crypt_name(std::path::Path::new(&s.path)))
                )
            } else {
                unit.clone()
            };
            out.push_str(&creator.unit_text(&before, s.encrypted));
        }
        let _ = writeln!(out, "\n# ==> /etc/systemd/system/{unit}");
        let _ = writeln!(out, "[Unit]\nDescription=zpage: disk swap tier on {what}");
        if let Some(creator) = &creator {
            if !s.encrypted {
                let _ = writeln!(out, "Requires={0}\nAfter={0}", creator.unit_name);
            }
        }
        let _ = writeln!(out, "\n[Swap]\nWhat={what}\nPriority={}", s.priority());
        let mut options = Vec::new();
        if s.discard {
            options.push("discard");
        }
        if !s.required {
            // Missing hardware must not stop the boot.
            options.push("nofail");
        }
        if !options.is_empty() {
            let _ = writeln!(out, "Options={}", options.join(","));
        }
        out.push_str("\n[Install]\nWantedBy=swap.target\n");
    }
    if needs_daemon(config) {
        let units: Vec<String> = config
            .zram
            .iter()
            .enumerate()
            .map(|(i, _)| format!("zpage-zram{}.service", config.zram_index(i)))
            .collect();
        let _ = writeln!(
            out,
            "\n# ==> /etc/systemd/system/zpage-kernel-daemon.service"
        );
        let _ = writeln!(
            out,
            "[Unit]\nDescription=zpage: idle writeback and recompression of zram on a schedule\nAfter={units}\nRequires={units}\n\n[Service]\nExecStart=/usr/local/bin/zpage kernel daemon --config /etc/zpage/kernel.toml\nRestart=on-failure\n\n[Install]\nWantedBy=multi-user.target",
            units = units.join(" ")
        );
    }
    let (pairs, notes) = sysctl_pairs(config, auto_swappiness);
    if !pairs.is_empty() || !notes.is_empty() {
        out.push_str("\n# ==> /etc/sysctl.d/90-zpage.conf\n");
        for note in notes {
            let _ = writeln!(out, "# {note}");
        }
        for (k, v) in pairs {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    let zswap = zswap_pairs(config);
    if !zswap.is_empty() {
        out.push_str("\n# ==> /etc/tmpfiles.d/zpage-zswap.conf\n");
        for (k, v) in zswap {
            let _ = writeln!(out, "w- /sys/module/zswap/parameters/{k} - - - - {v}");
        }
    }
    Ok(out)
}

/// The oneshot unit that makes a swap file at boot when it is missing.
struct SwapFileCreator {
    unit_name: String,
    path: String,
    bytes: u64,
}

/// A swap area that is a file (not under `/dev/`) needs a unit that
/// creates it on a machine where it does not exist yet, so it needs a
/// `size`; without one the export is refused, rather than naming a file
/// nothing creates (which `nofail` would then skip in silence, leaving the
/// machine without its disk tier).
fn swap_file_creator(i: usize, s: &DiskSwapConfig) -> Result<Option<SwapFileCreator>> {
    if s.path.starts_with("/dev/") {
        return Ok(None);
    }
    let Some(size) = &s.size else {
        return Err(KernelError::config(
            format!("swap[{i}].size"),
            format!(
                "{:?} is a file and has no size, so the systemd export cannot create it on a machine that lacks it",
                s.path
            ),
            "add size = \"4G\" (the units then create the file at boot when it is missing), or point path at a block device",
        ));
    };
    let bytes = size.resolve(&format!("swap[{i}].size"), 0)?;
    Ok(Some(SwapFileCreator {
        unit_name: format!("zpage-swapfile-{}.service", systemd_escape_path(&s.path)),
        path: s.path.clone(),
        bytes,
    }))
}

impl SwapFileCreator {
    /// The unit: skipped when the file exists; otherwise the file is made
    /// under a temporary name (every block allocated, mode 0600, the swap
    /// signature written unless dm-crypt's `swap` option will write it on
    /// the mapping) and renamed into place, so a boot interrupted halfway
    /// never leaves a half-made swap file behind.
    fn unit_text(&self, before: &str, encrypted: bool) -> String {
        let mut out = format!("\n# ==> /etc/systemd/system/{}\n", self.unit_name);
        let _ = writeln!(
            out,
            "[Unit]\nDescription=zpage: create the swap file {} ({} bytes) when it is missing\nDefaultDependencies=no\nRequiresMountsFor={}\nConditionPathExists=!{}\nBefore={before}",
            self.path, self.bytes, self.path, self.path
        );
        let mkswap = if encrypted {
            ""
        } else {
            " && /sbin/mkswap \"$$f.new\" >/dev/null"
        };
        let _ = writeln!(
            out,
            "\n[Service]\nType=oneshot\nExecStart=/bin/sh -c 'umask 077 && f={path} && rm -f \"$$f.new\" && (fallocate -l {bytes} \"$$f.new\" || dd if=/dev/zero of=\"$$f.new\" bs=1M count={mib} status=none) && chmod 600 \"$$f.new\"{mkswap} && mv \"$$f.new\" \"$$f\"'",
            path = self.path,
            bytes = self.bytes,
            mib = self.bytes.div_ceil(MIB),
        );
        if encrypted {
            let _ = writeln!(out, "\n[Install]\nRequiredBy={before}");
        }
        out
    }
}

/// Splits a `systemd` export into (path, content) files.
pub fn split_files(export: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = Vec::new();
    for line in export.lines() {
        if let Some(path) = line.strip_prefix("# ==> ") {
            let path = path.split(' ').next().unwrap_or(path).to_string();
            files.push((path, String::new()));
        } else if let Some((_, content)) = files.last_mut() {
            content.push_str(line);
            content.push('\n');
        }
    }
    for (_, content) in files.iter_mut() {
        let trimmed = content.trim_end().to_string();
        *content = trimmed + "\n";
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_systemd() {
        assert_eq!(systemd_escape_path("/var/swapfile"), "var-swapfile");
        assert_eq!(
            systemd_escape_path("/var/tmp/zpage-swap"),
            "var-tmp-zpage\\x2dswap"
        );
        assert_eq!(
            systemd_escape_path("/dev/mapper/zpage-swap-x"),
            "dev-mapper-zpage\\x2dswap\\x2dx"
        );
    }

    #[test]
    fn formats_parse() {
        for f in ["zram-generator", "sysctl", "nixos", "systemd"] {
            assert!(f.parse::<ExportFormat>().is_ok());
        }
        assert!("yaml"
            .parse::<ExportFormat>()
            .unwrap_err()
            .to_string()
            .contains("--format"));
    }
}
