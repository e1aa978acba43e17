//! The library's configuration, from the environment `zpage run` sets:
//! the process's own settings (`env_names.rs`) and the budget's options,
//! each under the variable the option list names
//! (`zpage_region::BUDGET_OPTIONS`, `ZPAGE_RUN_<NAME>`), read by the
//! list's own rules: an option added there reaches this library with no
//! code here.

use zpage_region::{BudgetConfig, BudgetOptions, Spelling, BUDGET_OPTIONS};

pub use crate::env_names::{
    BUDGET_ENV, BUDGET_ENV_C, FILE_PAGES_EVERY_ENV, MIN_MAPPING_ENV, SYSCALLS_ENV, SYSCALLS_ENV_C,
};

/// How system calls on region memory are served (see [`SYSCALLS_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscalls {
    Trap,
    Wrappers,
}

/// Default of [`MIN_MAPPING_ENV`]: every mapping, whatever its size, goes
/// into the arena (small objects too: the C library's and everyone's
/// system calls on them are served by the system-call trap).
pub const DEFAULT_MIN_MAPPING_BYTES: usize = zpage_codec::PAGE_SIZE;

#[derive(Clone, Debug)]
pub struct Config {
    pub budget_bytes: usize,
    /// The budget's configuration, checked as a whole (a backing is opened
    /// when the budget starts).
    pub budget: BudgetConfig,
    /// The codecs, as the report names them.
    pub codec_name: String,
    pub min_mapping_bytes: usize,
    pub syscalls: Syscalls,
}

fn bytes(var: &str, text: &str) -> Result<usize, String> {
    text.trim().parse::<usize>().map_err(|_| {
        format!("{var}={text:?} is not a number of bytes: give a plain integer such as 268435456 (zpage run --budget accepts 256M or 25%)")
    })
}

/// Reads the configuration; `Ok(None)` when the library is not configured
/// at all, `Err` naming the variable and the fix when a value is wrong.
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, String> {
    let Some(budget) = get(BUDGET_ENV) else {
        return Ok(None);
    };
    let budget_bytes = bytes(BUDGET_ENV, &budget)?;
    let mut options = BudgetOptions::new();
    for option in BUDGET_OPTIONS {
        if let Some(text) = get(&option.env()) {
            options
                .set(option.name, &text, Spelling::Env)
                .map_err(|e| e.to_string())?;
        }
    }
    let mut budget = options.config(budget_bytes).map_err(|e| {
        let given: Vec<String> = options
            .iter()
            .map(|(option, text)| format!("{}={text}", option.env()))
            .collect();
        format!("{BUDGET_ENV}={budget_bytes} {}: {e}", given.join(" "))
    })?;
    if let Some(text) = get(FILE_PAGES_EVERY_ENV) {
        let ms: u64 = text.trim().parse().map_err(|_| {
            format!("{FILE_PAGES_EVERY_ENV}={text:?} is not a number of milliseconds: give a plain integer such as 500, or 0 to keep file pages")
        })?;
        budget.file_pages_every = (ms > 0).then(|| std::time::Duration::from_millis(ms));
    }
    let codec_name = match &budget.cold_codec_in_effect() {
        Some(cold) => format!("{}, cold pages {cold}", budget.codec),
        None => budget.codec.to_string(),
    };
    let min_mapping_bytes = match get(MIN_MAPPING_ENV) {
        None => DEFAULT_MIN_MAPPING_BYTES,
        Some(text) => {
            let n = bytes(MIN_MAPPING_ENV, &text)?;
            if n < zpage_codec::PAGE_SIZE {
                return Err(format!(
                    "{MIN_MAPPING_ENV}={n} is below one page (4096): raise it"
                ));
            }
            n
        }
    };
    let syscalls = match get(SYSCALLS_ENV).as_deref() {
        None | Some("trap") => Syscalls::Trap,
        Some("wrappers") => Syscalls::Wrappers,
        Some(other) => {
            return Err(format!(
                "{SYSCALLS_ENV}={other:?}: use trap (every system call on compressed memory served) or wrappers (only the C library's wrapped functions)"
            ))
        }
    };
    Ok(Some(Config {
        budget_bytes,
        budget,
        codec_name,
        min_mapping_bytes,
        syscalls,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn file_pages_are_given_back_only_when_asked() {
        let c = from_env(env(&[(BUDGET_ENV, "1048576")])).unwrap().unwrap();
        assert_eq!(c.budget.file_pages_every, None);
        let c = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            (FILE_PAGES_EVERY_ENV, "250"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            c.budget.file_pages_every,
            Some(std::time::Duration::from_millis(250))
        );
        let c = from_env(env(&[(BUDGET_ENV, "1048576"), (FILE_PAGES_EVERY_ENV, "0")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.budget.file_pages_every, None);
        let e = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            (FILE_PAGES_EVERY_ENV, "1s"),
        ]))
        .unwrap_err();
        assert!(
            e.contains(FILE_PAGES_EVERY_ENV) && e.contains("milliseconds"),
            "{e}"
        );
    }

    #[test]
    fn unset_means_off_and_bad_values_name_the_variable() {
        assert!(from_env(env(&[])).unwrap().is_none());
        let c = from_env(env(&[(BUDGET_ENV, "1048576")])).unwrap().unwrap();
        assert_eq!(c.budget_bytes, 1 << 20);
        assert_eq!(c.min_mapping_bytes, DEFAULT_MIN_MAPPING_BYTES);
        let e = from_env(env(&[(BUDGET_ENV, "12M")])).unwrap_err();
        assert!(e.contains(BUDGET_ENV) && e.contains("plain integer"), "{e}");
        let e = from_env(env(&[(BUDGET_ENV, "4096")])).unwrap_err();
        assert!(e.contains("raise it"), "{e}");
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), ("ZPAGE_RUN_CODEC", "gzip")])).unwrap_err();
        assert!(e.starts_with("ZPAGE_RUN_CODEC: "), "{e}");
        let e = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            ("ZPAGE_RUN_CODEC", "zstd-dict"),
        ]))
        .unwrap_err();
        assert!(
            e.contains("ZPAGE_RUN_CODEC=zstd-dict") && e.contains("dictionary"),
            "{e}"
        );
        let e = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            ("ZPAGE_RUN_COLD_CODEC", "lz4"),
        ]))
        .unwrap_err();
        assert!(
            e.contains("ZPAGE_RUN_COLD_CODEC=lz4") && e.contains("not stronger"),
            "{e}"
        );
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), ("ZPAGE_RUN_BACKING", "/x")])).unwrap_err();
        assert!(e.contains("max_pool_bytes (--pool-max)"), "{e}");
        let c = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            ("ZPAGE_RUN_MAX_POOL_BYTES", "1048576"),
            ("ZPAGE_RUN_BACKING", "/var/tmp/zpage.tier"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.budget.max_pool_bytes, Some(1 << 20));
        assert_eq!(c.budget.backing.as_deref(), Some("/var/tmp/zpage.tier"));
        let c = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            ("ZPAGE_RUN_COLD_CODEC", "zstd-dict"),
        ]))
        .unwrap()
        .unwrap();
        assert!(
            c.budget.cold_codec.is_some() && c.codec_name.contains("zstd-dict"),
            "{c:?}"
        );
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), (MIN_MAPPING_ENV, "10")])).unwrap_err();
        assert!(e.contains(MIN_MAPPING_ENV), "{e}");
        assert_eq!(c.syscalls, Syscalls::Trap);
        let c = from_env(env(&[(BUDGET_ENV, "1048576"), (SYSCALLS_ENV, "wrappers")]))
            .unwrap()
            .unwrap();
        assert_eq!(c.syscalls, Syscalls::Wrappers);
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), (SYSCALLS_ENV, "none")])).unwrap_err();
        assert!(e.contains(SYSCALLS_ENV) && e.contains("wrappers"), "{e}");
    }
}
