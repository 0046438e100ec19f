//! Decoding of what inference engines send a KV-aware router: bytes in, typed values out.
//! No I/O, no sockets, no clock: the caller receives ZMQ frames and HTTP bodies and hands
//! them here. Wire formats: `docs/WIRE-FORMAT.md` (vLLM 0.33 and SGLang 0.5.23 as
//! their own message classes encode them, and the older generations).
//!
//! * [`frame`]: ZMQ multipart messages `[topic, seq, payload]`, replay messages with or
//!   without a topic, the replay end marker ([`decode_message`]).
//! * [`decode_payload`]: a msgpack event batch (`[ts, events, dp_rank]`, `[ts, events]`,
//!   map form) to a [`KvEventBatch`] of typed [`KvEvent`]s; every positional generation of
//!   vLLM's events, named maps, SGLang's events with their metadata.
//! * [`hash`]: unsigned, signed and 32-byte binary block hashes to
//!   [`EngineHash`](kvroute_core::EngineHash), and the documented rule for each.
//! * [`load`]: vLLM Prometheus text, SGLang `/v1/loads` JSON and `LoadStat` frames to typed
//!   engine updates ([`VllmLoadUpdate`], [`SglangRankLoad`], [`SglangLoadStat`]) and from
//!   them to engine-neutral `kvroute_core::LoadSample`s and `RankReport`s.
//! * [`encode`]: the inverse, for emulated engines and tests: batches, frames, the replay
//!   end marker and `LoadStat` as the engines' own classes write them.
//! * [`WireCounters`]: counts of decoded batches, events, blocks and of every
//!   [`WireError`] kind.
//!
//! msgpack is read with serde and `rmp-serde` (custom visitors where shapes vary), except on
//! the hot path: the common batch and event shapes are read by a small hand-written reader
//! (`fast`) into the same raw records, which falls back to serde for anything it does not
//! recognise, so results and errors are serde's ([`decode_payload_serde`] is the serde-only
//! reference; [`decode_payload_traced`] says which reader ran). Malformed input of any kind is
//! a typed [`WireError`]; no
//! input panics (a fuzz target, `fuzz/fuzz_targets/wire_decode.rs`, checks it), and a
//! batch with one bad event is rejected whole.

mod batch;
mod counters;
pub mod encode;
mod error;
mod event;
mod fast;
pub mod frame;
pub mod hash;
pub mod load;
mod raw;

pub use batch::{
    DecodePath, MAX_DEPTH, decode_payload, decode_payload_serde, decode_payload_traced,
};
pub use counters::{ErrorCounts, WireCounters, WireStats};
pub use error::{ErrorKind, WireError};
pub use event::{
    BlockRemoved, BlockStored, EventEncoding, ExtraKey, KvEvent, KvEventBatch, Medium,
};
pub use frame::{END_OF_REPLAY_SEQ, Frames, KvMessage, decode_message, replay_request};
pub use load::{
    SglangLoadStat, SglangRankLoad, VllmLoadUpdate, VllmRankLoad, decode_load_stat,
    parse_sglang_loads, parse_vllm_metrics,
};
