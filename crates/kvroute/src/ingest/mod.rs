//! The ingest path: decoded KV event messages (`kvroute-wire`) → sequence tracking → index.
//!
//! ```text
//! ZMQ frames ──► kvroute_wire::decode_message ──► KvMessage
//!   ──► Router::ingest(publisher, Channel::Live | Channel::Replay, &msg)
//!         sequence (per publisher = engine DP rank)  ─ SeqOutcome
//!         events → index (tiers, groups, namespaces)  ─ EventTally, EventRejection
//!         per-block extra keys → digests              ─ block_extra_keys
//!         trust flags consulted by `route`           ─ Router::is_trusted
//!   ──► Router::replay_requests() ──► caller sends replay_request(from_seq) to the engine
//! ```
//!
//! # Trust
//! A gap in a publisher's sequence (or an engine restart whose first batches were lost)
//! makes the worker's residency **untrusted**: [`Router::route`](crate::Router::route)
//! treats its overlap as zero, and live batches are held (not applied) until a replay
//! brings the missing ones in order. Trust comes back when the replay reaches the live
//! sequence, when the batch after the gap holds an `AllBlocksCleared` (the engine's cache
//! is empty, so nothing the gap hid is left), when the replay turns out truncated or short
//! (the worker is cleared: from an empty residency, in-order application can only
//! under-state the engine's cache), when the caller gives up with [`Router::skip_replay`],
//! or when the worker is re-registered. A block-size mismatch also makes the worker
//! untrusted, until an `AllBlocksCleared` or a re-registration. An engine restart
//! (a live sequence number that goes back with a later batch `ts`, the last live number
//! again near 0 from a batch with another `ts`, or a replay whose first batch, the last one
//! applied, comes back with another `ts`) clears the worker, so none of its old blocks
//! stays indexed. The per-batch outcomes are [`SeqOutcome`]'s variants; what each event
//! does to the index is in [`EventTally`]'s fields and [`EventRejection`]'s variants.
//!
//! Callers without a replay socket call [`Router::skip_replay`] for every
//! [`ReplayRequest`]: the worker is cleared and trusted at once.

mod apply;
mod extra_keys;
mod sequence;
mod stats;
mod trust;

use kvroute_core::sync::{Mutex, MutexGuard};
use kvroute_core::{EngineHash, Slot, SlotGeneration, WorkerId};
use kvroute_index::index::Overlaps;
use kvroute_wire::{KvEvent, KvMessage};

pub use apply::{EventRejection, EventTally, RejectedEvent, block_store};
pub use extra_keys::block_extra_keys;
pub use sequence::{RESET_WINDOW, SeqOutcome};
pub use stats::{BlockSizeMismatchCount, IngestStats};

use apply::{Applied, Applier};
use sequence::{Sequencer, Verdict};
use stats::IngestCounters;
use trust::{SEQUENCE, TrustFlags};

use crate::router::Router;

/// Which socket a message came from.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): an engine DP rank has exactly these
/// two sockets, and the sequence rules differ for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// The engine's PUB socket (live stream).
    Live,
    /// The engine's replay (ROUTER) socket, answering a [`ReplayRequest`].
    Replay,
}

/// What one ingested message did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IngestReport {
    /// The batch's sequence number (`None` for the replay end marker).
    pub seq: Option<u64>,
    /// What sequence tracking made of it.
    pub outcome: SeqOutcome,
    /// When the message revealed an engine restart: the last live sequence number before
    /// it. The worker was cleared.
    pub reset_from: Option<u64>,
    /// This message completed a pending replay (trust restored).
    pub replay_completed: bool,
    /// Whether `route` credits the worker's overlap after this message.
    pub trusted: bool,
    /// What the applied events did (all zero when nothing was applied).
    pub applied: EventTally,
    /// The worker's pending replay after this message, if one is pending: serve it (send
    /// [`ReplayRequest::request_bytes`] to the engine's replay socket and ingest the answer
    /// with [`Channel::Replay`]) or call [`Router::skip_replay`]. The same request as
    /// [`Router::replay_requests`] lists for this worker, without a fleet-wide scan.
    pub replay: Option<ReplayRequest>,
}

/// A batch applied except for some events (see [`IngestError::Rejected`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedBatch {
    /// What the message did, rejected events aside.
    pub report: IngestReport,
    /// The rejected events, in batch order.
    pub rejected: Vec<RejectedEvent>,
}

/// Why [`Router::ingest`] did not apply a message wholly.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IngestError {
    /// The publisher is not a registered worker: the message is dropped (counted).
    UnknownWorker(WorkerId),
    /// The batch's `data_parallel_rank` is not the publisher's: rejected whole, sequence
    /// state unchanged (counted). A wiring error of the caller.
    DpRankMismatch {
        /// The publisher the caller named.
        publisher: WorkerId,
        /// The rank the batch carries.
        batch_dp_rank: u32,
    },
    /// Some events were rejected (a block-size mismatch, ...); the rest of the batch was
    /// applied and the sequence advanced. Counted.
    Rejected(Box<RejectedBatch>),
    /// A batch numbered `u64::MAX`, the replay end marker's number ([`END_OF_REPLAY_SEQ`]),
    /// which no engine gives a batch (the wire decoder reads that number as the marker):
    /// rejected whole, sequence state unchanged (counted).
    ///
    /// [`END_OF_REPLAY_SEQ`]: crate::END_OF_REPLAY_SEQ
    ReservedSeq(WorkerId),
    /// A replay end marker on the live channel: only a replay answer ends with one.
    /// Rejected, sequence state unchanged (counted): applied, it would end a pending replay
    /// and clear the worker.
    EndOfReplayOnLive(WorkerId),
}

impl core::fmt::Display for IngestError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::DpRankMismatch {
                publisher,
                batch_dp_rank,
            } => write!(
                f,
                "batch of DP rank {batch_dp_rank} from publisher {publisher}"
            ),
            Self::EndOfReplayOnLive(w) => {
                write!(f, "replay end marker from {w} on the live channel")
            }
            Self::ReservedSeq(w) => write!(
                f,
                "batch from {w} numbered u64::MAX, the replay end marker's number"
            ),
            Self::Rejected(b) => {
                write!(f, "{} events rejected", b.rejected.len())?;
                if let Some(first) = b.rejected.first() {
                    write!(f, "; first: {first}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for IngestError {}

/// A worker whose residency waits for a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayRequest {
    /// The publisher (engine id, DP rank).
    pub worker: WorkerId,
    /// The first sequence number to replay: the last batch applied (the *witness*, which
    /// shows whether the engine restarted inside the gap), or the frontier when nothing was
    /// applied yet.
    pub from_seq: u64,
    /// The last live sequence number seen; the replay completes once it is applied.
    pub last_live_seq: Option<u64>,
}

impl ReplayRequest {
    /// The bytes to send to the engine's replay socket
    /// ([`kvroute_wire::replay_request`]).
    pub fn request_bytes(&self) -> [u8; 8] {
        kvroute_wire::replay_request(self.from_seq)
    }
}

/// Sequence and trust state of one slot's publisher.
#[derive(Debug, Default)]
struct Publisher {
    seq: Sequencer,
    /// Trust flags (`trust::SEQUENCE`, `trust::BLOCK_SIZE`), mirrored in [`TrustFlags`].
    flags: u32,
    main_group: Option<u32>,
    /// Scratch for a batch's consecutive removals (`apply::Applied::removals`).
    removals: Vec<EngineHash>,
}

/// The router's ingest state: one publisher per slot, trust flags, counters.
#[derive(Debug)]
pub(crate) struct IngestState {
    publishers: Box<[Mutex<Publisher>]>,
    trust: TrustFlags,
    counters: IngestCounters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Publisher state is plain data, whole between statements.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl IngestState {
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            publishers: (0..slots)
                .map(|_| Mutex::new(Publisher::default()))
                .collect(),
            trust: TrustFlags::new(slots),
            counters: IngestCounters::new(),
        }
    }

    /// Forgets the slot's publisher (worker added or removed): fresh sequence, trusted.
    pub(crate) fn forget(&self, slot: Slot) {
        if let Some(p) = self.publishers.get(slot.index()) {
            *lock(p) = Publisher::default();
        }
        self.trust.set(slot, 0);
    }

    /// Drops what the ingest counters keep per worker (its block-size mismatch counts);
    /// called when the worker is removed.
    pub(crate) fn forget_worker(&self, worker: WorkerId) {
        self.counters.forget_worker(worker);
    }

    /// Whether `slot`'s residency is trusted (no replay pending, no block-size mismatch).
    pub(crate) fn slot_trusted(&self, slot: kvroute_core::Slot) -> bool {
        self.trust.untrusted() == 0 || self.trust.get(slot) == 0
    }

    /// Zeroes the overlaps of untrusted workers (called by `route` after matching).
    pub(crate) fn mask_untrusted(&self, overlaps: &mut Overlaps) {
        self.trust.mask(overlaps);
    }

    fn count(&self, v: &Verdict) {
        let c = &self.counters;
        let add = IngestCounters::add;
        match v.outcome {
            SeqOutcome::Contiguous => add(&c.contiguous, 1),
            SeqOutcome::Gap { missed } => {
                add(&c.gaps, 1);
                add(&c.missed_batches, missed);
            }
            SeqOutcome::GapCleared { missed } => {
                add(&c.gaps_cleared, 1);
                add(&c.missed_batches, missed);
            }
            SeqOutcome::Held => add(&c.held, 1),
            SeqOutcome::Stale => add(&c.stale, 1),
            SeqOutcome::Replayed => add(&c.replayed, 1),
            SeqOutcome::ReplayTruncated { .. } => {
                add(&c.replays_truncated, 1);
                add(&c.replayed, 1);
            }
            SeqOutcome::ReplayIgnored => add(&c.replay_ignored, 1),
            SeqOutcome::ReplayConfirmed => add(&c.replays_confirmed, 1),
            SeqOutcome::ReplayRestarted => add(&c.replayed, 1),
            SeqOutcome::EndOfReplay => {}
            SeqOutcome::ReplayShort { .. } => add(&c.replays_short, 1),
        }
        if v.reset_from.is_some() {
            add(&c.resets, 1);
        }
        if v.replay_completed {
            add(&c.replays_completed, 1);
        }
    }
}

impl Router {
    /// Counts a typed event for a worker that is not registered (`Router::store` and the
    /// other typed event calls).
    pub(crate) fn count_unknown_worker_event(&self) {
        IngestCounters::add(&self.ingest.counters.unknown_worker_events, 1);
    }

    /// Applies one decoded KV event message of `publisher` (engine id, DP rank: one PUB
    /// socket) received on `channel`: tracks its sequence number (module docs of
    /// `ingest`), then applies the events the sequence allows to the prefix index, and
    /// updates the worker's trust (an untrusted worker's overlap is zero in
    /// [`route`](Self::route)). Never panics on any input.
    ///
    /// # Errors
    /// [`IngestError::UnknownWorker`], [`IngestError::DpRankMismatch`] (nothing applied),
    /// [`IngestError::Rejected`] (the other events applied). All are counted in
    /// [`ingest_stats`](Self::ingest_stats).
    pub fn ingest(
        &self,
        publisher: WorkerId,
        channel: Channel,
        msg: &KvMessage,
    ) -> Result<IngestReport, IngestError> {
        let counters = &self.ingest.counters;
        IngestCounters::add(&counters.messages, 1);
        match self.with_slot(publisher, |slot| {
            Ok(self.ingest_at(slot, publisher, channel, msg))
        }) {
            Ok(r) => r,
            Err(_) => {
                IngestCounters::add(&counters.unknown_worker_messages, 1);
                Err(IngestError::UnknownWorker(publisher))
            }
        }
    }

    fn ingest_at(
        &self,
        slot: Slot,
        worker: WorkerId,
        channel: Channel,
        msg: &KvMessage,
    ) -> Result<IngestReport, IngestError> {
        let state = &self.ingest;
        let Some(cell) = state.publishers.get(slot.index()) else {
            return Err(IngestError::UnknownWorker(worker));
        };
        let mut p = lock(cell);
        let (seq, events, verdict): (_, &[KvEvent], _) = match msg {
            KvMessage::EndOfReplay if channel == Channel::Live => {
                IngestCounters::add(&state.counters.live_end_markers, 1);
                return Err(IngestError::EndOfReplayOnLive(worker));
            }
            KvMessage::EndOfReplay => {
                IngestCounters::add(&state.counters.end_markers, 1);
                (None, &[], p.seq.end_of_replay())
            }
            KvMessage::Batch { seq, batch } => {
                if *seq == u64::MAX {
                    IngestCounters::add(&state.counters.reserved_seq_batches, 1);
                    return Err(IngestError::ReservedSeq(worker));
                }
                if let Some(rank) = batch.dp_rank.filter(|&r| r != worker.dp_rank) {
                    IngestCounters::add(&state.counters.dp_rank_mismatches, 1);
                    return Err(IngestError::DpRankMismatch {
                        publisher: worker,
                        batch_dp_rank: rank,
                    });
                }
                let last_clear = batch
                    .events
                    .iter()
                    .rposition(|e| matches!(e, KvEvent::AllBlocksCleared));
                let v = match channel {
                    Channel::Live => p.seq.live(*seq, batch.ts, last_clear),
                    Channel::Replay => p.seq.replay(*seq, batch.ts, last_clear),
                };
                (Some(*seq), &batch.events[..], v)
            }
        };
        state.count(&verdict);
        let pending = p.seq.pending;
        let replay = pending.then(|| ReplayRequest {
            worker,
            from_seq: p.seq.replay_from(),
            last_live_seq: p.seq.last_live,
        });
        let Publisher {
            flags,
            main_group,
            removals,
            ..
        } = &mut *p;
        let mut out = Applied {
            tally: EventTally::default(),
            rejected: Vec::new(),
            flags,
            main_group,
            removals,
        };
        let applier = Applier {
            index: &self.index,
            counters: &state.counters,
            slot,
            worker,
            // The slot is registered (the caller holds membership): its tenancy is known.
            generation: self.table.tenancy(slot).unwrap_or(SlotGeneration(0)),
            predictions: self.predictions.as_ref(),
        };
        if verdict.action.clear {
            applier.clear(&mut out);
        }
        if let Some(from) = verdict.action.apply_from {
            applier.apply(events, from, &mut out);
        }
        *out.flags = (*out.flags & !SEQUENCE) | if pending { SEQUENCE } else { 0 };
        let flags = *out.flags;
        state.trust.set(slot, flags);
        out.tally.count(&state.counters);
        let report = IngestReport {
            seq,
            outcome: verdict.outcome,
            reset_from: verdict.reset_from,
            replay_completed: verdict.replay_completed,
            trusted: flags == 0,
            applied: out.tally,
            replay,
        };
        if out.rejected.is_empty() {
            return Ok(report);
        }
        let rejected = out.rejected;
        IngestCounters::add(&state.counters.rejected_events, rejected.len() as u64);
        Err(IngestError::Rejected(Box::new(RejectedBatch {
            report,
            rejected,
        })))
    }

    /// Every worker waiting for a replay, in slot order, with the sequence number to
    /// replay from. Send [`ReplayRequest::request_bytes`] to the engine's replay socket and
    /// feed the answer to [`ingest`](Self::ingest) with [`Channel::Replay`] (end marker
    /// included), or call [`skip_replay`](Self::skip_replay).
    pub fn replay_requests(&self) -> Vec<ReplayRequest> {
        let mut out = Vec::new();
        for (slot, worker) in self.workers() {
            let Some(cell) = self.ingest.publishers.get(slot.index()) else {
                continue;
            };
            let p = lock(cell);
            if p.seq.pending {
                out.push(ReplayRequest {
                    worker,
                    from_seq: p.seq.replay_from(),
                    last_live_seq: p.seq.last_live,
                });
            }
        }
        out
    }

    /// Marks `worker` for a replay from the last batch applied (its witness), as a gap
    /// would: its overlap counts as zero in `route` until the replay reaches the last live
    /// batch seen. For a caller that dropped live batches before they reached
    /// [`ingest`](Self::ingest) (a full queue): the gap would otherwise show only when the
    /// next batch arrives. Returns the request to serve (the pending one when a replay was
    /// already pending); counted in [`IngestStats::replays_requested`].
    ///
    /// # Errors
    /// [`IngestError::UnknownWorker`].
    pub fn request_replay(&self, worker: WorkerId) -> Result<ReplayRequest, IngestError> {
        let r = self.with_slot(worker, |slot| {
            let Some(cell) = self.ingest.publishers.get(slot.index()) else {
                return Err(crate::error::EventError::UnknownWorker(worker));
            };
            let mut p = lock(cell);
            p.seq.verify();
            p.flags |= SEQUENCE;
            self.ingest.trust.set(slot, p.flags);
            IngestCounters::add(&self.ingest.counters.replays_requested, 1);
            Ok(ReplayRequest {
                worker,
                from_seq: p.seq.replay_from(),
                last_live_seq: p.seq.last_live,
            })
        });
        r.map_err(|_| IngestError::UnknownWorker(worker))
    }

    /// Gives up a pending replay of `worker`: clears its residency and trusts it again
    /// (from an empty residency, later batches applied in order only under-state the
    /// engine's cache); the live stream goes on after the last live batch seen. Returns how
    /// many batches up to that one (lost or held) will never be applied (0 when no replay
    /// was pending).
    ///
    /// # Errors
    /// [`IngestError::UnknownWorker`].
    pub fn skip_replay(&self, worker: WorkerId) -> Result<u64, IngestError> {
        let r = self.with_slot(worker, |slot| {
            let Some(cell) = self.ingest.publishers.get(slot.index()) else {
                return Ok(0);
            };
            let mut p = lock(cell);
            if !p.seq.pending {
                return Ok(0);
            }
            let unreplayed = p.seq.give_up();
            let _ = self.clear_cache(slot);
            p.flags = 0;
            self.ingest.trust.set(slot, 0);
            IngestCounters::add(&self.ingest.counters.replays_skipped, 1);
            Ok(unreplayed)
        });
        r.map_err(|_| IngestError::UnknownWorker(worker))
    }

    /// Whether `route` credits `worker`'s cached blocks (`None`: not registered).
    pub fn is_trusted(&self, worker: WorkerId) -> Option<bool> {
        let slot = self.slot_of(worker)?;
        Some(self.ingest.trust.get(slot) == 0)
    }

    /// The ingest counters and the untrusted-worker gauge.
    pub fn ingest_stats(&self) -> IngestStats {
        self.ingest.counters.snapshot(self.ingest.trust.untrusted())
    }
}
