//! Per-publisher sequence tracking through `Router::ingest`: contiguous, gap (untrusted,
//! replay requested, live held, replay completes), duplicate/stale, restart, truncated and
//! short replays, skip, re-registration, wiring errors.
//!
//! Fleet (block size 16): worker 1 and worker 2, both idle. Prompt `p` has 4 blocks;
//! worker 2 always holds `p`'s first block (engine hash 900), so a `route` of `p` goes to
//! worker 1 exactly when its overlap (≥ 2 blocks) is credited, and to worker 2 (overlap 1)
//! when worker 1 is untrusted.

mod common;
mod ingest_support;

use common::{BS, publish, router, tokens};
use ingest_support::{batch, batch_at, empty, route, store};
use kvroute::ingest::SeqOutcome;
use kvroute::{Channel, IngestError, ReplayRequest, Router, WorkerId};
use kvroute_wire::{KvEvent, KvMessage};

const LIVE: Channel = Channel::Live;
const REPLAY: Channel = Channel::Replay;

fn fleet() -> (Router, [WorkerId; 2], Vec<u32>) {
    let (r, ws) = router(4, 2, |_| {});
    let p = tokens(5, 4 * BS);
    let m = r.ingest(ws[1], LIVE, &batch(0, vec![store(900, None, &p[..BS])]));
    assert_eq!(m.unwrap().outcome, SeqOutcome::Contiguous);
    publish(&r, &ws, &[]);
    (r, [ws[0], ws[1]], p)
}

fn blocks(r: &Router, w: WorkerId) -> usize {
    r.index().worker_blocks(r.slot_of(w).unwrap())
}

#[test]
fn contiguous_batches_apply_in_order() {
    let (r, [w1, _], p) = fleet();
    let a = r.ingest(w1, LIVE, &batch(0, vec![store(1, None, &p[..2 * BS])]));
    let a = a.unwrap();
    assert_eq!(
        (a.seq, a.outcome, a.trusted),
        (Some(0), SeqOutcome::Contiguous, true)
    );
    assert_eq!(a.applied.stored_blocks, 2);
    let b = r.ingest(
        w1,
        LIVE,
        &batch(1, vec![store(3, Some(2), &p[2 * BS..3 * BS])]),
    );
    assert_eq!(b.unwrap().applied.stored_blocks, 1);
    assert_eq!(route(&r, &p), (w1, 3));
    assert_eq!(r.ingest_stats().contiguous, 3);
}

/// 0 applied; 1 lost; 2 arrives: a gap of 1, untrusted, replay from the witness 0 (the
/// last batch applied), and batch 2 is held. Live 3 arrives during the replay and is held
/// too. The replay's 0 is the copy applied (confirmed); 1, 2, 3 apply in order; at 3 the
/// frontier passes the last live batch: trusted again, overlap 4.
#[test]
fn a_gap_zeroes_overlap_until_the_replay_reaches_the_live_sequence() {
    let (r, [w1, w2], p) = fleet();
    let b0 = batch(0, vec![store(1, None, &p[..2 * BS])]);
    let b1 = batch(1, vec![store(3, Some(2), &p[2 * BS..3 * BS])]);
    let b2 = batch(2, vec![store(4, Some(3), &p[3 * BS..])]);
    let b3 = empty(3);
    r.ingest(w1, LIVE, &b0).unwrap();
    assert_eq!(route(&r, &p), (w1, 2));

    let g = r.ingest(w1, LIVE, &b2).unwrap();
    assert_eq!(
        (g.outcome, g.trusted),
        (SeqOutcome::Gap { missed: 1 }, false)
    );
    assert_eq!(g.applied.events, 0, "held until the replay brings batch 1");
    assert_eq!(r.is_trusted(w1), Some(false));
    let want = ReplayRequest {
        worker: w1,
        from_seq: 0,
        last_live_seq: Some(2),
    };
    assert_eq!(r.replay_requests(), vec![want]);
    assert_eq!(want.request_bytes(), [0, 0, 0, 0, 0, 0, 0, 0]);
    // Untrusted: worker 1's 2 blocks are not credited, worker 2's 1 block wins.
    assert_eq!(route(&r, &p), (w2, 1));

    assert_eq!(r.ingest(w1, LIVE, &b3).unwrap().outcome, SeqOutcome::Held);
    let x = r.ingest(w1, REPLAY, &b0).unwrap();
    assert_eq!(
        (x.outcome, x.applied.events, x.trusted),
        (SeqOutcome::ReplayConfirmed, 0, false)
    );
    for (m, done) in [(&b1, false), (&b2, false), (&b3, true)] {
        let x = r.ingest(w1, REPLAY, m).unwrap();
        assert_eq!(
            (x.outcome, x.replay_completed, x.trusted),
            (SeqOutcome::Replayed, done, done)
        );
    }
    assert_eq!(route(&r, &p), (w1, 4));
    assert!(r.replay_requests().is_empty());
    let end = r.ingest(w1, REPLAY, &KvMessage::EndOfReplay).unwrap();
    assert_eq!(end.outcome, SeqOutcome::EndOfReplay);
    // Live goes on at 4; the live copy of 3 never comes twice, a re-sent 3 is stale.
    assert_eq!(
        r.ingest(w1, LIVE, &empty(4)).unwrap().outcome,
        SeqOutcome::Contiguous
    );
    let s = r.ingest_stats();
    assert_eq!(
        (
            s.gaps,
            s.missed_batches,
            s.held,
            s.replayed,
            s.replays_completed,
            s.replays_confirmed,
            s.end_markers
        ),
        (1, 1, 1, 3, 1, 1, 1)
    );
    assert_eq!(s.untrusted_workers, 0);
}

#[test]
fn duplicate_and_stale_batches_are_dropped_and_counted() {
    let (r, [w1, _], p) = fleet();
    let b0 = batch(0, vec![store(1, None, &p[..2 * BS])]);
    r.ingest(w1, LIVE, &b0).unwrap();
    r.ingest(w1, LIVE, &empty(1)).unwrap();
    // The same batch again (a caller re-delivering it): dropped, no second copy.
    let d = r.ingest(w1, LIVE, &empty(1)).unwrap();
    assert_eq!((d.outcome, d.applied.events), (SeqOutcome::Stale, 0));
    // A replayed copy of an applied batch: dropped.
    let d = r.ingest(w1, REPLAY, &b0).unwrap();
    assert_eq!((d.outcome, d.applied.events), (SeqOutcome::Stale, 0));
    assert_eq!(blocks(&r, w1), 2);
    assert_eq!(r.index().stats().residencies, 3);
    assert_eq!(r.ingest_stats().stale, 2);
    assert_eq!(r.is_trusted(w1), Some(true));
}

/// Live 0..=2, then 1 with a clock 60 s later: the engine restarted and its new batch 0 was
/// lost. The worker is cleared (none of its old blocks stays indexed) and waits for a
/// replay from 0.
#[test]
fn a_restart_with_lost_first_batches_clears_and_asks_for_a_replay_from_zero() {
    let (r, [w1, w2], p) = fleet();
    r.ingest(w1, LIVE, &batch(0, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    r.ingest(w1, LIVE, &empty(1)).unwrap();
    r.ingest(w1, LIVE, &empty(2)).unwrap();
    let x = r
        .ingest(
            w1,
            LIVE,
            &batch_at(1, 60.0, vec![store(50, None, &p[..BS])]),
        )
        .unwrap();
    assert_eq!(
        (x.outcome, x.reset_from),
        (SeqOutcome::Gap { missed: 1 }, Some(2))
    );
    assert_eq!(blocks(&r, w1), 0, "old blocks gone");
    assert_eq!(r.replay_requests()[0].from_seq, 0);
    // The replay brings the new engine's 0 and 1; 1 reaches the live sequence.
    r.ingest(w1, REPLAY, &empty(0)).unwrap();
    let x = r
        .ingest(w1, REPLAY, &batch(1, vec![store(50, None, &p[..BS])]))
        .unwrap();
    assert!(x.replay_completed && x.trusted);
    assert_eq!(blocks(&r, w1), 1);
    assert_eq!(route(&r, &p).1, 1);
    let _ = w2;
    assert_eq!(r.ingest_stats().resets, 1);
}

/// Gap from 1 (live 5 seen); the engine's buffer starts at 3: the replay is truncated, the
/// worker cleared and replayed from 3; the end marker arrives at 4, short of live 5: the
/// worker is cleared again and trusted, live resumes at 6.
#[test]
fn truncated_and_short_replays_clear_the_worker_and_restore_trust() {
    let (r, [w1, _], p) = fleet();
    r.ingest(w1, LIVE, &batch(0, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    r.ingest(w1, LIVE, &empty(5)).unwrap();
    let t = r
        .ingest(w1, REPLAY, &batch(3, vec![store(7, None, &p[..BS])]))
        .unwrap();
    assert_eq!(t.outcome, SeqOutcome::ReplayTruncated { missing: 2 });
    assert_eq!((blocks(&r, w1), t.trusted), (1, false));
    r.ingest(w1, REPLAY, &empty(4)).unwrap();
    let e = r.ingest(w1, REPLAY, &KvMessage::EndOfReplay).unwrap();
    assert_eq!(
        (e.outcome, e.trusted),
        (SeqOutcome::ReplayShort { unreplayed: 1 }, true)
    );
    assert_eq!(blocks(&r, w1), 0);
    assert_eq!(
        r.ingest(w1, LIVE, &empty(6)).unwrap().outcome,
        SeqOutcome::Contiguous
    );
    let s = r.ingest_stats();
    assert_eq!((s.replays_truncated, s.replays_short), (1, 1));
}

#[test]
fn skip_replay_clears_and_trusts_at_once() {
    let (r, [w1, _], p) = fleet();
    r.ingest(w1, LIVE, &batch(0, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    r.ingest(w1, LIVE, &empty(3)).unwrap();
    r.ingest(w1, LIVE, &empty(4)).unwrap();
    assert_eq!(
        r.skip_replay(w1),
        Ok(4),
        "1, 2 lost and 3, 4 held: never applied"
    );
    assert_eq!((r.is_trusted(w1), blocks(&r, w1)), (Some(true), 0));
    assert!(r.replay_requests().is_empty());
    assert_eq!(
        r.ingest(w1, LIVE, &empty(5)).unwrap().outcome,
        SeqOutcome::Contiguous
    );
    assert_eq!(r.skip_replay(w1), Ok(0));
}

#[test]
fn re_registration_restores_trust_and_expects_sequence_zero() {
    let (r, [w1, _], p) = fleet();
    r.ingest(w1, LIVE, &batch(7, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    assert_eq!(
        r.replay_requests()[0].from_seq,
        0,
        "a mid-stream join is a gap from 0"
    );
    assert_eq!(r.is_trusted(w1), Some(false));
    r.remove_worker(w1).unwrap();
    r.add_worker(w1).unwrap();
    assert_eq!(r.is_trusted(w1), Some(true));
    assert_eq!(r.ingest_stats().untrusted_workers, 0);
    let x = r.ingest(w1, LIVE, &empty(0)).unwrap();
    assert_eq!(x.outcome, SeqOutcome::Contiguous);
}

#[test]
fn wiring_errors_are_typed_and_counted() {
    let (r, [w1, _], _) = fleet();
    let stranger = WorkerId::new(99, 0);
    assert_eq!(
        r.ingest(stranger, LIVE, &empty(0)),
        Err(IngestError::UnknownWorker(stranger))
    );
    let KvMessage::Batch { seq, mut batch } = empty(0) else {
        unreachable!()
    };
    batch.dp_rank = Some(3);
    let e = r.ingest(w1, LIVE, &KvMessage::Batch { seq, batch });
    assert_eq!(
        e,
        Err(IngestError::DpRankMismatch {
            publisher: w1,
            batch_dp_rank: 3
        })
    );
    // Nothing advanced: 0 is still the next batch.
    assert_eq!(
        r.ingest(w1, LIVE, &empty(0)).unwrap().outcome,
        SeqOutcome::Contiguous
    );
    let s = r.ingest_stats();
    assert_eq!((s.unknown_worker_messages, s.dp_rank_mismatches), (1, 1));
}

/// A replay end marker on the live channel is refused with a typed error and counted, and
/// changes nothing: worker 1 (blocks of `p` stored at 0, then batch 2: a gap, a replay
/// pending) keeps its blocks and its pending replay, which a replayed batch 1 and the
/// replay's own end marker then complete.
#[test]
fn an_end_marker_on_the_live_channel_is_refused() {
    let (r, [w1, _], p) = fleet();
    r.ingest(w1, LIVE, &batch(0, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    let gap = r.ingest(w1, LIVE, &empty(2)).unwrap();
    assert_eq!(gap.outcome, SeqOutcome::Gap { missed: 1 });
    assert_eq!(
        r.ingest(w1, LIVE, &KvMessage::EndOfReplay),
        Err(IngestError::EndOfReplayOnLive(w1))
    );
    assert_eq!(r.ingest_stats().live_end_markers, 1);
    assert_eq!(blocks(&r, w1), 2);
    assert_eq!(r.is_trusted(w1), Some(false));
    assert_eq!(r.replay_requests().len(), 1);
    // The replay: the witness (batch 0, same ts), batch 1, batch 2, the end marker.
    let confirmed = r
        .ingest(w1, REPLAY, &batch(0, vec![store(1, None, &p[..2 * BS])]))
        .unwrap();
    assert_eq!(confirmed.outcome, SeqOutcome::ReplayConfirmed);
    r.ingest(w1, REPLAY, &empty(1)).unwrap();
    r.ingest(w1, REPLAY, &empty(2)).unwrap();
    r.ingest(w1, REPLAY, &KvMessage::EndOfReplay).unwrap();
    assert_eq!((blocks(&r, w1), r.is_trusted(w1)), (2, Some(true)));
}

/// A batch numbered `u64::MAX` (the replay end marker's number, which the decoder never
/// gives a batch) is refused with a typed error and counted, on either channel, holding a
/// clear or not, and leaves the sequence where it was: no panic, no wrapped frontier.
#[test]
fn a_batch_numbered_like_the_end_marker_is_refused() {
    let (r, [w1, _], _) = fleet();
    for channel in [LIVE, REPLAY] {
        for events in [vec![], vec![KvEvent::AllBlocksCleared]] {
            let KvMessage::Batch { mut batch, .. } = empty(0) else {
                unreachable!()
            };
            batch.events = events;
            let msg = KvMessage::Batch {
                seq: u64::MAX,
                batch,
            };
            assert_eq!(
                r.ingest(w1, channel, &msg),
                Err(IngestError::ReservedSeq(w1))
            );
        }
    }
    assert_eq!(r.ingest_stats().reserved_seq_batches, 4);
    assert_eq!(
        r.ingest(w1, LIVE, &empty(0)).unwrap().outcome,
        SeqOutcome::Contiguous
    );
}

/// A restarted engine first seen past the window (the old stream reached 100; the new one's
/// batches 0..64 were all lost): its later clock says restart, so the old prompt is no
/// longer credited, and the worker waits for a replay from 0.
#[test]
fn a_restart_first_seen_past_the_window_drops_the_old_blocks() {
    let (r, [w1, w2], p) = fleet();
    r.ingest(
        w1,
        LIVE,
        &batch_at(0, 1.0, vec![store(1, None, &p[..2 * BS])]),
    )
    .unwrap();
    for s in 1..=100 {
        r.ingest(w1, LIVE, &batch_at(s, 1.0 + s as f64 * 0.01, Vec::new()))
            .unwrap();
    }
    assert_eq!(route(&r, &p), (w1, 2));
    let x = r
        .ingest(w1, LIVE, &batch_at(64, 3_000.0, Vec::new()))
        .unwrap();
    assert_eq!(
        (x.outcome, x.reset_from, x.trusted),
        (SeqOutcome::Gap { missed: 64 }, Some(100), false)
    );
    assert_eq!(blocks(&r, w1), 0, "the old incarnation's blocks are gone");
    // Only the other worker's one block (`fleet`) is credited now.
    assert_eq!(route(&r, &p), (w2, 1));
    assert_eq!(r.replay_requests()[0].from_seq, 0);
}

/// A store overtaken by the clear that followed it: the clear (batch 1) arrives first and
/// is applied; the late store (batch 0, an earlier clock) is stale, so nothing the engine
/// cleared is credited. A batch that goes back could also be a restart on a clock that is
/// behind, so the worker waits for a replay from the witness, batch 1, whose copy trusts it
/// again.
#[test]
fn a_store_overtaken_by_a_later_clear_is_never_credited() {
    let (r, [w1, w2], p) = fleet();
    let x = r
        .ingest(w1, LIVE, &batch_at(1, 2.0, vec![KvEvent::AllBlocksCleared]))
        .unwrap();
    assert_eq!(x.outcome, SeqOutcome::GapCleared { missed: 1 });
    let x = r
        .ingest(
            w1,
            LIVE,
            &batch_at(0, 1.0, vec![store(1, None, &p[..2 * BS])]),
        )
        .unwrap();
    assert_eq!((x.outcome, x.reset_from), (SeqOutcome::Stale, None));
    assert_eq!(blocks(&r, w1), 0);
    // Only the other worker's one block (`fleet`) is credited.
    assert_eq!(route(&r, &p), (w2, 1));
    assert_eq!(r.is_trusted(w1), Some(false));
    assert_eq!(r.replay_requests()[0].from_seq, 1);
    let x = r
        .ingest(
            w1,
            REPLAY,
            &batch_at(1, 2.0, vec![KvEvent::AllBlocksCleared]),
        )
        .unwrap();
    assert_eq!(x.outcome, SeqOutcome::ReplayConfirmed);
    assert_eq!(r.is_trusted(w1), Some(true));
    assert_eq!(blocks(&r, w1), 0);
}

/// An engine restarted on a host whose clock is behind: the old stream (batch 0 stored
/// `p`'s first 2 blocks) reached 9; the new incarnation's batch 0 carries a clock 30 s
/// earlier. Dropped as late, but the worker is untrusted (its old blocks are not credited)
/// and the replay from the witness, 9, brings only the new incarnation's batch 0 and the
/// end marker: the worker is cleared.
#[test]
fn a_restart_with_a_clock_behind_drops_the_old_blocks() {
    let (r, [w1, w2], p) = fleet();
    r.ingest(
        w1,
        LIVE,
        &batch_at(0, 100.0, vec![store(1, None, &p[..2 * BS])]),
    )
    .unwrap();
    for s in 1..10 {
        r.ingest(w1, LIVE, &batch_at(s, 100.0 + s as f64, Vec::new()))
            .unwrap();
    }
    assert_eq!(route(&r, &p), (w1, 2));
    let x = r.ingest(w1, LIVE, &batch_at(0, 70.0, Vec::new())).unwrap();
    assert_eq!((x.outcome, x.trusted), (SeqOutcome::Stale, false));
    assert_eq!(
        route(&r, &p),
        (w2, 1),
        "untrusted: the old blocks are not credited"
    );
    assert_eq!(r.replay_requests()[0].from_seq, 9);
    r.ingest(w1, REPLAY, &batch_at(0, 70.0, Vec::new()))
        .unwrap();
    let x = r.ingest(w1, REPLAY, &KvMessage::EndOfReplay).unwrap();
    assert!(matches!(x.outcome, SeqOutcome::ReplayShort { .. }));
    assert_eq!(blocks(&r, w1), 0, "cleared");
    assert_eq!(r.is_trusted(w1), Some(true));
}

/// A restart hidden inside a gap: the old stream (batch 0 stored `p`'s first 2 blocks)
/// reached 10; the engine restarted and its batches 0..=29 were lost; its live 30 is a
/// gap. The replay starts at the witness, 10, and the engine's buffer now holds the new
/// incarnation's 10 (a later `ts`): the worker is cleared and the replay applied on an
/// empty residency, so the old incarnation's blocks are never credited again.
#[test]
fn a_restart_inside_a_gap_drops_the_old_blocks_at_the_witness() {
    let (r, [w1, w2], p) = fleet();
    let old = |s: u64| 1.0 + s as f64 * 0.01;
    let new = |s: u64| 3_000.0 + s as f64 * 0.01;
    r.ingest(
        w1,
        LIVE,
        &batch_at(0, old(0), vec![store(1, None, &p[..2 * BS])]),
    )
    .unwrap();
    for s in 1..=10 {
        r.ingest(w1, LIVE, &batch_at(s, old(s), Vec::new()))
            .unwrap();
    }
    assert_eq!(route(&r, &p), (w1, 2));
    let x = r
        .ingest(w1, LIVE, &batch_at(30, new(30), Vec::new()))
        .unwrap();
    assert_eq!(
        (x.outcome, x.trusted),
        (SeqOutcome::Gap { missed: 19 }, false)
    );
    assert_eq!(r.replay_requests()[0].from_seq, 10);
    let x = r
        .ingest(w1, REPLAY, &batch_at(10, new(10), Vec::new()))
        .unwrap();
    assert_eq!(
        (x.outcome, x.reset_from, x.trusted),
        (SeqOutcome::ReplayRestarted, Some(30), false)
    );
    assert_eq!(blocks(&r, w1), 0, "the old incarnation's blocks are gone");
    for s in 11..30 {
        let x = r
            .ingest(w1, REPLAY, &batch_at(s, new(s), Vec::new()))
            .unwrap();
        assert_eq!(x.outcome, SeqOutcome::Replayed);
    }
    let x = r
        .ingest(w1, REPLAY, &batch_at(30, new(30), Vec::new()))
        .unwrap();
    assert!(x.replay_completed && x.trusted);
    // Only the other worker's one block (`fleet`) is credited.
    assert_eq!(route(&r, &p), (w2, 1));
    let s = r.ingest_stats();
    assert_eq!(
        (s.resets, s.replays_completed, s.replays_confirmed),
        (1, 1, 0)
    );
}

/// The same gap without a restart: the witness is the copy applied, the replay completes
/// and the blocks stored before the gap are still credited.
#[test]
fn a_confirmed_witness_keeps_the_blocks_stored_before_the_gap() {
    let (r, [w1, _], p) = fleet();
    let at = |s: u64| 1.0 + s as f64 * 0.01;
    r.ingest(
        w1,
        LIVE,
        &batch_at(0, at(0), vec![store(1, None, &p[..2 * BS])]),
    )
    .unwrap();
    for s in 1..=10 {
        r.ingest(w1, LIVE, &batch_at(s, at(s), Vec::new())).unwrap();
    }
    r.ingest(w1, LIVE, &batch_at(30, at(30), Vec::new()))
        .unwrap();
    let x = r
        .ingest(w1, REPLAY, &batch_at(10, at(10), Vec::new()))
        .unwrap();
    assert_eq!(x.outcome, SeqOutcome::ReplayConfirmed);
    for s in 11..=30 {
        r.ingest(w1, REPLAY, &batch_at(s, at(s), Vec::new()))
            .unwrap();
    }
    assert_eq!(r.is_trusted(w1), Some(true));
    assert_eq!(route(&r, &p), (w1, 2));
    assert_eq!(r.ingest_stats().replays_confirmed, 1);
}
