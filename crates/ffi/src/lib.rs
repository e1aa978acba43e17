//! zpage's C API: compressed memory regions for C programs.
//!
//! The header is `include/zpage.h` at the root of the repository; C programs
//! link with `-lzpage` (`pkg-config --cflags --libs zpage`). Every function:
//! - checks its pointers and returns `ZPAGE_ERR_NULL_POINTER` for a null one,
//! - returns `ZPAGE_OK` (0) or a negative `ZPAGE_ERR_*` code, and leaves a
//!   message for `zpage_last_error()` on the calling thread,
//! - never lets a Rust panic unwind into C (it becomes `ZPAGE_ERR_PANIC`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use zpage_region::{Budget, Region, RegionConfig, RegionError};

mod options;

use options::{budget_config_from, default_options};
pub use options::{zpage_options_fields, CField, OptionField, ZpageOptions};

/// Success.
pub const ZPAGE_OK: c_int = 0;
/// A pointer argument was null.
pub const ZPAGE_ERR_NULL_POINTER: c_int = -1;
/// An argument or option value cannot work (message says which).
pub const ZPAGE_ERR_INVALID_ARGUMENT: c_int = -2;
/// An offset/length outside the region.
pub const ZPAGE_ERR_OUT_OF_RANGE: c_int = -3;
/// A system call failed, or the region is no longer usable.
pub const ZPAGE_ERR_SYSTEM: c_int = -4;
/// The kernel lacks what zpage needs (userfaultfd features, privilege).
pub const ZPAGE_ERR_UNSUPPORTED: c_int = -5;
/// A bug in zpage: an internal panic was caught at the boundary.
pub const ZPAGE_ERR_PANIC: c_int = -6;

/// `zpage_options.fault_mode`: faults resolved in the faulting thread (SIGBUS); no privilege needed.
pub const ZPAGE_FAULT_SIGBUS: c_int = 0;
/// `zpage_options.fault_mode`: a handler thread resolves faults; system calls may touch evicted pages.
pub const ZPAGE_FAULT_HANDLER_THREAD: c_int = 1;
/// `zpage_options.aging`: zpage's refault-distance policy with trial eviction.
pub const ZPAGE_AGING_REFAULT: c_int = 0;
/// `zpage_options.aging`: evict in the order pages became resident.
pub const ZPAGE_AGING_FIFO: c_int = 1;
/// `zpage_options.pool`: size classes (zsmalloc-like).
pub const ZPAGE_POOL_SIZE_CLASS: c_int = 0;
/// `zpage_options.pool`: three slots per page (Zircon-like).
pub const ZPAGE_POOL_TRI_PAGE: c_int = 1;
/// `zpage_options.pool`: two buddies per page (zbud-like).
pub const ZPAGE_POOL_TWO_SLOT: c_int = 2;

macro_rules! define_ffi_stats {
    (
        gauges { $( $(#[doc = $gdoc:literal])* $gauge:ident, )* }
        counters { $( $(#[doc = $cdoc:literal])* $counter:ident, )* }
    ) => {
        /// A snapshot of a region's figures (C: `zpage_stats`): one `uint64_t`
        /// per field of the region library's figure list, in its order, after
        /// the struct's own size (so it can grow: a program compiled against a
        /// shorter struct gets the fields it knows).
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default)]
        pub struct ZpageStats {
            /// `sizeof(zpage_stats)` as the caller knows it (set it before the call).
            pub struct_size: u64,
            $( $(#[doc = $gdoc])* pub $gauge: u64, )*
            $( $(#[doc = $cdoc])* pub $counter: u64, )*
        }

        impl ZpageStats {
            fn from_stats(s: &zpage_region::RegionStats) -> ZpageStats {
                ZpageStats {
                    struct_size: std::mem::size_of::<ZpageStats>() as u64,
                    $( $gauge: s.$gauge, )*
                    $( $counter: s.$counter, )*
                }
            }
        }
    };
}

zpage_region::region_stat_fields!(define_ffi_stats);

const _: () = assert!(
    std::mem::size_of::<ZpageStats>() == 8 * (1 + zpage_region::RegionStats::FIELDS.len()),
    "zpage_stats is one uint64_t per figure after its size"
);

/// Opaque budget handle (C: `zpage_budget`).
#[derive(Debug)]
pub struct ZpageBudget {
    budget: Budget,
}

/// Opaque region handle (C: `zpage_region`).
#[derive(Debug)]
pub struct ZpageRegion {
    region: Region,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = message);
}

/// An error on its way to C: a code and a message.
struct Failure(c_int, String);

impl From<RegionError> for Failure {
    fn from(error: RegionError) -> Self {
        let code = match &error {
            RegionError::OutOfRange { .. } => ZPAGE_ERR_OUT_OF_RANGE,
            RegionError::InvalidConfig(_)
            | RegionError::PinExceedsBudget { .. }
            | RegionError::NotPinned(_)
            | RegionError::Codec(_)
            | RegionError::TooManyRegions(_) => ZPAGE_ERR_INVALID_ARGUMENT,
            RegionError::UffdUnavailable { .. }
            | RegionError::FeaturesMissing { .. }
            | RegionError::Unsupported(_) => ZPAGE_ERR_UNSUPPORTED,
            _ => ZPAGE_ERR_SYSTEM,
        };
        Failure(code, error.to_string())
    }
}

fn null(what: &str) -> Failure {
    Failure(ZPAGE_ERR_NULL_POINTER, format!("{what} is NULL"))
}

/// Runs `body`, turning errors and panics into a code plus `zpage_last_error`.
fn guarded(function: &str, body: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ZPAGE_OK,
        Ok(Err(Failure(code, message))) => {
            set_last_error(&format!("{function}: {message}"));
            code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(&format!(
                "{function}: internal error (please report): {what}"
            ));
            ZPAGE_ERR_PANIC
        }
    }
}

/// Reads a caller's options: as many bytes as its `struct_size` says (at most
/// ours), the rest from the defaults.
///
/// # Safety
/// `options` must be NULL or point to at least `struct_size` readable bytes
/// of a `zpage_options` whose string fields (`codec`, `backing`, ...) are
/// NULL or NUL-terminated strings.
unsafe fn read_options(options: *const ZpageOptions) -> Result<Option<ZpageOptions>, Failure> {
    if options.is_null() {
        return Ok(None);
    }
    // SAFETY: the first field is readable by the caller's contract.
    let given = unsafe { std::ptr::addr_of!((*options).struct_size).read_unaligned() } as usize;
    let ours = std::mem::size_of::<ZpageOptions>();
    if given < 8 {
        return Err(Failure(
            ZPAGE_ERR_INVALID_ARGUMENT,
            format!(
                "options.struct_size is {given}: initialise the options with zpage_options_init()"
            ),
        ));
    }
    let mut merged = default_options();
    // SAFETY: copies min(given, ours) bytes the caller made readable into our
    // own struct; every bit pattern of the integer fields is valid, and the
    // pointer field is only dereferenced if the caller set it (contract).
    unsafe {
        std::ptr::copy_nonoverlapping(
            options.cast::<u8>(),
            (&mut merged as *mut ZpageOptions).cast::<u8>(),
            given.min(ours),
        );
    }
    merged.struct_size = ours as u32;
    Ok(Some(merged))
}

/// Fills `options` with the defaults (lz4, SIGBUS fault mode, refault aging,
/// size-class pool, no pool cap, write tracking) and its `struct_size`.
///
/// # Safety
/// `options` must be NULL or point to writable memory for one `zpage_options`.
#[no_mangle]
pub unsafe extern "C" fn zpage_options_init(options: *mut ZpageOptions) -> c_int {
    guarded("zpage_options_init", || {
        if options.is_null() {
            return Err(null("options"));
        }
        let defaults = default_options();
        // SAFETY: non-null (checked) and writable for one struct by the caller's contract.
        unsafe { options.write(defaults) };
        Ok(())
    })
}

/// Creates a region of `size` bytes keeping at most `budget` bytes resident;
/// on success `*out` is the new region (destroy it with `zpage_region_destroy`).
///
/// # Safety
/// `options` must be NULL (defaults) or point to a valid `zpage_options` whose
/// string fields (`codec`, `backing`, ...) are NULL or NUL-terminated
/// strings; `out` must point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_create(
    size: usize,
    budget: usize,
    options: *const ZpageOptions,
    out: *mut *mut ZpageRegion,
) -> c_int {
    guarded("zpage_region_create", || {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: `options` is NULL or valid for reads by the caller's contract.
        let options = unsafe { read_options(options) }?;
        let config = RegionConfig {
            size_bytes: size,
            // SAFETY: the options' string fields are NULL or NUL-terminated
            // (this function's contract).
            budget: unsafe { budget_config_from(budget, options.as_ref()) }?,
        };
        let region = Region::new(config)?;
        let handle = Box::into_raw(Box::new(ZpageRegion { region }));
        // SAFETY: `out` is non-null (checked) and writable by the caller's contract.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Creates a budget of `budget` bytes that many regions can draw on (one
/// resident limit, one compressed pool, one reclaimer); `*out` receives it.
/// Destroy it with `zpage_budget_destroy` (regions made on it keep it alive).
///
/// # Safety
/// As `zpage_region_create`.
#[no_mangle]
pub unsafe extern "C" fn zpage_budget_create(
    budget: usize,
    options: *const ZpageOptions,
    out: *mut *mut ZpageBudget,
) -> c_int {
    guarded("zpage_budget_create", || {
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: forwarded contract.
        let options = unsafe { read_options(options) }?;
        // SAFETY: as above, forwarded contract.
        let config = unsafe { budget_config_from(budget, options.as_ref()) }?;
        let budget = Budget::new(config)?;
        let handle = Box::into_raw(Box::new(ZpageBudget { budget }));
        // SAFETY: `out` is non-null (checked) and writable by the caller's contract.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Creates a region of `size` bytes drawing on `budget`; `*out` receives it.
///
/// # Safety
/// `budget` must be NULL or a live handle from `zpage_budget_create`; `out`
/// must point to writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_create_in(
    budget: *const ZpageBudget,
    size: usize,
    out: *mut *mut ZpageRegion,
) -> c_int {
    guarded("zpage_region_create_in", || {
        // SAFETY: NULL or a live handle (caller's contract).
        let budget = unsafe { budget.as_ref() }.ok_or_else(|| null("budget"))?;
        if out.is_null() {
            return Err(null("out"));
        }
        let region = Region::with_budget(&budget.budget, size)?;
        let handle = Box::into_raw(Box::new(ZpageRegion { region }));
        // SAFETY: `out` is non-null (checked) and writable by the caller's contract.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Releases the caller's handle on a budget (NULL is ignored); the budget
/// itself lives on while regions draw on it.
///
/// # Safety
/// `budget` must be NULL or a live handle from `zpage_budget_create`, not used again.
#[no_mangle]
pub unsafe extern "C" fn zpage_budget_destroy(budget: *mut ZpageBudget) -> c_int {
    guarded("zpage_budget_destroy", || {
        if !budget.is_null() {
            // SAFETY: the handle came from Box::into_raw in zpage_budget_create
            // and the caller gives it up here.
            drop(unsafe { Box::from_raw(budget) });
        }
        Ok(())
    })
}

/// Borrows the region behind a handle, or fails with NULL_POINTER.
///
/// # Safety
/// `region` must be NULL or a live handle from `zpage_region_create`.
unsafe fn borrow<'a>(region: *const ZpageRegion) -> Result<&'a ZpageRegion, Failure> {
    // SAFETY: NULL or a live handle (caller's contract); `as_ref` handles NULL.
    unsafe { region.as_ref() }.ok_or_else(|| null("region"))
}

/// Base address of the region (NULL if `region` is NULL).
///
/// # Safety
/// `region` must be NULL or a live handle from `zpage_region_create`.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_address(region: *const ZpageRegion) -> *mut c_void {
    let mut address = std::ptr::null_mut();
    guarded("zpage_region_address", || {
        // SAFETY: forwarded contract.
        address = unsafe { borrow(region) }?.region.as_ptr().cast();
        Ok(())
    });
    address
}

/// Size of the region in bytes (0 if `region` is NULL).
///
/// # Safety
/// `region` must be NULL or a live handle from `zpage_region_create`.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_size(region: *const ZpageRegion) -> usize {
    let mut size = 0;
    guarded("zpage_region_size", || {
        // SAFETY: forwarded contract.
        size = unsafe { borrow(region) }?.region.len();
        Ok(())
    });
    size
}

/// Writes a snapshot of the region's figures into `*out`. Set
/// `out->struct_size = sizeof(zpage_stats)` first; the library fills as many
/// fields as fit and sets `struct_size` to what it filled.
///
/// # Safety
/// `region` must be NULL or a live handle; `out` NULL or writable for
/// `out->struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_stats(
    region: *const ZpageRegion,
    out: *mut ZpageStats,
) -> c_int {
    guarded("zpage_region_stats", || {
        // SAFETY: forwarded contract.
        let region = unsafe { borrow(region) }?;
        if out.is_null() {
            return Err(null("out"));
        }
        // SAFETY: the first field is readable by the caller's contract.
        let given = unsafe { std::ptr::addr_of!((*out).struct_size).read_unaligned() } as usize;
        if given < 16 {
            return Err(Failure(
                ZPAGE_ERR_INVALID_ARGUMENT,
                format!(
                    "out->struct_size is {given}: set it to sizeof(zpage_stats) before the call"
                ),
            ));
        }
        let stats = ZpageStats::from_stats(&region.region.stats());
        let filled = given.min(std::mem::size_of::<ZpageStats>());
        // SAFETY: writes min(given, ours) bytes into the caller's struct,
        // which has `given` writable bytes by contract; `struct_size` tells
        // the caller how much of it we filled.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&stats as *const ZpageStats).cast::<u8>(),
                out.cast::<u8>(),
                filled,
            );
            std::ptr::addr_of_mut!((*out).struct_size).write_unaligned(filled as u64);
        }
        Ok(())
    })
}

macro_rules! range_call {
    ($(#[$doc:meta])* $name:ident => $method:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `region` must be NULL or a live handle from `zpage_region_create`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(region: *mut ZpageRegion, offset: usize, len: usize) -> c_int {
            guarded(stringify!($name), || {
                // SAFETY: forwarded contract.
                let region = unsafe { borrow(region) }?;
                region.region.$method(offset, len)?;
                Ok(())
            })
        }
    };
}

range_call!(
    /// Compresses the pages of `[offset, offset+len)` now (they are cold).
    zpage_region_advise_cold => advise_cold
);
range_call!(
    /// Restores the pages of the range ahead of use.
    zpage_region_advise_willneed => advise_willneed
);
range_call!(
    /// Makes the range present so system calls (read(2), write(2)) can use it in SIGBUS mode.
    zpage_region_prefault => prefault
);
range_call!(
    /// Keeps the range resident until `zpage_region_unpin` (at most half the budget).
    zpage_region_pin => pin
);
range_call!(
    /// Undoes one `zpage_region_pin` of the range.
    zpage_region_unpin => unpin
);

/// Destroys a region and frees its memory; NULL is accepted and ignored.
/// The region's address must not be used afterwards.
///
/// # Safety
/// `region` must be NULL or a live handle from `zpage_region_create`, not used again.
#[no_mangle]
pub unsafe extern "C" fn zpage_region_destroy(region: *mut ZpageRegion) -> c_int {
    guarded("zpage_region_destroy", || {
        if !region.is_null() {
            // SAFETY: the handle came from Box::into_raw in zpage_region_create and
            // the caller gives it up here.
            drop(unsafe { Box::from_raw(region) });
        }
        Ok(())
    })
}

/// The message of the last failed call on this thread ("" if none). The
/// string stays valid until the next failing zpage call on this thread.
#[no_mangle]
pub extern "C" fn zpage_last_error() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

/// The library's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn zpage_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last_error() -> String {
        // SAFETY: zpage_last_error returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(zpage_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn null_pointers_are_refused_with_a_message() {
        // SAFETY: the functions accept NULL by contract.
        unsafe {
            assert_eq!(
                zpage_region_create(1 << 20, 1 << 19, std::ptr::null(), std::ptr::null_mut()),
                ZPAGE_ERR_NULL_POINTER
            );
            assert!(last_error().contains("out is NULL"));
            assert_eq!(
                zpage_region_advise_cold(std::ptr::null_mut(), 0, 4096),
                ZPAGE_ERR_NULL_POINTER
            );
            assert!(zpage_region_address(std::ptr::null()).is_null());
            assert_eq!(zpage_region_size(std::ptr::null()), 0);
            assert_eq!(
                zpage_region_stats(std::ptr::null(), std::ptr::null_mut()),
                ZPAGE_ERR_NULL_POINTER
            );
            assert_eq!(
                zpage_region_create_in(std::ptr::null(), 1 << 20, std::ptr::null_mut()),
                ZPAGE_ERR_NULL_POINTER
            );
            assert_eq!(zpage_budget_destroy(std::ptr::null_mut()), ZPAGE_OK);
            assert_eq!(zpage_region_destroy(std::ptr::null_mut()), ZPAGE_OK);
            assert_eq!(
                zpage_options_init(std::ptr::null_mut()),
                ZPAGE_ERR_NULL_POINTER
            );
        }
    }

    #[test]
    fn bad_options_are_invalid_arguments() {
        let mut options = default_options();
        let mut region = std::ptr::null_mut();
        // SAFETY: valid pointers to locals.
        unsafe {
            assert_eq!(zpage_options_init(&mut options), ZPAGE_OK);
            options.aging = 7;
            assert_eq!(
                zpage_region_create(1 << 22, 1 << 20, &options, &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            assert!(
                last_error().contains("options.aging: 7 is not a ZPAGE_AGING_* value"),
                "{}",
                last_error()
            );
            options.aging = ZPAGE_AGING_FIFO;
            options.codec = c"no-such-codec".as_ptr();
            assert_eq!(
                zpage_region_create(1 << 22, 1 << 20, &options, &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            options.codec = std::ptr::null();
            options.cold_codec = c"zstd:99x".as_ptr();
            assert_eq!(
                zpage_region_create(1 << 22, 1 << 20, &options, &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            assert!(
                last_error().contains("options.cold_codec"),
                "{}",
                last_error()
            );
            options.cold_codec = std::ptr::null();
            options.cold_by_age_only = 2;
            assert_eq!(
                zpage_region_create(1 << 22, 1 << 20, &options, &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            assert!(
                last_error().contains("options.cold_by_age_only: \"2\" is not true or false"),
                "{}",
                last_error()
            );
            options.cold_by_age_only = 0;
            // A tier needs a pool cap: the list's whole-configuration check.
            options.backing = c"/nonexistent/tier".as_ptr();
            assert_eq!(
                zpage_region_create(1 << 22, 1 << 20, &options, &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            assert!(last_error().contains("max_pool_bytes"), "{}", last_error());
            // A budget above the size is refused by the region.
            assert_eq!(
                zpage_region_create(1 << 20, 1 << 22, std::ptr::null(), &mut region),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
        }
        assert!(region.is_null());
    }

    /// A cold codec set through the C options: pages evicted with no quick
    /// reuse go out with it, and read back exact; with `cold_by_age_only`
    /// they take the fast codec.
    #[test]
    fn a_cold_codec_set_from_c_compresses_cold_pages_with_it() {
        for by_age_only in [0, 1] {
            let mut options = default_options();
            let mut region = std::ptr::null_mut();
            // SAFETY: valid pointers to locals; the region is used within its
            // size and destroyed once.
            unsafe {
                assert_eq!(zpage_options_init(&mut options), ZPAGE_OK);
                options.cold_codec = c"zstd".as_ptr();
                options.cold_by_age_only = by_age_only;
                assert_eq!(
                    zpage_region_create(8 << 20, 1 << 20, &options, &mut region),
                    ZPAGE_OK,
                    "{}",
                    last_error()
                );
                let base = zpage_region_address(region) as *mut u64;
                let words = zpage_region_size(region) / 8;
                // Text-like words that zstd shrinks.
                for i in 0..words {
                    base.add(i)
                        .write_volatile((i as u64 % 64) * 0x0101_0101_0101);
                }
                assert_eq!(zpage_region_advise_cold(region, 0, 8 << 20), ZPAGE_OK);
                let mut stats = ZpageStats {
                    struct_size: std::mem::size_of::<ZpageStats>() as u64,
                    ..ZpageStats::default()
                };
                assert_eq!(zpage_region_stats(region, &mut stats), ZPAGE_OK);
                if by_age_only == 0 {
                    assert!(stats.cold_compression_count > 1000, "{stats:?}");
                } else {
                    assert_eq!(stats.cold_compression_count, 0, "{stats:?}");
                    assert!(stats.compression_count > 1000, "{stats:?}");
                }
                for i in 0..words {
                    assert_eq!(
                        base.add(i).read_volatile(),
                        (i as u64 % 64) * 0x0101_0101_0101
                    );
                }
                assert_eq!(zpage_region_destroy(region), ZPAGE_OK);
            }
        }
    }

    /// `zpage_options_init` writes the library's defaults, and a struct of
    /// the size old programs were built with (up to `cold_by_age_only`)
    /// leaves the options added since at theirs: no tier.
    #[test]
    fn defaults_come_from_the_list_and_old_structs_get_no_tier() {
        let mut options = default_options();
        // SAFETY: a valid pointer to a local.
        assert_eq!(unsafe { zpage_options_init(&mut options) }, ZPAGE_OK);
        assert_eq!(options.cold_after_ms, 1000);
        assert_eq!(options.fault_mode, ZPAGE_FAULT_SIGBUS);
        assert_eq!(options.pool, ZPAGE_POOL_SIZE_CLASS);
        assert!(options.codec.is_null() && options.backing.is_null());
        options.struct_size = 56;
        options.backing = c"/never/read".as_ptr();
        options.max_pool_bytes = 1 << 20;
        // SAFETY: the struct is ours and whole.
        let read = unsafe { read_options(&options) }.ok().flatten().unwrap();
        assert!(
            read.backing.is_null(),
            "a field past struct_size is the default"
        );
        assert_eq!(read.max_pool_bytes, 1 << 20);
    }

    /// A budget of 0 with a stall target is an automatic one: a region of
    /// its own starts at its size; a shared budget at a quarter of memory.
    /// A budget of 0 without one is refused, naming the smallest budget.
    #[test]
    fn a_zero_budget_with_a_stall_target_finds_itself() {
        let mut options = default_options();
        options.auto_budget_stall_ppm = 10_000;
        let mut region = std::ptr::null_mut();
        let mut budget = std::ptr::null_mut();
        let size = 8 << 20;
        // SAFETY: valid pointers to locals; each handle destroyed once.
        unsafe {
            assert_eq!(
                zpage_region_create(size, 0, &options, &mut region),
                ZPAGE_OK,
                "{}",
                last_error()
            );
            assert_eq!(
                (*region).region.budget().budget_bytes(),
                size,
                "a region of its own needs no more than its size"
            );
            assert_eq!(zpage_region_destroy(region), ZPAGE_OK);
            assert_eq!(zpage_budget_create(0, &options, &mut budget), ZPAGE_OK);
            let quarter = zpage_region::auto_budget_most_bytes().unwrap();
            assert_eq!((*budget).budget.budget_bytes(), quarter / 4096 * 4096);
            assert_eq!(zpage_budget_destroy(budget), ZPAGE_OK);
            options.auto_budget_stall_ppm = 0;
            let mut refused = std::ptr::null_mut();
            assert_eq!(
                zpage_region_create(size, 0, &options, &mut refused),
                ZPAGE_ERR_INVALID_ARGUMENT
            );
            assert!(refused.is_null());
        }
    }

    /// A file tier set through `zpage_options` (`backing` with a pool cap):
    /// incompressible pages beyond the cap are written to the file and read
    /// back exact.
    #[test]
    fn a_backing_set_from_c_takes_the_pages_over_the_pool_cap() {
        let dir = std::env::temp_dir().join(format!("zpage-ffi-tier-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = CString::new(dir.join("tier").into_os_string().into_encoded_bytes()).unwrap();
        let mut options = default_options();
        let mut region = std::ptr::null_mut();
        // Hash-like words: incompressible, stored raw at 4 KiB each.
        let word = |i: usize| (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555;
        // SAFETY: valid pointers to locals; `file` outlives the region; the
        // region is used within its size and destroyed once.
        unsafe {
            assert_eq!(zpage_options_init(&mut options), ZPAGE_OK);
            options.max_pool_bytes = 1 << 20;
            options.backing = file.as_ptr();
            // Its default, the machine's memory, is refused where the disk
            // has less room than that free.
            options.backing_max_bytes = 64 << 20;
            assert_eq!(
                zpage_region_create(16 << 20, 1 << 20, &options, &mut region),
                ZPAGE_OK,
                "{}",
                last_error()
            );
            let base = zpage_region_address(region) as *mut u64;
            let words = zpage_region_size(region) / 8;
            for i in 0..words {
                base.add(i).write_volatile(word(i));
            }
            assert_eq!(zpage_region_advise_cold(region, 0, 16 << 20), ZPAGE_OK);
            for i in 0..words {
                assert_eq!(base.add(i).read_volatile(), word(i), "word {i}");
            }
            let stats = (*region).region.stats();
            let tier = stats.store.tier.expect("the budget has a tier");
            assert!(tier.puts > 0 && tier.gets > 0, "{tier:?}");
            assert!(
                std::fs::metadata(dir.join("tier")).is_ok(),
                "the tier is the file given"
            );
            assert_eq!(zpage_region_destroy(region), ZPAGE_OK);
        }
        assert!(
            std::fs::metadata(dir.join("tier")).is_err(),
            "the file is removed with the budget"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_region_round_trips_data_through_compression() {
        // Fail rather than hang CI if a fault path ever livelocks.
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(60));
            if !flag.load(std::sync::atomic::Ordering::Relaxed) {
                eprintln!("region round trip still running after 60 s: aborting");
                std::process::abort();
            }
        });
        let mut region = std::ptr::null_mut();
        // SAFETY: valid out pointer; the region is used within its size and destroyed once.
        unsafe {
            assert_eq!(
                zpage_region_create(8 << 20, 1 << 20, std::ptr::null(), &mut region),
                ZPAGE_OK,
                "{}",
                last_error()
            );
            let base = zpage_region_address(region) as *mut u64;
            let words = zpage_region_size(region) / 8;
            for i in (0..words).step_by(512) {
                base.add(i).write_volatile(i as u64 % 8);
            }
            assert_eq!(
                zpage_region_advise_cold(region, 0, 4 << 20),
                ZPAGE_OK,
                "{}",
                last_error()
            );
            for i in (0..words).step_by(512) {
                assert_eq!(base.add(i).read_volatile(), i as u64 % 8);
            }
            let mut stats = ZpageStats {
                struct_size: std::mem::size_of::<ZpageStats>() as u64,
                ..ZpageStats::default()
            };
            assert_eq!(zpage_region_stats(region, &mut stats), ZPAGE_OK);
            assert_eq!(stats.size_bytes, 8 << 20);
            assert!(
                stats.fault_count > 0 && stats.compression_count > 0,
                "{stats:?}"
            );
            assert!(stats.resident_bytes <= stats.budget_bytes + stats.budget_bytes / 20);
            assert_eq!(zpage_region_pin(region, 0, 4096), ZPAGE_OK);
            assert_eq!(zpage_region_unpin(region, 0, 4096), ZPAGE_OK);
            assert_eq!(
                zpage_region_prefault(region, 8 << 20, 4096),
                ZPAGE_ERR_OUT_OF_RANGE
            );
            assert_eq!(zpage_region_destroy(region), ZPAGE_OK);
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
