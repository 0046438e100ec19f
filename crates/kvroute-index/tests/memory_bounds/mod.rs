//! Memory stays bounded, and equal to the index's `heap_bytes` gauge, while the per-worker
//! cap evicts and while clears and worker removals come and go (cases of `index_memory`).
//!
//! # What the gauge may differ by, and why
//! `heap_bytes` counts every allocation of the index: nodes (linked, retired but still held
//! by a successor link, or waiting for the grace period), the garbage records and replaced
//! arrays waiting in the epoch collector, the node table, the gates, the per-worker state
//! and maps. What the allocator counts besides is the collector's own bookkeeping: the
//! queue of sealed garbage bags. A sealed bag is one queue node of crossbeam-epoch 0.9:
//! 64 deferred functions of 4 words each, the bag's length, its epoch and the queue link,
//! `(64 * 4 + 3) * 8 = 2,072` bytes. Each event hands the collector one function (its
//! batch) and its writer drains it before returning, so in these single-threaded cases at
//! most two such nodes are live at a checkpoint: the one the queue alternates by (see the
//! module docs of `index_memory`) and the one sealed by the last drain round. That is the
//! tolerance, [`TOLERANCE`]; nothing else.

use kvroute_core::{EngineHash, SequenceHash, Slot};
use kvroute_index::index::{IndexConfig, PrefixIndex};

use crate::{live, settled_minimum};

/// One sealed garbage bag of crossbeam-epoch's queue (see the module docs).
const SEALED_BAG: isize = (64 * 4 + 3) * 8;
/// Allowed difference between live bytes and the gauge: two sealed bags.
const TOLERANCE: isize = 2 * SEALED_BAG;
/// Bytes of one node at up to 64 worker slots: a 24-byte head and one bit word.
const NODE_BYTES: usize = 32;

/// The chained hash of block `k` of a synthetic stream (distinct for distinct `k`).
fn seq(k: u64) -> SequenceHash {
    SequenceHash(k.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
}

/// Fills `buf` with the `len` blocks `first..first + len` as one chain.
fn chain(buf: &mut Vec<(EngineHash, SequenceHash)>, first: u64, len: u64) {
    buf.clear();
    buf.extend((first..first + len).map(|k| (EngineHash(k), seq(k))));
}

/// Live bytes above `baseline`, or an error when they are further than the tolerance from
/// the gauge. `when` names the checkpoint (only formatted on failure: a string made before
/// measuring would be counted).
fn gauge_matches(
    index: &PrefixIndex,
    baseline: isize,
    when: impl Fn() -> String,
) -> Result<isize, String> {
    let s = index.stats();
    let heap = live() - baseline;
    let diff = heap - s.heap_bytes as isize;
    if diff.abs() > TOLERANCE {
        return Err(format!(
            "{}: live heap of the index {heap} bytes, gauge {} bytes ({} nodes, {} \
             evicted): {diff} bytes apart, tolerance {TOLERANCE}",
            when(),
            s.heap_bytes,
            s.nodes,
            s.evicted_blocks
        ));
    }
    Ok(heap)
}

/// Heap bytes of a hashbrown map with room for `n` entries of an engine hash and an entry
/// (8 + 16 bytes), as the worker's map of engine hashes.
fn map_bytes(n: usize) -> usize {
    hashbrown::HashMap::<u64, [u64; 2]>::with_capacity(n).allocation_size()
}

/// One worker of a 64-slot index with a cap of `C = 16,384` blocks stores 16 C distinct
/// blocks in chains of `len` (one store event per chain), so the cap evicts 15 C of them.
/// At every C/4 blocks stored:
///
/// * live bytes above the level before the index was built equal the gauge (within
///   [`TOLERANCE`]);
/// * they stay below a bound computed by hand from the cap: the empty index, plus at most
///   2 C nodes (C linked, and at most one retired node per linked node kept by its
///   successor link: one writer, so the race that allows a second cannot happen; nothing
///   waits for the grace period once the event's writer has drained it), plus the
///   worker's map at its largest: hashbrown doubles only when more than half its room
///   holds live entries, so with at most C entries it never has room for more than 4 C + 4.
///   The node table never grows: 16,384 expected blocks already size it for C.
pub(crate) fn eviction(len: u64) -> Result<(), String> {
    const C: usize = 16_384;
    let total = 16 * C as u64;
    let mut buf = Vec::with_capacity(len as usize);
    let mut c = IndexConfig::new(64, 16);
    c.max_blocks_per_worker = C;
    let baseline = settled_minimum();
    let index = PrefixIndex::new(c).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    let bound = empty + (2 * C * NODE_BYTES + map_bytes(4 * C + 4)) as isize;
    let mut k = 0u64;
    let mut next_check = C as u64 / 4;
    let mut highest = 0;
    while k < total {
        chain(&mut buf, k, len);
        index.store_hashes(Slot(0), &buf).unwrap();
        k += len;
        if k >= next_check {
            next_check += C as u64 / 4;
            let heap = gauge_matches(&index, baseline, || format!("after {k} blocks"))?;
            highest = highest.max(heap);
            if heap > bound {
                return Err(format!(
                    "after {k} blocks ({} evicted): live heap of the index {heap} bytes, \
                     above the bound of {bound} bytes",
                    index.stats().evicted_blocks
                ));
            }
        }
    }
    // The stream overfills the cap by a multiple of C/16, so the last store ends at the cap.
    let s = index.stats();
    let evicted = total - C as u64;
    if (s.nodes, s.evicted_blocks) != (C as u64, evicted) {
        return Err(format!(
            "{} nodes, {} evicted (want {C} and {evicted})",
            s.nodes, s.evicted_blocks
        ));
    }
    println!("  highest live heap {highest} bytes, bound {bound}, empty {empty}");
    Ok(())
}

/// 300 rounds of "store 8,192 blocks (64 chains of 128), clear": after each clear, with no
/// `collect_garbage`, live bytes are back at the empty index's (within [`TOLERANCE`]) and
/// the gauge says so; dropping the index then gives back everything it allocated.
pub(crate) fn store_and_clear_cycles() -> Result<(), String> {
    let mut buf = Vec::with_capacity(128);
    let baseline = settled_minimum();
    let index = PrefixIndex::new(IndexConfig::new(64, 16)).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    for round in 0..300u64 {
        for c in 0..64 {
            chain(&mut buf, (round * 64 + c) * 128, 128);
            index.store_hashes(Slot(0), &buf).unwrap();
        }
        index.clear(Slot(0)).unwrap();
        let heap = gauge_matches(&index, baseline, || format!("round {round}"))?;
        if (heap - empty).abs() > TOLERANCE {
            return Err(format!(
                "round {round}: live heap of the index {heap} bytes, the empty index's \
                 {empty} (gauge {} bytes, {} nodes)",
                index.stats().heap_bytes,
                index.stats().nodes
            ));
        }
    }
    drop(index);
    let left = live() - baseline;
    if left.abs() > TOLERANCE {
        return Err(format!(
            "{left} bytes still live after the index was dropped"
        ));
    }
    Ok(())
}

/// 2,000 rounds of "a worker stores 1,024 blocks (8 chains of 128), is removed", over the
/// 64 slots in turn: after each removal, with no `collect_garbage`, live bytes are back at
/// the empty index's (within [`TOLERANCE`]).
pub(crate) fn worker_churn() -> Result<(), String> {
    let mut buf = Vec::with_capacity(128);
    let baseline = settled_minimum();
    let index = PrefixIndex::new(IndexConfig::new(64, 16)).unwrap();
    let empty = gauge_matches(&index, baseline, || "empty".into())?;
    for round in 0..2_000u64 {
        let slot = Slot((round % 64) as u32);
        for c in 0..8 {
            chain(&mut buf, (round * 8 + c) * 128, 128);
            index.store_hashes(slot, &buf).unwrap();
        }
        index.remove_worker(slot).unwrap();
        let heap = gauge_matches(&index, baseline, || format!("round {round}"))?;
        if (heap - empty).abs() > TOLERANCE {
            return Err(format!(
                "round {round}: live heap of the index {heap} bytes, the empty index's {empty}"
            ));
        }
    }
    Ok(())
}

/// An index dropped while the garbage of its last event may still wait in the collector
/// (a thread pinned across that event holds it back) gives it all back once that thread
/// unpins: the drop drains the collector, and nothing of the index stays live.
pub(crate) fn drop_frees_deferred_garbage() -> Result<(), String> {
    let mut buf = Vec::with_capacity(4_096);
    let baseline = settled_minimum();
    let index = PrefixIndex::new(IndexConfig::new(64, 16)).unwrap();
    chain(&mut buf, 0, 4_096);
    index.store_hashes(Slot(0), &buf).unwrap();
    {
        // A guard pinned before the clear keeps its garbage from expiring.
        let _reader = crossbeam_epoch::pin();
        index.clear(Slot(0)).unwrap();
        let s = index.stats();
        if s.deferred_nodes != 4_096 {
            return Err(format!(
                "{} nodes deferred behind a pinned reader (want 4,096)",
                s.deferred_nodes
            ));
        }
        gauge_matches(&index, baseline, || "garbage held back by a reader".into())?;
    }
    drop(index);
    let left = live() - baseline;
    if left.abs() > TOLERANCE {
        return Err(format!(
            "{left} bytes still live after the index was dropped"
        ));
    }
    Ok(())
}
