//! What a gateway asks the router: one request's prompt, lengths and the caller's time.
//!
//! **The prompt must be the token ids the engine will see**: after the chat template is
//! applied and after tokenization with the engine's own tokenizer, special tokens included
//! (for an OpenAI-style chat request, what the engine's `apply_chat_template` produces).
//! The engines report their cache in those tokens; a gateway that hashes the raw user text,
//! the messages before templating, or another tokenizer's ids matches nothing and silently
//! routes with 0 % prefix hits. A quick check: route a request, send it, and compare
//! `Decision::overlap_blocks` with the engine's own reported cache hit for it.

use kvroute_core::Nanos;
use kvroute_core::{BlockExtraKeys, HashNamespace, SequenceHash};

/// The request's prompt as the router receives it: the engine's token ids after the chat
/// template (see the module docs), or their chained hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Prompt<'a> {
    /// The prompt's token ids; the router hashes its full blocks (a trailing partial block
    /// is not hashed). Its length must equal [`RouteRequest::prompt_tokens`].
    Tokens(&'a [u32]),
    /// Chained hashes of the prompt's full blocks, computed by the caller with kvroute's
    /// scheme ([`BlockHasher`](crate::BlockHasher)) and the router's block size. There may be at
    /// most `prompt_tokens / block_size` of them.
    Hashes(&'a [SequenceHash]),
}

/// One routing request. Its tokens must be the engine's token ids after the chat template
/// (module docs): anything else silently finds no cached prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteRequest<'a> {
    /// The prompt.
    pub prompt: Prompt<'a>,
    /// Prompt length (tokens).
    pub prompt_tokens: u32,
    /// Expected output length (tokens); reserved as decode work on the chosen worker.
    pub expected_output_tokens: u32,
    /// Namespace (LoRA adapter / cache salt) of the prompt's tokens; `None` uses the
    /// router's. Ignored for [`Prompt::Hashes`].
    pub namespace: Option<HashNamespace>,
    /// The extra keys the engine hashes with some of the prompt's blocks (vLLM: the cache
    /// salt on block 0, multimodal keys on the blocks an image's placeholder tokens fall
    /// in, prompt-embedding digests), one entry per block that has any, in strictly
    /// increasing block order ([`block_extra_keys`](crate::block_extra_keys) builds one);
    /// empty for a plain text prompt. Blocks an engine stored with extra keys are found
    /// only by a request presenting the same keys for the same block; without them the
    /// prompt hashes as its tokens and finds only blocks stored without keys. Entries past
    /// the last full block are not used. Ignored for [`Prompt::Hashes`] (fold the keys
    /// with [`BlockHasher::sequence_hashes_with_extra_keys_into`](crate::BlockHasher::sequence_hashes_with_extra_keys_into)).
    pub extra_keys: &'a [BlockExtraKeys],
    /// The caller's clock (monotonic), recorded in the reservation; kvroute reads no clock.
    pub now: Nanos,
}

impl<'a> RouteRequest<'a> {
    /// A request for `tokens` (prompt length = `tokens.len()`, saturating at `u32::MAX`)
    /// in the router's namespace.
    pub fn tokens(tokens: &'a [u32], expected_output_tokens: u32, now: Nanos) -> Self {
        Self {
            prompt: Prompt::Tokens(tokens),
            prompt_tokens: u32::try_from(tokens.len()).unwrap_or(u32::MAX),
            expected_output_tokens,
            namespace: None,
            extra_keys: &[],
            now,
        }
    }

    /// A request given by precomputed chained hashes and its prompt length (tokens).
    pub fn hashes(
        hashes: &'a [SequenceHash],
        prompt_tokens: u32,
        expected_output_tokens: u32,
        now: Nanos,
    ) -> Self {
        Self {
            prompt: Prompt::Hashes(hashes),
            prompt_tokens,
            expected_output_tokens,
            namespace: None,
            extra_keys: &[],
            now,
        }
    }

    /// This request with `extra_keys` (see [`RouteRequest::extra_keys`]).
    pub fn with_extra_keys(self, extra_keys: &'a [BlockExtraKeys]) -> Self {
        Self { extra_keys, ..self }
    }
}
