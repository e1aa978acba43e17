//! Which page each touch hits: sequential, uniformly random, or hot/cold.
//!
//! Sequences are generated on the fly from a seed (never stored: a stored
//! sequence would be charged to the kernel tier's cgroup), and the same
//! [`TouchPlan`] yields the same pages in every process.

use crate::rng::SplitMix64;
use serde::{Deserialize, Serialize};
use std::fmt;

/// How touches are spread over the pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pattern {
    /// Page 0, 1, 2, ... wrapping around.
    Sequential,
    /// Every page equally likely.
    Uniform,
    /// `hot_touch_percent`% of touches go to a hot set of `hot_page_percent`% of the pages,
    /// scattered over the region (not one contiguous block, which FIFO would favour).
    HotCold {
        /// Share of pages that are hot.
        hot_page_percent: u8,
        /// Share of touches that go to hot pages.
        hot_touch_percent: u8,
    },
    /// A real program's recorded order (`crate::trace`): the pages come from
    /// the recording, not from a plan, so [`TouchPlan::iter`] walks it
    /// sequentially only as a stand-in; the workload replays the recording.
    Trace,
}

impl Pattern {
    /// The hot/cold workload: 80% of touches on 20% of pages.
    pub const HOT_COLD_80_20: Pattern = Pattern::HotCold {
        hot_page_percent: 20,
        hot_touch_percent: 80,
    };

    /// Short name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Uniform => "uniform",
            Pattern::HotCold { .. } => "hotcold",
            Pattern::Trace => "trace",
        }
    }

    /// Number of hot pages out of `pages` (0 for patterns without a hot set).
    pub fn hot_pages(self, pages: u64) -> u64 {
        match self {
            Pattern::HotCold {
                hot_page_percent, ..
            } => (pages * u64::from(hot_page_percent) / 100).clamp(1, pages),
            _ => 0,
        }
    }
}

/// Whether a touch loads or stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// An 8-byte volatile load.
    Read,
    /// An 8-byte volatile store (the page becomes dirty and must be recompressed).
    Write,
}

impl Op {
    /// "read" or "write".
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A reproducible sequence of touches over `pages` pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TouchPlan {
    /// Pages in the region.
    pub pages: u64,
    /// Spread of the touches.
    pub pattern: Pattern,
    /// Number of touches.
    pub touches: u64,
    /// Seed of the access sequence and of the hot set's placement.
    pub seed: u64,
    /// Which of several concurrent sequences over the same pages (and the
    /// same hot set) this is; stream 0 is the sequence of a lone thread.
    pub stream: u64,
}

impl TouchPlan {
    /// The touches: `(page index, 8-byte word index within the page)`.
    pub fn iter(&self) -> TouchIter {
        TouchIter {
            plan: *self,
            rng: SplitMix64::new(if self.stream == 0 {
                self.seed
            } else {
                self.seed ^ crate::rng::mix64(self.stream)
            }),
            scatter: Scatter::new(self.pages, self.seed),
            hot_pages: self.pattern.hot_pages(self.pages),
            done: 0,
        }
    }
}

/// Iterator over a [`TouchPlan`].
#[derive(Clone, Debug)]
pub struct TouchIter {
    plan: TouchPlan,
    rng: SplitMix64,
    scatter: Scatter,
    hot_pages: u64,
    done: u64,
}

impl Iterator for TouchIter {
    type Item = (u64, u64);

    #[inline]
    fn next(&mut self) -> Option<(u64, u64)> {
        if self.done >= self.plan.touches || self.plan.pages == 0 {
            return None;
        }
        let pages = self.plan.pages;
        let page = match self.plan.pattern {
            Pattern::Sequential | Pattern::Trace => self.done % pages,
            Pattern::Uniform => self.rng.below(pages),
            Pattern::HotCold {
                hot_touch_percent, ..
            } => {
                let cold_pages = pages - self.hot_pages;
                let rank = if cold_pages == 0 || self.rng.percent(hot_touch_percent) {
                    self.rng.below(self.hot_pages)
                } else {
                    self.hot_pages + self.rng.below(cold_pages)
                };
                self.scatter.apply(rank)
            }
        };
        self.done += 1;
        let word = self.rng.next_u64() % (crate::PAGE_SIZE as u64 / 8);
        Some((page, word))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.plan.touches - self.done.min(self.plan.touches)) as usize;
        (left, Some(left))
    }
}

/// A bijection of `0..pages` (`x * multiplier + offset mod pages`, multiplier
/// coprime with `pages`), so "the hot 20%" is spread over the whole region.
#[derive(Clone, Copy, Debug)]
struct Scatter {
    pages: u64,
    multiplier: u64,
    offset: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Scatter {
    fn new(pages: u64, seed: u64) -> Scatter {
        if pages <= 1 {
            return Scatter {
                pages: pages.max(1),
                multiplier: 1,
                offset: 0,
            };
        }
        // Start near pages/phi so neighbours land far apart, then step to a coprime.
        let mut multiplier = ((pages as f64 * 0.618_033_988_75) as u64).max(1);
        while gcd(multiplier, pages) != 1 {
            multiplier += 1;
        }
        Scatter {
            pages,
            multiplier,
            offset: crate::rng::mix64(seed) % pages,
        }
    }

    #[inline]
    fn apply(&self, rank: u64) -> u64 {
        ((u128::from(rank) * u128::from(self.multiplier) + u128::from(self.offset))
            % u128::from(self.pages)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn plan(pattern: Pattern, pages: u64, touches: u64) -> TouchPlan {
        TouchPlan {
            pages,
            pattern,
            touches,
            seed: 42,
            stream: 0,
        }
    }

    #[test]
    fn sequential_visits_pages_in_order_and_wraps() {
        let pages: Vec<u64> = plan(Pattern::Sequential, 5, 12)
            .iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(pages, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn same_plan_same_sequence() {
        let p = plan(Pattern::HOT_COLD_80_20, 1000, 5000);
        assert!(p.iter().eq(p.iter()));
        let other_seed = TouchPlan { seed: 43, ..p };
        assert!(!p.iter().eq(other_seed.iter()));
    }

    #[test]
    fn streams_differ_but_share_the_hot_set() {
        let first = plan(Pattern::HOT_COLD_80_20, 10_000, 50_000);
        let second = TouchPlan { stream: 1, ..first };
        assert!(!first.iter().eq(second.iter()));
        // The hot 20% of pages takes 80% of the touches in both streams,
        // and it is the same 20%: the pages the first stream touches most.
        let mut counts = vec![0u32; 10_000];
        for (page, _) in first.iter() {
            counts[page as usize] += 1;
        }
        let hot: HashSet<u64> = (0..10_000u64)
            .filter(|&p| counts[p as usize] >= 10)
            .collect();
        let in_hot = second.iter().filter(|(page, _)| hot.contains(page)).count();
        assert!(
            in_hot > 50_000 * 3 / 4,
            "{in_hot} of the second stream's touches hit the first's hot set"
        );
    }

    #[test]
    fn words_stay_inside_the_page() {
        assert!(plan(Pattern::Uniform, 10, 10_000)
            .iter()
            .all(|(page, word)| page < 10 && word < 512));
    }

    #[test]
    fn uniform_touches_nearly_every_page() {
        let seen: HashSet<u64> = plan(Pattern::Uniform, 1000, 20_000)
            .iter()
            .map(|t| t.0)
            .collect();
        assert!(seen.len() > 990);
    }

    #[test]
    fn hot_cold_sends_80_percent_of_touches_to_20_percent_of_pages() {
        let pages = 10_000;
        let p = plan(Pattern::HOT_COLD_80_20, pages, 200_000);
        let mut counts = vec![0u64; pages as usize];
        for (page, _) in p.iter() {
            counts[page as usize] += 1;
        }
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let hottest_fifth: u64 = sorted[..(pages / 5) as usize].iter().sum();
        let share = hottest_fifth as f64 / 200_000.0;
        assert!((0.78..0.84).contains(&share), "hot share {share}");
        // The hot set is scattered: hot pages appear in every tenth of the region.
        let threshold = sorted[(pages / 5) as usize - 1];
        for tenth in counts.chunks(pages as usize / 10) {
            assert!(tenth.iter().filter(|&&c| c >= threshold).count() > 100);
        }
    }

    #[test]
    fn scatter_is_a_permutation() {
        for pages in [1u64, 2, 7, 64, 1000, 4096] {
            let s = Scatter::new(pages, 9);
            let image: HashSet<u64> = (0..pages).map(|r| s.apply(r)).collect();
            assert_eq!(image.len() as u64, pages);
        }
    }
}
