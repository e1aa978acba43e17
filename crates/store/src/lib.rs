//! zpage-store (being built).
