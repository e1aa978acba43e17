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

/// Pages one chunk of marks covers (a GiB of region). Chunks are made at
/// the first advice that sets a mark in them: a region of a terabyte (the
/// preload library's arena) would otherwise cost 64 MiB of marks, written
/// in full, at the program's first fork advice (V8 gives one at start-up),
/// and every fork would walk all of them.
const CHUNK_PAGES: usize = 1 << 18;
/// Words of one plane (wipe or don't-fork) of a chunk.
const CHUNK_WORDS: usize = CHUNK_PAGES / 64;
const _: () = assert!(CHUNK_PAGES.is_multiple_of(64));

/// The marks of one chunk: `CHUNK_WORDS` wipe words, then as many
/// don't-fork words.
type Chunk = Box<[AtomicU64]>;

/// One region's fork marks: a wipe bit and a don't-fork bit per page, in
/// chunks made where advice set a mark (a chunk never made has none).
#[derive(Debug, Default)]
pub struct ForkMarks {
    /// One slot per chunk of the region, made at its first fork advice.
    chunks: OnceLock<Box<[OnceLock<Chunk>]>>,
}

impl ForkMarks {
    pub(crate) fn mark(&self, pages: Range<usize>, advice: ForkAdvice, page_count: usize) {
        let (plane, set) = match advice {
            ForkAdvice::WipeOnFork => (0, true),
            ForkAdvice::KeepOnFork => (0, false),
            ForkAdvice::DontFork => (CHUNK_WORDS, true),
            ForkAdvice::DoFork => (CHUNK_WORDS, false),
        };
        let chunks = self.chunks.get_or_init(|| {
            (0..page_count.div_ceil(CHUNK_PAGES))
                .map(|_| OnceLock::new())
                .collect()
        });
        let mut page = pages.start;
        while page < pages.end {
            let index = page / CHUNK_PAGES;
            let chunk_end = ((index + 1) * CHUNK_PAGES).min(pages.end);
            let Some(slot) = chunks.get(index) else {
                break;
            };
            let bits = if set {
                Some(slot.get_or_init(|| (0..2 * CHUNK_WORDS).map(|_| AtomicU64::new(0)).collect()))
            } else {
                // Clearing where nothing was ever set: nothing to do.
                slot.get()
            };
            let Some(bits) = bits else {
                page = chunk_end;
                continue;
            };
            while page < chunk_end {
                let (word, bit) = ((page % CHUNK_PAGES) / 64, page % 64);
                let n = (64 - bit).min(chunk_end - page);
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
    }

    /// The chunk of marks holding `page`, if one was made.
    fn chunk(&self, page: usize) -> Option<&Chunk> {
        self.chunks.get()?.get(page / CHUNK_PAGES)?.get()
    }

    /// Calls `each` with every marked page and its marks, in page order.
    pub fn for_each_marked(&self, mut each: impl FnMut(usize, Mark)) {
        let Some(chunks) = self.chunks.get() else {
            return;
        };
        for (index, slot) in chunks.iter().enumerate() {
            let Some(bits) = slot.get() else {
                continue;
            };
            for word in 0..CHUNK_WORDS {
                let wipe = bits[word].load(Ordering::Acquire);
                let dont_fork = bits[CHUNK_WORDS + word].load(Ordering::Acquire);
                let mut any = wipe | dont_fork;
                while any != 0 {
                    let bit = any.trailing_zeros() as usize;
                    any &= any - 1;
                    each(
                        index * CHUNK_PAGES + word * 64 + bit,
                        Mark {
                            wipe: wipe >> bit & 1 != 0,
                            dont_fork: dont_fork >> bit & 1 != 0,
                        },
                    );
                }
            }
        }
    }

    /// True if the page was advised `MADV_WIPEONFORK` or `MADV_DONTFORK`:
    /// a child gets none of its contents.
    pub fn child_gets_nothing(&self, page: usize) -> bool {
        let Some(bits) = self.chunk(page) else {
            return false;
        };
        let word = (page % CHUNK_PAGES) / 64;
        (bits[word].load(Ordering::Acquire) | bits[CHUNK_WORDS + word].load(Ordering::Acquire))
            >> (page % 64)
            & 1
            != 0
    }

    /// The runs of pages of a region of `page_count` pages that a child has
    /// mapped (not advised `MADV_DONTFORK`), in order.
    pub fn mapped_in_child(&self, page_count: usize, mut each: impl FnMut(Range<usize>)) {
        let mut start = None;
        // Always at a word's first page (chunks are whole words), but the last.
        let mut page = 0;
        while page < page_count {
            let (dont_fork, span) = match self.chunk(page) {
                // No chunk: no page of it was advised.
                None => (0, CHUNK_PAGES - page % CHUNK_PAGES),
                Some(bits) => (
                    bits[CHUNK_WORDS + (page % CHUNK_PAGES) / 64].load(Ordering::Acquire),
                    64,
                ),
            };
            let end = (page + span).min(page_count);
            if dont_fork == 0 {
                start.get_or_insert(page);
            } else {
                for p in page..end {
                    match (start, dont_fork >> (p % 64) & 1 != 0) {
                        (None, false) => start = Some(p),
                        (Some(s), true) => {
                            each(s..p);
                            start = None;
                        }
                        _ => {}
                    }
                }
            }
            page = end;
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
    fn a_terabyte_region_makes_marks_only_where_advised() {
        // The preload library's arena: 2^28 pages.
        let pages = 1usize << 28;
        let m = ForkMarks::default();
        m.mark(0..pages, ForkAdvice::DoFork, pages);
        m.mark(0..pages, ForkAdvice::KeepOnFork, pages);
        assert_eq!(made(&m), 0, "clearing makes no chunk");
        let edge = 5 * CHUNK_PAGES;
        m.mark(edge - 3..edge + 2, ForkAdvice::DontFork, pages);
        m.mark(pages - 1..pages, ForkAdvice::WipeOnFork, pages);
        assert_eq!(made(&m), 3);
        assert_eq!(runs(&m, pages), vec![0..edge - 3, edge + 2..pages]);
        let got: Vec<usize> = marked(&m).into_iter().map(|(p, _, _)| p).collect();
        assert_eq!(
            got,
            vec![edge - 3, edge - 2, edge - 1, edge, edge + 1, pages - 1]
        );
        assert!(m.child_gets_nothing(edge) && !m.child_gets_nothing(edge + 2));
        assert!(m.child_gets_nothing(pages - 1) && !m.child_gets_nothing(7));
    }

    fn made(m: &ForkMarks) -> usize {
        m.chunks.get().map_or(0, |chunks| {
            chunks.iter().filter(|c| c.get().is_some()).count()
        })
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
