//! zpage-pool (being built).
