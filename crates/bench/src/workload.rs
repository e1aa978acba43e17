//! Workloads: fill memory from a data source, then run timed phases of touches.

use crate::dataset::DataSource;
use crate::histogram::LatencyHistogram;
use crate::pattern::{Op, Pattern, TouchPlan};
use crate::rng::SplitMix64;
use crate::trace::PageTrace;
use crate::{stop_requested, BenchError, PAGE_SIZE};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the resident-memory sampler looks unless the spec says otherwise.
/// Measured here: a mincore over 2 GiB every 20 ms cost zpage 12% of its
/// random-read throughput and raised its p99.9 from 0.18 to 2 ms.
pub const DEFAULT_SAMPLE_EVERY_MS: u64 = 100;
/// Touches between progress reports and Ctrl-C checks.
const PROGRESS_EVERY: u64 = 4096;

/// A page-aligned, readable and writable range of memory to benchmark on,
/// touched only through volatile loads and stores (its pages may be
/// compressed away and faulted back at any time, so no Rust reference to it
/// may ever exist).
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    base: *mut u8,
    len: usize,
}

// SAFETY: `Memory` is an address and a length; every access is a volatile
// load/store of a whole aligned word, and `Memory::new`'s contract makes the
// range valid for as long as the value is used, from any thread.
unsafe impl Send for Memory {}
// SAFETY: as above: shared use only issues volatile word accesses and mincore.
unsafe impl Sync for Memory {}

impl Memory {
    /// Wraps a mapping.
    ///
    /// # Safety
    /// `base` must be page-aligned, `len` a multiple of [`PAGE_SIZE`], and
    /// `base..base + len` mapped readable and writable for as long as this
    /// value (or a copy) is used; nothing may hold Rust references into it.
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        debug_assert_eq!(base as usize % PAGE_SIZE, 0);
        debug_assert_eq!(len % PAGE_SIZE, 0);
        Memory { base, len }
    }

    /// Pages in the range.
    pub fn pages(&self) -> u64 {
        (self.len / PAGE_SIZE) as u64
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start of the range.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    #[inline]
    fn word_ptr(&self, page: u64, word: u64) -> *mut u64 {
        assert!(page < self.pages() && word < (PAGE_SIZE / 8) as u64);
        // SAFETY: the offset is inside the range (checked above), which `new`'s
        // contract says is one mapping, so the pointer arithmetic stays in bounds.
        unsafe { self.base.add(page as usize * PAGE_SIZE + word as usize * 8) as *mut u64 }
    }

    /// Loads word `word` of page `page`.
    #[inline]
    pub fn read_word(&self, page: u64, word: u64) -> u64 {
        let ptr = self.word_ptr(page, word);
        // SAFETY: in bounds and 8-byte aligned (page-aligned base, word * 8);
        // the mapping is readable by `new`'s contract.
        unsafe { std::ptr::read_volatile(ptr) }
    }

    /// Stores `value` into word `word` of page `page`.
    #[inline]
    pub fn write_word(&self, page: u64, word: u64, value: u64) {
        let ptr = self.word_ptr(page, word);
        // SAFETY: in bounds, aligned and writable by `new`'s contract.
        unsafe { std::ptr::write_volatile(ptr, value) }
    }

    /// Sums every word of a page (bench.c's sequential scan, one page at a time).
    #[inline]
    pub fn sum_page(&self, page: u64) -> u64 {
        let mut sum = 0u64;
        for word in 0..(PAGE_SIZE / 8) as u64 {
            sum = sum.wrapping_add(self.read_word(page, word));
        }
        sum
    }

    /// Copies one page of data into page `page`.
    pub fn write_page(&self, page: u64, data: &[u8]) {
        assert_eq!(data.len(), PAGE_SIZE);
        let dst = self.word_ptr(page, 0) as *mut u8;
        // SAFETY: `dst` is the start of a whole page inside the writable range and
        // `data` is a separate PAGE_SIZE buffer, so the copy is in bounds and
        // does not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, PAGE_SIZE) }
    }

    /// Bytes of the range currently mapped in RAM, counted by `mincore(2)`
    /// (an outside view: it does not trust the region's own accounting).
    pub fn resident_bytes(&self) -> std::io::Result<u64> {
        let mut vector = vec![0u8; self.len / PAGE_SIZE];
        // SAFETY: the range is a mapping (contract of `new`) and `vector` has one
        // byte per page of it, as mincore requires.
        let rc = unsafe { libc::mincore(self.base.cast(), self.len, vector.as_mut_ptr()) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(vector.iter().filter(|&&v| v & 1 == 1).count() as u64 * PAGE_SIZE as u64)
    }
}

/// An anonymous private mapping, unmapped on drop (the kernel tiers' memory).
#[derive(Debug)]
pub struct AnonMapping {
    memory: Memory,
}

impl AnonMapping {
    /// Maps `len` bytes (rounded up to whole pages) of zeroed anonymous memory.
    pub fn new(len: usize) -> Result<Self, BenchError> {
        let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choice
        // cannot alias anything of ours.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(BenchError::io(
                "anonymous memory",
                "mmap",
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: the mapping is page-aligned, `len` bytes, readable and
        // writable, and lives until `self` is dropped.
        let memory = unsafe { Memory::new(ptr.cast(), len) };
        Ok(AnonMapping { memory })
    }

    /// The mapping as benchmark memory (valid while `self` lives).
    pub fn memory(&self) -> Memory {
        self.memory
    }
}

impl Drop for AnonMapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and no `Memory` copy outlives us by contract.
        unsafe { libc::munmap(self.memory.base.cast(), self.memory.len) };
    }
}

/// A read-only shared mapping of a file (swapdemo's "library").
#[derive(Debug)]
pub struct FileMapping {
    base: *mut u8,
    len: usize,
    _file: std::fs::File,
}

impl FileMapping {
    /// Maps a whole file read-only, after dropping its pages from the page
    /// cache so every tier starts cold and pays (and is charged) for them.
    pub fn open_cold(path: &std::path::Path) -> Result<Self, BenchError> {
        use std::os::unix::io::AsRawFd;
        let file = std::fs::File::open(path)
            .map_err(|e| BenchError::io(path, "open the library file", e))?;
        let len = file
            .metadata()
            .map_err(|e| BenchError::io(path, "stat the library file", e))?
            .len() as usize
            / PAGE_SIZE
            * PAGE_SIZE;
        if len == 0 {
            return Err(BenchError::Invalid(format!("{} is empty", path.display())));
        }
        // SAFETY: plain advice on a descriptor we own.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        // SAFETY: mapping a file we hold open, read-only, at a kernel-chosen address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(BenchError::io(
                path,
                "mmap the library file",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(FileMapping {
            base: ptr.cast(),
            len,
            _file: file,
        })
    }

    /// Pages mapped.
    pub fn pages(&self) -> u64 {
        (self.len / PAGE_SIZE) as u64
    }

    /// Loads a word of the file.
    pub fn read_word(&self, page: u64, word: u64) -> u64 {
        assert!(page < self.pages() && word < (PAGE_SIZE / 8) as u64);
        // SAFETY: in bounds, aligned, and the mapping is readable while `self` lives.
        unsafe {
            std::ptr::read_volatile(
                self.base.add(page as usize * PAGE_SIZE + word as usize * 8) as *const u64
            )
        }
    }

    /// Bytes of the file mapping resident (mincore).
    pub fn resident_bytes(&self) -> u64 {
        // SAFETY: our mapping is page-aligned, `len` bytes, readable; only mincore looks at it.
        let as_memory = unsafe { Memory::new(self.base, self.len) };
        as_memory.resident_bytes().unwrap_or(0)
    }
}

// SAFETY: the mapping is read-only and only read through volatile loads.
unsafe impl Sync for FileMapping {}
// SAFETY: as above; the file handle is Send.
unsafe impl Send for FileMapping {}

/// What some workloads' phases read besides the memory: swapdemo's library
/// file, a recorded trace's access order. Opened from the workload's kind
/// in whichever process runs it (a kernel tier's child too).
#[derive(Debug, Default)]
pub struct PhaseInputs {
    /// swapdemo's library, mapped.
    pub library: Option<FileMapping>,
    /// The recorded access order of a trace workload.
    pub trace: Option<PageTrace>,
}

impl PhaseInputs {
    /// Opens what `kind` needs.
    pub fn open(kind: &WorkloadKind) -> Result<PhaseInputs, BenchError> {
        Ok(match kind {
            WorkloadKind::SwapDemo { library_path } => PhaseInputs {
                library: Some(FileMapping::open_cold(library_path)?),
                trace: None,
            },
            WorkloadKind::Trace { trace_path } => PhaseInputs {
                library: None,
                trace: Some(PageTrace::load(trace_path)?),
            },
            WorkloadKind::Replay | WorkloadKind::BenchC => PhaseInputs::default(),
        })
    }

    /// Bytes of the library file (0 without one).
    pub fn library_bytes(&self) -> u64 {
        self.library
            .as_ref()
            .map_or(0, |l| l.pages() * PAGE_SIZE as u64)
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// What the runner can ask about the memory under test while it runs.
pub trait MemoryProbe: Sync {
    /// Bytes of the workload's data currently resident uncompressed in RAM.
    fn resident_bytes(&self) -> u64;
    /// Bytes the compressed copies take now (the store's footprint).
    fn compressed_bytes(&self) -> u64;
    /// Page faults that had to bring a page back (decompress or swap in) so far.
    fn faults(&self) -> u64;
    /// The tier below RAM, where there is one: bytes on its device, and its
    /// reads so far with their total time.
    fn tier(&self) -> TierSample {
        TierSample::default()
    }
    /// Pages recompressed with a cold codec so far (0 where there is none).
    fn recompressed_pages(&self) -> u64 {
        0
    }
    /// Evicted pages that shared a stored page's blob so far (0 without dedup).
    fn deduplicated_pages(&self) -> u64 {
        0
    }
}

/// What a tier below RAM holds and has read, at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TierSample {
    /// Bytes of its device holding data.
    pub backing_bytes: u64,
    /// Bytes its file takes on disk (`None`: no tier, or not a file).
    pub disk_bytes: Option<u64>,
    /// The compressed bytes of the live pages it holds (`None`: no tier).
    pub live_payload_bytes: Option<u64>,
    /// `disk_bytes` per live payload byte, as the tier computes it.
    pub disk_bytes_per_payload_byte: Option<f64>,
    /// Bytes its garbage collection copied so far.
    pub gc_moved_bytes: u64,
    /// Blobs read back so far.
    pub reads: u64,
    /// Their total time, nanoseconds.
    pub read_ns: u64,
    /// What the tier does to each blob (`None`: no tier).
    pub sealing: Option<&'static str>,
}

/// How one touch accesses memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    /// One 8-byte load or store.
    Word(Op),
    /// Read every word of the page (bench.c's sequential scan).
    PageScan,
    /// swapdemo: one word of a random "library" page plus one word of the data page.
    LibraryAndData,
    /// One 8-byte load or store, as the recorded trace says.
    Recorded,
}

/// One timed phase of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// Which pages.
    pub pattern: Pattern,
    /// How each is touched.
    pub access: Access,
    /// How many touches are measured.
    pub touches: u64,
    /// Touches of the same pattern run first and left out of the figures
    /// (fio's `ramp_time`): a policy that learns which pages are hot is
    /// measured once it has learned, as a long-running program sees it.
    #[serde(default)]
    pub warmup_touches: u64,
}

impl Phase {
    /// The name in tables and JSON, e.g. "uniform-read".
    pub fn name(&self) -> String {
        match self.access {
            Access::Word(op) => format!("{}-{}", pattern_label(self.pattern), op.name()),
            Access::PageScan => format!("{}-scan", pattern_label(self.pattern)),
            Access::LibraryAndData => "library-random+data-sequential".into(),
            Access::Recorded => "trace-replay".into(),
        }
    }

    /// Read or write.
    pub fn op(&self) -> Op {
        match self.access {
            Access::Word(op) => op,
            // A replayed trace mixes both; its row says "read".
            Access::PageScan | Access::LibraryAndData | Access::Recorded => Op::Read,
        }
    }

    /// Bytes one touch reads or writes (for MiB/s).
    pub fn bytes_per_touch(&self) -> u64 {
        match self.access {
            Access::Word(_) | Access::Recorded => 8,
            Access::PageScan => PAGE_SIZE as u64,
            Access::LibraryAndData => 16,
        }
    }
}

fn pattern_label(pattern: Pattern) -> &'static str {
    match pattern {
        Pattern::Uniform => "random",
        other => other.name(),
    }
}

/// Which of the seeds' workloads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    /// Fill from an image or the generated data set, then sequential, uniform
    /// and hot/cold touches, reads then writes.
    Replay,
    /// Seed 000's bench.c: a sequential scan and random reads over high- or
    /// low-entropy data (the data source says which).
    BenchC,
    /// Seed 003's swapdemo: a read-only mmap'd "library" file read at random
    /// while the anonymous data is walked sequentially.
    SwapDemo {
        /// The library file (created by the caller).
        library_path: PathBuf,
    },
    /// A real program's recorded page access order (`zpage run
    /// --fault-trace`), replayed once over the filled memory
    /// (`crate::trace`).
    Trace {
        /// The recording.
        trace_path: PathBuf,
    },
}

/// A complete workload description; serialisable so a kernel tier's child
/// process runs exactly the same thing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// Which workload.
    pub kind: WorkloadKind,
    /// What the memory is filled with.
    pub source: DataSource,
    /// Bytes of data (whole pages).
    pub size_bytes: u64,
    /// Touches of each random phase.
    pub touches: u64,
    /// Seed of every access sequence.
    pub seed: u64,
    /// Run only phases whose name starts with one of these (all when empty).
    pub only_phases: Vec<String>,
    /// Resident-memory sampling period in ms (0: [`DEFAULT_SAMPLE_EVERY_MS`]).
    /// Each sample is a mincore(2) over the data, so very short periods steal
    /// CPU from the workload on a small machine.
    #[serde(default)]
    pub sample_every_ms: u64,
    /// Threads touching memory at once in each timed phase (0 or 1: one).
    /// The touches are split between them; each follows its own sequence of
    /// the same pattern, and every tier runs the same threads.
    #[serde(default)]
    pub threads: u64,
}

impl WorkloadSpec {
    /// The workload's name in tables and JSON.
    pub fn name(&self) -> String {
        match (&self.kind, &self.source) {
            (WorkloadKind::Replay, _) => "replay".into(),
            (WorkloadKind::BenchC, DataSource::LowEntropy) => "bench-c-low-entropy".into(),
            (WorkloadKind::BenchC, _) => "bench-c-high-entropy".into(),
            (WorkloadKind::SwapDemo { .. }, _) => "swapdemo".into(),
            (WorkloadKind::Trace { .. }, _) => "trace".into(),
        }
    }

    /// Pages of data.
    pub fn pages(&self) -> u64 {
        self.size_bytes / PAGE_SIZE as u64
    }

    /// The phases, in the order they run.
    pub fn phases(&self) -> Vec<Phase> {
        let pages = self.pages();
        // Hot pages must be touched many times for the hot/cold contrast to mean
        // anything: at least 32 touches per hot page on average.
        let hot_cold_touches = self
            .touches
            .max(32 * Pattern::HOT_COLD_80_20.hot_pages(pages) * 100 / 80);
        let phases = match self.kind {
            WorkloadKind::Replay => {
                let mut phases = Vec::new();
                for op in [Op::Read, Op::Write] {
                    phases.push(Phase {
                        pattern: Pattern::Sequential,
                        access: Access::Word(op),
                        touches: pages,
                        warmup_touches: 0,
                    });
                    phases.push(Phase {
                        pattern: Pattern::Uniform,
                        access: Access::Word(op),
                        touches: self.touches,
                        warmup_touches: 0,
                    });
                    phases.push(Phase {
                        pattern: Pattern::HOT_COLD_80_20,
                        access: Access::Word(op),
                        touches: hot_cold_touches,
                        warmup_touches: hot_cold_touches,
                    });
                }
                phases
            }
            WorkloadKind::BenchC => vec![
                Phase {
                    pattern: Pattern::Sequential,
                    access: Access::PageScan,
                    touches: pages,
                    warmup_touches: 0,
                },
                Phase {
                    pattern: Pattern::Uniform,
                    access: Access::Word(Op::Read),
                    touches: self.touches,
                    warmup_touches: 0,
                },
            ],
            WorkloadKind::SwapDemo { .. } => vec![Phase {
                pattern: Pattern::Sequential,
                access: Access::LibraryAndData,
                touches: pages.max(self.touches),
                warmup_touches: 0,
            }],
            WorkloadKind::Trace { .. } => vec![Phase {
                pattern: Pattern::Trace,
                access: Access::Recorded,
                touches: self.touches,
                warmup_touches: 0,
            }],
        };
        phases
            .into_iter()
            .filter(|phase| {
                self.only_phases.is_empty()
                    || self
                        .only_phases
                        .iter()
                        .any(|p| phase.name().starts_with(p.as_str()))
            })
            .collect()
    }
}

/// Receives progress of a running workload (drives progress bars).
pub trait Observer {
    /// A phase (or "fill") begins with `total` steps.
    fn phase_started(&mut self, _label: &str, _total: u64) {}
    /// `done` steps of the current phase are complete.
    fn progress(&mut self, _done: u64) {}
    /// The current phase ended.
    fn phase_finished(&mut self, _label: &str) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct QuietObserver;
impl Observer for QuietObserver {}

/// What one phase measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseOutcome {
    /// The phase.
    pub phase: Phase,
    /// Per-touch latency.
    pub latency: LatencyHistogram,
    /// Wall time of the phase.
    pub elapsed: Duration,
    /// Highest resident memory seen by the sampler during the phase.
    pub resident_max_bytes: u64,
    /// Compressed footprint at the end of the phase.
    pub compressed_bytes: u64,
    /// Pages recompressed with the cold codec since the memory was made.
    #[serde(default)]
    pub recompressed_pages: u64,
    /// Evicted pages that shared a stored page's blob since the memory was made.
    #[serde(default)]
    pub deduplicated_pages: u64,
    /// Faults during the warm-up touches (not in the other figures).
    #[serde(default)]
    pub warmup_faults: u64,
    /// Bytes on the tier below RAM's device at the end of the phase.
    #[serde(default)]
    pub backing_bytes: u64,
    /// Bytes the tier's file takes on disk at the end of the phase.
    #[serde(default)]
    pub backing_disk_bytes: Option<u64>,
    /// Compressed bytes of the live pages in the tier at the end of the phase.
    #[serde(default)]
    pub backing_live_payload_bytes: Option<u64>,
    /// The one per the other.
    #[serde(default)]
    pub disk_bytes_per_payload_byte: Option<f64>,
    /// Bytes the tier's garbage collection copied during the phase.
    #[serde(default)]
    pub tier_gc_moved_bytes: u64,
    /// What the tier did to each blob (`None`: no tier).
    #[serde(default)]
    pub tier_sealing: Option<String>,
    /// Reads from the tier during the phase (warm-up included).
    #[serde(default)]
    pub tier_reads: u64,
    /// Their total time, nanoseconds.
    #[serde(default)]
    pub tier_read_ns: u64,
    /// Faults that brought pages back during the measured touches.
    pub faults: u64,
    /// Of which during the second half of the measured touches.
    pub faults_second_half: u64,
}

/// What filling the memory measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FillOutcome {
    /// Wall time of the fill.
    pub elapsed: Duration,
    /// Highest resident memory seen during the fill.
    pub resident_max_bytes: u64,
}

/// Runs `body` while a thread samples `probe.resident_bytes()`; returns the body's value and the max.
fn with_resident_sampler<T>(
    probe: &dyn MemoryProbe,
    every_ms: u64,
    body: impl FnOnce() -> T,
) -> (T, u64) {
    let every = Duration::from_millis(if every_ms == 0 {
        DEFAULT_SAMPLE_EVERY_MS
    } else {
        every_ms
    });
    let done = AtomicBool::new(false);
    let max = AtomicU64::new(0);
    let value = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                max.fetch_max(probe.resident_bytes(), Ordering::Relaxed);
                std::thread::sleep(every);
            }
        });
        let value = body();
        max.fetch_max(probe.resident_bytes(), Ordering::Relaxed);
        done.store(true, Ordering::Relaxed);
        value
    });
    (value, max.into_inner())
}

/// Writes every page of `spec.source` into `memory`.
pub fn fill(
    memory: &Memory,
    spec: &WorkloadSpec,
    probe: &dyn MemoryProbe,
    observer: &mut dyn Observer,
) -> Result<FillOutcome, BenchError> {
    let pages = spec.pages().min(memory.pages());
    let mut source = spec.source.open()?;
    let mut page = vec![0u8; PAGE_SIZE];
    observer.phase_started("fill", pages);
    let start = Instant::now();
    let (result, resident_max_bytes) = with_resident_sampler(probe, spec.sample_every_ms, || {
        for index in 0..pages {
            source.fill_page(index, &mut page)?;
            memory.write_page(index, &page);
            if index.is_multiple_of(1024) {
                observer.progress(index);
                if stop_requested() {
                    return Err(BenchError::Interrupted);
                }
            }
        }
        Ok(())
    });
    result?;
    observer.phase_finished("fill");
    Ok(FillOutcome {
        elapsed: start.elapsed(),
        resident_max_bytes,
    })
}

/// Where the threads of a phase meet: after the warm-up (so every thread's
/// measured touches start together) and at half of the measured touches.
struct PhaseClock<'a> {
    probe: &'a dyn MemoryProbe,
    threads: usize,
    warmed_up: std::sync::Barrier,
    started: std::sync::Mutex<Option<MeasuredSpan>>,
    halfway: AtomicU64,
}

/// One thread's share of a phase: its touches, timed into its own histogram.
fn run_touches(
    memory: &Memory,
    inputs: &PhaseInputs,
    phase: &Phase,
    plan: TouchPlan,
    warmup: u64,
    clock: &PhaseClock<'_>,
    progress: &mut dyn FnMut(u64) -> Result<(), BenchError>,
) -> Result<LatencyHistogram, BenchError> {
    let mut latency = LatencyHistogram::new();
    let mut library_rng = SplitMix64::new(plan.seed ^ 0x11B2_A4C0_FFEE);
    let mut sum = 0u64;
    let half = warmup + (plan.touches - warmup) / 2;
    let mut halfway_seen = false;
    let start_measuring = || {
        // Every thread waits here; one of them records the start.
        if clock.warmed_up.wait().is_leader() {
            *clock.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(MeasuredSpan {
                start: Instant::now(),
                faults_before: clock.probe.faults(),
                faults_at_half: None,
            });
        }
        clock.warmed_up.wait();
    };
    if warmup == 0 {
        start_measuring();
    }
    // A trace's threads each replay their own stretch of it, one after the
    // other's start.
    let trace = inputs
        .trace
        .as_ref()
        .filter(|_| phase.access == Access::Recorded);
    let trace_start = trace.map_or(0, |t| t.len() / clock.threads as u64 * plan.stream);
    for (n, (page, word)) in plan.iter().enumerate() {
        let n = n as u64;
        if n == warmup && warmup > 0 {
            start_measuring();
        }
        let t0 = Instant::now();
        match phase.access {
            Access::Word(Op::Read) => sum = sum.wrapping_add(memory.read_word(page, word)),
            Access::Word(Op::Write) => memory.write_word(page, word, n),
            Access::Recorded => {
                let trace = trace.expect("checked by the caller");
                match trace.touch(trace_start + n, memory.pages()) {
                    (page, true) => memory.write_word(page, word, n),
                    (page, false) => sum = sum.wrapping_add(memory.read_word(page, word)),
                }
            }
            Access::PageScan => sum = sum.wrapping_add(memory.sum_page(page)),
            Access::LibraryAndData => {
                let library = inputs.library.as_ref().expect("checked by the caller");
                let library_page = library_rng.below(library.pages());
                sum = sum
                    .wrapping_add(library.read_word(library_page, word))
                    .wrapping_add(memory.read_word(page, 0));
            }
        }
        if n >= warmup {
            latency.record(t0.elapsed().as_nanos() as u64);
        }
        if n >= half && !halfway_seen {
            halfway_seen = true;
            // The last thread past half of its touches marks the half.
            if clock.halfway.fetch_add(1, Ordering::AcqRel) + 1 == clock.threads as u64 {
                if let Some(span) = clock
                    .started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_mut()
                {
                    span.faults_at_half = Some(clock.probe.faults());
                }
            }
        }
        if n.is_multiple_of(PROGRESS_EVERY) {
            progress(n)?;
        }
    }
    black_box(sum);
    Ok(latency)
}

/// Runs one timed phase over memory already filled, from `threads` threads.
#[allow(clippy::too_many_arguments)]
pub fn run_phase(
    memory: &Memory,
    inputs: &PhaseInputs,
    phase: &Phase,
    seed: u64,
    sample_every_ms: u64,
    threads: u64,
    probe: &dyn MemoryProbe,
    observer: &mut dyn Observer,
) -> Result<PhaseOutcome, BenchError> {
    if phase.access == Access::LibraryAndData && inputs.library.is_none() {
        return Err(BenchError::Invalid(
            "swapdemo needs its library mapping".into(),
        ));
    }
    if phase.access == Access::Recorded && inputs.trace.is_none() {
        return Err(BenchError::Invalid(
            "a trace replay needs its trace: give --trace FILE".into(),
        ));
    }
    let threads = threads.max(1) as usize;
    let warmup = phase.warmup_touches / threads as u64;
    let touches = phase.touches / threads as u64;
    // Thread t follows its own sequence of the pattern (thread 0 the one a
    // single-threaded run follows).
    let plan_of = |t: usize| TouchPlan {
        pages: memory.pages(),
        pattern: phase.pattern,
        touches: warmup + touches,
        seed,
        stream: t as u64,
    };
    let name = phase.name();
    observer.phase_started(&name, warmup + touches);
    let clock = PhaseClock {
        probe,
        threads,
        warmed_up: std::sync::Barrier::new(threads),
        started: std::sync::Mutex::new(None),
        halfway: AtomicU64::new(0),
    };
    let failed = AtomicBool::new(false);
    let tier_before = probe.tier();
    let (result, resident_max_bytes) = with_resident_sampler(probe, sample_every_ms, || {
        let warmup_started_faults = probe.faults();
        let latency = std::thread::scope(|scope| {
            let others: Vec<_> = (1..threads)
                .map(|t| {
                    let (clock, failed) = (&clock, &failed);
                    scope.spawn(move || {
                        run_touches(
                            memory,
                            inputs,
                            phase,
                            plan_of(t),
                            warmup,
                            clock,
                            &mut |_| {
                                if failed.load(Ordering::Relaxed) || stop_requested() {
                                    Err(BenchError::Interrupted)
                                } else {
                                    Ok(())
                                }
                            },
                        )
                    })
                })
                .collect();
            // Thread 0 is this one: it reports progress.
            let mut latency = run_touches(
                memory,
                inputs,
                phase,
                plan_of(0),
                warmup,
                &clock,
                &mut |n| {
                    observer.progress(n);
                    if stop_requested() {
                        return Err(BenchError::Interrupted);
                    }
                    Ok(())
                },
            );
            if latency.is_err() {
                failed.store(true, Ordering::Relaxed);
            }
            for other in others {
                let theirs = other.join().unwrap_or(Err(BenchError::Interrupted));
                match (&mut latency, theirs) {
                    (Ok(ours), Ok(theirs)) => ours.merge(&theirs),
                    (Ok(_), Err(e)) => latency = Err(e),
                    _ => {}
                }
            }
            latency
        })?;
        let measured = clock
            .started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("the measured touches started");
        let warmup_faults = measured.faults_before - warmup_started_faults;
        Ok::<_, BenchError>((latency, measured, warmup_faults))
    });
    let (latency, measured, warmup_faults) = result?;
    let elapsed = measured.start.elapsed();
    let faults_after = probe.faults();
    let tier_after = probe.tier();
    observer.phase_finished(&name);
    Ok(PhaseOutcome {
        phase: *phase,
        latency,
        elapsed,
        resident_max_bytes,
        compressed_bytes: probe.compressed_bytes(),
        recompressed_pages: probe.recompressed_pages(),
        deduplicated_pages: probe.deduplicated_pages(),
        warmup_faults,
        backing_bytes: tier_after.backing_bytes,
        backing_disk_bytes: tier_after.disk_bytes,
        backing_live_payload_bytes: tier_after.live_payload_bytes,
        tier_sealing: tier_after.sealing.map(str::to_string),
        disk_bytes_per_payload_byte: tier_after.disk_bytes_per_payload_byte,
        tier_gc_moved_bytes: tier_after
            .gc_moved_bytes
            .saturating_sub(tier_before.gc_moved_bytes),
        tier_reads: tier_after.reads.saturating_sub(tier_before.reads),
        tier_read_ns: tier_after.read_ns.saturating_sub(tier_before.read_ns),
        faults: faults_after.saturating_sub(measured.faults_before),
        faults_second_half: faults_after
            .saturating_sub(measured.faults_at_half.unwrap_or(measured.faults_before)),
    })
}

/// Where the measured touches of a phase begin (after its warm-up).
struct MeasuredSpan {
    start: Instant,
    faults_before: u64,
    faults_at_half: Option<u64>,
}

/// Fills the memory and runs every phase of the workload.
pub fn execute(
    memory: &Memory,
    inputs: &PhaseInputs,
    spec: &WorkloadSpec,
    probe: &dyn MemoryProbe,
    observer: &mut dyn Observer,
) -> Result<(FillOutcome, Vec<PhaseOutcome>), BenchError> {
    let fill_outcome = fill(memory, spec, probe, observer)?;
    let mut outcomes = Vec::new();
    for (number, phase) in spec.phases().iter().enumerate() {
        let seed = spec.seed.wrapping_add(number as u64);
        outcomes.push(run_phase(
            memory,
            inputs,
            phase,
            seed,
            spec.sample_every_ms,
            spec.threads,
            probe,
            observer,
        )?);
    }
    Ok((fill_outcome, outcomes))
}

/// Major faults of this process so far (swap-ins count as major faults).
pub fn process_major_faults() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer we pass.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    // SAFETY: getrusage succeeded and initialised the struct (it was zeroed anyway).
    let usage = unsafe { usage.assume_init() };
    usage.ru_majflt as u64
}

/// Probe for plain anonymous memory (kernel tiers and tests): resident by
/// mincore, faults as this process's major faults, compressed bytes from a closure.
pub struct PlainProbe<'a> {
    /// The data.
    pub memory: Memory,
    /// The swapdemo library, counted as resident too.
    pub library: Option<&'a FileMapping>,
    /// Reads the compressed footprint (e.g. zram's mm_stat).
    pub compressed: Box<dyn Fn() -> u64 + Sync + 'a>,
}

impl std::fmt::Debug for PlainProbe<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainProbe")
            .field("memory", &self.memory)
            .finish()
    }
}

impl MemoryProbe for PlainProbe<'_> {
    fn resident_bytes(&self) -> u64 {
        self.memory.resident_bytes().unwrap_or(0)
            + self.library.map_or(0, |library| library.resident_bytes())
    }
    fn compressed_bytes(&self) -> u64 {
        (self.compressed)()
    }
    fn faults(&self) -> u64 {
        process_major_faults()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind, source: DataSource) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            source,
            size_bytes: 64 * PAGE_SIZE as u64,
            touches: 1000,
            seed: 1,
            only_phases: vec![],
            sample_every_ms: 0,
            threads: 1,
        }
    }

    #[test]
    fn replay_runs_reads_then_writes_over_three_patterns() {
        let names: Vec<String> = spec(WorkloadKind::Replay, DataSource::Realistic { seed: 1 })
            .phases()
            .iter()
            .map(Phase::name)
            .collect();
        assert_eq!(
            names,
            [
                "sequential-read",
                "random-read",
                "hotcold-read",
                "sequential-write",
                "random-write",
                "hotcold-write"
            ]
        );
    }

    #[test]
    fn hot_cold_phase_touches_each_hot_page_many_times() {
        let s = WorkloadSpec {
            size_bytes: 10_000 * PAGE_SIZE as u64,
            ..spec(WorkloadKind::Replay, DataSource::LowEntropy)
        };
        let hot = s
            .phases()
            .into_iter()
            .find(|p| p.name() == "hotcold-read")
            .unwrap();
        // 80% of the touches over 2,000 hot pages: at least 32 each, after
        // a warm-up of as many.
        assert!(hot.touches * 80 / 100 / 2_000 >= 32);
        assert_eq!(hot.warmup_touches, hot.touches);
    }

    #[test]
    fn several_threads_share_a_phase() {
        let mut s = spec(WorkloadKind::Replay, DataSource::Realistic { seed: 3 });
        s.only_phases = vec!["random-read".into(), "hotcold-read".into()];
        s.threads = 3;
        let mapping = AnonMapping::new(s.size_bytes as usize).unwrap();
        let memory = mapping.memory();
        struct NoProbe;
        impl MemoryProbe for NoProbe {
            fn resident_bytes(&self) -> u64 {
                0
            }
            fn compressed_bytes(&self) -> u64 {
                0
            }
            fn faults(&self) -> u64 {
                0
            }
        }
        let (_, outcomes) = execute(
            &memory,
            &PhaseInputs::default(),
            &s,
            &NoProbe,
            &mut QuietObserver,
        )
        .unwrap();
        assert_eq!(outcomes.len(), 2);
        for outcome in outcomes {
            // Each thread's share, all measured.
            let per_thread = outcome.phase.touches / 3;
            assert_eq!(
                outcome.latency.count(),
                3 * per_thread,
                "{:?}",
                outcome.phase
            );
        }
    }

    #[test]
    fn only_phases_filters_by_prefix() {
        let mut s = spec(WorkloadKind::Replay, DataSource::LowEntropy);
        s.only_phases = vec!["hotcold".into()];
        let names: Vec<String> = s.phases().iter().map(Phase::name).collect();
        assert_eq!(names, ["hotcold-read", "hotcold-write"]);
    }

    #[test]
    fn a_small_workload_runs_on_plain_memory() {
        let s = spec(WorkloadKind::Replay, DataSource::Realistic { seed: 9 });
        let mapping = AnonMapping::new(s.size_bytes as usize).unwrap();
        let probe = PlainProbe {
            memory: mapping.memory(),
            library: None,
            compressed: Box::new(|| 0),
        };
        let (fill, outcomes) = execute(
            &mapping.memory(),
            &PhaseInputs::default(),
            &s,
            &probe,
            &mut QuietObserver,
        )
        .unwrap();
        assert_eq!(fill.resident_max_bytes, s.size_bytes);
        assert_eq!(outcomes.len(), 6);
        for outcome in &outcomes {
            assert_eq!(outcome.latency.count(), outcome.phase.touches);
            assert_eq!(outcome.resident_max_bytes, s.size_bytes);
        }
        // The fill really copied the data set.
        let mut expected = vec![0u8; PAGE_SIZE];
        crate::dataset::generate_realistic_page(9, 3, &mut expected);
        let first_word = u64::from_le_bytes(expected[..8].try_into().unwrap());
        assert!(
            mapping.memory().read_word(3, 0) == first_word
                || outcomes.iter().any(|o| o.phase.op() == Op::Write)
        );
    }

    /// Counts pages made resident as "faults", so the test knows exactly
    /// when they happened.
    struct PopulatedPages(Memory);
    impl MemoryProbe for PopulatedPages {
        fn resident_bytes(&self) -> u64 {
            self.0.resident_bytes().unwrap_or(0)
        }
        fn compressed_bytes(&self) -> u64 {
            0
        }
        fn faults(&self) -> u64 {
            self.resident_bytes() / PAGE_SIZE as u64
        }
    }

    #[test]
    fn warm_up_touches_are_left_out_of_the_figures() {
        // 64 untouched pages; 2,000 random writes of warm-up populate all of
        // them, so the measured touches fault nowhere.
        let mapping = AnonMapping::new(64 * PAGE_SIZE).unwrap();
        let phase = Phase {
            pattern: Pattern::Uniform,
            access: Access::Word(Op::Write),
            touches: 500,
            warmup_touches: 2_000,
        };
        let probe = PopulatedPages(mapping.memory());
        let outcome = run_phase(
            &mapping.memory(),
            &PhaseInputs::default(),
            &phase,
            7,
            0,
            1,
            &probe,
            &mut QuietObserver,
        )
        .unwrap();
        assert_eq!(outcome.latency.count(), 500);
        assert_eq!(outcome.warmup_faults, 64);
        assert_eq!(outcome.faults, 0);
        assert_eq!(outcome.faults_second_half, 0);
    }

    #[test]
    fn bench_c_and_swapdemo_run() {
        let dir = std::env::temp_dir().join(format!("zpage-bench-wl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let library_path = dir.join("library.bin");
        std::fs::write(&library_path, vec![7u8; 16 * PAGE_SIZE]).unwrap();
        for s in [
            spec(WorkloadKind::BenchC, DataSource::LowEntropy),
            spec(
                WorkloadKind::SwapDemo {
                    library_path: library_path.clone(),
                },
                DataSource::Realistic { seed: 2 },
            ),
        ] {
            let inputs = PhaseInputs::open(&s.kind).unwrap();
            let mapping = AnonMapping::new(s.size_bytes as usize).unwrap();
            let probe = PlainProbe {
                memory: mapping.memory(),
                library: inputs.library.as_ref(),
                compressed: Box::new(|| 0),
            };
            let (_, outcomes) =
                execute(&mapping.memory(), &inputs, &s, &probe, &mut QuietObserver).unwrap();
            assert!(!outcomes.is_empty());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
