//! A batch that fails to decode applies nothing: `kvroute_wire` rejects it whole (typed
//! error, counted) before the Router sees it, so no event of it reaches the index, and its
//! sequence number counts as lost: the next batch is a gap, the worker is untrusted until
//! the replay brings the batch again (the engine's replay buffer holds the bytes it sent).

mod common;

use common::{BS, publish, router, tokens};
use kvroute::ingest::SeqOutcome;
use kvroute::{Channel, EngineHash, ReplayRequest, RouteRequest};
use kvroute_testkit::msgpack::V;
use kvroute_wire::{ErrorKind, KvMessage, WireCounters, WireError};

/// A named-map `BlockStored` of `tokens` (whole blocks) with engine hashes `first..`.
fn store(first: u64, parent: Option<u64>, tokens: &[u32]) -> V {
    let blocks = (tokens.len() / BS) as u64;
    V::M(vec![
        ("type", V::S("BlockStored")),
        (
            "block_hashes",
            V::A((first..first + blocks).map(V::U).collect()),
        ),
        ("parent_block_hash", parent.map_or(V::Nil, V::U)),
        (
            "token_ids",
            V::A(tokens.iter().map(|&t| V::U(u64::from(t))).collect()),
        ),
        ("block_size", V::U(BS as u64)),
        ("medium", V::S("GPU")),
    ])
}

fn payload(events: Vec<V>) -> Vec<u8> {
    V::A(vec![V::F(0.0), V::A(events), V::U(0)]).to_msgpack()
}

fn frames(seq: u64, payload: &[u8]) -> [Vec<u8>; 3] {
    [Vec::new(), seq.to_be_bytes().to_vec(), payload.to_vec()]
}

fn decode(wire: &WireCounters, f: &[Vec<u8>; 3]) -> Result<KvMessage, WireError> {
    let refs: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
    wire.decode_message(&refs)
}

#[test]
fn an_undecodable_batch_applies_nothing_and_is_replayed_whole() {
    let (r, ws) = router(2, 1, |_| {});
    publish(&r, &ws, &[]);
    let w = ws[0];
    let slot = r.slot_of(w).unwrap();
    let p = tokens(41, 3 * BS);
    let wire = WireCounters::new();
    let live = |seq, bytes: &[u8]| {
        let msg = decode(&wire, &frames(seq, bytes)).unwrap();
        r.ingest(w, Channel::Live, &msg).unwrap()
    };
    // The overlap `route` credits the (only) worker for the whole prompt.
    let credited = || {
        r.route(&RouteRequest::tokens(&p, 64, common::NOW))
            .unwrap()
            .overlap_blocks
    };

    let batch0 = payload(vec![store(1, None, &p[..BS])]);
    live(0, &batch0);
    assert_eq!(credited(), 1);

    // Batch 1 as sent: a good store of block 2, then a store whose token count does not
    // match its blocks (2 hashes, 16 tokens). Rejected whole: block 2 is not applied.
    let good = store(2, Some(1), &p[BS..2 * BS]);
    let bad = V::M(vec![
        ("type", V::S("BlockStored")),
        ("block_hashes", V::A(vec![V::U(3), V::U(4)])),
        ("parent_block_hash", V::U(2)),
        (
            "token_ids",
            V::A(p[2 * BS..].iter().map(|&t| V::U(u64::from(t))).collect()),
        ),
        ("block_size", V::U(BS as u64)),
    ]);
    let corrupt = frames(1, &payload(vec![good.clone(), bad]));
    assert_eq!(
        decode(&wire, &corrupt),
        Err(WireError::TokenCount {
            blocks: 2,
            block_size: BS as u32,
            tokens: BS,
        })
    );
    assert_eq!(wire.stats().errors_of(ErrorKind::TokenCount), 1);
    assert_eq!(wire.stats().batches, 1);
    assert_eq!(r.index().engine_hashes(slot), vec![(EngineHash(1), 1)]);
    assert_eq!(r.ingest_stats().messages, 1);

    // Batch 2 arrives: batch 1 counts as lost (a gap), the worker is untrusted.
    let x = live(2, &payload(vec![store(3, Some(2), &p[2 * BS..])]));
    assert_eq!(
        (x.outcome, x.trusted),
        (SeqOutcome::Gap { missed: 1 }, false)
    );
    assert_eq!(credited(), 0);
    assert_eq!(
        r.replay_requests(),
        vec![ReplayRequest {
            worker: w,
            from_seq: 0,
            last_live_seq: Some(2),
        }]
    );

    // The replay brings the witness, batch 0 (the copy applied: the same `ts`), then batch
    // 1 as the engine buffered it, then batch 2: all 3 blocks.
    let replay = |seq, bytes: &[u8]| {
        let msg = decode(&wire, &frames(seq, bytes)).unwrap();
        r.ingest(w, Channel::Replay, &msg).unwrap()
    };
    let x = replay(0, &batch0);
    assert_eq!((x.outcome, x.trusted), (SeqOutcome::ReplayConfirmed, false));
    let x = replay(1, &payload(vec![good]));
    assert_eq!((x.outcome, x.trusted), (SeqOutcome::Replayed, false));
    let x = replay(2, &payload(vec![store(3, Some(2), &p[2 * BS..])]));
    assert_eq!(
        (x.outcome, x.replay_completed, x.trusted),
        (SeqOutcome::Replayed, true, true)
    );
    assert_eq!(credited(), 3);
    assert_eq!(wire.stats().total_errors(), 1);
}
