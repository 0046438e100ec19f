//! The names of a KV block: the engine's own hash ([`EngineHash`]), kvroute's chained
//! content hash ([`SequenceHash`]) and the namespace that seeds it ([`HashNamespace`]).
//!
//! Computing sequence hashes is the prefix index's job (`kvroute-index`, module `hash`);
//! this module only names them, so that the wire decoder, the index and the router agree
//! on the types without depending on each other.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The XXH3 seed of the shared block-hashing scheme (NVIDIA Dynamo's `XXH3_SEED`, 1337).
pub const XXH3_SEED: u64 = 1337;

/// An engine's own block hash, kept opaque: vLLM's unsigned 64-bit value, SGLang's signed
/// 64-bit value reinterpreted as `u64` (two's complement), or a 64-bit digest of a 32-byte
/// binary hash (the wire decoder's job). Used only to resolve later removals and parents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EngineHash(pub u64);

impl From<i64> for EngineHash {
    /// SGLang's signed hash, reinterpreted bit for bit (two's complement).
    fn from(h: i64) -> Self {
        Self(h as u64)
    }
}

/// The chained hash that identifies a block *and its whole prefix*: two requests share
/// block `i` of their prompts exactly when they share `SequenceHash` number `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceHash(pub u64);

/// What changes the seed of local block hashes: a LoRA adapter name and a cache salt.
///
/// Seed rule (the LoRA part matches Dynamo's router, verified by the `lora` hash vector):
/// `seed = 1337 + XXH3-64(lora_name, seed 0)` (wrapping) when a LoRA name is present, then
/// `seed = seed + XXH3-64(cache_salt, seed 1)` (wrapping) when a cache salt is present. The
/// salt uses seed 1 so that a salt and a LoRA name with the same text give different seeds.
/// The salt rule is kvroute's own: no published vector covers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashNamespace {
    seed: u64,
}

impl Default for HashNamespace {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl HashNamespace {
    /// The base model without a cache salt: seed 1337.
    pub const DEFAULT: Self = Self { seed: XXH3_SEED };

    /// The namespace of a LoRA adapter and/or cache salt (see the type's seed rule).
    pub fn new(lora_name: Option<&str>, cache_salt: Option<&str>) -> Self {
        let mut seed = XXH3_SEED;
        if let Some(name) = lora_name {
            seed = seed.wrapping_add(xxh3_64_with_seed(name.as_bytes(), 0));
        }
        if let Some(salt) = cache_salt {
            seed = seed.wrapping_add(xxh3_64_with_seed(salt.as_bytes(), 1));
        }
        Self { seed }
    }

    /// The XXH3 seed used for local block hashes in this namespace.
    pub fn seed(self) -> u64 {
        self.seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_separate_lora_and_salt() {
        let a = HashNamespace::new(Some("x"), None);
        let b = HashNamespace::new(None, Some("x"));
        assert_ne!(a, b);
        assert_ne!(a, HashNamespace::DEFAULT);
        assert_eq!(HashNamespace::new(None, None), HashNamespace::DEFAULT);
        assert_eq!(HashNamespace::DEFAULT.seed(), 1337);
    }

    #[test]
    fn signed_engine_hashes_keep_their_bits() {
        assert_eq!(EngineHash::from(-1i64), EngineHash(u64::MAX));
        assert_eq!(EngineHash::from(5i64), EngineHash(5));
    }
}
