//! Compressor and decompressor state, one per thread.
//!
//! Each `Encoder`/`Decoder` owns the state its codec needs (a zstd context
//! with its dictionary loaded, a scratch buffer for `lz4_flex`), built once,
//! so `encode`/`decode` allocate nothing.

use crate::same_filled::same_filled_word;
use crate::{
    CodecError, CodecFamily, CodecSpec, Corruption, Dictionary, Encoded, Page, RejectThreshold,
    Result, PAGE_SIZE,
};
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DDict, DParameter, FrameFormat};

/// zstd's message for a destination buffer that is too small: a poor ratio, not a failure.
const ZSTD_DST_TOO_SMALL: &str = "Destination buffer is too small";

enum EncoderEngine {
    Lz4 { acceleration: i32 },
    Lz4Flex { scratch: Box<[u8]> },
    Zstd(Box<CCtx<'static>>),
}

/// Compresses pages with one codec and one reject threshold. Not shared between threads.
pub struct Encoder {
    spec: CodecSpec,
    threshold: RejectThreshold,
    engine: EncoderEngine,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("spec", &self.spec)
            .field("threshold", &self.threshold)
            .finish()
    }
}

fn zstd_error(codec: &'static str, code: usize) -> CodecError {
    CodecError::CompressFailed {
        codec,
        reason: zstd_safe::get_error_name(code).to_string(),
    }
}

fn zstd_frame_parameters(level: i32) -> [CParameter; 6] {
    // Magicless frames with no checksum, size or dictionary id: every byte
    // saved per 4 KiB page is ~0.03% of ratio, and the store records all of it.
    // The size hint sizes the tables of the dictionary zstd digests for
    // one-page inputs: the same output, 10-20% faster with a dictionary.
    [
        CParameter::CompressionLevel(level),
        CParameter::SrcSizeHint(PAGE_SIZE as u32),
        CParameter::Format(FrameFormat::Magicless),
        CParameter::ChecksumFlag(false),
        CParameter::ContentSizeFlag(false),
        CParameter::DictIdFlag(false),
    ]
}

impl Encoder {
    /// Builds the compressor state for `spec`.
    pub fn new(spec: &CodecSpec, threshold: RejectThreshold) -> Result<Self> {
        let name = spec.family().name();
        let engine = match spec.family() {
            CodecFamily::Lz4 => EncoderEngine::Lz4 {
                acceleration: spec.level(),
            },
            CodecFamily::Lz4Flex => EncoderEngine::Lz4Flex {
                scratch: vec![0u8; lz4_flex::block::get_maximum_output_size(PAGE_SIZE)]
                    .into_boxed_slice(),
            },
            CodecFamily::Zstd | CodecFamily::ZstdDict => {
                let mut cctx = Box::new(CCtx::create());
                for parameter in zstd_frame_parameters(spec.level()) {
                    cctx.set_parameter(parameter)
                        .map_err(|code| zstd_error(name, code))?;
                }
                if spec.family() == CodecFamily::ZstdDict {
                    cctx.load_dictionary(spec.required_dictionary()?.bytes())
                        .map_err(|code| zstd_error(name, code))?;
                }
                EncoderEngine::Zstd(cctx)
            }
        };
        Ok(Self {
            spec: spec.clone(),
            threshold,
            engine,
        })
    }

    /// The codec this encoder uses.
    pub fn spec(&self) -> &CodecSpec {
        &self.spec
    }

    /// The reject threshold.
    pub fn threshold(&self) -> RejectThreshold {
        self.threshold
    }

    /// Encodes one page. On [`Encoded::Compressed`]`(len)`, `dst[..len]` holds the blob.
    ///
    /// Same-filled pages are recognised before any compression. Compression
    /// is bounded by the threshold so a hopeless page stops early (liblz4 and
    /// zstd abort when the output passes the bound).
    pub fn encode(&mut self, page: &Page, dst: &mut Page) -> Result<Encoded> {
        if let Some(word) = same_filled_word(page) {
            return Ok(Encoded::SameFilled(word));
        }
        self.compress(page, dst)
    }

    /// Compresses without the same-filled check (benchmarks, and callers that already checked).
    pub fn compress(&mut self, page: &Page, dst: &mut Page) -> Result<Encoded> {
        let limit = self.threshold.largest_kept_bytes();
        let name = self.spec.family().name();
        let written = match &mut self.engine {
            EncoderEngine::Lz4 { acceleration } => {
                // liblz4 returns 0 exactly when the output would not fit: that is the poor-ratio outcome.
                lzzzz::lz4::compress(page, &mut dst[..limit], *acceleration).ok()
            }
            EncoderEngine::Lz4Flex { scratch } => {
                // lz4_flex cannot stop at a bound; it needs the worst-case buffer, then we check.
                let len = lz4_flex::block::compress_into(page, scratch).map_err(|e| {
                    CodecError::CompressFailed {
                        codec: name,
                        reason: e.to_string(),
                    }
                })?;
                (len <= limit).then(|| {
                    dst[..len].copy_from_slice(&scratch[..len]);
                    len
                })
            }
            EncoderEngine::Zstd(cctx) => match cctx.compress2(&mut dst[..limit], page) {
                Ok(len) => Some(len),
                Err(code) if zstd_safe::get_error_name(code) == ZSTD_DST_TOO_SMALL => None,
                Err(code) => return Err(zstd_error(name, code)),
            },
        };
        Ok(match written {
            Some(len) if len <= limit => Encoded::Compressed(len),
            _ => Encoded::Incompressible,
        })
    }
}

/// `lz4_flex`'s error, as a static description: its `Display` formats numbers,
/// and a `String` cannot be built on the fault path.
fn lz4_flex_reason(error: &lz4_flex::block::DecompressError) -> &'static str {
    use lz4_flex::block::DecompressError as E;
    match error {
        E::OutputTooSmall { .. } => "the block decodes to more than one page",
        E::LiteralOutOfBounds => "a literal run reaches past the end of the block",
        E::ExpectedAnotherByte => "the block ends inside a sequence",
        E::OffsetZero => "a match has offset 0",
        E::OffsetOutOfBounds => "a match copies from before the start of the page",
        _ => "lz4_flex refused the block",
    }
}

enum DecoderEngine {
    Lz4,
    Lz4Flex,
    Zstd(Box<DCtx<'static>>),
}

/// Decompresses blobs of one codec. Not shared between threads; `decode` allocates nothing.
pub struct Decoder {
    family: CodecFamily,
    engine: DecoderEngine,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("family", &self.family)
            .finish()
    }
}

/// A zstd dictionary digested once for decoding and shared by every thread's
/// [`Decoder`] (zstd's `DDict`): a dictionary that arrives after the
/// decoders were made (one trained from the pages themselves) is published
/// as one of these, and [`Decoder::decode_with_dictionary`] uses it without
/// allocating.
pub struct SharedDictionary {
    dictionary: Dictionary,
    ddict: DDict<'static>,
}

impl std::fmt::Debug for SharedDictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDictionary")
            .field("dictionary", &self.dictionary)
            .finish()
    }
}

impl SharedDictionary {
    /// Digests `dictionary` (allocates: do it before any blob needs it).
    pub fn new(dictionary: Dictionary) -> Self {
        let ddict = DDict::create(dictionary.bytes());
        Self { dictionary, ddict }
    }

    /// The dictionary itself (what an [`Encoder`] for the same blobs loads).
    pub fn dictionary(&self) -> &Dictionary {
        &self.dictionary
    }
}

impl Decoder {
    /// Builds the decompressor state for `spec` (with its dictionary loaded, for `zstd-dict`).
    pub fn new(spec: &CodecSpec) -> Result<Self> {
        Self::build(spec, true)
    }

    /// Builds the decompressor state for `spec` without loading a
    /// dictionary: a `zstd-dict` decoder made this way decodes with
    /// [`Decoder::decode_with_dictionary`], given the dictionary per call.
    pub fn without_dictionary(spec: &CodecSpec) -> Result<Self> {
        Self::build(spec, false)
    }

    fn build(spec: &CodecSpec, load_dictionary: bool) -> Result<Self> {
        let name = spec.family().name();
        let engine = match spec.family() {
            CodecFamily::Lz4 => DecoderEngine::Lz4,
            CodecFamily::Lz4Flex => DecoderEngine::Lz4Flex,
            CodecFamily::Zstd | CodecFamily::ZstdDict => {
                let mut dctx = Box::new(DCtx::create());
                dctx.set_parameter(DParameter::Format(FrameFormat::Magicless))
                    .map_err(|code| zstd_error(name, code))?;
                if spec.family() == CodecFamily::ZstdDict && load_dictionary {
                    dctx.load_dictionary(spec.required_dictionary()?.bytes())
                        .map_err(|code| zstd_error(name, code))?;
                }
                DecoderEngine::Zstd(dctx)
            }
        };
        Ok(Self {
            family: spec.family(),
            engine,
        })
    }

    /// [`Decoder::decode`] for a `zstd-dict` blob, with `dictionary` given
    /// here rather than loaded when the decoder was made. Allocates nothing
    /// (zstd copies the digested dictionary's tables into this decoder's
    /// context). A decoder of another family refuses the blob as corrupt.
    pub fn decode_with_dictionary(
        &mut self,
        blob: &[u8],
        dictionary: &SharedDictionary,
        dst: &mut Page,
    ) -> Result<()> {
        let corrupt = |reason| CodecError::Corrupt {
            codec: self.family.name(),
            blob_len: blob.len(),
            reason,
        };
        let written = match &mut self.engine {
            DecoderEngine::Zstd(dctx) => dctx
                .decompress_using_ddict(&mut dst[..], blob, &dictionary.ddict)
                .map_err(|code| corrupt(Corruption::Rejected(zstd_safe::get_error_name(code))))?,
            DecoderEngine::Lz4 | DecoderEngine::Lz4Flex => {
                return Err(corrupt(Corruption::Rejected(
                    "an LZ4 decoder was given a zstd dictionary",
                )))
            }
        };
        if written != PAGE_SIZE {
            return Err(corrupt(Corruption::WrongLength(written)));
        }
        Ok(())
    }

    /// Decodes `blob` into `dst`. Anything other than exactly one page of output is
    /// [`CodecError::Corrupt`]; `dst` may then hold garbage but nothing outside it is touched.
    ///
    /// Allocates nothing, on success or on error: the region's fault path
    /// calls this from a signal handler, where `malloc` may be the function
    /// it interrupted.
    pub fn decode(&mut self, blob: &[u8], dst: &mut Page) -> Result<()> {
        let corrupt = |reason| CodecError::Corrupt {
            codec: self.family.name(),
            blob_len: blob.len(),
            reason,
        };
        let written = match &mut self.engine {
            // liblz4 reports every failure as one negative number, which lzzzz
            // turns into one error kind: there is nothing finer to say.
            DecoderEngine::Lz4 => lzzzz::lz4::decompress(blob, dst).map_err(|_| {
                corrupt(Corruption::Rejected(
                    "liblz4 refused the block (malformed, truncated, or longer than one page)",
                ))
            })?,
            DecoderEngine::Lz4Flex => lz4_flex::block::decompress_into(blob, dst)
                .map_err(|e| corrupt(Corruption::Rejected(lz4_flex_reason(&e))))?,
            // zstd's error names are static C strings: naming one allocates nothing.
            DecoderEngine::Zstd(dctx) => dctx
                .decompress(&mut dst[..], blob)
                .map_err(|code| corrupt(Corruption::Rejected(zstd_safe::get_error_name(code))))?,
        };
        if written != PAGE_SIZE {
            return Err(corrupt(Corruption::WrongLength(written)));
        }
        Ok(())
    }
}
