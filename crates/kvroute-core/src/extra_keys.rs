//! Extra keys: what an engine folds into a block's identity beyond its token ids (vLLM's
//! per-block `extra_keys`: multimodal identifiers with their offset in the block, the cache
//! salt on a sequence's first block, prompt-embedding digests), reduced to one 64-bit
//! [`ExtraKeysDigest`] per block.
//!
//! **Encoding** (kvroute's own; `docs/WIRE-FORMAT.md`, "Extra keys"): a block's keys are
//! encoded one after another, in the engine's order, each as a one-byte type tag and its
//! body; the digest is XXH3-64 of the whole encoding with seed [`XXH3_SEED`] (1337), the
//! seed of the block hasher:
//!
//! | key | tag | body |
//! |---|---|---|
//! | string | `0x01` | `le_u64(byte length)`, the UTF-8 bytes |
//! | integer (bools as 0 / 1) | `0x02` | `le_i128(value)` (16 bytes, two's complement) |
//! | float | `0x03` | `le_u64(f64 bits)` |
//! | binary | `0x04` | `le_u64(byte length)`, the bytes |
//! | nil | `0x05` | nothing |
//! | array (vLLM's `(identifier, offset)`) | `0x06` | `le_u64(element count)`, each element encoded by these rules |
//! | map (not interpreted) | `0x07` | nothing |
//!
//! Lengths make the encoding prefix-free, so two different key lists never encode alike.
//! A block without extra keys has no digest and hashes exactly as its tokens do.
//!
//! A stored block whose keys kvroute cannot reproduce (a map, whose content the decoder
//! does not keep) gets [`ExtraKeysDigest::unreproducible`] instead: XXH3-64 of
//! `0x08 ++ le_u64(engine hash)`, seed 1337. The engine's hash covers the keys, so blocks
//! with different keys still differ; no key list encodes to a leading `0x08`, so no request
//! presents that digest and none is credited with the block.

use xxhash_rust::xxh3::{Xxh3, xxh3_64_with_seed};

use crate::hash::{EngineHash, XXH3_SEED};

/// The 64-bit digest of one block's extra keys (see the module docs for the encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExtraKeysDigest(pub u64);

impl ExtraKeysDigest {
    /// The digest of a stored block whose keys cannot be reproduced (module docs), from
    /// the engine's own hash of that block.
    pub fn unreproducible(engine: EngineHash) -> Self {
        let mut buf = [0u8; 9];
        buf[0] = tag::UNREPRODUCIBLE;
        buf[1..].copy_from_slice(&engine.0.to_le_bytes());
        Self(xxh3_64_with_seed(&buf, XXH3_SEED))
    }
}

/// The extra keys a request presents for one of its prompt's blocks: the block's index in
/// the prompt (0-based, in blocks) and the digest of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockExtraKeys {
    /// Index of the block in the prompt (0 = the first full block).
    pub block: u32,
    /// Digest of the block's extra keys, as [`ExtraKeysHasher`] computes it.
    pub digest: ExtraKeysDigest,
}

/// Type tags of the encoding (module docs).
mod tag {
    pub const STR: u8 = 0x01;
    pub const INT: u8 = 0x02;
    pub const FLOAT: u8 = 0x03;
    pub const BYTES: u8 = 0x04;
    pub const NIL: u8 = 0x05;
    pub const ARRAY: u8 = 0x06;
    pub const MAP: u8 = 0x07;
    /// Leads only the input of [`super::ExtraKeysDigest::unreproducible`].
    pub const UNREPRODUCIBLE: u8 = 0x08;
}

/// Streams one block's extra keys into their digest, in the engine's order. Never
/// allocates: XXH3's streaming state lives inline.
///
/// An array key is written as [`ExtraKeysHasher::array`] with its element count, followed
/// by its elements.
#[derive(Clone)]
pub struct ExtraKeysHasher {
    state: Xxh3,
    keys: usize,
}

impl Default for ExtraKeysHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for ExtraKeysHasher {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExtraKeysHasher")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl ExtraKeysHasher {
    /// An empty key list.
    pub fn new() -> Self {
        Self {
            state: Xxh3::with_seed(XXH3_SEED),
            keys: 0,
        }
    }

    fn tagged(&mut self, tag: u8, body: &[u8]) -> &mut Self {
        self.state.update(&[tag]);
        self.state.update(body);
        self.keys += 1;
        self
    }

    fn sized(&mut self, tag: u8, bytes: &[u8]) -> &mut Self {
        self.tagged(tag, &(bytes.len() as u64).to_le_bytes());
        self.state.update(bytes);
        self
    }

    /// A string key (LoRA name, multimodal identifier, cache salt).
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.sized(tag::STR, s.as_bytes())
    }

    /// An integer key (a bool is the integer 0 or 1).
    pub fn int(&mut self, v: i128) -> &mut Self {
        self.tagged(tag::INT, &v.to_le_bytes())
    }

    /// A float key, by its bits (so `0.0` and `-0.0` differ, as their bits do).
    pub fn float(&mut self, v: f64) -> &mut Self {
        self.tagged(tag::FLOAT, &v.to_bits().to_le_bytes())
    }

    /// A binary key (for example a prompt-embedding digest).
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.sized(tag::BYTES, b)
    }

    /// A nil key.
    pub fn nil(&mut self) -> &mut Self {
        self.tagged(tag::NIL, &[])
    }

    /// The start of an array key of `len` elements; write the elements next.
    pub fn array(&mut self, len: usize) -> &mut Self {
        self.tagged(tag::ARRAY, &(len as u64).to_le_bytes())
    }

    /// A map key, whose content is not interpreted (only its presence is encoded).
    pub fn map(&mut self) -> &mut Self {
        self.tagged(tag::MAP, &[])
    }

    /// Keys written so far (an array and each of its elements count one each).
    pub fn keys(&self) -> usize {
        self.keys
    }

    /// The digest of the keys written, or `None` when none were: a block without extra
    /// keys has no digest.
    pub fn finish(&self) -> Option<ExtraKeysDigest> {
        (self.keys > 0).then(|| ExtraKeysDigest(self.state.digest()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64_with_seed;

    #[test]
    fn digest_is_xxh3_of_the_documented_encoding() {
        let mut h = ExtraKeysHasher::new();
        h.str("ab")
            .int(-2)
            .bytes(&[9])
            .nil()
            .array(2)
            .str("i")
            .int(3);
        let mut want = vec![0x01];
        want.extend_from_slice(&2u64.to_le_bytes());
        want.extend_from_slice(b"ab");
        want.push(0x02);
        want.extend_from_slice(&(-2i128).to_le_bytes());
        want.push(0x04);
        want.extend_from_slice(&1u64.to_le_bytes());
        want.push(9);
        want.push(0x05);
        want.push(0x06);
        want.extend_from_slice(&2u64.to_le_bytes());
        want.push(0x01);
        want.extend_from_slice(&1u64.to_le_bytes());
        want.extend_from_slice(b"i");
        want.push(0x02);
        want.extend_from_slice(&3i128.to_le_bytes());
        assert_eq!(
            h.finish(),
            Some(ExtraKeysDigest(xxh3_64_with_seed(&want, 1337)))
        );
        assert_eq!(ExtraKeysHasher::new().finish(), None);
    }

    #[test]
    fn unreproducible_digest_hashes_the_engine_hash_behind_its_own_tag() {
        let mut want = vec![0x08];
        want.extend_from_slice(&0x0102u64.to_le_bytes());
        assert_eq!(
            ExtraKeysDigest::unreproducible(EngineHash(0x0102)),
            ExtraKeysDigest(xxh3_64_with_seed(&want, 1337))
        );
    }

    #[test]
    fn lengths_keep_key_boundaries() {
        let one = ExtraKeysHasher::new().str("ab").finish();
        let two = ExtraKeysHasher::new().str("a").str("b").finish();
        assert_ne!(one, two);
    }
}
