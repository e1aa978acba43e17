//! `zpage analyze`: what will compression do for this memory?
//!
//! Memory comes from raw image files, from a live process's resident
//! anonymous pages, or from every readable process ([`scan_machine`]). Each
//! codec is measured as RFC-0219's evaluation measures it (speeds, per-page
//! decompression latency, sizes, same-filled and incompressible pages), each
//! codec's blobs are packed into each pool (memory used, effective ratio,
//! fragmentation; exact for any amount of memory, from the blobs' lengths in
//! page order: `zpage_pool::Packing`), and with root the same pages go through the kernel's zram
//! for a side-by-side `mm_stat` ([`compare_with_zram`]).
//!
//! The JSON form of [`Report`] is a stable interface, documented in
//! `docs/analyze-json.md`.
#![forbid(unsafe_code)]

mod analysis;
mod error;
mod image;
mod kernel_compare;
mod report;
mod scan;

pub use analysis::{
    analyze, analyze_source, Analysis, AnalyzeOptions, CodecResult, PoolResult, Progress,
    SkippedCodec,
};
pub use error::{AnalyzeError, Result};
pub use image::{
    all_pids, capture_process, create_image_file, private_writable_mappings, save_pages,
    ChainSource, FileSource, Mapping, MemoryImage, PageSource, PagesSource, ProcessSource, Source,
    CHUNK_PAGES,
};
pub use kernel_compare::{compare_with_zram, KernelResult};
pub use report::{Comparison, Report, REPORT_SCHEMA};
pub use scan::{scan_machine, MachineScan, ProcessSummary};
