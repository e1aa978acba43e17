//! The memory zpage maps for itself: regions' address ranges and the staging
//! area ([`Mapping`]), unmapped on drop.
#![allow(unsafe_code)]

use crate::sys::{madvise_keep, mmap_anon, munmap, Errno, PAGE_SIZE};

/// A private anonymous mapping owned by this crate, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    base: usize,
    len: usize,
    leak: std::sync::atomic::AtomicBool,
}

impl Mapping {
    /// Maps `pages` pages read-write with transparent huge pages disabled
    /// (userfaultfd resolves in 4 KiB pages; a THP would be split by the first
    /// MOVE anyway).
    pub fn new(pages: usize) -> Result<Mapping, Errno> {
        let len = pages * PAGE_SIZE;
        Mapping::at(mmap_anon(len)? as usize, len)
    }

    /// As [`Mapping::new`], in the far range when this process reserved it
    /// (`crate::far`): region memory the program sees, recognisable by its
    /// address.
    pub fn new_for_region(pages: usize) -> Result<Mapping, Errno> {
        let len = pages * PAGE_SIZE;
        match crate::far::take(len) {
            Some(base) => Mapping::at(base, len),
            None => Mapping::new(pages),
        }
    }

    /// `pages` pages of the far range, reserved (`PROT_NONE`): for a region
    /// whose parts the program maps and protects itself (the preload
    /// library's arena). `ENOMEM` if the far range is not reserved or has
    /// no room.
    pub fn reserve_for_region(pages: usize) -> Result<Mapping, Errno> {
        let len = pages * PAGE_SIZE;
        match crate::far::take_with(len, libc::PROT_NONE) {
            Some(base) => Mapping::at(base, len),
            None => Err(Errno(libc::ENOMEM)),
        }
    }

    fn at(base: usize, len: usize) -> Result<Mapping, Errno> {
        let m = Mapping {
            base,
            len,
            leak: std::sync::atomic::AtomicBool::new(false),
        };
        madvise_keep(base, len, libc::MADV_NOHUGEPAGE)?;
        Ok(m)
    }

    pub fn base(&self) -> usize {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn pages(&self) -> usize {
        self.len / PAGE_SIZE
    }

    pub fn addr(&self, page: usize) -> usize {
        self.base + page * PAGE_SIZE
    }

    /// The page at index `page`, which the caller knows to be present and not
    /// concurrently modified (a staging slot it owns).
    pub fn page(&self, page: usize) -> &[u8; PAGE_SIZE] {
        assert!(page < self.pages());
        // SAFETY: in bounds of a live mapping owned by self, page-aligned; the
        // staging protocol gives the caller exclusive ownership of the slot, so
        // nothing writes it while the reference lives.
        unsafe { &*(self.addr(page) as *const [u8; PAGE_SIZE]) }
    }

    /// The whole mapping as bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: live mapping owned by self; its contents as seen by the
        // program never change under zpage (evict/restore preserve bytes).
        unsafe { std::slice::from_raw_parts(self.base as *const u8, self.len) }
    }

    /// Leaves the address range alone on drop (the program unmapped or
    /// moved part of it; something else may live there now).
    pub fn leak_on_drop(&self) {
        self.leak.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.leak.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if crate::far::contains(self.base) {
            crate::far::give_back(self.base, self.len);
        } else {
            // SAFETY: we own the mapping and this is its last use.
            let _ = unsafe { munmap(self.base as *mut u8, self.len) };
        }
    }
}

/// The bytes of `m`, mutably, for as long as `_exclusive` (the owner's
/// exclusive borrow, proof that no other reference into `m` exists) lives.
pub(crate) fn exclusive_bytes<'a, T>(m: &Mapping, _exclusive: &'a mut T) -> &'a mut [u8] {
    // SAFETY: live mapping; the caller owns `m` and holds `&mut` of its owner,
    // so no other slice of the mapping is live for 'a (see Region::as_mut_slice).
    unsafe { std::slice::from_raw_parts_mut(m.base() as *mut u8, m.len()) }
}
