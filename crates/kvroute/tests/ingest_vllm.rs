//! End to end through the Router's ingest path: the real vLLM 0.33.0 event stream
//! (`shared/data/kv_events/vllm_0.33_conversation_first1000.jsonl.xz`, format in
//! `shared/data/README.md`) through ZMQ framing, `kvroute_wire` decoding, sequence tracking
//! and `Router::ingest`; every request's `route` overlap, capped as vLLM caps a hit
//! (`(n - 1) / 16` blocks), must equal the engine's own hit, and at the snapshot record the
//! worker's engine-hash map must equal the engine's cache (count, copies, SHA-256). Checks
//! in `engine_stream`.
//!
//! Release builds replay the whole stream (1,000 requests; evictions, so removals, start
//! after about 200); debug builds the first 200 requests only, without the snapshot check.
//! Skips with a notice without the data (fails under `CI`), as `kvroute_testkit::data_file`
//! does. About 5 s in release.

mod common;
mod engine_stream;

use kvroute_testkit::stream::Engine;

#[test]
fn vllm_stream_through_ingest_matches_the_engine_hits_and_cache() {
    let limit = if cfg!(debug_assertions) {
        Some(200)
    } else {
        None
    };
    engine_stream::replay_through_router(Engine::Vllm, limit);
}
