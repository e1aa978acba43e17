//! One region's record of the program's fork advice (module `fork::advice`
//! records it, the fork hooks read it): two bits a page. A plain data type
//! below the region's books (`region_core` holds one per region).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A `madvise` advice about what `fork()` gives the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkAdvice {
    /// `MADV_WIPEONFORK`: the child reads zeros.
    WipeOnFork,
    /// `MADV_KEEPONFORK`: undoes `WipeOnFork`.
    KeepOnFork,
    /// `MADV_DONTFORK`: the child has no mapping there.
    DontFork,
    /// `MADV_DOFORK`: undoes `DontFork`.
    DoFork,
}

impl ForkAdvice {
    /// The advice a `madvise` value names, if it is one of these.
    pub fn from_madvise(advice: i32) -> Option<ForkAdvice> {
        match advice {
            libc::MADV_WIPEONFORK => Some(ForkAdvice::WipeOnFork),
            libc::MADV_KEEPONFORK => Some(ForkAdvice::KeepOnFork),
            libc::MADV_DONTFORK => Some(ForkAdvice::DontFork),
            libc::MADV_DOFORK => Some(ForkAdvice::DoFork),
            _ => None,
        }
    }
}

/// What a page was advised: marks of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// `MADV_WIPEONFORK`: the child reads zeros.
    pub wipe: bool,
    /// `MADV_DONTFORK`: not mapped in the child.
    pub dont_fork: bool,
}

/// One region's fork marks: a wipe bit and a don't-fork bit per page, in
/// two bit sets allocated at the region's first fork advice.
#[derive(Debug, Default)]
pub struct ForkMarks {
    /// `words` wipe words, then `words` don't-fork words.
    bits: OnceLock<Box<[AtomicU64]>>,
}

impl ForkMarks {
    pub(crate) fn mark(&self, pages: Range<usize>, advice: ForkAdvice, page_count: usize) {
        let words = page_count.div_ceil(64);
        let bits = self
            .bits
            .get_or_init(|| (0..2 * words).map(|_| AtomicU64::new(0)).collect());
        let (plane, set) = match advice {
            ForkAdvice::WipeOnFork => (0, true),
            ForkAdvice::KeepOnFork => (0, false),
            ForkAdvice::DontFork => (words, true),
            ForkAdvice::DoFork => (words, false),
        };
        let mut page = pages.start;
        while page < pages.end {
            let (word, bit) = (page / 64, page % 64);
            let n = (64 - bit).min(pages.end - page);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1 << n) - 1) << bit
            };
            if set {
                bits[plane + word].fetch_or(mask, Ordering::AcqRel);
            } else {
                bits[plane + word].fetch_and(!mask, Ordering::AcqRel);
            }
            page += n;
        }
    }

    /// Calls `each` with every marked page and its marks, in page order.
    pub fn for_each_marked(&self, mut each: impl FnMut(usize, Mark)) {
        let Some(bits) = self.bits.get() else {
            return;
        };
        let words = bits.len() / 2;
        for word in 0..words {
            let wipe = bits[word].load(Ordering::Acquire);
            let dont_fork = bits[words + word].load(Ordering::Acquire);
            let mut any = wipe | dont_fork;
            while any != 0 {
                let bit = any.trailing_zeros() as usize;
                any &= any - 1;
                each(
                    word * 64 + bit,
                    Mark {
                        wipe: wipe >> bit & 1 != 0,
                        dont_fork: dont_fork >> bit & 1 != 0,
                    },
                );
            }
        }
    }

    /// True if the page was advised `MADV_WIPEONFORK` or `MADV_DONTFORK`:
    /// a child gets none of its contents.
    pub fn child_gets_nothing(&self, page: usize) -> bool {
        let Some(bits) = self.bits.get() else {
            return false;
        };
        let words = bits.len() / 2;
        let (word, bit) = (page / 64, page % 64);
        (bits[word].load(Ordering::Acquire) | bits[words + word].load(Ordering::Acquire)) >> bit & 1
            != 0
    }

    /// The runs of pages of a region of `page_count` pages that a child has
    /// mapped (not advised `MADV_DONTFORK`), in order.
    pub fn mapped_in_child(&self, page_count: usize, mut each: impl FnMut(Range<usize>)) {
        let Some(bits) = self.bits.get() else {
            if page_count > 0 {
                each(0..page_count);
            }
            return;
        };
        let words = bits.len() / 2;
        let dont_fork =
            |page: usize| bits[words + page / 64].load(Ordering::Acquire) >> (page % 64) & 1 != 0;
        let mut start = None;
        for page in 0..page_count {
            match (start, dont_fork(page)) {
                (None, false) => start = Some(page),
                (Some(s), true) => {
                    each(s..page);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            each(s..page_count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(m: &ForkMarks) -> Vec<(usize, bool, bool)> {
        let mut v = Vec::new();
        m.for_each_marked(|p, k| v.push((p, k.wipe, k.dont_fork)));
        v
    }

    fn runs(m: &ForkMarks, pages: usize) -> Vec<Range<usize>> {
        let mut v = Vec::new();
        m.mapped_in_child(pages, |r| v.push(r));
        v
    }

    #[test]
    fn advice_sets_and_clears_ranges_across_words() {
        let m = ForkMarks::default();
        assert!(marked(&m).is_empty());
        assert_eq!(runs(&m, 200), vec![0..200]);
        m.mark(60..140, ForkAdvice::WipeOnFork, 200);
        m.mark(62..130, ForkAdvice::KeepOnFork, 200);
        m.mark(130..131, ForkAdvice::DontFork, 200);
        m.mark(199..200, ForkAdvice::DontFork, 200);
        let got = marked(&m);
        let want: Vec<_> = [60, 61]
            .into_iter()
            .map(|p| (p, true, false))
            .chain([(130, true, true)])
            .chain((131..140).map(|p| (p, true, false)))
            .chain([(199, false, true)])
            .collect();
        assert_eq!(got, want);
        assert!(m.child_gets_nothing(61) && !m.child_gets_nothing(62));
        assert!(m.child_gets_nothing(199) && !m.child_gets_nothing(198));
        assert_eq!(runs(&m, 200), vec![0..130, 131..199]);
        m.mark(0..200, ForkAdvice::DoFork, 200);
        m.mark(0..64, ForkAdvice::DontFork, 200);
        assert_eq!(runs(&m, 200), vec![64..200]);
        m.mark(0..200, ForkAdvice::DontFork, 200);
        assert!(runs(&m, 200).is_empty());
        m.mark(0..200, ForkAdvice::DoFork, 200);
        m.mark(0..200, ForkAdvice::KeepOnFork, 200);
        assert!(marked(&m).is_empty());
    }

    #[test]
    fn only_the_four_fork_advice_values_are_taken() {
        assert_eq!(
            ForkAdvice::from_madvise(libc::MADV_WIPEONFORK),
            Some(ForkAdvice::WipeOnFork)
        );
        assert_eq!(
            ForkAdvice::from_madvise(libc::MADV_DOFORK),
            Some(ForkAdvice::DoFork)
        );
        assert_eq!(ForkAdvice::from_madvise(libc::MADV_DONTNEED), None);
        assert_eq!(ForkAdvice::from_madvise(libc::MADV_FREE), None);
    }
}
