//! The kernel tiers: the same workload, on plain anonymous memory, in a child
//! process confined to a memory cgroup whose limit is the budget, swapping
//! to zram (one run per algorithm) or to zswap in front of a swapfile.
//!
//! The swap set-up, its restoration and the cgroups are the kernel crate's
//! ([`zpage_kernel::machine`], [`zpage_kernel::memcg`]), shared with the
//! kernel mode of `zpage run`: everything changed is recorded first in a
//! [`MachineGuard`] and put back when the guard is dropped, whether the run
//! succeeded, failed or was interrupted.

use crate::report::BenchResult;
use crate::workload::{
    self, AnonMapping, FillOutcome, Observer, PhaseInputs, PhaseOutcome, PlainProbe, WorkloadSpec,
};
use crate::BenchError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use zpage_kernel::machine::{OtherSwap, CGROUP_PREFIX};
use zpage_kernel::memcg::{self, MemoryCgroup};
use zpage_kernel::procfs;
use zpage_kernel::zram::ZramDevice;

/// The environment variable that turns a process into a kernel tier's child.
pub const CHILD_REQUEST_ENV: &str = "ZPAGE_BENCH_KERNEL_CHILD";
/// Marks the child's report line on stdout (test harnesses print there too).
const REPORT_MARKER: &str = "ZPAGE-BENCH-REPORT ";

/// memory.swappiness of the tiers' cgroups: anonymous and file pages cost the same to reclaim.
pub use zpage_kernel::machine::CGROUP_SWAPPINESS;
pub use zpage_kernel::machine::{MachineGuard, MachineState, SwapBackend};

/// Takes the machine for the kernel tiers: only the tier's swap is used, the
/// machine's own swap areas are off for the run (see [`MachineGuard::take`]).
pub fn take_machine(swapfile_dir: &Path) -> Result<MachineGuard, BenchError> {
    MachineGuard::take(swapfile_dir, OtherSwap::TurnOff)
        .map_err(|e| BenchError::MachineBusy(e.to_string()))
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
    /// This zram device's mm_stat `mem_used_total`.
    Zram(u32),
    /// `/proc/meminfo`'s `Zswap:` (the compressed pool).
    Zswap,
}

impl CompressedSource {
    fn read(self) -> u64 {
        match self {
            CompressedSource::Zram(index) => ZramDevice::open(index)
                .ok()
                .and_then(|d| d.mm_stat().ok())
                .map_or(0, |m| m.mem_used_total),
            CompressedSource::Zswap => procfs::meminfo().ok().and_then(|m| m.z_swap).unwrap_or(0),
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
    // What the phases read besides the memory (a trace's pages, which the
    // zpage tier keeps outside its budget too) is charged outside the cgroup;
    // a library's pages are charged inside, when first read.
    let inputs = PhaseInputs::open(&request.spec.kind)?;
    // Join the cgroup before allocating anything the budget should cover.
    let procs = &request.cgroup_procs;
    std::fs::write(procs, std::process::id().to_string())
        .map_err(|e| BenchError::io(procs, "join the cgroup through", e))?;
    let mapping = AnonMapping::new(request.spec.size_bytes as usize)?;
    let compressed = request.compressed;
    let probe = PlainProbe {
        memory: mapping.memory(),
        library: inputs.library.as_ref(),
        compressed: Box::new(move || compressed.read()),
    };
    workload::execute(
        &mapping.memory(),
        &inputs,
        &request.spec,
        &probe,
        &mut StderrObserver,
    )
}

/// Times a kernel tier's child is started when the OOM killer ends it.
/// A memory cgroup swapping to zram is OOM-killed now and then on some
/// kernels (6.18 here) while swapping a page back in, with room to spare;
/// another attempt usually runs through.
pub const KERNEL_TIER_ATTEMPTS: usize = 3;

/// Runs `spec` on `tier`: sets the tier's swap up, starts the child with
/// `launcher` (a command that calls [`run_child_if_requested`] first),
/// confines it to a cgroup limited to `budget_bytes`, and turns its report
/// into results. A child killed without a report (the OOM killer) is run
/// again, [`KERNEL_TIER_ATTEMPTS`] times in all, saying so on stderr.
pub fn run_kernel_tier(
    guard: &mut MachineGuard,
    tier: &SwapBackend,
    spec: &WorkloadSpec,
    budget_bytes: u64,
    launcher: &dyn Fn() -> Command,
    observer: &mut dyn Observer,
) -> Result<Vec<BenchResult>, BenchError> {
    let mut attempt = 1;
    loop {
        match run_kernel_tier_once(guard, tier, spec, budget_bytes, launcher, observer) {
            Err(Killed(message)) if attempt < KERNEL_TIER_ATTEMPTS => {
                eprintln!(
                    "zpage bench: kernel tier {} (attempt {attempt} of {KERNEL_TIER_ATTEMPTS}): {message}; trying again",
                    tier.name()
                );
                attempt += 1;
            }
            Err(Killed(message)) => {
                return Err(BenchError::KernelTier {
                    tier: tier.name(),
                    message: format!("{message} ({KERNEL_TIER_ATTEMPTS} attempts)"),
                })
            }
            Err(Failed(e)) => return Err(e),
            Ok(results) => return Ok(results),
        }
    }
}

/// How one attempt at a kernel tier failed.
enum AttemptError {
    /// The child was killed by a signal before it reported.
    Killed(String),
    /// Anything else.
    Failed(BenchError),
}
use AttemptError::{Failed, Killed};

impl<E: Into<BenchError>> From<E> for AttemptError {
    fn from(e: E) -> Self {
        Failed(e.into())
    }
}

fn run_kernel_tier_once(
    guard: &mut MachineGuard,
    tier: &SwapBackend,
    spec: &WorkloadSpec,
    budget_bytes: u64,
    launcher: &dyn Fn() -> Command,
    observer: &mut dyn Observer,
) -> Result<Vec<BenchResult>, AttemptError> {
    let tier_name = tier.name();
    let tier_error = |message: String| BenchError::KernelTier {
        tier: tier_name.clone(),
        message,
    };
    // Room for every page plus headroom; the swap area must never fill up.
    guard.set_up(tier, spec.size_bytes + (64 << 20))?;
    let result = (|| {
        let controller = memcg::memory_controller()?;
        let cgroup = MemoryCgroup::create(
            &controller,
            &format!("{CGROUP_PREFIX}bench-{}-{}", std::process::id(), tier_name),
            budget_bytes,
            CGROUP_SWAPPINESS,
        )?;
        let request = ChildRequest {
            spec: spec.clone(),
            cgroup_procs: cgroup.procs_path(),
            compressed: match tier {
                SwapBackend::Zram(_) => CompressedSource::Zram(
                    guard
                        .zram_device()
                        .map(ZramDevice::index)
                        .ok_or_else(|| tier_error("no zram device was set up".into()))?,
                ),
                SwapBackend::Zswap(_) => CompressedSource::Zswap,
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
                return Err(Failed(BenchError::Interrupted));
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
            Some(ChildReport::Failed(message)) => Err(Failed(tier_error(message))),
            None => {
                let message = format!(
                    "the child ended with {status} without a report (killed by the OOM killer? is the budget too small?); its stderr: {}",
                    other_stderr.join(" | ")
                );
                Err(
                    if std::os::unix::process::ExitStatusExt::signal(&status).is_some() {
                        Killed(message)
                    } else {
                        Failed(tier_error(message))
                    },
                )
            }
        }
    })();
    let tear_down = guard.tear_down();
    let results = result?;
    tear_down?;
    Ok(results)
}
