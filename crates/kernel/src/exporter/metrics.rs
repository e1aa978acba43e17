//! Every metric the exporter derives from a [`KernelStatus`], in one table:
//! name, type, help and where its samples come from. Names follow the
//! Prometheus conventions (base units, `_total` counters, 0-1 ratios,
//! `_info` series) under the `zpage_` namespace; what node_exporter already
//! exports by default (meminfo `SwapTotal`/`SwapFree`/`Zswap`/`Zswapped`,
//! PSI) is left to it, so nothing is counted twice.

use super::text_format::{format_value, Family, Sample};
use crate::procfs::SwapArea;
use crate::status::{KernelStatus, ZramStatus};
use crate::zram::ZRAM_BD_UNIT_BYTES;
use crate::zswap::{CgroupZswap, DebugfsCounters};

/// Extra labels of a sample (besides the ones its source adds).
type Labels = Vec<(&'static str, String)>;

/// Where a metric's samples come from.
enum Source {
    /// One sample per zram device, labelled `device`.
    Zram(fn(&ZramStatus) -> Option<f64>),
    /// Samples per zram device with more labels, labelled `device` too.
    ZramLabelled(fn(&ZramStatus) -> Vec<(Labels, f64)>),
    /// One sample per active swap area, labelled `device` and `type`.
    SwapArea(fn(&SwapArea) -> f64),
    /// One sample per memory cgroup that reports zswap use, labelled `cgroup`.
    Cgroup(fn(&CgroupZswap) -> Option<f64>),
    /// Machine-wide samples.
    Machine(fn(&KernelStatus) -> Vec<(Labels, f64)>),
}

/// One metric family of the table.
struct MetricDef {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    source: Source,
}

const GAUGE: &str = "gauge";
const COUNTER: &str = "counter";

fn one(value: Option<f64>) -> Vec<(Labels, f64)> {
    value.map(|v| vec![(Vec::new(), v)]).unwrap_or_default()
}

fn zswap_parameter(status: &KernelStatus, name: &str) -> Option<String> {
    status.zswap.parameters.get(name).cloned()
}

fn zswap_flag(status: &KernelStatus, name: &str) -> Vec<(Labels, f64)> {
    one(zswap_parameter(status, name).map(|v| if v == "Y" || v == "1" { 1.0 } else { 0.0 }))
}

fn zswap_percent_as_ratio(status: &KernelStatus, name: &str) -> Vec<(Labels, f64)> {
    one(zswap_parameter(status, name)
        .and_then(|v| v.parse::<f64>().ok())
        .map(|p| p / 100.0))
}

fn debugfs(status: &KernelStatus, counter: &str) -> Vec<(Labels, f64)> {
    match &status.zswap.debugfs {
        DebugfsCounters::Readable { counters } => one(counters.get(counter).map(|&v| v as f64)),
        DebugfsCounters::Unavailable { .. } => Vec::new(),
    }
}

/// zswap's reasons for refusing a page, as debugfs names them (`reject_<reason>`).
const ZSWAP_REJECT_REASONS: [&str; 5] = [
    "reclaim_fail",
    "alloc_fail",
    "kmemcache_fail",
    "compress_fail",
    "compress_poor",
];

fn sysctl(status: &KernelStatus, name: &str) -> Vec<(Labels, f64)> {
    one(status.sysctls.get(name).and_then(|v| v.parse().ok()))
}

fn flag(on: bool) -> f64 {
    if on {
        1.0
    } else {
        0.0
    }
}

const METRICS: &[MetricDef] = &[
    MetricDef {
        name: "zpage_zram_disksize_bytes",
        kind: GAUGE,
        help: "zram capacity for uncompressed data (disksize).",
        source: Source::Zram(|z| Some(z.disksize_bytes as f64)),
    },
    MetricDef {
        name: "zpage_zram_initialized",
        kind: GAUGE,
        help: "1 when the zram device is initialised (initstate).",
        source: Source::Zram(|z| Some(flag(z.initialised))),
    },
    MetricDef {
        name: "zpage_zram_orig_data_bytes",
        kind: GAUGE,
        help: "Uncompressed size of the data stored in zram (mm_stat orig_data_size).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.orig_data_size as f64)),
    },
    MetricDef {
        name: "zpage_zram_compr_data_bytes",
        kind: GAUGE,
        help: "Compressed size of the data stored in zram (mm_stat compr_data_size).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.compr_data_size as f64)),
    },
    MetricDef {
        name: "zpage_zram_mem_used_bytes",
        kind: GAUGE,
        help: "RAM used by zram now, allocator overhead included (mm_stat mem_used_total).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.mem_used_total as f64)),
    },
    MetricDef {
        name: "zpage_zram_mem_limit_bytes",
        kind: GAUGE,
        help: "Limit on the RAM zram may use, 0 when unlimited (mm_stat mem_limit).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.mem_limit as f64)),
    },
    MetricDef {
        name: "zpage_zram_mem_used_max_bytes",
        kind: GAUGE,
        help: "Peak RAM used by zram since reset (mm_stat mem_used_max).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.mem_used_max as f64)),
    },
    MetricDef {
        name: "zpage_zram_same_pages",
        kind: GAUGE,
        help: "Pages filled with one repeated word, stored without RAM (mm_stat same_pages).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.same_pages as f64)),
    },
    MetricDef {
        name: "zpage_zram_huge_pages",
        kind: GAUGE,
        help: "Incompressible pages stored uncompressed (mm_stat huge_pages).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.huge_pages as f64)),
    },
    MetricDef {
        name: "zpage_zram_huge_pages_stored_total",
        kind: COUNTER,
        help: "Pages stored uncompressed since the device was initialised (mm_stat huge_pages_since).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.huge_pages_since as f64)),
    },
    MetricDef {
        name: "zpage_zram_compacted_pages_total",
        kind: COUNTER,
        help: "Pages freed by compaction (mm_stat pages_compacted).",
        source: Source::Zram(|z| z.mm_stat.map(|m| m.pages_compacted as f64)),
    },
    MetricDef {
        name: "zpage_zram_failed_reads_total",
        kind: COUNTER,
        help: "Failed zram reads (io_stat failed_reads).",
        source: Source::Zram(|z| z.io_stat.map(|i| i.failed_reads as f64)),
    },
    MetricDef {
        name: "zpage_zram_failed_writes_total",
        kind: COUNTER,
        help: "Failed zram writes (io_stat failed_writes).",
        source: Source::Zram(|z| z.io_stat.map(|i| i.failed_writes as f64)),
    },
    MetricDef {
        name: "zpage_zram_notify_free_pages_total",
        kind: COUNTER,
        help: "zram pages freed because their swap slot was freed (io_stat notify_free).",
        source: Source::Zram(|z| z.io_stat.map(|i| i.notify_free as f64)),
    },
    MetricDef {
        name: "zpage_zram_backing_dev_bytes",
        kind: GAUGE,
        help: "Data written back and held on the backing device now (bd_stat bd_count).",
        source: Source::Zram(|z| z.bd_stat.map(|b| (b.bd_count * ZRAM_BD_UNIT_BYTES) as f64)),
    },
    MetricDef {
        name: "zpage_zram_backing_dev_read_bytes_total",
        kind: COUNTER,
        help: "Bytes read back from the backing device (bd_stat bd_reads).",
        source: Source::Zram(|z| z.bd_stat.map(|b| (b.bd_reads * ZRAM_BD_UNIT_BYTES) as f64)),
    },
    MetricDef {
        name: "zpage_zram_backing_dev_written_bytes_total",
        kind: COUNTER,
        help: "Bytes written back to the backing device (bd_stat bd_writes).",
        source: Source::Zram(|z| z.bd_stat.map(|b| (b.bd_writes * ZRAM_BD_UNIT_BYTES) as f64)),
    },
    MetricDef {
        name: "zpage_zram_writeback_limit_bytes",
        kind: GAUGE,
        help: "Writeback budget left (writeback_limit, when writeback_limit_enable is 1).",
        source: Source::Zram(|z| z.writeback_limit_bytes.map(|b| b as f64)),
    },
    MetricDef {
        name: "zpage_zram_info",
        kind: GAUGE,
        help: "zram device configuration: compression algorithm, recompression algorithms by priority, backing device (value 1).",
        source: Source::ZramLabelled(|z| {
            vec![(
                vec![
                    ("algorithm", z.algorithm.clone().unwrap_or_default()),
                    ("recompression_algorithms", z.recompression_algorithms.join(",")),
                    ("backing_dev", z.backing_dev.clone().unwrap_or_default()),
                ],
                1.0,
            )]
        }),
    },
    MetricDef {
        name: "zpage_zram_kernel_feature",
        kind: GAUGE,
        help: "1 when this kernel's zram has the feature (writeback: CONFIG_ZRAM_WRITEBACK, recompression: CONFIG_ZRAM_MULTI_COMP, idle: idle marking, algorithm_params: Linux 6.12+).",
        source: Source::ZramLabelled(|z| {
            [
                ("writeback", z.features.writeback),
                ("recompression", z.features.recompress),
                ("idle", z.features.idle),
                ("algorithm_params", z.features.algorithm_params),
            ]
            .into_iter()
            .map(|(feature, on)| (vec![("feature", feature.to_string())], flag(on)))
            .collect()
        }),
    },
    MetricDef {
        name: "zpage_swap_area_size_bytes",
        kind: GAUGE,
        help: "Size of the active swap area (/proc/swaps).",
        source: Source::SwapArea(|s| s.size_bytes as f64),
    },
    MetricDef {
        name: "zpage_swap_area_used_bytes",
        kind: GAUGE,
        help: "Used part of the active swap area (/proc/swaps).",
        source: Source::SwapArea(|s| s.used_bytes as f64),
    },
    MetricDef {
        name: "zpage_swap_area_priority",
        kind: GAUGE,
        help: "Priority of the active swap area; higher is used first (/proc/swaps).",
        source: Source::SwapArea(|s| f64::from(s.priority)),
    },
    MetricDef {
        name: "zpage_zswap_enabled",
        kind: GAUGE,
        help: "1 when zswap is enabled (module parameter enabled).",
        source: Source::Machine(|s| zswap_flag(s, "enabled")),
    },
    MetricDef {
        name: "zpage_zswap_shrinker_enabled",
        kind: GAUGE,
        help: "1 when zswap's shrinker is enabled (module parameter shrinker_enabled).",
        source: Source::Machine(|s| zswap_flag(s, "shrinker_enabled")),
    },
    MetricDef {
        name: "zpage_zswap_max_pool_ratio",
        kind: GAUGE,
        help: "zswap pool limit as a share of RAM, 0-1 (max_pool_percent / 100).",
        source: Source::Machine(|s| zswap_percent_as_ratio(s, "max_pool_percent")),
    },
    MetricDef {
        name: "zpage_zswap_accept_threshold_ratio",
        kind: GAUGE,
        help: "zswap accepts pages again below this share of its limit, 0-1 (accept_threshold_percent / 100).",
        source: Source::Machine(|s| zswap_percent_as_ratio(s, "accept_threshold_percent")),
    },
    MetricDef {
        name: "zpage_zswap_info",
        kind: GAUGE,
        help: "zswap configuration: compressor and allocator (value 1).",
        source: Source::Machine(|s| {
            let Some(compressor) = zswap_parameter(s, "compressor") else {
                return Vec::new();
            };
            let zpool = zswap_parameter(s, "zpool").unwrap_or_else(|| "zsmalloc".into());
            vec![(vec![("compressor", compressor), ("zpool", zpool)], 1.0)]
        }),
    },
    MetricDef {
        name: "zpage_zswap_stored_pages_total",
        kind: COUNTER,
        help: "Pages stored into zswap (vmstat zswpout).",
        source: Source::Machine(|s| one(s.zswap.zswpout.map(|v| v as f64))),
    },
    MetricDef {
        name: "zpage_zswap_loaded_pages_total",
        kind: COUNTER,
        help: "Pages loaded back from zswap (vmstat zswpin).",
        source: Source::Machine(|s| one(s.zswap.zswpin.map(|v| v as f64))),
    },
    MetricDef {
        name: "zpage_zswap_written_back_pages_total",
        kind: COUNTER,
        help: "Pages written back from zswap to the swap device (vmstat zswpwb).",
        source: Source::Machine(|s| one(s.zswap.zswpwb.map(|v| v as f64))),
    },
    MetricDef {
        name: "zpage_zswap_debugfs_readable",
        kind: GAUGE,
        help: "1 when zswap's debugfs counters could be read (they need root and a mounted debugfs).",
        source: Source::Machine(|s| {
            one(Some(flag(matches!(
                s.zswap.debugfs,
                DebugfsCounters::Readable { .. }
            ))))
        }),
    },
    MetricDef {
        name: "zpage_zswap_pool_limit_hit_total",
        kind: COUNTER,
        help: "Times the zswap pool reached its limit (debugfs pool_limit_hit).",
        source: Source::Machine(|s| debugfs(s, "pool_limit_hit")),
    },
    MetricDef {
        name: "zpage_zswap_rejected_pages_total",
        kind: COUNTER,
        help: "Pages zswap refused, by reason (debugfs reject_*).",
        source: Source::Machine(|s| {
            ZSWAP_REJECT_REASONS
                .iter()
                .flat_map(|reason| {
                    debugfs(s, &format!("reject_{reason}"))
                        .into_iter()
                        .map(|(_, v)| (vec![("reason", reason.to_string())], v))
                })
                .collect()
        }),
    },
    MetricDef {
        name: "zpage_zswap_decompress_failures_total",
        kind: COUNTER,
        help: "zswap decompressions that failed (debugfs decompress_fail).",
        source: Source::Machine(|s| debugfs(s, "decompress_fail")),
    },
    MetricDef {
        name: "zpage_zswap_stored_pages",
        kind: GAUGE,
        help: "Pages held in the zswap pool now (debugfs stored_pages).",
        source: Source::Machine(|s| debugfs(s, "stored_pages")),
    },
    MetricDef {
        name: "zpage_zswap_stored_incompressible_pages",
        kind: GAUGE,
        help: "Incompressible pages held raw in the zswap pool (debugfs stored_incompressible_pages).",
        source: Source::Machine(|s| debugfs(s, "stored_incompressible_pages")),
    },
    MetricDef {
        name: "zpage_zswap_same_filled_pages",
        kind: GAUGE,
        help: "Same-filled pages held by zswap (debugfs same_filled_pages, older kernels).",
        source: Source::Machine(|s| debugfs(s, "same_filled_pages")),
    },
    MetricDef {
        name: "zpage_cgroup_zswap_bytes",
        kind: GAUGE,
        help: "Compressed bytes a memory cgroup holds in zswap (memory.stat zswap, or memory.zswap.current).",
        source: Source::Cgroup(|c| c.zswap_bytes.or(c.zswap_current).map(|v| v as f64)),
    },
    MetricDef {
        name: "zpage_cgroup_zswapped_bytes",
        kind: GAUGE,
        help: "Uncompressed bytes a memory cgroup's zswap entries stand for (memory.stat zswapped).",
        source: Source::Cgroup(|c| c.zswapped_bytes.map(|v| v as f64)),
    },
    MetricDef {
        name: "zpage_cgroup_zswap_max_bytes",
        kind: GAUGE,
        help: "A memory cgroup's zswap limit (memory.zswap.max; absent when \"max\").",
        source: Source::Cgroup(|c| c.zswap_max.as_deref().and_then(|m| m.parse().ok())),
    },
    MetricDef {
        name: "zpage_vm_swappiness",
        kind: GAUGE,
        help: "vm.swappiness: how readily the kernel reclaims anonymous pages (0-200).",
        source: Source::Machine(|s| sysctl(s, "vm.swappiness")),
    },
    MetricDef {
        name: "zpage_vm_page_cluster",
        kind: GAUGE,
        help: "vm.page-cluster: swap readahead of 2^n pages (0 for zram).",
        source: Source::Machine(|s| sysctl(s, "vm.page-cluster")),
    },
    MetricDef {
        name: "zpage_vm_watermark_scale_factor",
        kind: GAUGE,
        help: "vm.watermark_scale_factor: distance between the reclaim watermarks, in 1/10000 of RAM.",
        source: Source::Machine(|s| sysctl(s, "vm.watermark_scale_factor")),
    },
    MetricDef {
        name: "zpage_vm_extfrag_threshold",
        kind: GAUGE,
        help: "vm.extfrag_threshold: fragmentation index above which the kernel compacts (0-1000).",
        source: Source::Machine(|s| sysctl(s, "vm.extfrag_threshold")),
    },
];

/// One sample of family `name`.
pub(super) fn sample(name: &str, labels: Vec<(&str, String)>, value: f64) -> Sample {
    Sample {
        name: name.to_string(),
        labels: labels
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        value: format_value(value),
    }
}

/// The families of `status`, in table order; families without samples are left out.
pub fn families(status: &KernelStatus) -> Vec<Family> {
    METRICS
        .iter()
        .map(|def| {
            let samples: Vec<Sample> = match &def.source {
                Source::Zram(get) => status
                    .zram
                    .iter()
                    .filter_map(|z| {
                        get(z).map(|v| sample(def.name, vec![("device", z.name.clone())], v))
                    })
                    .collect(),
                Source::ZramLabelled(get) => status
                    .zram
                    .iter()
                    .flat_map(|z| {
                        get(z).into_iter().map(|(labels, v)| {
                            let mut all = vec![("device", z.name.clone())];
                            all.extend(labels);
                            sample(def.name, all, v)
                        })
                    })
                    .collect(),
                Source::SwapArea(get) => status
                    .swaps
                    .iter()
                    .map(|s| {
                        sample(
                            def.name,
                            vec![("device", s.path.clone()), ("type", s.kind.clone())],
                            get(s),
                        )
                    })
                    .collect(),
                Source::Cgroup(get) => status
                    .zswap
                    .cgroups
                    .iter()
                    .filter_map(|c| {
                        get(c).map(|v| sample(def.name, vec![("cgroup", c.path.clone())], v))
                    })
                    .collect(),
                Source::Machine(get) => get(status)
                    .into_iter()
                    .map(|(labels, v)| sample(def.name, labels, v))
                    .collect(),
            };
            Family {
                name: def.name.to_string(),
                help: Some(def.help.to_string()),
                kind: def.kind.to_string(),
                samples,
            }
        })
        .filter(|f| !f.samples.is_empty())
        .collect()
}

/// Every metric name the table can produce (documentation and tests).
pub fn metric_names() -> Vec<&'static str> {
    METRICS.iter().map(|m| m.name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions() {
        for def in METRICS {
            assert!(def.name.starts_with("zpage_"), "{}", def.name);
            assert_eq!(
                def.kind == COUNTER,
                def.name.ends_with("_total"),
                "{}",
                def.name
            );
            assert!(
                !def.name.contains("percent"),
                "{}: use a 0-1 ratio",
                def.name
            );
            assert!(!def.name.starts_with("node_"), "{}", def.name);
            assert!(
                def.help.ends_with('.') || def.help.ends_with(')'),
                "{}",
                def.name
            );
        }
        let mut names = metric_names();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), METRICS.len(), "a name is in the table twice");
    }
}
