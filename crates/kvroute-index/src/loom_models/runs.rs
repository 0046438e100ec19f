//! loom models of the run index's publication protocol (`runs/heads.rs`, `runs/write.rs`):
//! a reader matching while the writer appends in place, links a child run, splits a run,
//! unlinks one, and rebuilds the head table. In each, the reader must see the state before
//! the event or after it, never a part of it, and everything it reaches through the head
//! table must be fully written (each view and head array carries a loom-checked cell that
//! every reader reads, so a publication weaker than release / acquire is reported).
//!
//! Garbage is parked until the index drops in loom builds (`runs/epoch.rs`): reclamation
//! is crossbeam-epoch's and is exercised by the AddressSanitizer stress run instead.

use kvroute_core::sync::{Arc, thread};
use kvroute_core::{EngineHash, SequenceHash, Slot};

use crate::index::IndexConfig;
use crate::runs::RunIndex;

/// Chain key `k` of the models (keys are arbitrary non-zero chained hashes).
fn key(k: u64) -> SequenceHash {
    SequenceHash(0x1000 + k)
}

/// Engine hash of chain key `k`.
fn eh(k: u64) -> EngineHash {
    EngineHash(k)
}

/// Blocks `from..to` of the one chain `1, 2, 3, ...` as (engine hash, key) pairs.
fn chain(from: u64, to: u64) -> Vec<(EngineHash, SequenceHash)> {
    (from..to).map(|k| (eh(k), key(k))).collect()
}

fn index(slots: usize) -> Arc<RunIndex> {
    let mut config = IndexConfig::new(slots, 4);
    config.expected_blocks = 16;
    Arc::new(RunIndex::new(config).expect("valid config"))
}

/// Worker `slot`'s overlap of `query` now.
fn overlap(index: &RunIndex, query: &[SequenceHash], slot: usize) -> u32 {
    let mut out = index.new_overlaps();
    index.match_prefix(query, &mut out);
    out.get(kvroute_core::Slot(slot as u32))
}

/// Matches `query` on a reader thread while the main thread runs `event`, and returns the
/// overlaps the reader saw.
fn race(index: &Arc<RunIndex>, query: &[SequenceHash], event: impl FnOnce(&RunIndex)) -> Vec<u32> {
    let (i2, q) = (Arc::clone(index), query.to_vec());
    let reader = thread::spawn(move || {
        let mut out = i2.new_overlaps();
        i2.match_prefix(&q, &mut out);
        out.to_vec()
    });
    event(index);
    reader.join().unwrap()
}

/// An append in place (the run grows into its key buffer's spare room and a longer view
/// replaces the old one): the reader sees the old length or the new one.
#[test]
fn loom_match_against_an_append_in_place() {
    loom::model(|| {
        let ix = index(2);
        ix.store_hashes(Slot(0), None, &chain(1, 3)).unwrap();
        let q: Vec<_> = (1..4).map(key).collect();
        let seen = race(&ix, &q, |ix| {
            ix.store_hashes(Slot(0), Some(eh(2)), &chain(3, 4)).unwrap();
        });
        assert!(seen[0] == 2 || seen[0] == 3, "saw {}", seen[0]);
        assert_eq!(overlap(&ix, &q, 0), 3);
        assert_eq!(ix.stats().runs, 1, "the chain grew in place");
    });
}

/// A child run at an offset of another (a new head-table slot): the reader sees the
/// worker's one shared block, or the child too.
#[test]
fn loom_match_against_a_new_child_run() {
    loom::model(|| {
        let ix = index(2);
        ix.store_hashes(Slot(0), None, &chain(1, 4)).unwrap();
        ix.store_hashes(Slot(1), None, &chain(1, 2)).unwrap();
        let q = vec![key(1), key(9)];
        let seen = race(&ix, &q, |ix| {
            ix.store_hashes(Slot(1), Some(eh(1)), &[(eh(9), key(9))])
                .unwrap();
        });
        assert!(seen[1] == 1 || seen[1] == 2, "saw {}", seen[1]);
        assert_eq!(overlap(&ix, &q, 1), 2);
        assert_eq!(ix.stats().runs, 2);
    });
}

/// A split (a ninth partial holder): the reader sees every other worker's overlap
/// unchanged, and the new holder's as before or after.
#[test]
fn loom_match_against_a_split() {
    loom::model(|| {
        let ix = index(10);
        ix.store_hashes(Slot(0), None, &chain(1, 11)).unwrap();
        // Workers 1..=8 hold the first 1..=8 positions: eight partial holders.
        for w in 1..=8u64 {
            ix.store_hashes(Slot(w as u32), None, &chain(1, 1 + w))
                .unwrap();
        }
        assert_eq!(ix.stats().splits, 0);
        let q: Vec<_> = (1..11).map(key).collect();
        let seen = race(&ix, &q, |ix| {
            ix.store_hashes(Slot(9), None, &chain(1, 10)).unwrap();
        });
        assert_eq!(seen[0], 10);
        for (w, &got) in seen.iter().enumerate().take(9).skip(1) {
            assert_eq!(got, w as u32, "worker {w}");
        }
        assert!(seen[9] == 0 || seen[9] == 9, "saw {}", seen[9]);
        assert_eq!(overlap(&ix, &q, 9), 9);
        assert_eq!(
            ix.stats().splits,
            1,
            "the ninth partial holder split the run"
        );
    });
}

/// An unlink (the run's last holder removes it): the reader sees the whole run or none.
#[test]
fn loom_match_against_an_unlink() {
    loom::model(|| {
        let ix = index(2);
        ix.store_hashes(Slot(0), None, &chain(1, 3)).unwrap();
        let q: Vec<_> = (1..3).map(key).collect();
        let seen = race(&ix, &q, |ix| {
            ix.remove(Slot(0), &[eh(1), eh(2)]).unwrap();
        });
        assert!(seen[0] == 0 || seen[0] == 2, "saw {}", seen[0]);
        assert_eq!(ix.stats().runs, 0);
    });
}

/// A head-table rebuild (the seventh head of an eight-slot table moves every head to a
/// new array): the reader finds a run linked before it on either array.
#[test]
fn loom_match_against_a_head_table_rebuild() {
    loom::model(|| {
        let ix = index(2);
        for r in 0..6 {
            ix.store_hashes(Slot(0), None, &[(eh(100 + r), key(100 + r))])
                .unwrap();
        }
        let before = ix.stats().heap_bytes;
        let q = vec![key(103)];
        let seen = race(&ix, &q, |ix| {
            ix.store_hashes(Slot(0), None, &[(eh(106), key(106))])
                .unwrap();
        });
        assert_eq!(seen[0], 1);
        assert!(ix.stats().heap_bytes > before, "the head table grew");
    });
}
