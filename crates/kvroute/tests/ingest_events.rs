//! Applying events: storage tiers, KV groups, namespaces (LoRA, cache salt), unknown parents, duplicate
//! stores and removes, unknown event kinds (one idle worker, block size 16).

mod common;
mod ingest_support;

use common::{BS, publish, router, tokens};
use ingest_support::{batch, remove, route, store, stored};
use kvroute::{Channel, HashNamespace, RouteRequest, Router, WorkerId};
use kvroute_wire::{BlockRemoved, EventEncoding, KvEvent, Medium};

const LIVE: Channel = Channel::Live;

fn one() -> (Router, WorkerId, Vec<u32>) {
    let (r, ws) = router(2, 1, |_| {});
    publish(&r, &ws, &[]);
    (r, ws[0], tokens(21, 3 * BS))
}

fn blocks(r: &Router, w: WorkerId) -> usize {
    r.index().worker_blocks(r.slot_of(w).unwrap())
}

/// Host (CPU) and disk tier stores are counted and ignored: no device residency. A host
/// tier removal does not take the device copy away.
#[test]
fn host_and_disk_tiers_never_create_device_residency() {
    let (r, w, p) = one();
    let mut host = stored(1, None, &p);
    host.medium = Medium::Host;
    let mut disk = stored(1, None, &p);
    disk.medium = Medium::Disk;
    let x = r
        .ingest(
            w,
            LIVE,
            &batch(
                0,
                vec![KvEvent::BlockStored(host), KvEvent::BlockStored(disk)],
            ),
        )
        .unwrap();
    assert_eq!(
        (x.applied.stored_blocks, x.applied.non_device_blocks),
        (0, 6)
    );
    assert_eq!(blocks(&r, w), 0);
    assert_eq!(route(&r, &p).1, 0);

    r.ingest(w, LIVE, &batch(1, vec![store(1, None, &p)]))
        .unwrap();
    let host_evict = KvEvent::BlockRemoved(BlockRemoved {
        block_hashes: vec![kvroute::EngineHash(1)],
        medium: Medium::Host,
        group_idx: None,
        encoding: EventEncoding::Named,
    });
    r.ingest(w, LIVE, &batch(2, vec![host_evict])).unwrap();
    assert_eq!(route(&r, &p).1, 3);
    assert_eq!(r.ingest_stats().non_device_blocks, 7);
}

#[test]
fn other_kv_groups_are_counted_and_skipped() {
    let (r, w, p) = one();
    let mut swa = stored(1, None, &p);
    swa.group_idx = Some(1);
    swa.kv_cache_spec_kind = Some("sliding_window".into());
    let mut full = stored(10, None, &p);
    full.group_idx = Some(0);
    full.kv_cache_spec_kind = Some("full_attention".into());
    let events = vec![KvEvent::BlockStored(swa), KvEvent::BlockStored(full)];
    let x = r.ingest(w, LIVE, &batch(0, events)).unwrap();
    assert_eq!(
        (x.applied.stored_blocks, x.applied.non_main_group_blocks),
        (3, 3)
    );
    // A removal of group 1 is skipped; of group 0, applied.
    let rm = |g| {
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![kvroute::EngineHash(12)],
            medium: Medium::Gpu,
            group_idx: Some(g),
            encoding: EventEncoding::Named,
        })
    };
    r.ingest(w, LIVE, &batch(1, vec![rm(1)])).unwrap();
    assert_eq!(route(&r, &p).1, 3);
    r.ingest(w, LIVE, &batch(2, vec![rm(0)])).unwrap();
    assert_eq!(route(&r, &p).1, 2);
}

/// LoRA-name blocks live in their own namespace: a base-model request does not match them.
#[test]
fn lora_blocks_match_only_their_namespace() {
    let (r, w, p) = one();
    let mut lora = stored(1, None, &p);
    lora.lora_name = Some("sql-adapter".into());
    r.ingest(w, LIVE, &batch(0, vec![KvEvent::BlockStored(lora)]))
        .unwrap();
    assert_eq!(route(&r, &p).1, 0);
    let mut req = RouteRequest::tokens(&p, 64, common::NOW);
    req.namespace = Some(HashNamespace::new(Some("sql-adapter"), None));
    assert_eq!(r.route(&req).unwrap().overlap_blocks, 3);
}

/// A cache salt (SGLang's `cache_salt`) namespaces blocks as a LoRA name does: only a
/// request with the same salt matches them; salt and LoRA together are a third namespace.
#[test]
fn salted_blocks_match_only_their_namespace() {
    let (r, w, p) = one();
    let mut salted = stored(1, None, &p);
    salted.cache_salt = Some("tenant-1".into());
    let mut both = stored(11, None, &p[..2 * BS]);
    both.cache_salt = Some("tenant-1".into());
    both.lora_name = Some("sql-adapter".into());
    let events = vec![KvEvent::BlockStored(salted), KvEvent::BlockStored(both)];
    r.ingest(w, LIVE, &batch(0, events)).unwrap();
    assert_eq!(route(&r, &p).1, 0);
    let overlap = |ns: HashNamespace| {
        let mut req = RouteRequest::tokens(&p, 64, common::NOW);
        req.namespace = Some(ns);
        r.route(&req).unwrap().overlap_blocks
    };
    assert_eq!(overlap(HashNamespace::new(None, Some("tenant-1"))), 3);
    assert_eq!(overlap(HashNamespace::new(None, Some("tenant-2"))), 0);
    assert_eq!(
        overlap(HashNamespace::new(Some("sql-adapter"), Some("tenant-1"))),
        2
    );
    assert_eq!(overlap(HashNamespace::new(Some("sql-adapter"), None)), 0);
}

/// Rule: a store whose parent the worker does not hold is not indexed (it could never
/// extend a match from block 0); counted; not an error; the worker stays trusted.
#[test]
fn a_store_with_an_unknown_parent_is_counted_not_indexed() {
    let (r, w, p) = one();
    let x = r
        .ingest(w, LIVE, &batch(0, vec![store(5, Some(4), &p[BS..])]))
        .unwrap();
    assert_eq!((x.applied.unknown_parent_blocks, x.trusted), (2, true));
    assert_eq!(blocks(&r, w), 0);
    let s = r.ingest_stats();
    assert_eq!((s.unknown_parent_stores, s.unknown_parent_blocks), (1, 2));
}

/// vLLM's duplicate store (a second physical copy of the same hash) needs two removals.
/// A removal of a hash never stored is counted and ignored.
#[test]
fn duplicate_stores_and_removes_follow_copy_semantics() {
    let (r, w, p) = one();
    r.ingest(w, LIVE, &batch(0, vec![store(1, None, &p)]))
        .unwrap();
    r.ingest(w, LIVE, &batch(1, vec![store(3, Some(2), &p[2 * BS..])]))
        .unwrap();
    r.ingest(w, LIVE, &batch(2, vec![remove(&[3])])).unwrap();
    assert_eq!(route(&r, &p).1, 3, "one copy of block 3 left");
    let x = r
        .ingest(w, LIVE, &batch(3, vec![remove(&[3, 3, 77])]))
        .unwrap();
    assert_eq!(route(&r, &p).1, 2);
    assert_eq!(r.index_stats().unknown_removes, 2);
    // The second 3 and 77 removed nothing: listed, and counted as unknown.
    assert_eq!(
        (x.applied.removed_blocks, x.applied.unknown_removed_blocks),
        (3, 2)
    );
    let s = r.ingest_stats();
    assert_eq!((s.removed_blocks, s.unknown_removed_blocks), (4, 2));
    // A sweep applied as a set, in no particular order.
    r.ingest(w, LIVE, &batch(4, vec![remove(&[1, 2])])).unwrap();
    assert_eq!(blocks(&r, w), 0);
}

#[test]
fn unknown_event_kinds_are_counted_and_skipped() {
    let (r, w, p) = one();
    let events = vec![
        KvEvent::Unknown {
            tag: "BlockPinned".into(),
        },
        store(1, None, &p),
    ];
    let x = r.ingest(w, LIVE, &batch(0, events)).unwrap();
    assert_eq!((x.applied.unknown_events, x.applied.stored_blocks), (1, 3));
    assert_eq!(r.ingest_stats().unknown_events, 1);
}

/// A batch's events take effect in their order, however the router groups its removals:
/// a block removed and stored again in one batch is held; a store after its parent was
/// removed in the same batch has an unknown parent; removals after a clear remove nothing.
#[test]
fn a_batch_applies_its_removals_and_stores_in_order() {
    let (r, w, p) = one();
    r.ingest(w, LIVE, &batch(0, vec![store(1, None, &p)]))
        .unwrap();
    // Block 3 goes (two one-block removals, as vLLM sends them) and comes back.
    let events = vec![
        remove(&[3]),
        remove(&[2]),
        store(2, Some(1), &p[BS..2 * BS]),
        store(3, Some(2), &p[2 * BS..]),
    ];
    let x = r.ingest(w, LIVE, &batch(1, events)).unwrap();
    assert_eq!((x.applied.removed_blocks, x.applied.stored_blocks), (2, 2));
    assert_eq!(route(&r, &p).1, 3);
    assert_eq!(blocks(&r, w), 3);
    // Block 2 goes, then a store after it: unknown parent, not indexed.
    let events = vec![remove(&[3]), remove(&[2]), store(3, Some(2), &p[2 * BS..])];
    let x = r.ingest(w, LIVE, &batch(2, events)).unwrap();
    assert_eq!(x.applied.unknown_parent_blocks, 1);
    assert_eq!(route(&r, &p).1, 1);
    // Removals before a clear were applied (block 1 known); after it, unknown.
    let events = vec![remove(&[1]), KvEvent::AllBlocksCleared, remove(&[1])];
    r.ingest(w, LIVE, &batch(3, events)).unwrap();
    assert_eq!(blocks(&r, w), 0);
    assert_eq!(r.index_stats().unknown_removes, 1);
}
