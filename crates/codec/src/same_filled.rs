use crate::{Page, PAGE_SIZE};

const WORD: usize = std::mem::size_of::<u64>();

fn word_at(page: &Page, index: usize) -> u64 {
    let start = index * WORD;
    let mut bytes = [0u8; WORD];
    bytes.copy_from_slice(&page[start..start + WORD]);
    u64::from_ne_bytes(bytes)
}

/// The repeated word if the page is one 8-byte word repeated, as zram's
/// `page_same_filled` decides it (so our count equals zram's `same_pages`).
///
/// The last word is compared first: most pages that are not same-filled
/// fail there, making the common rejection O(1).
pub fn same_filled_word(page: &Page) -> Option<u64> {
    let last = PAGE_SIZE / WORD - 1;
    let first = word_at(page, 0);
    if word_at(page, last) != first {
        return None;
    }
    page.chunks_exact(WORD)
        .all(|chunk| chunk == first.to_ne_bytes())
        .then_some(first)
}

/// Fills a page with one repeated word (the inverse of [`same_filled_word`]).
pub fn fill_page(dst: &mut Page, word: u64) {
    let bytes = word.to_ne_bytes();
    for chunk in dst.chunks_exact_mut(WORD) {
        chunk.copy_from_slice(&bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_page_is_same_filled_with_zero() {
        assert_eq!(same_filled_word(&[0u8; PAGE_SIZE]), Some(0));
    }

    #[test]
    fn repeated_word_is_detected_and_refilled() {
        let mut page = [0u8; PAGE_SIZE];
        fill_page(&mut page, 0xdead_beef_0102_0304);
        assert_eq!(same_filled_word(&page), Some(0xdead_beef_0102_0304));
    }

    #[test]
    fn one_differing_byte_anywhere_defeats_detection() {
        for position in [0, 7, 8, 2047, 4088, 4095] {
            let mut page = [0xabu8; PAGE_SIZE];
            page[position] ^= 1;
            assert_eq!(same_filled_word(&page), None, "byte {position}");
        }
    }

    #[test]
    fn repeated_byte_pattern_with_period_not_dividing_eight_is_not_same_filled() {
        let mut page = [0u8; PAGE_SIZE];
        for (i, byte) in page.iter_mut().enumerate() {
            *byte = (i % 3) as u8;
        }
        assert_eq!(same_filled_word(&page), None);
    }
}
