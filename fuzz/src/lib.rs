//! What the fuzz targets in `fuzz_targets/` share.
//!
//! Each decoder target hands the fuzzer's bytes to [`Decoder::decode`] twice:
//! once as they are, and once as edits to a real blob of that codec, so the
//! fuzzer reaches the depths of a format (zstd's entropy tables) in minutes
//! rather than rediscovering the format from nothing. Whatever the blob, the
//! decoder must return, not panic, and an `Ok` must mean that the whole page
//! was written (two decodes over different fills agree) with what the blob
//! really holds: the same library, called directly with room for two pages,
//! is the oracle for that.
//!
//! Run one target with `cargo +nightly fuzz run decode_zstd` from the
//! repository root; `scripts/fuzz-short.sh` runs every target briefly.

use std::sync::{Mutex, MutexGuard, OnceLock};
use zpage_codec::{
    fill_page, same_filled_word, CodecError, CodecFamily, CodecSpec, Corruption, Decoder,
    Dictionary, Encoded, Encoder, Page, RejectThreshold, PAGE_SIZE,
};
use zstd::zstd_safe::{DCtx, DParameter, FrameFormat};

/// splitmix64: the sample pages must be the same in every run, with no dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A deterministic page of one of the kinds a heap holds: text, records of
/// pointers and counters, mostly zeros, or half noise.
pub fn sample_page(seed: u64) -> Box<Page> {
    const WORDS: [&str; 10] = [
        "memory ",
        "page ",
        "compressed ",
        "{\"key\": ",
        "42, ",
        "zram ",
        "swap ",
        "cold ",
        "hot ",
        "\n",
    ];
    let mut rng = SplitMix(seed);
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let text = |rng: &mut SplitMix, page: &mut [u8]| {
        let mut at = 0;
        while at < page.len() {
            let word = WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes();
            let n = word.len().min(page.len() - at);
            page[at..at + n].copy_from_slice(&word[..n]);
            at += n;
        }
    };
    match seed % 4 {
        0 => text(&mut rng, &mut page[..]),
        1 => {
            for record in page.chunks_exact_mut(32) {
                let pointer = 0x7f3a_0000_0000u64 + rng.below(1 << 20) * 16;
                record[..8].copy_from_slice(&pointer.to_le_bytes());
                record[8..16].copy_from_slice(&rng.below(100).to_le_bytes());
                record[16..20].copy_from_slice(&(rng.below(4) as u32).to_le_bytes());
                record[24..32].copy_from_slice(b"objtag\0\0");
            }
        }
        2 => {
            for _ in 0..24 {
                let at = rng.below((PAGE_SIZE / 8) as u64) as usize * 8;
                page[at..at + 8].copy_from_slice(&rng.next().to_le_bytes());
            }
        }
        _ => {
            for chunk in page[..PAGE_SIZE / 2].chunks_exact_mut(8) {
                chunk.copy_from_slice(&rng.next().to_le_bytes());
            }
            text(&mut rng, &mut page[PAGE_SIZE / 2..]);
        }
    }
    page
}

/// The zstd-dict targets' dictionary: 4 KiB trained from 64 sample pages, the same in every run.
pub fn dictionary() -> &'static Dictionary {
    static DICTIONARY: OnceLock<Dictionary> = OnceLock::new();
    DICTIONARY.get_or_init(|| {
        let samples: Vec<Box<Page>> = (0..64).map(sample_page).collect();
        Dictionary::train(samples.iter().map(|page| &**page), 4 * 1024)
            .expect("64 varied sample pages train a dictionary")
    })
}

/// A codec spec by name, with the fuzz dictionary attached for zstd-dict.
pub fn spec(name: &str) -> CodecSpec {
    let spec: CodecSpec = name.parse().expect("a known codec");
    match spec.family() {
        CodecFamily::ZstdDict => spec
            .with_dictionary(dictionary().clone())
            .expect("zstd-dict takes a dictionary"),
        _ => spec,
    }
}

/// The same decompressor the codec wraps, with an output buffer of two pages.
enum Oracle {
    Lz4,
    Lz4Flex,
    Zstd(Box<DCtx<'static>>),
}

impl Oracle {
    fn new(spec: &CodecSpec) -> Self {
        match spec.family() {
            CodecFamily::Lz4 => Oracle::Lz4,
            CodecFamily::Lz4Flex => Oracle::Lz4Flex,
            CodecFamily::Zstd | CodecFamily::ZstdDict => {
                let mut dctx = Box::new(DCtx::create());
                dctx.set_parameter(DParameter::Format(FrameFormat::Magicless))
                    .expect("zstd takes magicless frames");
                if let Some(dictionary) = spec.dictionary() {
                    dctx.load_dictionary(dictionary.bytes())
                        .expect("the trained dictionary loads");
                }
                Oracle::Zstd(dctx)
            }
        }
    }

    /// How many bytes `blob` decodes to, written to `wide`, or `None` if it does not decode.
    fn decode(&mut self, blob: &[u8], wide: &mut [u8]) -> Option<usize> {
        match self {
            Oracle::Lz4 => lzzzz::lz4::decompress(blob, wide).ok(),
            Oracle::Lz4Flex => lz4_flex::block::decompress_into(blob, wide).ok(),
            Oracle::Zstd(dctx) => dctx.decompress(wide, blob).ok(),
        }
    }
}

/// One decoder family's state, built once per process like a store worker's
/// decoders, and reused for every input as the store reuses them.
struct DecodeHarness {
    spec: CodecSpec,
    decoder: Decoder,
    oracle: Oracle,
    /// Real blobs of this codec, for the fuzzer's edits to start from.
    bases: Vec<Vec<u8>>,
    edited: Vec<u8>,
    out: Box<Page>,
    /// The page of the first of two decodes of one blob.
    first: Box<Page>,
    wide: Vec<u8>,
}

impl DecodeHarness {
    fn new(family: CodecFamily) -> Self {
        let (spec, encoders): (CodecSpec, &[&str]) = match family {
            CodecFamily::Lz4 => (spec("lz4"), &["lz4", "lz4:9"]),
            CodecFamily::Lz4Flex => (spec("lz4-flex"), &["lz4-flex", "lz4:9"]),
            CodecFamily::Zstd => (spec("zstd"), &["zstd:-5", "zstd:3", "zstd:19"]),
            CodecFamily::ZstdDict => (spec("zstd-dict"), &["zstd-dict:1", "zstd-dict:19"]),
        };
        let keep_all = RejectThreshold::from_bytes(PAGE_SIZE).expect("a page is a valid threshold");
        let mut bases = Vec::new();
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        for name in encoders {
            let mut encoder = Encoder::new(&self::spec(name), keep_all).expect("encoder");
            for seed in 0..8 {
                if let Encoded::Compressed(len) = encoder
                    .compress(&sample_page(seed), &mut blob)
                    .expect("encode")
                {
                    bases.push(blob[..len].to_vec());
                }
            }
        }
        assert!(!bases.is_empty(), "{spec}: no sample page compresses");
        Self {
            decoder: Decoder::new(&spec).expect("decoder"),
            oracle: Oracle::new(&spec),
            spec,
            bases,
            edited: Vec::with_capacity(2 * PAGE_SIZE),
            out: Box::new([0u8; PAGE_SIZE]),
            first: Box::new([0u8; PAGE_SIZE]),
            wide: vec![0u8; 2 * PAGE_SIZE],
        }
    }

    fn get(family: CodecFamily) -> MutexGuard<'static, DecodeHarness> {
        static HARNESSES: [OnceLock<Mutex<DecodeHarness>>; 4] = [
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
            OnceLock::new(),
        ];
        let slot = match family {
            CodecFamily::Lz4 => 0,
            CodecFamily::Lz4Flex => 1,
            CodecFamily::Zstd => 2,
            CodecFamily::ZstdDict => 3,
        };
        HARNESSES[slot]
            .get_or_init(|| Mutex::new(DecodeHarness::new(family)))
            .lock()
            .expect("a panic ends the fuzzing process before anything sees a poisoned lock")
    }

    /// Applies the fuzzer's bytes to a real blob as edits, in 4-byte commands
    /// `[op, position low, position high, value]`; a tail of under 4 bytes is appended.
    fn edit(&mut self, data: &[u8]) {
        let Some((&pick, commands)) = data.split_first() else {
            return;
        };
        let edited = &mut self.edited;
        edited.clear();
        edited.extend_from_slice(&self.bases[usize::from(pick) % self.bases.len()]);
        let mut commands = commands.chunks_exact(4);
        for command in &mut commands {
            let position = usize::from(u16::from_le_bytes([command[1], command[2]]));
            let value = command[3];
            match command[0] % 4 {
                0 if !edited.is_empty() => {
                    let at = position % edited.len();
                    edited[at] = value;
                }
                1 if !edited.is_empty() => {
                    let at = position % edited.len();
                    edited[at] ^= value;
                }
                2 => edited.truncate(position % (edited.len() + 1)),
                3 => edited.insert(position % (edited.len() + 1), value),
                _ => {}
            }
        }
        edited.extend_from_slice(commands.remainder());
    }

    /// Decodes `blob` (the fuzzer's bytes, or `self.edited`) and checks the outcome.
    fn check(&mut self, edited: bool, data: &[u8]) {
        let blob = if edited { &self.edited[..] } else { data };
        let name = self.spec.family().name();
        self.out.fill(0x00);
        match self.decoder.decode(blob, &mut self.out) {
            Ok(()) => {}
            Err(CodecError::Corrupt {
                codec,
                blob_len,
                reason,
            }) => {
                assert_eq!((codec, blob_len), (name, blob.len()));
                if let Corruption::WrongLength(written) = reason {
                    assert!(written < PAGE_SIZE, "{name}: {reason}");
                }
                return;
            }
            Err(other) => panic!("{name}: decode failed with a non-corrupt error: {other}"),
        }
        // Again over another fill: a byte the decoder left unwritten keeps
        // its fill, and the two pages differ there.
        self.first.copy_from_slice(&self.out[..]);
        self.out.fill(0xff);
        if let Err(error) = self.decoder.decode(blob, &mut self.out) {
            panic!(
                "{name}: decoded a blob of {} bytes once, then refused it: {error}",
                blob.len()
            );
        }
        assert!(
            self.out[..] == self.first[..],
            "{name}: decode said Ok but left part of the page unwritten"
        );
        match self.oracle.decode(blob, &mut self.wide) {
            Some(len) => {
                assert_eq!(
                    len,
                    PAGE_SIZE,
                    "{name}: decode said Ok for a blob of {} bytes that holds {len} bytes",
                    blob.len()
                );
                assert!(
                    self.out[..] == self.wide[..PAGE_SIZE],
                    "{name}: decode said Ok but the page differs from what the blob holds"
                );
            }
            // zstd checks a block's output against the frame's block size
            // limit only when the output buffer has room to hold the literals
            // behind that limit: a malformed frame whose block overruns a small
            // window decodes into exactly one page, and is refused when there
            // is room for two. Either answer is zstd's, and the page written
            // is whole (checked above).
            None if matches!(self.oracle, Oracle::Zstd(_)) => {}
            None => panic!(
                "{name}: decode said Ok for a blob of {} bytes that the same library refuses with room for two pages",
                blob.len()
            ),
        }
    }
}

/// The body of the decoder targets.
pub fn decode_arbitrary(family: CodecFamily, data: &[u8]) {
    let mut harness = DecodeHarness::get(family);
    harness.check(false, data);
    if !data.is_empty() {
        harness.edit(data);
        harness.check(true, data);
    }
}

/// The codecs the round trip draws from: every family, fast and slow levels.
const ROUND_TRIP_CODECS: [&str; 7] = [
    "lz4",
    "lz4:9",
    "lz4-flex",
    "zstd:-5",
    "zstd:3",
    "zstd:12",
    "zstd-dict:3",
];

/// The reject thresholds it draws from: zram's, Zircon's, and the two extremes.
fn round_trip_thresholds() -> [RejectThreshold; 4] {
    [
        RejectThreshold::ZSMALLOC_HUGE_CLASS,
        RejectThreshold::ZIRCON,
        RejectThreshold::from_bytes(PAGE_SIZE).expect("a page is a valid threshold"),
        RejectThreshold::from_bytes(64).expect("64 bytes is a valid threshold"),
    ]
}

struct RoundTrip {
    encoders: Vec<Option<Encoder>>,
    decoders: Vec<Option<Decoder>>,
    page: Box<Page>,
    blob: Box<Page>,
    out: Box<Page>,
}

/// Builds a page from `[codec, threshold, shape, content...]`, encodes it and
/// checks that decoding or refilling gives the page back.
pub fn round_trip(data: &[u8]) {
    static STATE: OnceLock<Mutex<RoundTrip>> = OnceLock::new();
    let [codec, threshold, shape, content @ ..] = data else {
        return;
    };
    let thresholds = round_trip_thresholds();
    let codec = usize::from(*codec) % ROUND_TRIP_CODECS.len();
    let threshold_index = usize::from(*threshold) % thresholds.len();
    let threshold = thresholds[threshold_index];
    let mut guard = STATE
        .get_or_init(|| {
            Mutex::new(RoundTrip {
                encoders: (0..ROUND_TRIP_CODECS.len() * thresholds.len())
                    .map(|_| None)
                    .collect(),
                decoders: (0..ROUND_TRIP_CODECS.len()).map(|_| None).collect(),
                page: Box::new([0u8; PAGE_SIZE]),
                blob: Box::new([0u8; PAGE_SIZE]),
                out: Box::new([0u8; PAGE_SIZE]),
            })
        })
        .lock()
        .expect("a panic ends the fuzzing process before anything sees a poisoned lock");
    let state = &mut *guard;
    let spec = spec(ROUND_TRIP_CODECS[codec]);
    let encoder = state.encoders[codec * thresholds.len() + threshold_index]
        .get_or_insert_with(|| Encoder::new(&spec, threshold).expect("encoder"));
    let decoder =
        state.decoders[codec].get_or_insert_with(|| Decoder::new(&spec).expect("decoder"));

    let page = &mut state.page;
    match shape % 3 {
        // The bytes, then zeros: short inputs make the compressible pages.
        0 => {
            let n = content.len().min(PAGE_SIZE);
            page[..n].copy_from_slice(&content[..n]);
            page[n..].fill(0);
        }
        // The bytes repeated: periodic pages, same-filled when the period divides 8.
        1 if !content.is_empty() => {
            for (byte, value) in page.iter_mut().zip(content.iter().cycle()) {
                *byte = *value;
            }
        }
        // One word repeated, and perhaps one byte changed.
        _ => {
            let mut word = [0u8; 8];
            let n = content.len().min(8);
            word[..n].copy_from_slice(&content[..n]);
            fill_page(page, u64::from_ne_bytes(word));
            if let [_, _, _, _, _, _, _, _, low, high, value, ..] = content {
                page[usize::from(u16::from_le_bytes([*low, *high])) % PAGE_SIZE] = *value;
            }
        }
    }

    let outcome = encoder
        .encode(page, &mut state.blob)
        .unwrap_or_else(|e| panic!("{spec}: encoding a page failed: {e}"));
    check_outcome(
        &spec,
        threshold,
        outcome,
        page,
        &state.blob,
        decoder,
        &mut state.out,
    );
    if let Encoded::SameFilled(_) = outcome {
        // The compressor proper never sees same-filled pages through
        // `encode`; give them to it directly too.
        let outcome = encoder
            .compress(page, &mut state.blob)
            .unwrap_or_else(|e| panic!("{spec}: compressing a page failed: {e}"));
        assert!(
            !matches!(outcome, Encoded::SameFilled(_)),
            "{spec}: compress checked for same-filled"
        );
        check_outcome(
            &spec,
            threshold,
            outcome,
            page,
            &state.blob,
            decoder,
            &mut state.out,
        );
    }
}

fn check_outcome(
    spec: &CodecSpec,
    threshold: RejectThreshold,
    outcome: Encoded,
    page: &Page,
    blob: &Page,
    decoder: &mut Decoder,
    out: &mut Page,
) {
    match outcome {
        Encoded::SameFilled(word) => {
            assert_eq!(same_filled_word(page), Some(word), "{spec}");
            poison(out, page);
            fill_page(out, word);
            assert!(
                out[..] == page[..],
                "{spec}: refilling {word:#x} does not give the page back"
            );
        }
        Encoded::Compressed(len) => {
            assert!(
                len <= threshold.largest_kept_bytes(),
                "{spec}: kept a blob of {len} bytes under threshold {threshold}"
            );
            poison(out, page);
            decoder
                .decode(&blob[..len], out)
                .unwrap_or_else(|e| panic!("{spec}: its own blob does not decode: {e}"));
            assert!(
                out[..] == page[..],
                "{spec}: the blob decodes to another page"
            );
        }
        Encoded::Incompressible => {}
    }
}

/// Makes every byte of `out` differ from `page`'s, so a byte left unwritten cannot pass for right.
fn poison(out: &mut Page, page: &Page) {
    for (out, byte) in out.iter_mut().zip(page) {
        *out = !byte;
    }
}
