use crate::{CodecError, PAGE_SIZE};
use std::fmt;
use std::str::FromStr;

/// The size at or above which a compressed page is not worth keeping compressed.
///
/// The default, 3632 bytes, is zsmalloc's huge-class boundary at chain size 8,
/// the cut-off zram uses (`huge_class_size`). Zircon's policy of 70% of a page
/// is [`RejectThreshold::ZIRCON`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejectThreshold {
    bytes: usize,
}

impl RejectThreshold {
    /// zram/zsmalloc's huge-class size with 8-page zspage chains.
    pub const ZSMALLOC_HUGE_CLASS: RejectThreshold = RejectThreshold { bytes: 3632 };
    /// Zircon's default `kernel.compression.threshold` of 70%: pages must compress to at most 2867 bytes.
    pub const ZIRCON: RejectThreshold = RejectThreshold { bytes: 2868 };

    /// A threshold in bytes; pages compressing to `bytes` or more are incompressible.
    pub fn from_bytes(bytes: usize) -> Result<Self, CodecError> {
        if !(64..=PAGE_SIZE).contains(&bytes) {
            return Err(CodecError::InvalidThreshold(format!("{bytes} bytes")));
        }
        Ok(Self { bytes })
    }

    /// A threshold as a percentage of the page, Zircon style: a page is kept
    /// when its blob is at most `percent`% of 4096 bytes.
    pub fn from_percent(percent: u32) -> Result<Self, CodecError> {
        if !(2..=100).contains(&percent) {
            return Err(CodecError::InvalidThreshold(format!("{percent}%")));
        }
        let largest_kept = PAGE_SIZE * percent as usize / 100;
        Self::from_bytes(largest_kept + 1)
    }

    /// Blobs of this many bytes or more are rejected.
    pub fn bytes(self) -> usize {
        self.bytes
    }

    /// The largest blob that is kept.
    pub fn largest_kept_bytes(self) -> usize {
        self.bytes - 1
    }
}

impl Default for RejectThreshold {
    fn default() -> Self {
        Self::ZSMALLOC_HUGE_CLASS
    }
}

impl fmt::Display for RejectThreshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes)
    }
}

impl FromStr for RejectThreshold {
    type Err = CodecError;

    /// `3632` (bytes) or `70%`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let invalid = || CodecError::InvalidThreshold(s.to_string());
        match s.strip_suffix('%') {
            Some(percent) => Self::from_percent(percent.trim().parse().map_err(|_| invalid())?),
            None => Self::from_bytes(s.parse().map_err(|_| invalid())?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zircon_seventy_percent_keeps_2867_bytes() {
        let t: RejectThreshold = "70%".parse().unwrap();
        assert_eq!(t, RejectThreshold::ZIRCON);
        assert_eq!(t.largest_kept_bytes(), 2867);
    }

    #[test]
    fn bytes_parse_and_bounds() {
        assert_eq!("3632".parse::<RejectThreshold>().unwrap().bytes(), 3632);
        assert!("5000".parse::<RejectThreshold>().is_err());
        assert!("1%".parse::<RejectThreshold>().is_err());
        assert!("abc".parse::<RejectThreshold>().is_err());
    }
}
