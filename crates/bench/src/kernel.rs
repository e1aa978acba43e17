//! The kernel tiers: the same workload, on plain anonymous memory, in a child
//! process confined to a v1 memory cgroup whose limit is the budget, swapping
//! to zram (one run per algorithm) or to zswap in front of a swapfile.
//!
//! Everything this module changes on the machine (swap devices, zram0, zswap
//! parameters, `vm.page-cluster`, cgroups, the swapfile) is recorded first in
//! a [`MachineGuard`] and put back when the guard is dropped, whether the run
//! succeeded, failed or was interrupted. The guard also holds the machine-wide
//! flock every test touching kernel state takes, so two runs never overlap.

use crate::report::BenchResult;
use crate::workload::{
    self, AnonMapping, FileMapping, FillOutcome, Observer, PhaseOutcome, PlainProbe, WorkloadKind,
    WorkloadSpec,
};
use crate::{BenchError, PAGE_SIZE};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use zpage_kernel::apply::SavedState;
use zpage_kernel::procfs::{self, SwapArea};
use zpage_kernel::zram::ZramDevice;
use zpage_kernel::{swapdev, zswap};

/// The environment variable that turns a process into a kernel tier's child.
pub const CHILD_REQUEST_ENV: &str = "ZPAGE_BENCH_KERNEL_CHILD";
/// Marks the child's report line on stdout (test harnesses print there too).
const REPORT_MARKER: &str = "ZPAGE-BENCH-REPORT ";

/// The zram device the tiers use.
const ZRAM_INDEX: u32 = 0;
const MEMCG_ROOT: &str = "/sys/fs/cgroup/memory";
/// memory.swappiness of the tiers' cgroups: anonymous and file pages cost the same to reclaim.
pub const CGROUP_SWAPPINESS: u32 = 100;

fn write_value(path: impl AsRef<Path>, value: &str) -> Result<(), BenchError> {
    let path = path.as_ref();
    std::fs::write(path, value).map_err(|e| BenchError::io(path, &format!("write {value:?} to"), e))
}

/// Everything about swap that the kernel tiers change, as found: the kernel
/// crate's saved state (swap areas, zram devices, zswap parameters, swap
/// sysctls), and cgroups an earlier run may have left.
#[derive(Clone, Debug, Serialize)]
pub struct MachineState {
    /// Swap areas, zram devices, zswap parameters and sysctls.
    pub kernel: SavedState,
    /// Our cgroups left over (should always be empty).
    pub leftover_cgroups: Vec<String>,
}

impl PartialEq for MachineState {
    /// Equal configurations: how much of a swap area is in use moves with
    /// memory pressure, so it is not compared.
    fn eq(&self, other: &Self) -> bool {
        let configuration = |s: &SavedState| {
            let swaps: Vec<SwapArea> = s
                .swaps
                .iter()
                .map(|a| SwapArea {
                    used_bytes: 0,
                    ..a.clone()
                })
                .collect();
            (swaps, s.zram.clone(), s.zswap.clone(), s.sysctls.clone())
        };
        configuration(&self.kernel) == configuration(&other.kernel)
            && self.leftover_cgroups == other.leftover_cgroups
    }
}

/// The algorithms zram0 offers.
pub fn zram_algorithms() -> Result<Vec<String>, BenchError> {
    Ok(ZramDevice::open(ZRAM_INDEX)?.algorithms()?)
}

impl MachineState {
    /// Reads the current state.
    pub fn capture() -> Result<Self, BenchError> {
        let leftover_cgroups = std::fs::read_dir(MEMCG_ROOT)
            .map(|dir| {
                dir.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .filter(|name| name.starts_with("zpage-bench-"))
                    .collect()
            })
            .unwrap_or_default();
        Ok(MachineState {
            kernel: SavedState::capture()?,
            leftover_cgroups,
        })
    }

    /// `vm.page-cluster` as found.
    pub fn page_cluster(&self) -> &str {
        self.kernel
            .sysctls
            .get("vm.page-cluster")
            .map_or("?", String::as_str)
    }

    fn zram0(&self) -> Option<&zpage_kernel::apply::ZramSnapshot> {
        self.kernel.zram.iter().find(|z| z.index == ZRAM_INDEX)
    }
}

/// A kernel configuration to compare against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelTier {
    /// Swap on zram0 with this algorithm.
    Zram(String),
    /// zswap with this compressor in front of a swapfile.
    Zswap(String),
}

impl KernelTier {
    /// "zram-lz4", "zswap-lzo".
    pub fn name(&self) -> String {
        match self {
            KernelTier::Zram(alg) => format!("zram-{alg}"),
            KernelTier::Zswap(alg) => format!("zswap-{alg}"),
        }
    }

    /// Parses "zram-lz4" / "zswap-lzo".
    pub fn parse(text: &str) -> Result<Self, BenchError> {
        if let Some(alg) = text.strip_prefix("zram-") {
            Ok(KernelTier::Zram(alg.to_string()))
        } else if let Some(alg) = text.strip_prefix("zswap-") {
            Ok(KernelTier::Zswap(alg.to_string()))
        } else {
            Err(BenchError::Invalid(format!(
                "unknown kernel tier {text:?}: expected zram-ALGORITHM or zswap-COMPRESSOR"
            )))
        }
    }

    /// Every tier this machine offers: zram with each of its algorithms, zswap with its current compressor.
    pub fn all_available() -> Result<Vec<KernelTier>, BenchError> {
        let mut tiers: Vec<KernelTier> = zram_algorithms()?
            .into_iter()
            .map(KernelTier::Zram)
            .collect();
        let compressor = zswap::parameters()?
            .get("compressor")
            .cloned()
            .ok_or_else(|| BenchError::Invalid("zswap has no compressor parameter".into()))?;
        tiers.push(KernelTier::Zswap(compressor));
        Ok(tiers)
    }
}

/// Records the machine's swap state, lets the tiers change it, and restores
/// it on drop (or on [`MachineGuard::restore`], which reports failures).
#[derive(Debug)]
pub struct MachineGuard {
    saved: MachineState,
    swapfile_dir: PathBuf,
    swapfile: Option<PathBuf>,
    turned_off: Vec<SwapArea>,
    restored: bool,
    _lock: zpage_kernel::KernelStateLock,
}

fn zram0() -> Result<ZramDevice, BenchError> {
    Ok(ZramDevice::open(ZRAM_INDEX)?)
}

impl MachineGuard {
    /// Takes the machine lock, checks we may use zram0, records the state, and
    /// turns off any active swap for the duration (so only the tier's swap is used).
    pub fn take(swapfile_dir: &Path) -> Result<Self, BenchError> {
        if !zpage_kernel::is_root() {
            return Err(BenchError::MachineBusy(
                "--vs-kernel needs root (swapon, zram, cgroups)".into(),
            ));
        }
        for needed in ["/sys/block/zram0", zswap::PARAMS_DIR, MEMCG_ROOT] {
            if !Path::new(needed).exists() {
                return Err(BenchError::MachineBusy(format!(
                    "{needed} does not exist on this machine"
                )));
            }
        }
        let lock = zpage_kernel::KernelStateLock::try_acquire()
            .map_err(|e| BenchError::MachineBusy(e.to_string()))?;
        let saved = MachineState::capture()?;
        if let Some(reason) = zram0()?.in_use_reason()? {
            return Err(BenchError::MachineBusy(format!(
                "zram0 is in use ({reason}); free it first (swapoff /dev/zram0; echo 1 > /sys/block/zram0/reset)"
            )));
        }
        if !saved.leftover_cgroups.is_empty() {
            return Err(BenchError::MachineBusy(format!(
                "cgroups of an earlier run are still there: {:?} (another zpage bench running?)",
                saved.leftover_cgroups
            )));
        }
        let mut guard = MachineGuard {
            saved: saved.clone(),
            swapfile_dir: swapfile_dir.to_path_buf(),
            swapfile: None,
            turned_off: Vec::new(),
            restored: false,
            _lock: lock,
        };
        for swap in &saved.kernel.swaps {
            swapdev::swap_off(Path::new(&swap.path))?;
            guard.turned_off.push(swap.clone());
        }
        Ok(guard)
    }

    /// The state recorded before anything changed.
    pub fn saved(&self) -> &MachineState {
        &self.saved
    }

    /// Sets up `tier`'s swap for data of `size_bytes`.
    fn set_up(&mut self, tier: &KernelTier, size_bytes: u64) -> Result<(), BenchError> {
        self.tear_down()?;
        // No swap readahead on compressed swap: one page per fault for every tier.
        procfs::sysctl_write("vm.page-cluster", "0")?;
        // Room for every page plus headroom; the swap area must never fill up.
        let swap_bytes = (size_bytes + (64 << 20)).div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64;
        match tier {
            KernelTier::Zram(alg) => {
                let device = zram0()?;
                device.configure(alg, swap_bytes)?;
                swapdev::make_swap(&device.dev_path(), swap_bytes)?;
                swapdev::swap_on(&device.dev_path(), Some(i16::MAX), false)?;
            }
            KernelTier::Zswap(compressor) => {
                let path = self
                    .swapfile_dir
                    .join(format!("zpage-bench-swapfile-{}", std::process::id()));
                self.swapfile = Some(path.clone());
                swapdev::create_swap_file(&path, swap_bytes)?;
                zswap::set_parameter("compressor", compressor)?;
                zswap::set_parameter("enabled", "Y")?;
                swapdev::swap_on(&path, Some(0), false)?;
            }
        }
        Ok(())
    }

    /// Undoes [`Self::set_up`] (between tiers).
    fn tear_down(&mut self) -> Result<(), BenchError> {
        let mut problems = Vec::new();
        let active = procfs::swaps().unwrap_or_default();
        let is_active = |path: &Path| active.iter().any(|s| Path::new(&s.path) == path);
        let device = zram0()?;
        if is_active(&device.dev_path()) {
            if let Err(e) = swapdev::swap_off(&device.dev_path()) {
                problems.push(e.to_string());
            }
        }
        if device.disksize().map(|d| d > 0).unwrap_or(false) {
            if let Err(e) = device.reset() {
                problems.push(e.to_string());
            }
        }
        if let Some(path) = self.swapfile.take() {
            if is_active(&path) {
                if let Err(e) = swapdev::swap_off(&path) {
                    problems.push(e.to_string());
                }
            }
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    problems.push(format!("remove {}: {e}", path.display()));
                }
            }
        }
        if let Some(enabled) = self.saved.kernel.zswap.get("enabled") {
            if let Err(e) = zswap::set_parameter("enabled", enabled) {
                problems.push(e.to_string());
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BenchError::Restore(problems.join("; ")))
        }
    }

    /// Puts everything back and checks that the machine's state equals the recorded one.
    pub fn restore(&mut self) -> Result<(), BenchError> {
        if self.restored {
            return Ok(());
        }
        self.restored = true;
        let mut problems = Vec::new();
        if let Err(e) = self.tear_down() {
            problems.push(e.to_string());
        }
        if let Some(snapshot) = self.saved.zram0() {
            if let Err(e) =
                zram0().and_then(|d| Ok(d.write_attribute("comp_algorithm", &snapshot.algorithm)?))
            {
                problems.push(e.to_string());
            }
        }
        // `enabled` last, so zswap never runs with a half-restored configuration.
        let now = zswap::parameters().unwrap_or_default();
        let mut names: Vec<&String> = self.saved.kernel.zswap.keys().collect();
        names.sort_by_key(|n| n.as_str() == "enabled");
        for name in names {
            let value = &self.saved.kernel.zswap[name];
            if now.get(name) != Some(value) {
                if let Err(e) = zswap::set_parameter(name, value) {
                    problems.push(e.to_string());
                }
            }
        }
        if let Err(e) = procfs::sysctl_write("vm.page-cluster", self.saved.page_cluster()) {
            problems.push(e.to_string());
        }
        for swap in std::mem::take(&mut self.turned_off) {
            let priority =
                (swap.priority >= 0).then(|| i16::try_from(swap.priority).unwrap_or(i16::MAX));
            if let Err(e) = swapdev::swap_on(Path::new(&swap.path), priority, false) {
                problems.push(format!("swapon {} again: {e}", swap.path));
            }
        }
        match MachineState::capture() {
            Ok(now) if now == self.saved => {}
            Ok(now) => problems.push(format!(
                "state differs: before {:?}, after {:?}",
                self.saved, now
            )),
            Err(e) => problems.push(e.to_string()),
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BenchError::Restore(problems.join("; ")))
        }
    }
}

impl Drop for MachineGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("zpage bench: {e}");
        }
    }
}

/// A v1 memory cgroup for one tier's child, removed on drop.
#[derive(Debug)]
struct Cgroup {
    dir: PathBuf,
}

impl Cgroup {
    fn create(name: &str, limit_bytes: u64) -> Result<Self, BenchError> {
        let dir = Path::new(MEMCG_ROOT).join(name);
        std::fs::create_dir(&dir).map_err(|e| BenchError::io(&dir, "create the cgroup", e))?;
        let cgroup = Cgroup { dir };
        write_value(
            cgroup.dir.join("memory.swappiness"),
            &CGROUP_SWAPPINESS.to_string(),
        )?;
        write_value(
            cgroup.dir.join("memory.limit_in_bytes"),
            &limit_bytes.to_string(),
        )?;
        // memsw is memory + swap: unlimited, so only RAM is capped and swap absorbs the rest.
        let memsw = cgroup.dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write_value(memsw, "-1")?;
        }
        Ok(cgroup)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The child's charges go away asynchronously after it exits; retry briefly.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "zpage bench: could not remove cgroup {}",
            self.dir.display()
        );
    }
}

/// Kills and reaps a child that is still running when dropped.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Where a child reads its compressed footprint from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum CompressedSource {
    /// zram0's mm_stat `mem_used_total`.
    Zram,
    /// `/proc/meminfo`'s `Zswap:` (the compressed pool).
    Zswap,
}

impl CompressedSource {
    fn read(self) -> u64 {
        match self {
            CompressedSource::Zram => zram0()
                .ok()
                .and_then(|d| d.mm_stat().ok())
                .map_or(0, |m| m.mem_used_total),
            CompressedSource::Zswap => procfs::meminfo()
                .ok()
                .and_then(|m| m.get("Zswap").copied())
                .unwrap_or(0),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ChildRequest {
    spec: WorkloadSpec,
    cgroup_procs: PathBuf,
    compressed: CompressedSource,
}

#[derive(Debug, Serialize, Deserialize)]
enum ChildReport {
    Done {
        fill: FillOutcome,
        phases: Vec<PhaseOutcome>,
    },
    Failed(String),
}

/// Forwards progress to the parent as stderr lines.
struct StderrObserver;

impl Observer for StderrObserver {
    fn phase_started(&mut self, label: &str, total: u64) {
        eprintln!("zpage-progress start {total} {label}");
    }
    fn progress(&mut self, done: u64) {
        eprintln!("zpage-progress at {done}");
    }
    fn phase_finished(&mut self, label: &str) {
        eprintln!("zpage-progress end {label}");
    }
}

/// In a process started by [`run_kernel_tier`]: runs the requested workload,
/// prints the report and returns true. In any other process: returns false at once.
///
/// Call it first thing in the program the launcher starts.
pub fn run_child_if_requested() -> bool {
    let Ok(request) = std::env::var(CHILD_REQUEST_ENV) else {
        return false;
    };
    let report = match serde_json::from_str::<ChildRequest>(&request) {
        Ok(request) => match child_run(&request) {
            Ok((fill, phases)) => ChildReport::Done { fill, phases },
            Err(e) => ChildReport::Failed(e.to_string()),
        },
        Err(e) => ChildReport::Failed(format!("bad request: {e}")),
    };
    // A test harness may have printed half a line already: start a fresh one.
    println!(
        "\n{REPORT_MARKER}{}",
        serde_json::to_string(&report).unwrap_or_default()
    );
    true
}

fn child_run(request: &ChildRequest) -> Result<(FillOutcome, Vec<PhaseOutcome>), BenchError> {
    // Join the cgroup before allocating anything the budget should cover.
    write_value(&request.cgroup_procs, &std::process::id().to_string())?;
    let library = match &request.spec.kind {
        WorkloadKind::SwapDemo { library_path } => Some(FileMapping::open_cold(library_path)?),
        _ => None,
    };
    let mapping = AnonMapping::new(request.spec.size_bytes as usize)?;
    let compressed = request.compressed;
    let probe = PlainProbe {
        memory: mapping.memory(),
        library: library.as_ref(),
        compressed: Box::new(move || compressed.read()),
    };
    workload::execute(
        &mapping.memory(),
        library.as_ref(),
        &request.spec,
        &probe,
        &mut StderrObserver,
    )
}

/// Runs `spec` on `tier`: sets the tier's swap up, starts the child with
/// `launcher` (a command that calls [`run_child_if_requested`] first),
/// confines it to a cgroup limited to `budget_bytes`, and turns its report
/// into results.
pub fn run_kernel_tier(
    guard: &mut MachineGuard,
    tier: &KernelTier,
    spec: &WorkloadSpec,
    budget_bytes: u64,
    launcher: &dyn Fn() -> Command,
    observer: &mut dyn Observer,
) -> Result<Vec<BenchResult>, BenchError> {
    let tier_name = tier.name();
    let tier_error = |message: String| BenchError::KernelTier {
        tier: tier_name.clone(),
        message,
    };
    guard.set_up(tier, spec.size_bytes)?;
    let result = (|| {
        let cgroup = Cgroup::create(
            &format!("zpage-bench-{}-{}", std::process::id(), tier_name),
            budget_bytes,
        )?;
        let request = ChildRequest {
            spec: spec.clone(),
            cgroup_procs: cgroup.dir.join("cgroup.procs"),
            compressed: match tier {
                KernelTier::Zram(_) => CompressedSource::Zram,
                KernelTier::Zswap(_) => CompressedSource::Zswap,
            },
        };
        let request = serde_json::to_string(&request).map_err(|e| tier_error(e.to_string()))?;
        let mut command = launcher();
        command
            .env(CHILD_REQUEST_ENV, request)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = ChildGuard(
            command
                .spawn()
                .map_err(|e| tier_error(format!("cannot start the child: {e}")))?,
        );
        let stdout = child.0.stdout.take().expect("piped");
        let stderr = child.0.stderr.take().expect("piped");
        // Read stdout on a thread so a chatty child never blocks on a full pipe.
        let stdout_reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stdout).read_to_string(&mut text);
            text
        });
        let mut other_stderr = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("zpage-progress ") {
                let mut words = rest.splitn(3, ' ');
                match (words.next(), words.next(), words.next()) {
                    (Some("start"), Some(total), Some(label)) => {
                        observer.phase_started(label, total.parse().unwrap_or(0))
                    }
                    (Some("at"), Some(done), _) => observer.progress(done.parse().unwrap_or(0)),
                    (Some("end"), Some(label), rest) => {
                        let label = rest.map_or(label.to_string(), |r| format!("{label} {r}"));
                        observer.phase_finished(&label)
                    }
                    _ => {}
                }
            } else if other_stderr.len() < 50 {
                other_stderr.push(line);
            }
            if crate::stop_requested() {
                return Err(BenchError::Interrupted);
            }
        }
        let status = child.0.wait().map_err(|e| tier_error(e.to_string()))?;
        let stdout = stdout_reader.join().unwrap_or_default();
        let report = stdout
            .lines()
            .find_map(|l| {
                l.find(REPORT_MARKER)
                    .map(|at| &l[at + REPORT_MARKER.len()..])
            })
            .and_then(|json| serde_json::from_str::<ChildReport>(json).ok());
        match report {
            Some(ChildReport::Done { fill, phases }) => Ok(phases
                .iter()
                .map(|outcome| BenchResult::new(&tier_name, spec, budget_bytes, &fill, outcome))
                .collect()),
            Some(ChildReport::Failed(message)) => Err(tier_error(message)),
            None => Err(tier_error(format!(
                "the child ended with {status} without a report (killed by the OOM killer? is the budget too small?); its stderr: {}",
                other_stderr.join(" | ")
            ))),
        }
    })();
    let tear_down = guard.tear_down();
    let results = result?;
    tear_down?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tier_names() {
        assert_eq!(
            KernelTier::parse("zram-lz4").unwrap(),
            KernelTier::Zram("lz4".into())
        );
        assert_eq!(KernelTier::parse("zswap-lzo").unwrap().name(), "zswap-lzo");
        assert!(KernelTier::parse("disk").is_err());
    }
}
