//! `zpage_options`, the C struct of a budget's options, made from the one
//! option list (`zpage_region::budget_options!`): one field per option, in
//! the list's order, after the struct's own size. Its header block is
//! generated from the same list (`tests/header.rs`).
//!
//! A field's C type follows its option's value type ([`CField`]): sizes are
//! `uint64_t` (0: unset), counts `uint32_t`, switches `int` (0 or 1), fixed
//! sets `int` (the `ZPAGE_FAULT_*`, `ZPAGE_AGING_*`, `ZPAGE_POOL_*`
//! constants, numbered by their place in `OptionEnum::ALL`), codecs, paths
//! and URLs `const char *` (NULL: the default). Each field is written out as
//! text and read by the list's rules, so a bad value gets the words `zpage
//! run` uses, naming `options.FIELD`.

use crate::{Failure, ZPAGE_ERR_INVALID_ARGUMENT, ZPAGE_ERR_SYSTEM};
use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use zpage_codec::CodecSpec;
use zpage_pool::PoolKind;
use zpage_region::{
    AgingPolicy, BudgetConfig, BudgetOptions, FaultMode, OptionEnum, OptionValue, Spelling,
};

/// An option's value type as a C field.
pub trait CField: OptionValue {
    /// The field's Rust type (its C layout).
    type C: Copy;
    /// Its C declaration's type.
    const C_TYPE: &'static str;
    /// What the header says about the field's value, before the option's help.
    const C_NOTE: &'static str;
    /// The field's text for the option list (`None`: not given, the
    /// default), or what is wrong with it.
    ///
    /// # Safety
    /// A pointer field must be NULL or a NUL-terminated string.
    unsafe fn text(field: Self::C) -> Result<Option<String>, String>;
    /// The field `zpage_options_init` writes for the default `value` (what
    /// the option's `get` says a default configuration holds).
    fn initial(value: Option<Self>) -> Self::C;
}

/// Sizes: 0 is unset (no size option means 0 bytes).
impl CField for u64 {
    type C = u64;
    const C_TYPE: &'static str = "uint64_t";
    const C_NOTE: &'static str = "Bytes; 0: unset.";
    unsafe fn text(field: u64) -> Result<Option<String>, String> {
        Ok((field != 0).then(|| field.to_string()))
    }
    fn initial(value: Option<u64>) -> u64 {
        value.unwrap_or(0)
    }
}

/// Counts: always given (`zpage_options_init` writes the default).
impl CField for u32 {
    type C = u32;
    const C_TYPE: &'static str = "uint32_t";
    const C_NOTE: &'static str = "zpage_options_init writes the default.";
    unsafe fn text(field: u32) -> Result<Option<String>, String> {
        Ok(Some(field.to_string()))
    }
    fn initial(value: Option<u32>) -> u32 {
        value.unwrap_or(0)
    }
}

/// Switches: 0 or 1, always given; another number is refused by the list.
impl CField for bool {
    type C = c_int;
    const C_TYPE: &'static str = "int";
    const C_NOTE: &'static str = "1 or 0.";
    unsafe fn text(field: c_int) -> Result<Option<String>, String> {
        Ok(Some(field.to_string()))
    }
    fn initial(value: Option<bool>) -> c_int {
        c_int::from(value.unwrap_or(false))
    }
}

/// A C string's text (`None` for NULL).
///
/// # Safety
/// `field` must be NULL or a NUL-terminated string.
unsafe fn c_text(field: *const c_char) -> Result<Option<String>, String> {
    if field.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and NUL-terminated by the caller's contract.
    let text = unsafe { CStr::from_ptr(field) };
    text.to_str()
        .map(|text| Some(text.to_string()))
        .map_err(|_| "is not UTF-8".to_string())
}

macro_rules! string_fields {
    ($($ty:ty),*) => {$(
        /// Strings: NULL is the default (a C program cannot be handed a
        /// pointer to the library's own default text).
        impl CField for $ty {
            type C = *const c_char;
            const C_TYPE: &'static str = "const char *";
            const C_NOTE: &'static str = "NULL: the default.";
            unsafe fn text(field: *const c_char) -> Result<Option<String>, String> {
                // SAFETY: forwarded contract.
                unsafe { c_text(field) }
            }
            fn initial(_: Option<$ty>) -> *const c_char {
                std::ptr::null()
            }
        }
    )*};
}

string_fields!(CodecSpec, String, PathBuf);

macro_rules! enum_fields {
    ($($ty:ty => $constants:literal),*) => {$(
        /// A fixed set: `int`, numbered by the place in `OptionEnum::ALL`.
        impl CField for $ty {
            type C = c_int;
            const C_TYPE: &'static str = "int";
            const C_NOTE: &'static str = concat!($constants, ".");
            unsafe fn text(field: c_int) -> Result<Option<String>, String> {
                usize::try_from(field)
                    .ok()
                    .and_then(|i| <$ty as OptionEnum>::ALL.get(i))
                    .map(|value| Some(value.show_option()))
                    .ok_or_else(|| format!("{field} is not a {} value", $constants))
            }
            fn initial(value: Option<$ty>) -> c_int {
                let all = <$ty as OptionEnum>::ALL;
                value
                    .and_then(|value| all.iter().position(|v| *v == value))
                    .and_then(|i| c_int::try_from(i).ok())
                    .unwrap_or(0)
            }
        }
    )*};
}

enum_fields!(
    FaultMode => "ZPAGE_FAULT_*",
    AgingPolicy => "ZPAGE_AGING_*",
    PoolKind => "ZPAGE_POOL_*"
);

/// One field of `zpage_options` as the header declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionField {
    /// The field's (and the option's) name.
    pub name: &'static str,
    /// Its C type.
    pub c_type: &'static str,
    /// Its byte offset in the struct.
    pub offset: usize,
    /// Its size in bytes.
    pub size: usize,
    /// The C note on its value, then the option's help.
    pub help: String,
}

macro_rules! define_zpage_options {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident $((flag $flag:literal))? : $ty:ty,
            get |$gc:ident| $get:expr, set |$sc:ident, $sv:ident| $set:expr;
    )*) => {
        /// Options of `zpage_region_create` and `zpage_budget_create` (C:
        /// `zpage_options`): one field per budget option of the list. It
        /// starts with its own size, so the struct can grow: a program
        /// compiled against an older, shorter struct passes its size, and the
        /// fields past it take their defaults. Fill it with
        /// `zpage_options_init`.
        #[repr(C)]
        #[derive(Debug, Clone, Copy)]
        pub struct ZpageOptions {
            /// `sizeof(zpage_options)` as the caller knows it (set by `zpage_options_init`).
            pub struct_size: u32,
            $( $(#[doc = $doc])* pub $name: <$ty as CField>::C, )*
        }

        /// The fields after `struct_size`, as the header declares them.
        pub fn zpage_options_fields() -> Vec<OptionField> {
            vec![$(
                OptionField {
                    name: stringify!($name),
                    c_type: <$ty as CField>::C_TYPE,
                    offset: std::mem::offset_of!(ZpageOptions, $name),
                    size: std::mem::size_of::<<$ty as CField>::C>(),
                    help: [<$ty as CField>::C_NOTE, $($doc),*].join(" "),
                },
            )*]
        }

        /// The options as `zpage_options_init` writes them: the defaults
        /// of a configuration, as the list's `get` reads them.
        pub(crate) fn default_options() -> ZpageOptions {
            let defaults = BudgetConfig::new(0);
            ZpageOptions {
                struct_size: std::mem::size_of::<ZpageOptions>() as u32,
                $( $name: {
                    let $gc = &defaults;
                    let value: Option<$ty> = $get;
                    <$ty as CField>::initial(value)
                }, )*
            }
        }

        impl ZpageOptions {
            /// The options given, each read by the list's rules; errors
            /// name the field (`options.codec: ...`).
            ///
            /// # Safety
            /// Every pointer field is NULL or a NUL-terminated string.
            pub(crate) unsafe fn budget_options(&self) -> Result<BudgetOptions, Failure> {
                let mut options = BudgetOptions::new();
                let invalid = |e: String| Failure(ZPAGE_ERR_INVALID_ARGUMENT, e);
                $(
                    // SAFETY: the pointer fields' contract is this function's.
                    let text = unsafe { <$ty as CField>::text(self.$name) }
                        .map_err(|problem| invalid(format!("options.{}: {problem}", stringify!($name))))?;
                    if let Some(text) = text {
                        options
                            .set(stringify!($name), &text, Spelling::CField)
                            .map_err(|e| invalid(e.to_string()))?;
                    }
                )*
                Ok(options)
            }
        }
    };
}

zpage_region::budget_options!(define_zpage_options);

// The layout of the fields old programs were compiled with: they pass a
// shorter struct and rely on these offsets, so new options go at the end
// of the list. (`dedup` took the place of an `int reserved`, which had to
// be 0: old programs pass dedup off.)
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(ZpageOptions, struct_size) == 0);
    assert!(offset_of!(ZpageOptions, fault_mode) == 4);
    assert!(offset_of!(ZpageOptions, codec) == 8);
    assert!(offset_of!(ZpageOptions, aging) == 16);
    assert!(offset_of!(ZpageOptions, pool) == 20);
    assert!(offset_of!(ZpageOptions, max_pool_bytes) == 24);
    assert!(offset_of!(ZpageOptions, keep_clean_copies) == 32);
    assert!(offset_of!(ZpageOptions, dedup) == 36);
    assert!(offset_of!(ZpageOptions, cold_codec) == 40);
    assert!(offset_of!(ZpageOptions, cold_after_ms) == 48);
    assert!(offset_of!(ZpageOptions, cold_by_age_only) == 52);
    assert!(size_of::<ZpageOptions>() >= 56);
};

/// The configuration of a budget of `budget` bytes with `options` (`None`:
/// every default); a budget of 0 with `auto_budget_stall_ppm` set is an
/// automatic one.
///
/// # Safety
/// As [`ZpageOptions::budget_options`].
pub(crate) unsafe fn budget_config_from(
    budget: usize,
    options: Option<&ZpageOptions>,
) -> Result<BudgetConfig, Failure> {
    let given = match options {
        // SAFETY: forwarded contract.
        Some(options) => unsafe { options.budget_options() }?,
        None => BudgetOptions::new(),
    };
    // A budget of 0 with a stall target: a budget that finds itself, at
    // most what `zpage run --budget auto` allows.
    let auto = given
        .text(zpage_region::AUTO_BUDGET_OPTION)
        .and_then(|t| t.parse::<u32>().ok())
        .is_some_and(|ppm| ppm > 0);
    let budget = if budget == 0 && auto {
        zpage_region::auto_budget_most_bytes().map_err(|e| Failure(ZPAGE_ERR_SYSTEM, e))?
    } else {
        budget
    };
    Ok(given.config(budget)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    /// C numbers a fixed set's values by their place in `OptionEnum::ALL`:
    /// the header's constants must say the same.
    #[test]
    fn the_c_constants_number_values_as_the_list_does() {
        let at = |i: c_int| usize::try_from(i).unwrap();
        assert_eq!(FaultMode::ALL[at(ZPAGE_FAULT_SIGBUS)], FaultMode::Sigbus);
        assert_eq!(
            FaultMode::ALL[at(ZPAGE_FAULT_HANDLER_THREAD)],
            FaultMode::HandlerThread
        );
        assert_eq!(
            AgingPolicy::ALL[at(ZPAGE_AGING_REFAULT)],
            AgingPolicy::Refault
        );
        assert_eq!(AgingPolicy::ALL[at(ZPAGE_AGING_FIFO)], AgingPolicy::Fifo);
        assert_eq!(
            PoolKind::ALL[at(ZPAGE_POOL_SIZE_CLASS)],
            PoolKind::SizeClass
        );
        assert_eq!(PoolKind::ALL[at(ZPAGE_POOL_TRI_PAGE)], PoolKind::TriPage);
        assert_eq!(PoolKind::ALL[at(ZPAGE_POOL_TWO_SLOT)], PoolKind::TwoSlot);
        assert_eq!(
            (
                FaultMode::ALL.len(),
                AgingPolicy::ALL.len(),
                PoolKind::ALL.len()
            ),
            (2, 2, 3),
            "a new value needs its ZPAGE_* constant"
        );
    }
}
