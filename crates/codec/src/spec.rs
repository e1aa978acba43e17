use crate::{CodecError, Page, PAGE_SIZE};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

const KNOWN_CODECS: &str =
    "lz4, lz4:ACCELERATION, lz4-flex, zstd, zstd:LEVEL, zstd-dict, zstd-dict:LEVEL";

/// The compressor families zpage ships.
///
/// LZO-RLE, the kernel's default, is absent on purpose: no crate offers a
/// bounded, allocation-free LZO compressor (see the README's codec section).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodecFamily {
    /// liblz4's block format, fast mode (the kernel's and Zircon's LZ4); level is the acceleration.
    Lz4,
    /// The same LZ4 block format from the pure-Rust `lz4_flex` crate (safe encoder and decoder).
    Lz4Flex,
    /// zstd, magicless frames without checksum; level from negative (fast) to 22.
    Zstd,
    /// zstd with a dictionary trained from sample pages.
    ZstdDict,
}

impl CodecFamily {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CodecFamily::Lz4 => "lz4",
            CodecFamily::Lz4Flex => "lz4-flex",
            CodecFamily::Zstd => "zstd",
            CodecFamily::ZstdDict => "zstd-dict",
        }
    }

    fn default_level(self) -> i32 {
        match self {
            CodecFamily::Lz4 | CodecFamily::Lz4Flex => 1,
            CodecFamily::Zstd | CodecFamily::ZstdDict => 3,
        }
    }

    fn level_range(self) -> (i32, i32) {
        match self {
            // liblz4 clamps larger accelerations; 65537 is LZ4_ACCELERATION_MAX.
            CodecFamily::Lz4 => (1, 65_537),
            CodecFamily::Lz4Flex => (1, 1),
            CodecFamily::Zstd | CodecFamily::ZstdDict => (
                zstd::zstd_safe::min_c_level(),
                zstd::zstd_safe::max_c_level(),
            ),
        }
    }
}

/// A zstd dictionary trained from sample pages; pages compressed with it need it to decompress.
#[derive(Clone, PartialEq, Eq)]
pub struct Dictionary {
    id: u32,
    bytes: Arc<[u8]>,
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dictionary")
            .field("id", &self.id)
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl Dictionary {
    /// Trains a dictionary of at most `max_bytes` from sample pages (zstd's `ZDICT_trainFromBuffer`).
    pub fn train<'a>(
        samples: impl IntoIterator<Item = &'a Page>,
        max_bytes: usize,
    ) -> Result<Self, CodecError> {
        let samples: Vec<&Page> = samples.into_iter().collect();
        let mut joined = Vec::with_capacity(samples.len() * PAGE_SIZE);
        for page in samples {
            joined.extend_from_slice(page);
        }
        Self::train_from_joined_pages(&joined, max_bytes)
    }

    /// Trains a dictionary of at most `max_bytes` from sample pages laid
    /// end to end in `joined` (whole pages). A caller that gathers its
    /// samples straight into one buffer needs no second copy of them: the
    /// sample is the largest memory training takes besides zstd's own.
    pub fn train_from_joined_pages(joined: &[u8], max_bytes: usize) -> Result<Self, CodecError> {
        if !joined.len().is_multiple_of(PAGE_SIZE) {
            return Err(CodecError::DictionaryTraining(format!(
                "the sample is {} bytes, not whole pages",
                joined.len()
            )));
        }
        let sizes = vec![PAGE_SIZE; joined.len() / PAGE_SIZE];
        if sizes.len() < 8 {
            return Err(CodecError::DictionaryTraining(format!(
                "only {} sample pages",
                sizes.len()
            )));
        }
        let bytes = zstd::dict::from_continuous(joined, &sizes, max_bytes)
            .map_err(|e| CodecError::DictionaryTraining(e.to_string()))?;
        Ok(Self::from_bytes(bytes))
    }

    /// Wraps dictionary bytes produced earlier (for example read back from a file).
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        let id = zstd::zstd_safe::get_dict_id(&bytes)
            .map(|id| id.get())
            .unwrap_or_else(|| fnv1a(&bytes));
        Self {
            id,
            bytes: bytes.into(),
        }
    }

    /// The dictionary's id (zstd's own id when the dictionary has one).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The dictionary content.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Which codec, at which level, with which dictionary: everything needed to
/// build an [`Encoder`](crate::Encoder) or [`Decoder`](crate::Decoder).
///
/// Parses from `lz4`, `lz4:ACCELERATION`, `lz4-flex`, `zstd`, `zstd:LEVEL`,
/// `zstd-dict` and `zstd-dict:LEVEL`. A `zstd-dict` spec needs a dictionary
/// attached with [`CodecSpec::with_dictionary`] before it can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecSpec {
    family: CodecFamily,
    level: i32,
    dictionary: Option<Dictionary>,
}

impl CodecSpec {
    /// LZ4 at acceleration 1: zpage's default, as in zram's and Zircon's LZ4.
    pub fn lz4() -> Self {
        Self::new(CodecFamily::Lz4, 1).expect("acceleration 1 is valid")
    }

    /// zstd at its default level (3), as `"zstd"` parses.
    pub fn zstd() -> Self {
        Self::new(CodecFamily::Zstd, CodecFamily::Zstd.default_level())
            .expect("the default level is valid")
    }

    /// A codec of `family` at `level`, checked against the family's range.
    pub fn new(family: CodecFamily, level: i32) -> Result<Self, CodecError> {
        let (min, max) = family.level_range();
        if !(min..=max).contains(&level) {
            return Err(CodecError::InvalidLevel {
                codec: family.name(),
                level,
                min,
                max,
            });
        }
        Ok(Self {
            family,
            level,
            dictionary: None,
        })
    }

    /// Attaches the dictionary a `zstd-dict` codec compresses with.
    pub fn with_dictionary(mut self, dictionary: Dictionary) -> Result<Self, CodecError> {
        if self.family != CodecFamily::ZstdDict {
            return Err(CodecError::Dictionary(format!(
                "{} does not take a dictionary: use zstd-dict",
                self.family.name()
            )));
        }
        self.dictionary = Some(dictionary);
        Ok(self)
    }

    /// The family.
    pub fn family(&self) -> CodecFamily {
        self.family
    }

    /// Level (for LZ4, the acceleration).
    pub fn level(&self) -> i32 {
        self.level
    }

    /// The dictionary, for `zstd-dict`.
    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.dictionary.as_ref()
    }

    /// Whether this codec compresses only with a dictionary it does not
    /// have yet (`zstd-dict` as parsed from its name): one must be trained
    /// ([`Dictionary::train`]) and attached before it can compress. Decoders
    /// for it can be made meanwhile (`Decoder::without_dictionary`).
    pub fn awaits_dictionary(&self) -> bool {
        self.family == CodecFamily::ZstdDict && self.dictionary.is_none()
    }

    pub(crate) fn required_dictionary(&self) -> Result<&Dictionary, CodecError> {
        self.dictionary.as_ref().ok_or_else(|| {
            CodecError::Dictionary(
                "zstd-dict needs a trained dictionary: train one with Dictionary::train and attach it with CodecSpec::with_dictionary".into(),
            )
        })
    }
}

impl Default for CodecSpec {
    fn default() -> Self {
        Self::lz4()
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.level == self.family.default_level() {
            write!(f, "{}", self.family.name())
        } else {
            write!(f, "{}:{}", self.family.name(), self.level)
        }
    }
}

impl FromStr for CodecSpec {
    type Err = CodecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let unknown = || CodecError::UnknownCodec {
            name: s.to_string(),
            known: KNOWN_CODECS,
        };
        let (name, level) = match s.split_once(':') {
            Some((name, level)) => (name, Some(level)),
            None => (s, None),
        };
        let family = match name.to_ascii_lowercase().as_str() {
            "lz4" => CodecFamily::Lz4,
            "lz4-flex" | "lz4_flex" => CodecFamily::Lz4Flex,
            "zstd" => CodecFamily::Zstd,
            "zstd-dict" => CodecFamily::ZstdDict,
            _ => return Err(unknown()),
        };
        let level = match level {
            Some(text) => text.trim().parse().map_err(|_| unknown())?,
            None => family.default_level(),
        };
        Self::new(family, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_levels() {
        assert_eq!("lz4".parse::<CodecSpec>().unwrap(), CodecSpec::lz4());
        let zstd: CodecSpec = "zstd:-1".parse().unwrap();
        assert_eq!((zstd.family(), zstd.level()), (CodecFamily::Zstd, -1));
        assert_eq!(zstd.to_string(), "zstd:-1");
        assert_eq!("zstd".parse::<CodecSpec>().unwrap().level(), 3);
        assert_eq!("zstd".parse::<CodecSpec>().unwrap(), CodecSpec::zstd());
        assert_eq!("lz4:11".parse::<CodecSpec>().unwrap().to_string(), "lz4:11");
    }

    #[test]
    fn unknown_names_and_levels_are_errors_that_list_the_choices() {
        let err = "lzo".parse::<CodecSpec>().unwrap_err();
        assert!(err.to_string().contains("zstd:LEVEL"), "{err}");
        assert!(matches!(
            "zstd:99".parse::<CodecSpec>(),
            Err(CodecError::InvalidLevel { .. })
        ));
        assert!("lz4:0".parse::<CodecSpec>().is_err());
        assert!("zstd:fast".parse::<CodecSpec>().is_err());
    }

    /// Pages of text that differ page to page, as a heap of strings does.
    fn text_pages(count: usize) -> Vec<Page> {
        (0..count)
            .map(|i| {
                let mut page = [0u8; PAGE_SIZE];
                let text = format!(
                    "entry {i} name=value{} flags=rw path=/usr/lib/item{} ",
                    i * 7,
                    i % 13
                );
                for (dst, src) in page.iter_mut().zip(text.bytes().cycle()) {
                    *dst = src;
                }
                page
            })
            .collect()
    }

    #[test]
    fn a_joined_sample_trains_the_same_dictionary_as_its_pages() {
        let pages = text_pages(64);
        let joined: Vec<u8> = pages.iter().flatten().copied().collect();
        let from_pages = Dictionary::train(pages.iter(), 4096).unwrap();
        let from_joined = Dictionary::train_from_joined_pages(&joined, 4096).unwrap();
        assert_eq!(from_pages, from_joined);
        let err =
            Dictionary::train_from_joined_pages(&joined[..joined.len() - 1], 4096).unwrap_err();
        assert!(err.to_string().contains("not whole pages"), "{err}");
        let err = Dictionary::train_from_joined_pages(&joined[..4 * PAGE_SIZE], 4096).unwrap_err();
        assert!(err.to_string().contains("only 4 sample pages"), "{err}");
    }

    #[test]
    fn only_zstd_dict_takes_a_dictionary() {
        let dict = Dictionary::from_bytes(vec![1, 2, 3]);
        assert!(CodecSpec::lz4().with_dictionary(dict.clone()).is_err());
        assert!("zstd-dict"
            .parse::<CodecSpec>()
            .unwrap()
            .with_dictionary(dict)
            .is_ok());
    }
}
