//! Reproduces every published hash vector in `shared/data/hash_vectors.json` exactly.

use kvroute_core::{HashNamespace, SequenceHash};
use kvroute_index::{BlockHasher, LocalBlockHash};
use serde::Deserialize;

#[derive(Deserialize)]
struct Vector {
    name: String,
    block_size: usize,
    lora_name: Option<String>,
    tokens: Vec<u32>,
    local_block_hashes: Vec<u64>,
    sequence_hashes: Vec<u64>,
}

#[test]
fn every_published_vector_matches() {
    let Some(path) = kvroute_testkit::data_file("hash_vectors.json") else {
        return;
    };
    let vectors: Vec<Vector> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(vectors.len() >= 7, "expected the published vectors");
    for v in &vectors {
        let hasher = BlockHasher::new(
            v.block_size,
            HashNamespace::new(v.lora_name.as_deref(), None),
        );
        let mut local = Vec::new();
        hasher.local_hashes_into(&v.tokens, &mut local);
        let want_local: Vec<LocalBlockHash> = v
            .local_block_hashes
            .iter()
            .map(|&h| LocalBlockHash(h))
            .collect();
        assert_eq!(local, want_local, "local hashes of {}", v.name);
        let mut seq = Vec::new();
        hasher.sequence_hashes_into(&v.tokens, None, &mut seq);
        let want_seq: Vec<SequenceHash> =
            v.sequence_hashes.iter().map(|&h| SequenceHash(h)).collect();
        assert_eq!(seq, want_seq, "sequence hashes of {}", v.name);
    }
}
