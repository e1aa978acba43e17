//! The TOML configuration of `zpage kernel apply` and `export`, with
//! validation that names the offending key and the fix.
//!
//! ```toml
//! [[zram]]
//! algorithm = "lz4"          # one of /sys/block/zramN/comp_algorithm
//! size = 0.5                 # fraction of RAM, "50%", "4G" or bytes
//! mem_limit = "2G"           # optional cap on RAM actually used
//! swap_priority = 100
//!
//! [zswap]
//! enabled = false
//!
//! [[swap]]                   # lower-priority disk tier
//! path = "/var/swapfile"
//! size = "1G"                # create the file if missing
//! priority = 10
//! required = false           # like fstab `nofail` when false
//!
//! [sysctl]
//! swappiness = "auto"        # from the measured zram vs file-I/O speed
//! page_cluster = 0
//! ```

use serde::{Deserialize, Serialize};

use crate::{KernelError, Result};

/// A whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelConfig {
    /// zram swap devices, highest tier.
    #[serde(default)]
    pub zram: Vec<ZramConfig>,
    /// zswap settings (absent: left as they are).
    pub zswap: Option<ZswapConfig>,
    /// Disk swap areas (files or block devices), lower tier.
    #[serde(default)]
    pub swap: Vec<DiskSwapConfig>,
    /// vm sysctls (absent ones are left as they are).
    pub sysctl: Option<SysctlConfig>,
    /// The schedule of `zpage kernel daemon` (idle marking, writeback, recompression).
    pub daemon: Option<DaemonSchedule>,
}

/// Which zram pages a writeback or recompression round takes (the kernel's
/// `type=` values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageSelection {
    /// Pages not touched since the last idle marking.
    #[default]
    Idle,
    /// Pages stored uncompressed (they did not compress).
    Huge,
    /// Pages both idle and huge.
    HugeIdle,
    /// Pages no algorithm could compress (writeback only).
    Incompressible,
}

impl PageSelection {
    /// The kernel's spelling (`type=...`).
    pub fn kernel_name(self) -> &'static str {
        match self {
            PageSelection::Idle => "idle",
            PageSelection::Huge => "huge",
            PageSelection::HugeIdle => "huge_idle",
            PageSelection::Incompressible => "incompressible",
        }
    }
}

/// `[daemon]`: when `zpage kernel daemon` marks pages idle and acts on them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSchedule {
    /// Seconds between the daemon's checks (default 60).
    pub interval_seconds: Option<u64>,
    /// Pages untouched for this many seconds count as idle (default 3600):
    /// the daemon marks every page idle this often and acts on the pages
    /// still idle at the next marking.
    pub idle_after_seconds: Option<u64>,
    /// Most data written back per round (default "256M"); the kernel's
    /// `writeback_limit` enforces it.
    pub writeback_budget: Option<Size>,
    /// Most data recompressed per round (default "256M"; `max_pages=`).
    pub recompress_budget: Option<Size>,
}

impl DaemonSchedule {
    /// Seconds between checks.
    pub fn interval_seconds(&self) -> u64 {
        self.interval_seconds.unwrap_or(60)
    }
    /// Seconds after which a page counts as idle.
    pub fn idle_after_seconds(&self) -> u64 {
        self.idle_after_seconds.unwrap_or(3600)
    }
}

/// A size: bytes, a string with a unit ("512M", "4GiB", "25%"; the rules
/// of `zpage_units`, as every front end reads sizes), or a fraction of RAM
/// (0 < f <= 4 as a float, the bound of a percentage).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// Exact bytes.
    Bytes(u64),
    /// Fraction of MemTotal.
    Fraction(f64),
    /// "512M", "4G", "25%".
    Text(String),
}

impl Size {
    /// Resolves to bytes (rounded down to whole 4 KiB pages) against RAM size.
    pub fn resolve(&self, key: &str, mem_total: u64) -> Result<u64> {
        let fix = "write bytes (268435456), a unit (\"256M\", \"4G\"), a percentage of RAM (\"25%\") or a fraction of RAM (0.25)";
        let bytes = match self {
            Size::Bytes(b) => *b,
            Size::Fraction(f) => {
                if !(f.is_finite() && *f > 0.0 && *f <= zpage_units::MAX_PERCENT / 100.0) {
                    return Err(KernelError::config(
                        key,
                        format!("fraction of RAM {f} is impossible (must be > 0 and at most 4)"),
                        fix,
                    ));
                }
                (mem_total as f64 * f) as u64
            }
            Size::Text(text) => zpage_units::parse_size_or_percent(text, || Ok(mem_total))
                .map_err(|e| KernelError::config(key, e.to_string(), fix))?,
        };
        let pages = bytes / 4096 * 4096;
        if pages == 0 {
            return Err(KernelError::config(
                key,
                format!("size {bytes} bytes is less than one 4 KiB page"),
                fix,
            ));
        }
        Ok(pages)
    }
}

/// Turns a TOML error into a syntax error (line, column) or a key error
/// (the dotted key, e.g. `zram[1].swap_priority`).
fn parse_error(text: &str, error: &toml::de::Error) -> KernelError {
    let message = error.message().trim().to_string();
    let offset = error.span().map_or(0, |span| span.start.min(text.len()));
    let line = text[..offset].matches('\n').count() + 1;
    let column = offset - text[..offset].rfind('\n').map_or(0, |n| n + 1) + 1;
    let about_a_key = [
        "unknown field",
        "invalid type",
        "invalid value",
        "missing field",
    ]
    .iter()
    .any(|kind| message.contains(kind));
    if !about_a_key {
        return KernelError::ConfigSyntax {
            line,
            column,
            problem: message,
        };
    }
    let fix = if message.contains("unknown field") {
        "remove or correct the key (`zpage kernel apply --help` lists the keys)"
    } else if message.contains("missing field") {
        "add the key"
    } else {
        "correct the value's type (a number, a \"quoted string\", true/false)"
    };
    KernelError::config(
        format!("{} (line {line})", key_at(text, offset)),
        message,
        fix,
    )
}

/// The dotted key at byte `offset` of a TOML text: the table it is in
/// (`zram[1]` for the second `[[zram]]`) and the key on its line.
fn key_at(text: &str, offset: usize) -> String {
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |n| offset + n);
    let line = text[line_start..line_end].trim();
    let key = if line.starts_with('[') {
        None
    } else {
        line.split('=').next().map(|k| k.trim().to_string())
    };
    let mut table: Option<String> = None;
    let mut array_counts: std::collections::HashMap<String, usize> = Default::default();
    for header in text[..line_start].lines().map(str::trim) {
        if let Some(name) = header.strip_prefix("[[").and_then(|h| h.split("]]").next()) {
            let name = name.trim().to_string();
            let count = array_counts.entry(name.clone()).or_insert(0);
            table = Some(format!("{name}[{count}]"));
            *count += 1;
        } else if let Some(name) = header.strip_prefix('[').and_then(|h| h.split(']').next()) {
            table = Some(name.trim().to_string());
        }
    }
    match (table, key) {
        (Some(table), Some(key)) => format!("{table}.{key}"),
        (Some(table), None) => table,
        (None, Some(key)) => key,
        (None, None) => "(top level)".to_string(),
    }
}

/// One zram swap device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZramConfig {
    /// Device index (default: the entry's position, 0, 1, ...); created with hot_add if missing.
    pub index: Option<u32>,
    /// Compression algorithm (must be offered by the kernel).
    pub algorithm: String,
    /// Written to `algorithm_params` (e.g. "level=3"), where the kernel has it.
    pub algorithm_params: Option<String>,
    /// Capacity for uncompressed data (disksize).
    pub size: Size,
    /// Cap on RAM the device may use (mem_limit); absent = unlimited.
    pub mem_limit: Option<Size>,
    /// Block device that idle or incompressible pages are written back to
    /// (`backing_dev`; kernels built with CONFIG_ZRAM_WRITEBACK).
    pub writeback_device: Option<String>,
    /// Pages `zpage kernel daemon` writes back (default `idle`).
    pub writeback: Option<PageSelection>,
    /// Secondary algorithms by priority for recompression (`recomp_algorithm`;
    /// kernels built with CONFIG_ZRAM_MULTI_COMP), e.g. `["zstd"]`.
    #[serde(default)]
    pub recompress_algorithms: Vec<String>,
    /// Pages `zpage kernel daemon` recompresses (default `idle`).
    pub recompress: Option<PageSelection>,
    /// Swap priority (0..=32767), higher used first. Default 100.
    pub swap_priority: Option<i64>,
}

impl ZramConfig {
    /// Priority to use (range-checked by [`KernelConfig::check_static`]).
    pub fn priority(&self) -> i16 {
        clamp_priority(self.swap_priority.unwrap_or(100))
    }
}

/// The kernel's swap priorities run 0..=32767 when given by the user.
pub const MAX_SWAP_PRIORITY: i64 = 32767;

fn clamp_priority(priority: i64) -> i16 {
    priority.clamp(0, MAX_SWAP_PRIORITY) as i16
}

fn check_priority(key: String, priority: Option<i64>) -> Result<()> {
    match priority {
        Some(p) if !(0..=MAX_SWAP_PRIORITY).contains(&p) => Err(KernelError::config(
            key,
            format!("{p} is outside 0..=32767"),
            "give a swap priority from 0 to 32767 (higher is used first)",
        )),
        _ => Ok(()),
    }
}

/// zswap parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZswapConfig {
    /// `enabled`.
    pub enabled: Option<bool>,
    /// `compressor` (a Crypto API compressor, see /proc/crypto).
    pub compressor: Option<String>,
    /// `max_pool_percent` (1..=100).
    pub max_pool_percent: Option<u8>,
    /// `accept_threshold_percent` (0..=100).
    pub accept_threshold_percent: Option<u8>,
    /// `shrinker_enabled`.
    pub shrinker: Option<bool>,
}

/// A disk swap file or device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskSwapConfig {
    /// Swap file or block device.
    pub path: String,
    /// Size of the file to create when it does not exist (files only).
    pub size: Option<Size>,
    /// Swap priority (0..=32767). Default 10, below zram's 100.
    pub priority: Option<i64>,
    /// Encrypt with a random key each boot (dm-crypt plain mode via cryptsetup).
    #[serde(default)]
    pub encrypted: bool,
    /// When false (the default, like fstab `nofail`), a missing device is
    /// skipped with a warning instead of failing the whole apply.
    #[serde(default)]
    pub required: bool,
    /// Discard freed swap pages (SSD).
    #[serde(default)]
    pub discard: bool,
}

impl DiskSwapConfig {
    /// Priority to use.
    pub fn priority(&self) -> i16 {
        clamp_priority(self.priority.unwrap_or(10))
    }
}

/// A sysctl value that may be computed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SysctlValue {
    /// A number.
    Number(i64),
    /// "auto" (swappiness only).
    Text(String),
}

/// vm sysctls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SysctlConfig {
    /// vm.swappiness 0..=200, or "auto".
    pub swappiness: Option<SysctlValue>,
    /// vm.page-cluster (0 for zram: read one page at a time).
    pub page_cluster: Option<u8>,
    /// vm.watermark_scale_factor 1..=3000.
    pub watermark_scale_factor: Option<u32>,
    /// vm.extfrag_threshold 0..=1000.
    pub extfrag_threshold: Option<u32>,
}

/// What a config asks of one sysctl.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SysctlTarget {
    /// This exact value.
    Value(String),
    /// `swappiness = "auto"`: measured on this machine at apply time.
    MeasuredSwappiness,
}

impl SysctlConfig {
    /// The sysctls this section sets, by dotted name, in the order they are
    /// applied; the one mapping `apply` and every export format use.
    pub fn targets(&self) -> Vec<(&'static str, SysctlTarget)> {
        let mut targets = Vec::new();
        match &self.swappiness {
            Some(SysctlValue::Number(n)) => {
                targets.push(("vm.swappiness", SysctlTarget::Value(n.to_string())))
            }
            Some(SysctlValue::Text(_)) => {
                targets.push(("vm.swappiness", SysctlTarget::MeasuredSwappiness))
            }
            None => {}
        }
        let numbers = [
            ("vm.page-cluster", self.page_cluster.map(u32::from)),
            ("vm.watermark_scale_factor", self.watermark_scale_factor),
            ("vm.extfrag_threshold", self.extfrag_threshold),
        ];
        for (name, value) in numbers {
            if let Some(v) = value {
                targets.push((name, SysctlTarget::Value(v.to_string())));
            }
        }
        targets
    }
}

impl ZswapConfig {
    /// The module parameters this section sets as (parameter, value as the
    /// kernel prints it, config key), `enabled` last so zswap is switched on
    /// only once the rest is in place.
    pub fn parameters(&self) -> Vec<(&'static str, String, &'static str)> {
        let yn = |b: bool| if b { "Y" } else { "N" }.to_string();
        let mut out = Vec::new();
        if let Some(c) = &self.compressor {
            out.push(("compressor", c.clone(), "zswap.compressor"));
        }
        if let Some(p) = self.max_pool_percent {
            out.push(("max_pool_percent", p.to_string(), "zswap.max_pool_percent"));
        }
        if let Some(p) = self.accept_threshold_percent {
            out.push((
                "accept_threshold_percent",
                p.to_string(),
                "zswap.accept_threshold_percent",
            ));
        }
        if let Some(s) = self.shrinker {
            out.push(("shrinker_enabled", yn(s), "zswap.shrinker"));
        }
        if let Some(e) = self.enabled {
            out.push(("enabled", yn(e), "zswap.enabled"));
        }
        out
    }
}

impl KernelConfig {
    /// Parses TOML; syntax errors name the line and column, unknown keys and
    /// wrong types name the key.
    pub fn parse(text: &str) -> Result<KernelConfig> {
        let config: KernelConfig = toml::from_str(text).map_err(|e| parse_error(text, &e))?;
        config.check_static()?;
        Ok(config)
    }

    /// Reads and parses a file.
    pub fn load(path: &std::path::Path) -> Result<KernelConfig> {
        KernelConfig::parse(&crate::read_file(path)?)
    }

    /// Checks what can be checked without the kernel: ranges and duplicates.
    pub fn check_static(&self) -> Result<()> {
        let mut indexes = Vec::new();
        for (i, z) in self.zram.iter().enumerate() {
            let index = z.index.unwrap_or(i as u32);
            if indexes.contains(&index) {
                return Err(KernelError::config(
                    format!("zram[{i}].index"),
                    format!("zram{index} is configured twice"),
                    "give each [[zram]] its own index",
                ));
            }
            indexes.push(index);
            check_priority(format!("zram[{i}].swap_priority"), z.swap_priority)?;
            if let Some(device) = &z.writeback_device {
                if !device.starts_with("/dev/") {
                    return Err(KernelError::config(
                        format!("zram[{i}].writeback_device"),
                        format!("{device:?} is not a block device path"),
                        "give a partition such as /dev/disk/by-partuuid/... (a file needs a loop device first)",
                    ));
                }
            }
            if z.writeback.is_some() && z.writeback_device.is_none() {
                return Err(KernelError::config(
                    format!("zram[{i}].writeback"),
                    "set without a writeback_device",
                    "add writeback_device = \"/dev/...\" or remove the key",
                ));
            }
            if z.recompress == Some(PageSelection::Incompressible) {
                return Err(KernelError::config(
                    format!("zram[{i}].recompress"),
                    "incompressible pages are the ones recompression already gave up on",
                    "use idle, huge or huge_idle",
                ));
            }
            if z.recompress.is_some() && z.recompress_algorithms.is_empty() {
                return Err(KernelError::config(
                    format!("zram[{i}].recompress"),
                    "set without recompress_algorithms",
                    "add recompress_algorithms = [\"zstd\"] or remove the key",
                ));
            }
            if z.recompress_algorithms.len() > 3 {
                return Err(KernelError::config(
                    format!("zram[{i}].recompress_algorithms"),
                    "zram takes at most 3 secondary algorithms",
                    "list at most 3",
                ));
            }
            if z.algorithm.trim().is_empty() {
                return Err(KernelError::config(
                    format!("zram[{i}].algorithm"),
                    "empty",
                    "name one of /sys/block/zram0/comp_algorithm",
                ));
            }
        }
        if let Some(zs) = &self.zswap {
            if zs.max_pool_percent.is_some_and(|p| p == 0 || p > 100) {
                return Err(KernelError::config(
                    "zswap.max_pool_percent",
                    "must be 1..=100",
                    "give a percentage of RAM such as 20",
                ));
            }
            if zs.accept_threshold_percent.is_some_and(|p| p > 100) {
                return Err(KernelError::config(
                    "zswap.accept_threshold_percent",
                    "must be 0..=100",
                    "give a percentage of the pool limit such as 90",
                ));
            }
        }
        let mut paths = Vec::new();
        for (i, s) in self.swap.iter().enumerate() {
            if !s.path.starts_with('/') {
                return Err(KernelError::config(
                    format!("swap[{i}].path"),
                    format!("{:?} is not an absolute path", s.path),
                    "give the full path, e.g. /var/swapfile",
                ));
            }
            if paths.contains(&&s.path) {
                return Err(KernelError::config(
                    format!("swap[{i}].path"),
                    "listed twice",
                    "list each swap area once",
                ));
            }
            paths.push(&s.path);
            check_priority(format!("swap[{i}].priority"), s.priority)?;
        }
        if let Some(sc) = &self.sysctl {
            match &sc.swappiness {
                Some(SysctlValue::Number(n)) if !(0..=200).contains(n) => {
                    return Err(KernelError::config(
                        "sysctl.swappiness",
                        format!("{n} is outside 0..=200"),
                        "give 0..=200, or \"auto\"",
                    ));
                }
                Some(SysctlValue::Text(t)) if t != "auto" => {
                    return Err(KernelError::config(
                        "sysctl.swappiness",
                        format!("{t:?} is neither a number nor \"auto\""),
                        "give 0..=200, or \"auto\"",
                    ));
                }
                _ => {}
            }
            if sc.page_cluster.is_some_and(|p| p > 10) {
                return Err(KernelError::config(
                    "sysctl.page_cluster",
                    "must be 0..=10 (2^n pages read ahead)",
                    "use 0 for zram",
                ));
            }
            if sc
                .watermark_scale_factor
                .is_some_and(|w| !(1..=3000).contains(&w))
            {
                return Err(KernelError::config(
                    "sysctl.watermark_scale_factor",
                    "must be 1..=3000",
                    "the kernel default is 10",
                ));
            }
            if sc.extfrag_threshold.is_some_and(|w| w > 1000) {
                return Err(KernelError::config(
                    "sysctl.extfrag_threshold",
                    "must be 0..=1000",
                    "the kernel default is 500",
                ));
            }
        }
        Ok(())
    }

    /// zram index of entry `i`.
    pub fn zram_index(&self, i: usize) -> u32 {
        self.zram[i].index.unwrap_or(i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn parses_a_full_config() {
        let config = KernelConfig::parse(
            r#"
            [[zram]]
            algorithm = "lz4"
            size = 0.5
            mem_limit = "1G"
            [zswap]
            enabled = false
            max_pool_percent = 25
            [[swap]]
            path = "/var/swapfile"
            size = "64M"
            [sysctl]
            swappiness = "auto"
            page_cluster = 0
            "#,
        )
        .unwrap();
        assert_eq!(config.zram[0].size.resolve("k", 8 * GIB).unwrap(), 4 * GIB);
        assert_eq!(config.zram[0].priority(), 100);
        assert_eq!(config.swap[0].priority(), 10);
        assert!(!config.swap[0].required);
    }

    #[test]
    fn sizes() {
        let ram = 8 * GIB;
        assert_eq!(Size::Text("25%".into()).resolve("k", ram).unwrap(), 2 * GIB);
        assert_eq!(
            Size::Text("512M".into()).resolve("k", ram).unwrap(),
            512 << 20
        );
        assert_eq!(
            Size::Text("1.5GiB".into()).resolve("k", ram).unwrap(),
            3 * GIB / 2
        );
        assert_eq!(Size::Bytes(4097).resolve("k", ram).unwrap(), 4096);
        for bad in [
            Size::Bytes(0),
            Size::Fraction(-1.0),
            Size::Text("12X".into()),
            Size::Text("-1G".into()),
        ] {
            let err = bad.resolve("zram[0].size", ram).unwrap_err().to_string();
            assert!(err.contains("zram[0].size"), "{err}");
        }
    }

    #[test]
    fn invalid_configs_name_the_key_and_fix() {
        let cases = [
            ("[[zram]]\nalgorithm = \"lz4\"\nsize = 1\nsizee = 2\n", "sizee"),
            ("[zswap]\nenable = true\n", "enable"),
            ("[sysctl]\nswappiness = 300\n", "sysctl.swappiness"),
            ("[sysctl]\nswappiness = \"fast\"\n", "sysctl.swappiness"),
            ("[zswap]\nmax_pool_percent = 0\n", "zswap.max_pool_percent"),
            ("[[swap]]\npath = \"swapfile\"\n", "swap[0].path"),
            ("[[zram]]\nalgorithm = \"lz4\"\nsize = \"1G\"\n[[zram]]\nindex = 0\nalgorithm = \"lz4\"\nsize = \"1G\"\n", "zram[1].index"),
            ("[[zram]]\nalgorithm = \"lz4\"\nsize = \"1G\"\n[[zram]]\nalgorithm = \"lz4\"\nsize = \"1G\"\nswap_priority = 40000\n", "zram[1].swap_priority"),
            ("[[swap]]\npath = \"/x\"\npriority = -1\n", "swap[0].priority"),
            ("[zswap]\nenabled = \"yes\"\n", "zswap.enabled"),
        ];
        for (text, key) in cases {
            let err = KernelConfig::parse(text).unwrap_err();
            let message = err.to_string();
            assert!(
                matches!(err, KernelError::InvalidConfig { .. }),
                "{message}"
            );
            assert!(message.contains(key), "{key} not in: {message}");
            assert!(!message.contains("i16"), "{message}");
        }
    }

    #[test]
    fn syntax_errors_name_the_line_not_a_key() {
        let err = KernelConfig::parse("[zswap]\nenabled = true\n[[zram]\nalgorithm = \"lz4\"\n")
            .unwrap_err();
        let message = err.to_string();
        assert!(
            matches!(err, KernelError::ConfigSyntax { line: 3, .. }),
            "{message}"
        );
        assert!(
            message.contains("line 3") && !message.contains("config key"),
            "{message}"
        );
    }
}
