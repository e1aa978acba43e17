//! The memory max ([`BudgetConfig::memory_max_bytes`]): the process's whole
//! resident memory, as `/proc/PID/status` (`VmRSS`), a container's limit
//! and the OOM killer count it, held at or below a limit: the program's
//! pages in regions and out of them, the compressed pool, the staging
//! area and zpage's own memory.
//!
//! Only the regions' pages can be made to leave, so the memory max holds
//! by shrinking the budget: at each look (the reclaimer's, about once a
//! millisecond, [`LOOK_EVERY_NS`]) it reads the process's resident memory
//! (`/proc/self/statm` into a stack buffer: no allocation, three system
//! calls) and caps the budget at what the rest leaves:
//!
//! `budget <= memory_max - (resident memory - the budget's resident pages) - margin - pool growth`
//!
//! (the pool's growth since the last look, [`GROWTH_LOOKS`] times: pages
//! that hardly compress take as much room there as they leave in the
//! budget, and evictions trail a budget that falls as the pool grows).
//!
//! As pages are compressed the pool grows and the budget shrinks with it;
//! as pages are restored or freed it grows back (never above the configured
//! budget). Faults that would pass the budget wait for the reclaimer, as at
//! any budget (`fault::throttle`), and with a memory max they wait for as
//! long as pages can leave. What grows between two looks, outside the
//! regions or in the pool, is what the margin ([`margin_bytes`]) is for.
//!
//! With a tier below RAM, the pool makes room too: each look sets the
//! pool's cap (what [`MemoryMax::look`] returns) at three quarters of what the
//! rest of the process leaves under the limit, and the reclaimer writes the
//! oldest compressed pages back as the pool nears it (`reclaim/writeback.rs`,
//! as with `max_pool_bytes`). The budget keeps the other quarter at least,
//! so resident pages are not squeezed to nothing while data that compresses
//! too little fills the pool: the limit holds whatever the data, at the
//! tier's speed for the pages it holds (data that does not compress at all
//! runs at the limit less its margin, and a loaded machine passed it by up
//! to 2.6 MiB: evicting such pages frees nothing until the writeback does).
//!
//! What it cannot hold, it reports: when the rest of the process alone (the
//! pool among it, when the data compresses too little to fit) leaves less
//! than the least budget it leaves ([`FLOOR_BYTES`]), or pages cannot leave
//! (the pool at its cap with no tier, every page pinned), resident memory
//! passes the limit; each look that finds it over counts, with the most it
//! was over ([`MemoryMaxStatus`]). A budget whose process is over the limit
//! when it starts is refused ([`MemoryMax::check_start`]).

use crate::error::RegionError;
use crate::limits::{BudgetLimit, Resident};
use crate::sys::{self, PAGE_SIZE};
use std::sync::atomic::{AtomicU64, Ordering};

/// How often the reclaimer looks at the process's resident memory while it
/// works (and at most this often: a look costs three system calls, a few
/// microseconds). A program that faults as fast as it can makes about 1 MiB
/// resident in that time, and the pool grows by what the reclaimer
/// compressed in it.
pub const LOOK_EVERY_NS: u64 = 1_000_000;

/// The room kept free under the limit for what grows between two looks (a
/// sixty-fourth of the limit, 4 to 32 MiB): the pool's growth and the
/// program's memory outside regions (stacks, files it maps), and the
/// kernel's resident count, which may lag by a few hundred KiB. At 2 MiB,
/// CPython parsing its standard library under 86 MiB passed the limit by
/// 0.2 MiB at 11 looks of 36,000.
pub fn margin_bytes(limit_bytes: u64) -> u64 {
    (limit_bytes / 64).clamp(4 << 20, 32 << 20)
}

/// Looks' worth of the pool's growth kept free under the limit. When pages
/// hardly compress, evicting them moves as much memory into the pool as it
/// takes out of the budget, so the budget falls at each look by what the
/// pool grew, and the reclaimer's evictions trail it: by 5 to 6 looks'
/// worth (about 4 MiB) in a debug build filling 160 MiB of random bytes.
const GROWTH_LOOKS: u64 = 8;

/// The least budget the memory max leaves: 4 MiB. A budget smaller than a
/// few system calls' buffers (the system-call trap pins them 1 MiB at a
/// time) leaves the reclaimer nothing it may take while they run, and the
/// budget would count as stuck, letting faults past it; and where the rest
/// of the process leaves less, the limit cannot be held anyway (the looks
/// count by how much it is passed).
pub const FLOOR_BYTES: usize = 4 << 20;

/// What the memory max saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryMaxStatus {
    /// The limit.
    pub limit_bytes: u64,
    /// The budget it leaves now (the budget in effect).
    pub budget_bytes: u64,
    /// Looks at the process's resident memory.
    pub looks: u64,
    /// The most resident memory a look found.
    pub rss_peak_bytes: u64,
    /// Looks that found resident memory over the limit.
    pub over_count: u64,
    /// The most it was over the limit at a look.
    pub over_peak_bytes: u64,
}

/// A budget's memory max, and what its looks found.
#[derive(Debug)]
pub struct MemoryMax {
    limit_bytes: u64,
    margin_bytes: u64,
    last_look_ns: AtomicU64,
    looks: AtomicU64,
    rss_peak_bytes: AtomicU64,
    over_count: AtomicU64,
    over_peak_bytes: AtomicU64,
    /// The pool's memory at the last look.
    last_pool_bytes: AtomicU64,
}

impl MemoryMax {
    pub fn new(limit_bytes: u64) -> MemoryMax {
        MemoryMax {
            limit_bytes,
            margin_bytes: margin_bytes(limit_bytes),
            last_look_ns: AtomicU64::new(0),
            looks: AtomicU64::new(0),
            rss_peak_bytes: AtomicU64::new(0),
            over_count: AtomicU64::new(0),
            over_peak_bytes: AtomicU64::new(0),
            last_pool_bytes: AtomicU64::new(0),
        }
    }

    /// Refuses a limit the process passes already, with the least budget
    /// and the margin on top of what it holds now.
    pub fn check_start(&self) -> Result<(), RegionError> {
        let Ok(rss) = sys::resident_bytes() else {
            return Err(RegionError::InvalidConfig(
                "memory_max: this process's resident memory cannot be read (/proc/self/statm): the limit could not be held".into(),
            ));
        };
        let needed = rss + FLOOR_BYTES as u64 + self.margin_bytes;
        if needed > self.limit_bytes {
            return Err(RegionError::InvalidConfig(format!(
                "memory_max {} bytes cannot be held: this process has {rss} bytes resident already, and the least budget a memory max leaves (4 MiB) and the margin kept for growth between looks ({} bytes) come on top: give at least {needed} bytes, better the program's needs outside compressed memory plus room to work",
                self.limit_bytes, self.margin_bytes
            )));
        }
        Ok(())
    }

    /// Looks at the process's resident memory, unless the last look was less
    /// than [`LOOK_EVERY_NS`] ago (or `now_ns` is then), and caps `limit` at
    /// what the rest of the process leaves. Returns, if it looked, the
    /// pool's share of the limit (its cap when there is a tier to write
    /// back to); `pool_bytes` is the pool's memory now.
    pub fn look(
        &self,
        now_ns: u64,
        limit: &BudgetLimit,
        resident: &Resident,
        pool_bytes: u64,
    ) -> Option<u64> {
        let last = self.last_look_ns.load(Ordering::Relaxed);
        if now_ns < last.saturating_add(LOOK_EVERY_NS) {
            return None;
        }
        self.last_look_ns.store(now_ns, Ordering::Relaxed);
        // The budget's pages before and after the read: the fewer of the
        // two is counted as the regions' share, so a page that left in
        // between counts outside (a smaller budget), never the other way.
        let before = resident.pages();
        let Ok(rss) = sys::resident_bytes() else {
            return None;
        };
        let regions = (before.min(resident.pages()) * PAGE_SIZE) as u64;
        self.seen(rss);
        let pool_growth = pool_bytes
            .saturating_sub(self.last_pool_bytes.swap(pool_bytes, Ordering::Relaxed))
            .saturating_mul(GROWTH_LOOKS);
        limit.set_cap_pages(self.room_pages(rss, regions, pool_growth));
        Some(self.pool_room(rss, regions, pool_bytes))
    }

    /// Three quarters of what the process's memory outside its regions'
    /// pages and the pool leaves under the limit, the margin kept: the
    /// pool's share when the budget keeps a quarter at least.
    fn pool_room(&self, rss: u64, regions: u64, pool_bytes: u64) -> u64 {
        let rest = rss.saturating_sub(regions).saturating_sub(pool_bytes);
        let room = self.limit_bytes.saturating_sub(rest + self.margin_bytes);
        room / 4 * 3
    }

    /// The budget in pages that keeps `rss` under the limit, the margin
    /// kept, when `regions` of it are the budget's pages: what the rest of
    /// the process leaves, and never less than [`FLOOR_BYTES`]. `pool_growth`
    /// (the pool's growth at the last look, [`GROWTH_LOOKS`] times) is kept
    /// free too: pages that hardly compress take as much room in the pool
    /// as they leave, and the evictions trail a budget that falls as it
    /// grows.
    fn room_pages(&self, rss: u64, regions: u64, pool_growth: u64) -> usize {
        let outside = rss.saturating_sub(regions) + pool_growth;
        let room = self.limit_bytes.saturating_sub(outside + self.margin_bytes);
        usize::try_from(room / PAGE_SIZE as u64)
            .unwrap_or(usize::MAX)
            .max(FLOOR_BYTES / PAGE_SIZE)
    }

    /// Counts one look that found `rss` bytes resident.
    fn seen(&self, rss: u64) {
        self.looks.fetch_add(1, Ordering::Relaxed);
        self.rss_peak_bytes.fetch_max(rss, Ordering::Relaxed);
        if rss > self.limit_bytes {
            self.over_count.fetch_add(1, Ordering::Relaxed);
            self.over_peak_bytes
                .fetch_max(rss - self.limit_bytes, Ordering::Relaxed);
        }
    }

    /// What the looks found, with the budget in effect now.
    pub fn status(&self, limit: &BudgetLimit) -> MemoryMaxStatus {
        MemoryMaxStatus {
            limit_bytes: self.limit_bytes,
            budget_bytes: (limit.budget_pages() * PAGE_SIZE) as u64,
            looks: self.looks.load(Ordering::Relaxed),
            rss_peak_bytes: self.rss_peak_bytes.load(Ordering::Relaxed),
            over_count: self.over_count.load(Ordering::Relaxed),
            over_peak_bytes: self.over_peak_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetConfig;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_margin_grows_with_the_limit_within_bounds() {
        assert_eq!(margin_bytes(16 * MIB), 4 * MIB);
        assert_eq!(margin_bytes(256 * MIB), 4 * MIB);
        assert_eq!(margin_bytes(512 * MIB), 8 * MIB);
        assert_eq!(margin_bytes(64 << 30), 32 * MIB);
    }

    #[test]
    fn the_budget_is_what_the_rest_of_the_process_leaves() {
        let max = MemoryMax::new(512 * MIB);
        let pages = |bytes: u64| (bytes / PAGE_SIZE as u64) as usize;
        // 100 MiB resident, 60 of them the budget's: 40 outside, 8 margin.
        assert_eq!(max.room_pages(100 * MIB, 60 * MIB, 0), pages(464 * MIB));
        // The pool grew by 30 MiB: the budget shrinks by as much.
        assert_eq!(max.room_pages(130 * MIB, 60 * MIB, 0), pages(434 * MIB));
        // ... and by as much again when it grew that much since the last
        // look (it will grow as much again before the next).
        assert_eq!(
            max.room_pages(130 * MIB, 60 * MIB, 30 * MIB),
            pages(404 * MIB)
        );
        // More of the budget's pages counted than are resident (pages on
        // the shared zero page): nothing outside.
        assert_eq!(max.room_pages(10 * MIB, 60 * MIB, 0), pages(504 * MIB));
        // The rest alone over the limit: the floor.
        assert_eq!(max.room_pages(600 * MIB, 0, 0), pages(4 * MIB));
        assert_eq!(max.room_pages(500 * MIB, 0, 0), pages(4 * MIB));
    }

    #[test]
    fn the_pool_may_take_three_quarters_of_what_the_rest_leaves() {
        let max = MemoryMax::new(512 * MIB);
        // 200 MiB resident: 60 the budget's, 100 the pool's, 40 the rest;
        // 8 MiB margin: 464 MiB of room, 348 of them the pool's.
        assert_eq!(max.pool_room(200 * MIB, 60 * MIB, 100 * MIB), 348 * MIB);
        // The pool's own growth does not shrink its cap; the rest's does.
        assert_eq!(max.pool_room(300 * MIB, 60 * MIB, 200 * MIB), 348 * MIB);
        assert_eq!(max.pool_room(240 * MIB, 60 * MIB, 100 * MIB), 318 * MIB);
        // The rest alone over the limit: no room for a pool.
        assert_eq!(max.pool_room(600 * MIB, 0, 0), 0);
    }

    /// The test process's other tests change its memory meanwhile: only
    /// what holds whatever they do is checked here (the exact figures are
    /// `room_pages`'s, above; `tests/memory_max.rs` measures a whole run).
    #[test]
    fn a_look_caps_the_budget_and_counts_what_it_finds() {
        let limit = BudgetLimit::new(&BudgetConfig::new(1 << 30));
        let resident = Resident::default();
        let max = MemoryMax::new(sys::resident_bytes().unwrap() + (1 << 30));
        assert!(max.check_start().is_ok());
        // Three quarters of the gigabyte the rest leaves, less the margin.
        assert!(max
            .look(1_000_000_000, &limit, &resident, 0)
            .is_some_and(|cap| ((1 << 29)..(3 << 28)).contains(&cap)));
        // Too soon for another look.
        assert_eq!(max.look(1_000_000_001, &limit, &resident, 0), None);
        let status = max.status(&limit);
        assert_eq!(status.looks, 1);
        assert!(status.rss_peak_bytes > 0);
        assert_eq!(
            status.budget_bytes,
            (limit.budget_pages() * PAGE_SIZE) as u64
        );
        assert!(status.budget_bytes <= (1 << 30) + status.rss_peak_bytes - margin_bytes(1 << 30));
        // A limit the process is over: the floor, and counted.
        let over = MemoryMax::new(MIB);
        assert!(over.check_start().is_err());
        assert_eq!(over.look(1_000_000_000, &limit, &resident, 0), Some(0));
        assert_eq!(limit.budget_pages(), FLOOR_BYTES / PAGE_SIZE);
        let status = over.status(&limit);
        assert_eq!(status.over_count, 1);
        assert!(status.over_peak_bytes > 0, "{status:?}");
    }
}
