//! The digest of one block's extra keys as the wire decoder gives them ([`ExtraKey`]), for
//! requests and stores alike. Encoding: [`ExtraKeysHasher`] (`kvroute-core`, module
//! `extra_keys`; `docs/WIRE-FORMAT.md`, "Extra keys").
//!
//! A request presents the keys vLLM hashed for its blocks, in vLLM's order
//! (`generate_block_hash_extra_keys` in vLLM's `kv_cache_utils.py`: multimodal keys, then
//! the cache salt on block 0 only, then the prompt-embedding digest; the LoRA name, also
//! in vLLM's list, is the request's [`HashNamespace`](crate::HashNamespace) in kvroute and
//! is left out), with [`block_extra_keys`] per block that has any, in
//! [`RouteRequest::extra_keys`](crate::RouteRequest::extra_keys).

use kvroute_core::{BlockExtraKeys, ExtraKeysDigest, ExtraKeysHasher};
use kvroute_wire::ExtraKey;

/// Writes `key` (and, for an array, its elements) to `h`.
fn write_key(h: &mut ExtraKeysHasher, key: &ExtraKey) {
    match key {
        ExtraKey::Str(s) => h.str(s),
        ExtraKey::Int(v) => h.int(*v),
        ExtraKey::Float(v) => h.float(*v),
        ExtraKey::Bytes(b) => h.bytes(b),
        ExtraKey::Nil => h.nil(),
        ExtraKey::List(items) => {
            h.array(items.len());
            items.iter().for_each(|k| write_key(h, k));
            h
        }
        // A map, and any kind a later decoder adds: only its presence is encoded.
        ExtraKey::Nested | _ => h.map(),
    };
}

/// Whether `key` is or holds a map, whose content the decoder does not keep.
pub(crate) fn holds_map(key: &ExtraKey) -> bool {
    match key {
        ExtraKey::List(items) => items.iter().any(holds_map),
        ExtraKey::Str(_)
        | ExtraKey::Int(_)
        | ExtraKey::Float(_)
        | ExtraKey::Bytes(_)
        | ExtraKey::Nil => false,
        ExtraKey::Nested | _ => true,
    }
}

/// The digest of one block's extra keys, in the engine's order; `None` for an empty list
/// (a block without extra keys hashes as its tokens do). Never allocates.
pub fn extra_keys_digest(keys: &[ExtraKey]) -> Option<ExtraKeysDigest> {
    let mut h = ExtraKeysHasher::new();
    keys.iter().for_each(|k| write_key(&mut h, k));
    h.finish()
}

/// The entry of [`RouteRequest::extra_keys`](crate::RouteRequest::extra_keys) for block
/// `block` of a prompt (0-based) whose engine hashes `keys` with it; `None` when `keys` is
/// empty. vLLM's cache salt `s` alone is `block_extra_keys(0, &[ExtraKey::Str(s)])`.
pub fn block_extra_keys(block: u32, keys: &[ExtraKey]) -> Option<BlockExtraKeys> {
    extra_keys_digest(keys).map(|digest| BlockExtraKeys { block, digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_encode_as_the_hasher_writes_them() {
        let keys = [
            ExtraKey::List(vec![ExtraKey::Str("img".into()), ExtraKey::Int(-3)]),
            ExtraKey::Str("salt".into()),
            ExtraKey::Bytes(vec![1, 2]),
            ExtraKey::Nil,
            ExtraKey::Float(1.5),
        ];
        let mut h = ExtraKeysHasher::new();
        h.array(2)
            .str("img")
            .int(-3)
            .str("salt")
            .bytes(&[1, 2])
            .nil()
            .float(1.5);
        assert_eq!(extra_keys_digest(&keys), h.finish());
        assert_eq!(extra_keys_digest(&[]), None);
        assert_eq!(block_extra_keys(3, &[]), None);
    }

    #[test]
    fn maps_are_found_at_any_depth() {
        assert!(holds_map(&ExtraKey::List(vec![ExtraKey::List(vec![
            ExtraKey::Nested
        ])])));
        assert!(!holds_map(&ExtraKey::List(vec![ExtraKey::Int(1)])));
    }
}
