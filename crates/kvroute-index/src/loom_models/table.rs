//! loom models of the node table (`index/table.rs`): inserts, unlinks, resizes and successor
//! links racing readers and each other.

use kvroute_core::sync::atomic::Ordering;
use kvroute_core::sync::{Arc, thread};

use crate::index::reclaim;
use crate::index::table::Table;

/// With mix 1, every small key has home slot 0, so keys share one probe run.
fn table() -> Arc<Table> {
    Arc::new(Table::new(1, 1, 1))
}

fn insert(t: &Table, gate: usize, key: u64) -> (usize, bool) {
    let g = reclaim::pin();
    let mut w = t.writer(gate);
    let (n, inserted) = w.acquire_or_insert(key, &g);
    (n.as_thin() as usize, inserted)
}

/// Drops one holder reference on `key`'s node, unlinking it if that retired it.
/// Returns whether it did.
fn release(t: &Table, gate: usize, key: u64) -> bool {
    let g = reclaim::pin();
    let mut w = t.writer(gate);
    let n = t.find(key, &g).expect("present");
    let retired = n.release();
    if retired {
        // SAFETY: retired just above under this writer, unlinked once.
        unsafe { w.unlink(n, &g) };
    }
    retired
}

/// Two writers racing to insert the same key end up sharing one node with two holders.
#[test]
fn loom_concurrent_insert_of_one_key_shares_one_node() {
    loom::model(|| {
        let t = table();
        let t2 = t.clone();
        let h = thread::spawn(move || insert(&t2, 1, 42).0);
        let a = insert(&t, 0, 42).0;
        assert_eq!(
            a,
            h.join().unwrap(),
            "both writers must acquire the same node"
        );
        let g = reclaim::pin();
        assert_eq!(t.find(42, &g).unwrap().holders.load(Ordering::Acquire), 2);
    });
}

/// A reader probing past a slot whose node is being unlinked still finds the key behind
/// it, and a concurrent insert into the same probe run is never lost.
#[test]
fn loom_unlink_vs_reader_and_inserter() {
    loom::model(|| {
        let t = table();
        for k in [1u64, 2, 3] {
            insert(&t, 0, k);
        }
        let reader = {
            let t = t.clone();
            thread::spawn(move || {
                let g = reclaim::pin();
                t.find(3, &g).map(|n| n.key)
            })
        };
        let inserter = {
            let t = t.clone();
            thread::spawn(move || insert(&t, 1, 4).1)
        };
        assert!(release(&t, 0, 2), "sole holder retires");
        assert_eq!(reader.join().unwrap(), Some(3));
        assert!(inserter.join().unwrap());
        let g = reclaim::pin();
        assert!(t.find(2, &g).is_none(), "unlinked node is unreachable");
        for k in [1u64, 3, 4] {
            assert_eq!(t.find(k, &g).map(|n| n.key), Some(k), "key {k} lost");
        }
    });
}

/// The last holder leaving races an inserter of the same key: either the inserter
/// acquires the old node first (and it survives), or it meets the retired node (not yet
/// unlinked, or already unlinked) and links a fresh one, which the retirer's unlink then
/// leaves in place. Either way exactly the inserter's node is linked, with one holder.
#[test]
fn loom_insert_vs_last_release() {
    loom::model(|| {
        let t = table();
        let (original, _) = insert(&t, 0, 7);
        let t2 = t.clone();
        let h = thread::spawn(move || insert(&t2, 1, 7));
        let retired = release(&t, 0, 7);
        let (node, inserted) = h.join().unwrap();
        assert_eq!(
            inserted, retired,
            "a fresh node exactly when the old one retired"
        );
        if !retired {
            assert_eq!(node, original);
        }
        let g = reclaim::pin();
        let found = t.find(7, &g).expect("the inserter's node is linked");
        assert_eq!(found.as_thin() as usize, node);
        assert_eq!(found.holders.load(Ordering::Acquire), 1);
    });
}

/// A reader running while a writer's insert grows the table always finds a key that was
/// present before and after.
#[test]
fn loom_resize_vs_reader() {
    loom::model(|| {
        // 4 slots grow when a 4th key is claimed.
        let t = Arc::new(Table::with_floor(1, 4, 1, 1));
        for k in 1..=3u64 {
            insert(&t, 0, k);
        }
        let reader = {
            let t = t.clone();
            thread::spawn(move || {
                let g = reclaim::pin();
                t.find(2, &g).map(|n| n.key)
            })
        };
        insert(&t, 1, 4);
        assert_eq!(reader.join().unwrap(), Some(2));
        assert_eq!(t.resizes(), 1);
        let g = reclaim::pin();
        for k in 1..=4u64 {
            assert_eq!(t.find(k, &g).map(|n| n.key), Some(k));
        }
    });
}

/// Worker a acquires block 2 and links block 1 -> block 2 while worker b's last
/// release retires block 2's node; a reader follows block 1's link meanwhile. The link
/// always ends on the node worker a holds, the reader only ever reaches block 2, and
/// the linked node's references are exactly the table link plus the successor link.
#[test]
fn loom_successor_link_vs_retire() {
    loom::model(|| {
        let t = table();
        insert(&t, 0, 1);
        insert(&t, 0, 2);
        let linker = {
            let t = t.clone();
            thread::spawn(move || {
                let g = reclaim::pin();
                let mut w = t.writer(1);
                let (s, _) = w.acquire_or_insert(2, &g);
                let p = t.find(1, &g).expect("block 1 stays");
                p.link_succ(s, &g);
                s.as_thin() as usize
            })
        };
        let reader = {
            let t = t.clone();
            thread::spawn(move || {
                let g = reclaim::pin();
                let p = t.find(1, &g).expect("block 1 stays");
                p.succ_for(2).map(|s| s.key)
            })
        };
        release(&t, 0, 2);
        let held = linker.join().unwrap();
        let seen = reader.join().unwrap();
        assert!(
            matches!(seen, None | Some(2)),
            "the link only leads to block 2"
        );
        let g = reclaim::pin();
        let p = t.find(1, &g).unwrap();
        let s = p.succ_for(2).expect("the held node is the live successor");
        assert_eq!(s.as_thin() as usize, held);
        assert_eq!(s.holders.load(Ordering::Acquire), 1);
        assert_eq!(s.refs(), 2, "table link + successor link");
    });
}
