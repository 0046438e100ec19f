//! Helpers of kvroute-wire's data-driven tests: where the shared data lives and hex (both
//! from `kvroute-testkit`), an independent implementation of kvroute's block hashing to
//! check against, and [`encode`], a msgpack encoder that writes each value in the marker
//! form the test picks.
//!
//! Data files are found by `kvroute_testkit::data_file` (`../shared/data` beside the
//! checkout or `$KVROUTE_DATA_DIR`; a missing file skips the test with a notice, except
//! under `CI`, where it fails).

#![allow(dead_code, unused_imports)]

pub mod encode;

use xxhash_rust::xxh3::xxh3_64_with_seed;

pub use kvroute_testkit::data_file;
pub use kvroute_testkit::stream::unhex;

/// The positional fields of vLLM's `BlockStored` after its tag, in order, as named-map keys
/// (`docs/WIRE-FORMAT.md`, "Events").
pub const STORE_FIELDS: [&str; 11] = [
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
];

/// The seed of a namespace, written out from the rule in `docs/WIRE-FORMAT.md`, "Block hashes and how kvroute hashes tokens" (not from the crate's code).
pub fn seed(lora: Option<&str>, salt: Option<&str>) -> u64 {
    let mut s = 1337u64;
    if let Some(l) = lora {
        s = s.wrapping_add(xxh3_64_with_seed(l.as_bytes(), 0));
    }
    if let Some(c) = salt {
        s = s.wrapping_add(xxh3_64_with_seed(c.as_bytes(), 1));
    }
    s
}

/// Local XXH3-64 hashes of each full block of `tokens` (little-endian u32), by the general
/// XXH3 with `seed`.
pub fn local_hashes(tokens: &[u32], block_size: usize, seed: u64) -> Vec<u64> {
    tokens
        .chunks_exact(block_size)
        .map(|b| {
            let bytes: Vec<u8> = b.iter().flat_map(|t| t.to_le_bytes()).collect();
            xxh3_64_with_seed(&bytes, seed)
        })
        .collect()
}

/// Chained hashes from the local ones: `seq[0] = local[0]`,
/// `seq[i] = XXH3-64(le(seq[i-1]) ++ le(local[i]), 1337)`.
pub fn chained(local: &[u64]) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(local.len());
    for &l in local {
        let h = match out.last() {
            None => l,
            Some(&p) => {
                let mut buf = [0u8; 16];
                buf[..8].copy_from_slice(&p.to_le_bytes());
                buf[8..].copy_from_slice(&l.to_le_bytes());
                xxh3_64_with_seed(&buf, 1337)
            }
        };
        out.push(h);
    }
    out
}

/// A decoded store as the prefix index takes it: the rule the router's ingest applies
/// (`kvroute::ingest::block_store`), restated here because the wire crate's tests do not
/// depend on the router.
#[allow(dead_code)]
pub fn block_store(s: &kvroute_wire::BlockStored) -> kvroute_index::index::BlockStore<'_> {
    kvroute_index::index::BlockStore {
        parent: s.parent_block_hash,
        block_hashes: &s.block_hashes,
        token_ids: &s.token_ids,
        block_size: s.block_size as usize,
        namespace: s.namespace(),
    }
}
