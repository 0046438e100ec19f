//! What `route` credits a worker whose cache was wiped (`AllBlocksCleared`, an engine
//! restart) or is not known exactly (a block-size mismatch, a sequence gap), through
//! `Router::ingest` and `route`.
//!
//! Fleet (block size 16, projected-time policy, 8,000 prefill tokens/s): worker 1 has 200
//! queued prefill tokens (0.025 s), worker 2 is idle. Prompt `p`: 40 blocks (640 tokens).
//! * worker 1 holding all of `p`: 0.025 s + 0 uncached = 0.025 s, worker 2: 640 / 8,000 =
//!   0.08 s, so worker 1 wins on cache;
//! * worker 1 holding nothing (or not credited): 0.025 + 0.08 = 0.105 s > 0.08 s, so
//!   worker 2 wins.

mod common;
mod ingest_support;

use common::{BS, publish, router, sample, tokens};
use ingest_support::{batch, batch_at, route, store, stored};
use kvroute::ingest::{EventRejection, RejectedEvent, SeqOutcome};
use kvroute::{Channel, IngestError, Router, WorkerId};
use kvroute_wire::KvEvent;

const LIVE: Channel = Channel::Live;

fn fleet() -> (Router, [WorkerId; 2], Vec<u32>) {
    let (r, ws) = router(4, 2, |_| {});
    publish(&r, &ws, &[(ws[0], sample(0, 0, 200, 0, 0.0))]);
    let p = tokens(11, 40 * BS);
    let x = r
        .ingest(ws[0], LIVE, &batch(0, vec![store(1, None, &p)]))
        .unwrap();
    assert_eq!(x.applied.stored_blocks, 40);
    assert_eq!(route(&r, &p), (ws[0], 40), "cache owner before the failure");
    (r, [ws[0], ws[1]], p)
}

/// After `AllBlocksCleared`, traffic stops going to the wiped worker for cache.
#[test]
fn all_blocks_cleared_stops_cache_traffic_to_the_wiped_worker() {
    let (r, [w1, w2], p) = fleet();
    let x = r
        .ingest(w1, LIVE, &batch(1, vec![KvEvent::AllBlocksCleared]))
        .unwrap();
    assert_eq!((x.applied.clears, x.trusted), (1, true));
    assert_eq!(r.index().worker_blocks(r.slot_of(w1).unwrap()), 0);
    assert_eq!(route(&r, &p), (w2, 0));
    assert_eq!(r.ingest_stats().clears, 1);
}

/// The engine restarted (its sequence went from 1 back to 0, its clock on by 60 s): its old
/// blocks are gone, and what the new engine stores is indexed.
#[test]
fn a_restarted_engine_keeps_none_of_its_old_blocks() {
    let (r, [w1, w2], p) = fleet();
    r.ingest(w1, LIVE, &batch(1, Vec::new())).unwrap();
    let x = r
        .ingest(
            w1,
            LIVE,
            &batch_at(0, 60.0, vec![store(500, None, &p[..BS])]),
        )
        .unwrap();
    assert_eq!(
        (x.outcome, x.reset_from, x.trusted),
        (SeqOutcome::Contiguous, Some(1), true)
    );
    assert_eq!(r.index().worker_blocks(r.slot_of(w1).unwrap()), 1);
    // 1 cached block: 0.025 + 624 / 8,000 = 0.103 s > 0.08 s.
    assert_eq!(route(&r, &p), (w2, 0));
    assert_eq!(r.ingest_stats().resets, 1);
}

/// A restart after batch 0 only: the restarted engine's new batch 0 (sent 60 s later) is a
/// restart, not a copy of the old batch 0; a re-delivered copy of the new one (same `ts`)
/// is stale and leaves its 1 block as it is.
#[test]
fn a_restart_after_only_batch_0_drops_the_old_blocks() {
    let (r, [w1, w2], p) = fleet();
    let new0 = batch_at(0, 60.0, vec![store(500, None, &p[..BS])]);
    let x = r.ingest(w1, LIVE, &new0).unwrap();
    assert_eq!(
        (x.outcome, x.reset_from, x.trusted, x.applied.stored_blocks),
        (SeqOutcome::Contiguous, Some(0), true, 1)
    );
    assert_eq!(r.index().worker_blocks(r.slot_of(w1).unwrap()), 1);
    // 1 cached block: 0.025 + 624 / 8,000 = 0.103 s > 0.08 s.
    assert_eq!(route(&r, &p), (w2, 0));
    let x = r.ingest(w1, LIVE, &new0).unwrap();
    assert_eq!((x.outcome, x.reset_from), (SeqOutcome::Stale, None));
    assert_eq!(r.index().worker_blocks(r.slot_of(w1).unwrap()), 1);
    assert_eq!((r.ingest_stats().resets, r.ingest_stats().stale), (1, 1));
}

/// A store of another block size is a typed error naming engine and sizes, counted per
/// engine; the rest of the batch is applied; the worker is untrusted (its residency is
/// incomplete) until it is cleared.
#[test]
fn block_size_mismatch_is_an_error_and_a_counter_not_silence() {
    let (r, [w1, w2], p) = fleet();
    let mut wrong = stored(100, None, &tokens(3, 64));
    wrong.block_size = 8;
    wrong.block_hashes = (100..108).map(kvroute::EngineHash).collect();
    let events = vec![
        KvEvent::BlockStored(wrong),
        store(200, None, &tokens(4, 2 * BS)),
    ];
    let Err(IngestError::Rejected(b)) = r.ingest(w1, LIVE, &batch(1, events)) else {
        panic!("a mismatch must be an error");
    };
    assert_eq!(
        b.rejected,
        vec![RejectedEvent {
            position: 0,
            error: EventRejection::BlockSizeMismatch {
                worker: w1,
                engine_block_size: 8,
                router_block_size: 16,
                blocks: 8,
            },
        }]
    );
    assert_eq!(
        b.rejected[0].to_string(),
        "event 0: worker 1:0 sent 8 blocks of 8 tokens, the router's block size is 16"
    );
    assert_eq!(
        (b.report.applied.stored_blocks, b.report.trusted),
        (2, false)
    );
    let s = r.ingest_stats();
    assert_eq!((s.rejected_events, s.untrusted_workers), (1, 1));
    assert_eq!(s.block_size_mismatches.len(), 1);
    let m = s.block_size_mismatches[0];
    assert_eq!(
        (m.worker, m.engine_block_size, m.router_block_size, m.stores),
        (w1, 8, 16, 1)
    );
    assert_eq!(r.index_stats().block_size_mismatches, 1);
    // Untrusted: its 40 cached blocks are not credited.
    assert_eq!(route(&r, &p), (w2, 0));
    // The sequence advanced: the next batch is contiguous; a clear restores trust.
    let x = r
        .ingest(w1, LIVE, &batch(2, vec![KvEvent::AllBlocksCleared]))
        .unwrap();
    assert_eq!((x.outcome, x.trusted), (SeqOutcome::Contiguous, true));
}

/// A gap (an unseen batch may have removed blocks) makes the overlap zero in `route`
/// until cleared; here the batch after the gap holds `AllBlocksCleared`, which makes the
/// gap moot and trusts the worker with what follows the clear.
#[test]
fn untrusted_overlap_is_zero_in_route_until_cleared() {
    let (r, [w1, w2], p) = fleet();
    let g = r.ingest(w1, LIVE, &batch(3, Vec::new())).unwrap();
    assert_eq!(
        (g.outcome, g.trusted),
        (SeqOutcome::Gap { missed: 2 }, false)
    );
    assert_eq!(route(&r, &p), (w2, 0));
    let events = vec![KvEvent::AllBlocksCleared, store(1, None, &p)];
    let c = r.ingest(w1, LIVE, &batch(4, events)).unwrap();
    assert_eq!(
        (c.outcome, c.trusted),
        (SeqOutcome::GapCleared { missed: 0 }, true)
    );
    assert_eq!(route(&r, &p), (w1, 40));
    assert!(r.replay_requests().is_empty());
}
