//! The one list of a budget's options. Every front end offers them from
//! [`budget_options!`], as every view of a region's figures comes from
//! `region_stat_fields!`: the names and parsing here ([`BudgetOptions`]),
//! `zpage run`'s and `zpage bench`'s flags and the environment `zpage run`
//! hands its preload library ([`BudgetOption::env`]), the C struct
//! `zpage_options` and its header block (`crates/ffi`), and the Python
//! keyword arguments of `zpage.Budget` and `zpage.Region` and their stub
//! (`crates/python`). Adding an option is one entry in the list, plus the
//! code that uses the [`BudgetConfig`] field it sets.
//!
//! Every front end hands an option over as text (a flag's value, an
//! environment variable, a Python value written out, a C field written
//! out), and [`BudgetOptions::set`] reads it with the value type's
//! [`OptionValue`] rules: one parser per type, one message per mistake.

use crate::config::{AgingPolicy, BudgetConfig, FaultMode};
use crate::error::RegionError;
use std::fmt;
use std::str::FromStr;
use zpage_codec::CodecSpec;
use zpage_pool::PoolKind;

/// Calls `$callback!` with every budget option, in the order of the C
/// struct `zpage_options` (whose layout old programs rely on: add new
/// options at the end). Each entry:
///
/// `/// help` `name [(flag "cli-name")]: Type, get |config| Option<Type>, set |config, value| ...;`
///
/// `name` is the C field's, the Python keyword's and (upper-cased, after
/// `ZPAGE_RUN_`) the environment variable's; the command-line flag is
/// `--name` with dashes unless `flag` names another. `Type` is read and
/// written by its [`OptionValue`] rules; `get` says what a configuration
/// holds (`None`: the option is off), `set` applies a given value to a
/// [`BudgetConfig`].
#[macro_export]
macro_rules! budget_options {
    ($callback:ident) => {
        $callback! {
            /// How faults on evicted pages are resolved: sigbus (the faulting
            /// thread, no privilege) or handler_thread (a zpage thread; system
            /// calls on evicted pages work; needs privilege).
            fault_mode: $crate::FaultMode,
                get |c| Some(c.mode), set |c, v| c.mode = v;
            /// Codec of evicted pages: lz4, lz4:ACCELERATION, lz4-flex, zstd, zstd:LEVEL.
            codec: $crate::CodecSpec,
                get |c| Some(c.codec.clone()), set |c, v| c.codec = v;
            /// How pages are picked for eviction: refault (zpage's policy) or fifo.
            aging: $crate::AgingPolicy,
                get |c| Some(c.aging), set |c, v| c.aging = v;
            /// Allocator of compressed pages: zsmalloc (size classes), tri-page (Zircon) or zbud.
            pool: $crate::PoolKind,
                get |c| Some(c.pool), set |c, v| c.pool = v;
            /// Cap on the compressed pool's memory (a size; unset: unlimited). With a
            /// backing, the oldest compressed pages are written back as the pool nears
            /// it; without, pages stay resident over the budget at the cap.
            max_pool_bytes (flag "pool-max"): u64,
                get |c| c.max_pool_bytes, set |c, v| c.max_pool_bytes = Some(v);
            /// A restored page keeps its compressed copy until written (saves
            /// compression, costs pool memory).
            keep_clean_copies: bool,
                get |c| Some(c.keep_clean_copies), set |c, v| c.keep_clean_copies = v;
            /// Identical evicted pages are stored once (a content hash, checked byte for byte).
            dedup: bool,
                get |c| Some(c.dedup), set |c, v| c.dedup = v;
            /// A stronger codec for cold pages: zstd, zstd:LEVEL, zstd-dict[:LEVEL] (a
            /// dictionary trained from the budget's own pages). Evicted pages with no
            /// quick reuse go straight to it; pages compressed cold_after_ms are
            /// recompressed with it, kept when they take less memory. Unset: none,
            /// except zstd under memory_max_bytes with no backing.
            cold_codec: $crate::CodecSpec,
                get |c| c.cold_codec.clone(), set |c, v| c.cold_codec = Some(v);
            /// Milliseconds a page stays compressed before it is recompressed with the cold codec.
            cold_after_ms: u32,
                get |c| Some(u32::try_from(c.cold_after.as_millis()).unwrap_or(u32::MAX)),
                set |c, v| c.cold_after = std::time::Duration::from_millis(u64::from(v));
            /// With a cold codec: every eviction takes codec, and only recompression by
            /// age uses the cold codec (as zram's recompress).
            cold_by_age_only: bool,
                get |c| Some(!c.cold_at_eviction), set |c, v| c.cold_at_eviction = !v;
            /// Where the oldest compressed pages go when the pool nears max_pool_bytes:
            /// a new file (created mode 0600; an existing file, a link, a directory or a
            /// character device is refused) or a block device not in use (PATH), a Redis
            /// server (redis://[USER@]HOST:PORT[/DB], rediss:// for TLS) or a Redis Cluster
            /// (redis+cluster://HOST:PORT,...). Sealed with a per-process key: unreadable
            /// afterwards. A file is removed when the budget ends unless keep_backing.
            /// Needs max_pool_bytes or memory_max_bytes (under a memory max the pool may
            /// take three quarters of what the rest of the process leaves).
            backing: String,
                get |c| c.backing.clone(), set |c, v| c.backing = Some(v);
            /// Leave the backing file in place when the budget ends (its pages are
            /// sealed with a key that ends with the process: unreadable afterwards).
            keep_backing: bool,
                get |c| Some(c.backing_options.file == $crate::TierFile::Kept),
                set |c, v| c.backing_options.file = if v {
                    $crate::TierFile::Kept
                } else {
                    $crate::TierFile::RemovedWhenDropped
                };
            /// The most a backing file or device may hold (a size; unset: the
            /// machine's memory).
            backing_max_bytes: u64,
                get |c| c.backing_max_bytes, set |c, v| c.backing_max_bytes = Some(v);
            /// A file holding the Redis password (one line; refused unless private:
            /// chmod 600). Else $ZPAGE_REDIS_PASSWORD; never the password itself, which
            /// `ps` and /proc/PID/environ would show.
            backing_password_file: std::path::PathBuf,
                get |c| c.backing_options.password_file.clone(),
                set |c, v| c.backing_options.password_file = Some(v);
            /// For rediss://: the CA certificate(s) (PEM) the server's certificate is
            /// checked against, instead of the system's store.
            backing_ca_file: std::path::PathBuf,
                get |c| c.backing_options.tls.ca_file.clone(),
                set |c, v| c.backing_options.tls.ca_file = Some(v);
            /// For rediss://: a client certificate (PEM), for servers that ask for one;
            /// needs backing_key_file.
            backing_cert_file: std::path::PathBuf,
                get |c| c.backing_options.tls.cert_file.clone(),
                set |c, v| c.backing_options.tls.cert_file = Some(v);
            /// For rediss://: the client certificate's private key (PEM; refused unless
            /// private: chmod 600).
            backing_key_file: std::path::PathBuf,
                get |c| c.backing_options.tls.key_file.clone(),
                set |c, v| c.backing_options.tls.key_file = Some(v);
            /// A limit on the process's whole resident memory (a size; unset: none): its
            /// pages in compressed memory and out of it, the pool and zpage's own memory,
            /// as VmRSS and a container's limit count them. The budget shrinks to what the
            /// rest leaves (the pool grows as pages are compressed), and faults wait for
            /// eviction rather than pass the limit; with a budget too, both hold. What
            /// cannot be held (memory outside compressed memory alone over it, pages that
            /// cannot leave) is reported with how far over it went. With no backing and no
            /// cold_codec, cold pages are compressed with zstd, so that the pool fits.
            memory_max_bytes (flag "memory-max"): u64,
                get |c| c.memory_max_bytes, set |c, v| c.memory_max_bytes = Some(v);
            /// A budget that finds itself: the stall target in parts per million of wall
            /// time (10000 is 1%; 0: off). The budget shrinks from what is resident while
            /// the time the program's threads spend restoring pages and waiting for room
            /// stays under it, and grows back when it passes it; the budget given is the
            /// most it may be.
            auto_budget_stall_ppm: u32,
                get |c| c.auto_stall_ppm, set |c, v| c.auto_stall_ppm = (v != 0).then_some(v);
            /// Record the page of every fault, in order, to this new file (created 0600;
            /// an existing file or a link is refused), to replay the program's access
            /// order with `zpage bench --workload trace --trace FILE`. Run at a budget
            /// far below the program's memory, so nearly every access faults.
            fault_trace: std::path::PathBuf,
                get |c| c.fault_trace.clone(), set |c, v| c.fault_trace = Some(v);
        }
    };
}

/// A type an option's value has: how it is written as text, read back, and
/// described. Every front end goes through these, so `"on"` or `"12Q"` is
/// refused with the same words whether it came from a flag, an environment
/// variable, Python or C.
pub trait OptionValue: Sized {
    /// How a value is written, for help and error messages.
    const SYNTAX: &'static str;
    /// Reads a value (the error says what is wrong, not which option).
    fn parse_option(text: &str) -> Result<Self, String>;
    /// Writes a value so that [`OptionValue::parse_option`] reads it back.
    fn show_option(&self) -> String;
}

/// Sizes in bytes ("512M", "1G", "4096": `zpage_units`).
impl OptionValue for u64 {
    const SYNTAX: &'static str = "SIZE";
    fn parse_option(text: &str) -> Result<Self, String> {
        zpage_units::parse_size(text).map_err(|e| e.to_string())
    }
    fn show_option(&self) -> String {
        self.to_string()
    }
}

/// Counts and durations in their unit (a plain number).
impl OptionValue for u32 {
    const SYNTAX: &'static str = "N";
    fn parse_option(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a whole number from 0 to {}", u32::MAX))
    }
    fn show_option(&self) -> String {
        self.to_string()
    }
}

/// Switches: `true`/`false` (also `1`/`0`, as C and the environment write them).
impl OptionValue for bool {
    const SYNTAX: &'static str = "true|false";
    fn parse_option(text: &str) -> Result<Self, String> {
        match text.trim() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            other => Err(format!("{other:?} is not true or false (1 or 0)")),
        }
    }
    fn show_option(&self) -> String {
        self.to_string()
    }
}

/// Paths and URLs, as given.
impl OptionValue for String {
    const SYNTAX: &'static str = "PATH|URL";
    fn parse_option(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err("it is empty".into());
        }
        Ok(text.to_string())
    }
    fn show_option(&self) -> String {
        self.clone()
    }
}

/// Files (a password file, certificates), as given.
impl OptionValue for std::path::PathBuf {
    const SYNTAX: &'static str = "FILE";
    fn parse_option(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Err("it is empty: give a file".into());
        }
        Ok(text.into())
    }
    fn show_option(&self) -> String {
        self.display().to_string()
    }
}

impl OptionValue for CodecSpec {
    const SYNTAX: &'static str = "CODEC";
    fn parse_option(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|e: zpage_codec::CodecError| e.to_string())
    }
    fn show_option(&self) -> String {
        self.to_string()
    }
}

/// An option with a fixed set of values. C numbers them by their place in
/// [`OptionEnum::ALL`] (the `ZPAGE_FAULT_*`, `ZPAGE_AGING_*`,
/// `ZPAGE_POOL_*` constants, which a test checks against it).
pub trait OptionEnum: Copy + PartialEq + fmt::Display + FromStr + 'static {
    /// Every value, in the order C numbers them.
    const ALL: &'static [Self];
}

macro_rules! enum_option_value {
    ($($ty:ty),*) => {$(
        impl OptionValue for $ty {
            const SYNTAX: &'static str = stringify!($ty);
            fn parse_option(text: &str) -> Result<Self, String> {
                text.parse::<$ty>().map_err(|_| {
                    let names: Vec<String> = <$ty as OptionEnum>::ALL.iter().map(|v| v.to_string()).collect();
                    format!("{:?} is not one of {}", text.trim(), names.join(", "))
                })
            }
            fn show_option(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

enum_option_value!(FaultMode, AgingPolicy, PoolKind);

impl OptionEnum for FaultMode {
    const ALL: &'static [FaultMode] = &[FaultMode::Sigbus, FaultMode::HandlerThread];
}

impl OptionEnum for AgingPolicy {
    const ALL: &'static [AgingPolicy] = &[AgingPolicy::Refault, AgingPolicy::Fifo];
}

impl OptionEnum for PoolKind {
    const ALL: &'static [PoolKind] = &[PoolKind::SizeClass, PoolKind::TriPage, PoolKind::TwoSlot];
}

/// One option of the list, as front ends describe and name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetOption {
    /// Its name: the C field's and the Python keyword's.
    pub name: &'static str,
    /// The command-line flag as the list gives it, when it gives one
    /// (else the name); [`BudgetOption::flag`] spells it.
    pub flag_spelling: &'static str,
    /// What it does.
    pub help: &'static str,
    /// How its value is written ([`OptionValue::SYNTAX`]).
    pub syntax: &'static str,
    /// Whether it is a switch (a `bool`): a flag without a value.
    pub switch: bool,
}

impl BudgetOption {
    /// The command-line flag, without `--`: the name with dashes, unless
    /// the list names another.
    pub fn flag(&self) -> String {
        self.flag_spelling.replace('_', "-")
    }

    /// The environment variable `zpage run` sets for its preload library.
    pub fn env(&self) -> String {
        format!("ZPAGE_RUN_{}", self.name.to_ascii_uppercase())
    }

    /// The option named `name`.
    pub fn named(name: &str) -> Option<&'static BudgetOption> {
        BUDGET_OPTIONS.iter().find(|option| option.name == name)
    }

    /// Its text in `config` (`None`: off or unset there).
    pub fn text_in(&self, config: &BudgetConfig) -> Option<String> {
        option_text(self.name, config)
    }
}

/// A value a front end was given that does not fit its option.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {problem}")]
pub struct OptionError {
    /// The option, as the front end names it (`--pool-max`, `ZPAGE_RUN_CODEC`, `options.codec`).
    pub option: String,
    /// What is wrong and how to write it.
    pub problem: String,
}

/// How a front end names an option in its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// `--flag`.
    Flag,
    /// `ZPAGE_RUN_NAME`.
    Env,
    /// `name` (Python keywords).
    Keyword,
    /// `options.name` (the C struct).
    CField,
}

impl Spelling {
    /// `option` as this front end names it.
    pub fn of(self, option: &BudgetOption) -> String {
        match self {
            Spelling::Flag => format!("--{}", option.flag()),
            Spelling::Env => option.env(),
            Spelling::Keyword => option.name.to_string(),
            Spelling::CField => format!("options.{}", option.name),
        }
    }
}

macro_rules! define_options {
    ($(
        $(#[doc = $doc:literal])*
        $name:ident $((flag $flag:literal))? : $ty:ty,
            get |$gc:ident| $get:expr, set |$sc:ident, $sv:ident| $set:expr;
    )*) => {
        /// Every budget option, in the list's order.
        pub static BUDGET_OPTIONS: &[BudgetOption] = &[$(
            BudgetOption {
                name: stringify!($name),
                flag_spelling: flag_name(stringify!($name), &[$($flag)?]),
                help: concat!($($doc, "\n"),*),
                syntax: <$ty as OptionValue>::SYNTAX,
                switch: is_switch(stringify!($ty)),
            },
        )*];

        /// Reads `text` as option `name` and applies it to `config`.
        fn apply(name: &str, text: &str, config: &mut BudgetConfig) -> Result<(), String> {
            match name {
                $(stringify!($name) => {
                    let $sv = <$ty as OptionValue>::parse_option(text)?;
                    let $sc = config;
                    $set;
                    Ok(())
                })*
                other => Err(format!("{other} is not a budget option")),
            }
        }

        /// Option `name`'s text in `config`.
        fn option_text(name: &str, config: &BudgetConfig) -> Option<String> {
            match name {
                $(stringify!($name) => {
                    let $gc = config;
                    let value: Option<$ty> = $get;
                    value.map(|v| v.show_option())
                })*
                _ => None,
            }
        }
    };
}

const fn flag_name(name: &'static str, given: &[&'static str]) -> &'static str {
    match given {
        [flag] => flag,
        _ => name,
    }
}

const fn is_switch(ty: &str) -> bool {
    matches!(ty.as_bytes(), b"bool")
}

budget_options!(define_options);

/// The options a front end was given, as text, each checked when given.
/// [`BudgetOptions::config`] makes the configuration; the first option
/// given twice is refused (a front end that merges sources decides which
/// wins before it calls [`BudgetOptions::set`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetOptions {
    given: Vec<(&'static BudgetOption, String)>,
}

impl BudgetOptions {
    /// No option given: every default.
    pub fn new() -> BudgetOptions {
        BudgetOptions::default()
    }

    /// Gives option `name` the value `text`, read by its type's rules now.
    /// Errors name the option as `spelling` writes it, and the problem.
    pub fn set(&mut self, name: &str, text: &str, spelling: Spelling) -> Result<(), OptionError> {
        let Some(option) = BudgetOption::named(name) else {
            let names: Vec<&str> = BUDGET_OPTIONS.iter().map(|o| o.name).collect();
            return Err(OptionError {
                option: name.to_string(),
                problem: format!("not a budget option; the options are {}", names.join(", ")),
            });
        };
        let error = |problem: String| OptionError {
            option: spelling.of(option),
            problem,
        };
        if self.text(name).is_some() {
            return Err(error("given twice: give it once".into()));
        }
        let mut scratch = BudgetConfig::new(0);
        apply(name, text, &mut scratch).map_err(error)?;
        self.given.push((option, text.to_string()));
        Ok(())
    }

    /// The text option `name` was given, if it was.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.given
            .iter()
            .find(|(option, _)| option.name == name)
            .map(|(_, text)| text.as_str())
    }

    /// Every option given, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&'static BudgetOption, &str)> {
        self.given
            .iter()
            .map(|(option, text)| (*option, text.as_str()))
    }

    /// Whether no option was given.
    pub fn is_empty(&self) -> bool {
        self.given.is_empty()
    }

    /// A budget of `budget_bytes` with these options over
    /// [`BudgetConfig::new`]'s defaults, checked as a whole
    /// ([`BudgetConfig::check`]). Opens nothing: a backing is opened when
    /// the budget starts.
    pub fn config(&self, budget_bytes: usize) -> Result<BudgetConfig, RegionError> {
        let mut config = BudgetConfig::new(budget_bytes);
        for (option, text) in &self.given {
            apply(option.name, text, &mut config).map_err(|problem| {
                RegionError::InvalidConfig(format!("{}: {problem}", option.name))
            })?;
        }
        config.check()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_reads_back_what_it_shows() {
        let config = BudgetConfig::new(1 << 20);
        for option in BUDGET_OPTIONS {
            assert!(
                !option.help.trim().is_empty(),
                "{} has no help",
                option.name
            );
            assert!(option.env().starts_with("ZPAGE_RUN_"));
            if let Some(text) = option.text_in(&config) {
                let mut options = BudgetOptions::new();
                options.set(option.name, &text, Spelling::Keyword).unwrap();
                let again = options.config(1 << 20).unwrap();
                assert_eq!(option.text_in(&again), Some(text), "{}", option.name);
            }
        }
        let names: std::collections::HashSet<_> = BUDGET_OPTIONS.iter().map(|o| o.name).collect();
        assert_eq!(
            names.len(),
            BUDGET_OPTIONS.len(),
            "two options share a name"
        );
    }

    #[test]
    fn values_reach_the_config_and_mistakes_name_the_option() {
        let mut options = BudgetOptions::new();
        options.set("pool", "zbud", Spelling::Flag).unwrap();
        options.set("max_pool_bytes", "2M", Spelling::Flag).unwrap();
        options
            .set("fault_mode", "handler-thread", Spelling::Flag)
            .unwrap();
        options.set("cold_codec", "zstd:3", Spelling::Flag).unwrap();
        options
            .set("cold_by_age_only", "true", Spelling::Flag)
            .unwrap();
        options.set("dedup", "1", Spelling::Flag).unwrap();
        let config = options.config(1 << 20).unwrap();
        assert_eq!(config.pool, PoolKind::TwoSlot);
        assert_eq!(config.max_pool_bytes, Some(2 << 20));
        assert_eq!(config.mode, FaultMode::HandlerThread);
        assert!(!config.cold_at_eviction && config.dedup);

        let flag = |name: &str| BudgetOption::named(name).unwrap().flag();
        assert_eq!(flag("cold_codec"), "cold-codec");
        assert_eq!(flag("max_pool_bytes"), "pool-max");
        let e = options.set("pool", "zsmalloc", Spelling::Flag).unwrap_err();
        assert!(e.to_string().contains("--pool: given twice"), "{e}");
        let e = BudgetOptions::new()
            .set("max_pool_bytes", "12Q", Spelling::Flag)
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--pool-max: \"12Q\" is not a size"),
            "{e}"
        );
        let e = BudgetOptions::new()
            .set("aging", "lru", Spelling::Env)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ZPAGE_RUN_AGING: \"lru\" is not one of refault, fifo"
        );
        let e = BudgetOptions::new()
            .set("dedup", "on", Spelling::CField)
            .unwrap_err();
        assert!(e.to_string().starts_with("options.dedup: \"on\""), "{e}");
        let e = BudgetOptions::new()
            .set("compression", "lz4", Spelling::Keyword)
            .unwrap_err();
        assert!(
            e.to_string().contains("the options are fault_mode, codec"),
            "{e}"
        );
    }

    #[test]
    fn option_enums_list_every_value_and_read_their_names() {
        assert_eq!(PoolKind::ALL, PoolKind::all());
        for mode in FaultMode::ALL {
            assert_eq!(mode.to_string().parse::<FaultMode>().unwrap(), *mode);
        }
        for policy in AgingPolicy::ALL {
            assert_eq!(policy.to_string().parse::<AgingPolicy>().unwrap(), *policy);
        }
        assert_eq!(
            "handler-thread".parse::<FaultMode>().unwrap(),
            FaultMode::HandlerThread
        );
    }
}
