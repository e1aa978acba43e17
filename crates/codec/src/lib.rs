//! The page codec: the first layer of zpage.
//!
//! One 4 KiB page goes in; one of three outcomes comes out ([`Encoded`]):
//! - **same-filled**: the page is one 8-byte word repeated (zero pages are the
//!   common case). Checked before compressing, as zram's `page_same_filled`
//!   does; nothing needs storing but the word.
//! - **compressed**: the blob is strictly smaller than the reject threshold.
//! - **incompressible**: the codec could not get under the threshold; the
//!   caller stores the page raw (zram's `ZRAM_HUGE`, zswap's raw entries).
//!
//! Compression state lives in an [`Encoder`], decompression state in a
//! [`Decoder`]; each thread owns its own, so neither path allocates per call
//! and decoders never share a lock. A blob handed to [`Decoder::decode`] is
//! untrusted input: a corrupt or truncated blob is an error value, never a
//! panic or an out-of-bounds write.
#![forbid(unsafe_code)]

mod engine;
mod error;
mod same_filled;
mod spec;
mod threshold;

pub use engine::{Decoder, Encoder, SharedDictionary};
pub use error::{CodecError, Corruption, Result};
pub use same_filled::{fill_page, same_filled_word};
pub use spec::{CodecFamily, CodecSpec, Dictionary};
pub use threshold::RejectThreshold;

/// Size of the pages zpage handles: the x86-64 and arm64 base page.
pub const PAGE_SIZE: usize = 4096;

/// One uncompressed page.
pub type Page = [u8; PAGE_SIZE];

/// What [`Encoder::encode`] made of a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoded {
    /// Every 8-byte word of the page equals this value; nothing is stored but the word.
    SameFilled(u64),
    /// The first `len` bytes of the destination buffer hold the blob; `len` is below the threshold.
    Compressed(usize),
    /// The compressed form would reach the reject threshold: store the page raw.
    Incompressible,
}

/// A fresh zeroed page on the heap (a page on the stack is a 4 KiB frame; tests and tools want many).
pub fn zeroed_page() -> Box<Page> {
    Box::new([0u8; PAGE_SIZE])
}
