//! zpage-region (being built).
