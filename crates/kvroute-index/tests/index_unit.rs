//! Hand-computed scenarios of the prefix index's contract, one behaviour per test: the
//! duplicate-store / two-removes sequence a real vLLM engine emits
//! (`docs/WIRE-FORMAT.md`), unknown removes and unknown parents counted without changing
//! the index, rejected events (block-size and token-count mismatches, slots out of range)
//! counted and harmless, chained stores through parents equal to one store of the whole
//! sequence, LoRA / cache-salt namespaces kept apart, non-prefix-closed residency, aliases,
//! conflicting re-stores, least-recently-stored eviction, word-boundary slots and slot
//! reuse.
//!
//! Every expected value is worked out by hand in the test (block counts, overlaps, counters);
//! chained hashes of queries come from `BlockHasher`, which `hash_vectors` checks against
//! the published vectors.

use kvroute_core::EngineHash;
use kvroute_core::{HashNamespace, SequenceHash, Slot};
use kvroute_index::BlockHasher;
use kvroute_index::index::{
    BlockStore, IndexConfig, IndexError, IndexStats, Overlaps, PrefixIndex, RemoveOutcome,
    StoreOutcome,
};

const BS: usize = 4;

fn index(worker_slots: usize) -> PrefixIndex {
    index_with_cap(worker_slots, 1 << 20)
}

fn index_with_cap(worker_slots: usize, cap: usize) -> PrefixIndex {
    PrefixIndex::new({
        let mut c = IndexConfig::default();
        c.worker_slots = worker_slots;
        c.block_size = BS;
        c.expected_blocks = 1024;
        c.max_blocks_per_worker = cap;
        c
    })
    .unwrap()
}

/// `n` blocks of distinct token ids, starting at token `first`.
fn tokens(first: u32, n: usize) -> Vec<u32> {
    (first..first + (n * BS) as u32).collect()
}

fn seqs(tokens: &[u32]) -> Vec<SequenceHash> {
    seqs_in(tokens, HashNamespace::DEFAULT)
}

fn seqs_in(tokens: &[u32], ns: HashNamespace) -> Vec<SequenceHash> {
    let mut out = Vec::new();
    BlockHasher::new(BS, ns).sequence_hashes_into(tokens, None, &mut out);
    out
}

fn ehs(v: &[u64]) -> Vec<EngineHash> {
    v.iter().map(|&h| EngineHash(h)).collect()
}

fn ev<'a>(parent: Option<u64>, hashes: &'a [EngineHash], tokens: &'a [u32]) -> BlockStore<'a> {
    BlockStore {
        parent: parent.map(EngineHash),
        block_hashes: hashes,
        token_ids: tokens,
        block_size: BS,
        namespace: HashNamespace::DEFAULT,
    }
}

fn overlaps(idx: &PrefixIndex, q: &[SequenceHash]) -> Overlaps {
    let mut out = idx.new_overlaps();
    idx.match_prefix(q, &mut out);
    out
}

fn store_out(
    new_blocks: usize,
    extra_copies: usize,
    conflicts: usize,
    evicted: usize,
) -> StoreOutcome {
    StoreOutcome {
        new_blocks,
        extra_copies,
        conflicts,
        evicted,
    }
}

fn remove_out(removed: usize, copies_dropped: usize, unknown: usize) -> RemoveOutcome {
    RemoveOutcome {
        removed,
        copies_dropped,
        unknown,
    }
}

/// `docs/WIRE-FORMAT.md`: a fully cached prompt of whole blocks makes vLLM recompute its last block
/// into a second physical copy and emit a second `BlockStored` (same hash, same parent);
/// each copy gets its own `BlockRemoved`. The block is served until the second remove.
#[test]
fn duplicate_store_keeps_the_block_until_its_second_remove() {
    let idx = index(4);
    let w = Slot(1);
    let t = tokens(100, 3);
    let q = seqs(&t);
    let h = ehs(&[0xa1, 0xa2, 0xa3]);
    assert_eq!(idx.store(w, &ev(None, &h, &t)), Ok(store_out(3, 0, 0, 0)));
    // The recomputed last block: parent 0xa2, hash 0xa3, the last block's tokens.
    assert_eq!(
        idx.store(w, &ev(Some(0xa2), &h[2..], &t[2 * BS..])),
        Ok(store_out(0, 1, 0, 0))
    );
    assert_eq!(overlaps(&idx, &q).get(w), 3);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (3, 3));
    assert_eq!(idx.worker_blocks(w), 3);

    assert_eq!(idx.remove(w, &h[2..]), Ok(remove_out(0, 1, 0)));
    assert_eq!(
        overlaps(&idx, &q).get(w),
        3,
        "one copy left: still resident"
    );
    assert_eq!(idx.stats().residencies, 3);

    assert_eq!(idx.remove(w, &h[2..]), Ok(remove_out(1, 0, 0)));
    assert_eq!(overlaps(&idx, &q).get(w), 2, "last copy gone");
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (2, 2));
    assert_eq!(idx.worker_blocks(w), 2);

    assert_eq!(idx.remove(w, &h[2..]), Ok(remove_out(0, 0, 1)));
    assert_eq!(idx.stats().unknown_removes, 1);
}

/// `engine_hashes` lists what the worker's engine reported, copies included: 0xa1..0xa3
/// once, 0xa3 stored a second time (2 copies), then one copy of 0xa3 and all of 0xa1
/// removed: {0xa2: 1, 0xa3: 1}. Other slots and slots out of range list nothing.
#[test]
fn engine_hashes_list_each_reported_hash_with_its_copies() {
    let idx = index(4);
    let w = Slot(2);
    let t = tokens(300, 3);
    let h = ehs(&[0xa1, 0xa2, 0xa3]);
    idx.store(w, &ev(None, &h, &t)).unwrap();
    idx.store(w, &ev(Some(0xa2), &h[2..], &t[2 * BS..]))
        .unwrap();
    let sorted = |mut v: Vec<(EngineHash, u32)>| {
        v.sort_unstable();
        v
    };
    assert_eq!(
        sorted(idx.engine_hashes(w)),
        vec![(h[0], 1), (h[1], 1), (h[2], 2)]
    );
    idx.remove(w, &[h[2], h[0]]).unwrap();
    assert_eq!(sorted(idx.engine_hashes(w)), vec![(h[1], 1), (h[2], 1)]);
    assert!(idx.engine_hashes(Slot(0)).is_empty());
    assert!(idx.engine_hashes(Slot(4)).is_empty());
    idx.clear(w).unwrap();
    assert!(idx.engine_hashes(w).is_empty());
}

#[test]
fn unknown_removes_are_counted_and_harmless() {
    let idx = index(4);
    let t = tokens(0, 2);
    let q = seqs(&t);
    idx.store(Slot(0), &ev(None, &ehs(&[1, 2]), &t)).unwrap();
    // Slot 1 never stored 1 or 2: the maps are per worker.
    assert_eq!(
        idx.remove(Slot(1), &ehs(&[1, 2, 2])),
        Ok(remove_out(0, 0, 3))
    );
    // Slot 0: 9 is unknown, 2 is removed, then 2 again is unknown.
    assert_eq!(
        idx.remove(Slot(0), &ehs(&[9, 2, 2])),
        Ok(remove_out(1, 0, 2))
    );
    let s = idx.stats();
    assert_eq!(s.unknown_removes, 5);
    assert_eq!((s.nodes, s.residencies), (1, 1));
    assert_eq!(overlaps(&idx, &q).to_vec(), &[1, 0, 0, 0]);
}

/// Everything `stats()` reports except `heap_bytes` and the named counter.
fn stats_except(s: IndexStats, field: &str) -> IndexStats {
    let mut s = s;
    s.heap_bytes = 0;
    match field {
        "unknown_parent_stores" => s.unknown_parent_stores = 0,
        "block_size_mismatches" => s.block_size_mismatches = 0,
        "token_count_mismatches" => s.token_count_mismatches = 0,
        "slot_out_of_range" => s.slot_out_of_range = 0,
        _ => unreachable!(),
    }
    s
}

/// A store whose parent the worker does not hold is rejected, counted, and changes nothing.
#[test]
fn unknown_parent_is_an_error_that_changes_nothing() {
    let idx = index(4);
    let t = tokens(0, 4);
    let q = seqs(&t);
    idx.store(Slot(0), &ev(None, &ehs(&[1, 2]), &t[..2 * BS]))
        .unwrap();
    idx.store(Slot(1), &ev(None, &ehs(&[5]), &t[..BS])).unwrap();
    let before = idx.stats();
    let tail = ehs(&[3, 4]);
    // 99: nobody's hash; 5: slot 1's hash, not slot 0's.
    for parent in [99, 5] {
        assert_eq!(
            idx.store(Slot(0), &ev(Some(parent), &tail, &t[2 * BS..])),
            Err(IndexError::UnknownParent {
                parent: EngineHash(parent),
                blocks: 2
            })
        );
    }
    // A removed parent is unknown too.
    idx.remove(Slot(1), &ehs(&[5])).unwrap();
    assert_eq!(
        idx.store(Slot(1), &ev(Some(5), &tail, &t[2 * BS..])),
        Err(IndexError::UnknownParent {
            parent: EngineHash(5),
            blocks: 2
        })
    );
    let after = idx.stats();
    assert_eq!(after.unknown_parent_stores, 3);
    let mut expect = before;
    expect.nodes = 2; // slot 1's removal above, not the rejected stores, dropped nothing
    expect.residencies = 2;
    assert_eq!(
        stats_except(after, "unknown_parent_stores"),
        stats_except(expect, "unknown_parent_stores")
    );
    assert_eq!(overlaps(&idx, &q).to_vec(), &[2, 0, 0, 0]);
    assert_eq!(
        (idx.worker_blocks(Slot(0)), idx.worker_blocks(Slot(1))),
        (2, 0)
    );
    // The rejected engine hashes were not indexed: removing them is unknown.
    assert_eq!(idx.remove(Slot(0), &tail), Ok(remove_out(0, 0, 2)));
}

#[test]
fn block_size_mismatch_is_an_error_that_changes_nothing() {
    let idx = index(4);
    let t = tokens(0, 2);
    idx.store(Slot(0), &ev(None, &ehs(&[1]), &t[..BS])).unwrap();
    let before = idx.stats();
    let h = ehs(&[2]);
    let bad = BlockStore {
        parent: Some(EngineHash(1)),
        block_hashes: &h,
        token_ids: &t[..BS + 1],
        block_size: BS + 1,
        namespace: HashNamespace::DEFAULT,
    };
    assert_eq!(
        idx.store(Slot(0), &bad),
        Err(IndexError::BlockSizeMismatch {
            expected: BS,
            got: BS + 1
        })
    );
    let after = idx.stats();
    assert_eq!(after.block_size_mismatches, 1);
    assert_eq!(
        stats_except(after, "block_size_mismatches"),
        stats_except(before, "block_size_mismatches")
    );
    assert_eq!(overlaps(&idx, &seqs(&t)).get(Slot(0)), 1);
    assert_eq!(idx.worker_blocks(Slot(0)), 1);
}

#[test]
fn token_count_mismatch_is_an_error_that_changes_nothing() {
    let idx = index(4);
    let t = tokens(0, 3);
    idx.store(Slot(0), &ev(None, &ehs(&[1]), &t[..BS])).unwrap();
    let before = idx.stats();
    let h = ehs(&[2, 3]);
    // Two hashes need 8 tokens: 7 and 12 are both wrong.
    for n in [2 * BS - 1, 3 * BS] {
        assert_eq!(
            idx.store(Slot(0), &ev(Some(1), &h, &t[..n])),
            Err(IndexError::TokenCountMismatch {
                blocks: 2,
                block_size: BS,
                tokens: n
            })
        );
    }
    let after = idx.stats();
    assert_eq!(after.token_count_mismatches, 2);
    assert_eq!(
        stats_except(after, "token_count_mismatches"),
        stats_except(before, "token_count_mismatches")
    );
    assert_eq!(overlaps(&idx, &seqs(&t)).get(Slot(0)), 1);
    assert_eq!(idx.remove(Slot(0), &h), Ok(remove_out(0, 0, 2)));
}

#[test]
fn slots_out_of_range_are_errors_everywhere() {
    let idx = index(8);
    let t = tokens(0, 1);
    let q = seqs(&t);
    idx.store(Slot(7), &ev(None, &ehs(&[1]), &t)).unwrap();
    let before = idx.stats();
    for slot in [Slot(8), Slot(64), Slot(u32::MAX)] {
        let err: Result<(), IndexError> = Err(IndexError::SlotOutOfRange {
            slot,
            worker_slots: 8,
        });
        assert_eq!(
            idx.store(slot, &ev(None, &ehs(&[1]), &t)),
            err.clone().map(|()| store_out(0, 0, 0, 0))
        );
        assert_eq!(
            idx.store_hashes(slot, &[(EngineHash(1), q[0])]),
            err.clone().map(|()| store_out(0, 0, 0, 0))
        );
        assert_eq!(
            idx.remove(slot, &ehs(&[1])),
            err.clone().map(|()| remove_out(0, 0, 0))
        );
        assert_eq!(idx.clear(slot), err.clone().map(|()| 0));
        assert_eq!(idx.remove_worker(slot), err.map(|()| 0));
    }
    let after = idx.stats();
    assert_eq!(after.slot_out_of_range, 15);
    assert_eq!(
        stats_except(after, "slot_out_of_range"),
        stats_except(before, "slot_out_of_range")
    );
    let o = overlaps(&idx, &q);
    assert_eq!(o.to_vec(), &[0, 0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(o.get(Slot(8)), 0);
}

/// Storing a sequence in pieces linked by parents indexes exactly the chained hashes of the
/// whole sequence: the same nodes as one store of everything.
#[test]
fn chained_stores_equal_one_store_of_the_whole_sequence() {
    let idx = index(4);
    let t = tokens(1000, 5);
    let q = seqs(&t);
    assert_eq!(q.len(), 5);
    // Slot 0: one event of 5 blocks.
    idx.store(Slot(0), &ev(None, &ehs(&[10, 11, 12, 13, 14]), &t))
        .unwrap();
    // Slot 1: 2 blocks, then 1 chained on block 1, then 2 chained on block 2.
    idx.store(Slot(1), &ev(None, &ehs(&[20, 21]), &t[..2 * BS]))
        .unwrap();
    idx.store(Slot(1), &ev(Some(21), &ehs(&[22]), &t[2 * BS..3 * BS]))
        .unwrap();
    idx.store(Slot(1), &ev(Some(22), &ehs(&[23, 24]), &t[3 * BS..]))
        .unwrap();
    // Slot 2: the last two blocks chained on the *first* block: different content, so
    // they are other nodes; slot 2 matches 1 block.
    idx.store(Slot(2), &ev(None, &ehs(&[30]), &t[..BS]))
        .unwrap();
    idx.store(Slot(2), &ev(Some(30), &ehs(&[33, 34]), &t[3 * BS..]))
        .unwrap();

    assert_eq!(overlaps(&idx, &q).to_vec(), &[5, 5, 1, 0]);
    assert_eq!(overlaps(&idx, &q[..3]).to_vec(), &[3, 3, 1, 0]);
    assert_eq!(overlaps(&idx, &q).deepest(), 5);
    // 5 shared nodes + slot 2's two off-chain nodes; 5 + 5 + 3 residencies.
    let s = idx.stats();
    assert_eq!((s.nodes, s.residencies), (7, 13));
    // A request that diverges in block 3 matches 3 blocks on slots 0 and 1.
    let mut other = t.clone();
    other[3 * BS] += 1;
    assert_eq!(overlaps(&idx, &seqs(&other)).to_vec(), &[3, 3, 1, 0]);
}

/// The same tokens under a LoRA adapter or a cache salt are other blocks.
#[test]
fn namespaces_keep_identical_tokens_apart() {
    let idx = index(4);
    let t = tokens(7, 3);
    let namespaces = [
        HashNamespace::DEFAULT,
        HashNamespace::new(Some("adapter-a"), None),
        HashNamespace::new(Some("adapter-b"), None),
        HashNamespace::new(None, Some("salt")),
    ];
    for (slot, ns) in namespaces.iter().enumerate() {
        let h = ehs(&[1, 2, 3]);
        let e = BlockStore {
            parent: None,
            block_hashes: &h,
            token_ids: &t,
            block_size: BS,
            namespace: *ns,
        };
        idx.store(Slot(slot as u32), &e).unwrap();
    }
    for (slot, ns) in namespaces.iter().enumerate() {
        let mut want = [0u32; 4];
        want[slot] = 3;
        assert_eq!(
            overlaps(&idx, &seqs_in(&t, *ns)).to_vec(),
            &want,
            "namespace of slot {slot}"
        );
    }
    let s = idx.stats();
    assert_eq!((s.nodes, s.residencies), (12, 12), "no node is shared");
}

/// A worker that lost block 3 but kept block 4 matches 3 blocks; one that lost block 0
/// matches none.
#[test]
fn residency_that_is_not_prefix_closed_matches_up_to_the_first_gap() {
    let idx = index(130);
    let q = seqs(&tokens(0, 5));
    let pairs = |blocks: &[usize]| -> Vec<(EngineHash, SequenceHash)> {
        blocks
            .iter()
            .map(|&b| (EngineHash(b as u64 + 1), q[b]))
            .collect()
    };
    idx.store_hashes(Slot(0), &pairs(&[0, 1, 2, 4])).unwrap();
    idx.store_hashes(Slot(64), &pairs(&[1, 2, 3, 4])).unwrap();
    idx.store_hashes(Slot(129), &pairs(&[4, 0, 2, 1, 3]))
        .unwrap();
    let o = overlaps(&idx, &q);
    assert_eq!(
        (o.get(Slot(0)), o.get(Slot(64)), o.get(Slot(129))),
        (3, 0, 5)
    );
    assert_eq!(o.to_vec().iter().map(|&x| x as u64).sum::<u64>(), 8);
    assert_eq!(o.deepest(), 5);
    // Slot 129 loses block 1: matches 1.
    idx.remove(Slot(129), &[EngineHash(2)]).unwrap();
    assert_eq!(overlaps(&idx, &q).get(Slot(129)), 1);
}

/// Two engine hashes of one worker for the same content: the block is one residency and
/// stays until both hashes are removed.
#[test]
fn aliases_keep_the_block_until_the_last_engine_hash_goes() {
    let idx = index(4);
    let t = tokens(0, 2);
    let q = seqs(&t);
    idx.store(Slot(0), &ev(None, &ehs(&[1, 2]), &t)).unwrap();
    // Same content as engine hash 2, under 3.
    assert_eq!(
        idx.store(Slot(0), &ev(Some(1), &ehs(&[3]), &t[BS..])),
        Ok(store_out(1, 0, 0, 0))
    );
    assert_eq!(idx.worker_blocks(Slot(0)), 3);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (2, 2));
    assert_eq!(idx.remove(Slot(0), &ehs(&[2])), Ok(remove_out(1, 0, 0)));
    assert_eq!(
        overlaps(&idx, &q).get(Slot(0)),
        2,
        "still held under hash 3"
    );
    assert_eq!(idx.stats().residencies, 2);
    assert_eq!(idx.remove(Slot(0), &ehs(&[3])), Ok(remove_out(1, 0, 0)));
    assert_eq!(overlaps(&idx, &q).get(Slot(0)), 1);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (1, 1));
}

/// An engine hash re-stored with other content: the newest mapping wins and the old block
/// (all its copies) stops being held.
#[test]
fn conflicting_restore_replaces_the_old_content() {
    let idx = index(4);
    let a = tokens(0, 1);
    let b = tokens(500, 1);
    let (qa, qb) = (seqs(&a), seqs(&b));
    let h = ehs(&[7]);
    idx.store(Slot(2), &ev(None, &h, &a)).unwrap();
    idx.store(Slot(2), &ev(None, &h, &a)).unwrap(); // two copies of A
    assert_eq!(
        idx.store(Slot(2), &ev(None, &h, &b)),
        Ok(store_out(1, 0, 1, 0))
    );
    assert_eq!(overlaps(&idx, &qa).get(Slot(2)), 0);
    assert_eq!(overlaps(&idx, &qb).get(Slot(2)), 1);
    let s = idx.stats();
    assert_eq!((s.nodes, s.residencies, s.hash_conflicts), (1, 1, 1));
    // B has one copy: one remove ends it.
    assert_eq!(idx.remove(Slot(2), &h), Ok(remove_out(1, 0, 0)));
    assert_eq!(idx.stats().nodes, 0);
}

/// Cap 4 evicts max(4 / 16, 1) = 1 block per overflow: of the 2 least recently *stored*
/// blocks, the deeper one (re-storing refreshes, matching does not), and only the storing
/// worker's.
#[test]
fn eviction_drops_the_deeper_of_the_least_recently_stored_blocks_of_that_worker() {
    let idx = index_with_cap(4, 4);
    let t = tokens(0, 6);
    let q = seqs(&t);
    let pairs: Vec<(EngineHash, SequenceHash)> =
        (0..6).map(|i| (EngineHash(i as u64 + 1), q[i])).collect();
    // Slot 0 stores blocks 0..4 (hashes 1..=4, depths 0..=3, stamps 1..=4); slot 1 holds
    // block 1 too.
    idx.store_hashes(Slot(0), &pairs[..4]).unwrap();
    idx.store_hashes(Slot(1), &pairs[1..2]).unwrap();
    // Refresh block 0 (a copy: stamp 5), and match (which must not refresh anything).
    assert_eq!(
        idx.store_hashes(Slot(0), &pairs[..1]),
        Ok(store_out(0, 1, 0, 0))
    );
    assert_eq!(overlaps(&idx, &q).to_vec(), &[4, 0, 0, 0]);
    // Hash 5 overflows. The two coldest are hash 2 (stamp 2, depth 1) and hash 3 (stamp 3,
    // depth 2): the deeper, hash 3, goes.
    assert_eq!(
        idx.store_hashes(Slot(0), &pairs[4..5]),
        Ok(store_out(1, 0, 0, 1))
    );
    assert_eq!(idx.worker_blocks(Slot(0)), 4);
    assert_eq!(idx.stats().evicted_blocks, 1);
    assert_eq!(idx.remove(Slot(0), &ehs(&[3])), Ok(remove_out(0, 0, 1)));
    let o = overlaps(&idx, &q);
    assert_eq!(o.get(Slot(0)), 2, "block 2 evicted from slot 0");
    assert_eq!(
        overlaps(&idx, &q[1..]).get(Slot(1)),
        1,
        "slot 1 keeps block 1"
    );
    // Slot 0 holds hashes 1 (stamp 5), 2 (stamp 2, depth 1), 4 (stamp 4, depth 3), 5 (stamp
    // 6). Hash 6 overflows: the two coldest are hashes 2 and 4; hash 4 is deeper.
    assert_eq!(
        idx.store_hashes(Slot(0), &pairs[5..6]),
        Ok(store_out(1, 0, 0, 1))
    );
    assert_eq!(idx.remove(Slot(0), &ehs(&[4])), Ok(remove_out(0, 0, 1)));
    // Hash 1 has two copies: this remove drops one of them.
    assert_eq!(
        idx.remove(Slot(0), &ehs(&[1, 2, 5, 6])),
        Ok(remove_out(3, 1, 0))
    );
    assert_eq!(idx.stats().evicted_blocks, 2);
}

/// A shared first block stored once, then many one-block turns stored with it as parent,
/// past the cap: the shared block is the coldest of all, but every turn is deeper, so the
/// turns are evicted and the worker keeps matching the shared block.
#[test]
fn eviction_keeps_a_shared_prefix_stored_long_ago() {
    let idx = index_with_cap(1, 64);
    let root_tokens = tokens(0, 1);
    let root = seqs(&root_tokens)[0];
    idx.store_hashes(Slot(0), &[(EngineHash(1), root)]).unwrap();
    for turn in 0..200u32 {
        let turn_tokens = tokens(1000 + turn * 7, 1);
        let bs = BlockStore {
            parent: Some(EngineHash(1)),
            block_hashes: &[EngineHash(100 + u64::from(turn))],
            token_ids: &turn_tokens,
            block_size: BS,
            namespace: HashNamespace::DEFAULT,
        };
        idx.store(Slot(0), &bs).unwrap();
        assert!(idx.worker_blocks(Slot(0)) <= 64);
        assert_eq!(
            overlaps(&idx, &[root]).get(Slot(0)),
            1,
            "the shared block survives turn {turn}"
        );
    }
    assert!(idx.stats().evicted_blocks > 0);
}

/// Cap 32 evicts 32 / 16 = 2 blocks per overflow; the cap holds for a run far longer
/// than it.
#[test]
fn eviction_takes_a_sixteenth_of_the_cap_and_the_cap_always_holds() {
    let idx = index_with_cap(2, 32);
    let q = seqs(&tokens(0, 100));
    for (i, h) in q.iter().enumerate() {
        let out = idx
            .store_hashes(Slot(1), &[(EngineHash(i as u64), *h)])
            .unwrap();
        // Blocks 0..32 fit; block 32 evicts 0 and 1 (31 left after), block 33 fits
        // (32), block 34 evicts 2 and 3, ...: every even block from 32 on evicts 2.
        let want = usize::from(i >= 32 && i % 2 == 0) * 2;
        assert_eq!(out.evicted, want, "block {i}");
        assert!(idx.worker_blocks(Slot(1)) <= 32);
    }
    // 100 stored, 34 evictions of 2.
    assert_eq!(idx.stats().evicted_blocks, 68);
    assert_eq!(idx.worker_blocks(Slot(1)), 32);
    // The survivors are blocks 68..100: the 32 most recently stored.
    assert_eq!(
        idx.remove(Slot(1), &(0..100).map(EngineHash).collect::<Vec<_>>()),
        Ok(remove_out(32, 0, 68))
    );
}

#[test]
fn slots_on_word_boundaries_report_their_own_overlap() {
    let idx = index(1024);
    let q = seqs(&tokens(0, 8));
    let slots = [0u32, 63, 64, 127, 128, 1023];
    for (i, &s) in slots.iter().enumerate() {
        // Slot number i holds the first i + 1 blocks.
        let pairs: Vec<_> = (0..=i).map(|b| (EngineHash(b as u64), q[b])).collect();
        idx.store_hashes(Slot(s), &pairs).unwrap();
    }
    let o = overlaps(&idx, &q);
    for (i, &s) in slots.iter().enumerate() {
        assert_eq!(o.get(Slot(s)), i as u32 + 1, "slot {s}");
    }
    assert_eq!(o.to_vec().iter().filter(|&&x| x > 0).count(), 6);
    assert_eq!(o.deepest(), 6);
    assert_eq!(idx.stats().residencies, 21);
    assert_eq!(idx.clear(Slot(1023)), Ok(6));
    assert_eq!(idx.clear(Slot(64)), Ok(3));
    let o = overlaps(&idx, &q);
    assert_eq!(
        slots.map(|s| o.get(Slot(s))),
        [1, 2, 0, 4, 5, 0],
        "clearing one slot leaves its word neighbours alone"
    );
    assert_eq!(o.deepest(), 5);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (5, 12));
}

/// After `remove_worker`, the slot's next tenant inherits no residency and no engine hash.
#[test]
fn remove_worker_leaves_nothing_for_the_next_tenant() {
    let idx = index(70);
    let t = tokens(0, 2);
    let q = seqs(&t);
    let w = Slot(65);
    idx.store(w, &ev(None, &ehs(&[1, 2]), &t)).unwrap();
    idx.store(w, &ev(Some(1), &ehs(&[2]), &t[BS..])).unwrap();
    assert_eq!(idx.remove_worker(w), Ok(2));
    assert_eq!(overlaps(&idx, &q).get(w), 0);
    assert_eq!(idx.worker_blocks(w), 0);
    // The new tenant reuses engine hash values: they mean nothing yet.
    assert_eq!(idx.remove(w, &ehs(&[2])), Ok(remove_out(0, 0, 1)));
    assert!(matches!(
        idx.store(w, &ev(Some(1), &ehs(&[2]), &t[BS..])),
        Err(IndexError::UnknownParent { .. })
    ));
    assert_eq!(
        idx.store(w, &ev(None, &ehs(&[2]), &t[..BS])),
        Ok(store_out(1, 0, 0, 0))
    );
    assert_eq!(overlaps(&idx, &q).get(w), 1);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (1, 1));
}

/// `clear` reports engine hashes (aliases included) and leaves nothing behind.
#[test]
fn clear_counts_engine_hashes_and_empties_the_worker() {
    let idx = index(4);
    let t = tokens(0, 2);
    let q = seqs(&t);
    idx.store(Slot(3), &ev(None, &ehs(&[1, 2]), &t)).unwrap();
    idx.store(Slot(3), &ev(None, &ehs(&[9]), &t[..BS])).unwrap(); // alias of 1
    idx.store(Slot(3), &ev(None, &ehs(&[1]), &t[..BS])).unwrap(); // copy of 1
    idx.store(Slot(0), &ev(None, &ehs(&[1]), &t[..BS])).unwrap();
    assert_eq!(idx.clear(Slot(3)), Ok(3));
    assert_eq!(overlaps(&idx, &q).to_vec(), &[1, 0, 0, 0]);
    assert_eq!((idx.stats().nodes, idx.stats().residencies), (1, 1));
    assert_eq!(idx.worker_blocks(Slot(3)), 0);
    assert_eq!(idx.clear(Slot(3)), Ok(0));
    assert_eq!(
        idx.remove(Slot(3), &ehs(&[1, 2, 9])),
        Ok(remove_out(0, 0, 3))
    );
}

/// One `Overlaps` reused across indexes of different sizes and across queries never shows
/// a stale value.
#[test]
fn overlaps_buffer_is_resized_and_reset() {
    let small = index(3);
    let big = index(200);
    let q = seqs(&tokens(0, 3));
    let pairs: Vec<_> = (0..3).map(|b| (EngineHash(b as u64), q[b])).collect();
    small.store_hashes(Slot(2), &pairs).unwrap();
    big.store_hashes(Slot(199), &pairs[..2]).unwrap();
    let mut out = Overlaps::default();
    small.match_prefix(&q, &mut out);
    assert_eq!(out.to_vec(), &[0, 0, 3]);
    big.match_prefix(&q, &mut out);
    assert_eq!(out.to_vec().len(), 200);
    assert_eq!(out.get(Slot(2)), 0);
    assert_eq!(out.get(Slot(199)), 2);
    assert_eq!(out.deepest(), 2);
    // A query is just a list of hashes: slot 199 holds q[1] (but not q[2]).
    big.match_prefix(&q[1..], &mut out);
    assert_eq!(out.get(Slot(199)), 1);
    assert_eq!(out.to_vec().iter().filter(|&&x| x > 0).count(), 1);
    big.match_prefix(&seqs(&tokens(999, 2)), &mut out);
    assert!(
        out.to_vec().iter().all(|&x| x == 0),
        "unknown blocks: nobody matches"
    );
    assert_eq!(out.deepest(), 0);
    big.match_prefix(&q, &mut out);
    big.match_prefix(&[], &mut out);
    assert!(out.to_vec().iter().all(|&x| x == 0));
    small.match_prefix(&q[..1], &mut out);
    assert_eq!(out.to_vec(), &[0, 0, 1]);
}
