//! `match_prefix`: per-worker overlap of a request's chained hashes, in one walk.
//!
//! For hashes `h[0..D]`, a worker's overlap is the largest `k` such that it holds every one
//! of `h[0..k]`. The walk keeps an `alive` bitset of workers still matching; at depth `d` it
//! ANDs `alive` with the node's bit words, and every worker that drops out gets overlap `d`.
//! It stops when no worker is alive or a hash has no node. Cost: O(depth × words + workers
//! written); no per-worker hash set, no allocation.

use kvroute_core::sync::atomic::Ordering;

use super::PrefixIndex;
use super::node::Node;
use super::reclaim;
use super::table::prefetch_read;
use kvroute_core::SequenceHash;
use kvroute_core::Slot;

/// Per-slot overlaps (in blocks) filled by a match ([`PrefixIndex::match_prefix`],
/// [`RunIndex::match_prefix`](crate::runs::RunIndex::match_prefix)).
///
/// [`get`](Self::get)`(slot)` is the overlap of the worker in `slot`; slots without a
/// worker read 0. Reuse one `Overlaps` per thread: matching into it never allocates.
///
/// # Layout: a depth per word of 64 slots, and the slots that differ
/// The slots are grouped in words of 64 (slot `s` in word `s / 64`, bit `s % 64`). Each
/// word has a depth and a bitset of *explicit* slots: an explicit slot's overlap is its own
/// entry, every other slot's is its word's depth. A run-index match, where a shared prefix
/// ends for most of a word's workers at once, records those workers as the word's depth
/// (one store, not 64) and only the few that differ as entries; so a match costs what its
/// holder sets' words and differing workers cost, not one store per worker. Readers go
/// through [`get`](Self::get), [`iter`](Self::iter), [`to_vec`](Self::to_vec) (the dense
/// view, allocating) or, for vectorised readers, [`parts`](Self::parts).
///
/// A match may also leave a *tail* ([`tail`](Self::tail)): a bound and the few slots (at
/// most [`TAIL_SLOTS`]) that may hold more than it; every slot not listed holds at most
/// the bound. A decision can then cost the listed slots one by one and bound the rest
/// together. Without one, the bound is [`deepest`](Self::deepest) and the list is empty,
/// which is always true.
#[derive(Clone, Debug, Default)]
pub struct Overlaps {
    /// Per slot: the overlap of an explicit slot (other entries are not read).
    blocks: Vec<u32>,
    /// Per word: the bits of its explicit slots (bits past the slots are not read).
    explicit: Vec<u64>,
    /// Per word: the overlap of its slots that are not explicit.
    depths: Vec<u32>,
    /// Entries past this are known to be zero.
    dirty: usize,
    deepest: u32,
    /// The tail's slots (`tail_len` of them) and its bound (`None`: `deepest`).
    tail: [u32; TAIL_SLOTS],
    tail_len: usize,
    bound: Option<u32>,
    /// A slot whose overlap is `deepest`, when known.
    deepest_slot: Option<u32>,
}

/// The most slots a match lists in an [`Overlaps`] tail.
pub const TAIL_SLOTS: usize = 16;

/// The raw layout of an [`Overlaps`] (its type docs), for readers that gather several
/// slots at once: slot `s` below [`entries`](Self::entries)' length reads `entries()[s]`
/// when bit `s % 64` of `explicit()[s / 64]` is set, else `depths()[s / 64]`
/// ([`get`](Self::get)). Always `explicit().len() == depths().len() ==
/// entries().len().div_ceil(64)` (only [`Overlaps::parts`] makes one).
#[derive(Clone, Copy, Debug)]
pub struct OverlapParts<'a> {
    entries: &'a [u32],
    explicit: &'a [u64],
    depths: &'a [u32],
}

impl<'a> OverlapParts<'a> {
    /// Per slot, the overlap (blocks) of an explicit slot; other entries hold anything.
    #[inline(always)]
    pub fn entries(&self) -> &'a [u32] {
        self.entries
    }

    /// Per word of 64 slots, the bits of its explicit slots.
    #[inline(always)]
    pub fn explicit(&self) -> &'a [u64] {
        self.explicit
    }

    /// Per word of 64 slots, the overlap (blocks) of its slots that are not explicit.
    #[inline(always)]
    pub fn depths(&self) -> &'a [u32] {
        self.depths
    }

    /// Overlap of slot `i` in blocks (0 past the slots).
    #[inline(always)]
    pub fn get(&self, i: usize) -> u32 {
        if i >= self.entries.len() {
            return 0;
        }
        let w = i / 64;
        if self.explicit[w] >> (i % 64) & 1 != 0 {
            self.entries[i]
        } else {
            self.depths[w]
        }
    }
}

impl Overlaps {
    /// Zeroed overlaps for `worker_slots` slots.
    pub fn new(worker_slots: usize) -> Self {
        let words = worker_slots.div_ceil(64);
        Self {
            blocks: vec![0; worker_slots],
            explicit: vec![u64::MAX; words],
            depths: vec![0; words],
            dirty: 0,
            deepest: 0,
            tail: [0; TAIL_SLOTS],
            tail_len: 0,
            bound: None,
            deepest_slot: None,
        }
    }

    /// Overlaps given directly, one per slot in blocks (for tests, simulators and callers
    /// that compute overlaps elsewhere). `deepest` is their maximum.
    pub fn from_blocks(blocks: Vec<u32>) -> Self {
        let deepest = blocks.iter().copied().max().unwrap_or(0);
        let deepest_slot = first_at(&blocks, deepest);
        let dirty = blocks.len();
        let words = blocks.len().div_ceil(64);
        Self {
            blocks,
            explicit: vec![u64::MAX; words],
            depths: vec![0; words],
            dirty,
            deepest,
            tail: [0; TAIL_SLOTS],
            tail_len: 0,
            bound: None,
            deepest_slot,
        }
    }

    /// A slot whose overlap is [`deepest`](Self::deepest), when the overlaps know one
    /// (after a `RunIndex` match, [`from_blocks`](Self::from_blocks),
    /// [`zero_where`](Self::zero_where) or a [`raise`](Self::raise) to a new deepest);
    /// `None` when `deepest` is 0 or no slot is known (a node-index match). Lets a reader
    /// find the deepest overlap among some slots without reading every slot.
    #[inline]
    pub fn deepest_slot(&self) -> Option<Slot> {
        self.deepest_slot.map(Slot)
    }

    /// Overlap of `slot` in blocks (0 for a slot outside the array).
    #[inline]
    pub fn get(&self, slot: Slot) -> u32 {
        self.parts().get(slot.index())
    }

    /// Slots (the index's `worker_slots` after a match).
    #[inline]
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether there is no slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The overlap of every slot in slot order (blocks; [`len`](Self::len) items).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + '_ {
        let parts = self.parts();
        (0..self.blocks.len()).map(move |i| parts.get(i))
    }

    /// The dense view: the overlap of every slot in slot order (blocks), in a new vector
    /// of [`len`](Self::len) entries (allocates).
    pub fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    /// The raw layout, for vectorised readers (see [`OverlapParts`]).
    #[inline(always)]
    pub fn parts(&self) -> OverlapParts<'_> {
        OverlapParts {
            entries: &self.blocks,
            explicit: &self.explicit,
            depths: &self.depths,
        }
    }

    /// The largest overlap of any worker, in blocks.
    #[inline]
    pub fn deepest(&self) -> u32 {
        self.deepest
    }

    /// The tail: `(slots, bound)`, where every slot not in `slots` (at most
    /// [`TAIL_SLOTS`] of them, in slot order, each below [`len`](Self::len)) has an overlap
    /// of at most `bound` blocks. Without a tail from the match: no slots, and `bound` is
    /// [`deepest`](Self::deepest).
    #[inline]
    pub fn tail(&self) -> (&[u32], u32) {
        (
            &self.tail[..self.tail_len],
            self.bound.map_or(self.deepest, |b| b.min(self.deepest)),
        )
    }

    /// Sets the overlap of `slot` (below `len`) as an explicit entry.
    #[inline(always)]
    fn set_entry(&mut self, i: usize, blocks: u32) {
        self.blocks[i] = blocks;
        self.explicit[i / 64] |= 1 << (i % 64);
        self.dirty = self.dirty.max(i + 1);
    }

    /// Sets the overlap of every slot for which `drop(slot)` is true to 0 (for example the
    /// workers whose residency is not trusted) and recomputes [`deepest`](Self::deepest),
    /// in place: never allocates. `drop` is called once per slot, in slot order.
    pub fn zero_where(&mut self, mut drop: impl FnMut(Slot) -> bool) {
        let mut deepest = 0;
        for i in 0..self.blocks.len() {
            if drop(Slot(i as u32)) {
                self.set_entry(i, 0);
            }
            deepest = deepest.max(self.parts().get(i));
        }
        // Entries only went down: the tail still holds.
        self.deepest = deepest;
        self.deepest_slot = if deepest == 0 {
            None
        } else {
            self.iter().position(|b| b == deepest).map(|i| i as u32)
        };
    }

    /// Raises the overlap of `slot` to `blocks` where it is below (a credit from outside
    /// the index, such as a prefix a router has just sent to that worker), keeping
    /// [`deepest`](Self::deepest), [`deepest_slot`](Self::deepest_slot) and the
    /// [`tail`](Self::tail) true: a raised slot above the tail's bound joins the tail, and a
    /// tail already full is dropped (its bound becomes `deepest`, which still holds).
    /// Returns the overlap before. A slot outside the array is left alone (returns 0).
    /// Never allocates.
    pub fn raise(&mut self, slot: Slot, blocks: u32) -> u32 {
        let i = slot.index();
        if i >= self.blocks.len() {
            return 0;
        }
        let before = self.parts().get(i);
        if blocks <= before {
            return before;
        }
        self.set_entry(i, blocks);
        if let Some(bound) = self.bound
            && blocks > bound.min(self.deepest)
        {
            let tail = &self.tail[..self.tail_len];
            if let Err(at) = tail.binary_search(&slot.0) {
                if self.tail_len < TAIL_SLOTS {
                    self.tail.copy_within(at..self.tail_len, at + 1);
                    self.tail[at] = slot.0;
                    self.tail_len += 1;
                } else {
                    self.tail_len = 0;
                    self.bound = None;
                }
            }
        }
        if blocks > self.deepest {
            // Every other slot stays within the old bound, so within the new one.
            self.deepest = blocks;
            self.deepest_slot = Some(slot.0);
        }
        before
    }

    /// Sizes the buffers to `worker_slots` slots (new entries read 0) and clears the
    /// summary (deepest, tail, deepest slot); the entries and words are left as they are.
    fn resize_and_clear(&mut self, worker_slots: usize) {
        self.dirty = self.dirty.min(self.blocks.len());
        if self.blocks.len() != worker_slots {
            self.blocks.clear();
            self.blocks.resize(worker_slots, 0);
            self.dirty = 0;
            let words = worker_slots.div_ceil(64);
            self.explicit.clear();
            self.explicit.resize(words, u64::MAX);
            self.depths.clear();
            self.depths.resize(words, 0);
        }
        self.clear_summary();
    }

    /// Clears what a match says besides the overlaps: deepest, tail and deepest slot.
    #[inline(always)]
    fn clear_summary(&mut self) {
        self.deepest = 0;
        self.tail_len = 0;
        self.bound = None;
        self.deepest_slot = None;
    }

    /// Starts a match that writes entries only (the node index's): every entry 0 and
    /// explicit.
    fn reset(&mut self, worker_slots: usize) {
        self.resize_and_clear(worker_slots);
        self.blocks[..self.dirty].fill(0);
        self.dirty = 0;
        self.explicit.fill(u64::MAX);
    }
}

/// The first slot whose entry is `deepest`, unless `deepest` is 0.
fn first_at(blocks: &[u32], deepest: u32) -> Option<u32> {
    if deepest == 0 {
        return None;
    }
    blocks.iter().position(|&b| b == deepest).map(|i| i as u32)
}

impl Overlaps {
    /// Starts a match that records words ([`record_word`](Self::record_word)): sized to
    /// `worker_slots`, every slot reading 0 (no slot explicit, every word's depth 0),
    /// deepest, tail and deepest slot cleared. The entries a previous match wrote stay as
    /// they are (no slot reads them until recorded again).
    #[inline(always)]
    pub(crate) fn begin_words(&mut self, worker_slots: usize) {
        if self.blocks.len() != worker_slots {
            self.resize_and_clear(worker_slots);
        } else {
            self.clear_summary();
        }
        // Stores of whole words (at most 64 of each), not a `memset` call per buffer.
        for (e, d) in self.explicit.iter_mut().zip(self.depths.iter_mut()) {
            *e = 0;
            *d = 0;
        }
    }

    /// Records `depth` as the overlap of word `w`'s slots whose bit is set in `dropped`
    /// (bits of slots below [`len`](Self::len) only; each slot recorded at most once per
    /// match, as a walk's workers drop out once). More than half the word at once (a
    /// shared prefix ending for most of its workers): the word's depth, one store; since
    /// the bits drop once each, at most one such record per word, and every other slot
    /// of the word is recorded as an entry. Fewer: entries, one store each (none for an
    /// empty `dropped`, which records nothing).
    #[inline(always)]
    pub(crate) fn record_word(&mut self, w: usize, dropped: u64, depth: u32) {
        if dropped.count_ones() > 32 {
            self.depths[w] = depth;
            return;
        }
        // At most 32 entries: one store each (cheaper than a select over the word's 64
        // entries, which `record` uses for more than 8 bits).
        self.explicit[w] |= dropped;
        let base = w * 64;
        let mut left = dropped;
        while left != 0 {
            let i = base + left.trailing_zeros() as usize;
            if let Some(entry) = self.blocks.get_mut(i) {
                *entry = depth;
            }
            left &= left - 1;
        }
    }

    /// Records `slot` (below the entries' length; the caller checked) as one whose
    /// overlap is the deepest.
    pub(crate) fn set_deepest_slot(&mut self, slot: u32) {
        self.deepest_slot = Some(slot);
    }

    /// Ends a match: its deepest overlap, and how many leading entries it may have written.
    pub(crate) fn finish(&mut self, deepest: u32, written: usize) {
        self.deepest = deepest;
        self.dirty = self.dirty.max(written.min(self.blocks.len()));
    }

    /// Records a tail: `slots` (at most [`TAIL_SLOTS`], in slot order, each below the
    /// entries' length; the caller checked) and the bound every other slot's overlap stays
    /// within.
    pub(crate) fn set_tail(&mut self, slots: &[u32], bound: u32) {
        self.tail[..slots.len()].copy_from_slice(slots);
        self.tail_len = slots.len();
        self.bound = Some(bound);
    }
}

/// Words of the `alive` set kept on the stack (4,096 slots).
pub(crate) const MAX_WORDS: usize = super::types::MAX_WORKER_SLOTS / 64;

/// Writes `depth` into the overlaps of word `w`'s slots whose bit is set in `dropped`
/// (bits of slots inside `blocks` only). Few bits: one store each. The whole word (a
/// shared prefix ending for every worker of the word at once): a fill of its 64 entries.
/// Many bits otherwise: one branch-free select per entry. (Expanding eight bits at a time
/// into lane masks and blending counted 17 % more instructions for the node index's match
/// at 512 workers, so it was not kept.)
#[inline(always)]
pub(crate) fn record(blocks: &mut [u32], w: usize, dropped: u64, depth: u32) {
    if dropped == 0 {
        return;
    }
    let base = w * 64;
    let ones = dropped.count_ones();
    if ones <= 8 || base + 64 > blocks.len() {
        let mut left = dropped;
        while left != 0 {
            blocks[base + left.trailing_zeros() as usize] = depth;
            left &= left - 1;
        }
    } else if dropped == u64::MAX {
        blocks[base..base + 64].fill(depth);
    } else {
        for (b, entry) in blocks[base..base + 64].iter_mut().enumerate() {
            let set = (dropped >> b) & 1 != 0;
            *entry = if set { depth } else { *entry };
        }
    }
}

impl PrefixIndex {
    /// Writes, for every worker slot, how many leading blocks of `hashes` the worker holds
    /// contiguously from block 0 (see the module docs of `matching`), into `out`.
    ///
    /// Lock-free: runs concurrently with stores and removes of any worker and never waits
    /// for them; a block stored or removed during the match may or may not be seen. Resizes
    /// `out` to `worker_slots` if needed (only then does it allocate).
    pub fn match_prefix(&self, hashes: &[SequenceHash], out: &mut Overlaps) {
        let slots = self.config.worker_slots;
        out.reset(slots);
        let words = self.active_words().min(MAX_WORDS);
        let n = hashes.len();
        if words == 0 || n == 0 {
            return;
        }
        let guard = reclaim::pin();
        let view = self.table.view(&guard);
        let mut next: Option<&Node> = view.find(hashes[0].0);
        if words == 1 {
            // Up to 64 slots in use: one word, a tight loop.
            let mut alive = u64::MAX;
            let mut depth = 0usize;
            while let Some(node) = next {
                let kept = alive & node.word0();
                if kept != alive && depth > 0 {
                    record(&mut out.blocks, 0, alive & !kept, depth as u32);
                }
                alive = kept;
                if alive == 0 {
                    break;
                }
                depth += 1;
                next = match hashes.get(depth) {
                    Some(h) => node.succ_for(h.0).or_else(|| view.find(h.0)),
                    None => None,
                };
            }
            if depth > 0 {
                while alive != 0 {
                    out.blocks[alive.trailing_zeros() as usize] = depth as u32;
                    alive &= alive - 1;
                }
            }
            out.deepest = depth as u32;
            out.dirty = 64.min(slots);
            return;
        }
        // Alive bits per word, and the list of words that still have any.
        let mut alive = [u64::MAX; MAX_WORDS];
        let mut live = [0u16; MAX_WORDS];
        for (w, l) in live[..words].iter_mut().enumerate() {
            *l = w as u16;
        }
        let mut live_count = words;
        let mut depth = 0usize;
        while depth < n {
            let Some(node) = next else {
                break;
            };
            // `words <= table words`: every live word index is in bounds.
            let bit_words = &node.words()[..words];
            let mut kept_count = 0;
            for i in 0..live_count {
                let w = live[i] as usize;
                let bits = bit_words[w].load(Ordering::Acquire);
                let a = alive[w];
                let kept = a & bits;
                if depth > 0 {
                    record(&mut out.blocks, w, a & !kept, depth as u32);
                }
                alive[w] = kept;
                if kept != 0 {
                    live[kept_count] = w as u16;
                    kept_count += 1;
                }
            }
            live_count = kept_count;
            if live_count == 0 {
                break;
            }
            depth += 1;
            // Step to the next level: through the successor link when it is the next
            // requested block (no table lookup), else through the table.
            next = hashes
                .get(depth)
                .and_then(|h| node.succ_for(h.0).or_else(|| view.find(h.0)));
            if let Some(n) = next {
                // Start loading what the level after will need: the next node's last live
                // bit word (a node of 512 slots spans two cache lines) and its successor.
                let last = &n.words()[live[live_count - 1] as usize];
                prefetch_read(core::ptr::from_ref(last).cast());
                prefetch_read(n.succ_addr());
            }
        }
        if depth > 0 {
            for &w in &live[..live_count] {
                let w = w as usize;
                let mut left = alive[w];
                while left != 0 {
                    let bit = left.trailing_zeros() as usize;
                    out.blocks[w * 64 + bit] = depth as u32;
                    left &= left - 1;
                }
            }
        }
        // `depth` counts the levels at which some worker was still alive: the deepest overlap.
        out.deepest = depth as u32;
        out.dirty = (words * 64).min(slots);
    }
}

#[cfg(all(test, not(kvroute_loom)))]
mod tests {
    use super::*;

    /// A raise keeps the tail true: a slot raised above the bound joins the tail in slot
    /// order; with the tail full, the tail is dropped and the bound becomes the new
    /// deepest; `deepest` and `deepest_slot` follow the raise; a lower value changes nothing.
    #[test]
    fn raise_keeps_the_tail_and_the_deepest_true() {
        let mut o = Overlaps::from_blocks(vec![9, 0, 2, 0, 0]);
        o.set_tail(&[0], 2);
        assert_eq!(o.raise(Slot(3), 5), 0);
        assert_eq!(o.tail(), (&[0, 3][..], 2));
        assert_eq!(o.raise(Slot(1), 2), 0, "at the bound: no tail entry needed");
        assert_eq!(o.tail(), (&[0, 3][..], 2));
        assert_eq!(o.raise(Slot(4), 12), 0);
        assert_eq!((o.deepest(), o.deepest_slot()), (12, Some(Slot(4))));
        assert_eq!(o.tail(), (&[0, 3, 4][..], 2));
        assert_eq!(o.raise(Slot(0), 4), 9, "lower: unchanged");
        assert_eq!(o.to_vec(), [9, 2, 2, 5, 12]);
        assert_eq!(o.raise(Slot(7), 3), 0, "outside the array: ignored");

        let full: Vec<u32> = (0..TAIL_SLOTS as u32).collect();
        let mut o = Overlaps::from_blocks(vec![1; TAIL_SLOTS + 2]);
        o.set_tail(&full, 1);
        o.raise(Slot(TAIL_SLOTS as u32 + 1), 7);
        assert_eq!(o.tail(), (&[][..], 7));
    }

    #[test]
    fn from_blocks_then_reuse_for_a_match_clears_every_entry() {
        let mut o = Overlaps::from_blocks(vec![3, 0, 7]);
        assert_eq!((o.get(Slot(0)), o.get(Slot(2)), o.deepest()), (3, 7, 7));
        assert_eq!(o.get(Slot(9)), 0);
        // A match into it on an index of the same size starts from zeros.
        let index = PrefixIndex::new(crate::index::IndexConfig {
            worker_slots: 3,
            ..Default::default()
        })
        .unwrap();
        index.match_prefix(&[SequenceHash(1)], &mut o);
        assert_eq!(o.to_vec(), &[0, 0, 0]);
        assert_eq!(o.deepest(), 0);
    }

    #[test]
    fn record_and_record_word_write_exactly_the_dropped_slots_on_every_path() {
        // Masks for each path: few bits, a whole word, many bits, and a word past the
        // end of a short array (one store per bit).
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        // All but a few bits: the fill-and-restore path (up to 8 kept) and just past it.
        let mut masks = vec![
            1u64,
            0x8000_0000_0000_0001,
            u64::MAX,
            u64::MAX - 1,
            0xff00,
            !(1u64 << 17 | 1 << 40),
            !0xffu64,
            !0x1ffu64,
            !(0x8000_0000_0000_0001u64),
        ];
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            masks.push(x);
            masks.push(x & (x >> 3));
            masks.push(x | (x >> 1) | (x >> 2) | (x << 3));
        }
        for &m in &masks {
            for (len, w) in [(192usize, 1usize), (100, 1), (64, 0)] {
                // Callers set bits of existing slots only.
                let m = if len < (w + 1) * 64 {
                    m & ((1u64 << (len - w * 64)) - 1)
                } else {
                    m
                };
                let mut got: Vec<u32> = (0..len as u32).collect();
                let mut want = got.clone();
                record(&mut got, w, m, 777);
                for b in 0..64 {
                    if m >> b & 1 == 1 && w * 64 + b < len {
                        want[w * 64 + b] = 777;
                    }
                }
                assert_eq!(got, want, "mask {m:#x}, len {len}, word {w}");
                // The same drop recorded in a word-recording match, then the rest of the
                // word's slots at another depth, as a walk records them: every slot reads
                // its own depth (by hand above), whichever of the two became the word's.
                let mut o = Overlaps::from_blocks((0..len as u32).map(|i| i + 1_000).collect());
                o.begin_words(len);
                assert!(o.iter().all(|b| b == 0), "a new match reads 0 everywhere");
                o.record_word(w, m, 777);
                let word_slots = if len < (w + 1) * 64 {
                    (1u64 << (len - w * 64)) - 1
                } else {
                    u64::MAX
                };
                o.record_word(w, word_slots & !m, 5);
                let want: Vec<u32> = (0..len)
                    .map(|s| match s / 64 == w {
                        false => 0,
                        true if m >> (s % 64) & 1 == 1 => 777,
                        true => 5,
                    })
                    .collect();
                assert_eq!(
                    o.to_vec(),
                    want,
                    "record_word, mask {m:#x}, len {len}, word {w}"
                );
            }
        }
    }

    /// One buffer reused across both indexes' matches, a `from_blocks` and the in-place
    /// edits reads what a fresh buffer reads each time: 130 workers (three words, the last
    /// partial) where worker `w` holds the first `(8w) % 21` blocks of one chain, so a
    /// match of the first `q` blocks gives `min((8w) % 21, q)` (by hand), with words whose
    /// workers drop out together and words where they do not.
    #[test]
    fn one_buffer_reused_across_both_indexes_reads_each_match_exactly() {
        use crate::index::IndexConfig;
        use crate::runs::RunIndex;
        use kvroute_core::EngineHash;
        let n = 130u32;
        let held = |w: u32| (8 * w) % 21;
        let config = IndexConfig::new(n as usize, 16);
        let (runs, nodes) = (
            RunIndex::new(config.clone()).unwrap(),
            PrefixIndex::new(config).unwrap(),
        );
        let block = |k: u32| {
            (
                EngineHash(u64::from(k) + 500),
                SequenceHash(u64::from(k) + 1),
            )
        };
        for w in 0..n {
            let pairs: Vec<_> = (0..held(w)).map(block).collect();
            runs.store_hashes(Slot(w), None, &pairs).unwrap();
            nodes.store_hashes(Slot(w), &pairs).unwrap();
        }
        let chain: Vec<SequenceHash> = (0..21).map(|k| block(k).1).collect();
        let want = |q: u32| -> Vec<u32> { (0..n).map(|w| held(w).min(q)).collect() };
        let mut o = Overlaps::default();
        for (round, q) in [21u32, 3, 0, 20, 7, 21].into_iter().enumerate() {
            let query = &chain[..q as usize];
            if round % 2 == 0 {
                runs.match_prefix(query, &mut o);
            } else {
                nodes.match_prefix(query, &mut o);
            }
            assert_eq!(o.to_vec(), want(q), "round {round}, {q} blocks");
            assert_eq!(o.deepest(), q.min(20), "round {round}");
            if round == 2 {
                o = Overlaps::from_blocks(vec![9; n as usize]);
            }
        }
        // In-place edits on a run-index match: a raise and a zeroed slot, in words recorded
        // as depths.
        runs.match_prefix(&chain[..5], &mut o);
        assert_eq!(o.raise(Slot(64), 30), 5);
        o.zero_where(|s| s.index() == 65);
        let mut expect = want(5);
        expect[64] = 30;
        expect[65] = 0;
        assert_eq!(o.to_vec(), expect);
        assert_eq!((o.deepest(), o.deepest_slot()), (30, Some(Slot(64))));
    }

    #[test]
    fn zero_where_drops_slots_and_recomputes_deepest() {
        let mut o = Overlaps::from_blocks(vec![4, 9, 6, 9]);
        o.zero_where(|s| s.index() == 1);
        // Slot 3 still holds 9 blocks.
        assert_eq!((o.to_vec(), o.deepest()), (vec![4, 0, 6, 9], 9));
        o.zero_where(|s| s.index() == 3);
        assert_eq!((o.to_vec(), o.deepest()), (vec![4, 0, 6, 0], 6));
        o.zero_where(|_| true);
        assert_eq!((o.to_vec(), o.deepest()), (vec![0, 0, 0, 0], 0));
    }
}
