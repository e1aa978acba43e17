//! The same pages written into a zram device, once per algorithm the kernel
//! offers, so zram's own `mm_stat` stands beside zpage's figures.

use crate::analysis::Progress;
use crate::image::{PageSource, CHUNK_PAGES};
use crate::{AnalyzeError, Result};
use serde::Serialize;
use std::time::Instant;
use zpage_codec::PAGE_SIZE;
use zpage_kernel::zram::{MmStat, ZramDevice};
use zpage_kernel::KernelStateLock;

/// zram's view of the pages with one algorithm.
#[derive(Clone, Debug, Serialize)]
pub struct KernelResult {
    /// The zram algorithm (`lzo-rle`, `lz4`, ...).
    pub algorithm: String,
    /// `mm_stat` right after the pages were written, fields by their kernel names.
    #[serde(flatten)]
    pub mm_stat: MmStat,
    /// `orig_data_size / compr_data_size` (`None` when nothing is stored compressed).
    pub ratio: Option<f64>,
    /// `orig_data_size / mem_used_total`: what zram really saves (`None` when it uses no memory).
    pub effective_ratio: Option<f64>,
    /// Write speed into the device, compression included.
    pub write_mib_s: f64,
}

/// Restores the device however the comparison ends: reset, and removed if we added it.
struct DeviceGuard {
    device: Option<ZramDevice>,
    added_by_us: bool,
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(device) = self.device.take() {
            let _ = device.reset();
            if self.added_by_us {
                let _ = device.hot_remove();
            }
        }
    }
}

fn pick_device(requested: Option<u32>) -> Result<DeviceGuard> {
    if let Some(index) = requested {
        let device = ZramDevice::open(index)?;
        if let Some(reason) = device.in_use_reason()? {
            return Err(AnalyzeError::Invalid(format!(
                "{} is in use ({reason}); zpage will not touch it: pick a free device with --zram-device, or omit it to use a free or new one",
                device.name()
            )));
        }
        return Ok(DeviceGuard {
            device: Some(device),
            added_by_us: false,
        });
    }
    for device in ZramDevice::list()? {
        if device.in_use_reason()?.is_none() {
            return Ok(DeviceGuard {
                device: Some(device),
                added_by_us: false,
            });
        }
    }
    Ok(DeviceGuard {
        device: Some(ZramDevice::hot_add()?),
        added_by_us: true,
    })
}

/// Writes the pages of `source` into a free zram device once per algorithm (all the kernel
/// offers when `algorithms` is empty) and reads `mm_stat` after each. The
/// device is reset afterwards, and removed if it was added for this.
///
/// The caller holds the machine-wide [`KernelStateLock`] (so no other zpage
/// command or test changes zram meanwhile, and the caller can look at the
/// machine's state before and after under the same lock).
pub fn compare_with_zram(
    source: &mut dyn PageSource,
    algorithms: &[String],
    device: Option<u32>,
    _lock: &KernelStateLock,
    progress: &mut dyn FnMut(Progress),
) -> Result<(String, Vec<KernelResult>)> {
    if !zpage_kernel::is_root() {
        return Err(AnalyzeError::Invalid(
            "--kernel writes the pages into a zram device, which needs root: run as root, or drop --kernel".into(),
        ));
    }
    let total = source.total_pages();
    if total == 0 {
        return Ok((String::new(), Vec::new()));
    }
    let guard = pick_device(device)?;
    let device = guard.device.as_ref().expect("set until drop");
    let algorithms = if algorithms.is_empty() {
        device.algorithms()?
    } else {
        algorithms.to_vec()
    };
    const MIB: u64 = 1 << 20;
    let disksize = (total * PAGE_SIZE as u64).div_ceil(MIB) * MIB;
    let mut chunk = Vec::with_capacity(CHUNK_PAGES);
    let mut results = Vec::new();
    for algorithm in algorithms {
        progress(Progress::Phase {
            name: format!("zram {algorithm}"),
            total,
        });
        device.configure(&algorithm, disksize)?;
        source.rewind()?;
        let mut writer = device.page_writer()?;
        let mut written_pages = 0u64;
        let started = Instant::now();
        loop {
            chunk.clear();
            if source.next_chunk(&mut chunk, CHUNK_PAGES)? == 0 {
                break;
            }
            writer.write(&chunk)?;
            written_pages += chunk.len() as u64;
            progress(Progress::Advance {
                done: written_pages,
            });
        }
        let written = writer.finish()?;
        let elapsed = started.elapsed();
        let mm_stat = device.mm_stat()?;
        device.reset()?;
        let ratio = |denominator: u64| {
            (denominator > 0 && mm_stat.orig_data_size > 0)
                .then(|| mm_stat.orig_data_size as f64 / denominator as f64)
        };
        results.push(KernelResult {
            ratio: ratio(mm_stat.compr_data_size),
            effective_ratio: ratio(mm_stat.mem_used_total),
            write_mib_s: written as f64 / MIB as f64 / elapsed.as_secs_f64().max(1e-9),
            algorithm,
            mm_stat,
        });
    }
    Ok((device.name(), results))
}
