//! What a store's per-block `extra_keys` add to its blocks' identity (`docs/WIRE-FORMAT.md`,
//! "Extra keys").
//!
//! vLLM sends, per stored block, the tuple it hashed with the block's tokens
//! (`generate_block_hash_extra_keys`: LoRA name, multimodal keys, the cache salt on a
//! sequence's first block, the prompt-embedding digest), or nil. For each block:
//! * a leading key equal to the store's `lora_name` (or, older vLLM, its integer
//!   `lora_id`) is the LoRA key, already the store's namespace: it is left out;
//! * no key left: no digest, the block hashes as its tokens do in its namespace;
//! * otherwise the digest of the keys left ([`extra_keys_digest`]), or, when one of them
//!   is or holds a map (whose content the decoder does not keep),
//!   [`ExtraKeysDigest::unreproducible`] from the block's engine hash, which no request
//!   presents.
//!
//! The index folds each digest into that block's local hash (`kvroute-index`, module
//! `hash::extra`).

use kvroute_core::{EngineHash, ExtraKeysDigest};
use kvroute_wire::{BlockStored, ExtraKey};

use crate::extra_keys::{extra_keys_digest, holds_map};

/// Whether `key` is the store's LoRA key (its `lora_name`, or its integer `lora_id`).
fn is_lora_key(s: &BlockStored, key: &ExtraKey) -> bool {
    match key {
        ExtraKey::Str(name) => s.lora_name.as_deref() == Some(name.as_str()),
        ExtraKey::Int(id) => s.lora_id.is_some_and(|l| i128::from(l) == *id),
        _ => false,
    }
}

/// The digest of block `j`'s keys by the module's rules, or `None` when it has none.
fn block_digest(s: &BlockStored, j: usize, keys: &[ExtraKey]) -> Option<ExtraKeysDigest> {
    let keys = match keys.split_first() {
        Some((first, rest)) if is_lora_key(s, first) => rest,
        _ => keys,
    };
    if keys.iter().any(holds_map) {
        // An entry past the store's blocks has no engine hash; the index rejects the store
        // for its count anyway.
        let engine = s.block_hashes.get(j).copied().unwrap_or(EngineHash(0));
        return Some(ExtraKeysDigest::unreproducible(engine));
    }
    extra_keys_digest(keys)
}

/// The per-block extra-keys digests of a store, as
/// [`RunIndex::store_with_extra_keys`](kvroute_index::runs::RunIndex::store_with_extra_keys)
/// takes them: one entry per `extra_keys` entry (the index checks that this is one per
/// block), or empty when the store sends no `extra_keys` (no allocation then) or no block
/// has a key left after the module's rules (nothing can then be credited to the wrong
/// block, whatever the entry count).
pub fn block_extra_keys(s: &BlockStored) -> Vec<Option<ExtraKeysDigest>> {
    let Some(per_block) = &s.extra_keys else {
        return Vec::new();
    };
    let digests: Vec<Option<ExtraKeysDigest>> = per_block
        .iter()
        .enumerate()
        .map(|(j, keys)| keys.as_deref().and_then(|k| block_digest(s, j, k)))
        .collect();
    if digests.iter().all(Option::is_none) {
        return Vec::new();
    }
    digests
}
