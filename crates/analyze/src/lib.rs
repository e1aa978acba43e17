//! zpage-analyze (being built).
