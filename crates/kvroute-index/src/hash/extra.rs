//! Folding a block's extra keys into its identity.
//!
//! A block whose engine hashed extra keys with its tokens (vLLM: multimodal identifiers,
//! the cache salt of a sequence's first block, prompt-embedding digests) has the local hash
//!
//! `local'[i] = XXH3-64(le_u64(local[i]) ++ le_u64(digest[i]) ++ "extrakey", seed 1337)`
//!
//! where `digest[i]` is the block's [`ExtraKeysDigest`] (encoding in `kvroute-core`, module
//! `extra_keys`); the chain then runs on `local'` as on any local hash, so the sequence
//! hash of that block and of every block after it differ from those of the same tokens
//! without the keys (vLLM's own hash chains the same way: `hash_block_tokens` hashes the
//! parent hash, the block's tokens and its extra keys together). The 24-byte input is never
//! the 16-byte input of a chain step. A block without a digest keeps `local[i]` unchanged,
//! so every hash of a prompt without extra keys is what it was before extra keys existed.

use core::fmt;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::{BlockHasher, LocalBlockHash, chain_hash};
use kvroute_core::{BlockExtraKeys, ExtraKeysDigest, SequenceHash, XXH3_SEED};

/// The trailing word of the fold's input (module docs).
const FOLD_TAG: &[u8; 8] = b"extrakey";

/// The local hash of a block with extra keys: `local` with `digest` folded in (module docs).
#[inline]
pub fn fold_extra_keys(local: LocalBlockHash, digest: ExtraKeysDigest) -> LocalBlockHash {
    let mut buf = [0u8; 24];
    buf[..8].copy_from_slice(&local.0.to_le_bytes());
    buf[8..16].copy_from_slice(&digest.0.to_le_bytes());
    buf[16..].copy_from_slice(FOLD_TAG);
    LocalBlockHash(xxh3_64_with_seed(&buf, XXH3_SEED))
}

/// A request's per-block extra keys not in strictly increasing block order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraKeysOrderError {
    /// Position (in the given list) of the first entry whose block is not after the block
    /// of the entry before it.
    pub position: usize,
}

impl fmt::Display for ExtraKeysOrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "extra keys entry {} does not name a later block than the entry before it",
            self.position
        )
    }
}

impl std::error::Error for ExtraKeysOrderError {}

/// Checks that `extra` names blocks in strictly increasing order.
///
/// # Errors
/// [`ExtraKeysOrderError`] naming the first entry out of order.
pub fn check_extra_keys_order(extra: &[BlockExtraKeys]) -> Result<(), ExtraKeysOrderError> {
    match extra.windows(2).position(|w| w[1].block <= w[0].block) {
        Some(i) => Err(ExtraKeysOrderError { position: i + 1 }),
        None => Ok(()),
    }
}

impl BlockHasher {
    /// [`sequence_hashes_into`](BlockHasher::sequence_hashes_into) for a prompt whose blocks
    /// carry extra keys: `extra` lists, in strictly increasing block order, the blocks of
    /// `tokens` that have keys (block `0` is `tokens[..block_size]`); each one's digest is
    /// folded into its local hash (module docs). Entries naming a block past the last full
    /// block of `tokens` are not used (a trailing partial block is never hashed). With an
    /// empty `extra` this is exactly `sequence_hashes_into`.
    ///
    /// # Errors
    /// [`ExtraKeysOrderError`] when `extra` is out of order; nothing is appended then.
    pub fn sequence_hashes_with_extra_keys_into(
        &self,
        tokens: &[u32],
        parent: Option<SequenceHash>,
        extra: &[BlockExtraKeys],
        out: &mut Vec<SequenceHash>,
    ) -> Result<usize, ExtraKeysOrderError> {
        check_extra_keys_order(extra)?;
        let n = self.full_blocks(tokens.len());
        out.reserve(n);
        let mut prev = parent;
        let mut pending = extra.iter().peekable();
        for (i, block) in tokens.chunks_exact(self.block_size).enumerate() {
            let mut local = self.local(block);
            if let Some(e) = pending.next_if(|e| e.block as usize == i) {
                local = fold_extra_keys(local, e.digest);
            }
            let seq = match prev {
                None => SequenceHash(local.0),
                Some(p) => chain_hash(p, local),
            };
            out.push(seq);
            prev = Some(seq);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_core::HashNamespace;

    fn keys(block: u32, digest: u64) -> BlockExtraKeys {
        BlockExtraKeys {
            block,
            digest: ExtraKeysDigest(digest),
        }
    }

    #[test]
    fn fold_is_xxh3_of_local_digest_and_tag() {
        let mut want = Vec::new();
        want.extend_from_slice(&5u64.to_le_bytes());
        want.extend_from_slice(&7u64.to_le_bytes());
        want.extend_from_slice(b"extrakey");
        assert_eq!(
            fold_extra_keys(LocalBlockHash(5), ExtraKeysDigest(7)).0,
            xxh3_64_with_seed(&want, 1337)
        );
    }

    #[test]
    fn keys_on_block_one_change_it_and_what_follows_only() {
        let h = BlockHasher::new(2, HashNamespace::DEFAULT);
        let tokens = [1, 2, 3, 4, 5, 6, 7];
        let (mut plain, mut local, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
        h.sequence_hashes_into(&tokens, None, &mut plain);
        h.local_hashes_into(&tokens, &mut local);
        let n = h
            .sequence_hashes_with_extra_keys_into(
                &tokens,
                None,
                &[keys(1, 9), keys(3, 1)],
                &mut keyed,
            )
            .unwrap();
        assert_eq!(n, 3);
        let l1 = fold_extra_keys(local[1], ExtraKeysDigest(9));
        let s1 = chain_hash(plain[0], l1);
        let s2 = chain_hash(s1, local[2]);
        assert_eq!(keyed, vec![plain[0], s1, s2]);
        assert_ne!(keyed[1], plain[1]);
        assert_ne!(keyed[2], plain[2]);
        let mut same = Vec::new();
        h.sequence_hashes_with_extra_keys_into(&tokens, None, &[], &mut same)
            .unwrap();
        assert_eq!(same, plain);
    }

    #[test]
    fn out_of_order_keys_are_an_error_that_appends_nothing() {
        let h = BlockHasher::new(2, HashNamespace::DEFAULT);
        let mut out = Vec::new();
        let e = h.sequence_hashes_with_extra_keys_into(
            &[1, 2, 3, 4],
            None,
            &[keys(1, 1), keys(1, 2)],
            &mut out,
        );
        assert_eq!(e, Err(ExtraKeysOrderError { position: 1 }));
        assert!(out.is_empty());
    }
}
