//! `zpage kernel daemon`: the policy zram users ask for and nobody ships
//! (zram only writes back or recompresses when told to): every `idle_age`
//! it marks all pages idle, and at the next marking writes back and
//! recompresses the pages still idle (or huge, as configured) within
//! budgets, where the kernel has those features, saying "not in this
//! kernel" where it does not. Also logs memory-pressure (PSI) events and
//! swap tier fill levels.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{KernelConfig, PageSelection};
use crate::procfs;
use crate::status::ZramFeatures;
use crate::zram::ZramDevice;
use crate::Result;

/// What the daemon does to one device's pages (from its `[[zram]]` entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePolicy {
    /// Pages written back, when writeback is wanted.
    pub writeback: Option<PageSelection>,
    /// Pages recompressed, when recompression is wanted.
    pub recompress: Option<PageSelection>,
}

impl DevicePolicy {
    /// Idle writeback and idle recompression: what the daemon does without a config.
    pub fn idle() -> DevicePolicy {
        DevicePolicy {
            writeback: Some(PageSelection::Idle),
            recompress: Some(PageSelection::Idle),
        }
    }
}

/// Daemon settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DaemonConfig {
    /// Time between ticks.
    pub interval: Duration,
    /// Pages untouched for this long count as idle (marking happens every `idle_age`).
    pub idle_age: Duration,
    /// Most pages written back per tick (kernel `writeback_limit` is set to this).
    pub writeback_budget_pages: u64,
    /// Most pages recompressed per tick (`max_pages=`).
    pub recompress_budget_pages: u64,
    /// Log a pressure event when memory stall time in one tick exceeds this (microseconds).
    pub pressure_threshold_us: u64,
}

impl DaemonConfig {
    /// The schedule and the per-device policies of a config file: its
    /// `[daemon]` section and, per `[[zram]]`, writeback when it has a
    /// `writeback_device` and recompression when it has `recompress_algorithms`.
    pub fn from_config(
        config: &KernelConfig,
    ) -> Result<(DaemonConfig, BTreeMap<u32, DevicePolicy>)> {
        let mut daemon = DaemonConfig::default();
        if let Some(schedule) = &config.daemon {
            daemon.interval = Duration::from_secs(schedule.interval_seconds().max(1));
            daemon.idle_age = Duration::from_secs(schedule.idle_after_seconds().max(1));
            let page = crate::zram::ZRAM_BD_UNIT_BYTES;
            if let Some(budget) = &schedule.writeback_budget {
                daemon.writeback_budget_pages =
                    budget.resolve("daemon.writeback_budget", 0)? / page;
            }
            if let Some(budget) = &schedule.recompress_budget {
                daemon.recompress_budget_pages =
                    budget.resolve("daemon.recompress_budget", 0)? / page;
            }
        }
        let policies = config
            .zram
            .iter()
            .enumerate()
            .map(|(i, z)| {
                let policy = DevicePolicy {
                    writeback: z
                        .writeback_device
                        .as_ref()
                        .map(|_| z.writeback.unwrap_or_default()),
                    recompress: (!z.recompress_algorithms.is_empty())
                        .then(|| z.recompress.unwrap_or_default()),
                };
                (config.zram_index(i), policy)
            })
            .collect();
        Ok((daemon, policies))
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            interval: Duration::from_secs(10),
            idle_age: Duration::from_secs(3600),
            writeback_budget_pages: 65_536, // 256 MiB per round
            recompress_budget_pages: 65_536,
            pressure_threshold_us: 100_000, // 0.1 s of stall per tick
        }
    }
}

/// What the kernel lets the daemon do for one device, and what is missing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCapabilities {
    /// Device name.
    pub device: String,
    /// Detected features.
    pub features: ZramFeatures,
    /// Backing device configured (writeback needs one).
    pub backing_dev: Option<String>,
    /// Exactly what is missing for idle writeback and recompression.
    pub missing: Vec<String>,
}

/// Inspects a device.
pub fn capabilities(device: &ZramDevice) -> DeviceCapabilities {
    let features = ZramFeatures::detect(device);
    let mut missing = Vec::new();
    let attr = |name: &str| device.attr_path(name).display().to_string();
    if !features.idle {
        missing.push(format!("idle marking: no {} (kernel without CONFIG_ZRAM_MEMORY_TRACKING / CONFIG_ZRAM_TRACK_ENTRY_ACTIME)", attr("idle")));
    }
    if !features.writeback {
        missing.push(format!(
            "idle/huge writeback: no {} and {} (kernel built without CONFIG_ZRAM_WRITEBACK)",
            attr("backing_dev"),
            attr("writeback")
        ));
    }
    let backing_dev = if features.writeback {
        std::fs::read_to_string(device.attr_path("backing_dev"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| s != "none" && !s.is_empty())
    } else {
        None
    };
    if features.writeback && backing_dev.is_none() {
        missing.push(format!(
            "writeback: no backing device set in {} (set it before disksize, e.g. a partition)",
            attr("backing_dev")
        ));
    }
    if !features.recompress {
        missing.push(format!(
            "recompression: no {} and {} (kernel built without CONFIG_ZRAM_MULTI_COMP)",
            attr("recomp_algorithm"),
            attr("recompress")
        ));
    }
    DeviceCapabilities {
        device: device.name(),
        features,
        backing_dev,
        missing,
    }
}

/// Something the daemon did or saw.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum DaemonEvent {
    /// At start: per-device capabilities.
    Capabilities(DeviceCapabilities),
    /// A configured action this kernel cannot do (logged once, at start).
    NotInKernel {
        /// Device.
        device: String,
        /// What, and the kernel option it lacks.
        what: String,
    },
    /// Pages marked idle.
    MarkedIdle {
        /// Device.
        device: String,
    },
    /// Pages written back.
    WroteBack {
        /// Device.
        device: String,
        /// Which pages (`idle`, `huge`, ...).
        pages: PageSelection,
        /// Budget in pages.
        budget_pages: u64,
    },
    /// Pages recompressed.
    Recompressed {
        /// Device.
        device: String,
        /// Which pages.
        pages: PageSelection,
        /// Budget in pages.
        budget_pages: u64,
    },
    /// Memory stall time above the threshold during the last tick.
    Pressure {
        /// Stall time of some task (microseconds) in the tick.
        some_stall_us: u64,
        /// Stall time of all tasks (microseconds) in the tick.
        full_stall_us: u64,
        /// avg10 of "some" (percent).
        some_avg10: f64,
    },
    /// Fill level of a swap tier.
    TierFill {
        /// Swap area or zram device.
        tier: String,
        /// Priority.
        priority: i32,
        /// Used bytes.
        used_bytes: u64,
        /// Size bytes.
        size_bytes: u64,
        /// RAM used by zram, when it is zram.
        zram_mem_used_bytes: Option<u64>,
    },
    /// An action failed (the daemon keeps going).
    Error {
        /// What failed.
        message: String,
    },
}

impl std::fmt::Display for DaemonEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DaemonEvent::Capabilities(c) => {
                if c.missing.is_empty() {
                    write!(f, "{}: idle marking, writeback (to {}) and recompression available", c.device, c.backing_dev.as_deref().unwrap_or("?"))
                } else {
                    write!(f, "{}: not available here: {}", c.device, c.missing.join("; "))
                }
            }
            DaemonEvent::NotInKernel { device, what } => write!(f, "{device}: {what} is not in this kernel: the config asks for it, the daemon skips it"),
            DaemonEvent::MarkedIdle { device } => write!(f, "{device}: marked every page idle"),
            DaemonEvent::WroteBack { device, pages, budget_pages } => write!(f, "{device}: wrote back {} pages (budget {budget_pages} pages)", pages.kernel_name()),
            DaemonEvent::Recompressed { device, pages, budget_pages } => write!(f, "{device}: recompressed {} pages (budget {budget_pages} pages)", pages.kernel_name()),
            DaemonEvent::Pressure { some_stall_us, full_stall_us, some_avg10 } => write!(f, "memory pressure: tasks stalled {:.3} s (all tasks {:.3} s) in this tick; some avg10 {some_avg10:.2}%", *some_stall_us as f64 / 1e6, *full_stall_us as f64 / 1e6),
            DaemonEvent::TierFill { tier, priority, used_bytes, size_bytes, zram_mem_used_bytes } => {
                let percent = if *size_bytes > 0 { *used_bytes as f64 * 100.0 / *size_bytes as f64 } else { 0.0 };
                write!(f, "tier {tier} (priority {priority}): {percent:.1}% full ({} of {})", zpage_units::format_bytes(*used_bytes), zpage_units::format_bytes(*size_bytes))?;
                if let Some(m) = zram_mem_used_bytes {
                    write!(f, ", RAM used {}", zpage_units::format_bytes(*m))?;
                }
                Ok(())
            }
            DaemonEvent::Error { message } => write!(f, "error: {message}"),
        }
    }
}

/// The daemon's state between ticks.
#[derive(Debug)]
pub struct Daemon {
    config: DaemonConfig,
    /// Per device index; devices without one get [`DevicePolicy::idle`].
    policies: BTreeMap<u32, DevicePolicy>,
    /// Where the zram devices are (`/sys/block`; a fake tree in tests).
    sys_block: PathBuf,
    last_pressure: Option<procfs::MemoryPressure>,
    elapsed_since_idle_mark: Duration,
    marked_once: bool,
}

impl Daemon {
    /// A daemon with `config`, acting on idle pages of every device.
    pub fn new(config: DaemonConfig) -> Daemon {
        Daemon::with_policies(config, BTreeMap::new(), Path::new("/sys/block"))
    }

    /// A daemon with per-device policies, on the devices under `sys_block`.
    pub fn with_policies(
        config: DaemonConfig,
        policies: BTreeMap<u32, DevicePolicy>,
        sys_block: &Path,
    ) -> Daemon {
        Daemon {
            config,
            policies,
            sys_block: sys_block.to_path_buf(),
            last_pressure: None,
            elapsed_since_idle_mark: Duration::ZERO,
            marked_once: false,
        }
    }

    fn devices(&self) -> Result<Vec<ZramDevice>> {
        ZramDevice::list_in(&self.sys_block)
    }

    fn policy(&self, device: &ZramDevice) -> DevicePolicy {
        if self.policies.is_empty() {
            DevicePolicy::idle()
        } else {
            self.policies
                .get(&device.index())
                .copied()
                .unwrap_or_default()
        }
    }

    /// Capabilities of every zram device, and what the config asks that the kernel lacks (logged at start).
    pub fn start(&mut self) -> Vec<DaemonEvent> {
        self.last_pressure = procfs::memory_pressure().ok();
        let devices = match self.devices() {
            Ok(devices) => devices,
            Err(e) => {
                return vec![DaemonEvent::Error {
                    message: e.to_string(),
                }]
            }
        };
        let mut events = Vec::new();
        for device in &devices {
            let caps = capabilities(device);
            let policy = self.policy(device);
            if !self.policies.is_empty() {
                if policy.writeback.is_some() && !caps.features.writeback {
                    events.push(DaemonEvent::NotInKernel {
                        device: device.name(),
                        what: "writeback (CONFIG_ZRAM_WRITEBACK)".into(),
                    });
                }
                if policy.recompress.is_some() && !caps.features.recompress {
                    events.push(DaemonEvent::NotInKernel {
                        device: device.name(),
                        what: "recompression (CONFIG_ZRAM_MULTI_COMP)".into(),
                    });
                }
            }
            events.push(DaemonEvent::Capabilities(caps));
        }
        events
    }

    /// One tick: pressure, fill levels, and the idle policy where the kernel allows it.
    pub fn tick(&mut self) -> Vec<DaemonEvent> {
        let mut events = Vec::new();
        if let Ok(now) = procfs::memory_pressure() {
            if let Some(before) = self.last_pressure {
                let some = now.some.total_us.saturating_sub(before.some.total_us);
                let full = now.full.total_us.saturating_sub(before.full.total_us);
                if some >= self.config.pressure_threshold_us {
                    events.push(DaemonEvent::Pressure {
                        some_stall_us: some,
                        full_stall_us: full,
                        some_avg10: now.some.avg10,
                    });
                }
            }
            self.last_pressure = Some(now);
        }
        let swaps = procfs::swaps().unwrap_or_default();
        let devices = self.devices().unwrap_or_default();
        for s in &swaps {
            let zram = devices
                .iter()
                .find(|d| d.dev_path().display().to_string() == s.path);
            events.push(DaemonEvent::TierFill {
                tier: s.path.clone(),
                priority: s.priority,
                used_bytes: s.used_bytes,
                size_bytes: s.size_bytes,
                zram_mem_used_bytes: zram
                    .and_then(|d| d.mm_stat().ok())
                    .map(|m| m.mem_used_total),
            });
        }
        self.elapsed_since_idle_mark += self.config.interval;
        let due = !self.marked_once || self.elapsed_since_idle_mark >= self.config.idle_age;
        for device in devices
            .iter()
            .filter(|d| d.is_initialised().unwrap_or(false))
        {
            let caps = capabilities(device);
            let policy = self.policy(device);
            let writeback = policy
                .writeback
                .filter(|_| caps.features.writeback && caps.backing_dev.is_some());
            let recompress = policy.recompress.filter(|_| caps.features.recompress);
            let uses_idle = [writeback, recompress]
                .iter()
                .flatten()
                .any(|p| matches!(p, PageSelection::Idle | PageSelection::HugeIdle));
            if writeback.is_none() && recompress.is_none() {
                continue;
            }
            if uses_idle && !caps.features.idle {
                continue;
            }
            if due && (self.marked_once || !uses_idle) {
                // Pages still idle since the last mark are older than idle_age: act on them.
                if let Some(pages) = writeback {
                    events.push(
                        self.act(device, "writeback_limit_enable", "1")
                            .and_then(|_| {
                                self.act(
                                    device,
                                    "writeback_limit",
                                    &self.config.writeback_budget_pages.to_string(),
                                )
                            })
                            .and_then(|_| self.act(device, "writeback", pages.kernel_name()))
                            .map(|_| DaemonEvent::WroteBack {
                                device: device.name(),
                                pages,
                                budget_pages: self.config.writeback_budget_pages,
                            })
                            .unwrap_or_else(|e| e),
                    );
                }
                if let Some(pages) = recompress {
                    let command = format!(
                        "type={} max_pages={}",
                        pages.kernel_name(),
                        self.config.recompress_budget_pages
                    );
                    events.push(
                        self.act(device, "recompress", &command)
                            .map(|_| DaemonEvent::Recompressed {
                                device: device.name(),
                                pages,
                                budget_pages: self.config.recompress_budget_pages,
                            })
                            .unwrap_or_else(|e| e),
                    );
                }
            }
            if due && uses_idle {
                events.push(
                    self.act(device, "idle", "all")
                        .map(|_| DaemonEvent::MarkedIdle {
                            device: device.name(),
                        })
                        .unwrap_or_else(|e| e),
                );
            }
        }
        if due {
            self.marked_once = true;
            self.elapsed_since_idle_mark = Duration::ZERO;
        }
        events
    }

    fn act(
        &self,
        device: &ZramDevice,
        attribute: &str,
        value: &str,
    ) -> std::result::Result<(), DaemonEvent> {
        device
            .write_attribute(attribute, value)
            .map_err(|e| DaemonEvent::Error {
                message: e.to_string(),
            })
    }

    /// Runs `start` then `tick` every interval, `ticks` times (forever when None),
    /// handing each event to `log`.
    pub fn run(&mut self, ticks: Option<u64>, mut log: impl FnMut(&DaemonEvent)) -> Result<()> {
        for event in self.start() {
            log(&event);
        }
        let mut done = 0u64;
        while ticks.is_none_or(|t| done < t) {
            std::thread::sleep(self.config.interval);
            for event in self.tick() {
                log(&event);
            }
            done += 1;
        }
        Ok(())
    }
}
