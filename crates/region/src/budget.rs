//! A budget: what every region drawing on it shares. One resident limit,
//! one compressed store, one staging area, one reclaimer and one aging
//! policy across all of them, and one userfaultfd (so one event thread).
//! A [`crate::Region`] made with [`crate::Region::new`] has a budget of its
//! own; [`crate::Region::with_budget`] draws on a [`Budget`] the caller made
//! (a whole process under `zpage run`, a program with many buffers).
//!
//! This module is the budget's handle and starts and stops its threads (the
//! reclaimer, the event thread, the tier reader); the state they share is
//! [`Shared`] (module `shared`).

use crate::config::BudgetConfig;
use crate::error::RegionError;
use crate::shared::Shared;
use crate::sys::{self, PAGE_SIZE};
use std::sync::{Arc, Mutex};

/// The owner of a budget's threads: they stop when the last [`Budget`] handle
/// and the last region drawing on it are gone.
#[derive(Debug)]
pub(crate) struct Owner {
    pub shared: Arc<Shared>,
    threads: Mutex<Vec<crate::threads::ZpageThread>>,
    /// The process the threads run in (a forked child has none of them).
    threads_pid: i32,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = &self.shared;
        shared.reclaim_signal().stop();
        if let Some(reader) = shared.tier_reader() {
            reader.stop();
        }
        shared.kick_reclaimer();
        shared.reclaim_signal().wake();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        if self.threads_pid == sys::getpid() {
            for thread in threads {
                thread.join();
            }
        } else {
            // A forked child: the threads stayed in the parent.
            for thread in threads {
                std::mem::forget(thread);
            }
        }
    }
}

/// A resident budget that many regions draw on: one limit, one compressed
/// pool, one reclaimer and one aging policy across them. Cheap to clone
/// (clones share the budget). See the module documentation.
#[derive(Clone, Debug)]
pub struct Budget {
    pub(crate) owner: Arc<Owner>,
}

impl Budget {
    /// Makes a budget and starts its reclaimer and event thread.
    pub fn new(config: BudgetConfig) -> Result<Budget, RegionError> {
        crate::signal::install().map_err(|e| RegionError::sys("sigaction(SIGBUS)", e))?;
        crate::fork::install();
        let shared = Arc::new(Shared::new(&config)?);
        let owner = Arc::new(Owner {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::new()),
            threads_pid: sys::getpid(),
        });
        let spawn = |name: &str, body: Box<dyn FnOnce() + Send>| {
            crate::threads::spawn_blocking_signals(name, body).map_err(|e| RegionError::Sys {
                call: "spawn",
                errno: e.to_string(),
            })
        };
        let reclaimer = crate::reclaim::Reclaimer::new(Arc::clone(&shared))?;
        let mut threads = owner.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.push(spawn("zpage-reclaim", Box::new(move || reclaimer.run()))?);
        let events = Arc::clone(&shared);
        threads.push(spawn(
            "zpage-events",
            Box::new(move || crate::event::run(events)),
        )?);
        if let Some(reader) = shared.tier_reader() {
            let reader = Arc::clone(reader);
            threads.push(spawn("zpage-tier-read", Box::new(move || reader.run()))?);
        }
        drop(threads);
        if std::env::var_os(crate::metrics::METRICS_DIR_ENV).is_some() {
            // Asked for by the environment; a failure to publish does not
            // stop the program from getting its memory.
            let _ = crate::metrics::publish_metrics();
        }
        Ok(Budget { owner })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// The budget in bytes now: the one configured, or set since
    /// ([`Budget::set_budget_bytes`]), under what the memory max leaves.
    pub fn budget_bytes(&self) -> usize {
        self.shared().limits().budget_pages * PAGE_SIZE
    }

    /// Changes the budget while it runs: to `bytes`, held between the
    /// smallest budget ([`crate::MIN_BUDGET_BYTES`]) and the configured one
    /// (what the budget's staging area and queues were sized for); returns
    /// the budget asked for after that, in bytes. A lower budget wakes the
    /// reclaimer, which brings resident memory under it; faults that would
    /// pass it wait meanwhile. A memory max may hold the budget lower still
    /// ([`Budget::budget_bytes`] says what is in effect).
    pub fn set_budget_bytes(&self, bytes: usize) -> usize {
        self.shared().set_budget_pages(bytes / PAGE_SIZE) * PAGE_SIZE
    }

    /// What the memory max (`BudgetConfig::memory_max_bytes`) saw of the
    /// process's resident memory: the most it found, how often and how far
    /// it was over the limit; `None` without a memory max.
    pub fn memory_max_status(&self) -> Option<crate::MemoryMaxStatus> {
        self.shared().memory_max_status()
    }

    /// What the automatic budget (`BudgetConfig::auto_stall_ppm`) saw: its
    /// target, the stall time and how often it moved the budget; `None`
    /// when the budget is fixed.
    pub fn auto_budget_status(&self) -> Option<crate::AutoBudgetStatus> {
        self.shared().auto_budget_status()
    }

    /// Bytes every region of the budget holds resident now (with staged pages).
    pub fn resident_bytes(&self) -> usize {
        self.shared().resident_pages() * PAGE_SIZE
    }

    /// The budget's compressed store counters.
    pub fn store_stats(&self) -> zpage_store::StoreStats {
        let _signals = crate::threads::SignalGuard::block_async();
        self.shared().store().stats()
    }
}
