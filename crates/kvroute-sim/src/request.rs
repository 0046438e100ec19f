//! What a workload asks of the fleet: one request's arrival, prompt and output length.

use std::sync::Arc;

/// Tokens per Mooncake trace block (`hash_ids` entries).
pub const TRACE_BLOCK_TOKENS: u32 = 512;

/// First output token id; output token `j` of request `i` is
/// `OUTPUT_TOKEN_BASE + i * 4096 + j` (the rule the recorded engine streams used, see
/// `shared/data/README.md`), so that a follow-up turn that quotes a previous answer hits
/// the blocks the engine stored while decoding it.
pub const OUTPUT_TOKEN_BASE: u32 = 1_000_000_000;

/// Output token `j` of request `id` (wrapping in `u32`).
pub fn output_token(id: u64, j: u32) -> u32 {
    OUTPUT_TOKEN_BASE
        .wrapping_add((id as u32).wrapping_mul(4096))
        .wrapping_add(j)
}

/// A request's prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptSpec {
    /// A Mooncake trace prompt: the 512-token blocks `hash_ids`, concatenated and cut to
    /// `input_length` tokens. Token `t` (0..512) of trace block `h` is `h * 512 + t`.
    TraceBlocks {
        /// Trace block ids.
        hash_ids: Arc<[u32]>,
        /// Prompt length (tokens).
        input_length: u32,
    },
    /// Explicit token ids.
    Tokens(Arc<[u32]>),
}

impl PromptSpec {
    /// Prompt length (tokens).
    pub fn len(&self) -> u32 {
        match self {
            PromptSpec::TraceBlocks { input_length, .. } => *input_length,
            PromptSpec::Tokens(t) => u32::try_from(t.len()).unwrap_or(u32::MAX),
        }
    }

    /// Whether the prompt has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the prompt's token ids to `out`.
    pub fn tokens_into(&self, out: &mut Vec<u32>) {
        match self {
            PromptSpec::TraceBlocks {
                hash_ids,
                input_length,
            } => {
                let start = out.len();
                let want = *input_length as usize;
                'outer: for &h in hash_ids.iter() {
                    for t in 0..TRACE_BLOCK_TOKENS {
                        if out.len() - start == want {
                            break 'outer;
                        }
                        out.push(h.wrapping_mul(TRACE_BLOCK_TOKENS).wrapping_add(t));
                    }
                }
            }
            PromptSpec::Tokens(t) => out.extend_from_slice(t),
        }
    }
}

/// A request arriving after an earlier one finished (closed-loop multi-turn sessions).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FollowUp {
    /// The earlier request's id.
    pub parent: u64,
    /// Seconds after the parent's last output token before this request arrives.
    pub think_s: f64,
}

/// One request of a workload.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRequest {
    /// Unique id (also seeds the output token ids, see [`output_token`]).
    pub id: u64,
    /// Arrival time (seconds of virtual time); ignored when `follows` is set.
    pub arrival_s: f64,
    /// The prompt.
    pub prompt: PromptSpec,
    /// Output length (tokens); the router is told this as the expected output.
    pub output_tokens: u32,
    /// Arrive after another request finishes instead of at `arrival_s`.
    pub follows: Option<FollowUp>,
    /// Send straight to this engine, bypassing the router (a scenario's starting state,
    /// e.g. the already-loaded owner of `hot-owner-51`). Pinned requests are excluded from the
    /// policy metrics.
    pub pinned: Option<u32>,
}
