//! The requests of one run as the engines see them: token ids on demand and the chained
//! block hashes of every prompt, computed once per run.
//!
//! Token rules (`shared/data/README.md`): a prompt's tokens come from
//! [`PromptSpec::tokens_into`]; output token `j` of request `id` is
//! [`output_token`]`(id, j)`. Block hashes are kvroute's chained XXH3 hashes
//! ([`BlockHasher`]) of the default namespace; the engines use them as their own block
//! hashes (any scheme would do: the router re-hashes the token ids of each store).

use kvroute::{BlockHasher, HashNamespace, SequenceHash};
use kvroute_index::hash::{chain_hash, local_block_hash};

use crate::request::{PromptSpec, SimRequest, TRACE_BLOCK_TOKENS, output_token};

/// One request's fixed facts.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The request id (seeds the output tokens).
    pub id: u64,
    /// The prompt.
    pub prompt: PromptSpec,
    /// Prompt length (tokens).
    pub prompt_len: u32,
    /// Output length (tokens, at least 1).
    pub output_len: u32,
    hash_start: usize,
    hash_len: usize,
}

/// Every request of a run, with its prompt's block hashes.
#[derive(Debug)]
pub(crate) struct Catalog {
    entries: Vec<Entry>,
    hashes: Vec<SequenceHash>,
    block_size: u32,
}

impl Catalog {
    /// Hashes every prompt of `requests` once (blocks of `block_size` tokens).
    pub(crate) fn new(requests: &[SimRequest], block_size: u32) -> Self {
        let hasher = BlockHasher::new(block_size as usize, HashNamespace::DEFAULT);
        let mut entries = Vec::with_capacity(requests.len());
        let mut hashes = Vec::new();
        let mut tokens = Vec::new();
        for r in requests {
            tokens.clear();
            match &r.prompt {
                PromptSpec::TraceBlocks {
                    hash_ids,
                    input_length,
                } => {
                    // `PromptSpec::tokens_into`'s rule, a trace block at a time.
                    for &h in hash_ids.iter() {
                        let have = tokens.len() as u32;
                        if have >= *input_length {
                            break;
                        }
                        let n = (*input_length - have).min(TRACE_BLOCK_TOKENS);
                        let base = h.wrapping_mul(TRACE_BLOCK_TOKENS);
                        tokens.extend((0..n).map(|t| base.wrapping_add(t)));
                    }
                }
                PromptSpec::Tokens(t) => tokens.extend_from_slice(t),
            }
            let hash_start = hashes.len();
            hasher.sequence_hashes_into(&tokens, None, &mut hashes);
            entries.push(Entry {
                id: r.id,
                prompt: r.prompt.clone(),
                prompt_len: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
                output_len: r.output_tokens.max(1),
                hash_start,
                hash_len: hashes.len() - hash_start,
            });
        }
        Self {
            entries,
            hashes,
            block_size,
        }
    }

    /// Whether the catalog was made from `requests` (ids, prompts and output lengths, in
    /// order) in blocks of `block_size` tokens.
    pub(crate) fn fits(&self, requests: &[SimRequest], block_size: u32) -> bool {
        self.block_size == block_size
            && self.entries.len() == requests.len()
            && self.entries.iter().zip(requests).all(|(e, r)| {
                e.id == r.id && e.output_len == r.output_tokens.max(1) && e.prompt == r.prompt
            })
    }

    /// Request `i`.
    pub(crate) fn entry(&self, i: u32) -> &Entry {
        &self.entries[i as usize]
    }

    /// Chained hashes of request `i`'s full prompt blocks.
    pub(crate) fn prompt_hashes(&self, i: u32) -> &[SequenceHash] {
        let e = &self.entries[i as usize];
        &self.hashes[e.hash_start..e.hash_start + e.hash_len]
    }

    /// Calls `run(first, len)` for consecutive runs of tokens `start..end` of request
    /// `i`'s sequence (prompt, then output), in order: tokens `first, first + 1, …`
    /// (wrapping in `u32`). Trace prompts and outputs come in long runs (a trace block's
    /// 512 ids, an answer's ids); explicit prompts in runs of one.
    pub(crate) fn token_runs(&self, i: u32, start: u32, end: u32, mut run: impl FnMut(u32, u32)) {
        let e = &self.entries[i as usize];
        let p_end = end.min(e.prompt_len);
        if start < p_end {
            match &e.prompt {
                PromptSpec::TraceBlocks { hash_ids, .. } => {
                    let mut pos = start;
                    while pos < p_end {
                        let off = pos % TRACE_BLOCK_TOKENS;
                        let len = (TRACE_BLOCK_TOKENS - off).min(p_end - pos);
                        let h = hash_ids[(pos / TRACE_BLOCK_TOKENS) as usize];
                        run(h.wrapping_mul(TRACE_BLOCK_TOKENS).wrapping_add(off), len);
                        pos += len;
                    }
                }
                PromptSpec::Tokens(t) => {
                    for &v in &t[start as usize..p_end as usize] {
                        run(v, 1);
                    }
                }
            }
        }
        let o_start = start.max(e.prompt_len);
        if o_start < end {
            run(output_token(e.id, o_start - e.prompt_len), end - o_start);
        }
    }

    /// Appends tokens `start..end` of request `i`'s sequence (prompt, then output) to `out`.
    pub(crate) fn tokens_into(&self, i: u32, start: u32, end: u32, out: &mut Vec<u32>) {
        out.reserve((end - start) as usize);
        self.token_runs(i, start, end, |first, len| {
            out.extend((0..len).map(|k| first.wrapping_add(k)));
        });
    }

    /// The chained hash of the block of tokens `start..start + block_size` of request `i`,
    /// given its parent's chained hash; `scratch` is a reusable buffer.
    pub(crate) fn block_hash(
        &self,
        i: u32,
        start: u32,
        parent: Option<u64>,
        scratch: &mut Vec<u32>,
    ) -> u64 {
        scratch.clear();
        self.tokens_into(i, start, start + self.block_size, scratch);
        let local = local_block_hash(scratch, HashNamespace::DEFAULT);
        match parent {
            Some(p) => chain_hash(SequenceHash(p), local).0,
            // A first block's chained hash is its local hash (`BlockHasher`'s rule).
            None => local.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn req(id: u64, prompt: PromptSpec, out: u32) -> SimRequest {
        SimRequest {
            id,
            arrival_s: 0.0,
            prompt,
            output_tokens: out,
            follows: None,
            pinned: None,
        }
    }

    #[test]
    fn tokens_and_hashes_follow_the_rules() {
        let p = PromptSpec::TraceBlocks {
            hash_ids: Arc::from(vec![3u32, 7]),
            input_length: 600,
        };
        let cat = Catalog::new(&[req(5, p.clone(), 10)], 16);
        let mut all = Vec::new();
        p.tokens_into(&mut all);
        let mut got = Vec::new();
        cat.tokens_into(0, 0, 600, &mut got);
        assert_eq!(got, all);
        got.clear();
        cat.tokens_into(0, 598, 603, &mut got);
        assert_eq!(
            got,
            vec![
                7 * 512 + 86,
                7 * 512 + 87,
                1_000_000_000 + 5 * 4096,
                1_000_000_000 + 5 * 4096 + 1,
                1_000_000_000 + 5 * 4096 + 2
            ]
        );
        // Prompt hashes equal the hasher's; block_hash continues the chain.
        let hasher = BlockHasher::new(16, HashNamespace::DEFAULT);
        let mut seq = Vec::new();
        all.extend((0..8).map(|j| output_token(5, j)));
        hasher.sequence_hashes_into(&all, None, &mut seq);
        assert_eq!(cat.prompt_hashes(0), &seq[..37]);
        let mut scratch = Vec::new();
        let h37 = cat.block_hash(0, 37 * 16, Some(seq[36].0), &mut scratch);
        assert_eq!(h37, seq[37].0);
        assert_eq!(cat.block_hash(0, 0, None, &mut scratch), seq[0].0);
    }
}
