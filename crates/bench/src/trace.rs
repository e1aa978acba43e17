//! A real program's page access order, recorded by `zpage run
//! --fault-trace FILE` (`zpage_region::FaultTrace`), replayed over the
//! bench's memory (`zpage bench --workload trace --trace FILE`): the same
//! sequence of pages, read or written as the program did, on a zpage
//! region and in a kernel tier's cgroup alike.
//!
//! The program's addresses are numbered in the order they were first
//! touched, so its pages become pages `0..distinct` of the bench's memory
//! (each wrapping round when the memory is smaller). Its first touches
//! come first, as in the program; the memory is filled beforehand, so
//! there a first touch restores a page instead of making one.

use crate::error::BenchError;
use std::collections::HashMap;
use std::path::Path;
use zpage_region::{FaultTrace, PAGE_SIZE};

/// A recorded access order, as page numbers in the bench's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageTrace {
    /// Page of each touch (0 is the first page the program touched).
    pages: Vec<u32>,
    /// Whether each touch wrote (one bit per touch).
    writes: Vec<u64>,
    /// Pages the program touched.
    distinct: u64,
    /// The recording filled up: the program went on past its end.
    truncated: bool,
}

impl PageTrace {
    /// Reads a trace file.
    pub fn load(path: &Path) -> Result<PageTrace, BenchError> {
        let (entries, truncated) = FaultTrace::read(path).map_err(BenchError::Invalid)?;
        if entries.is_empty() {
            return Err(BenchError::Invalid(format!(
                "{}: the trace holds no fault: record it at a budget well below the program's memory",
                path.display()
            )));
        }
        Ok(Self::from_entries(&entries, truncated))
    }

    /// Numbers the pages of `entries` (page address, bit 0 set for a
    /// write) in the order they first appear.
    pub fn from_entries(entries: &[u64], truncated: bool) -> PageTrace {
        let mut numbers: HashMap<u64, u32> = HashMap::new();
        let mut pages = Vec::with_capacity(entries.len());
        let mut writes = vec![0u64; entries.len().div_ceil(64)];
        for (i, &entry) in entries.iter().enumerate() {
            let next = numbers.len() as u32;
            pages.push(*numbers.entry(entry / PAGE_SIZE as u64).or_insert(next));
            if entry & FaultTrace::WRITE_BIT != 0 {
                writes[i / 64] |= 1 << (i % 64);
            }
        }
        PageTrace {
            pages,
            writes,
            distinct: numbers.len() as u64,
            truncated,
        }
    }

    /// Touches recorded.
    pub fn len(&self) -> u64 {
        self.pages.len() as u64
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Pages the program touched.
    pub fn distinct_pages(&self) -> u64 {
        self.distinct
    }

    /// True when the program faulted past the recording's capacity.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Touch `n` (wrapping round the trace): its page (wrapping round
    /// `pages`) and whether it writes.
    #[inline]
    pub fn touch(&self, n: u64, pages: u64) -> (u64, bool) {
        let i = (n % self.len()) as usize;
        let write = self.writes[i / 64] >> (i % 64) & 1 != 0;
        (u64::from(self.pages[i]) % pages.max(1), write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_pages_by_first_touch_and_keeps_writes() {
        let t = PageTrace::from_entries(&[0x9000, 0x5001, 0x9000, 0x7000, 0x5000], false);
        assert_eq!(t.distinct_pages(), 3);
        let touches: Vec<_> = (0..6).map(|n| t.touch(n, 100)).collect();
        assert_eq!(
            touches,
            [
                (0, false),
                (1, true),
                (0, false),
                (2, false),
                (1, false),
                (0, false)
            ]
        );
        assert_eq!(t.touch(3, 2), (0, false), "page 2 wraps round 2 pages");
    }

    /// A region records its faults; the bench replays them in the order
    /// they were made.
    #[test]
    fn a_region_records_its_faults_and_the_bench_replays_them() {
        use crate::workload::{self, AnonMapping, PhaseInputs, PlainProbe, QuietObserver};
        use crate::{DataSource, WorkloadKind, WorkloadSpec};
        use zpage_region::{Region, RegionConfig};
        let dir = std::env::temp_dir().join(format!("zpage-bench-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("faults.trace");
        let pages = 256;
        let mut config = RegionConfig::new(pages * PAGE_SIZE, 64 * PAGE_SIZE);
        config.budget.fault_trace = Some(path.clone());
        {
            let region = Region::new(config).unwrap();
            let base = region.as_ptr();
            for page in 0..pages {
                // SAFETY: inside the region's mapping, which lives until the
                // end of this block; a volatile store faults the page in.
                unsafe { base.add(page * PAGE_SIZE).write_volatile(1) };
            }
            // Page 0 was evicted long ago: reading it faults again.
            // SAFETY: as above.
            assert_eq!(unsafe { base.read_volatile() }, 1);
        }
        let trace = PageTrace::load(&path).unwrap();
        assert!(!trace.truncated());
        assert_eq!(trace.distinct_pages(), pages as u64);
        assert_eq!(
            trace.len(),
            pages as u64 + 1,
            "every first touch and one restore"
        );
        assert_eq!(trace.touch(0, 1000), (0, true));
        assert_eq!(trace.touch(7, 1000), (7, true));
        assert_eq!(
            trace.touch(pages as u64, 1000),
            (0, false),
            "the read of page 0"
        );

        let spec = WorkloadSpec {
            kind: WorkloadKind::Trace { trace_path: path },
            source: DataSource::LowEntropy,
            size_bytes: (pages * PAGE_SIZE) as u64,
            touches: 2 * trace.len(),
            seed: 1,
            only_phases: vec![],
            sample_every_ms: 0,
            threads: 2,
        };
        let inputs = PhaseInputs::open(&spec.kind).unwrap();
        assert_eq!(inputs.trace.as_ref(), Some(&trace));
        let mapping = AnonMapping::new(spec.size_bytes as usize).unwrap();
        let probe = PlainProbe {
            memory: mapping.memory(),
            library: None,
            compressed: Box::new(|| 0),
        };
        let (_, outcomes) = workload::execute(
            &mapping.memory(),
            &inputs,
            &spec,
            &probe,
            &mut QuietObserver,
        )
        .unwrap();
        assert_eq!(outcomes.len(), 1);
        assert_eq!(outcomes[0].phase.name(), "trace-replay");
        assert_eq!(outcomes[0].latency.count(), spec.touches);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
