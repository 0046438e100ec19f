//! loom models of the node protocol (`index/node.rs`): holder references against the last
//! release, and bit updates of two workers on one node.

use kvroute_core::sync::atomic::Ordering;
use kvroute_core::sync::{Arc, thread};

use crate::index::node::TestNode;

/// Adder vs last remover on one node: either the remover retires the node (and the adder
/// sees it retired and must insert a fresh one), or the adder's acquire comes first and
/// the node survives with the adder's bit. Never both, never a bit on a retired node.
#[test]
fn loom_add_vs_last_remove_on_one_node() {
    loom::model(|| {
        let n = Arc::new(TestNode::new(9, 2));
        n.set_bit(0);
        let n2 = n.clone();
        let remover = thread::spawn(move || {
            n2.clear_bit(0);
            n2.release()
        });
        let added = if n.try_acquire() {
            n.set_bit(70);
            true
        } else {
            false
        };
        let retired = remover.join().unwrap();
        assert!(
            added != retired,
            "exactly one of: adder kept the node, remover retired it"
        );
        if retired {
            assert_eq!(n.word(0) | n.word(1), 0, "a retired node holds no bit");
            assert!(!n.try_acquire());
        } else {
            assert_eq!(n.word(0), 0);
            assert_eq!(n.word(1), 1 << 6);
            assert_eq!(n.holders.load(Ordering::Acquire), 1);
        }
    });
}

/// Two writers (two workers) clearing and setting bits concurrently on one node never
/// lose each other's bits.
#[test]
fn loom_concurrent_bit_updates_do_not_lose_bits() {
    loom::model(|| {
        let n = Arc::new(TestNode::new(9, 2));
        n.set_bit(1);
        let n2 = n.clone();
        let t = thread::spawn(move || {
            n2.set_bit(65);
            n2.clear_bit(1);
        });
        n.set_bit(2);
        t.join().unwrap();
        assert_eq!(n.word(0), 1 << 2);
        assert_eq!(n.word(1), 1 << 1);
    });
}
