//! The memory a call reads or writes, gathered once for every kind of
//! argument (a buffer, an iovec array, a message header).

use libc::{iovec, msghdr};

/// Spans a call's buffers are pinned in, at most (a call naming more is
/// restored and retried instead, see [`crate::guarded`]).
pub const MAX_SPANS: usize = 16;

/// Spans of memory a call reads or writes, in a small fixed array: the
/// wrappers run on any thread, inside program signal handlers too
/// (CPython's faulthandler writes from one, on an alternate stack of a few
/// KiB), so they allocate nothing and keep their stack use small.
#[derive(Debug)]
pub struct Spans {
    spans: [(usize, usize); MAX_SPANS],
    len: usize,
    overflow: bool,
}

impl Default for Spans {
    fn default() -> Self {
        Spans::new()
    }
}

impl Spans {
    pub const fn new() -> Spans {
        Spans {
            spans: [(0, 0); MAX_SPANS],
            len: 0,
            overflow: false,
        }
    }

    /// `len` bytes at `addr` (nothing if `len` is 0).
    pub fn add(&mut self, addr: usize, len: usize) {
        if len == 0 {
            return;
        }
        if self.len == MAX_SPANS {
            self.overflow = true;
            return;
        }
        self.spans[self.len] = (addr, len);
        self.len += 1;
    }

    /// `count` objects of type `T` at `ptr`.
    pub fn add_array<T>(&mut self, ptr: *const T, count: usize) {
        if !ptr.is_null() {
            self.add(ptr as usize, count.saturating_mul(std::mem::size_of::<T>()));
        }
    }

    /// The recorded spans.
    pub fn as_slice(&self) -> &[(usize, usize)] {
        &self.spans[..self.len]
    }

    /// True if some span did not fit (it was not recorded).
    pub fn overflowed(&self) -> bool {
        self.overflow
    }

    /// The iovec array and every buffer it names.
    ///
    /// # Safety
    /// `iov` is null or valid for `n` entries (what the call itself
    /// requires).
    pub unsafe fn add_iovecs(&mut self, iov: *const iovec, n: usize) {
        if iov.is_null() {
            return;
        }
        self.add_array(iov, n);
        for i in 0..n {
            // SAFETY: per the contract, entry `i` is valid.
            let v = unsafe { &*iov.add(i) };
            self.add(v.iov_base as usize, v.iov_len);
        }
    }

    /// A message header and everything it names.
    ///
    /// # Safety
    /// `m` is null or a valid msghdr (what the call itself requires).
    pub unsafe fn add_msghdr(&mut self, m: *const msghdr) {
        if m.is_null() {
            return;
        }
        self.add_array(m, 1);
        // SAFETY: per the contract.
        let h = unsafe { &*m };
        self.add(h.msg_name as usize, h.msg_namelen as usize);
        self.add(h.msg_control as usize, h.msg_controllen);
        // SAFETY: per the contract, msg_iov is valid for msg_iovlen entries.
        unsafe { self.add_iovecs(h.msg_iov, h.msg_iovlen) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_spans_are_left_out_and_overflow_is_recorded() {
        let mut s = Spans::new();
        s.add(0x1000, 0);
        assert!(s.as_slice().is_empty());
        for i in 0..MAX_SPANS {
            s.add(0x1000 * (i + 1), 8);
        }
        assert!(!s.overflowed());
        s.add(0x9999_0000, 8);
        assert!(s.overflowed());
        assert_eq!(s.as_slice().len(), MAX_SPANS);
    }

    #[test]
    fn a_message_names_its_header_name_control_iovecs_and_buffers() {
        let mut a = [0u8; 10];
        let mut b = [0u8; 20];
        let iov = [
            iovec {
                iov_base: a.as_mut_ptr().cast(),
                iov_len: a.len(),
            },
            iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            },
        ];
        let mut name = [0u8; 16];
        // SAFETY: msghdr is plain data; zero is a valid empty header.
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_name = name.as_mut_ptr().cast();
        m.msg_namelen = name.len() as u32;
        m.msg_iov = iov.as_ptr() as *mut iovec;
        m.msg_iovlen = iov.len();
        let mut s = Spans::new();
        // SAFETY: a valid header naming valid buffers.
        unsafe { s.add_msghdr(&m) };
        assert_eq!(
            s.as_slice(),
            &[
                (&m as *const msghdr as usize, std::mem::size_of::<msghdr>()),
                (name.as_ptr() as usize, 16),
                (iov.as_ptr() as usize, 2 * std::mem::size_of::<iovec>()),
                (a.as_ptr() as usize, 10),
                (b.as_ptr() as usize, 20),
            ]
        );
    }
}
