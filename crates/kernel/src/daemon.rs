//! `zpage kernel daemon`: the policy zram users ask for and nobody ships
//! (zram-generator issues #164 and #178): periodically mark idle pages, then
//! write back and recompress idle pages within budgets, when the kernel has
//! those features. Also logs memory-pressure (PSI) events and swap tier
//! fill levels.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::procfs;
use crate::status::ZramFeatures;
use crate::zram::ZramDevice;
use crate::Result;

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

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            interval: Duration::from_secs(10),
            idle_age: Duration::from_secs(3600),
            writeback_budget_pages: 25_600, // 100 MiB per tick
            recompress_budget_pages: 25_600,
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
    /// Pages marked idle.
    MarkedIdle {
        /// Device.
        device: String,
    },
    /// Idle pages written back.
    WroteBack {
        /// Device.
        device: String,
        /// Budget in pages.
        budget_pages: u64,
    },
    /// Idle pages recompressed.
    Recompressed {
        /// Device.
        device: String,
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
            DaemonEvent::MarkedIdle { device } => write!(f, "{device}: marked idle pages"),
            DaemonEvent::WroteBack { device, budget_pages } => write!(f, "{device}: wrote back idle pages (budget {budget_pages} pages)"),
            DaemonEvent::Recompressed { device, budget_pages } => write!(f, "{device}: recompressed idle pages (budget {budget_pages} pages)"),
            DaemonEvent::Pressure { some_stall_us, full_stall_us, some_avg10 } => write!(f, "memory pressure: tasks stalled {:.3} s (all tasks {:.3} s) in this tick; some avg10 {some_avg10:.2}%", *some_stall_us as f64 / 1e6, *full_stall_us as f64 / 1e6),
            DaemonEvent::TierFill { tier, priority, used_bytes, size_bytes, zram_mem_used_bytes } => {
                let percent = if *size_bytes > 0 { *used_bytes as f64 * 100.0 / *size_bytes as f64 } else { 0.0 };
                write!(f, "tier {tier} (priority {priority}): {percent:.1}% full ({} of {})", crate::status::human_bytes(*used_bytes), crate::status::human_bytes(*size_bytes))?;
                if let Some(m) = zram_mem_used_bytes {
                    write!(f, ", RAM used {}", crate::status::human_bytes(*m))?;
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
    last_pressure: Option<procfs::MemoryPressure>,
    elapsed_since_idle_mark: Duration,
    marked_once: bool,
}

impl Daemon {
    /// A daemon with `config`.
    pub fn new(config: DaemonConfig) -> Daemon {
        Daemon {
            config,
            last_pressure: None,
            elapsed_since_idle_mark: Duration::ZERO,
            marked_once: false,
        }
    }

    /// Capabilities of every zram device (logged at start).
    pub fn start(&mut self) -> Vec<DaemonEvent> {
        self.last_pressure = procfs::memory_pressure().ok();
        match ZramDevice::list() {
            Ok(devices) => devices
                .iter()
                .map(|d| DaemonEvent::Capabilities(capabilities(d)))
                .collect(),
            Err(e) => vec![DaemonEvent::Error {
                message: e.to_string(),
            }],
        }
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
        let devices = ZramDevice::list().unwrap_or_default();
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
            let can_writeback = caps.features.writeback && caps.backing_dev.is_some();
            if !caps.features.idle || !(can_writeback || caps.features.recompress) {
                // Marking idle is pointless when nothing acts on idle pages.
                continue;
            }
            if self.marked_once && due {
                // Pages still idle since the last mark are older than idle_age: act on them.
                if can_writeback {
                    events.push(
                        self.act(device, "writeback_limit_enable", "1")
                            .and_then(|_| {
                                self.act(
                                    device,
                                    "writeback_limit",
                                    &self.config.writeback_budget_pages.to_string(),
                                )
                            })
                            .and_then(|_| self.act(device, "writeback", "idle"))
                            .map(|_| DaemonEvent::WroteBack {
                                device: device.name(),
                                budget_pages: self.config.writeback_budget_pages,
                            })
                            .unwrap_or_else(|e| e),
                    );
                }
                if caps.features.recompress {
                    let command = format!(
                        "type=idle max_pages={}",
                        self.config.recompress_budget_pages
                    );
                    events.push(
                        self.act(device, "recompress", &command)
                            .map(|_| DaemonEvent::Recompressed {
                                device: device.name(),
                                budget_pages: self.config.recompress_budget_pages,
                            })
                            .unwrap_or_else(|e| e),
                    );
                }
            }
            if due {
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
        crate::write_file(device.attr_path(attribute), value).map_err(|e| DaemonEvent::Error {
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
