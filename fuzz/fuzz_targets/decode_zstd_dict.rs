//! Arbitrary bytes, and mutations of real blobs, through the zstd-dict decoder.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zpage_codec::CodecFamily;

fuzz_target!(|data: &[u8]| zpage_fuzz::decode_arbitrary(CodecFamily::ZstdDict, data));
