//! End to end through the Router's ingest path: the real SGLang 0.5.23 event stream
//! (`shared/data/kv_events/sglang_0.5.23_conversation_first300.jsonl.xz`, format in
//! `shared/data/README.md`: named-map events with signed 64-bit page hashes, page size 16,
//! evictions) through ZMQ framing, `kvroute_wire` decoding, sequence tracking and
//! `Router::ingest`; every one of the 300 requests' `route` overlap, capped as SGLang caps a
//! hit (`n - 1` tokens rounded down to a page), must equal the engine's own hit, and at the
//! snapshot record the worker's engine-hash map must equal the engine's radix tree (count,
//! copies, SHA-256 over the hashes sorted as signed integers). Checks in `engine_stream`.
//!
//! Skips with a notice without the data (fails under `CI`), as `kvroute_testkit::data_file`
//! does.

mod common;
mod engine_stream;

use kvroute_testkit::stream::Engine;

#[test]
fn sglang_stream_through_ingest_matches_the_engine_hits_and_cache() {
    engine_stream::replay_through_router(Engine::Sglang, None);
}
