//! Corrupt blobs through the load a region's fault handler makes
//! (`PageStore::get_in_handler`): arbitrary bytes stored as the blob of a
//! compressed page, of a raw page and of a wide same-filled word, for LZ4 and
//! zstd. The load must answer a whole page or `LoadError::Corrupt`, never
//! panic (a region then ends the process with a message naming the page).
#![no_main]

use libfuzzer_sys::fuzz_target;
use zpage_store::{CompressionTrigger, LoadError, PageStore, PageStoreConfig, Put};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, blob)) = data.split_first() else {
        return;
    };
    if blob.is_empty() || blob.len() > 4096 {
        return;
    }
    let codec = if selector & 1 == 0 { "lz4" } else { "zstd:3" };
    let store = PageStore::new(PageStoreConfig {
        codec: codec.parse().unwrap(),
        ..PageStoreConfig::default()
    })
    .unwrap();
    let mut worker = store.worker().unwrap();
    // A page of each kind, to take its reference's kind from.
    let mut page = [0u8; 4096];
    let like = match (selector >> 1) % 3 {
        0 => {
            for (i, byte) in page.iter_mut().enumerate() {
                *byte = (i % 7) as u8;
            }
            page
        }
        1 => {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for byte in page.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            page
        }
        _ => {
            for word in page.chunks_exact_mut(8) {
                word.copy_from_slice(&0x8000_0000_0000_0001u64.to_le_bytes());
            }
            page
        }
    };
    let Put::Stored { page_ref, .. } = store
        .put(&mut worker, &like, CompressionTrigger::Eager)
        .unwrap()
    else {
        return;
    };
    if !page_ref.in_pool() {
        return;
    }
    let corrupt = store.put_blob_for_test(&worker, page_ref, blob).unwrap();
    let mut out = Box::new([0xa5u8; 4096]);
    match store.get_in_handler(&mut worker, corrupt, &mut out) {
        Ok(()) | Err(LoadError::Corrupt { .. }) => {}
        Err(other) => panic!("a corrupt blob answered {other:?}"),
    }
    store.free(corrupt);
    store.free(page_ref);
});
