//! The public [`Region`] type.

use crate::config::{AgingPolicy, FaultMode, RegionConfig};
use crate::error::RegionError;
use crate::inner::{AdmitRing, Ctx, Inner};
use crate::reclaim::{self, Evict, Reclaimer, Trigger};
use crate::signal;
use crate::slots::WorkerSlots;
use crate::state::*;
use crate::stats::{Counters, RegionStats};
use crate::sys::{self, Mapping};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use zpage_codec::PAGE_SIZE;

/// A region of memory whose cold pages zpage compresses.
///
/// The program reads and writes `[as_ptr(), as_ptr() + len())` directly. Pages
/// beyond the resident budget are taken out, compressed, and restored on the
/// next access. See the crate documentation for the design and its limits.
#[derive(Debug)]
pub struct Region {
    inner: Arc<Inner>,
    table_index: usize,
    threads: Vec<JoinHandle<()>>,
}

fn uffd_unavailable(e: sys::Errno, mode: FaultMode) -> RegionError {
    RegionError::UffdUnavailable {
        errno: e.to_string(),
        fix: match mode {
            FaultMode::Sigbus => "zpage needs userfaultfd(2) with UFFD_USER_MODE_ONLY (Linux >= 5.11, CONFIG_USERFAULTFD=y; not blocked by seccomp)",
            FaultMode::HandlerThread => "FaultMode::HandlerThread traps kernel-mode faults and so needs CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1, or read-write access to /dev/userfaultfd; or use FaultMode::Sigbus, which needs no privilege",
        },
    }
}

/// Creates a uffd with `features`; `kernel_faults` asks for one that traps
/// kernel-mode accesses too (privileged).
fn make_uffd(features: u64, kernel_faults: bool, mode: FaultMode) -> Result<i32, RegionError> {
    let base_flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    let fd = if kernel_faults {
        match sys::userfaultfd(base_flags) {
            Ok(fd) => fd,
            Err(e) => sys::userfaultfd_dev(base_flags).map_err(|_| uffd_unavailable(e, mode))?,
        }
    } else {
        sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY)
            .map_err(|e| uffd_unavailable(e, mode))?
    };
    match sys::uffd_api(fd, features) {
        Ok(_) => Ok(sys::dup_high(fd, 512)),
        Err(e) => {
            sys::close(fd);
            // Learn what is there, for the error message.
            let probe = sys::userfaultfd(base_flags | sys::UFFD_USER_MODE_ONLY);
            let available = match probe {
                Ok(p) => {
                    let a = sys::uffd_api(p, 0).unwrap_or(0);
                    sys::close(p);
                    a
                }
                Err(_) => 0,
            };
            if features & !available != 0 {
                Err(RegionError::FeaturesMissing {
                    missing: features & !available,
                    available,
                })
            } else {
                Err(RegionError::sys("UFFDIO_API", e))
            }
        }
    }
}

impl Region {
    /// Creates a region (all pages initially zero, none resident).
    pub fn new(config: RegionConfig) -> Result<Region, RegionError> {
        config.validate()?;
        let pages = config.size_bytes.div_ceil(PAGE_SIZE);
        let budget_pages = config.budget_bytes / PAGE_SIZE;
        let staging_target = match config.aging {
            AgingPolicy::Fifo => 0,
            AgingPolicy::Refault => budget_pages * config.staging_pct as usize / 100,
        };
        let high_pages = budget_pages * config.high_watermark_pct as usize / 100;
        let low_pages = budget_pages * config.low_watermark_pct as usize / 100;
        // Room for the trial set plus one round's worth of pages in flight.
        let staging_pages = (staging_target + (budget_pages - low_pages) + 1024).div_ceil(64) * 64;

        let region = Mapping::new(pages).map_err(|e| RegionError::sys("mmap(region)", e))?;
        let staging =
            Mapping::new(staging_pages).map_err(|e| RegionError::sys("mmap(staging)", e))?;

        let (region_features, kernel_faults) = match config.mode {
            FaultMode::Sigbus => (
                sys::FEATURE_SIGBUS | sys::FEATURE_MOVE | crate::event::FEATURES,
                false,
            ),
            FaultMode::HandlerThread => (sys::FEATURE_MOVE | crate::event::FEATURES, true),
        };
        let uffd = make_uffd(region_features, kernel_faults, config.mode)?;
        let sfd = match make_uffd(
            sys::FEATURE_SIGBUS | sys::FEATURE_MOVE,
            false,
            FaultMode::Sigbus,
        ) {
            Ok(fd) => fd,
            Err(e) => {
                sys::close(uffd);
                return Err(e);
            }
        };
        let close_both = |e: RegionError| {
            sys::close(uffd);
            sys::close(sfd);
            e
        };
        let region_mode = if config.track_writes {
            sys::REGISTER_MODE_MISSING | sys::REGISTER_MODE_WP
        } else {
            sys::REGISTER_MODE_MISSING
        };
        sys::uffd_register(uffd, region.base(), region.len(), region_mode)
            .map_err(|e| close_both(RegionError::sys("UFFDIO_REGISTER(region)", e)))?;
        sys::uffd_register(
            sfd,
            staging.base(),
            staging.len(),
            sys::REGISTER_MODE_MISSING,
        )
        .map_err(|e| close_both(RegionError::sys("UFFDIO_REGISTER(staging)", e)))?;

        let store = zpage_store::Store::new(zpage_store::StoreConfig {
            codec: config.codec.clone(),
            threshold: config.threshold,
            pool: config.pool,
            max_pool_bytes: config.max_pool_bytes,
            // The region ages pages itself; the store's LRU would only cost a lock per store.
            track_lru: false,
            ..zpage_store::StoreConfig::default()
        })
        .map_err(|e| close_both(e.into()))?;
        let nworkers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            * 4
            + 8;
        let mut workers = Vec::with_capacity(nworkers);
        for _ in 0..nworkers {
            workers.push(store.worker().map_err(|e| close_both(e.into()))?);
        }
        let reclaim_worker = store.worker().map_err(|e| close_both(e.into()))?;
        let inactive_min = (budget_pages / 64).max(16);
        let active_max = budget_pages
            .saturating_sub(staging_target + inactive_min)
            .max(1);
        let inner = Arc::new(Inner {
            pages,
            staging_pages,
            uffd,
            sfd,
            mode: config.mode,
            aging: config.aging,
            budget_pages,
            high_pages,
            low_pages,
            staging_target,
            active_max,
            activate_distance: AtomicU32::new(budget_pages.max(1) as u32),
            state: (0..pages).map(|_| AtomicU64::new(EMPTY)).collect(),
            gen: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            evicted_at: (0..pages).map(|_| AtomicU32::new(0)).collect(),
            history: (0..pages)
                .map(|_| std::sync::atomic::AtomicU8::new(0))
                .collect(),
            eviction_clock: AtomicU32::new(1 << 31),
            slot_bits: (0..staging_pages / 64).map(|_| AtomicU64::new(0)).collect(),
            store,
            workers: WorkerSlots::new(workers),
            admits: AdmitRing::new(pages * 2),
            dirtied: AdmitRing::new(pages * 2),
            victims: crate::inner::VictimQueue::new((budget_pages / 16).clamp(16, 8192)),
            refill_wanted: AtomicBool::new(false),
            returned: AdmitRing::new(4096),
            track_writes: config.track_writes,
            resident: AtomicUsize::new(0),
            staged: AtomicUsize::new(0),
            pinned: AtomicUsize::new(0),
            kick: AtomicU32::new(0),
            room: AtomicU32::new(0),
            reclaimer_idle: AtomicBool::new(false),
            room_waiters: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            owner_pid: sys::getpid(),
            lost: AtomicBool::new(false),
            unmapped: Mutex::new(None),
            is_unmapped: AtomicBool::new(false),
            reclaim_lock: Mutex::new(()),
            event_seq: AtomicU64::new(0),
            installs: AtomicUsize::new(0),
            fork_pause: AtomicBool::new(false),
            evicting: AtomicUsize::new(0),
            hold: AtomicBool::new(false),
            region,
            staging,
        });

        signal::install().map_err(|e| RegionError::sys("sigaction(SIGBUS)", e))?;
        crate::fork::install();
        let Some(table_index) = signal::register(&inner) else {
            return Err(RegionError::TooManyRegions(signal::MAX_REGIONS));
        };
        let mut region = Region {
            inner: Arc::clone(&inner),
            table_index,
            threads: Vec::new(),
        };
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| RegionError::Sys {
                    call: "spawn",
                    errno: e.to_string(),
                })
        };
        let rec = Reclaimer::new(Arc::clone(&inner), reclaim_worker);
        region
            .threads
            .push(spawn("zpage-reclaim", Box::new(move || rec.run()))?);
        let ev = Arc::clone(&inner);
        region.threads.push(spawn(
            "zpage-events",
            Box::new(move || crate::event::run(ev)),
        )?);
        Ok(region)
    }

    /// Base address of the region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.region.base() as *mut u8
    }

    /// Size of the region in bytes (a multiple of 4 KiB).
    pub fn len(&self) -> usize {
        self.inner.region.len()
    }

    /// Never true (a region has at least one page); for clippy's len_without_is_empty.
    pub fn is_empty(&self) -> bool {
        self.inner.pages == 0
    }

    /// The region as bytes. Reading through the slice faults pages back in as
    /// needed. In [`FaultMode::Sigbus`], do not pass this slice to a system
    /// call without [`Region::prefault`] (the kernel gets `EFAULT` on evicted pages).
    pub fn as_slice(&self) -> &[u8] {
        self.inner.region.as_slice()
    }

    /// The region as mutable bytes (see [`Region::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // `&mut self` is exclusive: no other slice of this region exists. The
        // reclaimer and handlers reach region memory only through ioctls,
        // never through references.
        sys::exclusive_bytes(&self.inner.region, &mut self.threads)
    }

    fn check_live(&self) -> Result<(), RegionError> {
        let inner = &self.inner;
        if inner.owner_pid != sys::getpid() {
            return Err(RegionError::ForkedChild {
                owner: inner.owner_pid,
            });
        }
        if inner.is_unmapped.load(Ordering::Acquire) {
            let why = inner
                .unmapped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default();
            return Err(RegionError::Unmapped(why));
        }
        self.health_check()
    }

    /// Checks that the region's userfaultfd is still open (a program that
    /// closes every fd, e.g. `closefrom(3)`, silently unregisters the region
    /// and evicted pages would read as zeros). Every advice call runs it.
    pub fn health_check(&self) -> Result<(), RegionError> {
        let inner = &self.inner;
        if inner.lost.load(Ordering::Acquire) {
            return Err(RegionError::UffdLost(inner.uffd));
        }
        // UFFDIO_WAKE on our own range succeeds only on our live uffd.
        if sys::uffd_wake(inner.uffd, inner.region.base(), PAGE_SIZE).is_err() {
            inner.lost.store(true, Ordering::Release);
            return Err(RegionError::UffdLost(inner.uffd));
        }
        Ok(())
    }

    fn pages_of(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>, RegionError> {
        let size = self.len();
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= size)
            .ok_or(RegionError::OutOfRange { offset, len, size })?;
        Ok(offset / PAGE_SIZE..end.div_ceil(PAGE_SIZE))
    }

    /// Faults resolved so far (cheap: one atomic load; `stats()` gathers everything).
    pub fn fault_count(&self) -> u64 {
        self.inner.counters.faults.load(Ordering::Relaxed)
    }

    /// A snapshot of the region's counters.
    pub fn stats(&self) -> RegionStats {
        let i = &self.inner;
        let c = &i.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let store = i.store.stats();
        RegionStats {
            size_bytes: self.len(),
            budget_bytes: i.budget_pages * PAGE_SIZE,
            resident_bytes: i.resident.load(Ordering::Relaxed) * PAGE_SIZE,
            staged_bytes: i.staged.load(Ordering::Relaxed) * PAGE_SIZE,
            pinned_bytes: i.pinned.load(Ordering::Relaxed) * PAGE_SIZE,
            compressed_bytes: store.contents.compressed_bytes as usize,
            pool_bytes: store.contents.pool_memory_used_bytes as usize,
            stored_pages: store.contents.stored_pages as usize,
            same_filled_pages: store.contents.same_filled_pages as usize,
            raw_pages: store.contents.raw_pages as usize,
            store,
            faults: l(&c.faults),
            zero_fills: l(&c.zero_fills),
            restores: l(&c.restores),
            trial_hits: l(&c.trial_hits),
            activations: l(&c.activations),
            demotions: l(&c.demotions),
            first_writes: l(&c.first_writes),
            clean_evictions: l(&c.clean_evictions),
            sync_evictions: l(&c.sync_evictions),
            evictions: l(&c.evictions),
            compressions: l(&c.compressions),
            eager_compressions: l(&c.eager_compressions),
            pressure_compressions: l(&c.pressure_compressions),
            compress_failures: l(&c.compress_failures),
            throttles: l(&c.throttles),
            throttle_ns: l(&c.throttle_ns),
            ebusy_fixes: l(&c.ebusy_fixes),
            holes: l(&c.holes),
            discarded: l(&c.discarded),
            fault_latency: c.latency(),
        }
    }

    /// Compresses the pages of the range now, on the calling thread (Zircon's
    /// eager trigger). Pinned pages are skipped.
    pub fn advise_cold(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let inner = &self.inner;
        let mut w = inner.store.worker()?;
        let _signals = sys::SignalGuard::block_async();
        let _g = inner.reclaim_lock.lock().unwrap_or_else(|e| e.into_inner());
        if inner.paused() {
            return Ok(());
        }
        let mut hint = 0;
        let mut freed = reclaim::Freed::default();
        for page in range {
            let mut tries = 0;
            loop {
                tries += 1;
                match reclaim::evict_one(inner, page, &mut hint) {
                    Evict::Staged(slot) => {
                        reclaim::compress_one(
                            inner,
                            &mut w,
                            page,
                            slot,
                            Trigger::Eager,
                            &mut freed,
                        );
                        if freed.len() >= 64 {
                            freed.flush(inner);
                        }
                        break;
                    }
                    Evict::NoSlot => {
                        freed.flush(inner);
                        if tries < 3 {
                            continue;
                        }
                        break;
                    }
                    Evict::Retry if tries < 3 => continue,
                    _ => break,
                }
            }
        }
        freed.flush(inner);
        Ok(())
    }

    /// Restores the pages of the range ahead of use (they count against the
    /// budget like any resident page).
    pub fn advise_willneed(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        for page in self.pages_of(offset, len)? {
            let s = self.inner.state[page].load(Ordering::Acquire);
            if matches!(tag(s), STAGED | STORED | EVICTING | COMPRESSING) {
                self.inner
                    .resolve(page, false, false, Ctx::Api)
                    .map_err(|e| RegionError::sys("restore", e))?;
            }
        }
        Ok(())
    }

    /// Makes every page of the range present (restored, or zero-filled if never
    /// written), so the kernel can read and write it: call before passing region
    /// memory to a system call in [`FaultMode::Sigbus`]. Does not keep the pages
    /// in: the reclaimer may take them out again later; to hold them across a
    /// long call, use [`Region::pin`].
    pub fn prefault(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        for page in self.pages_of(offset, len)? {
            self.inner
                .resolve(page, true, true, Ctx::Api)
                .map_err(|e| RegionError::sys("prefault", e))?;
        }
        Ok(())
    }

    /// Pins the range: restores it and keeps it resident until `unpin`
    /// (Zircon's latency-sensitive opt-out). Pins nest. At most half the
    /// budget may be pinned.
    pub fn pin(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let inner = &self.inner;
        let new_pins = range
            .clone()
            .filter(|&p| pins(inner.state[p].load(Ordering::Acquire)) == 0)
            .count();
        let total = inner.pinned.load(Ordering::Acquire) + new_pins;
        if total > inner.budget_pages / 2 {
            return Err(RegionError::PinExceedsBudget {
                requested: new_pins * PAGE_SIZE,
                total: total * PAGE_SIZE,
                budget: inner.budget_pages * PAGE_SIZE,
            });
        }
        for page in range {
            loop {
                inner
                    .resolve(page, true, true, Ctx::Api)
                    .map_err(|e| RegionError::sys("pin", e))?;
                let st = &inner.state[page];
                let s = st.load(Ordering::Acquire);
                if tag(s) != RESIDENT {
                    continue;
                }
                if pins(s) == 255 {
                    return Err(RegionError::InvalidConfig(
                        "a page may be pinned at most 255 times".into(),
                    ));
                }
                if st
                    .compare_exchange(s, s + PIN_ONE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    if pins(s) == 0 {
                        inner.pinned.fetch_add(1, Ordering::AcqRel);
                    }
                    break;
                }
            }
        }
        Ok(())
    }

    /// Undoes one `pin` of the range.
    pub fn unpin(&self, offset: usize, len: usize) -> Result<(), RegionError> {
        self.check_live()?;
        let range = self.pages_of(offset, len)?;
        let inner = &self.inner;
        if let Some(p) = range
            .clone()
            .find(|&p| pins(inner.state[p].load(Ordering::Acquire)) == 0)
        {
            return Err(RegionError::NotPinned(p * PAGE_SIZE));
        }
        for page in range {
            let prev = inner.state[page].fetch_sub(PIN_ONE, Ordering::AcqRel);
            if pins(prev) == 1 {
                inner.pinned.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(())
    }

    /// Stops eviction and restores every page: for crash handlers that want
    /// complete core dumps (a dump, like a debugger, sees evicted pages as
    /// holes), and before handing the whole region to the kernel. The region
    /// then stays fully resident, over its budget if need be, until
    /// [`Region::resume_eviction`]. Async-signal-safe.
    pub fn restore_all(&self) -> Result<(), RegionError> {
        self.inner.pause(&self.inner.hold);
        restore_all(&self.inner).map_err(|e| RegionError::sys("restore", e))
    }

    /// Undoes [`Region::restore_all`]: eviction resumes.
    pub fn resume_eviction(&self) {
        self.inner.hold.store(false, Ordering::SeqCst);
        self.inner.kick_reclaimer();
    }

    /// Puts zpage's SIGBUS handler back in front of any installed after it.
    pub fn ensure_handler_front() -> Result<(), RegionError> {
        signal::ensure_front().map_err(|e| RegionError::sys("sigaction(SIGBUS)", e))
    }

    /// The region's userfaultfd (for diagnostics and hazard tests).
    #[doc(hidden)]
    pub fn raw_uffd(&self) -> i32 {
        self.inner.uffd
    }
}

/// Restores every evicted page of `inner` (no allocation, no lock).
pub(crate) fn restore_all(inner: &Inner) -> Result<(), sys::Errno> {
    for page in 0..inner.pages {
        let s = inner.state[page].load(Ordering::Acquire);
        if matches!(tag(s), STAGED | STORED | EVICTING | COMPRESSING) {
            inner.resolve(page, false, false, Ctx::Api)?;
        }
    }
    Ok(())
}

impl Drop for Region {
    fn drop(&mut self) {
        let inner = &self.inner;
        let forked_child = inner.owner_pid != sys::getpid();
        inner.stop.store(true, Ordering::Release);
        inner.kick_reclaimer();
        if forked_child {
            // The threads stayed in the parent: nothing to join here.
            for t in self.threads.drain(..) {
                std::mem::forget(t);
            }
        } else {
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
        signal::unregister(self.table_index);
        if !inner.lost.load(Ordering::Acquire) && !forked_child {
            // (After a loss the fd number may belong to someone else now.)
            let _ = sys::uffd_unregister(inner.uffd, inner.region.base(), inner.region.len());
            sys::close(inner.uffd);
        }
        let _ = sys::uffd_unregister(inner.sfd, inner.staging.base(), inner.staging.len());
        sys::close(inner.sfd);
        // Mappings, the store and the worker slots are freed with the last Arc.
    }
}
