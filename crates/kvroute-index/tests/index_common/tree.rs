//! A small tree of token blocks shared by the concurrency tests: a 4-block prefix shared by
//! 4 branches of 8 blocks, so workers share nodes, and stores, removals and matches meet on
//! them.

use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash};
use kvroute_index::BlockHasher;

/// Tokens per KV block.
pub const BS: usize = 4;
/// Blocks of the prefix every branch of the tree shares.
pub const PREFIX: usize = 4;
/// Branches of the tree.
pub const BRANCHES: usize = 4;
/// Blocks of each branch after the prefix.
pub const BRANCH_BLOCKS: usize = 8;
/// Blocks of a whole path of the tree (prefix + branch).
pub const DEPTH: usize = PREFIX + BRANCH_BLOCKS;

/// Token ids and chained hashes of the tree.
pub struct Tree {
    /// `tokens[b]`: prefix + branch `b` (tokens).
    pub tokens: Vec<Vec<u32>>,
    /// `chains[b]`: the chained hashes of `tokens[b]`, one per block.
    pub chains: Vec<Vec<SequenceHash>>,
}

impl Tree {
    /// The tree, hashed with the router's scheme (default namespace). Prefix token `i` is
    /// `i`; token `i` of branch `b` is `10,000 · (b + 1) + i`.
    pub fn new() -> Self {
        let hasher = BlockHasher::new(BS, HashNamespace::DEFAULT);
        let prefix: Vec<u32> = (0..(PREFIX * BS) as u32).collect();
        let mut tokens = Vec::new();
        let mut chains = Vec::new();
        for b in 0..BRANCHES as u32 {
            let mut t = prefix.clone();
            t.extend((0..(BRANCH_BLOCKS * BS) as u32).map(|i| 10_000 * (b + 1) + i));
            let mut c = Vec::new();
            hasher.sequence_hashes_into(&t, None, &mut c);
            tokens.push(t);
            chains.push(c);
        }
        Self { tokens, chains }
    }

    /// Engine hash of block `pos` of branch `b`: prefix blocks share one hash per position,
    /// so storing the prefix again from another branch adds copies.
    pub fn eh(b: usize, pos: usize) -> EngineHash {
        if pos < PREFIX {
            EngineHash(pos as u64)
        } else {
            EngineHash(100 + (b * 16 + pos) as u64)
        }
    }
}
