//! Sizes as people write them and byte counts as people read them, with one
//! rule for every front end (`zpage` flags, `zpage run`'s environment, the
//! Python package, the kernel config file).
//!
//! A size is a number with an optional binary unit: `4096`, `512M`,
//! `64MiB`, `1.5G`, `16kb` (K, M, G, T, P, E are powers of 1024 with or
//! without `B`/`iB`, in any case; `KB` is 1024 too, as `free -h` and the
//! kernel's sysfs mean it). Parsed by the `parse-size` crate in its binary
//! mode, whose rules are these.
//!
//! Where a size may be a share of the machine's memory, it may also be a
//! percentage: a number in (0, [`MAX_PERCENT`]] followed by `%`. The same
//! bound everywhere, that of the kernel config, whose zram and zswap sizes
//! are *uncompressed* capacity: at 2-4:1 compression a zram device of
//! 200-400% of RAM is an ordinary choice (zram-generator's own examples
//! use `ram * 2`). A budget above the machine's memory is then simply one
//! that never compresses: allowed, not an error of notation.
//!
//! Byte counts are shown in binary units with one decimal (`1.5 GiB`,
//! `512.0 KiB`, `100 B`), by the `bytesize` crate.
#![forbid(unsafe_code)]

/// The largest percentage of the machine's memory a size may be.
pub const MAX_PERCENT: f64 = 400.0;

/// What is wrong with a size, and how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number with a unit.
    #[error("{0:?} is not a size: give bytes (4096) or a number with a unit (512M, 2G, 64MiB)")]
    NotASize(String),
    /// A percentage out of range, or not a number.
    #[error("{0:?} is not a percentage of the machine's memory: give a number in (0, 400] followed by %, e.g. 25%")]
    BadPercent(String),
    /// A percentage where the memory size could not be read.
    #[error("{text:?} is a share of the machine's memory, which could not be read ({why}): give a size such as 512M instead")]
    NoWhole {
        /// The text given.
        text: String,
        /// Why the memory size is unknown.
        why: String,
    },
}

/// Parses a size: bytes, or a number with a binary unit (see the crate
/// documentation). Fractions of a byte round to the nearest byte.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    const BINARY: parse_size::Config = parse_size::Config::new().with_binary();
    BINARY
        .parse_size(text.trim())
        .map_err(|_| SizeError::NotASize(text.to_string()))
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`): what a
/// percentage is of.
pub fn machine_memory_bytes() -> Result<u64, String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("reading /proc/meminfo: {e}"))?;
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| "/proc/meminfo has no MemTotal line in kB".to_string())
}

/// Whether `text` is written as a percentage.
pub fn is_percent(text: &str) -> bool {
    text.trim().ends_with('%')
}

/// Parses a size as [`parse_size`] does, or a percentage of the machine's
/// memory; `memory` is asked for that size only when `text` is a
/// percentage (so callers read `/proc/meminfo` only then).
pub fn parse_size_or_percent(
    text: &str,
    memory: impl FnOnce() -> Result<u64, String>,
) -> Result<u64, SizeError> {
    let Some(number) = text.trim().strip_suffix('%') else {
        return parse_size(text);
    };
    let percent: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| p.is_finite() && *p > 0.0 && *p <= MAX_PERCENT)
        .ok_or_else(|| SizeError::BadPercent(text.to_string()))?;
    let whole = memory().map_err(|why| SizeError::NoWhole {
        text: text.to_string(),
        why,
    })?;
    Ok((whole as f64 * percent / 100.0) as u64)
}

/// A byte count for people: binary units, one decimal (`1.5 GiB`,
/// `64.0 MiB`, `100 B`).
pub fn format_bytes(bytes: u64) -> String {
    bytesize::ByteSize::b(bytes).display().iec().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units_in_any_spelling() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 512M ").unwrap(), 512 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("64 MB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("16kb").unwrap(), 16 << 10);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        for bad in ["lots", "3X", "", "-1M", "25%"] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.contains("512M"), "{bad}: {e}");
        }
    }

    #[test]
    fn percentages_are_of_memory_up_to_four_hundred() {
        let gib = || Ok(1u64 << 30);
        assert_eq!(parse_size_or_percent("25%", gib).unwrap(), 256 << 20);
        assert_eq!(parse_size_or_percent(" 12.5 %", gib).unwrap(), 128 << 20);
        assert_eq!(parse_size_or_percent("150%", gib).unwrap(), 3 << 29);
        assert_eq!(parse_size_or_percent("400%", gib).unwrap(), 4 << 30);
        assert_eq!(parse_size_or_percent("64M", gib).unwrap(), 64 << 20);
        for bad in ["0%", "400.5%", "x%", "%", "-5%", "nan%", "inf%"] {
            let e = parse_size_or_percent(bad, gib).unwrap_err().to_string();
            assert!(e.contains("(0, 400]"), "{bad}: {e}");
        }
        // Memory is read only for a percentage.
        let never = || -> Result<u64, String> { panic!("read memory for a plain size") };
        assert_eq!(parse_size_or_percent("1M", never).unwrap(), 1 << 20);
        let e = parse_size_or_percent("10%", || Err("no /proc".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no /proc") && e.contains("512M"), "{e}");
    }

    #[test]
    fn the_machine_has_memory() {
        let bytes = machine_memory_bytes().unwrap();
        assert!(bytes >= 64 << 20 && bytes.is_multiple_of(1024), "{bytes}");
    }

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(format_bytes(100), "100 B");
        assert_eq!(format_bytes(64 << 20), "64.0 MiB");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(512 << 10), "512.0 KiB");
    }
}
