//! Worker removal and re-addition: the new tenancy inherits no residency, no reservation
//! guard, and no late event (the in-flight work it carries is `readd.rs`'s); removed workers are not routed to.

mod common;

use common::{NOW, publish, router, store, tokens};
use kvroute::{EngineHash, EventError, RouteRequest, WorkerError, WorkerId};

#[test]
fn remove_and_readd_leaves_no_residency_or_reservations() {
    let (r, ws) = router(4, 2, |_| {});
    let (a, b) = (ws[0], ws[1]);
    let prompt = tokens(3, 256); // 16 blocks
    store(&r, a, &prompt, 100);
    publish(&r, &ws, &[]);
    let old = r.route(&RouteRequest::tokens(&prompt, 32, NOW)).unwrap();
    assert_eq!((old.worker, old.overlap_blocks), (a, 16));
    let slot = old.slot;
    assert_eq!(r.index().worker_blocks(slot), 16);
    assert_eq!(r.reserved(a).unwrap().requests, 1);

    r.remove_worker(a).unwrap();
    assert_eq!(r.reserved(a), None);
    assert_eq!(r.index().worker_blocks(slot), 0);
    assert_eq!(r.stats().reservations.removed.requests, 1);
    // Events of the removed worker are refused, not applied to its slot.
    assert_eq!(
        r.remove_blocks(a, &[EngineHash(100)]),
        Err(EventError::UnknownWorker(a))
    );
    assert_eq!(r.remove_worker(a), Err(WorkerError::UnknownWorker(a)));

    // Re-added: the lowest free slot is its old one, under a new tenancy. Its request in
    // flight is carried as a reservation of the new tenancy (`readd.rs`); the old
    // decision's guard is a no-op on it.
    assert_eq!(r.add_worker(a).unwrap(), slot);
    assert_eq!(r.reserved(a).unwrap().requests, 1);
    assert_eq!(r.index().worker_blocks(slot), 0);
    drop(old);
    assert_eq!(r.reserved(a).unwrap().requests, 1);

    // Its own report (idle) ends what was carried.
    publish(&r, &ws, &[]);
    assert_eq!(r.reserved(a).unwrap(), Default::default());
    let d = r.route(&RouteRequest::tokens(&prompt, 32, NOW)).unwrap();
    assert_eq!(
        d.overlap_blocks, 0,
        "nobody holds the prompt any more: {d:?}"
    );
    if d.worker == a {
        assert_eq!(d.generation, kvroute::SlotGeneration(2), "a new tenancy");
    } else {
        assert_eq!(d.worker, b);
    }
}

#[test]
fn a_removed_worker_is_not_routed_to_even_before_the_next_publication() {
    let (r, ws) = router(4, 2, |_| {});
    let prompt = tokens(4, 128);
    store(&r, ws[0], &prompt, 0);
    publish(&r, &ws, &[]);
    r.remove_worker(ws[0]).unwrap();
    for _ in 0..4 {
        let d = r.route(&RouteRequest::tokens(&prompt, 8, NOW)).unwrap();
        assert_eq!(d.worker, ws[1]);
    }
}

#[test]
fn all_blocks_cleared_drops_affinity() {
    let (r, ws) = router(4, 2, |_| {});
    let prompt = tokens(5, 128);
    store(&r, ws[0], &prompt, 0);
    publish(&r, &ws, &[]);
    let d = r.route(&RouteRequest::tokens(&prompt, 8, NOW)).unwrap();
    assert_eq!((d.worker, d.overlap_blocks), (ws[0], 8));
    drop(d);
    assert_eq!(r.clear_blocks(ws[0]).unwrap(), 8);
    let d = r.route(&RouteRequest::tokens(&prompt, 8, NOW)).unwrap();
    assert_eq!(d.overlap_blocks, 0);
}

/// A worker's block map reserved for its KV capacity is in the index's bytes at once
/// (1,000 blocks: 1,536 slots of 12 bytes, the least size by quarters of at least 4/3 of
/// them), the worker still routes by its cache, `clear_blocks` keeps the reservation (the
/// engine refills), `remove_worker` frees it, and an unknown worker's reservation is
/// refused without counting a KV event.
#[test]
fn a_reserved_block_map_is_counted_kept_by_a_clear_and_freed_by_a_removal() {
    let (r, ws) = router(4, 2, |_| {});
    let empty = r.index_stats().heap_bytes;
    r.reserve_worker_blocks(ws[1], 1_000).unwrap();
    assert_eq!(r.index_stats().heap_bytes, empty + 1_536 * 12);
    let prompt = tokens(5, 128);
    store(&r, ws[1], &prompt, 0);
    publish(&r, &ws, &[]);
    let d = r.route(&RouteRequest::tokens(&prompt, 8, NOW)).unwrap();
    assert_eq!((d.worker, d.overlap_blocks), (ws[1], 8));
    drop(d);
    assert_eq!(r.clear_blocks(ws[1]).unwrap(), 8);
    r.index().collect_garbage();
    let cleared = r.index_stats().heap_bytes;
    assert!(
        cleared >= empty + 1_536 * 12,
        "{cleared} bytes after the clear"
    );
    r.remove_worker(ws[1]).unwrap();
    r.index().collect_garbage();
    let freed = cleared - r.index_stats().heap_bytes;
    assert!(freed >= 1_536 * 12, "{freed} bytes freed by the removal");
    let stranger = WorkerId::new(9, 0);
    assert_eq!(
        r.reserve_worker_blocks(stranger, 1_000),
        Err(EventError::UnknownWorker(stranger))
    );
    assert_eq!(r.ingest_stats().unknown_worker_events, 0);
}

#[test]
fn add_worker_errors() {
    let (r, ws) = router(2, 2, |_| {});
    assert_eq!(
        r.add_worker(ws[0]),
        Err(WorkerError::AlreadyRegistered(ws[0]))
    );
    assert_eq!(
        r.add_worker(WorkerId::new(9, 0)),
        Err(WorkerError::Full { capacity: 2 })
    );
    let stranger = WorkerId::new(9, 0);
    assert_eq!(
        r.store_hashes(stranger, None, &[]),
        Err(EventError::UnknownWorker(stranger))
    );
    // Every typed event for an unknown worker is counted, not only refused.
    assert_eq!(
        r.remove_blocks(stranger, &[EngineHash(1)]),
        Err(EventError::UnknownWorker(stranger))
    );
    assert_eq!(
        r.clear_blocks(stranger),
        Err(EventError::UnknownWorker(stranger))
    );
    assert_eq!(r.ingest_stats().unknown_worker_events, 3);
    assert_eq!(r.ingest_stats().unknown_worker_messages, 0);
}
