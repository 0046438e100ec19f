//! Per-publisher sequence tracking: which batch may be applied, and when.
//!
//! A publisher is one engine DP rank (one ZMQ PUB socket). Its batches carry a sequence
//! number starting at 0, +1 per batch (`docs/WIRE-FORMAT.md`, "Transport"). The
//! tracker keeps the *frontier* `next` (the next sequence number to apply) and applies
//! every batch exactly once and in order, whichever channel (live or replay) brings it:
//!
//! | live batch `s`                                   | outcome                          |
//! |--------------------------------------------------|----------------------------------|
//! | `s < last live`, `ts` later than the last live `ts` | reset: clear the worker, frontier 0, then as below |
//! | `s == last live` and `s <` [`RESET_WINDOW`], batch holds `AllBlocksCleared` or its `ts` differs | reset, as above |
//! | `s == last live` with the same `ts` otherwise (a re-delivered copy) | stale: dropped |
//! | `s <= last live` otherwise (a late batch, or a new incarnation whose clock is behind) | stale: dropped, worker untrusted, replay from the witness requested |
//! | `s > last live`, `ts` earlier than the last live `ts` (an old incarnation's batch after a reset) | stale: dropped, worker untrusted, replay from the witness requested |
//! | `s < next`, past the last live one (or none yet), `ts` later than the last applied batch's | reset, as above (a replay brought the batches, then the engine restarted) |
//! | `s < next` (a replay applied it already)         | stale: dropped                   |
//! | `s == next`                                      | contiguous: applied (held while a replay is pending) |
//! | `s > next`, batch holds `AllBlocksCleared`       | gap made moot: applied from the clear |
//! | `s > next` otherwise                             | gap (or held while a replay is pending): not applied, replay from `next` requested, worker untrusted |
//!
//! | replay batch `s`               | outcome                                                  |
//! |--------------------------------|----------------------------------------------------------|
//! | `s == next − 1`, the witness, `ts` the one applied | confirmed: the stream is the same incarnation; dropped |
//! | `s == next − 1`, the witness, another `ts` | restarted inside the gap: clear the worker, apply |
//! | `s > next − 1` while the witness is awaited | the engine no longer buffers the witness: clear the worker, apply (truncated) |
//! | `s < next`                     | stale: dropped                                           |
//! | `s == next`                    | replayed: applied                                        |
//! | `s > next`, no replay pending  | ignored (the live stream brings it)                      |
//! | `s > next`, replay pending     | truncated (the engine no longer buffers `next..s`): clear the worker, apply (or apply from an `AllBlocksCleared` in it) |
//! | end marker, replay pending     | short: clear the worker, frontier past the last live batch |
//!
//! A pending replay completes (trust restored) as soon as the frontier passes the last live
//! sequence number seen. Why clearing is the fallback: from an empty residency, applying
//! any contiguous run of batches in order can only under-state what the engine holds (a
//! store whose parent was cleared is not indexed, a removal of an unknown block is
//! ignored), so a cleared worker is trusted; applying batches out of order is never done,
//! since a late store could resurrect a block a later removal already took.
//!
//! A restart can bring back the last live sequence number itself: an engine that published
//! only batch 0 (or lost its new first batches up to the old last one) and restarted sends
//! a new batch `s == last live`. Only the batch timestamp tells it from a re-delivered copy
//! of the same batch: `ts`, the first element of the wire batch `[ts, events, dp_rank]`
//! (`docs/WIRE-FORMAT.md`, "Batch"), is the engine's wall clock when it
//! published, so a copy carries the very same bits and a new incarnation's batch does not.
//! Timestamps are compared bit for bit (`f64::to_bits`), never by value, so a re-delivered
//! `NaN` is still a copy (the wire decoder rejects a non-finite `ts`, so only a batch
//! built by hand can carry one). A copy must stay stale: applied twice, its stores would count
//! a second copy of each block. A batch holding `AllBlocksCleared` at `s == last live` is a
//! reset whatever its `ts`: if it is in fact a copy, clearing and applying it again leaves
//! what it left the first time (what follows its last clear, on an empty residency), and if
//! it is a new incarnation's, its clear must not be lost. An engine whose clock stood still
//! across a restart (the same `ts` bits) would have its new batch taken as a copy and
//! dropped, keeping the old residency indexed.
//!
//! A restart can also hide inside a gap: the old stream reached `n − 1`, the new
//! incarnation's first batches (up to `n` and past it) were all lost, and its batch `n`
//! and later fill the gap as if nothing happened, while the blocks of the old incarnation
//! stay indexed. Sequence numbers cannot show it, so a replay starts one batch early, at
//! the *witness* `n − 1`, the last batch applied: the engine's replay answers every
//! buffered batch from the number asked, so the witness comes first, and a copy of the
//! batch applied carries the same `ts` bits. The same bits confirm the stream (the
//! witness is dropped, the replay goes on); other bits mean the engine restarted inside
//! the gap, so the worker is cleared and the replay applied from the witness on (from an
//! empty residency a contiguous run can only under-state the cache). A replay without the
//! witness (the engine no longer buffers it) cannot confirm anything and is truncated.
//! A gap before anything was applied (frontier 0) needs no witness.
//!
//! A fresh registration expects sequence 0: a first batch with `s > 0` (the router joined
//! a running engine) is a gap from 0, recovered by a replay or [`Router::skip_replay`].
//!
//! [`Router::skip_replay`]: crate::Router::skip_replay

/// Within this many batches of the stream's start, a repeat of the last live sequence
/// number is an engine restart unless it is an exact copy (same batch `ts`) holding no
/// `AllBlocksCleared` (a restarted engine starts again at 0 and may lose its first batches
/// up to the old last one). A live number that goes backwards is told apart by the batch
/// timestamp alone, at any distance: the engine's clock moved on (a new incarnation, whose
/// first batches may all be lost: cleared, a gap from 0) or did not (a late batch: dropped,
/// so a store reordered behind a later clear never comes back).
pub const RESET_WINDOW: u64 = 64;

/// What the sequence tracker made of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeqOutcome {
    /// Live batch with the next expected sequence number: applied.
    Contiguous,
    /// Live batch after lost batches: not applied; the worker is untrusted and a replay
    /// from the frontier is requested ([`Router::replay_requests`](crate::Router::replay_requests)).
    Gap {
        /// Batches lost since the last live batch seen (or the frontier).
        missed: u64,
    },
    /// Live batch after lost batches, holding an `AllBlocksCleared`: the lost batches are
    /// moot; applied from the (last) clear on.
    GapCleared {
        /// Batches lost.
        missed: u64,
    },
    /// Live batch arriving while a replay is pending: not applied (the replay brings it).
    Held,
    /// Already applied, or older than the stream: dropped.
    Stale,
    /// Replayed batch at the frontier: applied.
    Replayed,
    /// Replayed batch past the frontier: the engine no longer buffers the batches between;
    /// the worker was cleared and the batch applied.
    ReplayTruncated {
        /// Batches the replay could not deliver.
        missing: u64,
    },
    /// Replayed batch past the frontier with no replay pending: ignored.
    ReplayIgnored,
    /// The replay's witness (the last batch applied, sent again) with the batch `ts` it
    /// was applied with: the engine did not restart inside the gap; dropped.
    ReplayConfirmed,
    /// The replay's witness with another batch `ts`: the engine restarted inside the gap;
    /// the worker was cleared and the batch applied.
    ReplayRestarted,
    /// Replay end marker after a complete replay, or with none pending.
    EndOfReplay,
    /// Replay end marker while the replay was still short of the live sequence: the worker
    /// was cleared and the frontier moved past the last live batch.
    ReplayShort {
        /// Batches up to the last live one (lost or held) that were never applied.
        unreplayed: u64,
    },
}

/// What the applier must do for a message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Action {
    /// Clear the worker's residency first.
    pub clear: bool,
    /// Apply the batch's events from this position (`None`: apply nothing).
    pub apply_from: Option<usize>,
}

/// The verdict on one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub outcome: SeqOutcome,
    pub action: Action,
    /// The last live sequence number before a detected restart.
    pub reset_from: Option<u64>,
    /// This message completed a pending replay.
    pub replay_completed: bool,
}

/// Sequence state of one publisher.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sequencer {
    /// The next sequence number to apply.
    pub next: u64,
    /// The last live sequence number seen.
    pub last_live: Option<u64>,
    /// The batch `ts` of the last live batch seen (`f64::to_bits`; meaningless while
    /// `last_live` is `None`).
    pub last_live_ts: u64,
    /// A replay from `next` is needed (the worker is untrusted meanwhile).
    pub pending: bool,
    /// The batch `ts` (`f64::to_bits`) of the last batch applied, `next − 1`
    /// (meaningless while `next` is 0).
    pub applied_ts: u64,
    /// The witness a pending replay must start with (`next − 1`), until it arrives.
    pub witness: Option<u64>,
}

const APPLY: Action = Action {
    clear: false,
    apply_from: Some(0),
};
const SKIP: Action = Action {
    clear: false,
    apply_from: None,
};

impl Sequencer {
    fn verdict(outcome: SeqOutcome, action: Action) -> Verdict {
        Verdict {
            outcome,
            action,
            reset_from: None,
            replay_completed: false,
        }
    }

    /// Ends a pending replay once the frontier passed the last live batch (and the
    /// witness, if one was awaited, came).
    fn settle(&mut self, v: &mut Verdict) {
        if self.pending && self.witness.is_none() && self.last_live.is_none_or(|l| self.next > l) {
            self.pending = false;
            v.replay_completed = true;
        }
    }

    /// Asks for a replay from the witness (the worker is untrusted until it answers), when
    /// none is pending.
    pub(crate) fn verify(&mut self) {
        if !self.pending {
            if self.next > 0 {
                self.witness = Some(self.next - 1);
            }
            self.pending = true;
        }
    }

    /// The first sequence number a pending replay must bring: the witness, or the frontier.
    pub fn replay_from(&self) -> u64 {
        self.witness.unwrap_or(self.next)
    }

    /// Records batch `s` (sent at `ts`, as bits) as applied: the frontier moves past it.
    fn applied(&mut self, s: u64, ts: u64) {
        self.next = s + 1;
        self.applied_ts = ts;
    }

    /// A live batch `s` sent at `ts` (the batch timestamp, seconds since the Unix epoch, as
    /// on the wire); `last_clear` is the position of its last `AllBlocksCleared`.
    pub fn live(&mut self, s: u64, ts: f64, last_clear: Option<usize>) -> Verdict {
        let ts = ts.to_bits();
        let mut reset_from = None;
        if let Some(l) = self.last_live {
            let new_incarnation = s == l && (last_clear.is_some() || ts != self.last_live_ts);
            // Backwards with a later engine clock: a new incarnation, whatever the number
            // (its first batches may all have been lost). Backwards with an earlier or equal
            // one: a late batch, which must not undo what later batches did, or a new
            // incarnation on a host whose clock is behind: dropped, and checked by a replay
            // from the witness (an exact copy of the last live batch needs no check).
            let restarted = s < l && f64::from_bits(ts) > f64::from_bits(self.last_live_ts);
            if restarted || (new_incarnation && s < RESET_WINDOW) {
                reset_from = Some(l);
                *self = Self::default();
            } else if s <= l {
                let copy = s == l && ts == self.last_live_ts;
                if !copy {
                    self.verify();
                }
                return Self::verdict(SeqOutcome::Stale, SKIP);
            } else if f64::from_bits(ts) < f64::from_bits(self.last_live_ts) {
                // Forward in number, backward in the engine's clock: a batch of an earlier
                // incarnation arriving after the new one's (a restart was detected on the
                // way) must not be applied on top of it. Dropped, and checked by a replay
                // from the witness (an engine that merely stepped its clock back replays
                // the batch, which the witness then confirms).
                self.verify();
                return Self::verdict(SeqOutcome::Stale, SKIP);
            }
        }
        if reset_from.is_none()
            && s < self.next
            && self.last_live.is_none_or(|l| s > l)
            && f64::from_bits(ts) > f64::from_bits(self.applied_ts)
        {
            // A live batch at or below the frontier that only a replay had brought (before
            // any live batch, or past the last live one), sent later than the last batch
            // applied: not a copy of one of those, a new incarnation.
            reset_from = Some(self.next - 1);
            *self = Self::default();
        }
        let prev_live = self.last_live;
        self.last_live = Some(s);
        self.last_live_ts = ts;
        let mut v = self.live_in_order(s, ts, prev_live, last_clear);
        if reset_from.is_some() {
            v.reset_from = reset_from;
            v.action.clear = true;
        }
        v
    }

    fn live_in_order(
        &mut self,
        s: u64,
        ts: u64,
        prev_live: Option<u64>,
        clear: Option<usize>,
    ) -> Verdict {
        if s < self.next {
            return Self::verdict(SeqOutcome::Stale, SKIP);
        }
        // While a replay is pending (a check from the witness after a batch that went
        // back), the next batch waits for it too (held, below).
        if s == self.next && !self.pending {
            self.applied(s, ts);
            let mut v = Self::verdict(SeqOutcome::Contiguous, APPLY);
            self.settle(&mut v);
            return v;
        }
        let seen = prev_live.map_or(self.next, |l| (l + 1).max(self.next));
        let missed = s - seen;
        if let Some(i) = clear {
            // What the batch leaves from its clear on owes nothing to earlier batches: no
            // witness needed.
            self.applied(s, ts);
            self.witness = None;
            let action = Action {
                clear: false,
                apply_from: Some(i),
            };
            let mut v = Self::verdict(SeqOutcome::GapCleared { missed }, action);
            self.settle(&mut v);
            return v;
        }
        if !self.pending && self.next > 0 {
            self.witness = Some(self.next - 1);
        }
        self.pending = true;
        let outcome = if missed > 0 {
            SeqOutcome::Gap { missed }
        } else {
            SeqOutcome::Held
        };
        Self::verdict(outcome, SKIP)
    }

    /// A replayed batch `s` sent at `ts` (the batch timestamp, as on the wire).
    pub fn replay(&mut self, s: u64, ts: f64, last_clear: Option<usize>) -> Verdict {
        let ts = ts.to_bits();
        if let Some(w) = self.witness.filter(|_| self.pending) {
            if s < w {
                return Self::verdict(SeqOutcome::Stale, SKIP);
            }
            self.witness = None;
            if s == w && ts == self.applied_ts {
                let mut v = Self::verdict(SeqOutcome::ReplayConfirmed, SKIP);
                self.settle(&mut v);
                return v;
            }
            let clear_from = Action {
                clear: true,
                apply_from: Some(last_clear.unwrap_or(0)),
            };
            let mut v = if s == w {
                let mut v = Self::verdict(SeqOutcome::ReplayRestarted, clear_from);
                v.reset_from = self.last_live;
                v
            } else {
                // `s > w`: the batches from the frontier up to `s` are not delivered either.
                let missing = s.saturating_sub(self.next);
                Self::verdict(SeqOutcome::ReplayTruncated { missing }, clear_from)
            };
            self.applied(s, ts);
            self.settle(&mut v);
            return v;
        }
        if s < self.next {
            return Self::verdict(SeqOutcome::Stale, SKIP);
        }
        let mut v = if s == self.next {
            Self::verdict(SeqOutcome::Replayed, APPLY)
        } else if !self.pending {
            return Self::verdict(SeqOutcome::ReplayIgnored, SKIP);
        } else if let Some(i) = last_clear {
            Self::verdict(
                SeqOutcome::Replayed,
                Action {
                    clear: false,
                    apply_from: Some(i),
                },
            )
        } else {
            let missing = s - self.next;
            Self::verdict(
                SeqOutcome::ReplayTruncated { missing },
                Action {
                    clear: true,
                    apply_from: Some(0),
                },
            )
        };
        self.applied(s, ts);
        self.settle(&mut v);
        v
    }

    /// The replay end marker.
    pub fn end_of_replay(&mut self) -> Verdict {
        if !self.pending {
            return Self::verdict(SeqOutcome::EndOfReplay, SKIP);
        }
        let v = self.give_up();
        Self::verdict(
            SeqOutcome::ReplayShort { unreplayed: v },
            Action {
                clear: true,
                apply_from: None,
            },
        )
    }

    /// Abandons a pending replay: the frontier moves past the last live batch (the caller
    /// clears the worker). Returns how many batches up to the last live one (lost or held)
    /// were never applied.
    pub fn give_up(&mut self) -> u64 {
        let after_live = self.last_live.map_or(self.next, |l| l + 1);
        let unreplayed = after_live.saturating_sub(self.next);
        if after_live > self.next {
            // The worker is cleared; the last live batch stands for the last applied one.
            self.applied_ts = self.last_live_ts;
        }
        self.next = self.next.max(after_live);
        self.pending = false;
        self.witness = None;
        unreplayed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batch `ts` the first incarnation of an engine sends with batch `seq` (one batch
    /// every 10 ms from an arbitrary start).
    fn at(seq: u64) -> f64 {
        1_700_000_000.0 + seq as f64 * 0.01
    }

    /// The batch `ts` of the same engine's next incarnation (restarted 60 s later).
    fn restarted(seq: u64) -> f64 {
        1_700_000_060.0 + seq as f64 * 0.01
    }

    fn outcome(v: Verdict) -> (SeqOutcome, Option<usize>, bool) {
        (v.outcome, v.action.apply_from, v.action.clear)
    }

    #[test]
    fn contiguous_stream_applies_every_batch() {
        let mut s = Sequencer::default();
        for i in 0..5 {
            assert_eq!(
                outcome(s.live(i, at(i), None)),
                (SeqOutcome::Contiguous, Some(0), false)
            );
        }
        assert_eq!((s.next, s.last_live, s.pending), (5, Some(4), false));
    }

    /// 0, 1, then 4: batches 2 and 3 lost; 5 is held; replay 2..=5 catches up at 5.
    #[test]
    fn gap_holds_live_until_the_replay_reaches_it() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        s.live(1, at(1), None);
        assert_eq!(
            outcome(s.live(4, at(4), None)),
            (SeqOutcome::Gap { missed: 2 }, None, false)
        );
        assert!(s.pending && s.next == 2);
        assert_eq!(
            outcome(s.live(5, at(5), None)),
            (SeqOutcome::Held, None, false)
        );
        // The replay starts at the witness, batch 1, the same copy: confirmed.
        assert_eq!(s.replay_from(), 1);
        let v = s.replay(1, at(1), None);
        assert_eq!(outcome(v), (SeqOutcome::ReplayConfirmed, None, false));
        for r in 2..5 {
            let v = s.replay(r, at(r), None);
            assert_eq!(outcome(v), (SeqOutcome::Replayed, Some(0), false));
            assert!(!v.replay_completed);
        }
        let v = s.replay(5, at(5), None);
        assert!(v.replay_completed && !s.pending);
        // The replay's copies of what the frontier passed are stale; live goes on at 6.
        assert_eq!(s.replay(3, at(3), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.live(6, at(6), None).outcome, SeqOutcome::Contiguous);
        assert_eq!(s.end_of_replay().outcome, SeqOutcome::EndOfReplay);
    }

    #[test]
    fn stale_and_duplicate_live_batches_are_dropped() {
        let mut s = Sequencer::default();
        for i in 0..100 {
            s.live(i, at(i), None);
        }
        assert_eq!(s.live(99, at(99), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.live(80, at(80), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.next, 100);
    }

    #[test]
    fn a_sequence_back_near_zero_is_a_restart() {
        let mut s = Sequencer::default();
        for i in 0..100 {
            s.live(i, at(i), None);
        }
        let v = s.live(0, restarted(0), None);
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), true));
        assert_eq!(v.reset_from, Some(99));
        assert_eq!(
            s.live(3, restarted(3), None).outcome,
            SeqOutcome::Gap { missed: 2 }
        );
        // Restarted with its first batches lost: cleared, then a gap from 0.
        let mut t = Sequencer::default();
        for i in 0..100 {
            t.live(i, at(i), None);
        }
        let v = t.live(2, restarted(2), None);
        assert_eq!(outcome(v), (SeqOutcome::Gap { missed: 2 }, None, true));
        assert!(t.pending && t.next == 0);
    }

    /// A new incarnation whose first batches were all lost, past the window too: the old
    /// stream reached 1,000, the new one is first seen at 64, 100 or 500. Its later clock
    /// says restart: cleared, a gap from 0 (untrusted until replayed or skipped), never
    /// stale with the old blocks still trusted.
    #[test]
    fn a_restart_first_seen_past_the_window_is_a_restart() {
        for first in [RESET_WINDOW, 100, 500] {
            let mut s = Sequencer::default();
            for i in 0..=1_000 {
                s.live(i, at(i), None);
            }
            let v = s.live(first, restarted(first), None);
            assert_eq!(
                outcome(v),
                (SeqOutcome::Gap { missed: first }, None, true),
                "first seen {first}"
            );
            assert_eq!(v.reset_from, Some(1_000));
            assert!(s.pending && s.next == 0);
        }
    }

    /// A batch delivered after the one that followed it (which cleared the cache) carries
    /// its earlier clock: a late batch, dropped; it is not a restart that would clear and
    /// then apply it, crediting blocks the clear removed. It could also be a new
    /// incarnation whose clock is behind, so a replay from the witness (batch 1) checks:
    /// the copy of batch 1 confirms the stream and trust returns.
    #[test]
    fn a_late_batch_behind_a_clear_is_stale() {
        let mut s = Sequencer::default();
        // Batch 0 (a store, sent first) is overtaken by batch 1 (a clear).
        let v = s.live(1, at(1), Some(0));
        assert_eq!(
            outcome(v),
            (SeqOutcome::GapCleared { missed: 1 }, Some(0), false)
        );
        let v = s.live(0, at(0), None);
        assert_eq!(outcome(v), (SeqOutcome::Stale, None, false));
        assert_eq!(v.reset_from, None);
        assert_eq!((s.next, s.last_live, s.pending), (2, Some(1), true));
        assert_eq!(s.replay_from(), 1);
        let v = s.replay(1, at(1), Some(0));
        assert_eq!(v.outcome, SeqOutcome::ReplayConfirmed);
        assert!(v.replay_completed && !s.pending);
    }

    /// A new incarnation on a host whose clock is behind: the old stream reached 9; the
    /// engine restarts and sends 0 with a clock 30 s earlier. Dropped as late, but checked:
    /// the replay from the witness (9) has only the new incarnation's batches 0 and 1, then
    /// the end marker: short, the worker is cleared.
    #[test]
    fn a_restart_with_a_clock_behind_is_checked_by_the_witness() {
        let mut s = Sequencer::default();
        for i in 0..10 {
            s.live(i, at(i), None);
        }
        let behind = |i: u64| at(i) - 30.0;
        assert_eq!(s.live(0, behind(0), None).outcome, SeqOutcome::Stale);
        assert!(s.pending && s.replay_from() == 9);
        assert_eq!(s.replay(0, behind(0), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.replay(1, behind(1), None).outcome, SeqOutcome::Stale);
        assert_eq!(
            outcome(s.end_of_replay()),
            (SeqOutcome::ReplayShort { unreplayed: 0 }, None, true)
        );
        assert!(!s.pending);
    }

    #[test]
    fn a_clear_after_a_gap_makes_it_moot() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        let v = s.live(7, at(7), Some(2));
        assert_eq!(
            outcome(v),
            (SeqOutcome::GapCleared { missed: 6 }, Some(2), false)
        );
        assert!(!s.pending && s.next == 8);
    }

    #[test]
    fn truncated_and_short_replays_clear() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        s.live(10, at(10), None); // gap: 1..=9 lost, frontier 1, witness 0
        let v = s.replay(0, at(0), None);
        assert_eq!(v.outcome, SeqOutcome::ReplayConfirmed);
        let v = s.replay(4, at(4), None);
        assert_eq!(
            outcome(v),
            (SeqOutcome::ReplayTruncated { missing: 3 }, Some(0), true)
        );
        assert!(s.pending && s.next == 5);
        let v = s.end_of_replay();
        assert_eq!(
            outcome(v),
            (SeqOutcome::ReplayShort { unreplayed: 6 }, None, true)
        );
        assert!(!s.pending && s.next == 11);
        assert_eq!(s.live(11, at(11), None).outcome, SeqOutcome::Contiguous);
    }

    /// The old stream reached 10; the new incarnation's batches 0..=29 were lost and its
    /// live 30 looks like a gap. The replay from the witness, 10, brings the new
    /// incarnation's batch 10 (another `ts`): restarted inside the gap, so the worker is
    /// cleared and the replay applied from there to the live 30.
    #[test]
    fn a_restart_inside_a_gap_is_found_by_the_witness() {
        let mut s = Sequencer::default();
        for i in 0..=10 {
            s.live(i, at(i), None);
        }
        let v = s.live(30, restarted(30), None);
        assert_eq!(outcome(v), (SeqOutcome::Gap { missed: 19 }, None, false));
        assert_eq!(s.replay_from(), 10);
        let v = s.replay(10, restarted(10), None);
        assert_eq!(outcome(v), (SeqOutcome::ReplayRestarted, Some(0), true));
        assert_eq!(v.reset_from, Some(30));
        assert!(s.pending && s.next == 11);
        for r in 11..30 {
            assert_eq!(
                s.replay(r, restarted(r), None).outcome,
                SeqOutcome::Replayed
            );
        }
        let v = s.replay(30, restarted(30), None);
        assert!(v.replay_completed && !s.pending && s.next == 31);
    }

    /// A replay that starts past its witness (the engine no longer buffers batch 10) cannot
    /// show the stream did not restart: truncated, the worker cleared, even though it
    /// brings every batch the gap lost.
    #[test]
    fn a_replay_without_its_witness_is_truncated() {
        let mut s = Sequencer::default();
        for i in 0..=10 {
            s.live(i, at(i), None);
        }
        s.live(20, at(20), None);
        let v = s.replay(11, at(11), None);
        assert_eq!(
            outcome(v),
            (SeqOutcome::ReplayTruncated { missing: 0 }, Some(0), true)
        );
        for r in 12..=20 {
            s.replay(r, at(r), None);
        }
        assert!(!s.pending && s.next == 21);
    }

    /// A batch older than the witness (a replay asked for from further back) is stale,
    /// and the witness still decides.
    #[test]
    fn batches_before_the_witness_are_stale() {
        let mut s = Sequencer::default();
        for i in 0..=10 {
            s.live(i, at(i), None);
        }
        s.live(12, at(12), None);
        assert_eq!(s.replay(9, at(9), None).outcome, SeqOutcome::Stale);
        assert_eq!(
            s.replay(10, at(10), None).outcome,
            SeqOutcome::ReplayConfirmed
        );
        assert_eq!(s.replay(11, at(11), None).outcome, SeqOutcome::Replayed);
        assert!(s.replay(12, at(12), None).replay_completed);
    }

    #[test]
    fn unrequested_replay_ahead_is_ignored() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        assert_eq!(s.replay(5, at(5), None).outcome, SeqOutcome::ReplayIgnored);
        assert_eq!(s.replay(1, at(1), None).outcome, SeqOutcome::Replayed);
        assert_eq!(s.live(1, at(1), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.live(2, at(2), None).outcome, SeqOutcome::Contiguous);
    }

    #[test]
    fn joining_a_running_engine_is_a_gap_from_zero() {
        let mut s = Sequencer::default();
        assert_eq!(
            s.live(500, at(500), None).outcome,
            SeqOutcome::Gap { missed: 500 }
        );
        assert_eq!(s.give_up(), 501);
        assert!(!s.pending && s.next == 501);
    }

    /// Batch 0 only, then the engine restarts and sends its new batch 0 (a later `ts`):
    /// a restart, so the worker is cleared and the new batch applied; the new stream goes on.
    #[test]
    fn a_restart_after_only_batch_0_clears_the_worker() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        let v = s.live(0, restarted(0), None);
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), true));
        assert_eq!(v.reset_from, Some(0));
        assert_eq!((s.next, s.last_live, s.pending), (1, Some(0), false));
        let v = s.live(1, restarted(1), None);
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), false));
        // 0..=2, then the new incarnation's 2 (its 0 and 1 lost): cleared, gap of 2 from 0.
        let mut s = Sequencer::default();
        for i in 0..3 {
            s.live(i, at(i), None);
        }
        let v = s.live(2, restarted(2), None);
        assert_eq!(outcome(v), (SeqOutcome::Gap { missed: 2 }, None, true));
        assert_eq!(v.reset_from, Some(2));
        assert_eq!((s.next, s.last_live, s.pending), (0, Some(2), true));
    }

    /// A re-delivered copy of the last live batch (same number, same `ts` bits, `NaN`
    /// included, for a hand-built batch) is dropped, near 0 as well.
    #[test]
    fn a_copy_of_the_last_live_batch_is_stale() {
        for ts in [at(0), f64::NAN] {
            let mut s = Sequencer::default();
            s.live(0, ts, None);
            let v = s.live(0, ts, None);
            assert_eq!(outcome(v), (SeqOutcome::Stale, None, false));
            assert_eq!(v.reset_from, None);
            assert_eq!((s.next, s.last_live, s.pending), (1, Some(0), false));
        }
        let mut s = Sequencer::default();
        for i in 0..6 {
            s.live(i, at(i), None);
        }
        assert_eq!(s.live(5, at(5), None).outcome, SeqOutcome::Stale);
        assert_eq!(s.next, 6);
    }

    /// At the last live number, a batch holding `AllBlocksCleared` is a restart even with
    /// the same `ts`: cleared, then applied (from 0 at the frontier 0; from the clear after
    /// a gap from 0). Beyond the window it stays stale.
    #[test]
    fn a_clear_at_the_last_live_number_is_a_restart() {
        let mut s = Sequencer::default();
        s.live(0, at(0), Some(0));
        let v = s.live(0, at(0), Some(0));
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), true));
        assert_eq!(v.reset_from, Some(0));
        assert_eq!((s.next, s.last_live, s.pending), (1, Some(0), false));
        // 0..=3, then 3 again holding a clear at position 1: 0..=2 of the new stream are
        // moot (missed 3 - 0 = 3); applied from position 1.
        let mut s = Sequencer::default();
        for i in 0..4 {
            s.live(i, at(i), None);
        }
        let v = s.live(3, restarted(3), Some(1));
        assert_eq!(
            outcome(v),
            (SeqOutcome::GapCleared { missed: 3 }, Some(1), true)
        );
        assert_eq!(v.reset_from, Some(3));
        assert_eq!((s.next, s.last_live, s.pending), (4, Some(3), false));
        let mut s = Sequencer::default();
        for i in 0..=RESET_WINDOW {
            s.live(i, at(i), None);
        }
        let v = s.live(RESET_WINDOW, restarted(RESET_WINDOW), Some(0));
        assert_eq!(outcome(v), (SeqOutcome::Stale, None, false));
    }

    /// Batches a replay brought before any live batch (0 and 1, the frontier at 2), then
    /// the engine restarts: its new batch 0, sent later than the last batch applied, is a
    /// reset (cleared, applied), not a stale copy; and so is a new batch 1 (no clear, the
    /// new batch 0 lost). A re-delivered copy of an applied batch (the same `ts`) and a
    /// late batch from before the applied one stay stale.
    #[test]
    fn a_restart_after_a_replay_before_any_live_batch_resets() {
        let replayed = || {
            let mut s = Sequencer::default();
            s.replay(0, at(0), None);
            s.replay(1, at(1), None);
            assert_eq!((s.next, s.last_live), (2, None));
            s
        };
        let mut s = replayed();
        let v = s.live(0, restarted(0), Some(0));
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), true));
        assert_eq!(v.reset_from, Some(1));
        assert_eq!((s.next, s.last_live, s.pending), (1, Some(0), false));
        let mut s = replayed();
        let v = s.live(1, restarted(1), None);
        // From the reset the new stream expects 0: batch 1 is a gap of one, cleared first.
        assert_eq!(outcome(v), (SeqOutcome::Gap { missed: 1 }, None, true));
        assert_eq!(v.reset_from, Some(1));
        assert_eq!((s.next, s.pending), (0, true));
        for (seq, ts) in [(1, at(1)), (0, at(0))] {
            let mut s = replayed();
            assert_eq!(
                outcome(s.live(seq, ts, None)),
                (SeqOutcome::Stale, None, false)
            );
            assert_eq!((s.next, s.pending), (2, false));
        }
    }

    /// 0, then the engine restarts and its new batch 0 arrives (a reset); then the old
    /// incarnation's batch 1, delayed: a higher number but an earlier clock than the last
    /// live batch, so it is not applied on top of the new stream: dropped, and a replay from
    /// the witness (the new batch 0) requested. The replay confirms the witness, and the new
    /// batch 1 is then applied.
    #[test]
    fn an_old_incarnations_batch_after_a_reset_is_not_applied() {
        let mut s = Sequencer::default();
        s.live(0, at(0), None);
        let v = s.live(0, restarted(0), Some(0));
        assert_eq!(v.reset_from, Some(0));
        let v = s.live(1, at(1), None);
        assert_eq!(outcome(v), (SeqOutcome::Stale, None, false));
        assert_eq!((s.next, s.pending, s.replay_from()), (1, true, 0));
        let v = s.replay(0, restarted(0), Some(0));
        assert_eq!(outcome(v), (SeqOutcome::ReplayConfirmed, None, false));
        assert!(v.replay_completed);
        let v = s.live(1, restarted(1), None);
        assert_eq!(outcome(v), (SeqOutcome::Contiguous, Some(0), false));
        assert_eq!((s.next, s.last_live, s.pending), (2, Some(1), false));
    }
}
