//! `Decoder::decode` allocates nothing, on corrupt and truncated blobs as on
//! good ones, for every codec family.
//!
//! The region's fault path decodes from a SIGBUS handler; if that handler
//! interrupted `malloc`, an allocation inside `decode` would deadlock on the
//! allocator's lock. Two counters watch each call: a `#[global_allocator]`
//! sees every Rust allocation, and on glibc this test binary also defines
//! `malloc`, `calloc`, `realloc` and `free` (forwarding to glibc's own), so the
//! C inside liblz4 and zstd is counted as well. A test checks that both
//! counters do see allocations, so a zero from them means something.

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::cell::Cell;
use zpage_codec::{
    CodecError, CodecSpec, Corruption, Decoder, Dictionary, Encoded, Encoder, Page,
    RejectThreshold, SharedDictionary, PAGE_SIZE,
};
use zpage_testsupport::alloc::{self, PerThreadCounter};

#[global_allocator]
static ALLOCATOR: PerThreadCounter = PerThreadCounter;

thread_local! {
    // Per thread, as the Rust allocator's count, so the harness's other
    // threads (and tests running in parallel) neither count nor get counted.
    // Const-initialised and without a destructor, so reading it from inside
    // the allocator never allocates.
    static C_CALLS: Cell<usize> = const { Cell::new(0) };
}

fn note_c_call() {
    let _ = C_CALLS.try_with(|c| c.set(c.get() + 1));
}

/// The C allocator, interposed: these definitions in the executable take the
/// place of glibc's for every caller in the process (liblz4 and zstd are
/// compiled into this binary), and each forwards to glibc's implementation
/// under its exported `__libc_` name, so all memory still comes from and
/// returns to one allocator.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod c_allocator {
    use super::note_c_call;
    use std::ffi::c_void;

    extern "C" {
        fn __libc_malloc(size: usize) -> *mut c_void;
        fn __libc_calloc(count: usize, size: usize) -> *mut c_void;
        fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
        fn __libc_free(ptr: *mut c_void);
    }

    #[no_mangle]
    extern "C" fn malloc(size: usize) -> *mut c_void {
        note_c_call();
        // SAFETY: glibc's malloc accepts any size.
        unsafe { __libc_malloc(size) }
    }

    #[no_mangle]
    extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
        note_c_call();
        // SAFETY: glibc's calloc accepts any count and size (it checks the product).
        unsafe { __libc_calloc(count, size) }
    }

    #[no_mangle]
    unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
        note_c_call();
        // SAFETY: C callers pass null or a pointer from this allocator family, as realloc(3) requires.
        unsafe { __libc_realloc(ptr, size) }
    }

    #[no_mangle]
    unsafe extern "C" fn free(ptr: *mut c_void) {
        note_c_call();
        // SAFETY: C callers pass null or a pointer from this allocator family, as free(3) requires.
        unsafe { __libc_free(ptr) }
    }
}

/// Whether the C allocator is counted on this target.
const C_COUNTED: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AllocatorCalls {
    rust: u64,
    c: usize,
}

impl AllocatorCalls {
    const NONE: Self = Self { rust: 0, c: 0 };
}

fn allocator_calls_during<R>(f: impl FnOnce() -> R) -> (R, AllocatorCalls) {
    // Rust first: its first reading allocates once, to check the counting
    // allocator is installed, and that `malloc` must not count here.
    let rust_before = alloc::calls_here();
    let c_before = C_CALLS.get();
    let result = f();
    let calls = AllocatorCalls {
        c: C_CALLS.get() - c_before,
        rust: alloc::calls_here() - rust_before,
    };
    (result, calls)
}

/// Text-like pages: what real heaps look like to a compressor, and what a
/// dictionary can be trained on.
fn text_page(seed: u64) -> Box<Page> {
    const WORDS: [&str; 8] = [
        "memory ",
        "page ",
        "{\"key\": ",
        "42, ",
        "zram ",
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

fn zstd_dict_spec(first_sample: u64) -> CodecSpec {
    let samples: Vec<Box<Page>> = (first_sample..first_sample + 32).map(text_page).collect();
    let dictionary = Dictionary::train(samples.iter().map(|p| &**p), 8 * 1024).unwrap();
    "zstd-dict"
        .parse::<CodecSpec>()
        .unwrap()
        .with_dictionary(dictionary)
        .unwrap()
}

fn every_family() -> Vec<CodecSpec> {
    let mut specs: Vec<CodecSpec> = ["lz4", "lz4-flex", "zstd"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    specs.push(zstd_dict_spec(1000));
    specs
}

/// A blob that decodes cleanly to `len` literal bytes: an LZ4 block of one
/// literal run, or a magicless zstd frame of one raw block.
fn blob_of_length(spec: &CodecSpec, len: usize) -> Vec<u8> {
    let mut blob = Vec::new();
    if spec.family().name().starts_with("lz4") {
        // Token: literal length in the high nibble, 15 meaning "more bytes follow".
        blob.push(((len.min(15) as u8) << 4) & 0xf0);
        if len >= 15 {
            let mut rest = len - 15;
            while rest >= 255 {
                blob.push(255);
                rest -= 255;
            }
            blob.push(rest as u8);
        }
    } else {
        // Frame header descriptor 0 (no size, no checksum, no dictionary id,
        // not single-segment), then window descriptor 0x38: a 128 KiB window,
        // so the raw block's size is bounded by the output buffer alone.
        blob.extend_from_slice(&[0x00, 0x38]);
        // Block header: last block, raw, `len` bytes.
        let header = 1 | (len << 3);
        blob.extend_from_slice(&header.to_le_bytes()[..3]);
    }
    blob.extend((0..len).map(|i| b'a' + (i % 26) as u8));
    blob
}

/// Decodes `blob` and checks what every corrupt blob must give: an error
/// value from zero allocator calls.
fn decode_counted(decoder: &mut Decoder, spec: &CodecSpec, blob: &[u8]) -> Result<(), CodecError> {
    let mut out = Box::new([0u8; PAGE_SIZE]);
    let (result, calls) = allocator_calls_during(|| decoder.decode(blob, &mut out));
    assert_eq!(
        calls,
        AllocatorCalls::NONE,
        "{spec}: decoding a blob of {} bytes called the allocator ({result:?})",
        blob.len()
    );
    if let Err(error) = &result {
        assert!(
            matches!(error, CodecError::Corrupt { codec, blob_len, .. }
                if *codec == spec.family().name() && *blob_len == blob.len()),
            "{spec}: {error:?}"
        );
    }
    result
}

fn expect_corrupt(decoder: &mut Decoder, spec: &CodecSpec, blob: &[u8], what: &str) -> Corruption {
    match decode_counted(decoder, spec, blob) {
        Err(CodecError::Corrupt { reason, .. }) => reason,
        other => panic!("{spec}: {what} of {} bytes gave {other:?}", blob.len()),
    }
}

#[test]
fn the_counters_see_rust_and_c_allocations() {
    // zstd's context is malloc'ed in C, and the Decoder boxes it in Rust: if
    // either counter missed this, its zeros below would prove nothing.
    let (decoder, calls) = allocator_calls_during(|| Decoder::new(&"zstd".parse().unwrap()));
    drop(decoder);
    assert!(calls.rust > 0, "{calls:?}");
    if C_COUNTED {
        assert!(calls.c > 0, "{calls:?}");
    }
}

#[test]
fn good_blobs_decode_without_allocating() {
    for spec in every_family() {
        let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
        let mut decoder = Decoder::new(&spec).unwrap();
        for seed in 0..8 {
            let page = text_page(seed);
            let mut blob = Box::new([0u8; PAGE_SIZE]);
            let Encoded::Compressed(len) = encoder.encode(&page, &mut blob).unwrap() else {
                panic!("{spec}: text compresses")
            };
            let mut out = Box::new([0u8; PAGE_SIZE]);
            let (result, calls) = allocator_calls_during(|| decoder.decode(&blob[..len], &mut out));
            result.unwrap();
            assert_eq!(calls, AllocatorCalls::NONE, "{spec}");
            assert_eq!(out.as_slice(), page.as_slice(), "{spec}");
        }
    }
}

#[test]
fn every_truncation_is_an_error_without_allocating() {
    for spec in every_family() {
        let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
        let mut decoder = Decoder::new(&spec).unwrap();
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        let Encoded::Compressed(len) = encoder.encode(&text_page(7), &mut blob).unwrap() else {
            panic!("{spec}: text compresses")
        };
        for cut in 0..len {
            expect_corrupt(&mut decoder, &spec, &blob[..cut], "a truncated blob");
        }
    }
}

#[test]
fn blobs_of_the_wrong_length_are_errors_without_allocating() {
    for spec in every_family() {
        let mut decoder = Decoder::new(&spec).unwrap();
        // The crafted blob is right: one page of it decodes.
        decode_counted(&mut decoder, &spec, &blob_of_length(&spec, PAGE_SIZE))
            .unwrap_or_else(|e| panic!("{spec}: a page-long blob: {e}"));
        for short in [0, 1, 5, 4095] {
            let blob = blob_of_length(&spec, short);
            let reason = expect_corrupt(&mut decoder, &spec, &blob, "a short blob");
            assert_eq!(reason, Corruption::WrongLength(short), "{spec}");
        }
        for long in [PAGE_SIZE + 1, PAGE_SIZE + 100, 3 * PAGE_SIZE] {
            let blob = blob_of_length(&spec, long);
            let reason = expect_corrupt(&mut decoder, &spec, &blob, "a long blob");
            assert!(
                matches!(reason, Corruption::Rejected(_)),
                "{spec}: {reason:?}"
            );
        }
    }
}

#[test]
fn bit_flips_garbage_and_foreign_blobs_never_allocate() {
    let other_dictionary = zstd_dict_spec(5000);
    for spec in every_family() {
        let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
        let mut decoder = Decoder::new(&spec).unwrap();
        let page = text_page(11);
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        let Encoded::Compressed(len) = encoder.encode(&page, &mut blob).unwrap() else {
            panic!("{spec}: text compresses")
        };
        let mut rng = StdRng::seed_from_u64(3);
        let mut errors = 0;
        for _ in 0..3000 {
            let mut corrupt = blob[..len].to_vec();
            for _ in 0..rng.gen_range(1..6) {
                let at = rng.gen_range(0..len);
                corrupt[at] ^= 1 << rng.gen_range(0..8);
            }
            errors += usize::from(decode_counted(&mut decoder, &spec, &corrupt).is_err());
        }
        for _ in 0..1000 {
            let mut garbage = vec![0u8; rng.gen_range(0..2 * PAGE_SIZE)];
            rng.fill(&mut garbage[..]);
            errors += usize::from(decode_counted(&mut decoder, &spec, &garbage).is_err());
        }
        let mut trailing = blob[..len].to_vec();
        trailing.extend_from_slice(&[0x5a; 9]);
        errors += usize::from(decode_counted(&mut decoder, &spec, &trailing).is_err());
        // Blobs made with another codec, or with another dictionary.
        for foreign in ["lz4", "zstd"]
            .map(|s| s.parse::<CodecSpec>().unwrap())
            .iter()
            .chain([&other_dictionary])
        {
            let mut foreign_blob = Box::new([0u8; PAGE_SIZE]);
            let mut foreign_encoder = Encoder::new(foreign, RejectThreshold::default()).unwrap();
            if let Encoded::Compressed(n) =
                foreign_encoder.encode(&page, &mut foreign_blob).unwrap()
            {
                let _ = decode_counted(&mut decoder, &spec, &foreign_blob[..n]);
            }
        }
        // Almost all of these are refused; some flips only change a literal.
        assert!(errors > 2000, "{spec}: only {errors} errors");
        // And the decoder is still whole.
        decode_counted(&mut decoder, &spec, &blob[..len]).unwrap();
    }
}

#[test]
fn corrupt_errors_say_which_codec_how_long_and_why() {
    let spec = CodecSpec::lz4();
    let mut decoder = Decoder::new(&spec).unwrap();
    let error = decoder
        .decode(&blob_of_length(&spec, 5), &mut [0u8; PAGE_SIZE])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "corrupt lz4 blob of 6 bytes: decoded 5 bytes, not one page"
    );
    let spec: CodecSpec = "zstd".parse().unwrap();
    let error = Decoder::new(&spec)
        .unwrap()
        .decode(&blob_of_length(&spec, 3 * PAGE_SIZE), &mut [0u8; PAGE_SIZE])
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "corrupt zstd blob of 12293 bytes: Destination buffer is too small"
    );
}

/// A dictionary that arrives after the decoder was made (one a region trains
/// from its own pages) decodes good blobs exactly and refuses corrupt ones,
/// with no allocation either way.
#[test]
fn a_shared_dictionary_given_per_call_decodes_without_allocating() {
    let spec = zstd_dict_spec(1000);
    let shared = SharedDictionary::new(spec.dictionary().unwrap().clone());
    let mut encoder = Encoder::new(&spec, RejectThreshold::default()).unwrap();
    let mut decoder = Decoder::without_dictionary(&spec).unwrap();
    let mut out = Box::new([0u8; PAGE_SIZE]);
    for seed in 0..8 {
        let page = text_page(seed);
        let mut blob = Box::new([0u8; PAGE_SIZE]);
        let Encoded::Compressed(len) = encoder.encode(&page, &mut blob).unwrap() else {
            panic!("text compresses")
        };
        let (result, calls) = allocator_calls_during(|| {
            decoder.decode_with_dictionary(&blob[..len], &shared, &mut out)
        });
        result.unwrap();
        assert_eq!(calls, AllocatorCalls::NONE);
        assert_eq!(out.as_slice(), page.as_slice());
        for cut in [0, 1, len / 2, len - 1] {
            let (result, calls) = allocator_calls_during(|| {
                decoder.decode_with_dictionary(&blob[..cut], &shared, &mut out)
            });
            assert!(
                matches!(result, Err(CodecError::Corrupt { blob_len, .. }) if blob_len == cut),
                "{result:?}"
            );
            assert_eq!(calls, AllocatorCalls::NONE);
        }
    }
    // Another dictionary's digest does not turn these blobs into the page.
    let other = SharedDictionary::new(zstd_dict_spec(5000).dictionary().unwrap().clone());
    let page = text_page(3);
    let mut blob = Box::new([0u8; PAGE_SIZE]);
    let Encoded::Compressed(len) = encoder.encode(&page, &mut blob).unwrap() else {
        panic!("text compresses")
    };
    let result = decoder.decode_with_dictionary(&blob[..len], &other, &mut out);
    assert!(result.is_err() || out.as_slice() != page.as_slice());
}
