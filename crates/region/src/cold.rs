//! Cold recompression: pages that have stayed compressed a while move from
//! the budget's fast codec to its cold codec (zstd, or zstd with a
//! dictionary trained from the budget's own pages), as zram's `recompress`
//! does, kept only when they take a smaller size class.
//!
//! (Evicted pages with no quick reuse are compressed with the cold codec
//! straight away, `evict::compress`; this module moves the pages that took
//! the fast codec and stayed, and trains the dictionary.) The reclaimer
//! recompresses when it has no eviction to do, oldest compressed page first
//! (the order it compressed them in), in batches under a rate limit, and
//! looks at resident memory between batches, so it never holds up eviction;
//! it trains the dictionary between eviction rounds too. Each page is held while its blob is replaced (`evict::recompress`),
//! so a fault on it waits for that one page and a page restored meanwhile is
//! left alone.
//!
//! A `zstd-dict` cold codec without a dictionary gets one trained on a
//! thread of its own from a sample of the oldest compressed pages, once
//! [`COLD_DICTIONARY_SAMPLE_PAGES`] have been compressed; the store publishes
//! it before any blob refers to it and keeps it for the budget's life. Until
//! then nothing is recompressed.
//!
//! Runs on the reclaimer or the caller of `Region::recompress_now`, with
//! asynchronous signals blocked; never on the fault path.

use crate::error::RegionError;
use crate::evict::{self, Recompress};
use crate::queues::Record;
use crate::region_core::RegionCore;
use crate::shared::Shared;
use crate::table;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Instant;
use zpage_codec::{Dictionary, Page};
use zpage_store::Worker;

/// Compressed pages a budget needs before it trains the cold codec's
/// dictionary (a sample of that many pages at least).
pub const COLD_DICTIONARY_SAMPLE_PAGES: usize = 1024;
/// At most this many pages in a training sample (4 MiB: a hundred times the
/// dictionary, zstd's advice). Training takes the sample and zstd's own
/// working memory on top of the process's, for a moment: with 4,096 pages,
/// gathered and then copied into one buffer, redis under `--memory-max`
/// passed its limit by 18.7 MiB while the dictionary was trained.
const MAX_SAMPLE_PAGES: usize = COLD_DICTIONARY_SAMPLE_PAGES;
/// The trained dictionary's size: what `zpage analyze` trains for zstd-dict.
const DICTIONARY_BYTES: usize = 32 * 1024;
/// Pages recompressed between two looks at resident memory.
pub(crate) const BATCH: usize = 64;

/// The rate limit: tokens of one page each, refilled at a fixed rate, at
/// most one second's worth banked.
#[derive(Debug)]
pub(crate) struct Tokens {
    per_sec: f64,
    banked: f64,
    refilled: Instant,
}

impl Tokens {
    pub(crate) fn new(per_sec: u32) -> Self {
        Tokens {
            per_sec: f64::from(per_sec),
            banked: 0.0,
            refilled: Instant::now(),
        }
    }

    pub(crate) fn take(&mut self, wanted: usize) -> usize {
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.banked = (self.banked + elapsed * self.per_sec).min(self.per_sec);
        let granted = (self.banked as usize).min(wanted);
        self.banked -= granted as f64;
        granted
    }

    /// How long until `wanted` tokens are banked (from the last `take`).
    pub(crate) fn time_until(&self, wanted: usize) -> std::time::Duration {
        let missing = (wanted as f64).min(self.per_sec) - self.banked;
        std::time::Duration::from_secs_f64((missing / self.per_sec).max(0.0))
    }
}

/// Decoded sample pages for dictionary training, laid end to end in one
/// buffer sized once (no second copy, no growth by doubling).
struct Sample {
    joined: Vec<u8>,
    out: Box<Page>,
}

impl Sample {
    fn with_room_for(pages: usize) -> Sample {
        Sample {
            joined: Vec::with_capacity(pages.min(MAX_SAMPLE_PAGES) * zpage_codec::PAGE_SIZE),
            out: zpage_codec::zeroed_page(),
        }
    }

    fn is_full(&self) -> bool {
        self.joined.len() >= MAX_SAMPLE_PAGES * zpage_codec::PAGE_SIZE
    }

    /// Adds `page` of `core` when it is stored with the fast codec.
    fn add(&mut self, core: &RegionCore, page: usize, worker: &mut Worker) {
        if !self.is_full() && evict::sample_stored(core, page, worker, &mut self.out) {
            self.joined.extend_from_slice(&*self.out);
        }
    }

    fn train(&self) -> Result<Dictionary, zpage_codec::CodecError> {
        Dictionary::train_from_joined_pages(&self.joined, DICTIONARY_BYTES)
    }
}

/// A sample of `pages`, evenly spread over them.
fn sample_pages(pages: &[(Record, Instant)], worker: &mut Worker) -> Sample {
    let step = (pages.len() / MAX_SAMPLE_PAGES).max(1);
    let mut sample = Sample::with_room_for(pages.len());
    for (record, _) in pages.iter().step_by(step).take(MAX_SAMPLE_PAGES) {
        table::with_region(record.region(), |core| {
            sample.add(core, record.page(), worker)
        });
    }
    sample
}

/// The reclaimer's cold recompression state.
#[derive(Debug)]
pub(crate) struct Cold {
    /// Pages compressed, oldest first, with when they were.
    queue: VecDeque<(Record, Instant)>,
    tokens: Tokens,
    after: std::time::Duration,
    /// A dictionary being trained on its own thread.
    training: Option<Receiver<Option<Dictionary>>>,
    /// Compressed pages queued before the next training attempt.
    train_at: usize,
}

impl Cold {
    pub(crate) fn new(budget: &Shared) -> Option<Cold> {
        let config = budget.cold()?;
        Some(Cold {
            queue: VecDeque::new(),
            tokens: Tokens::new(config.pages_per_sec),
            after: config.after,
            training: None,
            train_at: COLD_DICTIONARY_SAMPLE_PAGES,
        })
    }

    /// A page was compressed (and may be recompressed once it is cold).
    pub(crate) fn compressed(&mut self, record: Record, bound: usize) {
        self.queue.push_back((record, Instant::now()));
        // Stale records (pages restored since) are dropped from the front as
        // it is used; this bounds the rest.
        while self.queue.len() > bound {
            self.queue.pop_front();
        }
    }

    /// Trains the dictionary (in the background) when one is wanted and
    /// enough pages are compressed; installs it when it is ready.
    fn train(&mut self, budget: &Shared, worker: &mut Worker) {
        if let Some(training) = &self.training {
            match training.try_recv() {
                Ok(Some(dictionary)) => {
                    // Refused only when `recompress_now` set one meanwhile.
                    let _ = budget.store().set_recompress_dictionary(dictionary);
                    self.training = None;
                }
                Ok(None) | Err(TryRecvError::Disconnected) => {
                    // Too uniform a sample: try again once twice as many pages
                    // are queued (a sample spread over more of them).
                    self.train_at = self.queue.len().max(self.train_at) * 2;
                    self.training = None;
                }
                Err(TryRecvError::Empty) => {}
            }
            return;
        }
        if self.queue.len() < self.train_at {
            return;
        }
        let samples = sample_pages(self.queue.make_contiguous(), worker);
        let (sender, receiver) = mpsc::channel();
        let spawned = crate::threads::spawn_blocking_signals(
            "zpage-train",
            Box::new(move || {
                let _ = sender.send(samples.train().ok());
            }),
        );
        match spawned {
            Ok(_detached) => self.training = Some(receiver),
            Err(_) => self.train_at = self.queue.len() * 2,
        }
    }

    /// Trains the dictionary when the cold codec wants one (cheap when it
    /// does not): the reclaimer calls it between eviction rounds too, so
    /// pages go out with the cold codec before the reclaimer is ever idle.
    pub(crate) fn train_if_wanted(&mut self, budget: &Shared, worker: &mut Worker) {
        if budget.store().wants_recompress_dictionary() {
            self.train(budget, worker);
        }
    }

    /// One batch: recompresses the oldest pages compressed at least
    /// `cold_after` ago, within the rate limit. True when more are waiting
    /// (the caller comes back without sleeping if eviction lets it).
    pub(crate) fn pass(&mut self, budget: &Shared, worker: &mut Worker, batch: usize) -> bool {
        if budget.store().wants_recompress_dictionary() {
            self.train(budget, worker);
            return false;
        }
        let ready = |queue: &VecDeque<(Record, Instant)>, after| {
            queue.front().is_some_and(|(_, at)| at.elapsed() >= after)
        };
        if !ready(&self.queue, self.after) {
            return false;
        }
        let mut allowed = self.tokens.take(batch);
        let mut saved = 0;
        while allowed > 0 && ready(&self.queue, self.after) {
            let Some((record, _)) = self.queue.pop_front() else {
                break;
            };
            let outcome = table::with_region(record.region(), |core| {
                let current = core.pages.get(record.page()).is_some_and(|slot| {
                    record.is_generation(slot.aging.gen.load(Ordering::Acquire))
                });
                if current {
                    evict::recompress(core, record.page(), worker)
                } else {
                    Recompress::Skipped
                }
            });
            if matches!(outcome, Some(Recompress::Saved(_) | Recompress::NoGain)) {
                allowed -= 1;
            }
            saved += usize::from(matches!(outcome, Some(Recompress::Saved(_))));
        }
        if saved > 0 {
            // The freed blobs leave holes in the pool's pages: give them back.
            budget.store().compact();
        }
        allowed == 0 && ready(&self.queue, self.after)
    }
}

/// `Region::recompress_now`: recompresses the stored pages of `pages` of
/// `core` with the cold codec now, on the calling thread, training the
/// dictionary from them first if the codec still wants one. The caller
/// blocks asynchronous signals.
pub fn recompress_now(core: &RegionCore, pages: std::ops::Range<usize>) -> Result<(), RegionError> {
    let budget = &*core.budget;
    if budget.cold().is_none() {
        return Err(RegionError::InvalidConfig(
            "recompress_now needs a cold codec: set BudgetConfig::cold_codec".into(),
        ));
    }
    let mut worker = budget.store().worker()?;
    let _g = budget.lock_reclaim();
    if budget.store().wants_recompress_dictionary() {
        let step = (pages.len() / MAX_SAMPLE_PAGES).max(1);
        let mut sample = Sample::with_room_for(pages.len());
        for page in pages.clone().step_by(step) {
            sample.add(core, page, &mut worker);
        }
        let dictionary = sample.train()?;
        if let Err(e) = budget.store().set_recompress_dictionary(dictionary) {
            if budget.store().wants_recompress_dictionary() {
                return Err(e.into());
            }
        }
    }
    for page in pages {
        evict::recompress(core, page, &mut worker);
    }
    budget.store().compact();
    Ok(())
}
