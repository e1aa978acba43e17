//! The C library's function behind a wrapper, found with `dlsym` once and
//! kept in an atomic slot (looked up again only while it is not found).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Where `dlsym` looks.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// `RTLD_NEXT`: the next definition after the object holding this code
    /// (an `LD_PRELOAD` interposer forwarding to the C library).
    Next,
    /// `RTLD_DEFAULT`: the definition the program's own calls bind to (an
    /// in-process wrapper reached through patched GOT entries).
    Default,
}

/// One function's slot.
#[derive(Debug)]
pub struct Real {
    address: AtomicUsize,
    /// The name, NUL-terminated.
    name: &'static str,
    scope: Scope,
}

impl Real {
    /// `name` must end with a NUL byte (checked when the slot is made).
    pub const fn new(name: &'static str, scope: Scope) -> Real {
        let bytes = name.as_bytes();
        assert!(!bytes.is_empty() && bytes[bytes.len() - 1] == 0);
        Real {
            address: AtomicUsize::new(0),
            name,
            scope,
        }
    }

    /// The name without its NUL.
    pub fn name(&self) -> &'static str {
        &self.name[..self.name.len() - 1]
    }

    /// Looks the function up now (0 if it is not found). Not
    /// async-signal-safe (`dlsym` takes the loader's lock): front ends call
    /// it when they start, so that [`Real::address`] in a signal handler
    /// only reads the slot.
    pub fn resolve(&self) -> usize {
        let handle = match self.scope {
            Scope::Next => libc::RTLD_NEXT,
            Scope::Default => libc::RTLD_DEFAULT,
        };
        // SAFETY: a NUL-terminated name (checked in `new`) and a valid
        // pseudo-handle.
        let p = unsafe { libc::dlsym(handle, self.name.as_ptr().cast()) } as usize;
        self.address.store(p, Ordering::Release);
        p
    }

    /// The function's address, looked up now if it was not yet.
    pub fn address(&self) -> usize {
        match self.address.load(Ordering::Acquire) {
            0 => self.resolve(),
            p => p,
        }
    }

    /// The function as type `F`.
    ///
    /// # Safety
    /// `F` is the function pointer type of the C function of this name.
    pub unsafe fn function<F: Copy>(&self) -> Option<F> {
        const {
            assert!(std::mem::size_of::<F>() == std::mem::size_of::<usize>());
        }
        let p = self.address();
        // SAFETY: a non-null address dlsym returned for this name, whose C
        // type is `F` per the contract; sizes are equal (asserted above).
        (p != 0).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&p) })
    }
}
