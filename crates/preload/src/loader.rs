//! The dynamic loader's code range, to tell its allocations apart.
//!
//! The loader (`ld-linux`) allocates through the program's `malloc` once
//! the program is running: every new thread's dynamic thread vector (DTV)
//! and the thread-local blocks of libraries opened later. `__tls_get_addr`
//! reads the DTV on every thread-local access of a shared library, and
//! zpage's own code is one: its fault handler reads thread-locals. A DTV
//! in compressed memory would be evicted like any object, and the handler's
//! first thread-local read would then fault inside the handler, where the
//! fault cannot be served (SIGBUS is blocked there: the kernel kills the
//! process). So calls made by the loader's code are served from zpage's
//! private heap, never from the arena.
//!
//! Async-signal-safe: reads the auxiliary vector and the loader's own ELF
//! headers in memory, and two atomics.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

/// `[start, end)` of the loader's mapped image; `end` 0 until looked up,
/// `usize::MAX` as `start` when there is no loader (a static program).
static START: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);

/// True if `addr` (a return address) is in the dynamic loader's image.
pub fn contains(addr: usize) -> bool {
    let mut end = END.load(Ordering::Acquire);
    if end == 0 {
        let (s, e) = look_up();
        START.store(s, Ordering::Relaxed);
        END.store(e, Ordering::Release);
        end = e;
    }
    addr >= START.load(Ordering::Relaxed) && addr < end
}

/// The loader's image from its ELF header at `AT_BASE`: from its base to
/// the end of its highest loaded segment.
fn look_up() -> (usize, usize) {
    // SAFETY: getauxval reads the auxiliary vector; 0 if absent.
    let base = unsafe { libc::getauxval(libc::AT_BASE) } as usize;
    if base == 0 {
        return (usize::MAX, 1);
    }
    // SAFETY: AT_BASE is where the kernel mapped the loader, whose first
    // loaded segment starts with its ELF header; its program headers are
    // inside that segment (`e_phoff` from the header), as every loader's
    // are (the kernel reads them from there to map it).
    unsafe {
        let header = &*(base as *const libc::Elf64_Ehdr);
        if &header.e_ident[..4] != b"\x7fELF" {
            return (usize::MAX, 1);
        }
        let phdrs = std::slice::from_raw_parts(
            (base + header.e_phoff as usize) as *const libc::Elf64_Phdr,
            header.e_phnum as usize,
        );
        let end = phdrs
            .iter()
            .filter(|p| p.p_type == libc::PT_LOAD)
            .map(|p| base + (p.p_vaddr + p.p_memsz) as usize)
            .max()
            .unwrap_or(base + 1);
        (base, end)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_loaders_image_is_inside_and_ours_is_not() {
        // `_r_debug`, the debugger interface, is defined by the loader.
        // SAFETY: dlsym with a NUL-terminated name.
        let r_debug = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_r_debug".as_ptr()) };
        assert!(!r_debug.is_null(), "the loader's _r_debug not found");
        assert!(super::contains(r_debug as usize));
        let ours = super::contains as fn(usize) -> bool as usize;
        assert!(!super::contains(ours));
        assert!(!super::contains(libc::malloc as *const () as usize));
    }
}
