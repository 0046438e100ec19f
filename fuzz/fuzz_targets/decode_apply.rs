//! Decodes arbitrary bytes as KV event messages (ZMQ frames around msgpack batches), applies
//! them to a two-worker `Router` through `Router::ingest` (sequence tracking, trust, tiers,
//! KV groups, namespaces, parents, copies), and after every step checks the router against
//! a reference model written from the documented rules (module docs of `kvroute::ingest`,
//! its `sequence` and `apply` modules, and `kvroute-index`): per worker, a map engine hash
//! -> (chained hash, copies), the sequence frontier, the pending replay and its witness,
//! and the block-size distrust. Checked each step: the worker's engine-hash map in the index
//! (`RunIndex::engine_hashes`), `match_prefix` over the whole paths (from the chain's first
//! block) of recent stores against the model's hash sets, `Router::is_trusted`, the report's trust flag, and the ingest counters the
//! model can tally.
//!
//! Input: a sequence of operations. Each starts with an op byte: bit 3 the worker, bit 4
//! the channel (replay when set), bits 5-6 the frame shape (`[topic "", seq, payload]`,
//! `[seq, payload]`, `[topic "kv", seq, payload]`, or a 7-byte sequence frame, which must
//! fail to decode), and the low 3 bits the kind:
//! * 0-1, a message of raw bytes: a signed delta byte (the sequence number is the worker's
//!   next live number for live, its replay start (the witness, else the frontier) for
//!   replay, plus the delta; -128 means the end-marker number), a little-endian u16 payload length, and the payload bytes;
//! * 2-3, a generated message: the delta byte, a count byte (1-4 events, the batch shape
//!   and its `ts`), and 4 bytes per event from which a named-map batch (stores, removes,
//!   clears over 16 engine hashes and 8 block contents, with tiers, KV groups, namespaces,
//!   parents and block sizes) is built and msgpack-encoded, so that mutations explore
//!   router states, not only msgpack;
//! * 4: the replay end marker for the worker; 5: `skip_replay`; 6: remove and re-add the
//!   worker; 7: nothing (a check only).
//!
//! Seed the corpus with `bash seed_decode_apply.sh` (in `fuzz/`): the example payloads of
//! the shared data wrapped in this format.
#![no_main]

use std::collections::{HashMap, HashSet};

use kvroute::{
    BlockHasher, Channel, EngineHash, ExtraKeysDigest, HashNamespace, IngestError, IngestStats,
    Router, RouterConfig, SequenceHash, WorkerId, extra_keys_digest,
};
use kvroute_index::hash::{chain_hash, fold_extra_keys};
use kvroute_wire::{
    BlockRemoved, BlockStored, ExtraKey, KvEvent, KvMessage, Medium, decode_message,
};
use libfuzzer_sys::fuzz_target;

mod batch_gen;

const BS: usize = 16;
const RESET_WINDOW: u64 = 64;
const WORKERS: [WorkerId; 2] = [WorkerId::new(1, 0), WorkerId::new(2, 1)];

/// One worker as the documented rules say it must be.
#[derive(Default)]
struct Model {
    /// Engine hash -> (chained hash, copies).
    blocks: HashMap<u64, (u64, u32)>,
    /// Chained hash -> its parent's chained hash, for every block this worker stored after
    /// a parent: a fact about content (a chained hash names its whole prefix), kept across
    /// clears, from which a store's whole path from the first block is rebuilt.
    parent_of: HashMap<u64, u64>,
    next: u64,
    last_live: Option<u64>,
    /// The batch `ts` of the last live batch (`f64::to_bits`).
    last_live_ts: u64,
    pending: bool,
    /// The batch `ts` (`f64::to_bits`) of the last batch applied (`next - 1`).
    applied_ts: u64,
    /// The witness (`next - 1`) a pending replay must start with, until it arrives.
    witness: Option<u64>,
    size_distrust: bool,
    main_group: Option<u32>,
}

/// Counters the model tallies (`IngestStats` fields of the same names).
#[derive(Default, Debug, PartialEq, Eq)]
struct Tally {
    stored_blocks: u64,
    removed_blocks: u64,
    clears: u64,
    non_device_blocks: u64,
    non_main_group_blocks: u64,
    unknown_parent_stores: u64,
    rejected_events: u64,
    unknown_events: u64,
    extra_key_blocks: u64,
}

impl Tally {
    fn of(s: &IngestStats) -> Self {
        Self {
            stored_blocks: s.stored_blocks,
            removed_blocks: s.removed_blocks,
            clears: s.clears,
            non_device_blocks: s.non_device_blocks,
            non_main_group_blocks: s.non_main_group_blocks,
            unknown_parent_stores: s.unknown_parent_stores,
            rejected_events: s.rejected_events,
            unknown_events: s.unknown_events,
            extra_key_blocks: s.extra_key_blocks,
        }
    }
}

/// The chained hashes of a store's blocks, by the documented namespace rule (LoRA name,
/// else the decimal LoRA id; cache salt) and extra-keys rule (per block: a leading key
/// equal to the LoRA name or id left out; the rest, if any, digested, or unreproducible
/// when one is or holds a map; the digest folded into the block's local hash), chaining
/// from `parent`. `None` when the store's extra keys, some block having keys left, are not
/// one entry per block (the store is rejected).
fn chain(s: &BlockStored, parent: Option<u64>) -> Option<Vec<u64>> {
    let id_text = s.lora_id.map(|id| id.to_string());
    let lora = s.lora_name.as_deref().or(id_text.as_deref());
    let ns = HashNamespace::new(lora, s.cache_salt.as_deref());
    let digests = model_extra_digests(s);
    if digests.iter().any(Option::is_some) && digests.len() != s.block_hashes.len() {
        return None;
    }
    let mut locals = Vec::new();
    BlockHasher::new(BS, ns).local_hashes_into(&s.token_ids, &mut locals);
    let mut prev = parent.map(SequenceHash);
    let mut out = Vec::new();
    for (j, local) in locals.into_iter().enumerate() {
        let local = match digests.get(j) {
            Some(&Some(d)) => fold_extra_keys(local, d),
            _ => local,
        };
        let seq = match prev {
            None => SequenceHash(local.0),
            Some(p) => chain_hash(p, local),
        };
        out.push(seq.0);
        prev = Some(seq);
    }
    Some(out)
}

fn holds_map(k: &ExtraKey) -> bool {
    match k {
        ExtraKey::List(items) => items.iter().any(holds_map),
        ExtraKey::Str(_)
        | ExtraKey::Int(_)
        | ExtraKey::Float(_)
        | ExtraKey::Bytes(_)
        | ExtraKey::Nil => false,
        _ => true,
    }
}

/// Each `extra_keys` entry's digest by the documented rule (see `chain`).
fn model_extra_digests(s: &BlockStored) -> Vec<Option<ExtraKeysDigest>> {
    let Some(entries) = &s.extra_keys else {
        return Vec::new();
    };
    entries
        .iter()
        .enumerate()
        .map(|(j, e)| {
            let keys = e.as_deref()?;
            let keys = match keys.first() {
                Some(ExtraKey::Str(n)) if s.lora_name.as_deref() == Some(n.as_str()) => &keys[1..],
                Some(ExtraKey::Int(i)) if s.lora_id.map(i128::from) == Some(*i) => &keys[1..],
                _ => keys,
            };
            if keys.iter().any(holds_map) {
                let engine = s.block_hashes.get(j).copied().unwrap_or(EngineHash(0));
                return Some(ExtraKeysDigest::unreproducible(engine));
            }
            extra_keys_digest(keys)
        })
        .collect()
}

fn is_main(s: &BlockStored) -> bool {
    match s.kv_cache_spec_kind.as_deref() {
        Some(kind) => kind == "full_attention",
        None => matches!(s.group_idx, None | Some(0)),
    }
}

impl Model {
    fn trusted(&self) -> bool {
        !self.pending && !self.size_distrust
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.size_distrust = false;
    }

    fn settle(&mut self) {
        if self.pending && self.witness.is_none() && self.last_live.is_none_or(|l| self.next > l) {
            self.pending = false;
        }
    }

    fn give_up(&mut self) {
        let after_live = self.last_live.map_or(self.next, |l| l + 1);
        if after_live > self.next {
            self.applied_ts = self.last_live_ts;
        }
        self.next = self.next.max(after_live);
        self.pending = false;
        self.witness = None;
    }

    /// The first sequence number a pending replay must bring.
    fn replay_from(&self) -> u64 {
        self.witness.unwrap_or(self.next)
    }

    fn store(&mut self, s: &BlockStored, t: &mut Tally, queries: &mut Vec<Vec<u64>>) {
        let n = s.block_hashes.len() as u64;
        if s.medium != Medium::Gpu {
            t.non_device_blocks += n;
            return;
        }
        if !is_main(s) {
            t.non_main_group_blocks += n;
            return;
        }
        if s.kv_cache_spec_kind.is_some() && s.group_idx.is_some() {
            self.main_group = s.group_idx;
        }
        if s.block_size as usize != BS {
            self.size_distrust = true;
            t.rejected_events += 1;
            return;
        }
        // The extra-keys count is checked before the parent (the index's order).
        if chain(s, None).is_none() {
            t.rejected_events += 1;
            return;
        }
        let parent = match s.parent_block_hash {
            None => None,
            Some(p) => match self.blocks.get(&p.0) {
                Some(&(seq, _)) => Some(seq),
                None => {
                    t.unknown_parent_stores += 1;
                    return;
                }
            },
        };
        let seqs = chain(s, parent).expect("the extra-keys count was checked above");
        let keyed = model_extra_digests(s)
            .iter()
            .filter(|d| d.is_some())
            .count();
        t.extra_key_blocks += keyed as u64;
        for (eh, &seq) in s.block_hashes.iter().zip(&seqs) {
            match self.blocks.get_mut(&eh.0) {
                Some(e) if e.0 == seq => e.1 = (e.1 + 1).min(u32::from(u16::MAX)),
                _ => {
                    self.blocks.insert(eh.0, (seq, 1));
                }
            }
        }
        t.stored_blocks += n;
        // The query is the store's whole path from the chain's first block, as a prompt's
        // hashes are (a match starts at a prompt's first block).
        let mut prev = parent;
        for &seq in &seqs {
            if let Some(p) = prev {
                self.parent_of.insert(seq, p);
            }
            prev = Some(seq);
        }
        let mut path = Vec::new();
        let mut cur = parent;
        while let Some(p) = cur {
            if path.len() > 4096 {
                break;
            }
            path.push(p);
            cur = self.parent_of.get(&p).copied();
        }
        path.reverse();
        path.extend(seqs);
        queries.push(path);
    }

    fn remove(&mut self, r: &BlockRemoved, t: &mut Tally) {
        let n = r.block_hashes.len() as u64;
        if r.medium != Medium::Gpu {
            t.non_device_blocks += n;
            return;
        }
        if r.group_idx
            .is_some_and(|g| g != self.main_group.unwrap_or(0))
        {
            t.non_main_group_blocks += n;
            return;
        }
        for h in &r.block_hashes {
            if let Some(e) = self.blocks.get_mut(&h.0) {
                e.1 -= 1;
                if e.1 == 0 {
                    self.blocks.remove(&h.0);
                }
            }
        }
        t.removed_blocks += n;
    }

    fn apply(&mut self, events: &[KvEvent], from: usize, t: &mut Tally, q: &mut Vec<Vec<u64>>) {
        for ev in &events[from..] {
            match ev {
                KvEvent::BlockStored(s) => self.store(s, t, q),
                KvEvent::BlockRemoved(r) => self.remove(r, t),
                KvEvent::AllBlocksCleared => {
                    self.clear();
                    t.clears += 1;
                }
                KvEvent::Unknown { .. } | _ => t.unknown_events += 1,
            }
        }
    }

    /// A live batch `s` sent at `ts` (the sequence table of `kvroute::ingest`'s `sequence`
    /// module).
    /// Asks for a replay from the witness (the last batch applied), unless one is pending.
    fn check_from_witness(&mut self) {
        if !self.pending {
            if self.next > 0 {
                self.witness = Some(self.next - 1);
            }
            self.pending = true;
        }
    }

    fn live(&mut self, s: u64, ts: f64, events: &[KvEvent], t: &mut Tally, q: &mut Vec<Vec<u64>>) {
        if let Some(l) = self.last_live {
            // The last live number again is a copy only with the same `ts` bits and no clear.
            let repeat =
                s == l && (last_clear(events).is_some() || ts.to_bits() != self.last_live_ts);
            // Backwards with a later clock: a restart at any number; with an earlier one, a
            // late batch (dropped below).
            let restarted = s < l && ts > f64::from_bits(self.last_live_ts);
            if restarted || (repeat && s < RESET_WINDOW) {
                // Engine restart: cleared, the stream starts again from 0.
                self.clear();
                (self.next, self.last_live, self.pending) = (0, None, false);
                self.witness = None;
            } else if s <= l {
                // A late batch, or a new incarnation whose clock is behind: dropped, and
                // checked by a replay from the witness unless it is a copy of the last one.
                let copy = s == l && ts.to_bits() == self.last_live_ts;
                if !copy {
                    self.check_from_witness();
                }
                return;
            } else if ts < f64::from_bits(self.last_live_ts) {
                // Forward in number, backward in clock: an earlier incarnation's batch after
                // a reset. Dropped, checked by a replay from the witness.
                self.check_from_witness();
                return;
            }
        }
        if self.next > 0
            && s < self.next
            && self.last_live.is_none_or(|l| s > l)
            && ts > f64::from_bits(self.applied_ts)
        {
            // Below the frontier, past the last live batch (or before any): only a replay
            // brought those, so a later clock than the last applied batch's is a restart.
            self.clear();
            (self.next, self.last_live, self.pending) = (0, None, false);
            self.witness = None;
        }
        self.last_live = Some(s);
        self.last_live_ts = ts.to_bits();
        if s < self.next {
            return;
        }
        if s == self.next && !self.pending {
            self.next += 1;
            self.applied_ts = ts.to_bits();
            self.apply(events, 0, t, q);
            self.settle();
            return;
        }
        match last_clear(events) {
            Some(i) => {
                self.next = s + 1;
                self.applied_ts = ts.to_bits();
                self.witness = None;
                self.apply(events, i, t, q);
                self.settle();
            }
            None => {
                // A replay must start at the last batch applied, to show the engine did
                // not restart inside the gap.
                if !self.pending && self.next > 0 {
                    self.witness = Some(self.next - 1);
                }
                self.pending = true;
            }
        }
    }

    /// A replayed batch `s` sent at `ts`.
    fn replay(
        &mut self,
        s: u64,
        ts: f64,
        events: &[KvEvent],
        t: &mut Tally,
        q: &mut Vec<Vec<u64>>,
    ) {
        if let Some(w) = self.witness.filter(|_| self.pending) {
            if s < w {
                return;
            }
            self.witness = None;
            if s == w && ts.to_bits() == self.applied_ts {
                // The copy applied: the stream did not restart inside the gap.
                self.settle();
                return;
            }
            // Another incarnation's batch at the witness, or the witness is gone: cleared.
            self.clear();
            self.apply(events, last_clear(events).unwrap_or(0), t, q);
            self.next = s + 1;
            self.applied_ts = ts.to_bits();
            self.settle();
            return;
        }
        if s < self.next || (s > self.next && !self.pending) {
            return;
        }
        if s == self.next {
            self.apply(events, 0, t, q);
        } else if let Some(i) = last_clear(events) {
            self.apply(events, i, t, q);
        } else {
            // Truncated: the engine no longer has the batches between.
            self.clear();
            self.apply(events, 0, t, q);
        }
        self.next = s + 1;
        self.applied_ts = ts.to_bits();
        self.settle();
    }

    fn end_of_replay(&mut self) {
        if self.pending {
            self.give_up();
            self.clear();
        }
    }
}

fn last_clear(events: &[KvEvent]) -> Option<usize> {
    events
        .iter()
        .rposition(|e| matches!(e, KvEvent::AllBlocksCleared))
}

fn check(r: &Router, models: &[Model; 2], tally: &Tally, queries: &[Vec<u64>]) {
    let mut out = r.index().new_overlaps();
    for (w, m) in WORKERS.iter().zip(models) {
        assert_eq!(r.is_trusted(*w), Some(m.trusted()), "trust of {w}");
        let slot = r.slot_of(*w).expect("registered");
        let mut got = r.index().engine_hashes(slot);
        got.sort_unstable();
        let mut want: Vec<(EngineHash, u32)> = m
            .blocks
            .iter()
            .map(|(&h, &(_, c))| (EngineHash(h), c))
            .collect();
        want.sort_unstable();
        assert_eq!(got, want, "engine hashes of {w}");
        let held: HashSet<u64> = m.blocks.values().map(|&(s, _)| s).collect();
        for q in queries {
            let keys: Vec<SequenceHash> = q.iter().map(|&h| SequenceHash(h)).collect();
            r.index().match_prefix(&keys, &mut out);
            let want = q.iter().take_while(|h| held.contains(h)).count() as u32;
            assert_eq!(out.get(slot), want, "overlap of {w}");
        }
    }
    assert_eq!(&Tally::of(&r.ingest_stats()), tally, "ingest counters");
}

fuzz_target!(|data: &[u8]| {
    let mut cfg = RouterConfig::new(4, BS);
    cfg.expected_blocks = 64;
    let r = Router::new(cfg).expect("valid config");
    for w in WORKERS {
        r.add_worker(w).expect("room");
    }
    let mut models = [Model::default(), Model::default()];
    let mut tally = Tally::default();
    let mut queries: Vec<Vec<u64>> = Vec::new();
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let wi = usize::from((op >> 3) & 1);
        let worker = WORKERS[wi];
        let m = &mut models[wi];
        match op & 7 {
            0..=3 => {
                let [delta, ..] = *rest else {
                    break;
                };
                rest = &rest[1..];
                let payload: Vec<u8> = if op & 2 == 0 {
                    let [lo, hi, ..] = *rest else {
                        break;
                    };
                    let len = usize::from(u16::from_le_bytes([lo, hi])).min(rest.len() - 2);
                    let p = rest[2..2 + len].to_vec();
                    rest = &rest[2 + len..];
                    p
                } else {
                    let [count, ..] = *rest else {
                        break;
                    };
                    let n = (usize::from(count & 3) + 1).min((rest.len() - 1) / 4);
                    let p = batch_gen::batch(count, &rest[1..1 + 4 * n]);
                    rest = &rest[1 + 4 * n..];
                    p
                };
                let payload = &payload[..];
                let channel = if op & 0x10 != 0 {
                    Channel::Replay
                } else {
                    Channel::Live
                };
                let base = match channel {
                    Channel::Live => m.last_live.map_or(0, |l| l + 1),
                    Channel::Replay => m.replay_from(),
                };
                let seq = if delta == 0x80 {
                    u64::MAX
                } else {
                    base.saturating_add_signed(i64::from(delta as i8))
                };
                let seq_bytes = seq.to_be_bytes();
                let frames: Vec<&[u8]> = match (op >> 5) & 3 {
                    0 => vec![b"", &seq_bytes, payload],
                    1 => vec![&seq_bytes, payload],
                    2 => vec![b"kv", &seq_bytes, payload],
                    _ => vec![b"", &seq_bytes[1..], payload],
                };
                let Ok(msg) = decode_message(&frames) else {
                    check(&r, &models, &tally, &queries);
                    continue;
                };
                assert!((op >> 5) & 3 != 3, "a 7-byte sequence frame decoded");
                let report = r.ingest(worker, channel, &msg);
                match &msg {
                    KvMessage::EndOfReplay if channel == Channel::Live => {
                        assert_eq!(report, Err(IngestError::EndOfReplayOnLive(worker)));
                    }
                    KvMessage::EndOfReplay => m.end_of_replay(),
                    KvMessage::Batch { seq, .. } if *seq == u64::MAX => {
                        assert_eq!(report, Err(IngestError::ReservedSeq(worker)));
                    }
                    KvMessage::Batch { seq, batch } => {
                        if batch.dp_rank.is_some_and(|d| d != worker.dp_rank) {
                            assert!(report.is_err(), "DP rank mismatch accepted");
                        } else {
                            match channel {
                                Channel::Live => {
                                    m.live(*seq, batch.ts, &batch.events, &mut tally, &mut queries)
                                }
                                Channel::Replay => m.replay(
                                    *seq,
                                    batch.ts,
                                    &batch.events,
                                    &mut tally,
                                    &mut queries,
                                ),
                            }
                        }
                    }
                }
                let trusted = match &report {
                    Ok(rep) => Some(rep.trusted),
                    Err(IngestError::Rejected(b)) => Some(b.report.trusted),
                    Err(_) => None,
                };
                if let Some(t) = trusted {
                    assert_eq!(t, m.trusted(), "report's trust");
                }
            }
            4 => {
                let end = u64::MAX.to_be_bytes();
                let msg = decode_message(&[b"", &end, b""]).expect("end marker decodes");
                assert_eq!(msg, KvMessage::EndOfReplay);
                r.ingest(worker, Channel::Replay, &msg)
                    .expect("end marker applies");
                m.end_of_replay();
            }
            5 => {
                r.skip_replay(worker).expect("registered");
                if m.pending {
                    m.give_up();
                    m.clear();
                }
            }
            6 => {
                r.remove_worker(worker).expect("registered");
                r.add_worker(worker).expect("room");
                *m = Model::default();
            }
            _ => {}
        }
        if queries.len() > 16 {
            queries.drain(..queries.len() - 16);
        }
        check(&r, &models, &tally, &queries);
    }
});
