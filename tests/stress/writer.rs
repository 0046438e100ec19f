//! One writer thread: the KV events and the lifecycle (add, remove, re-add) of the workers
//! it owns. No other thread writes these workers, so each worker's events reach the router
//! in one deterministic order, and every call's result is checked against the writer's own
//! reference model of the index (`index_common::Model`, keyed by the slot the router gave).
//!
//! Direct workers get `store` / `store_hashes` / `remove_blocks` / `clear_blocks`; ingest
//! workers get KV event batches through `Router::ingest` with sequence numbers: contiguous
//! batches, gaps recovered by `skip_replay` or by a replay, stale duplicates (a restart
//! when the duplicate holds `AllBlocksCleared`), batches of the wrong DP rank. Events for a worker that is not registered must be refused.

use kvroute::ingest::{EventTally, RESET_WINDOW, SeqOutcome, block_store};
use kvroute::{BlockRemoved, BlockStored, EventEncoding, KvEvent, KvEventBatch, KvMessage, Medium};
use kvroute::{
    BlockStore, Channel, EngineHash, EventError, HashNamespace, IngestError, IngestReport,
    ReplayRequest, Router, SequenceHash, Slot, WorkerError, WorkerId,
};
use kvroute::{IndexError, StoreOutcome};

use super::{
    BRANCHES, BS, CAP, DEPTH, DIRECT_PER_WRITER, MIN_WRITER_OPS, NOISE_EH, Run, SLOTS, Tree,
    owned_by,
};
use crate::index_common::{Model, Rng};

/// What a writer's `ingest` calls must have added to `Router::ingest_stats` (every ingest
/// counter not listed here must stay 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestTally {
    pub messages: u64,
    pub contiguous: u64,
    pub gaps: u64,
    pub missed_batches: u64,
    pub stale: u64,
    pub resets: u64,
    pub gaps_cleared: u64,
    pub replayed: u64,
    pub replays_completed: u64,
    pub replays_confirmed: u64,
    pub replays_skipped: u64,
    pub end_markers: u64,
    pub stored_blocks: u64,
    pub removed_blocks: u64,
    pub unknown_removed_blocks: u64,
    pub clears: u64,
    pub unknown_parent_stores: u64,
    pub unknown_parent_blocks: u64,
    pub unknown_worker_messages: u64,
    pub unknown_worker_events: u64,
    pub dp_rank_mismatches: u64,
}

impl IngestTally {
    /// Adds another writer's tally.
    pub fn add(&mut self, o: &Self) {
        self.messages += o.messages;
        self.contiguous += o.contiguous;
        self.gaps += o.gaps;
        self.missed_batches += o.missed_batches;
        self.stale += o.stale;
        self.resets += o.resets;
        self.gaps_cleared += o.gaps_cleared;
        self.replayed += o.replayed;
        self.replays_completed += o.replays_completed;
        self.replays_confirmed += o.replays_confirmed;
        self.replays_skipped += o.replays_skipped;
        self.end_markers += o.end_markers;
        self.stored_blocks += o.stored_blocks;
        self.removed_blocks += o.removed_blocks;
        self.unknown_removed_blocks += o.unknown_removed_blocks;
        self.clears += o.clears;
        self.unknown_parent_stores += o.unknown_parent_stores;
        self.unknown_parent_blocks += o.unknown_parent_blocks;
        self.unknown_worker_messages += o.unknown_worker_messages;
        self.unknown_worker_events += o.unknown_worker_events;
        self.dp_rank_mismatches += o.dp_rank_mismatches;
    }

    fn applied(&mut self, t: &EventTally, unknown_parent_stores: u64) {
        self.stored_blocks += t.stored_blocks as u64;
        self.removed_blocks += t.removed_blocks as u64;
        self.unknown_removed_blocks += t.unknown_removed_blocks as u64;
        self.clears += t.clears as u64;
        self.unknown_parent_blocks += t.unknown_parent_blocks as u64;
        self.unknown_parent_stores += unknown_parent_stores;
    }
}

/// How often each kind of operation ran. These depend only on the writer's seed and its
/// minimum operation count, never on timing, so the test may require them to be non-zero.
#[derive(Clone, Copy, Debug, Default)]
pub struct Coverage {
    pub ops: u64,
    pub adds: u64,
    pub removals: u64,
    pub refused_events: u64,
    pub gaps_skipped: u64,
    pub gaps_replayed: u64,
}

/// What a writer hands back after the run.
pub struct WriterOut {
    /// The model of the slots its workers hold at the end.
    pub model: Model,
    /// Every (worker, slot) registration it made, in order.
    pub history: Vec<(WorkerId, Slot)>,
    /// Its workers registered at the end, with their slots.
    pub registered: Vec<(WorkerId, Slot)>,
    pub ingest: IngestTally,
    pub coverage: Coverage,
}

struct Owned {
    id: WorkerId,
    ingest: bool,
    slot: Option<Slot>,
    /// The next live sequence number to send (0 after each registration).
    next_seq: u64,
    /// The last live batch sent since the registration (resent as a stale duplicate).
    last_live: Option<KvMessage>,
}

struct Writer<'a> {
    router: &'a Router,
    tree: &'a Tree,
    rng: Rng,
    model: Model,
    out_history: Vec<(WorkerId, Slot)>,
    ingest: IngestTally,
    coverage: Coverage,
}

/// Runs writer `w` until `run` says stop (and at least [`MIN_WRITER_OPS`] operations).
pub fn writer(router: &Router, tree: &Tree, run: &Run, w: usize, seed: u64) -> WriterOut {
    let mut owned: Vec<Owned> = owned_by(w)
        .into_iter()
        .enumerate()
        .map(|(i, id)| Owned {
            id,
            ingest: i >= DIRECT_PER_WRITER,
            slot: None,
            next_seq: 0,
            last_live: None,
        })
        .collect();
    let mut wr = Writer {
        router,
        tree,
        rng: Rng::new(seed),
        model: Model::new(SLOTS, BS, usize::MAX),
        out_history: Vec::new(),
        ingest: IngestTally::default(),
        coverage: Coverage::default(),
    };
    while run.keep_going(wr.coverage.ops, MIN_WRITER_OPS) {
        let k = wr.rng.below(owned.len() as u64) as usize;
        let o = &mut owned[k];
        match o.slot {
            None if wr.rng.below(5) > 0 => wr.add(o),
            None => wr.refused(o),
            Some(slot) if wr.rng.below(100) == 0 => wr.remove(o, slot),
            Some(slot) if o.ingest => wr.ingest_op(o, slot),
            Some(slot) => wr.direct_op(o.id, slot),
        }
        wr.coverage.ops += 1;
    }
    WriterOut {
        model: wr.model,
        history: wr.out_history,
        registered: owned
            .iter()
            .filter_map(|o| o.slot.map(|s| (o.id, s)))
            .collect(),
        ingest: wr.ingest,
        coverage: wr.coverage,
    }
}

/// A live or replayed batch of `events` numbered `seq`, sent as DP rank `dp_rank`.
fn batch(seq: u64, events: Vec<KvEvent>, dp_rank: u32) -> KvMessage {
    KvMessage::Batch {
        seq,
        batch: KvEventBatch {
            ts: 0.0,
            events,
            dp_rank: Some(dp_rank),
        },
    }
}

fn events_of(msg: &KvMessage) -> &[KvEvent] {
    match msg {
        KvMessage::Batch { batch, .. } => &batch.events,
        KvMessage::EndOfReplay => &[],
    }
}

/// Applies a batch's events to the model as the ingest rules say (device tier, main group,
/// default namespace: every event is indexed) and returns the tally the report must show and
/// the number of stores with an unknown parent.
fn apply_model(model: &mut Model, slot: Slot, events: &[KvEvent]) -> (EventTally, u64) {
    let mut t = EventTally::default();
    let mut unknown_parent = 0;
    for e in events {
        t.events += 1;
        match e {
            KvEvent::BlockStored(s) => match model.store(slot, &block_store(s)) {
                Ok(_) => t.stored_blocks += s.block_hashes.len(),
                Err(IndexError::UnknownParent { .. }) => {
                    unknown_parent += 1;
                    t.unknown_parent_blocks += s.block_hashes.len();
                }
                Err(e) => panic!("the writer sends only well-formed stores: {e}"),
            },
            KvEvent::BlockRemoved(r) => {
                let out = model.remove(slot, &r.block_hashes).unwrap();
                t.removed_blocks += r.block_hashes.len();
                t.unknown_removed_blocks += out.unknown;
            }
            KvEvent::AllBlocksCleared => {
                model.clear(slot).unwrap();
                t.clears += 1;
            }
            _ => unreachable!("the writer sends only stores, removals and clears"),
        }
    }
    (t, unknown_parent)
}

fn report(seq: Option<u64>, outcome: SeqOutcome, trusted: bool) -> IngestReport {
    IngestReport {
        seq,
        outcome,
        reset_from: None,
        replay_completed: false,
        trusted,
        applied: EventTally::default(),
        replay: None,
    }
}

impl<'a> Writer<'a> {
    fn add(&mut self, o: &mut Owned) {
        let slot = self.router.add_worker(o.id).expect("a free slot");
        assert!(slot.index() < SLOTS);
        assert!(
            !self.model.workers.contains_key(&slot.0),
            "slot {slot:?} given to {} while this writer's worker holds it",
            o.id
        );
        assert_eq!(self.router.slot_of(o.id), Some(slot));
        assert_eq!(
            self.router.index().worker_blocks(slot),
            0,
            "new tenant {} of slot {slot:?} inherited residency",
            o.id
        );
        assert_eq!(self.router.is_trusted(o.id), Some(true));
        if self.rng.below(4) == 0 {
            assert_eq!(
                self.router.add_worker(o.id),
                Err(WorkerError::AlreadyRegistered(o.id))
            );
        }
        o.slot = Some(slot);
        o.next_seq = 0;
        o.last_live = None;
        self.out_history.push((o.id, slot));
        self.coverage.adds += 1;
    }

    fn remove(&mut self, o: &mut Owned, slot: Slot) {
        assert_eq!(self.router.remove_worker(o.id), Ok(()));
        self.model.remove_worker(slot).unwrap();
        assert_eq!(self.router.slot_of(o.id), None);
        assert_eq!(self.router.reserved(o.id), None);
        assert_eq!(self.router.is_trusted(o.id), None);
        o.slot = None;
        self.coverage.removals += 1;
    }

    /// An event or a removal for a worker that is not registered: refused, nothing changes.
    fn refused(&mut self, o: &mut Owned) {
        let id = o.id;
        match self.rng.below(3) {
            0 => assert_eq!(
                self.router.remove_worker(id),
                Err(WorkerError::UnknownWorker(id))
            ),
            _ if o.ingest => {
                let msg = batch(o.next_seq, vec![KvEvent::AllBlocksCleared], id.dp_rank);
                assert_eq!(
                    self.router.ingest(id, Channel::Live, &msg),
                    Err(IngestError::UnknownWorker(id))
                );
                self.ingest.messages += 1;
                self.ingest.unknown_worker_messages += 1;
            }
            _ => {
                let pairs = [(Tree::eh(0, 0), self.tree.chains[0][0])];
                assert_eq!(
                    self.router.store_hashes(id, None, &pairs),
                    Err(EventError::UnknownWorker(id))
                );
                assert_eq!(
                    self.router.clear_blocks(id),
                    Err(EventError::UnknownWorker(id))
                );
                self.ingest.unknown_worker_events += 2;
            }
        }
        self.coverage.refused_events += 1;
    }

    fn below(&mut self, n: usize) -> usize {
        self.rng.below(n as u64) as usize
    }

    /// Engine hashes `from..to` of branch `b` as a store chained on block `from - 1`.
    fn chained(&mut self) -> (Option<EngineHash>, Vec<EngineHash>, &'a [u32]) {
        let b = self.below(BRANCHES);
        let from = self.below(DEPTH);
        let to = from + 1 + self.below(DEPTH - from);
        let hashes = (from..to).map(|p| Tree::eh(b, p)).collect();
        let parent = from.checked_sub(1).map(|p| Tree::eh(b, p));
        (parent, hashes, &self.tree.tokens[b][from * BS..to * BS])
    }

    /// Removals: a leaf-first suffix of a branch, or random hashes (unknown ones included).
    fn removal(&mut self) -> Vec<EngineHash> {
        if self.rng.below(2) == 0 {
            let (b, k) = (self.below(BRANCHES), self.below(DEPTH));
            (k..DEPTH).rev().map(|p| Tree::eh(b, p)).collect()
        } else {
            let n = 1 + self.below(5);
            (0..n)
                .map(|_| match self.rng.below(5) {
                    0 => EngineHash(1000 + self.rng.below(8)),
                    _ => Tree::eh(self.below(BRANCHES), self.below(DEPTH)),
                })
                .collect()
        }
    }

    /// The store's outcome must equal the model's but for `evicted`: the index evicts by
    /// its own rule past the cap, and the model (built without a cap) is reconciled with
    /// the worker's engine hashes the index kept.
    fn check_store(
        &mut self,
        id: WorkerId,
        slot: Slot,
        got: Result<StoreOutcome, EventError>,
        want: Result<StoreOutcome, EventError>,
        what: &str,
    ) {
        let ctx = format!("worker {id} in slot {} ({what})", slot.0);
        let evicted = got.as_ref().map_or(0, |o| o.evicted);
        assert_eq!(got.map(|o| StoreOutcome { evicted: 0, ..o }), want, "{ctx}");
        let kept = self.router.index().engine_hashes(slot);
        if let Err(e) = self.model.reconcile_evictions(slot, &kept, evicted, CAP) {
            panic!("{ctx}: {e}");
        }
    }

    /// A store of `pairs` after `parent` through `store_hashes`, checked by `check_store`.
    fn pairs_store(
        &mut self,
        id: WorkerId,
        slot: Slot,
        parent: Option<EngineHash>,
        pairs: &[(EngineHash, SequenceHash)],
        what: &str,
    ) {
        let want = self.model.store_hashes_after(slot, parent, pairs);
        let got = self.router.store_hashes(id, parent, pairs);
        self.check_store(id, slot, got, want.map_err(EventError::Index), what);
    }

    fn direct_op(&mut self, id: WorkerId, slot: Slot) {
        let (r, tree) = (self.router, self.tree);
        let ctx = |what: &str| format!("worker {id} in slot {} ({what})", slot.0);
        match self.rng.below(1000) {
            // A prefix of a branch, as one store of chained hashes.
            0..=239 => {
                let (b, k) = (self.below(BRANCHES), 1 + self.below(DEPTH));
                let pairs: Vec<_> = (0..k)
                    .map(|p| (Tree::eh(b, p), tree.chains[b][p]))
                    .collect();
                self.pairs_store(id, slot, None, &pairs, "prefix");
            }
            // Blocks of a branch through `store` (token ids re-hashed, chained on a parent).
            240..=449 => {
                let (parent, hashes, tokens) = self.chained();
                let ev = BlockStore {
                    parent,
                    block_hashes: &hashes,
                    token_ids: tokens,
                    block_size: BS,
                    namespace: HashNamespace::DEFAULT,
                };
                let want = self.model.store(slot, &ev).map_err(EventError::Index);
                let got = r.store(id, &ev);
                self.check_store(id, slot, got, want, "chained");
            }
            // Single blocks of the tree, each after its parent (refused when the worker
            // does not hold it): with the removals, residency that is not prefix-closed.
            450..=529 => {
                for _ in 0..1 + self.below(4) {
                    let (b, p) = (self.below(BRANCHES), self.below(DEPTH));
                    let parent = p.checked_sub(1).map(|q| Tree::eh(b, q));
                    let pairs = [(Tree::eh(b, p), tree.chains[b][p])];
                    self.pairs_store(id, slot, parent, &pairs, "single");
                }
            }
            // An engine hash re-used for other content (a conflict: the latest word wins).
            530..=579 => {
                let (b, p) = (self.below(BRANCHES), self.below(DEPTH));
                let parent = p.checked_sub(1).map(|q| Tree::eh(b, q));
                let pairs = [(EngineHash(1000 + self.rng.below(6)), tree.chains[b][p])];
                self.pairs_store(id, slot, parent, &pairs, "alias");
            }
            580..=969 => {
                let hashes = self.removal();
                let want = self.model.remove(slot, &hashes).map_err(EventError::Index);
                assert_eq!(r.remove_blocks(id, &hashes), want, "{}", ctx("remove"));
            }
            // A burst past the per-worker cap (eviction) of blocks nobody queries.
            970..=979 => {
                let n = 32 + self.rng.below(96);
                let pairs: Vec<_> = (0..n)
                    .map(|j| {
                        (
                            EngineHash(NOISE_EH + j),
                            SequenceHash(self.rng.next_u64() | 1),
                        )
                    })
                    .collect();
                self.pairs_store(id, slot, None, &pairs, "burst");
            }
            980..=989 => {
                let hashes: Vec<_> = (0..128).map(|j| EngineHash(NOISE_EH + j)).collect();
                let want = self.model.remove(slot, &hashes).map_err(EventError::Index);
                assert_eq!(r.remove_blocks(id, &hashes), want, "{}", ctx("unburst"));
            }
            _ => {
                let want = self.model.clear(slot).map_err(EventError::Index);
                assert_eq!(r.clear_blocks(id), want, "{}", ctx("clear"));
            }
        }
    }

    /// One to three events; an `AllBlocksCleared` only when `allow_clear` (a clear in the
    /// batch after a gap makes the gap moot, which the gap scenarios do not want).
    fn events(&mut self, allow_clear: bool) -> Vec<KvEvent> {
        let n = 1 + self.below(3);
        (0..n)
            .map(|_| match self.rng.below(100) {
                0..=59 => {
                    let (parent, hashes, tokens) = self.chained();
                    KvEvent::BlockStored(BlockStored::device(
                        hashes,
                        parent,
                        tokens.to_vec(),
                        BS as u32,
                    ))
                }
                60..=97 => KvEvent::BlockRemoved(BlockRemoved {
                    block_hashes: self.removal(),
                    medium: Medium::Gpu,
                    group_idx: None,
                    encoding: EventEncoding::Named,
                }),
                _ if allow_clear => KvEvent::AllBlocksCleared,
                _ => KvEvent::BlockRemoved(BlockRemoved {
                    block_hashes: vec![EngineHash(1000)],
                    medium: Medium::Gpu,
                    group_idx: None,
                    encoding: EventEncoding::Named,
                }),
            })
            .collect()
    }

    /// Sends `msg` on `channel` and checks the report: `want` with the tally of applying
    /// the batch to the model when `applies`.
    fn send(
        &mut self,
        id: WorkerId,
        slot: Slot,
        channel: Channel,
        msg: &KvMessage,
        mut want: IngestReport,
        applies: bool,
    ) {
        if applies {
            let (t, unknown_parent) = apply_model(&mut self.model, slot, events_of(msg));
            want.applied = t;
            self.ingest.applied(&t, unknown_parent);
        }
        let got = self.router.ingest(id, channel, msg);
        assert_eq!(got, Ok(want), "worker {id} in slot {}: {msg:?}", slot.0);
        self.ingest.messages += 1;
    }

    /// The last live batch `seq` (below `RESET_WINDOW`) again, holding its last
    /// `AllBlocksCleared` at `from`: a restart whatever its `ts`. The worker is cleared and
    /// the frontier goes back to 0; at 0 the batch is contiguous and applied whole, past 0
    /// batches `0..seq` are moot and it is applied from the clear. Either way the residency
    /// ends as the first time (what follows the clear).
    fn repeated_clear(
        &mut self,
        id: WorkerId,
        slot: Slot,
        seq: u64,
        from: usize,
        last: &KvMessage,
    ) {
        let (outcome, from) = if seq == 0 {
            self.ingest.contiguous += 1;
            (SeqOutcome::Contiguous, 0)
        } else {
            self.ingest.gaps_cleared += 1;
            self.ingest.missed_batches += seq;
            (SeqOutcome::GapCleared { missed: seq }, from)
        };
        let mut want = report(Some(seq), outcome, true);
        want.reset_from = Some(seq);
        self.model.clear(slot).unwrap();
        let (t, unknown_parent) = apply_model(&mut self.model, slot, &events_of(last)[from..]);
        want.applied = t;
        self.ingest.applied(&t, unknown_parent);
        self.send(id, slot, Channel::Live, last, want, false);
        self.ingest.resets += 1;
    }

    fn ingest_op(&mut self, o: &mut Owned, slot: Slot) {
        let (id, s) = (o.id, o.next_seq);
        let roll = self.rng.below(100);
        let stale = o.last_live.clone().filter(|_| (95..98).contains(&roll));
        if let Some(last) = stale {
            let seq = match &last {
                KvMessage::Batch { seq, .. } => *seq,
                KvMessage::EndOfReplay => unreachable!(),
            };
            let clear = events_of(&last)
                .iter()
                .rposition(|e| matches!(e, KvEvent::AllBlocksCleared));
            match clear.filter(|_| seq < RESET_WINDOW) {
                Some(from) => self.repeated_clear(id, slot, seq, from, &last),
                None => {
                    // The last live batch again: a stale duplicate, dropped.
                    let want = report(Some(seq), SeqOutcome::Stale, true);
                    self.send(id, slot, Channel::Live, &last, want, false);
                    self.ingest.stale += 1;
                }
            }
            return;
        }
        match roll {
            85..=94 => {
                // Batch `s` is lost; `s + 1` reveals the gap and is held.
                let lost = batch(s, self.events(false), id.dp_rank);
                let held = batch(s + 1, self.events(false), id.dp_rank);
                let witness = o.last_live.clone().filter(|_| s > 0);
                let request = ReplayRequest {
                    worker: id,
                    from_seq: if witness.is_some() { s - 1 } else { s },
                    last_live_seq: Some(s + 1),
                };
                let pending_from = |from_seq| {
                    Some(ReplayRequest {
                        from_seq,
                        ..request
                    })
                };
                let mut gap = report(Some(s + 1), SeqOutcome::Gap { missed: 1 }, false);
                gap.replay = Some(request);
                self.send(id, slot, Channel::Live, &held, gap, false);
                self.ingest.gaps += 1;
                self.ingest.missed_batches += 1;
                assert_eq!(self.router.is_trusted(id), Some(false));
                // The replay starts at the witness, the last batch applied, when there is
                // one (its copy shows the engine did not restart inside the gap).
                assert!(self.router.replay_requests().contains(&request));
                if roll < 92 {
                    // Given up: both batches are never applied, the worker is cleared.
                    assert_eq!(self.router.skip_replay(id), Ok(2));
                    self.model.clear(slot).unwrap();
                    self.ingest.replays_skipped += 1;
                    self.coverage.gaps_skipped += 1;
                } else {
                    // Replayed in order: trust comes back with the last live batch.
                    if let Some(w) = &witness {
                        let mut confirmed = report(Some(s - 1), SeqOutcome::ReplayConfirmed, false);
                        confirmed.replay = pending_from(s);
                        self.send(id, slot, Channel::Replay, w, confirmed, false);
                        self.ingest.replays_confirmed += 1;
                    }
                    let mut replayed = report(Some(s), SeqOutcome::Replayed, false);
                    replayed.replay = pending_from(s + 1);
                    self.send(id, slot, Channel::Replay, &lost, replayed, true);
                    let mut done = report(Some(s + 1), SeqOutcome::Replayed, true);
                    done.replay_completed = true;
                    self.send(id, slot, Channel::Replay, &held, done, true);
                    let end = report(None, SeqOutcome::EndOfReplay, true);
                    self.send(
                        id,
                        slot,
                        Channel::Replay,
                        &KvMessage::EndOfReplay,
                        end,
                        false,
                    );
                    self.ingest.replayed += 2;
                    self.ingest.replays_completed += 1;
                    self.ingest.end_markers += 1;
                    self.coverage.gaps_replayed += 1;
                }
                assert_eq!(self.router.is_trusted(id), Some(true));
                o.next_seq = s + 2;
                o.last_live = Some(held);
            }
            98.. => {
                // A batch of another DP rank on this publisher: refused whole.
                let msg = batch(s, self.events(true), id.dp_rank + 5);
                assert_eq!(
                    self.router.ingest(id, Channel::Live, &msg),
                    Err(IngestError::DpRankMismatch {
                        publisher: id,
                        batch_dp_rank: id.dp_rank + 5
                    })
                );
                self.ingest.messages += 1;
                self.ingest.dp_rank_mismatches += 1;
            }
            _ => {
                let msg = batch(s, self.events(true), id.dp_rank);
                let want = report(Some(s), SeqOutcome::Contiguous, true);
                self.send(id, slot, Channel::Live, &msg, want, true);
                self.ingest.contiguous += 1;
                o.next_seq = s + 1;
                o.last_live = Some(msg);
            }
        }
    }
}
