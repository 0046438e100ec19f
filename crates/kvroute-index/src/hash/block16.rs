//! XXH3-64 specialised to one block of 16 token ids (64 bytes), the common block size of
//! vLLM and of Dynamo's router.
//!
//! XXH3 (specification: "XXH3 algorithm overview", inputs of 17 to 128 bytes) hashes a
//! 64-byte input as `avalanche(64·P1 + Σ fold(mix))` over four 16-byte lanes: bytes 0..16
//! with secret bytes 0..16, bytes 48..64 with 16..32, bytes 16..32 with 32..48 and bytes
//! 32..48 with 48..64. Each lane XORs its two input words with `secret + seed` and
//! `secret - seed`, multiplies them 64x64 -> 128 bits and folds the product to 64 bits.
//!
//! With the block size and the seed fixed, the eight `secret ± seed` keys are computed once
//! per hasher, and the 64-bit input words are assembled from pairs of token ids
//! arithmetically (`lo | hi << 32`, the little-endian reading of the bytes), so the path
//! needs no byte view of the tokens and no length dispatch. The general XXH3 of
//! `xxhash-rust` stays the reference: the `block16_matches_xxh3` test compares both on
//! random blocks and seeds.

/// XXH3's `PRIME64_1`.
const PRIME64_1: u64 = 0x9e37_79b1_85eb_ca87;

/// The first 64 bytes of XXH3's default secret, as little-endian 64-bit words.
const SECRET: [u64; 8] = [
    0xbe4b_a423_396c_feb8,
    0x1cad_21f7_2c81_017c,
    0xdb97_9083_e96d_d4de,
    0x1f67_b3b7_a4a4_4072,
    0x78e5_c0cc_4ee6_79cb,
    0x2172_ffcc_7dd0_5a82,
    0x8e24_43f7_7446_08b8,
    0x4c26_3a81_e690_35e0,
];

/// Tokens per block on this path.
pub(crate) const TOKENS: usize = 16;

/// The keys of XXH3-64 over 64 bytes with one seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Block16 {
    /// `SECRET[2i] + seed`, `SECRET[2i + 1] - seed` (wrapping), in secret order.
    keys: [u64; 8],
}

impl Block16 {
    /// The keys for `seed`.
    pub(crate) const fn new(seed: u64) -> Self {
        let mut keys = [0u64; 8];
        let mut i = 0;
        while i < 8 {
            keys[i] = SECRET[i].wrapping_add(seed);
            keys[i + 1] = SECRET[i + 1].wrapping_sub(seed);
            i += 2;
        }
        Self { keys }
    }

    /// XXH3-64 of the 64 bytes of `tokens` (each a little-endian `u32`) with this seed.
    #[inline(always)]
    pub(crate) fn hash(&self, tokens: &[u32; TOKENS]) -> u64 {
        let w = |i: usize| u64::from(tokens[2 * i]) | (u64::from(tokens[2 * i + 1]) << 32);
        let k = &self.keys;
        let mut acc = (TOKENS as u64 * 4).wrapping_mul(PRIME64_1);
        acc = acc.wrapping_add(fold(w(0) ^ k[0], w(1) ^ k[1]));
        acc = acc.wrapping_add(fold(w(6) ^ k[2], w(7) ^ k[3]));
        acc = acc.wrapping_add(fold(w(2) ^ k[4], w(3) ^ k[5]));
        acc = acc.wrapping_add(fold(w(4) ^ k[6], w(5) ^ k[7]));
        avalanche(acc)
    }
}

/// The 128-bit product of `a` and `b`, its halves XORed.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// XXH3's final mix.
#[inline(always)]
pub(crate) fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(0x1656_6791_9e37_79f9);
    h ^ (h >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_testkit::SplitMix64;
    use xxhash_rust::xxh3::xxh3_64_with_seed;

    #[test]
    fn block16_matches_xxh3() {
        let mut s = SplitMix64::new(7);
        for round in 0..2_000 {
            let seed = match round % 4 {
                0 => crate::hash::XXH3_SEED,
                1 => 0,
                2 => u64::MAX,
                _ => s.next_u64(),
            };
            let mut tokens = [0u32; TOKENS];
            for t in &mut tokens {
                // Full 32-bit range, so the high half of every word is exercised.
                *t = s.next_u64() as u32;
            }
            let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
            assert_eq!(
                Block16::new(seed).hash(&tokens),
                xxh3_64_with_seed(&bytes, seed),
                "round {round}, seed {seed:#x}"
            );
        }
    }
}
