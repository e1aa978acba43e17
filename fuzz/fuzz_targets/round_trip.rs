//! Arbitrary pages through every codec: encode, then decode or refill, must give the page back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| zpage_fuzz::round_trip(data));
