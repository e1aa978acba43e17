//! A budget that finds itself ([`BudgetConfig::auto_stall_ppm`], `zpage
//! run --budget auto[:STALL%]`): the budget shrinks while the time the
//! program's threads lose to compressed memory stays under a share of wall
//! time, and grows back when it passes it, as Meta's Senpai does for a
//! memory cgroup from the kernel's pressure stall information. zpage needs
//! no PSI: it times its own stalls.
//!
//! **What counts as a stall**: time in restores (a page brought back from
//! the pool, a tier or staging) and time a fault waited for room at the
//! budget. A first touch of fresh memory is not one: the program pays it
//! without zpage too. Summed over threads, so two threads stalled for the
//! whole of a look count twice its length.
//!
//! **The controller**, run by the reclaimer at most every
//! [`LOOK_EVERY_NS`]: with the share of the last interval under the
//! target, the budget goes down by at most [`PROBE`] of it, less the
//! closer the share is to the target, and by no more than the probe
//! ([`least_probe_pages`]). A probe starts as small as the target could
//! pay for were every page it evicts needed again, and doubles after each
//! look that stalled less than a quarter of the target while the program
//! did not grow: memory that turns out cold (or a budget with room above
//! an idle program) is let go within seconds, memory that is hot costs
//! little to find out, and a stall sets the probe back. The
//! budget is also held to what is resident plus some headroom
//! ([`headroom_pages`]): one far above the program's memory means
//! nothing. Over the target, it goes up by at most [`BACKOFF`], more the
//! further over, and then holds for [`HOLD_FIRST_NS`], twice as long
//! each time it rises again after having gone down (at most
//! [`HOLD_MOST_NS`]; rises at consecutive looks are one episode, and
//! each restarts the hold at its length): memory a program
//! comes back to now and then (a garbage collector's full pass, a
//! periodic job) stalls only at those visits, and a budget that went down
//! again at every quiet look in between evicted the same pages and
//! brought them back at every visit. The configured budget is the
//! most it may be; the smallest budget the least. A memory max, if any,
//! still caps it.
//!
//! **A growing program** raises the budget itself: a first touch of fresh
//! memory that would pass the low watermark lifts the budget over it
//! (`Shared::make_room_for_growth`) instead of evicting. New pages are no
//! sign that old ones are cold, and pages pushed out to make room for
//! them came back at a cost the controller never chose (sort reading its
//! input, the JVM filling its heap: 3-5% of wall time in restores). So
//! only the controller's probes let memory go, each at a size it can pay
//! for.
//!
//! The fault path's side ([`AutoBudget::add_stall`], and the raise for
//! growth) is one atomic each: async-signal-safe.

use crate::limits::{BudgetLimit, MIN_BUDGET_PAGES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How often the controller looks: often enough for programs that run for
/// seconds, seldom enough that a look covers many faults.
pub const LOOK_EVERY_NS: u64 = 100_000_000;

/// The most the budget goes down at a look, as a share of what is resident.
pub const PROBE: f64 = 0.02;

/// The most the budget goes up at a look, as a share of itself.
pub const BACKOFF: f64 = 0.25;

/// How long the budget holds after its first rise, and the longest hold:
/// a rise that follows a fall doubles it.
pub const HOLD_FIRST_NS: u64 = 1_000_000_000;
pub const HOLD_MOST_NS: u64 = 60_000_000_000;

/// What a restore costs here, about: a fault's signal round trip, an LZ4
/// decompression and a `UFFDIO_COPY` of a page (5-12 µs measured). It
/// sizes the smallest probe: what a look may risk at the stall target.
const RESTORE_NS: u64 = 10_000;

/// The fewest pages a probe lowers the budget by.
const PROBE_LEAST_PAGES: usize = 16;

/// The default stall target: 1% of wall time, in parts per million.
pub const DEFAULT_STALL_PPM: u32 = 10_000;

/// The budget option that carries the stall target (`BudgetConfig::auto_stall_ppm`),
/// as front ends set it when asked for `auto`.
pub const AUTO_BUDGET_OPTION: &str = "auto_budget_stall_ppm";

/// The most an automatic budget may be when nothing else bounds it (no
/// memory max): a quarter of the machine's memory, `zpage run`'s default
/// budget.
pub const AUTO_BUDGET_MOST: &str = "25%";

/// [`AUTO_BUDGET_MOST`] of this machine's memory, in bytes.
pub fn auto_budget_most_bytes() -> Result<usize, String> {
    let bytes =
        zpage_units::parse_size_or_percent(AUTO_BUDGET_MOST, zpage_units::machine_memory_bytes)
            .map_err(|e| format!("the most an automatic budget may be: {e}"))?;
    usize::try_from(bytes).map_err(|_| format!("{bytes} bytes of memory do not fit in usize"))
}

/// An automatic budget asked for in place of a size, as every front end
/// spells it (`zpage run --budget`, `zpage.budget(...)`): `auto`, or
/// `auto:STALL%` with a stall target above 0 and at most 50% of wall time.
/// Returns the stall target in parts per million, or `None` for text that
/// does not ask for one (a size).
pub fn parse_auto_budget(text: &str) -> Result<Option<u32>, String> {
    let Some(rest) = text.trim().strip_prefix("auto") else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Ok(Some(DEFAULT_STALL_PPM));
    }
    let target = rest
        .strip_prefix(':')
        .and_then(|t| t.strip_suffix('%'))
        .and_then(|t| t.trim().parse::<f64>().ok())
        .filter(|pct| pct.is_finite() && *pct > 0.0 && *pct <= 50.0);
    match target {
        Some(pct) => Ok(Some(((pct * 10_000.0).round() as u32).max(1))),
        None => Err(format!(
            "budget {text:?}: an automatic budget is `auto` or `auto:STALL%` with a stall target above 0 and at most 50% of wall time (auto:1% is the default)"
        )),
    }
}

/// What the controller saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutoBudgetStatus {
    /// The stall target, in parts per million of wall time.
    pub target_ppm: u32,
    /// Stall time so far, summed over threads.
    pub stall_ns: u64,
    /// Wall time since the budget started.
    pub wall_ns: u64,
    /// Looks that lowered the budget, and that raised it.
    pub shrinks: u64,
    pub grows: u64,
    /// The lowest budget it set, in pages (0 before the first change).
    pub lowest_pages: u64,
}

impl AutoBudgetStatus {
    /// The stall share over the whole run, in parts per million.
    pub fn stall_ppm(&self) -> u64 {
        if self.wall_ns == 0 {
            return 0;
        }
        (u128::from(self.stall_ns) * 1_000_000 / u128::from(self.wall_ns)) as u64
    }
}

/// A budget's controller.
#[derive(Debug)]
pub struct AutoBudget {
    target_ppm: u32,
    started_ns: u64,
    stall_ns: AtomicU64,
    last_look_ns: AtomicU64,
    stall_at_last_look: AtomicU64,
    shrinks: AtomicU64,
    grows: AtomicU64,
    lowest_pages: AtomicU64,
    /// Resident pages at the last look: how fast the program grows.
    resident_at_last_look: AtomicU64,
    /// The hold after the last rise, and when it ends.
    hold_ns: AtomicU64,
    hold_until_ns: AtomicU64,
    /// The budget went down since the last rise: the next rise is a new
    /// episode, and doubles the hold.
    lowered_since_rise: AtomicBool,
    /// The most the next look may lower the budget by, in pages.
    probe_pages: AtomicU64,
}

impl AutoBudget {
    pub fn new(target_ppm: u32, now_ns: u64) -> AutoBudget {
        AutoBudget {
            target_ppm,
            started_ns: now_ns,
            stall_ns: AtomicU64::new(0),
            last_look_ns: AtomicU64::new(now_ns),
            stall_at_last_look: AtomicU64::new(0),
            shrinks: AtomicU64::new(0),
            grows: AtomicU64::new(0),
            lowest_pages: AtomicU64::new(0),
            resident_at_last_look: AtomicU64::new(0),
            hold_ns: AtomicU64::new(0),
            hold_until_ns: AtomicU64::new(0),
            lowered_since_rise: AtomicBool::new(false),
            probe_pages: AtomicU64::new(least_probe_pages(target_ppm) as u64),
        }
    }

    /// Counts `ns` a thread lost to a restore or a wait for room.
    /// Async-signal-safe.
    pub fn add_stall(&self, ns: u64) {
        self.stall_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Sets the budget for the interval since the last look, if one is due
    /// (the reclaimer's thread only); `Some(true)` if it went up.
    pub fn look(&self, now_ns: u64, limit: &BudgetLimit, resident_pages: usize) -> Option<bool> {
        let last = self.last_look_ns.load(Ordering::Relaxed);
        let elapsed = now_ns.checked_sub(last)?;
        if elapsed < LOOK_EVERY_NS {
            return None;
        }
        self.last_look_ns.store(now_ns, Ordering::Relaxed);
        let stall = self.stall_ns.load(Ordering::Relaxed);
        let interval = stall.saturating_sub(self.stall_at_last_look.swap(stall, Ordering::Relaxed));
        let share = interval as f64 / elapsed as f64;
        let grown = (resident_pages as u64).saturating_sub(
            self.resident_at_last_look
                .swap(resident_pages as u64, Ordering::Relaxed),
        ) as usize;
        let under_target = share < target_share(self.target_ppm);
        if under_target && now_ns < self.hold_until_ns.load(Ordering::Relaxed) {
            return Some(false);
        }
        let wanted = limit.wanted_pages();
        let probe = self.probe_pages.load(Ordering::Relaxed) as usize;
        let next = next_budget(wanted, resident_pages, grown, share, self.target_ppm, probe);
        let next = limit.set_wanted_pages(next);
        // A quiet look at a program that did not grow doubles the probe:
        // what the last step let go was not needed again, and an idle
        // program's budget comes down within seconds. While the program
        // grows the probe stays where it is: its fresh pages raise the
        // budget (`Shared::make_room_for_growth`), and once it stops the
        // budget comes down from there a small probe at a time.
        let settled = grown <= wanted / 100;
        let least = least_probe_pages(self.target_ppm);
        let probe = if !under_target {
            least
        } else if share >= target_share(self.target_ppm) / 4.0 {
            probe / 2
        } else if settled {
            probe.saturating_mul(2)
        } else {
            probe
        };
        self.probe_pages
            .store(probe.max(least) as u64, Ordering::Relaxed);
        if !under_target {
            let hold = self.hold_ns.load(Ordering::Relaxed);
            let hold = if self.lowered_since_rise.swap(false, Ordering::Relaxed) {
                hold * 2
            } else {
                hold
            }
            .clamp(HOLD_FIRST_NS, HOLD_MOST_NS);
            self.hold_ns.store(hold, Ordering::Relaxed);
            self.hold_until_ns.store(now_ns + hold, Ordering::Relaxed);
        }
        if next < wanted {
            self.shrinks.fetch_add(1, Ordering::Relaxed);
            self.lowered_since_rise.store(true, Ordering::Relaxed);
            let lowest = self.lowest_pages.load(Ordering::Relaxed);
            if lowest == 0 || (next as u64) < lowest {
                self.lowest_pages.store(next as u64, Ordering::Relaxed);
            }
        } else if next > wanted {
            self.grows.fetch_add(1, Ordering::Relaxed);
        }
        Some(next > wanted)
    }

    pub fn status(&self, now_ns: u64) -> AutoBudgetStatus {
        AutoBudgetStatus {
            target_ppm: self.target_ppm,
            stall_ns: self.stall_ns.load(Ordering::Relaxed),
            wall_ns: now_ns.saturating_sub(self.started_ns),
            shrinks: self.shrinks.load(Ordering::Relaxed),
            grows: self.grows.load(Ordering::Relaxed),
            lowest_pages: self.lowest_pages.load(Ordering::Relaxed),
        }
    }
}

/// Room kept above what is resident while the budget is not binding: a
/// quarter of it, at least 32 MiB, and at least twice what the program
/// grew by since the last look (`grown`). A budget far above the
/// program's memory means nothing, so a look brings it down to this at
/// once; below it the probes take over. A growing program's fresh pages
/// raise the budget themselves (`Shared::make_room_for_growth`), so the
/// headroom no longer has to cover a look's growth (sort reading its
/// input does 50 MiB a look); it keeps the budget's first probes from
/// starting at the program's very edge.
pub fn headroom_pages(resident: usize, grown: usize) -> usize {
    (resident / 4)
        .max(HEADROOM_PAGES)
        .max(grown.saturating_mul(2))
}

/// The least headroom, in pages (32 MiB).
const HEADROOM_PAGES: usize = 8192;

/// The smallest probe for a stall target: the pages whose restores, were
/// the program to need every one of them again, would take the target's
/// share of a look (100 pages, 400 KiB, at 1%). The probe doubles from
/// there while the program does not stall, so a cold program's budget
/// reaches [`PROBE`] steps within a second.
pub fn least_probe_pages(target_ppm: u32) -> usize {
    let allowed_ns = u128::from(LOOK_EVERY_NS) * u128::from(target_ppm.max(1)) / 1_000_000;
    ((allowed_ns / u128::from(RESTORE_NS)) as usize).max(PROBE_LEAST_PAGES)
}

/// A stall target in parts per million as a share of wall time (at least
/// one part per million).
fn target_share(target_ppm: u32) -> f64 {
    f64::from(target_ppm.max(1)) / 1e6
}

/// The controller's rule: the budget in pages after an interval whose
/// stall share was `share` (of wall time), from a budget of `wanted` pages
/// of which `resident` are resident, `grown` more than at the last look.
/// Under the target it goes down from the budget, held to what is
/// resident plus [`headroom_pages`], by at most `probe_pages`; over it,
/// up from the budget.
pub fn next_budget(
    wanted: usize,
    resident: usize,
    grown: usize,
    share: f64,
    target_ppm: u32,
    probe_pages: usize,
) -> usize {
    let target = target_share(target_ppm);
    if share < target {
        let base = wanted
            .min(resident.saturating_add(headroom_pages(resident, grown)))
            .max(MIN_BUDGET_PAGES);
        let step = (base as f64 * PROBE * (1.0 - share / target)).ceil() as usize;
        base.saturating_sub(step.min(probe_pages).max(1))
    } else {
        let over = (share / target - 1.0).min(1.0);
        let step = (wanted as f64 * BACKOFF * over).ceil() as usize;
        wanted.saturating_add(step.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetConfig;

    #[test]
    fn under_the_target_it_shrinks_from_what_is_resident_and_some_headroom() {
        // A budget of a million pages with 10,000 resident and no stall:
        // held to 10,000 + 8,192 pages of headroom, less 2%.
        assert_eq!(
            next_budget(1_000_000, 10_000, 0, 0.0, 10_000, usize::MAX),
            17_828
        );
        // A binding budget: 2% below it; at half the target, 1%.
        assert_eq!(
            next_budget(10_000, 10_000, 0, 0.0, 10_000, usize::MAX),
            9_800
        );
        assert_eq!(
            next_budget(10_000, 10_000, 0, 0.005, 10_000, usize::MAX),
            9_900
        );
        // A large program: a quarter of what is resident as headroom.
        assert_eq!(
            next_budget(1_000_000, 100_000, 0, 0.0, 10_000, usize::MAX),
            122_500
        );
        // One that grew by 20,000 pages since the last look: twice that.
        assert_eq!(
            next_budget(1_000_000, 100_000, 20_000, 0.0, 10_000, usize::MAX),
            137_200
        );
    }

    #[test]
    fn a_step_is_at_most_the_probe() {
        assert_eq!(least_probe_pages(10_000), 100);
        assert_eq!(least_probe_pages(50_000), 500);
        assert_eq!(least_probe_pages(100), PROBE_LEAST_PAGES);
        assert_eq!(next_budget(10_000, 10_000, 0, 0.0, 10_000, 100), 9_900);
        // Held to 10,000 + 8,192 pages of headroom first.
        assert_eq!(next_budget(20_000, 10_000, 0, 0.0, 10_000, 100), 18_092);
        // Never more than PROBE of the budget, and at least a page.
        assert_eq!(next_budget(10_000, 10_000, 0, 0.0, 10_000, 1_000), 9_800);
        assert_eq!(next_budget(10_000, 10_000, 0, 0.0, 10_000, 0), 9_999);
    }

    /// The probe doubles after each quiet look at a program that did not
    /// grow, stays while it grows, halves after a stall under the target
    /// and starts again from the least after one over it.
    #[test]
    fn the_probe_grows_while_evicting_costs_nothing() {
        let config = BudgetConfig::new(64 << 20);
        let limit = BudgetLimit::new(&config);
        let auto = AutoBudget::new(DEFAULT_STALL_PPM, 0);
        let probe = || auto.probe_pages.load(Ordering::Relaxed);
        let mut at = 0;
        let mut look = |resident: usize, stall: u64| {
            auto.add_stall(stall);
            at += LOOK_EVERY_NS;
            let before = limit.wanted_pages();
            auto.look(at, &limit, resident);
            before as i64 - limit.wanted_pages() as i64
        };
        // A budget of 16,384 pages, 10,000 of them resident since the
        // first look: the program grew, so the probe stays.
        assert_eq!(look(10_000, 0), 100);
        assert_eq!(probe(), 100);
        // Quiet and settled: 100, 200, 400 pages.
        assert_eq!(look(10_000, 0), 100);
        assert_eq!(look(10_000, 0), 200);
        assert_eq!(probe(), 400);
        // Growing: the step is 2% of the budget (under the probe), and
        // the probe stays.
        assert_eq!(look(12_000, 0), 320);
        assert_eq!(probe(), 400);
        // A stall at half the target: the step shrinks with the share (1%
        // of the budget, under the probe), the probe halves.
        assert_eq!(look(12_000, LOOK_EVERY_NS / 200), 157);
        assert_eq!(probe(), 200);
        // Over the target: the budget rises, the probe is the least.
        assert!(look(12_000, LOOK_EVERY_NS / 10) < 0);
        assert_eq!(probe(), 100);
    }

    #[test]
    fn over_the_target_it_grows_more_the_further_over() {
        assert_eq!(
            next_budget(10_000, 10_000, 0, 0.015, 10_000, usize::MAX),
            11_250
        );
        assert_eq!(
            next_budget(10_000, 10_000, 0, 0.5, 10_000, usize::MAX),
            12_500
        );
        // Exactly at the target: up by a page.
        assert_eq!(
            next_budget(10_000, 10_000, 0, 0.01, 10_000, usize::MAX),
            10_001
        );
    }

    #[test]
    fn auto_takes_a_stall_target_in_percent() {
        assert!(crate::BudgetOption::named(AUTO_BUDGET_OPTION).is_some());
        assert_eq!(parse_auto_budget("256M").unwrap(), None);
        assert_eq!(parse_auto_budget("auto").unwrap(), Some(10_000));
        assert_eq!(parse_auto_budget("auto:0.5%").unwrap(), Some(5_000));
        assert_eq!(parse_auto_budget("auto:0.01%").unwrap(), Some(100));
        for bad in [
            "auto:",
            "auto:2",
            "auto:0%",
            "auto:90%",
            "automatic",
            "auto:x%",
        ] {
            let e = parse_auto_budget(bad).unwrap_err();
            assert!(e.contains("auto:STALL%"), "{bad}: {e}");
        }
    }

    #[test]
    fn looks_come_at_most_every_interval_and_stay_within_the_budget() {
        let config = BudgetConfig::new(64 << 20);
        let limit = BudgetLimit::new(&config);
        let auto = AutoBudget::new(DEFAULT_STALL_PPM, 0);
        assert_eq!(auto.look(LOOK_EVERY_NS - 1, &limit, 1000), None);
        // No stall, 10,000 pages resident, a budget of 16,384: down by
        // the first probe, 100 pages (2% would be 328).
        assert_eq!(auto.look(LOOK_EVERY_NS, &limit, 10_000), Some(false));
        assert_eq!(limit.wanted_pages(), 16_284);
        // Half of the next interval stalled: back up, by a quarter.
        auto.add_stall(LOOK_EVERY_NS / 2);
        assert_eq!(auto.look(2 * LOOK_EVERY_NS, &limit, 10_000), Some(true));
        assert_eq!(limit.wanted_pages(), 16_384);
        // Never above the configured budget.
        for i in 3..40 {
            auto.add_stall(LOOK_EVERY_NS);
            auto.look(i * LOOK_EVERY_NS, &limit, 16_000);
        }
        assert_eq!(limit.wanted_pages(), (64 << 20) / 4096);
        let status = auto.status(40 * LOOK_EVERY_NS);
        assert_eq!((status.shrinks, status.lowest_pages), (1, 16_284));
        assert!(status.stall_ppm() > 900_000, "{status:?}");
    }

    /// After a rise the budget holds through quiet looks, a second the
    /// first time and twice as long after each further rise, so memory
    /// the program comes back to now and then is not evicted in between.
    #[test]
    fn after_a_rise_the_budget_holds_longer_each_time() {
        let config = BudgetConfig::new(64 << 20);
        let limit = BudgetLimit::new(&config);
        let auto = AutoBudget::new(DEFAULT_STALL_PPM, 0);
        let look = |at_ns: u64| auto.look(at_ns, &limit, 10_000);
        assert_eq!(look(LOOK_EVERY_NS), Some(false));
        let lowered = limit.wanted_pages();
        auto.add_stall(LOOK_EVERY_NS / 2);
        assert_eq!(look(2 * LOOK_EVERY_NS), Some(true));
        let risen = limit.wanted_pages();
        assert!(risen > lowered);
        // A rise at the next look is the same episode: the hold starts
        // again from it, no longer.
        auto.add_stall(LOOK_EVERY_NS / 2);
        let rise = 3 * LOOK_EVERY_NS;
        look(rise);
        assert_eq!(limit.wanted_pages(), risen);
        // Quiet looks within the hold leave it where it is.
        for i in 1..HOLD_FIRST_NS / LOOK_EVERY_NS {
            assert_eq!(look(rise + i * LOOK_EVERY_NS), Some(false));
            assert_eq!(limit.wanted_pages(), risen);
        }
        // After it, it goes down again.
        assert_eq!(look(rise + HOLD_FIRST_NS), Some(false));
        assert!(limit.wanted_pages() < risen);
        // A second rise holds twice as long.
        auto.add_stall(LOOK_EVERY_NS);
        let second = rise + HOLD_FIRST_NS + LOOK_EVERY_NS;
        assert_eq!(look(second), Some(true));
        let risen = limit.wanted_pages();
        assert_eq!(look(second + HOLD_FIRST_NS), Some(false));
        assert_eq!(limit.wanted_pages(), risen);
        assert_eq!(look(second + 2 * HOLD_FIRST_NS), Some(false));
        assert!(limit.wanted_pages() < risen);
        assert_eq!(auto.hold_ns.load(Ordering::Relaxed), 2 * HOLD_FIRST_NS);
    }
}
