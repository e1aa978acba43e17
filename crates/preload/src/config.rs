//! The library's configuration, from the environment `zpage run` sets.

use zpage_codec::CodecSpec;

pub use crate::env_names::{BUDGET_ENV, CODEC_ENV, COLD_CODEC_ENV, MIN_MAPPING_ENV, SYSCALLS_ENV};

/// How system calls on region memory are served (see [`SYSCALLS_ENV`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syscalls {
    Trap,
    Wrappers,
}

/// Default of [`MIN_MAPPING_ENV`]: large buffers (big lists, dicts, byte
/// strings, runtime heaps) go into regions. Smaller ones stay out: a program
/// hands pointers into small objects (path names, `pollfd` arrays, `argv`)
/// to dozens of system calls the library does not wrap, and each of those
/// fails with `EFAULT` on an evicted page. Measured with CPython, whose 1 MiB
/// arenas hold its small objects: with them in regions, `test_gc` failed
/// with `EFAULT` from `execve` (argument strings) and `poll` (its `pollfd`
/// array). `poll` is wrapped now (module `exec`); `execve` cannot be (it
/// runs in a `vfork()` child that has closed the userfaultfd), nor are paths
/// handed to `open`/`stat` and the like: the default stays above the arenas. Each region also costs a table
/// slot (`MAX_REGIONS`) and a userfaultfd registration.
pub const DEFAULT_MIN_MAPPING_BYTES: usize = 2 << 20;

/// Smallest budget the region layer accepts (64 pages).
pub const MIN_BUDGET_BYTES: usize = 64 * zpage_codec::PAGE_SIZE;

#[derive(Clone, Debug)]
pub struct Config {
    pub budget_bytes: usize,
    pub codec: CodecSpec,
    pub codec_name: String,
    pub cold_codec: Option<CodecSpec>,
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
    if budget_bytes < MIN_BUDGET_BYTES {
        return Err(format!(
            "{BUDGET_ENV}={budget_bytes} is below the smallest budget, {MIN_BUDGET_BYTES} bytes (256 KiB): raise it"
        ));
    }
    let codec_name = get(CODEC_ENV).unwrap_or_else(|| "lz4".into());
    let codec: CodecSpec = codec_name.parse().map_err(|e| {
        format!("{CODEC_ENV}={codec_name:?}: {e}; use lz4, lz4:ACCELERATION, zstd or zstd:LEVEL")
    })?;
    if codec.family() == zpage_codec::CodecFamily::ZstdDict {
        return Err(format!(
            "{CODEC_ENV}={codec_name:?}: zstd-dict needs a trained dictionary, which zpage run has no way to pass; use zstd"
        ));
    }
    let cold_codec = match get(COLD_CODEC_ENV) {
        None => None,
        Some(name) => {
            let spec: CodecSpec = name.parse().map_err(|e| {
                format!("{COLD_CODEC_ENV}={name:?}: {e}; use zstd, zstd:LEVEL or zstd-dict")
            })?;
            if let Some(problem) = zpage_region::cold_codec_problem(&codec, &spec) {
                return Err(format!("{COLD_CODEC_ENV}={name:?}: {problem}"));
            }
            Some(spec)
        }
    };
    let codec_name = match &cold_codec {
        Some(cold) => format!("{codec_name}, cold pages {cold}"),
        None => codec_name,
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
        codec,
        codec_name,
        cold_codec,
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
    fn unset_means_off_and_bad_values_name_the_variable() {
        assert!(from_env(env(&[])).unwrap().is_none());
        let c = from_env(env(&[(BUDGET_ENV, "1048576")])).unwrap().unwrap();
        assert_eq!(c.budget_bytes, 1 << 20);
        assert_eq!(c.min_mapping_bytes, DEFAULT_MIN_MAPPING_BYTES);
        let e = from_env(env(&[(BUDGET_ENV, "12M")])).unwrap_err();
        assert!(e.contains(BUDGET_ENV) && e.contains("plain integer"), "{e}");
        let e = from_env(env(&[(BUDGET_ENV, "4096")])).unwrap_err();
        assert!(e.contains("raise it"), "{e}");
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), (CODEC_ENV, "gzip")])).unwrap_err();
        assert!(e.contains(CODEC_ENV), "{e}");
        let e = from_env(env(&[(BUDGET_ENV, "1048576"), (COLD_CODEC_ENV, "lz4")])).unwrap_err();
        assert!(
            e.contains(COLD_CODEC_ENV) && e.contains("not stronger"),
            "{e}"
        );
        let c = from_env(env(&[
            (BUDGET_ENV, "1048576"),
            (COLD_CODEC_ENV, "zstd-dict"),
        ]))
        .unwrap()
        .unwrap();
        assert!(
            c.cold_codec.is_some() && c.codec_name.contains("zstd-dict"),
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
