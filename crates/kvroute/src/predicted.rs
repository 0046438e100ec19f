//! Predicted residency: the prefixes decisions have just sent to workers, credited to
//! those workers before their own KV events say they hold them.
//!
//! A decision's prompt is not in the index until its worker has prefilled it and its
//! `BlockStored` events have arrived: for a burst of requests sharing a prompt, every
//! sibling routed meanwhile sees no holder, and the reservations spread them, each worker
//! prefilling the same prompt. A prediction records, for the chosen worker, that it will
//! hold the routed prompt's blocks; the next decisions credit that worker with the shared
//! prefix (its cost then sees the queued prefill the first sibling reserved and a short
//! uncached tail), so the cost, not the absence of events, decides whether a sibling joins
//! the worker computing the prefix or recomputes it elsewhere. Peers keep the same kind of
//! entry: llm-d's speculative index entries, Dynamo's predicted blocks with a TTL.
//!
//! A prediction is never index state: the index stays exact, [`Decision::overlap_blocks`]
//! stays what the index held, and the credit shows only in
//! [`Decision::predicted_blocks`]. It ends at its TTL, when its slot changes tenant, when
//! the worker's cache is cleared (`AllBlocksCleared`, a detected restart, a replay given up
//! or cut short: the whole table is swept for the slot, a rare event), or when the
//! engine's own events arrive: a lookup that finds the index already holding the
//! prediction's depth on that worker retires it, so that an eviction after that lookup is
//! seen as the index sees it. Limits: a store and an eviction with no lookup between them
//! leave the credit live until its TTL; a request that fails or is cancelled before its
//! prefill keeps its credit until then too (the TTL bounds both); an untrusted worker
//! (`ingest`) gets no credit.
//!
//! # Layout
//! A table of `entries` entries (a power of two) in buckets of [`WAYS`]. An entry keys a
//! prefix by the sequence hash of its last block (`hashes[d − 1]` for depth `d`; a chained
//! hash names its whole prefix) and holds the depth, the worker slot and its generation,
//! and the expiry. A routed prompt of `n` full blocks is recorded at the depths
//! `min_blocks · 2^k` below `n`, and at `n`: a later prompt sharing `s ≥ min_blocks`
//! leading blocks finds the recorded depth at or below `s` that is at least half of `s`
//! (a credit that may under-state the shared prefix, never over-state it), and an
//! identical prompt finds `n`. Lookups probe the same depths of their own prompt, about
//! `log2(n / min_blocks) + 1` buckets. A full bucket evicts its entry that expires first, so
//! one prefix depth credits at most [`WAYS`] workers at once.
//!
//! # Orderings
//! Each entry is a sequence lock: `seq` even while the entry is stable, odd while one
//! writer holds it. A writer takes the entry with a compare-exchange from an even `seq` to
//! the next odd one (`Acquire` on success: its writes cannot be reordered before it), then
//! a `Release` fence, writes the fields (`Relaxed`), and stores the next even `seq`
//! (`Release`: the fields happen before it). A reader loads `seq` (`Acquire`), skips an
//! odd one, reads the fields (`Relaxed`), issues an `Acquire` fence and loads `seq` again
//! (`Relaxed`): equal to the first load, no writer touched the fields in between, so they
//! belong to one write (the fence pairs with the writer's `Release` fence: a reader that
//! saw any field of a newer write sees that write's odd `seq`). A writer that finds the
//! entry held skips it and counts the skip: a prediction may be lost under contention,
//! never torn. The counters are `Relaxed` (statistics). Loom models (`loom_models.rs`):
//! `loom_prediction_reader_never_sees_a_torn_entry`,
//! `loom_racing_prediction_writers_one_wins`.
//!
//! [`Decision::overlap_blocks`]: crate::Decision::overlap_blocks
//! [`Decision::predicted_blocks`]: crate::Decision::predicted_blocks

use kvroute_core::sync::atomic::{AtomicU64, Ordering, fence};
use kvroute_core::{Nanos, SequenceHash, Slot, SlotGeneration};
use kvroute_index::index::Overlaps;

/// Ways per bucket (also the table's least size).
pub const WAYS: usize = 8;

/// What a lookup did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lookup {
    /// Slots whose overlap a prediction raised.
    pub raised: u32,
    /// Predictions retired because the index already held their depth.
    pub retired: u32,
}

/// Predicted residency's counters, since the router was built
/// ([`RouterStats::predictions`](crate::RouterStats::predictions)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PredictionStats {
    /// Entries written, or found already live, by decisions (a routed prompt records one
    /// per recorded depth beyond its worker's index overlap: `min_blocks · 2^k` below its
    /// block count, and the count itself).
    pub recorded: u64,
    /// Entries a decision did not write because a concurrent writer held a way of the
    /// bucket or changed the chosen way after it was read (the prediction is lost, never
    /// torn).
    pub contended: u64,
    /// Raises of a worker's overlap by a prediction, in lookups (one per depth that
    /// raised it).
    pub credited: u64,
    /// Predictions retired because the index already held their depth on their worker
    /// (the engine's own events arrived).
    pub retired: u64,
    /// Predictions dropped because their worker's cache was cleared (`AllBlocksCleared`,
    /// a detected engine restart, a replay given up or cut short, `clear_blocks`): the
    /// prefixes routed there before the clear are not there any more.
    pub cleared: u64,
}

/// One entry: a sequence lock over the fields.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    seq: AtomicU64,
    key: AtomicU64,
    /// `depth << 32 | slot`.
    place: AtomicU64,
    generation: AtomicU64,
    /// Caller's clock, nanoseconds; 0 for an empty or retired entry.
    expires: AtomicU64,
}

/// An entry's fields as one write left them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Fields {
    pub key: u64,
    pub depth: u32,
    pub slot: u32,
    pub generation: u64,
    pub expires: u64,
}

impl Entry {
    /// The fields, or `None` while a writer holds the entry or when one wrote meanwhile;
    /// with the `seq` they were read under.
    pub(crate) fn read(&self) -> Option<(u64, Fields)> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return None;
        }
        let key = self.key.load(Ordering::Relaxed);
        let place = self.place.load(Ordering::Relaxed);
        let generation = self.generation.load(Ordering::Relaxed);
        let expires = self.expires.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        (s1 == s2).then_some((
            s1,
            Fields {
                key,
                depth: (place >> 32) as u32,
                slot: place as u32,
                generation,
                expires,
            },
        ))
    }

    /// Writes `f` if the entry is still at `seen` (even) and no writer holds it; false
    /// when another writer got there first.
    pub(crate) fn write(&self, seen: u64, f: Fields) -> bool {
        if seen & 1 == 1
            || self
                .seq
                .compare_exchange(seen, seen + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        fence(Ordering::Release);
        self.key.store(f.key, Ordering::Relaxed);
        self.place.store(
            u64::from(f.depth) << 32 | u64::from(f.slot),
            Ordering::Relaxed,
        );
        self.generation.store(f.generation, Ordering::Relaxed);
        self.expires.store(f.expires, Ordering::Relaxed);
        self.seq.store(seen + 2, Ordering::Release);
        true
    }
}

/// The predicted-residency table (module docs).
#[derive(Debug)]
pub(crate) struct Predictions {
    entries: Box<[Entry]>,
    /// Buckets − 1 (a power of two less one).
    mask: usize,
    min_blocks: u32,
    ttl: Nanos,
    recorded: AtomicU64,
    contended: AtomicU64,
    credited: AtomicU64,
    retired: AtomicU64,
    cleared: AtomicU64,
}

impl Predictions {
    /// A table of at least `entries` entries (rounded up to a power of two, at least
    /// [`WAYS`]), recording prefixes of at least `min_blocks` blocks (at least 1) for `ttl`.
    pub(crate) fn new(entries: usize, min_blocks: u32, ttl: Nanos) -> Self {
        let n = entries.max(WAYS).next_power_of_two();
        Self {
            entries: (0..n).map(|_| Entry::default()).collect(),
            mask: n / WAYS - 1,
            min_blocks: min_blocks.max(1),
            ttl,
            recorded: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            credited: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            cleared: AtomicU64::new(0),
        }
    }

    /// Whether an entry expiring at `expires` is live at `now`: not expired, and not
    /// recorded more than a TTL after `now` (an entry recorded by a decision whose clock
    /// was far ahead, which would otherwise stay live for every sane clock; two TTLs of
    /// slack leave room for decisions of other threads a little ahead).
    fn live(&self, expires: u64, now: Nanos) -> bool {
        expires > now.0 && expires - now.0 <= self.ttl.0.saturating_mul(2)
    }

    /// Drops every live prediction of `slot` (its cache was cleared); returns how many.
    /// `O(entries)`, for a rare event. An entry a concurrent decision is writing is left:
    /// that decision routed to the worker as the clear happened, and its prompt is prefilled
    /// after it.
    pub(crate) fn forget_slot(&self, slot: Slot) -> u32 {
        let mut n = 0;
        for e in self.entries.iter() {
            let Some((seq, f)) = e.read() else {
                continue;
            };
            if f.slot == slot.0 && f.expires != 0 && e.write(seq, Fields { expires: 0, ..f }) {
                n += 1;
            }
        }
        self.cleared.fetch_add(u64::from(n), Ordering::Relaxed);
        n
    }

    /// The counters (each read on its own, `Relaxed`).
    pub(crate) fn stats(&self) -> PredictionStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PredictionStats {
            recorded: r(&self.recorded),
            contended: r(&self.contended),
            credited: r(&self.credited),
            retired: r(&self.retired),
            cleared: r(&self.cleared),
        }
    }

    /// Bucket of a key (Fibonacci hashing: the key may be a caller's small integer).
    fn bucket(&self, key: u64) -> &[Entry] {
        let b = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.mask;
        &self.entries[b * WAYS..(b + 1) * WAYS]
    }

    /// The depths recorded for a prompt of `n` full blocks, deepest last.
    fn depths(&self, n: usize) -> impl Iterator<Item = u32> + '_ {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        let mut d = self.min_blocks;
        let mut done = n < self.min_blocks;
        core::iter::from_fn(move || {
            if done {
                return None;
            }
            if d >= n {
                done = true;
                return Some(n);
            }
            let out = d;
            d = d.saturating_mul(2);
            Some(out)
        })
    }

    /// Records that `slot` (tenancy `generation`) will hold the prefix `hashes` from
    /// `now`, at the depths beyond `held` (the blocks the index already shows it holding:
    /// a credit there would change nothing). Returns how many of its entries a concurrent
    /// writer kept it from writing.
    pub(crate) fn record(
        &self,
        hashes: &[SequenceHash],
        slot: Slot,
        generation: SlotGeneration,
        now: Nanos,
        held: u32,
    ) -> u32 {
        let expires = now.saturating_add(self.ttl).0.max(1);
        let (mut written, mut skipped) = (0, 0);
        for d in self.depths(hashes.len()).filter(|&d| d > held) {
            let key = hashes[d as usize - 1].0;
            let f = Fields {
                key,
                depth: d,
                slot: slot.0,
                generation: generation.0,
                expires,
            };
            if self.write_into(self.bucket(key), f, now) {
                written += 1;
            } else {
                skipped += 1;
            }
        }
        self.recorded.fetch_add(written, Ordering::Relaxed);
        self.contended
            .fetch_add(u64::from(skipped), Ordering::Relaxed);
        skipped
    }

    /// Writes `f` into an empty or expired way, else the way that expires first; nothing
    /// when a live entry of the same prefix on the same slot is there (its expiry stands:
    /// a credit lasts its TTL from the first decision that made it, however many siblings
    /// follow) or of the same slot under an older tenancy is overwritten. False (counted as
    /// contended) when a way is held by a writer: that way could be this prediction's own,
    /// and writing elsewhere would duplicate it and evict another worker's.
    fn write_into(&self, ways: &[Entry], f: Fields, now: Nanos) -> bool {
        let mut victim: Option<(usize, u64, u64)> = None;
        for (i, e) in ways.iter().enumerate() {
            let Some((seq, old)) = e.read() else {
                return false;
            };
            if old.key == f.key && old.depth == f.depth && old.slot == f.slot {
                if old.generation == f.generation && self.live(old.expires, now) {
                    return true;
                }
                return e.write(seq, f);
            }
            let rank = if self.live(old.expires, now) {
                old.expires
            } else {
                0
            };
            if victim.is_none_or(|(_, _, r)| rank < r) {
                victim = Some((i, seq, rank));
            }
        }
        victim.is_some_and(|(i, seq, _)| ways[i].write(seq, f))
    }

    /// Raises, in `overlaps`, each slot a live prediction names for a prefix of `hashes`
    /// to the prediction's depth, where the slot's tenancy is still the prediction's
    /// (`tenancy(slot)`), and retires the predictions whose depth the slot's overlap
    /// already reaches. Calls `raised(slot, before)` for each raise, `before` the slot's
    /// overlap before it.
    pub(crate) fn apply(
        &self,
        hashes: &[SequenceHash],
        now: Nanos,
        tenancy: impl Fn(Slot) -> Option<SlotGeneration>,
        overlaps: &mut Overlaps,
        mut raised: impl FnMut(Slot, u32),
    ) -> Lookup {
        let mut out = Lookup::default();
        for d in self.depths(hashes.len()) {
            let key = hashes[d as usize - 1].0;
            for e in self.bucket(key) {
                let Some((seq, f)) = e.read() else {
                    continue;
                };
                if f.key != key || f.depth != d || !self.live(f.expires, now) {
                    continue;
                }
                let slot = Slot(f.slot);
                if tenancy(slot) != Some(SlotGeneration(f.generation)) {
                    continue;
                }
                if overlaps.get(slot) >= d {
                    if e.write(seq, Fields { expires: 0, ..f }) {
                        out.retired += 1;
                    }
                    continue;
                }
                raised(slot, overlaps.raise(slot, d));
                out.raised += 1;
            }
        }
        if out.raised > 0 {
            self.credited
                .fetch_add(u64::from(out.raised), Ordering::Relaxed);
        }
        if out.retired > 0 {
            self.retired
                .fetch_add(u64::from(out.retired), Ordering::Relaxed);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(tag: u64, n: usize) -> Vec<SequenceHash> {
        (0..n as u64).map(|i| SequenceHash(tag << 32 | i)).collect()
    }

    fn live(_: Slot) -> Option<SlotGeneration> {
        Some(SlotGeneration(1))
    }

    /// Depths recorded for 100 blocks from 16: 16, 32, 64 and the prompt's own 100.
    #[test]
    fn records_doubling_depths_and_the_whole_prompt() {
        let p = Predictions::new(64, 16, Nanos::from_secs(1));
        assert_eq!(p.depths(100).collect::<Vec<_>>(), [16, 32, 64, 100]);
        assert_eq!(p.depths(64).collect::<Vec<_>>(), [16, 32, 64]);
        assert_eq!(p.depths(15).count(), 0);
        assert_eq!(p.depths(16).collect::<Vec<_>>(), [16]);
    }

    /// An identical prompt is credited its whole depth on the recorded slot; a prompt
    /// sharing 50 of its blocks the deepest recorded depth within them, 32.
    #[test]
    fn a_shared_prefix_is_credited_up_to_the_deepest_recorded_depth_within_it() {
        let p = Predictions::new(64, 16, Nanos::from_secs(1));
        let a = chain(7, 100);
        assert_eq!(p.record(&a, Slot(2), SlotGeneration(1), Nanos::ZERO, 0), 0);
        let mut o = Overlaps::new(4);
        let got = p.apply(&a, Nanos::from_millis(10), live, &mut o, |_, _| {});
        assert_eq!(o.to_vec(), [0, 0, 100, 0]);
        assert_eq!((got.raised, o.deepest()), (4, 100));

        let mut b = a[..50].to_vec();
        b.extend(chain(8, 30));
        let mut o = Overlaps::new(4);
        p.apply(&b, Nanos::from_millis(10), live, &mut o, |_, _| {});
        assert_eq!(o.to_vec(), [0, 0, 32, 0]);
    }

    /// Past its TTL, or on a slot whose tenancy changed, a prediction credits nothing.
    #[test]
    fn expired_or_retenanted_predictions_credit_nothing() {
        let p = Predictions::new(64, 16, Nanos::from_secs(1));
        let a = chain(7, 20);
        p.record(&a, Slot(1), SlotGeneration(1), Nanos::ZERO, 0);
        let mut o = Overlaps::new(4);
        p.apply(&a, Nanos::from_secs(1), live, &mut o, |_, _| {});
        assert_eq!(o.deepest(), 0);
        let other = |_: Slot| Some(SlotGeneration(2));
        p.apply(&a, Nanos::from_millis(1), other, &mut o, |_, _| {});
        assert_eq!(o.deepest(), 0);
    }

    /// Once the index holds the predicted depth on the slot, the lookup retires the
    /// prediction: a later lookup without the index's overlap gets no credit.
    #[test]
    fn the_index_holding_the_prefix_retires_the_prediction() {
        let p = Predictions::new(64, 16, Nanos::from_secs(1));
        let a = chain(7, 16);
        p.record(&a, Slot(0), SlotGeneration(1), Nanos::ZERO, 0);
        let mut held = Overlaps::from_blocks(vec![16, 0]);
        let got = p.apply(&a, Nanos::from_millis(5), live, &mut held, |_, _| {});
        assert_eq!((got.raised, got.retired), (0, 1));
        let mut o = Overlaps::new(2);
        p.apply(&a, Nanos::from_millis(6), live, &mut o, |_, _| {});
        assert_eq!(o.deepest(), 0);
    }

    /// A bucket keeps its [`WAYS`] ways; one more prediction of the same prefix on another
    /// slot evicts the way that expires first (slot 0's, made first).
    #[test]
    fn a_full_bucket_evicts_the_earliest_expiry() {
        let p = Predictions::new(WAYS, 1, Nanos::from_secs(100));
        let a = chain(3, 1);
        let slots = WAYS as u32 + 1;
        for s in 0..slots {
            let at = Nanos::from_secs(u64::from(s));
            assert_eq!(p.record(&a, Slot(s), SlotGeneration(1), at, 0), 0);
        }
        let mut o = Overlaps::new(slots as usize);
        p.apply(&a, Nanos::from_secs(50), live, &mut o, |_, _| {});
        let mut want = vec![1; slots as usize];
        want[0] = 0;
        assert_eq!(o.to_vec(), want);
    }
}
