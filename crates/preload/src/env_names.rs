// The environment `zpage run` sets for the library: the names both sides
// use. A file of its own, holding only these constants, because the
// `zpage` binary takes them with `include!`: it cannot depend on this
// crate, a cdylib whose interposers (malloc, mmap...) and load-time
// constructor must never be linked into zpage itself.

/// Bytes of region memory the process may keep resident (required).
pub const BUDGET_ENV: &str = "ZPAGE_RUN_BUDGET_BYTES";
/// Codec for evicted pages (default `lz4`).
pub const CODEC_ENV: &str = "ZPAGE_RUN_CODEC";
/// A stronger codec for cold pages (optional): zstd, zstd:LEVEL,
/// zstd-dict[:LEVEL] (its dictionary is trained from the process's own pages).
pub const COLD_CODEC_ENV: &str = "ZPAGE_RUN_COLD_CODEC";
/// Smallest mapping or allocation placed in a region (default 2 MiB).
pub const MIN_MAPPING_ENV: &str = "ZPAGE_RUN_MIN_MAPPING_BYTES";
