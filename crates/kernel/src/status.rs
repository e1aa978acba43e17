//! `zpage kernel status`: one snapshot of zram, zswap, swap areas, sysctls,
//! memory pressure and per-cgroup zswap use, readable as JSON or as text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::procfs::{self, MemoryPressure, SwapArea};
use crate::zram::{BdStat, IoStat, MmStat, ZramDevice};
use crate::zswap::{self, CgroupZswap, DebugfsCounters};
use zpage_units::format_bytes;

/// What a zram device can do on this kernel (by the attributes it has).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZramFeatures {
    /// `backing_dev`/`writeback` (CONFIG_ZRAM_WRITEBACK).
    pub writeback: bool,
    /// `recomp_algorithm`/`recompress` (CONFIG_ZRAM_MULTI_COMP).
    pub recompress: bool,
    /// `algorithm_params` (Linux 6.12+).
    pub algorithm_params: bool,
    /// `idle` marking.
    pub idle: bool,
}

impl ZramFeatures {
    /// Detects the features of `device`.
    pub fn detect(device: &ZramDevice) -> ZramFeatures {
        ZramFeatures {
            writeback: device.has_attr("backing_dev") && device.has_attr("writeback"),
            recompress: device.has_attr("recomp_algorithm") && device.has_attr("recompress"),
            algorithm_params: device.has_attr("algorithm_params"),
            idle: device.has_attr("idle"),
        }
    }
}

/// One zram device as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZramStatus {
    /// Device name, e.g. "zram0".
    pub name: String,
    /// Selected compression algorithm.
    pub algorithm: Option<String>,
    /// Algorithms offered.
    pub algorithms: Vec<String>,
    /// `disksize`: the most *uncompressed* data the device accepts (bytes).
    pub disksize_bytes: u64,
    /// `initstate`.
    pub initialised: bool,
    /// `mm_stat` (memory use; see [`MmStat`] for units).
    pub mm_stat: Option<MmStat>,
    /// `io_stat`.
    pub io_stat: Option<IoStat>,
    /// `bd_stat` (writeback), when the kernel has writeback.
    pub bd_stat: Option<BdStat>,
    /// Backing device for writeback, when one is set.
    pub backing_dev: Option<String>,
    /// Recompression algorithms by priority (`recomp_algorithm`), when set.
    pub recompression_algorithms: Vec<String>,
    /// Writeback budget left (`writeback_limit`, bytes) when `writeback_limit_enable` is 1.
    pub writeback_limit_bytes: Option<u64>,
    /// Where the device is mounted, when it holds a filesystem.
    pub mountpoint: Option<String>,
    /// `orig_data_size / compr_data_size`: how well the data compresses.
    pub ratio_data_to_compressed: Option<f64>,
    /// `orig_data_size / mem_used_total`: what it really saves, overhead included.
    pub ratio_data_to_memory_used: Option<f64>,
    /// Active swap priority, when it is a swap area.
    pub swap_priority: Option<i32>,
    /// Features of the kernel for this device.
    pub features: ZramFeatures,
    /// Problems reading it (e.g. permissions).
    pub errors: Vec<String>,
}

/// zswap as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZswapStatus {
    /// Module parameters as the kernel prints them (enabled = Y/N, compressor, ...).
    pub parameters: BTreeMap<String, String>,
    /// Why parameters are missing, if they are.
    pub parameters_error: Option<String>,
    /// meminfo `Zswap`: compressed size of the pool (bytes).
    pub pool_bytes: Option<u64>,
    /// meminfo `Zswapped`: uncompressed size of what the pool stores (bytes).
    pub stored_bytes: Option<u64>,
    /// vmstat `zswpin`: pages loaded back from zswap.
    pub zswpin: Option<u64>,
    /// vmstat `zswpout`: pages stored into zswap.
    pub zswpout: Option<u64>,
    /// vmstat `zswpwb`: pages written back from zswap to the swap device.
    pub zswpwb: Option<u64>,
    /// debugfs counters, or why they are not readable.
    pub debugfs: DebugfsCounters,
    /// Per-cgroup zswap use.
    pub cgroups: Vec<CgroupZswap>,
    /// Why no cgroup is listed, when none is.
    pub cgroups_note: Option<String>,
}

/// Everything `zpage kernel status` reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelStatus {
    /// zram devices.
    pub zram: Vec<ZramStatus>,
    /// Why zram is missing, when it is.
    pub zram_note: Option<String>,
    /// zswap.
    pub zswap: ZswapStatus,
    /// Active swap areas with priority and use.
    pub swaps: Vec<SwapArea>,
    /// meminfo `MemTotal` (bytes).
    pub mem_total_bytes: Option<u64>,
    /// meminfo `SwapTotal` / `SwapFree` (bytes).
    pub swap_total_bytes: Option<u64>,
    /// meminfo `SwapFree` (bytes).
    pub swap_free_bytes: Option<u64>,
    /// Relevant sysctls (name -> value; the error text when unreadable).
    pub sysctls: BTreeMap<String, String>,
    /// Memory pressure (PSI), when available.
    pub memory_pressure: Option<MemoryPressure>,
}

fn ratio(numerator: u64, denominator: u64) -> Option<f64> {
    (denominator > 0 && numerator > 0).then(|| numerator as f64 / denominator as f64)
}

/// One zram device's status.
pub fn zram_status(device: &ZramDevice, swaps: &[SwapArea]) -> ZramStatus {
    let mut errors = Vec::new();
    fn note<T>(errors: &mut Vec<String>, r: crate::Result<T>) -> Option<T> {
        r.map_err(|e| errors.push(e.to_string())).ok()
    }
    let algorithms = note(&mut errors, device.algorithms()).unwrap_or_default();
    let algorithm = note(&mut errors, device.current_algorithm());
    let disksize_bytes = note(&mut errors, device.disksize()).unwrap_or(0);
    let initialised = note(&mut errors, device.is_initialised()).unwrap_or(false);
    let mm_stat = note(&mut errors, device.mm_stat());
    let io_stat = note(&mut errors, device.io_stat());
    let bd_stat = note(&mut errors, device.bd_stat()).flatten();
    let backing_dev = note(&mut errors, device.backing_dev()).flatten();
    let recompression_algorithms =
        note(&mut errors, device.recompression_algorithms()).unwrap_or_default();
    let writeback_limit_bytes = note(&mut errors, device.writeback_limit_bytes()).flatten();
    let dev = device.dev_path().display().to_string();
    let mountpoint = procfs::mountpoint_of(&dev);
    ZramStatus {
        name: device.name(),
        algorithm,
        algorithms,
        disksize_bytes,
        initialised,
        ratio_data_to_compressed: mm_stat.and_then(|m| ratio(m.orig_data_size, m.compr_data_size)),
        ratio_data_to_memory_used: mm_stat.and_then(|m| ratio(m.orig_data_size, m.mem_used_total)),
        mm_stat,
        io_stat,
        bd_stat,
        backing_dev,
        recompression_algorithms,
        writeback_limit_bytes,
        mountpoint,
        swap_priority: swaps.iter().find(|s| s.path == dev).map(|s| s.priority),
        features: ZramFeatures::detect(device),
        errors,
    }
}

/// Where a snapshot reads what differs between machines: the zram devices,
/// the active swap areas and zswap's debugfs counters. The default is the
/// running kernel's; tests point them at files standing in for what this
/// machine lacks or does not have active (writeback, swap, debugfs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    /// Directory of the `zramN` devices (`/sys/block`).
    pub sys_block: std::path::PathBuf,
    /// The swap areas table (`/proc/swaps`).
    pub swaps: std::path::PathBuf,
    /// zswap's debugfs counters (`/sys/kernel/debug/zswap`).
    pub zswap_debugfs: std::path::PathBuf,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            sys_block: "/sys/block".into(),
            swaps: "/proc/swaps".into(),
            zswap_debugfs: zswap::DEBUGFS_DIR.into(),
        }
    }
}

/// zswap's status.
pub fn zswap_status() -> ZswapStatus {
    zswap_status_from(&Sources::default())
}

fn zswap_status_from(sources: &Sources) -> ZswapStatus {
    let (parameters, parameters_error) = match zswap::parameters() {
        Ok(p) => (p, None),
        Err(e) => (BTreeMap::new(), Some(e.to_string())),
    };
    let meminfo = procfs::meminfo().ok();
    let vmstat = procfs::vmstat().unwrap_or_default();
    let (cgroups, cgroups_note) = zswap::cgroup_usage(256);
    ZswapStatus {
        parameters,
        parameters_error,
        pool_bytes: meminfo.as_ref().and_then(|m| m.z_swap),
        stored_bytes: meminfo.as_ref().and_then(|m| m.z_swapped),
        zswpin: vmstat.get("zswpin").copied(),
        zswpout: vmstat.get("zswpout").copied(),
        zswpwb: vmstat.get("zswpwb").copied(),
        debugfs: zswap::debugfs_counters_in(&sources.zswap_debugfs),
        cgroups,
        cgroups_note,
    }
}

/// Takes a full snapshot. Never fails as a whole: what cannot be read is
/// reported inside (so it works unprivileged).
pub fn collect() -> KernelStatus {
    collect_from(&Sources::default())
}

/// [`collect`] from `sources`.
pub fn collect_from(sources: &Sources) -> KernelStatus {
    let swaps = crate::read_file(&sources.swaps)
        .map(|text| procfs::parse_swaps(&text))
        .unwrap_or_default();
    let (zram, zram_note) = match ZramDevice::list_in(&sources.sys_block) {
        Ok(devices) if devices.is_empty() => (
            Vec::new(),
            Some(
                "no zram device: `modprobe zram` (or `zpage kernel apply` with a [[zram]] section)"
                    .to_string(),
            ),
        ),
        Ok(devices) => (
            devices.iter().map(|d| zram_status(d, &swaps)).collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let meminfo = procfs::meminfo().ok();
    let sysctls = procfs::RELEVANT_SYSCTLS
        .iter()
        .map(|name| {
            let value = procfs::sysctl_read(name).unwrap_or_else(|e| format!("unreadable: {e}"));
            (name.to_string(), value)
        })
        .collect();
    KernelStatus {
        zram,
        zram_note,
        zswap: zswap_status_from(sources),
        swaps,
        mem_total_bytes: meminfo.as_ref().map(|m| m.mem_total),
        swap_total_bytes: meminfo.as_ref().map(|m| m.swap_total),
        swap_free_bytes: meminfo.as_ref().map(|m| m.swap_free),
        sysctls,
        memory_pressure: procfs::memory_pressure().ok(),
    }
}

/// How fast things changed between two snapshots (`status --watch`), per second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Seconds between the snapshots.
    pub seconds: f64,
    /// Per zram device: (name, uncompressed data stored, bytes/s; RAM used, bytes/s).
    pub zram: Vec<ZramRates>,
    /// zswap stores (zswpout), pages/s.
    pub zswap_stored_pages_per_s: Option<f64>,
    /// zswap loads (zswpin), pages/s.
    pub zswap_loaded_pages_per_s: Option<f64>,
    /// zswap writeback (zswpwb), pages/s.
    pub zswap_written_back_pages_per_s: Option<f64>,
    /// Memory stall time of some task (PSI some), share of the interval (0-1).
    pub memory_stall_some_ratio: Option<f64>,
}

/// One zram device's rates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZramRates {
    /// Device name.
    pub name: String,
    /// Change of orig_data_size, bytes/s (negative: data freed).
    pub data_bytes_per_s: f64,
    /// Change of mem_used_total, bytes/s.
    pub mem_used_bytes_per_s: f64,
}

impl Rates {
    /// The rates between `before` and `after`, taken `elapsed` apart.
    pub fn between(
        before: &KernelStatus,
        after: &KernelStatus,
        elapsed: std::time::Duration,
    ) -> Rates {
        let seconds = elapsed.as_secs_f64().max(1e-3);
        let per_s =
            |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| (b as f64 - a as f64) / seconds);
        let zram = after
            .zram
            .iter()
            .filter_map(|z| {
                let old = before.zram.iter().find(|o| o.name == z.name)?;
                let (m0, m1) = (old.mm_stat?, z.mm_stat?);
                Some(ZramRates {
                    name: z.name.clone(),
                    data_bytes_per_s: (m1.orig_data_size as f64 - m0.orig_data_size as f64)
                        / seconds,
                    mem_used_bytes_per_s: (m1.mem_used_total as f64 - m0.mem_used_total as f64)
                        / seconds,
                })
            })
            .collect();
        let stall = before
            .memory_pressure
            .zip(after.memory_pressure)
            .map(|(a, b)| b.some.total_us.saturating_sub(a.some.total_us) as f64 / 1e6 / seconds);
        Rates {
            seconds,
            zram,
            zswap_stored_pages_per_s: per_s(before.zswap.zswpout, after.zswap.zswpout),
            zswap_loaded_pages_per_s: per_s(before.zswap.zswpin, after.zswap.zswpin),
            zswap_written_back_pages_per_s: per_s(before.zswap.zswpwb, after.zswap.zswpwb),
            memory_stall_some_ratio: stall,
        }
    }

    /// The rates as text, one line per subject.
    pub fn render_text(&self) -> String {
        let mut out = format!("rates over the last {:.1} s\n", self.seconds);
        let signed = |bytes_per_s: f64| {
            let sign = if bytes_per_s < 0.0 { "-" } else { "+" };
            format!("{sign}{}/s", format_bytes(bytes_per_s.abs() as u64))
        };
        for z in &self.zram {
            let _ = writeln!(
                out,
                "  {}: data stored {}, RAM used {}",
                z.name,
                signed(z.data_bytes_per_s),
                signed(z.mem_used_bytes_per_s)
            );
        }
        let pages = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} pages/s"));
        let _ = writeln!(
            out,
            "  zswap: stored {}, loaded {}, written back {}",
            pages(self.zswap_stored_pages_per_s),
            pages(self.zswap_loaded_pages_per_s),
            pages(self.zswap_written_back_pages_per_s)
        );
        if let Some(stall) = self.memory_stall_some_ratio {
            let _ = writeln!(
                out,
                "  memory pressure: some task stalled {:.1}% of the time",
                stall * 100.0
            );
        }
        out.push('\n');
        out
    }
}

impl KernelStatus {
    /// Human-readable report, every figure with its unit and plain name.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "zram devices");
        if let Some(note) = &self.zram_note {
            let _ = writeln!(out, "  {note}");
        }
        for z in &self.zram {
            let _ = writeln!(
                out,
                "  {}: algorithm {} (offered: {}), {}",
                z.name,
                z.algorithm.as_deref().unwrap_or("?"),
                z.algorithms.join(" "),
                if z.initialised {
                    "initialised"
                } else {
                    "not initialised"
                }
            );
            let _ = writeln!(
                out,
                "    capacity for uncompressed data (disksize): {}",
                format_bytes(z.disksize_bytes)
            );
            if let Some(m) = &z.mm_stat {
                let limit = if m.mem_limit == 0 {
                    "none".to_string()
                } else {
                    format_bytes(m.mem_limit)
                };
                let _ = writeln!(
                    out,
                    "    data stored, uncompressed (orig_data_size):   {}",
                    format_bytes(m.orig_data_size)
                );
                let _ = writeln!(
                    out,
                    "    data stored, compressed (compr_data_size):    {}",
                    format_bytes(m.compr_data_size)
                );
                let _ = writeln!(
                    out,
                    "    RAM used, overhead included (mem_used_total): {}",
                    format_bytes(m.mem_used_total)
                );
                let _ = writeln!(
                    out,
                    "    RAM limit (mem_limit):                        {limit}"
                );
                let _ = writeln!(
                    out,
                    "    peak RAM used (mem_used_max):                 {}",
                    format_bytes(m.mem_used_max)
                );
                let _ = writeln!(
                    out,
                    "    same-filled pages, no RAM (same_pages):       {} pages",
                    m.same_pages
                );
                let _ = writeln!(
                    out,
                    "    incompressible pages stored raw (huge_pages): {} pages ({} since init)",
                    m.huge_pages, m.huge_pages_since
                );
                let _ = writeln!(
                    out,
                    "    pages freed by compaction (pages_compacted):  {} pages",
                    m.pages_compacted
                );
            }
            let stored = z.mm_stat.map_or(0, |m| m.orig_data_size);
            let fmt_ratio = |r: Option<f64>| match r {
                Some(r) => format!("{r:.2}:1"),
                None if stored > 0 => "same-filled only (no compressed bytes)".into(),
                None => "- (nothing stored)".into(),
            };
            let _ = writeln!(
                out,
                "    ratio data/compressed: {}   ratio data/RAM used: {}",
                fmt_ratio(z.ratio_data_to_compressed),
                fmt_ratio(z.ratio_data_to_memory_used)
            );
            if let Some(io) = &z.io_stat {
                let _ = writeln!(out, "    since init: failed reads {}, failed writes {}, pages freed by swap (notify_free) {}", io.failed_reads, io.failed_writes, io.notify_free);
            }
            let _ = writeln!(
                out,
                "    swap: {}",
                z.swap_priority
                    .map(|p| format!("active, priority {p}"))
                    .unwrap_or_else(|| "not a swap area".into())
            );
            let writeback = if !z.features.writeback {
                "not in this kernel (zram built without CONFIG_ZRAM_WRITEBACK)".to_string()
            } else {
                match (&z.backing_dev, &z.bd_stat) {
                    (None, _) => "no backing device set".to_string(),
                    (Some(device), Some(bd)) => format!(
                        "to {device}: {} there now (bd_count), since init {} written, {} read back",
                        format_bytes(bd.bd_count * crate::zram::ZRAM_BD_UNIT_BYTES),
                        format_bytes(bd.bd_writes * crate::zram::ZRAM_BD_UNIT_BYTES),
                        format_bytes(bd.bd_reads * crate::zram::ZRAM_BD_UNIT_BYTES)
                    ),
                    (Some(device), None) => format!("to {device}"),
                }
            };
            let _ = writeln!(out, "    writeback: {writeback}");
            let recompression = if !z.features.recompress {
                "not in this kernel (zram built without CONFIG_ZRAM_MULTI_COMP)".to_string()
            } else if z.recompression_algorithms.is_empty() {
                "no secondary algorithm set".to_string()
            } else {
                format!("with {}", z.recompression_algorithms.join(", then "))
            };
            let _ = writeln!(out, "    recompression: {recompression}");
            for e in &z.errors {
                let _ = writeln!(out, "    could not read: {e}");
            }
        }
        let zs = &self.zswap;
        let _ = writeln!(out, "zswap");
        if let Some(e) = &zs.parameters_error {
            let _ = writeln!(out, "  {e}");
        }
        let params: Vec<String> = zs
            .parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(out, "  parameters: {}", params.join(" "));
        let opt_bytes =
            |b: Option<u64>| b.map(format_bytes).unwrap_or_else(|| "not reported".into());
        let _ = writeln!(
            out,
            "  pool size, compressed (meminfo Zswap):       {}",
            opt_bytes(zs.pool_bytes)
        );
        let _ = writeln!(
            out,
            "  data stored, uncompressed (meminfo Zswapped): {}",
            opt_bytes(zs.stored_bytes)
        );
        let opt = |v: Option<u64>| {
            v.map(|v| format!("{v} pages"))
                .unwrap_or_else(|| "not reported".into())
        };
        let _ = writeln!(
            out,
            "  since boot: stored (zswpout) {}, loaded (zswpin) {}, written back to disk (zswpwb) {}",
            opt(zs.zswpout),
            opt(zs.zswpin),
            opt(zs.zswpwb)
        );
        match &zs.debugfs {
            DebugfsCounters::Readable { counters } => {
                let list: Vec<String> = counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let _ = writeln!(out, "  debugfs: {}", list.join(" "));
            }
            DebugfsCounters::Unavailable { reason } => {
                let _ = writeln!(out, "  debugfs counters not readable: {reason}");
            }
        }
        for cg in &zs.cgroups {
            let _ = writeln!(
                out,
                "  cgroup {}: zswap {} (stands for {})",
                cg.path,
                opt_bytes(cg.zswap_bytes.or(cg.zswap_current)),
                opt_bytes(cg.zswapped_bytes)
            );
        }
        if let Some(note) = &zs.cgroups_note {
            let _ = writeln!(out, "  per-cgroup: {note}");
        }
        let _ = writeln!(out, "swap areas (higher priority is used first)");
        if self.swaps.is_empty() {
            let _ = writeln!(out, "  none active");
        }
        for s in &self.swaps {
            let _ = writeln!(
                out,
                "  {} ({}): priority {}, used {} of {}",
                s.path,
                s.kind,
                s.priority,
                format_bytes(s.used_bytes),
                format_bytes(s.size_bytes)
            );
        }
        let _ = writeln!(out, "sysctls");
        for (k, v) in &self.sysctls {
            let _ = writeln!(out, "  {k} = {v}");
        }
        if let Some(p) = &self.memory_pressure {
            let _ = writeln!(
                out,
                "memory pressure (PSI, % of time stalled): some {:.2}/{:.2}/{:.2}, full {:.2}/{:.2}/{:.2} (avg10/avg60/avg300)",
                p.some.avg10, p.some.avg60, p.some.avg300, p.full.avg10, p.full.avg60, p.full.avg300
            );
        }
        out
    }
}
