// Each test binary uses part of these helpers.
#![allow(dead_code)]

//! Page generators shared by the store's tests: deterministic pages of every
//! kind a real heap holds, each carrying the key and version it was made for
//! so a reader can check any page it gets back.

use rand::{rngs::StdRng, Rng, SeedableRng};
use zpage_codec::{fill_page, same_filled_word, Page, PAGE_SIZE};

pub fn page_for(key: u64, version: u64) -> Box<Page> {
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let seed =
        key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ version.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let mut rng = StdRng::seed_from_u64(seed);
    match seed % 5 {
        0 => fill_page(&mut page, (key << 24) | (version & 0xff_ffff)),
        1 => {
            const WORDS: [&str; 8] = [
                "alpha ",
                "beta ",
                "gamma ",
                "{\"id\": ",
                "null, ",
                "page ",
                "zram ",
                "\n",
            ];
            let mut at = 16;
            while at < PAGE_SIZE {
                let word = WORDS[rng.gen_range(0..WORDS.len())].as_bytes();
                let n = word.len().min(PAGE_SIZE - at);
                page[at..at + n].copy_from_slice(&word[..n]);
                at += n;
            }
        }
        2 => rng.fill(&mut page[16..]),
        3 => {
            // Pointer-heavy: 8-byte words sharing their high bytes.
            for chunk in page[16..].chunks_exact_mut(8) {
                let pointer = 0x0000_7f3a_0000_0000u64 | (rng.gen::<u32>() as u64 & 0xfff_fff8);
                chunk.copy_from_slice(&pointer.to_le_bytes());
            }
        }
        _ => {
            for (i, byte) in page[16..].iter_mut().enumerate() {
                *byte = if rng.gen_bool(0.3) {
                    rng.gen()
                } else {
                    (i / 64) as u8
                };
            }
        }
    }
    if same_filled_word(&page).is_none() {
        page[..8].copy_from_slice(&key.to_le_bytes());
        page[8..16].copy_from_slice(&version.to_le_bytes());
    }
    page
}

/// The (key, version) a page claims to be, if it is exactly the page made for them.
pub fn identify(page: &Page) -> Option<(u64, u64)> {
    let (key, version) = match same_filled_word(page) {
        Some(word) => (word >> 24, word & 0xff_ffff),
        None => (
            u64::from_le_bytes(page[..8].try_into().unwrap()),
            u64::from_le_bytes(page[8..16].try_into().unwrap()),
        ),
    };
    (page_for(key, version).as_slice() == page.as_slice()).then_some((key, version))
}
