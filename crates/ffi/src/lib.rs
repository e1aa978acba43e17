//! zpage-ffi (being built).
