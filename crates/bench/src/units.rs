//! Byte sizes on the command line: "2G", "512M", "64MiB", "4096", and
//! budgets that may be a share of the machine's memory ("25%").

use crate::BenchError;

/// Parses a size with an optional binary suffix (K, M, G, T; "iB"/"B" allowed).
pub fn parse_size(text: &str) -> Result<u64, BenchError> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(digits_end);
    let number: f64 = number.parse().map_err(|_| {
        BenchError::Invalid(format!("{text:?} is not a size (e.g. 2G, 512M, 4096)"))
    })?;
    let shift = match suffix
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches("ib")
        .trim_end_matches('b')
    {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        other => {
            return Err(BenchError::Invalid(format!(
                "unknown size suffix {other:?} in {text:?}"
            )))
        }
    };
    Ok((number * (1u64 << shift) as f64) as u64)
}

/// Parses a size as [`parse_size`] does, or a percentage of `whole` (a
/// number in (0, 100] followed by `%`, such as "25%" or "12.5%"): the
/// budgets of `zpage run` and of the Python package, where `whole` is the
/// machine's memory.
pub fn parse_size_or_percent(text: &str, whole: u64) -> Result<u64, BenchError> {
    let Some(percent) = text.trim().strip_suffix('%') else {
        return parse_size(text);
    };
    let percent: f64 = percent
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
        .ok_or_else(|| {
            BenchError::Invalid(format!(
                "{text:?} is not a percentage: give a number in (0, 100] followed by %, e.g. 25%"
            ))
        })?;
    Ok((whole as f64 * percent / 100.0) as u64)
}

/// Formats bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_size("16kb").unwrap(), 16 << 10);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_size_or_percent("25%", 1 << 30).unwrap(), 256 << 20);
        assert_eq!(
            parse_size_or_percent(" 12.5 %", 1 << 30).unwrap(),
            128 << 20
        );
        assert_eq!(parse_size_or_percent("64M", 1 << 30).unwrap(), 64 << 20);
        for bad in ["0%", "150%", "x%", "%"] {
            let e = parse_size_or_percent(bad, 1 << 30).unwrap_err().to_string();
            assert!(e.contains("(0, 100]"), "{bad}: {e}");
        }
    }
}
