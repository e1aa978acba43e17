//! The C library's stdio buffers, told apart by who allocates them.
//!
//! A stream's buffer is the memory the C library hands `read` and `write`
//! on every refill and flush of the stream, from inside the library where
//! no wrapper sees the call. In region memory each of those calls is
//! trapped and served by the SIGSYS handler (a signal round trip, about
//! 5 µs here): GNU sort writing 700 MB of output through `stdout` paid it
//! every 4 KiB. glibc allocates the buffer in `_IO_file_doallocate`, with
//! one `malloc` of `BUFSIZ` or the file's block size, and frees it when the
//! stream closes. Calls from there are served from zpage's private heap
//! (see `malloc::private_for`): never evicted, never trapped, a few KiB per
//! open stream, counted in zpage's own heap.
//!
//! Wide-character streams (`_IO_wfile_doallocate`, not exported) keep
//! their buffers in regions: their calls are trapped as before.
//!
//! Async-signal-safe after [`look_up`]: [`allocates`] reads two atomics.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

/// `[START, END)` of `_IO_file_doallocate`'s code; both 0 until looked up
/// or when it is not found (another C library).
static START: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// `dladdr1`'s request for the symbol's ELF entry (glibc's `<dlfcn.h>`).
const RTLD_DL_SYMENT: libc::c_int = 1;

/// Finds `_IO_file_doallocate` and its size (from the library's constructor,
/// before the program's first stream operation in practice: a buffer
/// allocated earlier stays in region memory, which is only slower).
pub fn look_up() {
    // SAFETY: dlsym with a NUL-terminated name.
    let start = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_IO_file_doallocate".as_ptr()) };
    if start.is_null() {
        return;
    }
    // SAFETY: an all-zero `Dl_info` is valid (null pointers); dladdr1
    // fills it and points `symbol` at the symbol's entry in the library's
    // dynamic symbol table, which lives as long as the library.
    let size = unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let mut symbol: *mut libc::c_void = std::ptr::null_mut();
        if libc::dladdr1(start, &mut info, &mut symbol, RTLD_DL_SYMENT) == 0 || symbol.is_null() {
            return;
        }
        let symbol = &*(symbol as *const libc::Elf64_Sym);
        if info.dli_saddr != start {
            return;
        }
        symbol.st_size as usize
    };
    START.store(start as usize, Ordering::Relaxed);
    END.store(start as usize + size, Ordering::Release);
}

/// True if `caller` (a return address) is in `_IO_file_doallocate`: the
/// allocation is a stdio stream's buffer.
pub fn allocates(caller: usize) -> bool {
    let end = END.load(Ordering::Acquire);
    caller < end && caller >= START.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stdio_allocator_is_found_and_nothing_else_is_in_it() {
        super::look_up();
        // SAFETY: dlsym with a NUL-terminated name.
        let doallocate =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_IO_file_doallocate".as_ptr()) } as usize;
        assert_ne!(doallocate, 0, "glibc exports _IO_file_doallocate");
        assert!(super::allocates(doallocate + 1));
        assert!(!super::allocates(libc::malloc as *const () as usize));
        assert!(!super::allocates(libc::fopen as *const () as usize));
        assert!(!super::allocates(0));
    }
}
