//! The seeded generator of test and benchmark inputs: kvroute's own SplitMix64
//! (`kvroute_core::SplitMix64`), with the draws the tests and workloads need. The same
//! stream on every platform.

/// kvroute-core's SplitMix64 with test-input draws (ranges, token ids).
#[derive(Clone, Debug)]
pub struct SplitMix64(kvroute_core::SplitMix64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(kvroute_core::SplitMix64::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A value in `0..n` (`n > 0`; slightly biased for huge `n`, irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.below(n)
    }

    /// A value in `lo..=hi` (slightly biased for huge ranges, irrelevant here).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// `n` synthetic token ids (below a 152k vocabulary, like recent LLM tokenizers).
    pub fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.below(152_000) as u32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn draws_stay_in_their_ranges_and_follow_the_core_stream() {
        let mut r = SplitMix64::new(0);
        // kvroute-core's stream from seed 0 (its own test checks the reference values).
        assert_eq!(r.next_u64(), kvroute_core::SplitMix64::new(0).next_u64());
        assert!((0..1_000).all(|_| (3..=9).contains(&r.range(3, 9))));
        assert!(r.tokens(1_000).iter().all(|&t| t < 152_000));
    }
}
