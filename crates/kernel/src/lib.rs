//! zpage-kernel (being built).
