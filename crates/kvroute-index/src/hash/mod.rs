//! Block hashing: the router's own content keys for KV blocks.
//!
//! A prompt of token ids is cut into full blocks of `block_size` tokens; a trailing partial
//! block is never hashed (engines cache only full blocks).
//!
//! * **Local hash**: XXH3-64 over the block's token ids, each encoded as a little-endian
//!   `u32`, with seed [`XXH3_SEED`] (1337). A [`HashNamespace`] (LoRA adapter name, cache
//!   salt) changes the seed.
//! * **Sequence (chained) hash**: `seq[0] = local[0]`,
//!   `seq[i] = XXH3-64(le_u64(seq[i-1]) ++ le_u64(local[i]), seed 1337)`; the chain always uses
//!   seed 1337, whatever the namespace (the namespace is already folded into every local hash).
//!
//! This is the scheme NVIDIA Dynamo's KV router uses (`compute_block_hash_for_seq`), so
//! hashes produced by other implementations of it interoperate; the published vectors in
//! `shared/data/hash_vectors.json` are reproduced exactly by the `hash_vectors` test.
//!
//! Engines' own block hashes (vLLM: SHA-256 based, SGLang: a signed 64-bit prefix of a
//! SHA-256 chain) are opaque to kvroute: the index re-hashes the token ids of each store.
//!
//! * **Extra keys**: a block whose engine hashed extra keys with its tokens (vLLM's
//!   `extra_keys`) has their digest folded into its local hash before chaining (module
//!   `extra`); blocks without extra keys hash as above.
//!
//! No function here allocates per block: callers pass a buffer that is appended to.

mod block16;
mod extra;

pub use extra::{ExtraKeysOrderError, check_extra_keys_order, fold_extra_keys};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use block16::Block16;
use kvroute_core::{HashNamespace, SequenceHash, XXH3_SEED};

/// XXH3-64 of the token ids of one block (as little-endian `u32`), under a namespace seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalBlockHash(pub u64);

/// Local hash of one block of token ids (any length; callers pass exactly `block_size`).
#[inline]
pub fn local_block_hash(tokens: &[u32], namespace: HashNamespace) -> LocalBlockHash {
    #[cfg(target_endian = "little")]
    {
        // On a little-endian target the in-memory bytes of `[u32]` are exactly the
        // little-endian encoding the scheme hashes, so no copy is needed.
        let bytes = u32_slice_as_le_bytes(tokens);
        LocalBlockHash(xxh3_64_with_seed(bytes, namespace.seed()))
    }
    #[cfg(not(target_endian = "little"))]
    {
        let mut state = xxhash_rust::xxh3::Xxh3::with_seed(namespace.seed());
        for t in tokens {
            state.update(&t.to_le_bytes());
        }
        LocalBlockHash(state.digest())
    }
}

#[cfg(target_endian = "little")]
#[inline]
fn u32_slice_as_le_bytes(tokens: &[u32]) -> &[u8] {
    let len = core::mem::size_of_val(tokens);
    // SAFETY:
    // - `tokens.as_ptr()` is valid for reads of `len` bytes: it points at `tokens.len()`
    //   initialised `u32`s, which occupy exactly `size_of_val(tokens)` bytes;
    // - `u8` has alignment 1 and every byte of an initialised `u32` is an initialised `u8`;
    // - the returned slice borrows `tokens`, so the memory outlives it and is not mutated.
    unsafe { core::slice::from_raw_parts(tokens.as_ptr().cast::<u8>(), len) }
}

/// The chained hash of a block given its parent's chained hash and its own local hash:
/// `XXH3-64(le_u64(parent) ++ le_u64(local), seed 1337)`.
///
/// Computed with XXH3's 9-to-16-byte path specialised to exactly 16 bytes and seed 1337
/// (XXH3 specification, "Small inputs: 9-16 bytes"): the two input words are XORed with
/// constants folded from the default secret and the seed, combined with a 64x64->128-bit
/// multiply folded to 64 bits, and avalanched. The `chain_hash_matches_xxh3` test checks it
/// against the general XXH3 implementation on random inputs.
#[inline]
pub fn chain_hash(parent: SequenceHash, local: LocalBlockHash) -> SequenceHash {
    // Little-endian words of XXH3's default secret at byte offsets 24, 32, 40 and 48.
    const S24: u64 = 0x1f67_b3b7_a4a4_4072;
    const S32: u64 = 0x78e5_c0cc_4ee6_79cb;
    const S40: u64 = 0x2172_ffcc_7dd0_5a82;
    const S48: u64 = 0x8e24_43f7_7446_08b8;
    const FLIP_LO: u64 = (S24 ^ S32).wrapping_add(XXH3_SEED);
    const FLIP_HI: u64 = (S40 ^ S48).wrapping_sub(XXH3_SEED);
    let lo = parent.0 ^ FLIP_LO;
    let hi = local.0 ^ FLIP_HI;
    let product = u128::from(lo) * u128::from(hi);
    let folded = (product as u64) ^ ((product >> 64) as u64);
    let h = 16u64
        .wrapping_add(lo.swap_bytes())
        .wrapping_add(hi)
        .wrapping_add(folded);
    SequenceHash(block16::avalanche(h))
}

/// Cuts token ids into full blocks and hashes them.
///
/// At a block size of 16 tokens the local hash takes a path specialised to 64-byte inputs
/// with the namespace's keys computed once (module `block16`); other block sizes use the
/// general XXH3. Both give the same hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: usize,
    namespace: HashNamespace,
    /// The specialised local hash, when `block_size` is 16.
    block16: Option<Block16>,
}

impl BlockHasher {
    /// A hasher for blocks of `block_size` tokens in `namespace`.
    ///
    /// # Panics
    /// If `block_size` is 0 (a configuration error, not input data).
    pub fn new(block_size: usize, namespace: HashNamespace) -> Self {
        assert!(block_size > 0, "block_size must be at least 1 token");
        Self {
            block_size,
            namespace,
            block16: (block_size == block16::TOKENS).then(|| Block16::new(namespace.seed())),
        }
    }

    /// The local hash of one full block (`block.len() == block_size`).
    #[inline(always)]
    fn local(&self, block: &[u32]) -> LocalBlockHash {
        match (&self.block16, <&[u32; block16::TOKENS]>::try_from(block)) {
            (Some(b16), Ok(tokens)) => LocalBlockHash(b16.hash(tokens)),
            _ => local_block_hash(block, self.namespace),
        }
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The namespace whose seed the local hashes use.
    pub fn namespace(&self) -> HashNamespace {
        self.namespace
    }

    /// Number of full blocks in `num_tokens` tokens (`num_tokens / block_size`).
    pub fn full_blocks(&self, num_tokens: usize) -> usize {
        num_tokens / self.block_size
    }

    /// Appends the local hash of every full block of `tokens` to `out`.
    pub fn local_hashes_into(&self, tokens: &[u32], out: &mut Vec<LocalBlockHash>) {
        out.reserve(self.full_blocks(tokens.len()));
        for block in tokens.chunks_exact(self.block_size) {
            out.push(self.local(block));
        }
    }

    /// Appends the chained hash of every full block of `tokens` to `out`, chaining from
    /// `parent` (the chained hash of the block before `tokens[0]`, or `None` at the start of
    /// a sequence). Returns the number of hashes appended.
    pub fn sequence_hashes_into(
        &self,
        tokens: &[u32],
        parent: Option<SequenceHash>,
        out: &mut Vec<SequenceHash>,
    ) -> usize {
        let n = self.full_blocks(tokens.len());
        out.reserve(n);
        let mut prev = parent;
        for block in tokens.chunks_exact(self.block_size) {
            let local = self.local(block);
            let seq = match prev {
                None => SequenceHash(local.0),
                Some(p) => chain_hash(p, local),
            };
            out.push(seq);
            prev = Some(seq);
        }
        n
    }

    /// Writes the chained hashes of the full blocks of `tokens` into `out[..n]`, where `n`
    /// is `min(full blocks, out.len())`, and returns `n`. Never allocates.
    pub fn sequence_hashes_to_slice(
        &self,
        tokens: &[u32],
        parent: Option<SequenceHash>,
        out: &mut [SequenceHash],
    ) -> usize {
        let mut prev = parent;
        let mut n = 0;
        for (block, slot) in tokens.chunks_exact(self.block_size).zip(out.iter_mut()) {
            let local = self.local(block);
            let seq = match prev {
                None => SequenceHash(local.0),
                Some(p) => chain_hash(p, local),
            };
            *slot = seq;
            prev = Some(seq);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_tail_is_not_hashed() {
        let h = BlockHasher::new(4, HashNamespace::DEFAULT);
        let mut out = Vec::new();
        assert_eq!(
            h.sequence_hashes_into(&[1, 2, 3, 4, 5, 6, 7], None, &mut out),
            1
        );
        assert_eq!(out.len(), 1);
        assert_eq!(h.sequence_hashes_into(&[1, 2, 3], None, &mut out), 0);
    }

    #[test]
    fn first_block_sequence_hash_is_its_local_hash() {
        let h = BlockHasher::new(2, HashNamespace::DEFAULT);
        let mut seq = Vec::new();
        let mut local = Vec::new();
        h.sequence_hashes_into(&[9, 8, 7, 6], None, &mut seq);
        h.local_hashes_into(&[9, 8, 7, 6], &mut local);
        assert_eq!(seq[0].0, local[0].0);
        assert_eq!(seq[1], chain_hash(seq[0], local[1]));
    }

    #[test]
    fn chaining_from_a_parent_equals_hashing_the_whole_sequence() {
        let h = BlockHasher::new(2, HashNamespace::DEFAULT);
        let tokens = [1, 2, 3, 4, 5, 6, 7, 8];
        let mut whole = Vec::new();
        h.sequence_hashes_into(&tokens, None, &mut whole);
        let mut tail = Vec::new();
        h.sequence_hashes_into(&tokens[4..], Some(whole[1]), &mut tail);
        assert_eq!(&whole[2..], &tail[..]);
        let mut buf = [SequenceHash(0); 3];
        assert_eq!(h.sequence_hashes_to_slice(&tokens, None, &mut buf), 3);
        assert_eq!(&buf[..], &whole[..3]);
    }

    /// The general XXH3 of `le(parent) ++ le(local)`, the reference `chain_hash` must match.
    fn chain_reference(parent: u64, local: u64) -> u64 {
        let mut buf = [0u8; 16];
        buf[..8].copy_from_slice(&parent.to_le_bytes());
        buf[8..].copy_from_slice(&local.to_le_bytes());
        xxh3_64_with_seed(&buf, XXH3_SEED)
    }

    #[test]
    fn chain_hash_matches_xxh3() {
        // SplitMix64 inputs, plus edge values, compared with the general XXH3.
        let mut rng = kvroute_core::SplitMix64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = || rng.next_u64();
        let random: Vec<(u64, u64)> = (0..10_000).map(|_| (next(), next())).collect();
        let edges = [(0, 0), (u64::MAX, u64::MAX), (0, u64::MAX), (1337, 1)];
        for &(p, l) in random.iter().chain(edges.iter()) {
            assert_eq!(
                chain_hash(SequenceHash(p), LocalBlockHash(l)).0,
                chain_reference(p, l)
            );
        }
    }
}
