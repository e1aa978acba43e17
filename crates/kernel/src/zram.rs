//! zram devices through their sysfs attributes (`/sys/block/zramN`) and
//! block devices (`/dev/zramN`).

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{parse_u64, read_file, read_trimmed, write_file, KernelError, Result};

const SYS_BLOCK: &str = "/sys/block";
const ZRAM_CONTROL: &str = "/sys/class/zram-control";
const ZRAM_PAGE: usize = 4096;
/// Pages written per `pwrite` by [`ZramDevice::write_pages`] (1 MiB).
const WRITE_CHUNK_PAGES: usize = 256;

/// One zram device, `/sys/block/zram<index>` and `/dev/zram<index>`.
///
/// A device can also live under another sysfs root ([`ZramDevice::list_in`]):
/// a tree of plain files standing in for attributes this kernel lacks
/// (writeback, recompression), so the policy code is tested against them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZramDevice {
    index: u32,
    sys_dir: PathBuf,
}

/// `/sys/block/zramN/mm_stat`: memory use of a device. All sizes in bytes,
/// counts in pages. Field names are the kernel's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmStat {
    /// Uncompressed size of the data stored (bytes).
    pub orig_data_size: u64,
    /// Compressed size of the data stored (bytes).
    pub compr_data_size: u64,
    /// Memory used by the device, allocator overhead included (bytes).
    pub mem_used_total: u64,
    /// Limit on `mem_used_total`, 0 when unlimited (bytes).
    pub mem_limit: u64,
    /// Peak of `mem_used_total` since reset (bytes).
    pub mem_used_max: u64,
    /// Pages filled with one repeated word, stored without allocation (pages).
    pub same_pages: u64,
    /// Pages freed by compaction (pages).
    pub pages_compacted: u64,
    /// Pages stored uncompressed because they did not compress (pages).
    pub huge_pages: u64,
    /// Pages stored as huge since the device was initialised (pages).
    pub huge_pages_since: u64,
}

impl MmStat {
    /// Parses the content of `mm_stat`. Older kernels print fewer fields;
    /// the missing ones stay 0.
    pub fn parse(text: &str) -> Result<MmStat> {
        let values = parse_fields(Path::new("mm_stat"), text, 5)?;
        let get = |i: usize| values.get(i).copied().unwrap_or(0);
        Ok(MmStat {
            orig_data_size: get(0),
            compr_data_size: get(1),
            mem_used_total: get(2),
            mem_limit: get(3),
            mem_used_max: get(4),
            same_pages: get(5),
            pages_compacted: get(6),
            huge_pages: get(7),
            huge_pages_since: get(8),
        })
    }
}

/// `/sys/block/zramN/bd_stat`: the backing device (writeback). Counts are
/// in 4 KiB units, as the kernel prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BdStat {
    /// Pages currently stored on the backing device.
    pub bd_count: u64,
    /// Pages read back from the backing device since init.
    pub bd_reads: u64,
    /// Pages written to the backing device since init.
    pub bd_writes: u64,
}

impl BdStat {
    /// Parses the content of `bd_stat`.
    pub fn parse(text: &str) -> Result<BdStat> {
        let values = parse_fields(Path::new("bd_stat"), text, 3)?;
        Ok(BdStat {
            bd_count: values[0],
            bd_reads: values[1],
            bd_writes: values[2],
        })
    }
}

/// Bytes in one unit of `bd_stat` and `writeback_limit` (fixed by the kernel ABI).
pub const ZRAM_BD_UNIT_BYTES: u64 = 4096;

/// `/sys/block/zramN/io_stat`: error counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoStat {
    /// Failed reads.
    pub failed_reads: u64,
    /// Failed writes.
    pub failed_writes: u64,
    /// Non-page-size-aligned I/O requests (always 0 on recent kernels).
    pub invalid_io: u64,
    /// Pages freed because swap slots were freed.
    pub notify_free: u64,
}

impl IoStat {
    /// Parses the content of `io_stat`.
    pub fn parse(text: &str) -> Result<IoStat> {
        let values = parse_fields(Path::new("io_stat"), text, 3)?;
        let get = |i: usize| values.get(i).copied().unwrap_or(0);
        Ok(IoStat {
            failed_reads: get(0),
            failed_writes: get(1),
            invalid_io: get(2),
            notify_free: get(3),
        })
    }
}

fn parse_fields(path: &Path, text: &str, at_least: usize) -> Result<Vec<u64>> {
    let values: Vec<u64> = text
        .split_whitespace()
        .map(|field| parse_u64(path, field))
        .collect::<Result<_>>()?;
    if values.len() < at_least {
        return Err(KernelError::Parse {
            path: path.to_path_buf(),
            content: text.trim().to_string(),
            problem: format!("expected at least {at_least} numbers"),
        });
    }
    Ok(values)
}

/// Parses `comp_algorithm` content such as `lzo [lzo-rle] lz4` into
/// (all algorithms, the selected one).
pub fn parse_algorithms(text: &str) -> (Vec<String>, Option<String>) {
    let mut all = Vec::new();
    let mut current = None;
    for word in text.split_whitespace() {
        if let Some(name) = word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
            current = Some(name.to_string());
            all.push(name.to_string());
        } else {
            all.push(word.to_string());
        }
    }
    (all, current)
}

/// Parses `recomp_algorithm` content: one `#PRIO: algo algo [selected]` line
/// per priority; returns the selected algorithm of each, in priority order.
pub fn parse_recompression_algorithms(text: &str) -> Vec<String> {
    let mut found: Vec<(u32, String)> = text
        .lines()
        .filter_map(|line| {
            let (priority, algorithms) = line.trim().strip_prefix('#')?.split_once(':')?;
            let priority = priority.trim().parse().ok()?;
            let selected = parse_algorithms(algorithms).1?;
            Some((priority, selected))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, algorithm)| algorithm).collect()
}

fn zram_module_loaded() -> bool {
    Path::new(ZRAM_CONTROL).exists() || Path::new("/sys/module/zram").exists()
}

impl ZramDevice {
    /// Every zram device present, by index.
    pub fn list() -> Result<Vec<ZramDevice>> {
        Self::list_in(Path::new(SYS_BLOCK))
    }

    /// Every `zramN` directory under `sys_block` (normally `/sys/block`).
    pub fn list_in(sys_block: &Path) -> Result<Vec<ZramDevice>> {
        let entries =
            std::fs::read_dir(sys_block).map_err(|e| KernelError::io(sys_block, "list", e))?;
        let mut devices: Vec<ZramDevice> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let index = name.strip_prefix("zram")?.parse::<u32>().ok()?;
                Some(ZramDevice {
                    index,
                    sys_dir: entry.path(),
                })
            })
            .collect();
        devices.sort_by_key(|d| d.index);
        Ok(devices)
    }

    fn at(index: u32) -> ZramDevice {
        ZramDevice {
            index,
            sys_dir: PathBuf::from(format!("{SYS_BLOCK}/zram{index}")),
        }
    }

    /// The existing device `zram<index>`.
    pub fn open(index: u32) -> Result<ZramDevice> {
        let device = ZramDevice::at(index);
        if device.sys_dir().exists() {
            Ok(device)
        } else if !zram_module_loaded() {
            Err(KernelError::ZramModuleNotLoaded)
        } else {
            Err(KernelError::NoSuchZramDevice { index })
        }
    }

    /// Device index (N of zramN).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Device name, e.g. `zram0`.
    pub fn name(&self) -> String {
        format!("zram{}", self.index)
    }

    /// Block device path, e.g. `/dev/zram0`.
    pub fn dev_path(&self) -> PathBuf {
        PathBuf::from(format!("/dev/zram{}", self.index))
    }

    /// Sysfs directory, e.g. `/sys/block/zram0`.
    pub fn sys_dir(&self) -> PathBuf {
        self.sys_dir.clone()
    }

    /// Path of one sysfs attribute of this device.
    pub fn attr_path(&self, attribute: &str) -> PathBuf {
        self.sys_dir().join(attribute)
    }

    /// True when the device offers this sysfs attribute (feature detection).
    pub fn has_attr(&self, attribute: &str) -> bool {
        self.attr_path(attribute).exists()
    }

    fn read_attr(&self, attribute: &str) -> Result<String> {
        read_trimmed(self.attr_path(attribute))
    }

    fn write_attr(&self, attribute: &str, value: &str) -> Result<()> {
        write_file(self.attr_path(attribute), value)
    }

    /// Creates a new device through `/sys/class/zram-control/hot_add`.
    pub fn hot_add() -> Result<ZramDevice> {
        if !zram_module_loaded() {
            return Err(KernelError::ZramModuleNotLoaded);
        }
        let path = Path::new(ZRAM_CONTROL).join("hot_add");
        let text = read_trimmed(&path)?;
        let index = parse_u64(&path, &text)?;
        let index = u32::try_from(index).map_err(|_| KernelError::Parse {
            path: path.clone(),
            content: text.clone(),
            problem: "device index out of range".into(),
        })?;
        Ok(ZramDevice::at(index))
    }

    /// Removes the device through `/sys/class/zram-control/hot_remove`
    /// (the kernel refuses while it is in use).
    pub fn hot_remove(self) -> Result<()> {
        if let Some(reason) = self.in_use_reason()? {
            if !reason.starts_with("initialised") {
                return Err(self.busy(reason));
            }
        }
        let path = Path::new(ZRAM_CONTROL).join("hot_remove");
        write_file(&path, &self.index.to_string()).map_err(|e| match e {
            KernelError::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                self.busy("the kernel reports it busy (open by a process)".into())
            }
            other => other,
        })
    }

    fn busy(&self, reason: String) -> KernelError {
        KernelError::DeviceBusy {
            device: self.name(),
            fix: format!(
                "run `swapoff {dev}` / `umount {dev}` / stop the program holding it, then `echo 1 > {reset}` (this discards its data), or use another device (`zpage kernel status` lists them)",
                dev = self.dev_path().display(),
                reset = self.attr_path("reset").display()
            ),
            reason,
        }
    }

    /// Why the device may not be touched: initialised (disksize > 0 /
    /// initstate 1), an active swap device (/proc/swaps), mounted
    /// (/proc/mounts) or held by another device (holders). `None` when free.
    pub fn in_use_reason(&self) -> Result<Option<String>> {
        let dev = self.dev_path();
        let dev_str = dev.to_string_lossy().to_string();
        if let Ok(swaps) = read_file("/proc/swaps") {
            if swaps
                .lines()
                .skip(1)
                .any(|line| line.split_whitespace().next() == Some(dev_str.as_str()))
            {
                return Ok(Some(format!(
                    "active swap device in /proc/swaps ({dev_str})"
                )));
            }
        }
        if let Ok(mounts) = read_file("/proc/mounts") {
            if let Some(line) = mounts
                .lines()
                .find(|line| line.split_whitespace().next() == Some(dev_str.as_str()))
            {
                let mount_point = line.split_whitespace().nth(1).unwrap_or("?");
                return Ok(Some(format!("mounted on {mount_point} (/proc/mounts)")));
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.attr_path("holders")) {
            let holders: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect();
            if !holders.is_empty() {
                return Ok(Some(format!("held by {}", holders.join(", "))));
            }
        }
        let initstate = self.read_attr("initstate")?;
        let disksize = self.disksize()?;
        if initstate == "1" || disksize > 0 {
            return Ok(Some(format!("initialised with disksize {disksize} bytes")));
        }
        Ok(None)
    }

    /// All compression algorithms the device offers.
    pub fn algorithms(&self) -> Result<Vec<String>> {
        Ok(parse_algorithms(&self.read_attr("comp_algorithm")?).0)
    }

    /// The selected compression algorithm.
    pub fn current_algorithm(&self) -> Result<String> {
        let path = self.attr_path("comp_algorithm");
        let text = read_trimmed(&path)?;
        parse_algorithms(&text).1.ok_or_else(|| KernelError::Parse {
            path,
            content: text,
            problem: "no [selected] algorithm".into(),
        })
    }

    /// Uncompressed capacity in bytes (0 when not initialised).
    pub fn disksize(&self) -> Result<u64> {
        let path = self.attr_path("disksize");
        parse_u64(&path, &read_trimmed(&path)?)
    }

    /// True when `initstate` is 1.
    pub fn is_initialised(&self) -> Result<bool> {
        Ok(self.read_attr("initstate")? == "1")
    }

    /// Checks that `algorithm` is one the kernel offers for this device.
    pub fn check_algorithm(&self, algorithm: &str) -> Result<()> {
        let available = self.algorithms()?;
        if available.iter().any(|a| a == algorithm) {
            Ok(())
        } else {
            Err(KernelError::UnknownAlgorithm {
                device: self.name(),
                algorithm: algorithm.to_string(),
                available: available.join(" "),
            })
        }
    }

    /// Resets (the kernel refuses if it is in use), then sets the
    /// algorithm and disksize. Refuses with [`KernelError::DeviceBusy`] if the
    /// device is in use, initialised included: reset it first.
    pub fn configure(&self, algorithm: &str, disksize_bytes: u64) -> Result<()> {
        if let Some(reason) = self.in_use_reason()? {
            return Err(self.busy(reason));
        }
        self.check_algorithm(algorithm)?;
        if disksize_bytes == 0 || !disksize_bytes.is_multiple_of(ZRAM_PAGE as u64) {
            return Err(KernelError::config(
                format!("{}.disksize", self.name()),
                format!("{disksize_bytes} bytes is not a positive multiple of 4096"),
                "give a size such as \"512M\" or a fraction of RAM such as 0.25",
            ));
        }
        self.reset()?;
        self.write_attr("comp_algorithm", algorithm)?;
        self.write_attr("disksize", &disksize_bytes.to_string())
    }

    /// Sets `algorithm_params` (e.g. `level=3`); fails if the kernel lacks it.
    pub fn set_algorithm_params(&self, params: &str) -> Result<()> {
        if !self.has_attr("algorithm_params") {
            return Err(KernelError::Unsupported {
                feature: "zram algorithm_params".into(),
                missing: format!(
                    "{} (Linux 6.12+)",
                    self.attr_path("algorithm_params").display()
                ),
            });
        }
        self.write_attr("algorithm_params", params)
    }

    /// Sets the compressed-memory limit in bytes (0 = unlimited).
    pub fn set_mem_limit(&self, bytes: u64) -> Result<()> {
        self.write_attr("mem_limit", &bytes.to_string())
    }

    /// Writes whole pages sequentially from offset 0 into `/dev/zramN`
    /// (1 MiB `pwrite`s), then fsyncs. Returns the bytes written.
    pub fn write_pages<'a>(&self, pages: impl IntoIterator<Item = &'a [u8; 4096]>) -> Result<u64> {
        let mut writer = self.page_writer()?;
        let mut buffer: Vec<[u8; 4096]> = Vec::with_capacity(WRITE_CHUNK_PAGES);
        for page in pages {
            buffer.push(*page);
            if buffer.len() == WRITE_CHUNK_PAGES {
                writer.write(&buffer)?;
                buffer.clear();
            }
        }
        writer.write(&buffer)?;
        writer.finish()
    }

    /// Opens `/dev/zramN` (exclusively) to write pages from offset 0, a batch
    /// at a time: any amount of data goes in with bounded memory.
    pub fn page_writer(&self) -> Result<ZramPageWriter> {
        let path = self.dev_path();
        let capacity = self.disksize()?;
        if capacity == 0 {
            return Err(KernelError::DeviceBusy {
                device: self.name(),
                reason: "not initialised (disksize 0)".into(),
                fix: "configure it first (ZramDevice::configure or `zpage kernel apply`)".into(),
            });
        }
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_EXCL)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EBUSY) => {
                    self.busy("open exclusively by another user (swap, mount or a program)".into())
                }
                _ => KernelError::io(&path, "open for writing", e),
            })?;
        Ok(ZramPageWriter {
            file,
            path,
            capacity,
            offset: 0,
        })
    }

    /// Current `mm_stat`.
    pub fn mm_stat(&self) -> Result<MmStat> {
        let path = self.attr_path("mm_stat");
        MmStat::parse(&read_file(&path)?).map_err(|e| with_path(e, &path))
    }

    /// Current `bd_stat`; `None` when the kernel has no writeback (no such file).
    pub fn bd_stat(&self) -> Result<Option<BdStat>> {
        let path = self.attr_path("bd_stat");
        if !path.exists() {
            return Ok(None);
        }
        BdStat::parse(&read_file(&path)?)
            .map(Some)
            .map_err(|e| with_path(e, &path))
    }

    /// The backing device for writeback; `None` when none is set or the
    /// kernel has no writeback.
    pub fn backing_dev(&self) -> Result<Option<String>> {
        if !self.has_attr("backing_dev") {
            return Ok(None);
        }
        let text = self.read_attr("backing_dev")?;
        Ok((!text.is_empty() && text != "none").then_some(text))
    }

    /// Recompression algorithms by priority (`recomp_algorithm`: `#1: lzo [zstd]`
    /// lines, the selected one in brackets); empty when none is set or the
    /// kernel has no recompression.
    pub fn recompression_algorithms(&self) -> Result<Vec<String>> {
        if !self.has_attr("recomp_algorithm") {
            return Ok(Vec::new());
        }
        Ok(parse_recompression_algorithms(
            &self.read_attr("recomp_algorithm")?,
        ))
    }

    /// `writeback_limit` in bytes when `writeback_limit_enable` is 1.
    pub fn writeback_limit_bytes(&self) -> Result<Option<u64>> {
        if !self.has_attr("writeback_limit_enable")
            || self.read_attr("writeback_limit_enable")? != "1"
        {
            return Ok(None);
        }
        let path = self.attr_path("writeback_limit");
        Ok(Some(
            parse_u64(&path, &read_trimmed(&path)?)?.saturating_mul(ZRAM_BD_UNIT_BYTES),
        ))
    }

    /// Writes `value` to one of the device's trigger or setting attributes
    /// (`idle`, `writeback`, `recompress`, `writeback_limit`, ...).
    pub fn write_attribute(&self, attribute: &str, value: &str) -> Result<()> {
        self.write_attr(attribute, value)
    }

    /// Current `io_stat`.
    pub fn io_stat(&self) -> Result<IoStat> {
        let path = self.attr_path("io_stat");
        IoStat::parse(&read_file(&path)?).map_err(|e| with_path(e, &path))
    }

    /// Resets the device: frees its memory and sets disksize to 0. The
    /// kernel refuses (EBUSY) while it is swapped on or mounted.
    pub fn reset(&self) -> Result<()> {
        self.write_attr("reset", "1").map_err(|e| match e {
            KernelError::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                self.busy("the kernel refused the reset: the device is open".into())
            }
            other => other,
        })
    }
}

/// Writes pages into a zram device in order (see [`ZramDevice::page_writer`]).
#[derive(Debug)]
pub struct ZramPageWriter {
    file: std::fs::File,
    path: PathBuf,
    capacity: u64,
    offset: u64,
}

impl ZramPageWriter {
    /// Writes `pages` after the ones already written.
    pub fn write(&mut self, pages: &[[u8; 4096]]) -> Result<()> {
        let bytes = pages.as_flattened();
        if bytes.is_empty() {
            return Ok(());
        }
        if self.offset + bytes.len() as u64 > self.capacity {
            return Err(KernelError::Io {
                path: self.path.clone(),
                action: "write".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!(
                        "data would exceed disksize {} bytes: configure a larger disksize",
                        self.capacity
                    ),
                ),
            });
        }
        self.file
            .write_all_at(bytes, self.offset)
            .map_err(|e| KernelError::io(&self.path, "write", e))?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Flushes to the device; returns the bytes written.
    pub fn finish(self) -> Result<u64> {
        self.file
            .sync_all()
            .map_err(|e| KernelError::io(&self.path, "fsync", e))?;
        Ok(self.offset)
    }
}

fn with_path(error: KernelError, path: &Path) -> KernelError {
    match error {
        KernelError::Parse {
            content, problem, ..
        } => KernelError::Parse {
            path: path.to_path_buf(),
            content,
            problem,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mm_stat_of_recent_and_older_kernels() {
        let recent =
            "   65536     1234    12288        0    12288        3        0        1        1\n";
        let stat = MmStat::parse(recent).unwrap();
        assert_eq!(stat.orig_data_size, 65536);
        assert_eq!(stat.same_pages, 3);
        assert_eq!(stat.huge_pages_since, 1);
        let older = "4096 100 8192 0 8192 1 0\n";
        let stat = MmStat::parse(older).unwrap();
        assert_eq!(stat.pages_compacted, 0);
        assert_eq!(stat.huge_pages, 0);
        assert!(MmStat::parse("1 2").is_err());
        assert!(MmStat::parse("a b c d e").is_err());
    }

    #[test]
    fn parses_bd_stat_and_recompression_algorithms() {
        let bd = BdStat::parse("       3        1        9\n").unwrap();
        assert_eq!((bd.bd_count, bd.bd_reads, bd.bd_writes), (3, 1, 9));
        assert!(BdStat::parse("1 2").is_err());
        assert_eq!(
            parse_recompression_algorithms("#1: lzo lzo-rle lz4 [zstd]\n#2: [lz4hc] 842\n"),
            ["zstd", "lz4hc"]
        );
        assert!(parse_recompression_algorithms("").is_empty());
    }

    #[test]
    fn parses_io_stat_and_algorithms() {
        let io = IoStat::parse("       0        2 0        7\n").unwrap();
        assert_eq!(io.failed_writes, 2);
        assert_eq!(io.notify_free, 7);
        let (all, current) = parse_algorithms("lzo [lzo-rle] lz4 \n");
        assert_eq!(all, ["lzo", "lzo-rle", "lz4"]);
        assert_eq!(current.as_deref(), Some("lzo-rle"));
    }
}
