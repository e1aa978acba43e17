//! Free space of one arena region: page-aligned extents, first fit, merged
//! with their neighbours when freed. Pure bookkeeping; the arena carver
//! (module `arena`) owns the memory.

use std::collections::BTreeMap;

/// The free extents of an arena of `size` bytes.
#[derive(Debug)]
pub(crate) struct Extents {
    /// Offset of each free extent -> its length. No two touch (merged on free).
    free: BTreeMap<usize, usize>,
    size: usize,
    used: usize,
}

impl Extents {
    /// An arena of `size` bytes, all free.
    pub fn new(size: usize) -> Extents {
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Extents {
            free,
            size,
            used: 0,
        }
    }

    /// Takes `len` bytes from the lowest free extent that holds them.
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        if len == 0 {
            return None;
        }
        let (&offset, &extent) = self.free.iter().find(|(_, &extent)| extent >= len)?;
        self.free.remove(&offset);
        if extent > len {
            self.free.insert(offset + len, extent - len);
        }
        self.used += len;
        Some(offset)
    }

    /// Gives back `[offset, offset + len)`, which `alloc` handed out.
    pub fn free(&mut self, offset: usize, len: usize) {
        debug_assert!(offset + len <= self.size);
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&before, &before_len)) = self.free.range(..offset).next_back() {
            debug_assert!(before + before_len <= offset, "double free of {offset:#x}");
            if before + before_len == offset {
                self.free.remove(&before);
                start = before;
            }
        }
        if let Some(&after_len) = self.free.get(&end) {
            self.free.remove(&end);
            end += after_len;
        }
        self.free.insert(start, end - start);
        self.used -= len;
    }

    /// Bytes handed out and not given back.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Free extents (for tests and figures).
    pub fn free_extents(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_then_merge_back_to_one_extent() {
        let mut e = Extents::new(100);
        let a = e.alloc(10).unwrap();
        let b = e.alloc(20).unwrap();
        let c = e.alloc(30).unwrap();
        assert_eq!((a, b, c), (0, 10, 30));
        assert_eq!(e.used(), 60);
        e.free(b, 20);
        // A hole of 20 at 10: a 15 fits there, a 25 goes after c.
        assert_eq!(e.alloc(15), Some(10));
        assert_eq!(e.alloc(25), Some(60));
        assert_eq!(e.alloc(16), None, "only 5 + 15 bytes left, in two pieces");
        e.free(10, 15);
        e.free(a, 10);
        e.free(c, 30);
        e.free(60, 25);
        assert_eq!(e.used(), 0);
        assert_eq!(e.free_extents(), 1, "every free merged with its neighbours");
        assert_eq!(e.alloc(100), Some(0));
    }

    #[test]
    fn random_alloc_free_never_overlaps() {
        // A small deterministic generator: the test needs variety, not quality.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let size = 1 << 16;
        let mut e = Extents::new(size);
        let mut owned = vec![false; size];
        let mut live: Vec<(usize, usize)> = Vec::new();
        for _ in 0..20_000 {
            if next() % 2 == 0 || live.is_empty() {
                let len = (next() % 2048 + 1) as usize;
                if let Some(at) = e.alloc(len) {
                    assert!(owned[at..at + len].iter().all(|&o| !o), "overlap at {at}");
                    owned[at..at + len].iter_mut().for_each(|o| *o = true);
                    live.push((at, len));
                }
            } else {
                let (at, len) = live.swap_remove((next() as usize) % live.len());
                owned[at..at + len].iter_mut().for_each(|o| *o = false);
                e.free(at, len);
            }
            assert_eq!(e.used(), live.iter().map(|&(_, l)| l).sum::<usize>());
        }
        for (at, len) in live.drain(..) {
            e.free(at, len);
        }
        assert_eq!(e.free_extents(), 1);
    }
}
