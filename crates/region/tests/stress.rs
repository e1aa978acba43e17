//! Four threads doing mixed reads and writes over regions four times their
//! budget, checked word by word against a shadow copy, while a sampler checks
//! that resident memory stays within 5% of the budget. The scenarios add
//! several regions on one shared budget, a program's 10 kHz timer-signal
//! handler reading region memory, forks whose children check every page
//! while the parent's threads write, and pages never written before the
//! run (read first as the zero page, then written, while they are evicted).
//!
//! Size: `ZPAGE_STRESS_OPS` operations per scenario (default 2 million; the
//! acceptance run uses 10 million) over `ZPAGE_STRESS_MIB` of regions
//! (default 64 MiB, budget a quarter of it).
mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use zpage_region::{AgingPolicy, Budget, BudgetConfig, FaultMode, Region, PAGE_SIZE};

const THREADS: usize = 4;
const WORDS: usize = PAGE_SIZE / 8;
/// Words each worker owns in every page (word 0 is a constant tag).
const OWNED: usize = (WORDS - 1) / THREADS;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ops() -> usize {
    env_usize("ZPAGE_STRESS_OPS", 2_000_000)
}

fn mib() -> usize {
    env_usize("ZPAGE_STRESS_MIB", 64)
}

/// Set for a scenario whose pages start fresh: word 0 is then never written.
static FRESH: AtomicBool = AtomicBool::new(false);

/// The constant word 0 of page `p` of region `r`: never zero, unique; 0 in
/// a scenario whose pages start fresh.
fn tag(r: usize, p: usize) -> u64 {
    if FRESH.load(Ordering::Relaxed) {
        return 0;
    }
    ((r as u64) << 40 | p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

#[derive(Clone, Copy, Debug)]
struct Scenario {
    mode: FaultMode,
    aging: AgingPolicy,
    keep_clean_copies: bool,
    /// Regions drawing on the one budget.
    regions: usize,
    /// A 10 kHz process-directed SIGALRM whose handler reads region memory.
    timer_signal: bool,
    /// Forks during the run; each child checks every page's tag.
    forks: usize,
    /// The budget's cold codec (pages with no quick reuse go out with it).
    cold_codec: Option<&'static str>,
    /// Pages are not written before the run: the first touch of each is a
    /// fault on a page zpage never held (a read maps the zero page, which
    /// a later write replaces, possibly while the reclaimer moves it out).
    fresh: bool,
    ops: usize,
    mib: usize,
}

impl Scenario {
    fn new(ops: usize, mib: usize) -> Scenario {
        Scenario {
            mode: FaultMode::Sigbus,
            aging: AgingPolicy::Refault,
            keep_clean_copies: false,
            regions: 1,
            timer_signal: false,
            forks: 0,
            cold_codec: None,
            fresh: false,
            ops,
            mib,
        }
    }
}

/// Where the timer handler reads: every region's base and page count.
static REGIONS: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
static REGION_PAGES: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
static REGION_COUNT: AtomicUsize = AtomicUsize::new(0);
static HANDLER_READS: AtomicU64 = AtomicU64::new(0);
static HANDLER_WRONG: AtomicU64 = AtomicU64::new(0);
static HANDLER_RNG: AtomicU64 = AtomicU64::new(0x2545_F491_4F6C_DD1D);

extern "C" fn on_alarm(_signal: libc::c_int) {
    let count = REGION_COUNT.load(Ordering::Relaxed);
    if count == 0 {
        return;
    }
    let mut x = HANDLER_RNG.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    HANDLER_RNG.store(x, Ordering::Relaxed);
    let r = (x % count as u64) as usize;
    let pages = REGION_PAGES[r].load(Ordering::Relaxed);
    let p = ((x >> 20) % pages as u64) as usize;
    let base = REGIONS[r].load(Ordering::Relaxed);
    // SAFETY: in bounds of a live region (they outlive the timer), aligned.
    let word = unsafe { &*((base + p * PAGE_SIZE) as *const AtomicU64) };
    if word.load(Ordering::Relaxed) != tag(r, p) {
        HANDLER_WRONG.fetch_add(1, Ordering::Relaxed);
    }
    HANDLER_READS.fetch_add(1, Ordering::Relaxed);
}

/// Forks; the child reads every page's tag in every region and exits 0 if
/// all are right (it reads plain memory: the regions' machinery stayed in
/// the parent). Returns the child's exit status.
fn fork_and_check(regions: &[Arc<Region>]) -> i32 {
    let bases: Vec<(usize, usize)> = regions
        .iter()
        .map(|r| (r.as_ptr() as usize, r.len() / PAGE_SIZE))
        .collect();
    // SAFETY: the child only reads memory and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let mut bad = 0;
        for (r, &(base, pages)) in bases.iter().enumerate() {
            for p in 0..pages {
                // SAFETY: the child's copy of a region the parent restored
                // whole before forking; in bounds, aligned.
                let word = unsafe { ((base + p * PAGE_SIZE) as *const u64).read_volatile() };
                if word != tag(r, p) {
                    bad += 1;
                }
            }
        }
        // SAFETY: ends the child at once, running no atexit handlers.
        unsafe { libc::_exit(if bad == 0 { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

struct Outcome {
    wrong: usize,
    handler_reads: u64,
    handler_wrong: u64,
    bad_children: usize,
    max_resident: u64,
    budget: u64,
    ops: usize,
    /// Evictions that took the cold codec, over every region.
    cold_compressions: u64,
}

fn run(s: Scenario) -> Outcome {
    let size = s.mib * MIB;
    let budget_bytes = size / 4;
    let mut config = BudgetConfig::new(budget_bytes);
    config.mode = s.mode;
    config.aging = s.aging;
    config.keep_clean_copies = s.keep_clean_copies;
    config.cold_codec = s.cold_codec.map(|c| c.parse().expect("cold codec"));
    let budget = Budget::new(config).expect("budget");
    let regions: Vec<Arc<Region>> = (0..s.regions)
        .map(|r| {
            // Unequal sizes: one region may hold more of the budget than another.
            let share = size / s.regions + (r % 2) * PAGE_SIZE * 64;
            Arc::new(Region::with_budget(&budget, share).expect("region"))
        })
        .collect();
    FRESH.store(s.fresh, Ordering::Relaxed);
    for (r, region) in regions.iter().enumerate() {
        if !s.fresh {
            for p in 0..region.len() / PAGE_SIZE {
                write(region, p, 0, tag(r, p));
            }
        }
        REGIONS[r].store(region.as_ptr() as usize, Ordering::Relaxed);
        REGION_PAGES[r].store(region.len() / PAGE_SIZE, Ordering::Relaxed);
    }
    REGION_COUNT.store(s.regions, Ordering::Relaxed);
    let stop = Arc::new(AtomicBool::new(false));
    let max_resident = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (region, stop, max_resident) = (
            Arc::clone(&regions[0]),
            Arc::clone(&stop),
            Arc::clone(&max_resident),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                max_resident.fetch_max(region.stats().budget_resident_bytes, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        })
    };
    if s.timer_signal {
        start_alarm(on_alarm, 100);
    }
    let per_thread = s.ops / THREADS;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let regions = regions.clone();
            std::thread::spawn(move || {
                // Thread t owns words 1 + k * THREADS + t of every page of
                // every region (so every page is shared by all threads, and
                // concurrent faults on one page are common), and checks only
                // those.
                let pages: Vec<usize> = regions.iter().map(|r| r.len() / PAGE_SIZE).collect();
                let mut shadow: Vec<Vec<u64>> = pages.iter().map(|&n| vec![0u64; n * OWNED]).collect();
                let mut rng = Rng(0x1234_5678_9abc_def1 ^ ((t as u64 + 1) << 32));
                let mut wrong = 0usize;
                for i in 0..per_thread {
                    let r = rng.below(regions.len());
                    // 60% of touches go to a hot eighth of the region.
                    let p = if rng.below(10) < 6 {
                        rng.below(pages[r] / 8)
                    } else {
                        rng.below(pages[r])
                    };
                    let k = rng.below(OWNED);
                    let w = 1 + k * THREADS + t;
                    let idx = p * OWNED + k;
                    if rng.below(2) == 0 {
                        let v = rng.next_u64() | 1;
                        write(&regions[r], p, w, v);
                        shadow[r][idx] = v;
                    } else {
                        let got = read(&regions[r], p, w);
                        if got != shadow[r][idx] {
                            if wrong < 10 {
                                eprintln!(
                                    "thread {t} op {i}: region {r} page {p} word {w}: got {got:#x}, want {:#x}",
                                    shadow[r][idx]
                                );
                            }
                            wrong += 1;
                        }
                    }
                }
                // Final sweep: every word this thread owns.
                for (r, region) in regions.iter().enumerate() {
                    for p in 0..pages[r] {
                        for k in 0..OWNED {
                            if read(region, p, 1 + k * THREADS + t) != shadow[r][p * OWNED + k] {
                                wrong += 1;
                            }
                        }
                    }
                }
                wrong
            })
        })
        .collect();
    let mut bad_children = 0;
    for _ in 0..s.forks {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let status = fork_and_check(&regions);
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            eprintln!("a forked child found wrong tags: status {status:#x}");
            bad_children += 1;
        }
    }
    let wrong: usize = workers.into_iter().map(|h| h.join().expect("worker")).sum();
    if s.timer_signal {
        stop_alarm();
    }
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    // Every tag is still right.
    let mut wrong_tags = 0;
    for (r, region) in regions.iter().enumerate() {
        for p in 0..region.len() / PAGE_SIZE {
            if read(region, p, 0) != tag(r, p) {
                wrong_tags += 1;
            }
        }
    }
    if s.regions == 1 && s.forks == 0 {
        at_rest_rss_matches(&regions[0]);
    }
    eprintln!("{s:?}: {:#?}", regions[0].stats());
    Outcome {
        wrong: wrong + wrong_tags,
        handler_reads: HANDLER_READS.load(Ordering::Relaxed),
        handler_wrong: HANDLER_WRONG.load(Ordering::Relaxed),
        bad_children,
        max_resident: max_resident.load(Ordering::Relaxed),
        budget: budget_bytes as u64,
        ops: per_thread * THREADS,
        cold_compressions: regions
            .iter()
            .map(|r| r.stats().cold_compression_count)
            .sum(),
    }
}

/// At rest, the region's Rss (pages the kernel maps there) must not exceed
/// the resident accounting the budget is enforced on (zero-page mappings are
/// counted by zpage but not in Rss, hence <=). Rss is taken between two
/// equal snapshots of the counters, so all three describe the same moment.
/// A restore can still be in flight when the workers stop (in handler-thread
/// mode the event thread may still be working through fault messages read
/// in one batch), and between its `UFFDIO_COPY` and its count no counter
/// shows it: the 10-million-operation run met one such page in 6 runs of
/// 16. So an excess must last: a page mapped but never counted stays
/// visible for the whole second this waits.
fn at_rest_rss_matches(region: &Region) {
    let snapshot = || {
        let st = region.stats();
        (
            st.resident_bytes,
            st.staged_bytes,
            st.restore_count,
            st.eviction_count,
        )
    };
    let mut excess = Vec::new();
    for _ in 0..50 {
        let before = snapshot();
        let rss = rss_of(region.as_ptr() as usize) as u64;
        if before != snapshot() {
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        }
        let mapped = before.0 - before.1;
        if rss <= mapped {
            return;
        }
        excess.push((rss, mapped));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("rss above resident-staged for a second: (rss, resident-staged) {excess:?}");
}

fn check(o: &Outcome, s: &Scenario) {
    eprintln!(
        "ops {} wrong {} handler reads {} (wrong {}) bad children {} of {}, max resident {:.3} of budget",
        o.ops,
        o.wrong,
        o.handler_reads,
        o.handler_wrong,
        o.bad_children,
        s.forks,
        o.max_resident as f64 / o.budget as f64
    );
    assert_eq!(o.wrong, 0, "wrong bytes");
    assert_eq!(o.handler_wrong, 0, "the signal handler read wrong bytes");
    assert_eq!(o.bad_children, 0, "a forked child read wrong bytes");
    if s.timer_signal {
        assert!(
            o.handler_reads > 100,
            "the timer fired {} times",
            o.handler_reads
        );
    }
    if s.cold_codec.is_some() {
        assert!(
            o.cold_compressions > 1000,
            "only {} evictions took the cold codec",
            o.cold_compressions
        );
    }
    if s.forks == 0 {
        // (Around a fork eviction pauses, and the parent's pages resident at
        // the fork are shared copy-on-write until eviction makes them
        // exclusive again: resident memory may pass the budget meanwhile.)
        assert!(
            o.max_resident as f64 <= o.budget as f64 * 1.05,
            "resident over budget"
        );
    }
}

/// Runs a scenario that changes process-wide state (a timer signal, fork
/// hooks) in a child process of its own.
fn in_child(name: &str, s: Scenario) {
    if !is_child() {
        // 120 s per default size (2 million operations): the 10 million
        // acceptance run takes 105 s alone for the largest scenario.
        let sizes = s.ops.div_ceil(1_000_000).max(2) as u64;
        let output = run_child_output_within(name, std::time::Duration::from_secs(60 * sizes));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{:?}\n{stderr}", output.status);
        assert!(stderr.contains("bad children 0"), "{stderr}");
        // The child's figures, for the acceptance run's record.
        for line in stderr.lines().filter(|l| l.starts_with("ops ")) {
            eprintln!("{name}: {line}");
        }
        return;
    }
    let o = run(s);
    check(&o, &s);
    std::process::exit(0);
}

#[test]
fn stress_sigbus_refault_shadow_checked() {
    let s = Scenario::new(ops(), mib());
    check(&run(s), &s);
}

#[test]
fn stress_keeping_clean_copies_shadow_checked() {
    let s = Scenario {
        keep_clean_copies: true,
        ..Scenario::new(ops() / 2, 32)
    };
    check(&run(s), &s);
}

#[test]
fn stress_sigbus_fifo_shadow_checked() {
    let s = Scenario {
        aging: AgingPolicy::Fifo,
        ..Scenario::new(ops() / 2, 32)
    };
    check(&run(s), &s);
}

#[test]
fn stress_handler_thread_shadow_checked() {
    // FaultMode::HandlerThread needs a privileged uffd (root here; CI runs as root).
    let s = Scenario {
        mode: FaultMode::HandlerThread,
        ..Scenario::new(ops() / 8, 16)
    };
    check(&run(s), &s);
}

#[test]
fn stress_shared_budget_with_timer_signals_and_forks() {
    in_child(
        "stress_shared_budget_with_timer_signals_and_forks",
        Scenario {
            regions: 3,
            timer_signal: true,
            forks: 20,
            ..Scenario::new(ops(), mib())
        },
    );
}

#[test]
fn stress_shared_budget_with_timer_signals() {
    in_child(
        "stress_shared_budget_with_timer_signals",
        Scenario {
            regions: 3,
            timer_signal: true,
            keep_clean_copies: true,
            ..Scenario::new(ops() / 2, mib())
        },
    );
}

/// Pages zpage never held: read first (mapped as the zero page) or written
/// first, then evicted and restored, under the timer handler's reads and
/// forks. (A write racing with the MOVE of such a zero page, which Linux
/// 6.18 answers with `EEXIST` although it moved the page, is too rare here
/// to show at this size: `hazards::fresh_pages_read_then_written_keep_their_writes`
/// makes it common.)
#[test]
fn stress_fresh_pages_with_timer_signals_and_forks() {
    in_child(
        "stress_fresh_pages_with_timer_signals_and_forks",
        Scenario {
            regions: 2,
            timer_signal: true,
            forks: 10,
            fresh: true,
            ..Scenario::new(ops() / 2, mib())
        },
    );
}

/// Zstd with a dictionary trained from the pages, taken at eviction by
/// pages with no quick reuse: the handler decodes it (also in the timer
/// handler's reads and in forked children, from their copy of the pool).
#[test]
fn stress_cold_codec_with_timer_signals_and_forks() {
    in_child(
        "stress_cold_codec_with_timer_signals_and_forks",
        Scenario {
            regions: 2,
            timer_signal: true,
            forks: 10,
            cold_codec: Some("zstd-dict"),
            ..Scenario::new(ops() / 2, mib())
        },
    );
}
