//! Every codec round-trips every kind of page, and every decoder turns corrupt
//! or truncated blobs into errors (never a panic, never a write outside the page).

use proptest::prelude::*;
use rand::{rngs::StdRng, Rng, SeedableRng};
use zpage_codec::{
    fill_page, CodecError, CodecSpec, Decoder, Dictionary, Encoded, Encoder, Page, RejectThreshold,
    PAGE_SIZE,
};

fn specs() -> Vec<CodecSpec> {
    let mut specs: Vec<CodecSpec> = [
        "lz4", "lz4:11", "lz4-flex", "zstd:-7", "zstd:-1", "zstd:1", "zstd:3", "zstd:19",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let samples: Vec<Box<Page>> = (0..64).map(text_page).collect();
    let dictionary = Dictionary::train(samples.iter().map(|p| &**p), 16 * 1024).unwrap();
    specs.push(
        "zstd-dict:3"
            .parse::<CodecSpec>()
            .unwrap()
            .with_dictionary(dictionary)
            .unwrap(),
    );
    specs
}

fn text_page(seed: u64) -> Box<Page> {
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
    let mut rng = StdRng::seed_from_u64(seed);
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let mut at = 0;
    while at < PAGE_SIZE {
        let word = WORDS[rng.gen_range(0..WORDS.len())].as_bytes();
        let n = word.len().min(PAGE_SIZE - at);
        page[at..at + n].copy_from_slice(&word[..n]);
        at += n;
    }
    page
}

fn random_page(seed: u64) -> Box<Page> {
    let mut page = Box::new([0u8; PAGE_SIZE]);
    StdRng::seed_from_u64(seed).fill(&mut page[..]);
    page
}

fn round_trip(spec: &CodecSpec, page: &Page) -> Encoded {
    let mut encoder = Encoder::new(spec, RejectThreshold::default()).unwrap();
    let mut decoder = Decoder::new(spec).unwrap();
    let mut blob = Box::new([0u8; PAGE_SIZE]);
    let encoded = encoder.encode(page, &mut blob).unwrap();
    if let Encoded::Compressed(len) = encoded {
        assert!(len < RejectThreshold::default().bytes(), "{spec}: {len}");
        let mut out = Box::new([0xeeu8; PAGE_SIZE]);
        decoder.decode(&blob[..len], &mut out).unwrap();
        assert_eq!(out.as_slice(), page.as_slice(), "{spec}");
    }
    encoded
}

#[test]
fn zero_and_same_filled_pages_are_detected_by_every_codec() {
    for spec in specs() {
        assert_eq!(round_trip(&spec, &[0u8; PAGE_SIZE]), Encoded::SameFilled(0));
        let mut page = Box::new([0u8; PAGE_SIZE]);
        fill_page(&mut page, 0x0102_0304_0506_0708);
        assert_eq!(
            round_trip(&spec, &page),
            Encoded::SameFilled(0x0102_0304_0506_0708)
        );
    }
}

#[test]
fn text_pages_compress_and_round_trip_with_every_codec() {
    for spec in specs() {
        for seed in 0..20 {
            assert!(
                matches!(round_trip(&spec, &text_page(seed)), Encoded::Compressed(_)),
                "{spec}"
            );
        }
    }
}

#[test]
fn random_pages_are_incompressible_with_every_codec() {
    for spec in specs() {
        for seed in 0..5 {
            assert_eq!(
                round_trip(&spec, &random_page(seed)),
                Encoded::Incompressible,
                "{spec}"
            );
        }
    }
}

#[test]
fn zircon_threshold_rejects_what_the_default_keeps() {
    // Half random, half zero: compresses to ~2.1 KB with LZ4... make it ~3 KB instead.
    let mut page = random_page(9);
    page[3000..].fill(0);
    let spec = CodecSpec::lz4();
    let mut blob = Box::new([0u8; PAGE_SIZE]);
    let default = Encoder::new(&spec, RejectThreshold::default())
        .unwrap()
        .encode(&page, &mut blob)
        .unwrap();
    let zircon = Encoder::new(&spec, RejectThreshold::ZIRCON)
        .unwrap()
        .encode(&page, &mut blob)
        .unwrap();
    assert!(
        matches!(default, Encoded::Compressed(len) if len > 2867),
        "{default:?}"
    );
    assert_eq!(zircon, Encoded::Incompressible);
}

#[test]
fn compressed_size_equals_threshold_boundary() {
    // A blob of exactly threshold-1 bytes is kept, so any kept blob is below the bound.
    let page = text_page(1);
    let mut blob = Box::new([0u8; PAGE_SIZE]);
    let Encoded::Compressed(len) = Encoder::new(&CodecSpec::lz4(), RejectThreshold::default())
        .unwrap()
        .encode(&page, &mut blob)
        .unwrap()
    else {
        panic!("text compresses");
    };
    let at_bound = RejectThreshold::from_bytes(len).unwrap();
    let above = RejectThreshold::from_bytes(len + 1).unwrap();
    assert_eq!(
        Encoder::new(&CodecSpec::lz4(), at_bound)
            .unwrap()
            .encode(&page, &mut blob)
            .unwrap(),
        Encoded::Incompressible
    );
    assert_eq!(
        Encoder::new(&CodecSpec::lz4(), above)
            .unwrap()
            .encode(&page, &mut blob)
            .unwrap(),
        Encoded::Compressed(len)
    );
}

#[test]
fn truncated_and_corrupted_blobs_are_errors_for_every_decoder() {
    for spec in specs() {
        let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
        let mut decoder = Decoder::new(&spec).unwrap();
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        let page = text_page(3);
        let Encoded::Compressed(len) = encoder.encode(&page, &mut blob).unwrap() else {
            panic!()
        };
        let mut out = Box::new([0u8; PAGE_SIZE]);
        for cut in [0, 1, len / 2, len - 1] {
            let result = decoder.decode(&blob[..cut], &mut out);
            assert!(
                matches!(result, Err(CodecError::Corrupt { .. })),
                "{spec} cut at {cut}: {result:?}"
            );
        }
        // Bit flips may still decode to some page; they must never panic and never
        // claim success with a wrong length.
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..2000 {
            let mut corrupt = blob[..len].to_vec();
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..len);
                corrupt[at] ^= 1 << rng.gen_range(0..8);
            }
            let _ = decoder.decode(&corrupt, &mut out);
        }
        // The decoder still works after all that.
        decoder.decode(&blob[..len], &mut out).unwrap();
        assert_eq!(out.as_slice(), page.as_slice());
    }
}

#[test]
fn blob_of_another_codec_is_an_error_or_a_different_page_never_a_panic() {
    let page = text_page(5);
    let mut blob = Box::new([0u8; PAGE_SIZE]);
    let Encoded::Compressed(len) =
        Encoder::new(&"zstd:3".parse().unwrap(), RejectThreshold::default())
            .unwrap()
            .encode(&page, &mut blob)
            .unwrap()
    else {
        panic!()
    };
    let mut out = Box::new([0u8; PAGE_SIZE]);
    let result = Decoder::new(&CodecSpec::lz4())
        .unwrap()
        .decode(&blob[..len], &mut out);
    assert!(result.is_err() || out.as_slice() != page.as_slice());
}

#[test]
fn zstd_dict_decoder_without_dictionary_is_refused() {
    let spec: CodecSpec = "zstd-dict".parse().unwrap();
    assert!(matches!(
        Decoder::new(&spec),
        Err(CodecError::Dictionary(_))
    ));
    assert!(matches!(
        Encoder::new(&spec, RejectThreshold::default()),
        Err(CodecError::Dictionary(_))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_pages_round_trip(
        seed in any::<u64>(),
        zero_run_start in 0usize..PAGE_SIZE,
        zero_run_len in 0usize..PAGE_SIZE,
        alphabet in 1u8..=255,
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut page = Box::new([0u8; PAGE_SIZE]);
        for byte in page.iter_mut() {
            *byte = rng.gen_range(0..=alphabet);
        }
        let end = (zero_run_start + zero_run_len).min(PAGE_SIZE);
        page[zero_run_start..end].fill(0);
        for spec in ["lz4", "lz4-flex", "zstd:-1", "zstd:3"] {
            round_trip(&spec.parse().unwrap(), &page);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_any_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let mut out = Box::new([0u8; PAGE_SIZE]);
        for spec in ["lz4", "lz4-flex", "zstd:3"] {
            let _ = Decoder::new(&spec.parse().unwrap()).unwrap().decode(&bytes, &mut out);
        }
    }
}
