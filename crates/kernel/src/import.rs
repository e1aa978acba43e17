//! `zpage kernel import`: an existing zram set-up, as a zram-generator
//! `zram-generator.conf` or a NixOS `zramSwap` setting, read into zpage's
//! [`KernelConfig`], so that exporting it again in the same format gives the
//! same settings. What zpage's config cannot say (a size capped with
//! `min(...)`, a mount point instead of swap, a host memory limit) is
//! refused with the key and what to write instead, never dropped.

use std::path::Path;
use std::str::FromStr;

use crate::config::{KernelConfig, PageSelection, Size, ZramConfig};
use crate::{KernelError, Result};

/// Import formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportFormat {
    /// `/etc/systemd/zram-generator.conf` (or a file of `zram-generator.conf.d`).
    ZramGenerator,
    /// A NixOS module file or the JSON of its `zramSwap` attribute set.
    Nixos,
}

/// Every format's name, as `--from` takes it.
pub const IMPORT_FORMAT_NAMES: [&str; 2] = ["zram-generator", "nixos"];

impl FromStr for ImportFormat {
    type Err = KernelError;
    fn from_str(s: &str) -> Result<ImportFormat> {
        match s {
            "zram-generator" => Ok(ImportFormat::ZramGenerator),
            "nixos" => Ok(ImportFormat::Nixos),
            other => Err(KernelError::config(
                "--from",
                format!("unknown format {other:?}"),
                format!("use one of {}", IMPORT_FORMAT_NAMES.join(", ")),
            )),
        }
    }
}

/// Reads `path` in `format` into a config.
pub fn import_file(path: &Path, format: ImportFormat) -> Result<KernelConfig> {
    match format {
        ImportFormat::ZramGenerator => import_zram_generator(&crate::read_file(path)?),
        ImportFormat::Nixos => import_nixos(&evaluate_nixos(path)?),
    }
}

/// The config as TOML for `zpage kernel apply` and `export`.
pub fn to_toml(config: &KernelConfig) -> Result<String> {
    toml::to_string(config).map_err(|e| KernelError::Command {
        command: "zpage kernel import".into(),
        detail: format!("cannot write the config as TOML: {e}"),
        fix: "report this as a bug, with the file imported".into(),
    })
}

fn refuse(
    key: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> KernelError {
    KernelError::config(key, problem, fix)
}

/// Parses a zram-generator.conf (an INI file: `[zramN]` sections of
/// `key = value` lines, `#` and `;` comments).
pub fn import_zram_generator(text: &str) -> Result<KernelConfig> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (number, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.trim().to_string(), Vec::new()));
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(KernelError::ConfigSyntax {
                line: number + 1,
                column: 1,
                problem: format!("{line:?} is neither a [section] nor key = value"),
            });
        };
        let Some((_, keys)) = sections.last_mut() else {
            return Err(KernelError::ConfigSyntax {
                line: number + 1,
                column: 1,
                problem: "a key before any [zramN] section".into(),
            });
        };
        keys.push((key.trim().to_string(), value.trim().to_string()));
    }
    from_generator_sections(&sections)
}

/// zram-generator's settings (the INI's sections, or NixOS's
/// `services.zram-generator.settings`) into a config.
fn from_generator_sections(sections: &[(String, Vec<(String, String)>)]) -> Result<KernelConfig> {
    let mut config = KernelConfig::default();
    for (position, (name, keys)) in sections.iter().enumerate() {
        let index: u32 = name
            .strip_prefix("zram")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                refuse(
                    format!("[{name}]"),
                    "zram-generator sections are named zramN",
                    "rename the section [zram0], [zram1], ...",
                )
            })?;
        config
            .zram
            .push(zram_from_generator_keys(name, index, position, keys)?);
    }
    config.check_static()?;
    Ok(config)
}

fn zram_from_generator_keys(
    section: &str,
    index: u32,
    position: usize,
    keys: &[(String, String)],
) -> Result<ZramConfig> {
    let mut zram = ZramConfig {
        index: (index as usize != position).then_some(index),
        algorithm: String::new(),
        algorithm_params: None,
        size: Size::Fraction(0.5),
        mem_limit: None,
        writeback_device: None,
        writeback: None,
        recompress_algorithms: Vec::new(),
        recompress: None,
        swap_priority: None,
    };
    let mut size = None;
    for (key, value) in keys {
        let at = format!("[{section}] {key}");
        match key.as_str() {
            "zram-size" => size = Some(size_from_expression(&at, value)?),
            "zram-resident-limit" => zram.mem_limit = Some(size_from_expression(&at, value)?),
            "compression-algorithm" => set_algorithms(&mut zram, &at, value)?,
            "swap-priority" => {
                zram.swap_priority = Some(value.parse().map_err(|_| {
                    refuse(&at, format!("{value:?} is not a number"), "give 0..=32767")
                })?)
            }
            "writeback-device" => zram.writeback_device = Some(value.clone()),
            "fs-type" if value == "swap" => {}
            "options" if value.split(',').all(|o| o.trim() == "discard") => {}
            "fs-type" | "mount-point" | "options" => {
                return Err(refuse(
                    at,
                    format!("{value:?}: zpage sets zram up as swap (swapon --discard) only"),
                    "keep this device in zram-generator, or remove the key to have it as plain swap",
                ))
            }
            "host-memory-limit" => {
                return Err(refuse(
                    at,
                    "zpage's config applies on every machine it is given to",
                    "remove the key (and give the config only to the machines that should have the device)",
                ))
            }
            other => {
                return Err(refuse(
                    at,
                    format!("zpage does not know the zram-generator key {other:?}"),
                    "remove it, or keep this device in zram-generator",
                ))
            }
        }
    }
    zram.size = size.ok_or_else(|| {
        refuse(
            format!("[{section}] zram-size"),
            "missing: zram-generator's default, min(ram / 2, 4096), is capped, which a zpage size cannot say",
            "add zram-size = ram / 2 (or a size in MiB) to the section",
        )
    })?;
    if zram.algorithm.is_empty() {
        return Err(refuse(
            format!("[{section}] compression-algorithm"),
            "missing: the kernel's default differs from kernel to kernel",
            "add compression-algorithm = lz4 (or the one you use) to the section",
        ));
    }
    Ok(zram)
}

/// `zram-size` and `zram-resident-limit`: MiB, or a fraction of `ram` (in
/// MiB) written `ram * F`, `ram / D`, `ram * P / 100` or `P / 100 * ram`
/// (NixOS's form). Anything else (`min`, `max`, other arithmetic) is
/// refused: a zpage size is a fixed size or a share of RAM.
fn size_from_expression(key: &str, expression: &str) -> Result<Size> {
    let words: Vec<&str> = expression.split_whitespace().collect();
    let number = |w: &str| w.parse::<f64>().ok().filter(|n| n.is_finite() && *n > 0.0);
    let size = match words.as_slice() {
        [n] => number(n).map(|mib| Size::Bytes((mib * (1u64 << 20) as f64).round() as u64)),
        ["ram", "*", f] => number(f).map(Size::Fraction),
        ["ram", "/", d] => number(d).map(|d| Size::Fraction(1.0 / d)),
        ["ram", "*", p, "/", "100"] | [p, "/", "100", "*", "ram"] => {
            number(p).map(|_| Size::Text(format!("{p}%")))
        }
        _ => None,
    };
    size.ok_or_else(|| {
        refuse(
            key,
            format!("{expression:?} is not a size zpage's config can hold (a size in MiB or a share of ram)"),
            "write a number of MiB, `ram * 0.5`, `ram / 2` or `ram * 50 / 100`; a cap such as min(ram / 2, 4096) has no equivalent, so pick one side of it",
        )
    })
}

/// `compression-algorithm`: the primary with its parameters
/// (`zstd(level=3)`), then recompression algorithms, then a bare
/// `(type=...)` group for them (zram-generator 1.2).
fn set_algorithms(zram: &mut ZramConfig, key: &str, value: &str) -> Result<()> {
    for (i, word) in split_words(value).into_iter().enumerate() {
        if let Some(group) = word.strip_prefix('(').and_then(|w| w.strip_suffix(')')) {
            let Some(kind) = group.trim().strip_prefix("type=") else {
                return Err(refuse(
                    key,
                    format!(
                        "recompression parameters {word:?} other than type=... have no zpage key"
                    ),
                    "keep only (type=idle), (type=huge) or (type=huge_idle)",
                ));
            };
            zram.recompress = Some(match kind {
                "idle" => PageSelection::Idle,
                "huge" => PageSelection::Huge,
                "huge_idle" => PageSelection::HugeIdle,
                other => {
                    return Err(refuse(
                        key,
                        format!("recompression type {other:?}"),
                        "use idle, huge or huge_idle",
                    ))
                }
            });
            continue;
        }
        let (name, params) = match word.split_once('(') {
            Some((name, rest)) => (name.to_string(), rest.strip_suffix(')').map(str::to_string)),
            None => (word.clone(), None),
        };
        if i == 0 {
            zram.algorithm = name;
            zram.algorithm_params = params;
        } else if params.is_some() {
            return Err(refuse(
                key,
                format!("{word:?}: zpage keeps parameters for the primary algorithm only"),
                "drop the parameters of the recompression algorithm",
            ));
        } else {
            zram.recompress_algorithms.push(name);
        }
    }
    Ok(())
}

/// Splits on spaces outside parentheses: `zstd(level=3, dict=x) lz4 (type=idle)`.
fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            c if c.is_whitespace() && depth == 0 => {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// A NixOS module (or the JSON of its settings) evaluated to JSON: a
/// `.json` file is read as the output of `nix eval --json
/// .#nixosConfigurations.HOST.config.zramSwap`; any other file is a module
/// that nix-instantiate evaluates with empty `config`, `lib` and `pkgs`
/// (as a module that only sets values needs), taking its `zramSwap` and
/// `services.zram-generator.settings`.
pub fn evaluate_nixos(path: &Path) -> Result<serde_json::Value> {
    if path.extension().is_some_and(|e| e == "json") {
        let text = crate::read_file(path)?;
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            refuse(
                path.display().to_string(),
                format!("not JSON: {e}"),
                "give the output of `nix eval --json .#nixosConfigurations.HOST.config.zramSwap`",
            )
        })?;
        return Ok(serde_json::json!({ "zramSwap": value }));
    }
    let absolute = std::fs::canonicalize(path).map_err(|e| KernelError::io(path, "open", e))?;
    let file = absolute.display().to_string();
    let expression = format!(
        "let m = import {file}; v = if builtins.isFunction m then m {{ config = {{}}; lib = {{}}; pkgs = {{}}; }} else m; in {{ zramSwap = v.zramSwap or null; generator = v.services.zram-generator.settings or null; }}"
    );
    let state = std::env::temp_dir().join(format!("zpage-import-nix-{}", std::process::id()));
    let output = std::process::Command::new("nix-instantiate")
        .args([
            "--readonly-mode",
            "--eval",
            "--strict",
            "--json",
            "-E",
            &expression,
        ])
        .env("NIX_STATE_DIR", &state)
        .output();
    let _ = std::fs::remove_dir_all(&state);
    let output = output.map_err(|e| KernelError::Command {
        command: "nix-instantiate".into(),
        detail: format!("cannot run it: {e}"),
        fix: "install Nix (Debian: apt install nix-bin), or give the JSON of `nix eval --json .#nixosConfigurations.HOST.config.zramSwap` as FILE.json".into(),
    })?;
    if !output.status.success() {
        return Err(KernelError::Command {
            command: format!("nix-instantiate --eval {file}"),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            fix: "a module that uses lib or pkgs needs the whole system: on the NixOS machine run `nix eval --json .#nixosConfigurations.HOST.config.zramSwap > zram.json` (or `nix-instantiate --eval --strict --json -A config.zramSwap '<nixpkgs/nixos>'`) and import zram.json".into(),
        });
    }
    serde_json::from_slice(&output.stdout).map_err(|e| KernelError::Command {
        command: format!("nix-instantiate --eval {file}"),
        detail: format!("printed something that is not JSON: {e}"),
        fix: "check the file with `nix-instantiate --parse FILE`".into(),
    })
}

/// NixOS's defaults for `zramSwap` options not set.
const NIXOS_DEFAULT_ALGORITHM: &str = "zstd";
const NIXOS_DEFAULT_PERCENT: u64 = 50;
const NIXOS_DEFAULT_PRIORITY: i64 = 5;

/// The evaluated module (`{"zramSwap": ..., "generator": ...}`) into a config.
pub fn import_nixos(evaluated: &serde_json::Value) -> Result<KernelConfig> {
    let zram_swap = evaluated.get("zramSwap").filter(|v| !v.is_null());
    let generator = evaluated.get("generator").filter(|v| !v.is_null());
    match (zram_swap, generator) {
        (Some(z), _) if z.get("enable").and_then(|e| e.as_bool()) != Some(false) => {
            from_zram_swap(z)
        }
        (_, Some(settings)) => {
            let sections = settings
                .as_object()
                .map(|devices| {
                    devices
                        .iter()
                        .map(|(name, keys)| {
                            let keys = keys
                                .as_object()
                                .map(|k| {
                                    k.iter()
                                        .map(|(key, v)| (key.clone(), json_text(v)))
                                        .collect()
                                })
                                .unwrap_or_default();
                            (name.clone(), keys)
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            from_generator_sections(&sections)
        }
        _ => Err(refuse(
            "zramSwap",
            "the module enables neither zramSwap nor services.zram-generator",
            "give the module that sets zramSwap.enable = true",
        )),
    }
}

fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn from_zram_swap(z: &serde_json::Value) -> Result<KernelConfig> {
    let key = |name: &str| z.get(name).filter(|v| !v.is_null());
    if let Some(max) = key("memoryMax") {
        return Err(refuse(
            "zramSwap.memoryMax",
            format!("{max}: a cap on top of memoryPercent, which a zpage size cannot say"),
            "drop memoryMax, or set memoryPercent so that the share is what you want",
        ));
    }
    let devices = match key("swapDevices") {
        None => 1,
        Some(v) => v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            refuse(
                "zramSwap.swapDevices",
                format!("{v} is not a positive number"),
                "give 1 or more",
            )
        })?,
    };
    let percent = match key("memoryPercent") {
        None => NIXOS_DEFAULT_PERCENT,
        Some(v) => v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            refuse(
                "zramSwap.memoryPercent",
                format!("{v} is not a whole percentage"),
                "give 1 to 100 or more",
            )
        })?,
    };
    let algorithm = match key("algorithm") {
        None => NIXOS_DEFAULT_ALGORITHM.to_string(),
        Some(v) => v.as_str().map(str::to_string).ok_or_else(|| {
            refuse(
                "zramSwap.algorithm",
                format!("{v} is not a string"),
                "give an algorithm name such as \"zstd\"",
            )
        })?,
    };
    let priority = match key("priority") {
        None => NIXOS_DEFAULT_PRIORITY,
        Some(v) => v.as_i64().ok_or_else(|| {
            refuse(
                "zramSwap.priority",
                format!("{v} is not a number"),
                "give 0..=32767",
            )
        })?,
    };
    let writeback_device = key("writebackDevice")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let mut config = KernelConfig::default();
    for _ in 0..devices {
        config.zram.push(ZramConfig {
            index: None,
            algorithm: algorithm.clone(),
            algorithm_params: None,
            // NixOS gives every device memoryPercent of RAM.
            size: Size::Text(format!("{percent}%")),
            mem_limit: None,
            writeback_device: writeback_device.clone(),
            writeback: None,
            recompress_algorithms: Vec::new(),
            recompress: None,
            swap_priority: Some(priority),
        });
    }
    config.check_static()?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_mib_or_shares_of_ram_and_caps_are_refused() {
        let size = |e: &str| size_from_expression("k", e);
        assert_eq!(size("4096").unwrap(), Size::Bytes(4 << 30));
        assert_eq!(size("ram * 0.5").unwrap(), Size::Fraction(0.5));
        assert_eq!(size("ram / 4").unwrap(), Size::Fraction(0.25));
        assert_eq!(size("ram * 25 / 100").unwrap(), Size::Text("25%".into()));
        assert_eq!(size("50 / 100 * ram").unwrap(), Size::Text("50%".into()));
        let e = size("min(ram / 2, 4096)").unwrap_err().to_string();
        assert!(e.contains("pick one side"), "{e}");
    }

    #[test]
    fn algorithms_with_parameters_and_recompression() {
        let config = import_zram_generator(
            "[zram0]\nzram-size = ram / 2\ncompression-algorithm = zstd(level=3) lz4 (type=huge_idle)\n",
        )
        .unwrap();
        let z = &config.zram[0];
        assert_eq!(z.algorithm, "zstd");
        assert_eq!(z.algorithm_params.as_deref(), Some("level=3"));
        assert_eq!(z.recompress_algorithms, ["lz4"]);
        assert_eq!(z.recompress, Some(PageSelection::HugeIdle));
    }

    #[test]
    fn what_zpage_cannot_say_is_refused_with_the_key() {
        for (text, key) in [
            ("[zram0]\ncompression-algorithm = lz4\n", "zram-size"),
            ("[zram0]\nzram-size = 512\n", "compression-algorithm"),
            (
                "[zram0]\nzram-size = 512\ncompression-algorithm = lz4\nmount-point = /var/tmp\n",
                "mount-point",
            ),
            (
                "[zram0]\nzram-size = 512\ncompression-algorithm = lz4\nhost-memory-limit = 9048\n",
                "host-memory-limit",
            ),
            ("[swap]\nzram-size = 512\n", "[swap]"),
            (
                "[zram0]\nzram-size = 512\ncompression-algorithm = lz4\nzram-sise = 1\n",
                "zram-sise",
            ),
        ] {
            let e = import_zram_generator(text).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        let e = import_nixos(
            &serde_json::json!({"zramSwap": {"enable": true, "memoryMax": 1073741824}}),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("memoryMax"), "{e}");
    }

    #[test]
    fn nixos_defaults_fill_what_the_module_leaves_out() {
        let config =
            import_nixos(&serde_json::json!({"zramSwap": {"enable": true}, "generator": null}))
                .unwrap();
        assert_eq!(config.zram.len(), 1);
        assert_eq!(config.zram[0].algorithm, "zstd");
        assert_eq!(config.zram[0].size, Size::Text("50%".into()));
        assert_eq!(config.zram[0].swap_priority, Some(5));
        let toml = to_toml(&config).unwrap();
        assert_eq!(KernelConfig::parse(&toml).unwrap(), config, "{toml}");
    }
}
