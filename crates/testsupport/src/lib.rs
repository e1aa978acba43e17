//! What the tests of several zpage crates share, kept in one place:
//!
//! - [`alloc`]: a global allocator that counts the calls each thread makes,
//!   for the tests that prove a path (a region's fault path, a store load, a
//!   decode) allocates nothing.
//!
//! A dev-dependency only: no library crate's normal build depends on it, and
//! it depends on no zpage crate, so every layer can use it without a cycle.

pub mod alloc;
