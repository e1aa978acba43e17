//! Parts of a region the program mapped something else over (a file, a
//! shared mapping, with `MAP_FIXED` over address space it had from the
//! preload library's arena): not registered with the userfaultfd, holding
//! nothing of zpage's, and never touched by it. Faults there are the
//! kernel's (a SIGBUS there is chained to the program's handler), pins and
//! restores skip them.
//!
//! Async-signal-safe reads: a fixed array of atomic ranges, scanned only
//! when any range is set; changes under a lock, from the preload library's
//! memory-map calls.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Foreign ranges a region holds at most at once.
pub const MAX_FOREIGN: usize = 256;

#[derive(Debug)]
pub struct ForeignRanges {
    /// Page ranges `[start, end)`; `end == 0` marks a free entry.
    starts: [AtomicUsize; MAX_FOREIGN],
    ends: [AtomicUsize; MAX_FOREIGN],
    any: AtomicBool,
    change: Mutex<()>,
}

impl Default for ForeignRanges {
    fn default() -> Self {
        ForeignRanges {
            starts: [const { AtomicUsize::new(0) }; MAX_FOREIGN],
            ends: [const { AtomicUsize::new(0) }; MAX_FOREIGN],
            any: AtomicBool::new(false),
            change: Mutex::new(()),
        }
    }
}

impl ForeignRanges {
    /// True if `page` is in a foreign range. Async-signal-safe.
    pub fn contains(&self, page: usize) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        (0..MAX_FOREIGN).any(|i| {
            let end = self.ends[i].load(Ordering::Acquire);
            end != 0 && page < end && page >= self.starts[i].load(Ordering::Acquire)
        })
    }

    /// Adds pages `[start, end)`; false when the table is full.
    pub fn add(&self, start: usize, end: usize) -> bool {
        let _g = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = (0..MAX_FOREIGN).find(|&i| self.ends[i].load(Ordering::Acquire) == 0) else {
            return false;
        };
        self.starts[i].store(start, Ordering::Release);
        self.ends[i].store(end, Ordering::Release);
        self.any.store(true, Ordering::Release);
        true
    }

    /// Removes every foreign page in `[start, end)`: ranges inside it go,
    /// ranges that stick out are cut to what is outside it. False if a cut
    /// in two found no free entry (the part after stays foreign).
    pub fn remove(&self, start: usize, end: usize) -> bool {
        let _g = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let mut ok = true;
        for i in 0..MAX_FOREIGN {
            let (s, e) = (
                self.starts[i].load(Ordering::Acquire),
                self.ends[i].load(Ordering::Acquire),
            );
            if e == 0 || e <= start || s >= end {
                continue;
            }
            match (s < start, e > end) {
                (false, false) => self.ends[i].store(0, Ordering::Release),
                (true, false) => self.ends[i].store(start, Ordering::Release),
                (false, true) => self.starts[i].store(end, Ordering::Release),
                (true, true) => {
                    self.ends[i].store(start, Ordering::Release);
                    match (0..MAX_FOREIGN).find(|&j| self.ends[j].load(Ordering::Acquire) == 0) {
                        Some(j) => {
                            self.starts[j].store(end, Ordering::Release);
                            self.ends[j].store(e, Ordering::Release);
                        }
                        None => ok = false,
                    }
                }
            }
        }
        let any = (0..MAX_FOREIGN).any(|i| self.ends[i].load(Ordering::Acquire) != 0);
        self.any.store(any, Ordering::Release);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_added_cut_and_removed() {
        let f = ForeignRanges::default();
        assert!(!f.contains(5));
        assert!(f.add(10, 20));
        assert!(f.contains(10) && f.contains(19) && !f.contains(20) && !f.contains(9));
        assert!(f.remove(12, 15));
        assert!(f.contains(11) && !f.contains(12) && !f.contains(14) && f.contains(15));
        assert!(f.remove(0, 100));
        assert!(!f.contains(11) && !f.contains(15));
    }
}
