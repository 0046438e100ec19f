//! The writer's side of the run index: the run arena, each worker's lanes (engine hash →
//! position), placement of stored blocks, removal, splits and the views they publish.
//!
//! Everything here runs under the index's writer lock, so plain fields suffice; readers
//! see only what [`Writer::publish`] puts in the head table.
//!
//! # Runs
//! A run is a chain of consecutive blocks: its key at offset `o + 1` is the chained hash of
//! a block whose parent is the key at `o`. Keys live in a buffer that only ever grows past
//! its *high-water mark* `hw`: positions below `hw` are never rewritten, so a view that
//! shows `len <= hw` keys stays true for as long as the buffer lives. A run's holders are
//! its *members*, each with the [`Cover`] of offsets it holds.
//!
//! # Placing a block
//! A stored block whose parent sits at `(r, o)` is, by the chain property, either the key at
//! `(r, o + 1)`, or the first key of some run (found in the head table), or new. A new
//! block after the end of a run that no other member covers to its end, on a run that was
//! never split, is appended in place; any other new block starts a run of its own (a child
//! at that offset: the parent run is not split). A block stored without a parent is looked
//! up as a run's first key. So every key has one position, and a reader that leaves a run
//! at offset `m` finds the request's next block, if indexed, as the first key of a run.
//!
//! # Splits and forwarding
//! A view lists full holders as a bitset and partial holders (`(slot, cutoff)`) as a list;
//! when the list would pass [`MAX_PARTIALS`] entries the run is split at its smallest
//! cutoff, so every holder of the head part holds all of it. The tail part becomes a new
//! run; lanes that pointed past the new end of the old run are *forwarded*: the old run
//! records its tail, and a lane `(r, o)` with `o >= len(r)` resolves to `(tail(r), o -
//! len(r))`, rewritten in place when looked up. A run's record stays while lanes or a
//! forwarding run refer to it (`refs`), even after its last member left.

use std::sync::Arc;

use super::epoch::Guard;
use hashbrown::HashMap;

use kvroute_core::EngineHash;

use super::cover::Cover;
use super::heads::{HeadCounts, Heads, Taken, free_array};
use super::lanes::{Lane, LaneMap};
use super::view::{Partial, ViewHead};
use crate::index::{RemoveOutcome, StoreOutcome};

/// No run (`tail` of a run that was never split).
pub(crate) const NONE: u32 = u32::MAX;

/// Partial holders a view lists before its run is split.
pub(crate) const MAX_PARTIALS: usize = 8;

/// How many hashes ahead a removal prefetches the home slot of the next one's lane.
const REMOVE_AHEAD: usize = 16;

/// One run's record in the arena.
struct Run {
    keys: *mut u64,
    cap: u32,
    /// Keys written to the buffer (never rewritten).
    hw: u32,
    len: u32,
    /// The run holding the positions from `len` on, after a split.
    tail: u32,
    /// Lanes resolving through this record, plus one if a run forwards to it.
    refs: u32,
    /// Holders, sorted by slot.
    members: Vec<(u32, Cover)>,
    /// The published view, or null when the run is not linked.
    view: *mut ViewHead,
    dirty: bool,
    /// Its first publication found its first key taken by another run: it stays out of the
    /// head table (counted once in `duplicate_heads`).
    left_out: bool,
    /// Offsets of this run that runs start after (their first block's parent), sorted,
    /// each with how many runs start there. A run that has some is kept linked, members or
    /// not, so that the position of their parent never moves (see `place`).
    anchors: Vec<(u32, u32)>,
    /// The position this run starts after (`(NONE, 0)` for a root), as a reference that
    /// resolves through forwarding like a lane.
    anchor: (u32, u32),
    /// Position in its sequence of the run's first block (0 for a root).
    depth: u32,
}

impl Run {
    /// A record with no keys, members or links (a free slot of the arena).
    fn vacant() -> Self {
        Self {
            keys: core::ptr::null_mut(),
            cap: 0,
            hw: 0,
            len: 0,
            tail: NONE,
            refs: 0,
            members: Vec::new(),
            view: core::ptr::null_mut(),
            dirty: false,
            left_out: false,
            anchors: Vec::new(),
            anchor: (NONE, 0),
            depth: 0,
        }
    }

    fn key(&self, o: u32) -> u64 {
        // Checked in release builds too: a position past the written keys is a broken
        // invariant, which must stop here rather than read out of bounds.
        assert!(
            o < self.hw,
            "offset {o} past the run's {} written keys",
            self.hw
        );
        // SAFETY: `o < hw <= cap` (checked above): a written key of the live buffer.
        unsafe { self.keys.add(o as usize).read() }
    }

    fn linked(&self) -> bool {
        !self.view.is_null()
    }

    fn member_or_insert(&mut self, slot: u32) -> &mut Cover {
        let i = match self.members.binary_search_by_key(&slot, |m| m.0) {
            Ok(i) => i,
            Err(i) => {
                self.members.insert(i, (slot, Cover::default()));
                i
            }
        };
        &mut self.members[i].1
    }
}

/// One worker's maps.
#[derive(Default)]
struct Lanes {
    map: LaneMap,
    /// Advances by each store's block count: the recency stamps of `Cover::stamp`.
    clock: u32,
    /// Copies beyond the first, per engine hash stored more than once.
    copies: HashMap<u64, u16>,
    /// Extra engine hashes per held key (the same block under two engine hashes).
    aliases: HashMap<u64, Vec<Alias>>,
}

impl Lanes {
    fn copies(&self, eh: u64) -> u16 {
        1 + self.copies.get(&eh).copied().unwrap_or(0)
    }
}

/// A removal's work not yet applied: positions unmapped and not yet uncovered, `(run,
/// from, to)`, and references of removed lanes not yet dropped, `(record, count)`.
/// Dropping references late only delays the freeing of a record whose count reaches zero;
/// a removal allocates no record, so none is reused before the drop.
#[derive(Clone, Copy, Debug)]
struct Unapplied {
    pending: Option<(u32, u32, u32)>,
    refs: (u32, u32),
}

impl Default for Unapplied {
    fn default() -> Self {
        Self {
            pending: None,
            refs: (NONE, 0),
        }
    }
}

/// Extra engine hashes of one worker at one position: `(run, offset)` as it was when the
/// first extra one was stored (resolved through forwarding like a lane; the record holds a
/// reference on the run), and how many. Kept per key *and* position: stores that break the
/// chain property can put one key at two positions, and each position's count must stay
/// its own.
#[derive(Clone, Copy, Debug)]
struct Alias {
    run: u32,
    off: u32,
    extra: u32,
}

/// Allocates a key buffer of at least `cap` keys.
fn alloc_keys(cap: usize) -> (*mut u64, u32) {
    let mut v = Vec::<u64>::with_capacity(cap.max(1));
    let p = v.as_mut_ptr();
    let c = v.capacity();
    core::mem::forget(v);
    (p, c as u32)
}

/// Frees a key buffer.
///
/// # Safety
/// `(p, cap)` came from `alloc_keys` and is freed once, with no reader left on it.
unsafe fn free_keys(p: *mut u64, cap: u32) {
    // SAFETY: the caller's contract; a `Vec` of length 0 drops no elements.
    unsafe { drop(Vec::from_raw_parts(p, 0, cap as usize)) };
}

/// One object an event made unreachable for new readers, freed after the grace period.
enum Garbage {
    /// A key buffer (`alloc_keys`).
    Keys(*mut u64, u32),
    /// A view (`ViewHead::build`).
    View(*mut ViewHead),
    /// A head-table array a rebuild replaced (`heads::free_array`).
    Array(usize),
}

/// The garbage of one event, handed to the epoch collector as one deferred function
/// (crossbeam frees a bounded number of deferred functions per collection, so one per
/// object would let a clear of thousands of runs outpace it).
#[cfg(not(kvroute_loom))]
struct Batch {
    items: Vec<Garbage>,
    /// Heap bytes of the batch: its items, its own record and buffer.
    bytes: usize,
    deferred: Arc<Deferred>,
}

#[cfg(not(kvroute_loom))]
impl Batch {
    /// Frees every item.
    ///
    /// # Safety
    /// No reader can reach the items any more (the grace period has passed); each item is
    /// freed once.
    unsafe fn free(self: Box<Self>) {
        for g in &self.items {
            match *g {
                // SAFETY: the caller's contract, for each item.
                Garbage::Keys(p, cap) => unsafe { free_keys(p, cap) },
                // SAFETY: as above.
                Garbage::View(v) => unsafe { ViewHead::free(v) },
                // SAFETY: as above.
                Garbage::Array(a) => unsafe { free_array(a) },
            }
        }
        let (bytes, deferred) = (self.bytes, Arc::clone(&self.deferred));
        drop(self);
        deferred.sub(bytes);
    }
}

/// Bytes handed to the epoch collector and not yet freed.
#[derive(Debug, Default)]
pub(crate) struct Deferred(kvroute_core::sync::atomic::AtomicUsize);

#[cfg_attr(kvroute_loom, allow(dead_code))]
impl Deferred {
    fn add(&self, b: usize) {
        self.0
            .fetch_add(b, kvroute_core::sync::atomic::Ordering::Relaxed);
    }
    fn sub(&self, b: usize) {
        self.0
            .fetch_sub(b, kvroute_core::sync::atomic::Ordering::Relaxed);
    }
    /// Bytes waiting.
    pub(crate) fn get(&self) -> usize {
        self.0.load(kvroute_core::sync::atomic::Ordering::Relaxed)
    }
}

/// The writer's state; see the module docs.
pub(crate) struct Writer {
    runs: Vec<Run>,
    free: Vec<u32>,
    lanes: Vec<Lanes>,
    heads: HeadCounts,
    dirty: Vec<u32>,
    words: usize,
    #[cfg_attr(kvroute_loom, allow(dead_code))]
    deferred: Arc<Deferred>,
    /// (worker, position) pairs held.
    pub(crate) residencies: u64,
    /// Positions of linked runs.
    pub(crate) positions: u64,
    /// Linked runs.
    pub(crate) linked: u64,
    /// Splits so far.
    pub(crate) splits: u64,
    /// Runs left unlinked because another run has their first key (bad input).
    pub(crate) duplicate_heads: u64,
    /// A store's (engine hash, key) pairs.
    scratch: Vec<(u64, u64)>,
    /// The stamp of the store in progress.
    stamp: u32,
    /// Key buffers replaced by a growth whose old view is not yet replaced.
    retired_keys: Vec<(usize, u32)>,
    // Scratch for building views.
    full: Vec<u64>,
    partials: Vec<Partial>,
    /// Garbage of the event in progress, handed to the collector by `publish`.
    garbage: Vec<Garbage>,
    /// Garbage of earlier events, kept until teardown in loom builds (see `epoch`).
    #[cfg(kvroute_loom)]
    parked: Vec<Garbage>,
    /// Heap bytes of the items of `garbage`.
    garbage_bytes: usize,
    /// Whether the event in progress freed a key buffer or an array (not only views).
    freed: bool,
}

// SAFETY: the raw pointers are to buffers and views this writer owns (readers only read
// them, through the head table); the writer moves between threads with its lock.
unsafe impl Send for Writer {}

/// What a writer call needs besides its state.
pub(crate) struct Ctx<'a> {
    pub(crate) heads: &'a Heads,
    pub(crate) guard: &'a Guard,
}

impl Writer {
    pub(crate) fn new(slots: usize, heads: HeadCounts, deferred: Arc<Deferred>) -> Self {
        Self {
            runs: Vec::new(),
            free: Vec::new(),
            lanes: (0..slots).map(|_| Lanes::default()).collect(),
            heads,
            dirty: Vec::new(),
            words: slots.div_ceil(64),
            deferred,
            residencies: 0,
            positions: 0,
            linked: 0,
            splits: 0,
            duplicate_heads: 0,
            scratch: Vec::new(),
            stamp: 0,
            retired_keys: Vec::new(),
            full: Vec::new(),
            partials: Vec::new(),
            garbage: Vec::new(),
            #[cfg(kvroute_loom)]
            parked: Vec::new(),
            garbage_bytes: 0,
            freed: false,
        }
    }

    /// The key of engine hash `eh` on worker `s`, if indexed (resolving its lane).
    pub(crate) fn key_of(&mut self, s: usize, eh: u64) -> Option<(u32, u32, u64)> {
        let lane = self.lanes[s].map.get(eh)?;
        let (r, o) = self.resolve(s, eh, lane);
        Some((r, o, self.runs[r as usize].key(o)))
    }

    /// Resolves a lane through forwarding runs, rewriting it to point at its run.
    fn resolve(&mut self, s: usize, eh: u64, lane: Lane) -> (u32, u32) {
        let (mut r, mut o) = (lane.run, lane.off);
        while o >= self.runs[r as usize].len && self.runs[r as usize].tail != NONE {
            o -= self.runs[r as usize].len;
            r = self.runs[r as usize].tail;
        }
        if r != lane.run {
            self.runs[r as usize].refs += 1;
            self.lanes[s].map.set(eh, Lane { run: r, off: o });
            self.drop_ref(lane.run);
        }
        (r, o)
    }

    /// Drops one reference to run `r`'s record, freeing the record when none is left and
    /// the run is unlinked (its keys freed); a freed record drops its own forwarding link.
    fn drop_ref(&mut self, r: u32) {
        self.drop_refs(r, 1);
    }

    /// Drops `n >= 1` references to run `r`'s record at once, as `n` calls of
    /// [`drop_ref`](Self::drop_ref) would.
    fn drop_refs(&mut self, r: u32, n: u32) {
        let (mut r, mut n) = (r, n);
        loop {
            let run = &mut self.runs[r as usize];
            run.refs -= n;
            if run.refs > 0 || !run.keys.is_null() {
                return;
            }
            match self.free_record(r) {
                NONE => return,
                tail => (r, n) = (tail, 1),
            }
        }
    }

    /// Puts the record of an unlinked run nobody refers to on the free list; returns the
    /// run it forwarded to (whose reference the caller drops), or [`NONE`].
    fn free_record(&mut self, r: u32) -> u32 {
        let run = &mut self.runs[r as usize];
        debug_assert!(run.keys.is_null() && run.refs == 0 && run.members.is_empty());
        // Not on the dirty list: only `publish` unlinks, after taking the run off it.
        debug_assert!(!run.dirty, "a freed record is still to be published");
        let tail = core::mem::replace(&mut run.tail, NONE);
        run.members = Vec::new();
        run.anchors = Vec::new();
        self.free.push(r);
        tail
    }

    /// Records that run `n` starts after position `(r, o)`.
    fn anchor(&mut self, n: u32, r: u32, o: u32) {
        let anchors = &mut self.runs[r as usize].anchors;
        match anchors.binary_search_by_key(&o, |a| a.0) {
            Ok(i) => anchors[i].1 += 1,
            Err(i) => anchors.insert(i, (o, 1)),
        }
        self.runs[r as usize].refs += 1;
        self.runs[n as usize].anchor = (r, o);
    }

    /// Resolves a position through forwarding runs (without rewriting anything).
    fn forward(&self, mut r: u32, mut o: u32) -> (u32, u32) {
        while o >= self.runs[r as usize].len && self.runs[r as usize].tail != NONE {
            o -= self.runs[r as usize].len;
            r = self.runs[r as usize].tail;
        }
        (r, o)
    }

    fn mark(&mut self, r: u32) {
        let run = &mut self.runs[r as usize];
        if !run.dirty {
            run.dirty = true;
            self.dirty.push(r);
        }
    }

    fn new_run(&mut self, key: u64, cap_hint: usize) -> u32 {
        let (keys, cap) = alloc_keys(cap_hint.clamp(1, 1 << 16));
        // SAFETY: a fresh buffer of `cap >= 1` keys.
        unsafe { keys.write(key) };
        let run = Run {
            keys,
            cap,
            hw: 1,
            len: 1,
            ..Run::vacant()
        };
        let r = match self.free.pop() {
            Some(r) => {
                self.runs[r as usize] = run;
                r
            }
            None => {
                self.runs.push(run);
                (self.runs.len() - 1) as u32
            }
        };
        self.positions += 1;
        self.mark(r);
        r
    }

    /// Appends `key` at the end of run `r` (the caller checked it may).
    fn append(&mut self, r: u32, key: u64) -> u32 {
        self.reserve(r, 1);
        let run = &mut self.runs[r as usize];
        let o = run.len;
        // SAFETY: `reserve` left `o == hw < cap`: a position no view shows yet.
        unsafe { run.keys.add(o as usize).write(key) };
        run.hw += 1;
        run.len += 1;
        self.positions += 1;
        self.mark(r);
        o
    }

    /// Makes room for `extra` appends to run `r`: afterwards `hw == len` and
    /// `cap >= len + extra`. A new buffer marks the run dirty: its view must be rebuilt
    /// on the new buffer before `publish` retires the old one, even if the caller then
    /// appends nothing.
    fn reserve(&mut self, r: u32, extra: usize) {
        let run = &mut self.runs[r as usize];
        let need = run.len as usize + extra;
        if need > run.cap as usize || run.hw != run.len {
            // Grow (or leave positions a split left behind): a new buffer; the old one is
            // freed once the readers that may see it through the current view are gone.
            let (keys, cap) = alloc_keys(need.max(run.len as usize * 2).max(8));
            // SAFETY: `len <= hw` keys of the old buffer are written; the new one has room.
            unsafe { core::ptr::copy_nonoverlapping(run.keys, keys, run.len as usize) };
            // The current view still points into the old buffer: it is handed to the
            // collector only after `publish` has replaced that view.
            self.retired_keys.push((run.keys as usize, run.cap));
            run.keys = keys;
            run.cap = cap;
            run.hw = run.len;
            self.mark(r);
        }
    }

    /// Whether worker `s` may append after the last position of run `r` without looking
    /// the new keys up: no run starts after that position, the run was never split, and no
    /// other member holds it to its end (it would become a partial holder).
    fn appendable(&self, r: u32, s: u32) -> bool {
        let run = &self.runs[r as usize];
        run.tail == NONE
            && run
                .anchors
                .binary_search_by_key(&(run.len - 1), |a| a.0)
                .is_err()
            && !run
                .members
                .iter()
                .any(|(m, c)| *m != s && c.cutoff() == run.len)
    }

    /// Where a stored `key` goes, given its parent's position (one block; the stretches
    /// of `store` handle the common cases faster).
    fn place(
        &mut self,
        cx: &Ctx<'_>,
        s: u32,
        prev: Option<(u32, u32)>,
        key: u64,
        hint: usize,
    ) -> (u32, u32) {
        if let Some((r, o)) = prev {
            let run = &self.runs[r as usize];
            if o + 1 < run.len && run.key(o + 1) == key {
                return (r, o + 1);
            }
            if o + 1 == run.len && self.appendable(r, s) {
                // No run starts after `(r, o)`, so `key` is not indexed anywhere.
                let o = self.append(r, key);
                return (r, o);
            }
        }
        if let Some(v) = cx.heads.find(key, cx.guard) {
            // The head table files a first key of 0 under a stand-in that is itself a
            // valid key: the run found must start with `key` itself, or the block would be
            // credited to a run holding another one. Otherwise `key` gets a run of its own,
            // which the publication leaves out of the table (a duplicate head).
            if self.runs[v.run as usize].key(0) == key {
                return (v.run, 0);
            }
        }
        let n = self.new_run(key, hint);
        if let Some((r, o)) = prev {
            self.anchor(n, r, o);
            self.runs[n as usize].depth = self.runs[r as usize].depth + o + 1;
        }
        (n, 0)
    }

    /// Stores `blocks` (engine hash, chained key) for worker `s` after the block at
    /// `parent` (a position from [`key_of`](Self::key_of), or none).
    pub(crate) fn store(
        &mut self,
        cx: &Ctx<'_>,
        s: usize,
        parent: Option<(u32, u32)>,
        blocks: impl ExactSizeIterator<Item = (EngineHash, u64)>,
        out: &mut StoreOutcome,
        conflicts: &mut u64,
    ) {
        let slot = s as u32;
        let mut buf = core::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend(blocks.map(|(e, k)| (e.0, k)));
        for &(eh, _) in buf.iter().take(32) {
            self.lanes[s].map.prefetch(eh);
        }
        let mut prev = parent;
        let n = buf.len();
        let l = &mut self.lanes[s];
        l.clock = l.clock.wrapping_add(n as u32);
        self.stamp = l.clock;
        let mut i = 0;
        while i < n {
            let (eh, key) = buf[i];
            if let Some(lane) = self.lanes[s].map.get(eh) {
                let (r, o) = self.resolve(s, eh, lane);
                if self.runs[r as usize].key(o) == key {
                    let stamp = self.stamp;
                    self.runs[r as usize].member_or_insert(slot).stamp = stamp;
                    let c = self.lanes[s].copies.entry(eh).or_insert(0);
                    *c = c.saturating_add(1).min(u16::MAX - 1);
                    out.extra_copies += 1;
                    prev = Some((r, o));
                    i += 1;
                    continue;
                }
                // Same engine hash, other content: the engine's latest word wins.
                self.release(s, eh);
                out.conflicts += 1;
                *conflicts += 1;
            }
            let (r, o) = self.place(cx, slot, prev, key, n - i);
            self.hold(s, r, o, eh, key);
            out.new_blocks += 1;
            prev = Some((r, o));
            i += 1;
            // Then as many of the following blocks as continue in `r` (existing positions
            // or appends), with engine hashes the worker has not mapped yet.
            let mut j = i;
            let run = &self.runs[r as usize];
            let mut at = o + 1;
            while j < n && at < run.len && run.key(at) == buf[j].1 {
                j += 1;
                at += 1;
            }
            let appending = j == i && at == run.len && i < n && self.appendable(r, slot);
            if appending {
                j = n;
                self.reserve(r, n - i);
            }
            // Map the engine hashes first, stopping at one the worker has mapped already
            // (a copy or a conflict: the next round takes it one block at a time).
            let k = i + self.lanes[s]
                .map
                .insert_new_stretch(&buf[i..j], Lane { run: r, off: o + 1 });
            if k > i {
                if appending {
                    self.append_all(r, &buf[i..k]);
                }
                self.hold_range(s, r, o + 1, &buf[i..k], appending);
            }
            out.new_blocks += k - i;
            if k > i {
                prev = Some((r, o + (k - i) as u32));
            }
            i = k;
        }
        self.scratch = buf;
    }

    /// Appends the keys of `blocks` to run `r` (room reserved by the caller).
    fn append_all(&mut self, r: u32, blocks: &[(u64, u64)]) {
        self.reserve(r, blocks.len());
        let run = &mut self.runs[r as usize];
        for (i, &(_, key)) in blocks.iter().enumerate() {
            // SAFETY: `reserve` left `hw == len` and room for `blocks.len()` more keys, at
            // positions no view shows yet.
            unsafe { run.keys.add(run.len as usize + i).write(key) };
        }
        run.len += blocks.len() as u32;
        run.hw = run.len;
        self.positions += blocks.len() as u64;
        self.mark(r);
    }

    /// Worker `s` takes the positions `from..from + blocks.len()` of run `r` (keys of
    /// `blocks`; their lanes are mapped already). `fresh`: positions just appended, which
    /// nobody held.
    fn hold_range(&mut self, s: usize, r: u32, from: u32, blocks: &[(u64, u64)], fresh: bool) {
        let n = blocks.len() as u32;
        let stamp = self.stamp;
        let run = &mut self.runs[r as usize];
        run.refs += n;
        let c = run.member_or_insert(s as u32);
        c.stamp = stamp;
        if fresh || !c.intersects(from, from + n) {
            c.insert_range(from, from + n);
            self.residencies += u64::from(n);
        } else {
            for (i, &(_, key)) in blocks.iter().enumerate() {
                if c.insert(from + i as u32) {
                    self.residencies += 1;
                } else {
                    self.add_alias(s, r, from + i as u32, key);
                    // `c` borrows the run: look it up again for the next position.
                    return self.hold_rest(s, r, from + i as u32 + 1, &blocks[i + 1..]);
                }
            }
        }
        self.mark(r);
    }

    /// The rest of a [`hold_range`](Self::hold_range) after an alias, one position at a
    /// time.
    fn hold_rest(&mut self, s: usize, r: u32, from: u32, blocks: &[(u64, u64)]) {
        for (i, &(_, key)) in blocks.iter().enumerate() {
            let c = self.runs[r as usize].member_or_insert(s as u32);
            if c.insert(from + i as u32) {
                self.residencies += 1;
            } else {
                self.add_alias(s, r, from + i as u32, key);
            }
        }
        self.mark(r);
    }

    /// Worker `s` holds position `(r, o)` (key `key`) under one more engine hash.
    fn add_alias(&mut self, s: usize, r: u32, o: u32, key: u64) {
        let found = self.lanes[s].aliases.get(&key).and_then(|list| {
            list.iter()
                .position(|a| self.forward(a.run, a.off) == (r, o))
        });
        match found {
            Some(i) => self.lanes[s].aliases.get_mut(&key).expect("listed")[i].extra += 1,
            None => {
                self.runs[r as usize].refs += 1;
                self.lanes[s].aliases.entry(key).or_default().push(Alias {
                    run: r,
                    off: o,
                    extra: 1,
                });
            }
        }
    }

    /// Drops one extra engine hash of worker `s` at position `(r, o)` (key `key`), if it
    /// has one there; returns whether it did.
    fn drop_alias(&mut self, s: usize, r: u32, o: u32, key: u64) -> bool {
        let Some(list) = self.lanes[s].aliases.get(&key) else {
            return false;
        };
        let Some(i) = list
            .iter()
            .position(|a| self.forward(a.run, a.off) == (r, o))
        else {
            return false;
        };
        let list = self.lanes[s].aliases.get_mut(&key).expect("listed");
        list[i].extra -= 1;
        if list[i].extra == 0 {
            let a = list.swap_remove(i);
            if list.is_empty() {
                self.lanes[s].aliases.remove(&key);
            }
            self.drop_ref(a.run);
        }
        true
    }

    /// Worker `s` takes position `(r, o)` (key `key`) under engine hash `eh`.
    #[inline]
    fn hold(&mut self, s: usize, r: u32, o: u32, eh: u64, key: u64) {
        let stamp = self.stamp;
        let run = &mut self.runs[r as usize];
        run.refs += 1;
        let c = run.member_or_insert(s as u32);
        c.stamp = stamp;
        if c.insert(o) {
            self.residencies += 1;
            self.mark(r);
        } else {
            self.add_alias(s, r, o, key);
        }
        self.lanes[s].map.insert(eh, Lane { run: r, off: o });
    }

    /// Drops engine hash `eh` of worker `s` entirely (every copy). Returns false when the
    /// worker has no such hash.
    fn release(&mut self, s: usize, eh: u64) -> bool {
        match self.unmap(s, eh) {
            None => false,
            Some((r, o, aliased)) => {
                if !aliased {
                    self.uncover(s, r, o, o + 1);
                }
                true
            }
        }
    }

    /// Unmaps engine hash `eh` of worker `s` (every copy) and drops its lane's reference:
    /// the position it held, and whether another engine hash of the worker still holds
    /// that position (an alias, whose count this drops instead). The caller then
    /// [`uncover`](Self::uncover)s the position unless it was aliased.
    fn unmap(&mut self, s: usize, eh: u64) -> Option<(u32, u32, bool)> {
        let lane = self.lanes[s].map.remove(eh)?;
        let l = &mut self.lanes[s];
        if !l.copies.is_empty() {
            l.copies.remove(&eh);
        }
        let (r, o) = self.forward(lane.run, lane.off);
        let aliased = !self.lanes[s].aliases.is_empty() && {
            let key = self.runs[r as usize].key(o);
            self.drop_alias(s, r, o, key)
        };
        // `r` holds a position of the worker's (or an alias), so it is not freed here.
        self.drop_ref(lane.run);
        Some((r, o, aliased))
    }

    /// Worker `s` stops holding the positions `a..b` of run `r` (all held, by engine hashes
    /// already unmapped).
    fn uncover(&mut self, s: usize, r: u32, a: u32, b: u32) {
        let run = &mut self.runs[r as usize];
        let slot = s as u32;
        if let Ok(i) = run.members.binary_search_by_key(&slot, |m| m.0) {
            let c = &mut run.members[i].1;
            c.remove_range(a, b);
            if c.is_empty() {
                run.members.remove(i);
            }
        }
        self.residencies -= u64::from(b - a);
        self.mark(r);
    }

    /// Keeps worker `s` within `cap` engine hashes: when it holds more, evicts the excess
    /// and 1/16 of `cap` more: among the twice as many least recently stored (by the
    /// worker's stamp on each run), the deepest first (ties: least recently stored), as
    /// engines evict leaf-first. Returns how many it evicted.
    pub(crate) fn enforce_cap(&mut self, s: usize, cap: usize) -> usize {
        let len = self.lanes[s].map.len();
        if len <= cap {
            return 0;
        }
        let n = (len - cap + (cap / 16).max(1)).min(len);
        let clock = self.lanes[s].clock;
        let slot = s as u32;
        let mut cold: Vec<(u32, core::cmp::Reverse<u32>, u64)> = self.lanes[s]
            .map
            .keys()
            .map(|eh| {
                let lane = self.lanes[s].map.get(eh).expect("listed");
                let (r, o) = self.forward(lane.run, lane.off);
                let run = &self.runs[r as usize];
                let stamp = run
                    .members
                    .binary_search_by_key(&slot, |m| m.0)
                    .map_or(clock, |i| run.members[i].1.stamp);
                // Age: how many stamps ago (wrapping clock).
                (
                    clock.wrapping_sub(stamp),
                    core::cmp::Reverse(run.depth + o),
                    eh,
                )
            })
            .collect();
        let pool = (2 * n).min(cold.len());
        // Oldest first: the largest ages.
        cold.select_nth_unstable_by_key(pool - 1, |c| core::cmp::Reverse(c.0));
        cold.truncate(pool);
        cold.sort_unstable_by_key(|c| (c.1, core::cmp::Reverse(c.0)));
        for &(_, _, eh) in cold.iter().take(n) {
            self.release(s, eh);
        }
        n
    }

    /// Applies a removal of `hashes` for worker `s`.
    ///
    /// Consecutive positions of one run (an engine removing a stretch it stored together,
    /// in either order) leave the worker's cover in one update.
    pub(crate) fn remove(&mut self, s: usize, hashes: &[EngineHash], out: &mut RemoveOutcome) {
        let l = &self.lanes[s];
        if l.copies.is_empty() && l.aliases.is_empty() {
            return self.remove_plain(s, hashes, out);
        }
        let mut u = Unapplied::default();
        for (i, eh) in hashes.iter().enumerate() {
            if let Some(next) = hashes.get(i + REMOVE_AHEAD) {
                self.lanes[s].map.prefetch(next.0);
            }
            let copies = &mut self.lanes[s].copies;
            if let Some(c) = (!copies.is_empty())
                .then(|| copies.get_mut(&eh.0))
                .flatten()
            {
                *c -= 1;
                if *c == 0 {
                    self.lanes[s].copies.remove(&eh.0);
                }
                out.copies_dropped += 1;
                continue;
            }
            // `unmap` inline, its reference counted in `u`: the hash has no copies beyond
            // this one (checked above).
            let Some(lane) = self.lanes[s].map.take(eh.0) else {
                out.unknown += 1;
                continue;
            };
            let (r, o) = self.forward(lane.run, lane.off);
            let aliased = !self.lanes[s].aliases.is_empty() && {
                let key = self.runs[r as usize].key(o);
                self.drop_alias(s, r, o, key)
            };
            self.note_ref(&mut u, lane.run);
            out.removed += 1;
            if !aliased {
                self.note_position(s, &mut u, r, o);
            }
        }
        self.apply(s, u);
    }

    /// [`remove`](Self::remove) for a worker with no copies and no aliases (the common
    /// case): each hash is one position of its own, so the loop only unmaps, merges the
    /// positions into ranges of one run to uncover, and counts the references to drop.
    fn remove_plain(&mut self, s: usize, hashes: &[EngineHash], out: &mut RemoveOutcome) {
        /// Lanes taken from the map per round before their positions are merged.
        const ROUND: usize = 128;
        let mut u = Unapplied::default();
        let mut taken = [Lane::default(); ROUND];
        for chunk in hashes.chunks(ROUND) {
            // Unmap a round of hashes (the map alone is borrowed: a tight loop).
            let mut got = 0;
            self.lanes[s].map.take_each(chunk, |lane| {
                taken[got] = lane;
                got += 1;
            });
            out.unknown += chunk.len() - got;
            out.removed += got;
            // Then merge their positions into ranges and their references into counts.
            for &lane in &taken[..got] {
                self.note_ref(&mut u, lane.run);
                let (r, o) = self.forward(lane.run, lane.off);
                self.note_position(s, &mut u, r, o);
            }
        }
        self.apply(s, u);
    }

    /// Counts one reference of a removed lane to record `r` in `u`, dropping the counted
    /// ones of another record first.
    #[inline]
    fn note_ref(&mut self, u: &mut Unapplied, r: u32) {
        if u.refs.0 == r {
            u.refs.1 += 1;
        } else {
            if u.refs.1 > 0 {
                self.drop_refs(u.refs.0, u.refs.1);
            }
            u.refs = (r, 1);
        }
    }

    /// Adds position `(r, o)` that worker `s` no longer holds to `u`'s range, uncovering
    /// the range first when the position does not extend it (either way).
    #[inline]
    fn note_position(&mut self, s: usize, u: &mut Unapplied, r: u32, o: u32) {
        u.pending = match u.pending {
            Some((pr, a, b)) if pr == r && o == b => Some((pr, a, b + 1)),
            Some((pr, a, b)) if pr == r && o + 1 == a => Some((pr, o, b)),
            other => {
                if let Some((pr, a, b)) = other {
                    self.uncover(s, pr, a, b);
                }
                Some((r, o, o + 1))
            }
        };
    }

    /// Applies what `u` still holds at the end of a removal for worker `s`, then lets the
    /// worker's lane map shrink if it is sparse.
    fn apply(&mut self, s: usize, u: Unapplied) {
        if u.refs.1 > 0 {
            self.drop_refs(u.refs.0, u.refs.1);
        }
        if let Some((r, a, b)) = u.pending {
            self.uncover(s, r, a, b);
        }
        self.lanes[s].map.shrink_if_sparse();
    }

    /// Drops everything worker `s` holds; returns how many engine hashes it had. Its lane
    /// map keeps its reservation (`reserve_lanes`) unless `forget` (the worker leaves its
    /// slot).
    pub(crate) fn clear(&mut self, s: usize, forget: bool) -> usize {
        let hashes: Vec<u64> = self.lanes[s].map.keys().collect();
        for eh in &hashes {
            self.release(s, *eh);
        }
        debug_assert!(self.lanes[s].aliases.is_empty());
        let reserved = self.lanes[s].map.reserved();
        self.lanes[s] = Lanes::default();
        if !forget && reserved > 0 {
            self.lanes[s].map.reserve(reserved);
        }
        hashes.len()
    }

    /// Sizes worker `s`'s lane map for `entries` engine hashes (`LaneMap::reserve`).
    pub(crate) fn reserve_lanes(&mut self, s: usize, entries: usize) {
        self.lanes[s].map.reserve(entries);
    }

    /// Engine hashes worker `s` has indexed.
    pub(crate) fn worker_blocks(&self, s: usize) -> usize {
        self.lanes[s].map.len()
    }

    /// Engine hashes of worker `s` with their copy counts.
    pub(crate) fn engine_hashes(&self, s: usize) -> Vec<(EngineHash, u32)> {
        let l = &self.lanes[s];
        l.map
            .keys()
            .map(|h| (EngineHash(h), u32::from(l.copies(h))))
            .collect()
    }

    /// Publishes the views of every run this call changed (splitting runs whose partial
    /// list is too long), and unlinks runs without members.
    pub(crate) fn publish(&mut self, cx: &Ctx<'_>) {
        while let Some(r) = self.dirty.pop() {
            self.runs[r as usize].dirty = false;
            let run = &self.runs[r as usize];
            if run.members.is_empty() && run.anchors.is_empty() {
                self.unlink(cx, r);
                continue;
            }
            self.collect_view(r);
            if self.partials.len() > MAX_PARTIALS {
                let k = self.partials.iter().map(|p| p.1).min().expect("partials");
                self.split(r, k);
                // Both parts were marked dirty and are published by this loop.
                continue;
            }
            let run = &self.runs[r as usize];
            let v = ViewHead::build(run.keys, r, run.len, &self.full, &self.partials);
            let key = run.key(0);
            let was_linked = run.linked();
            match cx.heads.set(&mut self.heads, key, v) {
                Ok(old) => {
                    self.runs[r as usize].view = v;
                    if !was_linked {
                        self.linked += 1;
                    }
                    self.retire_view(old);
                }
                Err(Taken) => {
                    // Another run starts with the same key: input that broke the chain
                    // property (see `RunIndex::store_hashes`). This run stays unlinked:
                    // readers do not see it (the index under-states, never over-states,
                    // what its workers hold), and its memory stays accounted for.
                    // SAFETY: `v` was never published; freed once, here.
                    unsafe { ViewHead::free(v) };
                    if was_linked {
                        // Cannot happen: a linked run owns its slot. Keep the gauge true.
                        self.linked -= 1;
                    }
                    let run = &mut self.runs[r as usize];
                    run.view = core::ptr::null_mut();
                    // Counted once per run, not once per publication of it.
                    if !run.left_out {
                        run.left_out = true;
                        self.duplicate_heads += 1;
                    }
                }
            }
        }
        // Every view that pointed into a replaced buffer is replaced now.
        for (p, cap) in core::mem::take(&mut self.retired_keys) {
            self.retire(Garbage::Keys(p as *mut u64, cap), cap as usize * 8);
        }
        for (a, bytes) in core::mem::take(&mut self.heads.retired) {
            self.retire(Garbage::Array(a), bytes);
        }
        if self.linked == 0 && self.free.len() == self.runs.len() {
            // Nothing is indexed and no record is in use: give back the arena and the
            // scratch, so an emptied index holds only its fixed allocations.
            self.release_arena();
        }
        self.seal(cx);
    }

    /// Frees the run arena and the writer's scratch buffers (every record vacant).
    fn release_arena(&mut self) {
        debug_assert!(self.runs.iter().all(|r| r.keys.is_null() && r.refs == 0));
        self.runs = Vec::new();
        self.free = Vec::new();
        self.scratch = Vec::new();
        self.dirty = Vec::new();
        self.full = Vec::new();
        self.partials = Vec::new();
    }

    /// Adds `item` (`bytes` of heap) to the event's garbage.
    fn retire(&mut self, item: Garbage, bytes: usize) {
        if !matches!(item, Garbage::View(_)) {
            self.freed = true;
        }
        self.garbage.push(item);
        self.garbage_bytes += bytes;
    }

    /// Hands the event's garbage to the epoch collector as one deferred function, counted
    /// in `deferred` until it has run.
    fn seal(&mut self, cx: &Ctx<'_>) {
        if self.garbage.is_empty() {
            return;
        }
        let items = core::mem::take(&mut self.garbage);
        #[cfg(kvroute_loom)]
        {
            // No collector to model: park the garbage until teardown (see `epoch`).
            let _ = cx;
            self.garbage_bytes = 0;
            self.parked.extend(items);
        }
        #[cfg(not(kvroute_loom))]
        self.defer(cx, items);
    }

    /// Hands `items` to the epoch collector as one deferred function.
    #[cfg(not(kvroute_loom))]
    fn defer(&mut self, cx: &Ctx<'_>, items: Vec<Garbage>) {
        let bytes = core::mem::replace(&mut self.garbage_bytes, 0)
            + core::mem::size_of::<Batch>()
            + items.capacity() * core::mem::size_of::<Garbage>();
        self.deferred.add(bytes);
        let batch = Box::new(Batch {
            items,
            bytes,
            deferred: Arc::clone(&self.deferred),
        });
        let p = Box::into_raw(batch) as usize;
        // SAFETY: every item is unreachable for new readers (unlinked or replaced above);
        // readers pinned now are done before the collector runs this; it runs once.
        unsafe {
            cx.guard
                .defer_unchecked(move || Box::from_raw(p as *mut Batch).free())
        };
    }

    /// Whether the events since the last call freed a key buffer or a head-table array
    /// (the caller then drains the collector), and resets it.
    pub(crate) fn take_freed(&mut self) -> bool {
        core::mem::replace(&mut self.freed, false)
    }

    /// Fills the scratch coverage of run `r` from its members.
    fn collect_view(&mut self, r: u32) {
        self.full.clear();
        self.full.resize(self.words, 0);
        self.partials.clear();
        let run = &self.runs[r as usize];
        for (slot, c) in &run.members {
            let cut = c.cutoff();
            if cut == run.len {
                self.full[*slot as usize / 64] |= 1 << (slot % 64);
            } else if cut > 0 {
                self.partials.push((*slot, cut));
            }
        }
    }

    fn retire_view(&mut self, v: *mut ViewHead) {
        if v.is_null() {
            return;
        }
        // SAFETY: `v` is a view of this writer, just replaced or unlinked.
        let bytes = unsafe { (*v).bytes() };
        self.retire(Garbage::View(v), bytes);
    }

    /// Unlinks run `r` (no members left) and frees its keys; the record stays while
    /// something refers to it.
    fn unlink(&mut self, cx: &Ctx<'_>, r: u32) {
        let run = &mut self.runs[r as usize];
        let (keys, cap, len) = (run.keys, run.cap, run.len);
        let key = run.key(0);
        let was_linked = run.linked();
        run.view = core::ptr::null_mut();
        run.keys = core::ptr::null_mut();
        run.cap = 0;
        run.hw = 0;
        // `len` stays: lanes forwarded through this record still need it.
        self.positions -= u64::from(len);
        if was_linked {
            let old = cx.heads.unlink(&mut self.heads, key, r);
            self.retire_view(old);
            self.linked -= 1;
        }
        // The run's view is unlinked (or was never published): no new reader reaches it.
        self.retire(Garbage::Keys(keys, cap), cap as usize * 8);
        let (a, ao) = core::mem::replace(&mut self.runs[r as usize].anchor, (NONE, 0));
        if a != NONE {
            // No longer a run after its parent: the parent may go too.
            let (p, o) = self.forward(a, ao);
            let anchors = &mut self.runs[p as usize].anchors;
            let i = anchors
                .binary_search_by_key(&o, |a| a.0)
                .expect("anchor recorded");
            anchors[i].1 -= 1;
            if anchors[i].1 == 0 {
                anchors.remove(i);
            }
            // Views do not show anchors: only a parent left with neither members nor
            // anchors changes (it is unlinked).
            let parent = &self.runs[p as usize];
            if parent.anchors.is_empty() && parent.members.is_empty() {
                self.mark(p);
            }
            self.drop_ref(a);
        }
        if self.runs[r as usize].refs == 0 {
            // No lane and no forwarding run refers to it: free the record now.
            let tail = self.free_record(r);
            if tail != NONE {
                self.drop_ref(tail);
            }
        }
    }

    /// Splits run `r` at offset `k` (`0 < k < len`): `r` keeps `[0, k)`, a new run takes
    /// `[k, len)` and the lanes past `k` forward to it.
    fn split(&mut self, r: u32, k: u32) {
        let (tail_keys, n, old_tail) = {
            let run = &self.runs[r as usize];
            debug_assert!(0 < k && k < run.len);
            let n = run.len - k;
            let (keys, cap) = alloc_keys(n as usize);
            // SAFETY: positions `k..len` are written (`len <= hw`); the new buffer has
            // room for `n`.
            unsafe { core::ptr::copy_nonoverlapping(run.keys.add(k as usize), keys, n as usize) };
            ((keys, cap), n, run.tail)
        };
        let t = match self.free.pop() {
            Some(t) => t,
            None => {
                self.runs.push(Run::vacant());
                (self.runs.len() - 1) as u32
            }
        };
        self.splits += 1;
        let mut members = Vec::new();
        let mut tail_anchors;
        {
            let run = &mut self.runs[r as usize];
            let at = run.anchors.partition_point(|a| a.0 < k);
            tail_anchors = run.anchors.split_off(at);
            for a in &mut tail_anchors {
                a.0 -= k;
            }
            run.members.retain_mut(|(slot, c)| {
                let tail = c.split_off(k);
                if !tail.is_empty() {
                    members.push((*slot, tail));
                }
                !c.is_empty()
            });
            run.len = k;
            run.tail = t;
        }
        self.runs[t as usize] = Run {
            keys: tail_keys.0,
            cap: tail_keys.1,
            hw: n,
            len: n,
            tail: old_tail,
            // The forwarding link from `r`.
            refs: 1,
            members,
            anchors: tail_anchors,
            ..Run::vacant()
        };
        // The tail starts after the head's new last position.
        self.anchor(t, r, k - 1);
        self.runs[t as usize].depth = self.runs[r as usize].depth + k;
        // `dirty` is a stack: the tail is published first, so a reader that sees the
        // shortened head finds it.
        self.mark(r);
        self.mark(t);
    }

    /// Checks the writer's invariants (for tests): every published view points into its
    /// run's current key buffer and shows the run's length; the residency gauge equals the
    /// covers' total; every lane resolves to a position its worker holds, with that
    /// position's key; every held position has a lane or an alias count.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (r, run) in self.runs.iter().enumerate().filter(|(_, run)| run.linked()) {
            // SAFETY: a linked run's view is live until the writer replaces it, and only
            // the writer (`&self`) replaces views.
            let (keys, len) = unsafe { &*run.view }.keys_raw();
            if keys != run.keys.cast_const() || len != run.len {
                return Err(format!(
                    "run {r}: its view shows {len} keys at {keys:p}, the run has {} at {:p}",
                    run.len, run.keys
                ));
            }
        }
        let total: u64 = self
            .runs
            .iter()
            .flat_map(|r| r.members.iter())
            .map(|m| u64::from(m.1.count()))
            .sum();
        if total != self.residencies {
            return Err(format!("covers hold {total}, gauge {}", self.residencies));
        }
        for (s, l) in self.lanes.iter().enumerate() {
            let mut held: HashMap<(u32, u32), u32> = HashMap::new();
            for eh in l.map.keys() {
                let lane = l.map.get(eh).expect("listed");
                let (mut r, mut o) = (lane.run, lane.off);
                while o >= self.runs[r as usize].len && self.runs[r as usize].tail != NONE {
                    o -= self.runs[r as usize].len;
                    r = self.runs[r as usize].tail;
                }
                let run = &self.runs[r as usize];
                if run.keys.is_null() || o >= run.len {
                    return Err(format!("worker {s}: lane {eh} resolves to a dead run {r}"));
                }
                let holds = run
                    .members
                    .iter()
                    .any(|(m, c)| *m as usize == s && c.contains(o));
                if !holds {
                    return Err(format!("worker {s}: lane {eh} at ({r}, {o}) not held"));
                }
                *held.entry((r, o)).or_insert(0) += 1;
            }
            let positions = held.len() as u64;
            let extra: u64 = held.values().map(|&n| u64::from(n - 1)).sum();
            let aliases: u64 = l
                .aliases
                .values()
                .flatten()
                .map(|a| u64::from(a.extra))
                .sum();
            if extra != aliases {
                return Err(format!(
                    "worker {s}: {extra} extra lanes, {aliases} aliases"
                ));
            }
            let covered: u64 = self
                .runs
                .iter()
                .flat_map(|r| r.members.iter())
                .filter(|m| m.0 as usize == s)
                .map(|m| u64::from(m.1.count()))
                .sum();
            if covered != positions {
                return Err(format!("worker {s}: covers {covered}, lanes {positions}"));
            }
        }
        Ok(())
    }

    /// Positions of linked runs that at least one worker holds (distinct blocks held:
    /// every key has one position); `O(intervals)`, for the gauges.
    pub(crate) fn held_positions(&self) -> u64 {
        let mut iv: Vec<(u32, u32)> = Vec::new();
        let mut total = 0u64;
        for run in self.runs.iter().filter(|r| r.linked()) {
            iv.clear();
            for (_, c) in &run.members {
                iv.extend_from_slice(c.intervals());
            }
            iv.sort_unstable();
            let mut end = 0u32;
            for &(a, b) in &iv {
                let a = a.max(end);
                if b > a {
                    total += u64::from(b - a);
                    end = b;
                }
            }
        }
        total
    }

    /// Heap bytes the writer owns (arena, key buffers, covers, lanes), views included.
    pub(crate) fn heap_bytes(&self) -> usize {
        let mut b = self.runs.capacity() * core::mem::size_of::<Run>()
            + self.free.capacity() * 4
            + self.lanes.capacity() * core::mem::size_of::<Lanes>();
        for run in &self.runs {
            b += run.cap as usize * 8;
            b += run.members.capacity() * core::mem::size_of::<(u32, Cover)>();
            b += run.members.iter().map(|m| m.1.heap_bytes()).sum::<usize>();
            b += run.anchors.capacity() * 8;
            if run.linked() {
                // SAFETY: a linked view of this writer.
                b += unsafe { (*run.view).bytes() };
            }
        }
        for l in &self.lanes {
            b += l.map.heap_bytes()
                + l.copies.allocation_size()
                + l.aliases.allocation_size()
                + l.aliases
                    .values()
                    .map(|v| v.capacity() * core::mem::size_of::<Alias>())
                    .sum::<usize>();
        }
        b += self.scratch.capacity() * core::mem::size_of::<(u64, u64)>()
            + self.dirty.capacity() * 4
            + self.retired_keys.capacity() * core::mem::size_of::<(usize, u32)>()
            + self.full.capacity() * 8
            + self.partials.capacity() * core::mem::size_of::<Partial>()
            + self.garbage.capacity() * core::mem::size_of::<Garbage>()
            + self.heads.retired.capacity() * core::mem::size_of::<(usize, usize)>();
        b
    }

    /// Gives back spare capacity of the lane maps.
    pub(crate) fn trim(&mut self) {
        for l in &mut self.lanes {
            l.map.trim();
            l.copies.shrink_to_fit();
            l.aliases.shrink_to_fit();
        }
        self.scratch = Vec::new();
        self.dirty = Vec::new();
        self.retired_keys = Vec::new();
        self.heads.retired = Vec::new();
        if self.linked == 0 && self.free.len() == self.runs.len() {
            self.release_arena();
        } else {
            self.runs.shrink_to_fit();
            self.free.shrink_to_fit();
        }
    }

    /// Frees every key buffer, view and retired array (teardown: no reader is left).
    pub(crate) fn free_all(&mut self) {
        for (p, cap) in self.retired_keys.drain(..) {
            // SAFETY: teardown; a replaced buffer no view uses, freed once.
            unsafe { free_keys(p as *mut u64, cap) };
        }
        for (a, _) in self.heads.retired.drain(..) {
            // SAFETY: teardown; a replaced array, freed once.
            unsafe { free_array(a) };
        }
        #[cfg(kvroute_loom)]
        self.garbage.append(&mut self.parked);
        for g in self.garbage.drain(..) {
            // SAFETY: teardown: unsealed garbage, freed once.
            unsafe {
                match g {
                    Garbage::Keys(p, cap) => free_keys(p, cap),
                    Garbage::View(v) => ViewHead::free(v),
                    Garbage::Array(a) => free_array(a),
                }
            }
        }
        for run in &mut self.runs {
            if !run.keys.is_null() {
                // SAFETY: teardown with exclusive access; each buffer is freed once.
                unsafe { free_keys(run.keys, run.cap) };
                run.keys = core::ptr::null_mut();
            }
            if run.linked() {
                // SAFETY: as above, for the run's published view.
                unsafe { ViewHead::free(run.view) };
                run.view = core::ptr::null_mut();
            }
        }
    }
}
