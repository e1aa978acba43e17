//! A record of the pages a program faults on, in order
//! ([`BudgetConfig::fault_trace`], `zpage run --fault-trace FILE`), for
//! replaying a real program's access order against zpage and the kernel
//! alike (`zpage bench --workload trace`). At a budget far below what the
//! program uses, nearly every access to a page other than the last few
//! faults, so the record is the program's page access order with runs of
//! touches to the same few pages folded into one.
//!
//! **Async-signal-safety argument.** [`FaultTrace::record`] runs in the
//! fault path (a SIGBUS handler): it is one relaxed `fetch_add` and one
//! store into a shared file mapping made when the budget started, so it
//! allocates nothing, takes no lock and makes no system call.
//!
//! **The file.** Created new (mode 0600, never through a symbolic link: it
//! records where the program's memory is), mapped shared, sparse:
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | [`MAGIC`] |
//! | 8..16 | faults recorded (little-endian u64; more than the capacity when it filled up) |
//! | 16..24 | capacity in entries |
//! | 24..32 | zero |
//! | 32.. | one little-endian u64 per fault: the page's address, bit 0 set for a write |
//!
//! Only the process that made the budget records (`fault::resolve` checks):
//! a forked child's faults are another program's accesses.
#![allow(unsafe_code)]

use crate::config::BudgetConfig;
use crate::error::RegionError;
use crate::sys;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use zpage_codec::PAGE_SIZE;

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"ZPFTRAC1";
/// Header bytes before the first entry.
const HEADER_BYTES: usize = 32;
/// Entries a trace holds: 64 Mi (512 MiB of file at most, written as it
/// fills: a sparse file takes only what was recorded).
pub const TRACE_CAPACITY: usize = 1 << 26;
// The entries are page addresses with room for the write bit below them.
const _: () = assert!(PAGE_SIZE > 1 && FaultTrace::WRITE_BIT < PAGE_SIZE as u64);
// The header is whole u64s, so every entry is aligned.
const _: () = assert!(HEADER_BYTES.is_multiple_of(8));

/// The open record of one budget's faults.
#[derive(Debug)]
pub struct FaultTrace {
    /// The shared mapping of the whole file.
    base: *mut u64,
    len: usize,
}

// SAFETY: the mapping is only written through atomics (the count) and
// distinct entries claimed by `fetch_add`; it lives until `drop`.
unsafe impl Send for FaultTrace {}
// SAFETY: as above: concurrent `record`s claim distinct entries.
unsafe impl Sync for FaultTrace {}

impl FaultTrace {
    /// Bit 0 of an entry: the fault was a write.
    pub const WRITE_BIT: u64 = 1;

    /// Creates the file named by `config.fault_trace` (`None` when no trace
    /// is asked for).
    pub fn open(config: &BudgetConfig) -> Result<Option<FaultTrace>, RegionError> {
        config
            .fault_trace
            .as_deref()
            .map(|path| Self::create(path, TRACE_CAPACITY))
            .transpose()
    }

    fn create(path: &Path, capacity: usize) -> Result<FaultTrace, RegionError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| {
                RegionError::InvalidConfig(format!(
                    "fault_trace {}: {e}: give a path where no file is (a trace is never written over an existing file or through a link)",
                    path.display()
                ))
            })?;
        let len = HEADER_BYTES + capacity * 8;
        file.set_len(len as u64).map_err(|e| RegionError::Sys {
            call: "ftruncate (fault trace)",
            errno: e.to_string(),
        })?;
        let base = sys::mmap_shared_file(&file, len).map_err(|e| RegionError::Sys {
            call: "mmap (fault trace)",
            errno: e.to_string(),
        })?;
        let trace = FaultTrace {
            base: base.cast(),
            len,
        };
        // SAFETY: the header's first three words are inside the fresh
        // mapping, and nothing records before `open` returns.
        unsafe {
            trace.base.cast::<[u8; 8]>().write(MAGIC);
            trace.base.add(2).write((capacity as u64).to_le());
        }
        Ok(trace)
    }

    /// Word `i` of the file (the header's words first, then the entries).
    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.len / 8);
        // SAFETY: callers pass a word inside the live mapping, which is
        // page-aligned, so every word is aligned; the file is only ever
        // written through these atomics once `create` returns.
        unsafe { AtomicU64::from_ptr(self.base.add(i)) }
    }

    fn capacity(&self) -> usize {
        (self.len - HEADER_BYTES) / 8
    }

    /// Records a fault on the page at `page_addr`, in the process that made
    /// the budget (the caller checks). Async-signal-safe.
    pub fn record(&self, page_addr: usize, write: bool) {
        let n = self.word(1).fetch_add(1, Ordering::Relaxed) as usize;
        if n < self.capacity() {
            let entry = page_addr as u64 | if write { Self::WRITE_BIT } else { 0 };
            // Entry n is this thread's alone: it claimed n above.
            self.word(HEADER_BYTES / 8 + n)
                .store(entry.to_le(), Ordering::Relaxed);
        }
    }

    /// Reads a trace file: its entries in order (page address, bit 0 set
    /// for a write), and whether it filled up (faults after the capacity
    /// were counted, not recorded).
    pub fn read(path: &Path) -> Result<(Vec<u64>, bool), String> {
        use std::io::Read;
        let failed = |e: std::io::Error| format!("{}: {e}", path.display());
        // Only the header and the entries recorded: the file is as long as
        // its capacity (512 MiB, sparse), whatever was recorded.
        let mut file = std::fs::File::open(path).map_err(failed)?;
        let mut header = [0u8; HEADER_BYTES];
        let words = |bytes: &[u8]| -> Vec<u64> {
            bytes
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .collect()
        };
        if file.read_exact(&mut header).is_err() || header[..8] != MAGIC {
            return Err(format!(
                "{}: not a zpage fault trace (make one with `zpage run --fault-trace FILE`)",
                path.display()
            ));
        }
        let (count, capacity) = match words(&header)[..] {
            [_, count, capacity, _] => (count, capacity),
            _ => unreachable!("the header is four words"),
        };
        let recorded = count.min(capacity) as usize;
        let mut bytes = Vec::with_capacity(recorded * 8);
        file.take(recorded as u64 * 8)
            .read_to_end(&mut bytes)
            .map_err(failed)?;
        if bytes.len() < recorded * 8 {
            return Err(format!(
                "{}: the header says {recorded} faults but the file holds {}: it was cut short",
                path.display(),
                bytes.len() / 8
            ));
        }
        Ok((words(&bytes), count > capacity))
    }
}

impl Drop for FaultTrace {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`; the budget is going away,
        // so no fault records any more.
        let _ = unsafe { sys::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_order_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("zpage-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t");
        let _ = std::fs::remove_file(&path);
        {
            let trace = FaultTrace::create(&path, 3).unwrap();
            trace.record(0x7000_0000, false);
            trace.record(0x7000_1000, true);
            trace.record(0x7000_0000, false);
            trace.record(0x7000_2000, false);
        }
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let (entries, full) = FaultTrace::read(&path).unwrap();
        assert_eq!(entries, vec![0x7000_0000, 0x7000_1001, 0x7000_0000]);
        assert!(full, "four faults in a trace of three entries");
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len((HEADER_BYTES + 8) as u64).unwrap();
        let short = FaultTrace::read(&path).unwrap_err();
        assert!(
            short.contains("says 3 faults but the file holds 1"),
            "{short}"
        );
        let again = FaultTrace::create(&path, 3).unwrap_err().to_string();
        assert!(again.contains("no file is"), "{again}");
        std::fs::write(&path, b"not a trace at all, 32 bytes lon").unwrap();
        assert!(FaultTrace::read(&path)
            .unwrap_err()
            .contains("not a zpage fault trace"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
