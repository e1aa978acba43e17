//! A tiny seeded generator.
//!
//! The zpage tier and each kernel tier (in another process) must replay the
//! *same* access sequence, so the generator is defined here, bit for bit,
//! rather than borrowed from a crate whose output may change between versions.

/// SplitMix64 (Steele, Lea, Flood 2014): one add and three multiply-xorshifts per value.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A value in `0..bound` (Lemire's multiply-high; the bias is below 2^-32 for our bounds).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// True with probability `percent`/100.
    #[inline]
    pub fn percent(&mut self, percent: u8) -> bool {
        self.below(100) < u64::from(percent)
    }
}

/// The SplitMix64 finaliser: a stateless hash of one word (used to derive per-page content).
#[inline]
pub fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_known_first_value() {
        let mut a = SplitMix64::new(1234567);
        let mut b = SplitMix64::new(1234567);
        // Reference value of SplitMix64 for seed 1234567 (from the published C code).
        assert_eq!(a.next_u64(), 6457827717110365317);
        b.next_u64();
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn below_stays_in_range_and_spreads() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let v = rng.below(10);
            seen[v as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1200).contains(&n)), "{seen:?}");
    }
}
