//! Builders of decoded KV event messages for the ingest tests (the shapes
//! `kvroute_wire::decode_message` produces), and a probe of one worker's overlap in `route`.
#![allow(dead_code)]

use kvroute::{RouteRequest, Router, WorkerId};
use kvroute_wire::{
    BlockRemoved, BlockStored, EventEncoding, KvEvent, KvEventBatch, KvMessage, Medium,
};

use crate::common::{BS, NOW};

/// A device-tier, main-group `BlockStored` of `tokens` (whole blocks of [`BS`]) with engine
/// hashes `first..`, chained on `parent`.
pub fn stored(first: u64, parent: Option<u64>, tokens: &[u32]) -> BlockStored {
    let blocks = (tokens.len() / BS) as u64;
    BlockStored::device(
        (first..first + blocks).map(kvroute::EngineHash).collect(),
        parent.map(kvroute::EngineHash),
        tokens.to_vec(),
        BS as u32,
    )
}

/// [`stored`] as an event.
pub fn store(first: u64, parent: Option<u64>, tokens: &[u32]) -> KvEvent {
    KvEvent::BlockStored(stored(first, parent, tokens))
}

/// A device-tier `BlockRemoved` of engine hashes.
pub fn remove(hashes: &[u64]) -> KvEvent {
    KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: hashes.iter().copied().map(kvroute::EngineHash).collect(),
        medium: Medium::Gpu,
        group_idx: None,
        encoding: EventEncoding::Named,
    })
}

/// A batch of DP rank 0 with sequence number `seq`, sent at `ts` 0.0.
pub fn batch(seq: u64, events: Vec<KvEvent>) -> KvMessage {
    batch_at(seq, 0.0, events)
}

/// A batch of DP rank 0 with sequence number `seq` and batch timestamp `ts` (seconds).
pub fn batch_at(seq: u64, ts: f64, events: Vec<KvEvent>) -> KvMessage {
    KvMessage::Batch {
        seq,
        batch: KvEventBatch {
            ts,
            events,
            dp_rank: Some(0),
        },
    }
}

/// An empty batch (the engine stepped without cache changes).
pub fn empty(seq: u64) -> KvMessage {
    batch(seq, Vec::new())
}

/// The worker `route` picks for `prompt` and the overlap it credits it with (blocks); the
/// decision is dropped at once (its reservation released).
pub fn route(r: &Router, prompt: &[u32]) -> (WorkerId, u32) {
    let d = r
        .route(&RouteRequest::tokens(prompt, 64, NOW))
        .expect("routes");
    (d.worker, d.overlap_blocks)
}
