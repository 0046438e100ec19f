//! Wire shapes the engine examples do not all show, built here byte by byte with
//! `rmp-serde`: batches as maps (`data_parallel_rank` or SGLang's `attn_dp_rank`, unknown
//! keys ignored), `BlockRemoved` arrays of 2 to 4 elements (1 and 5 rejected), named-map
//! events with unknown keys ignored, and SGLang's positional `BlockStored` with a trailing
//! metadata map (cache salt and LoRA name read, other metadata keys ignored). Expected
//! values are the ones written into each input.

use kvroute_core::EngineHash;
use kvroute_core::HashNamespace;
use kvroute_testkit::msgpack::V;
use kvroute_wire::{BlockRemoved, EventEncoding, KvEvent, Medium, WireError, decode_payload};

fn mp(v: &V) -> Vec<u8> {
    v.to_msgpack()
}

/// Tokens 0..16 (one block of 16).
fn block_tokens() -> V {
    V::A((0..16).map(V::U).collect())
}

fn removed(len: usize) -> V {
    let all = [
        V::S("BlockRemoved"),
        V::A(vec![V::U(7), V::I(-7)]),
        V::S("CPU"),
        V::U(2),
        V::Nil,
    ];
    V::A(all[..len].to_vec())
}

fn one_event_batch(ev: V) -> Vec<u8> {
    mp(&V::A(vec![V::F(2.5), V::A(vec![ev]), V::U(0)]))
}

#[test]
fn batches_as_maps_with_either_rank_key_and_unknown_keys() {
    let ev = V::A(vec![V::S("AllBlocksCleared")]);
    let vllm = mp(&V::M(vec![
        ("ts", V::F(12.25)),
        ("events", V::A(vec![ev.clone()])),
        ("data_parallel_rank", V::U(3)),
        ("publisher_note", V::M(vec![("nested", V::A(vec![V::Nil]))])),
    ]));
    let b = decode_payload(&vllm).unwrap();
    assert_eq!(
        (b.ts, b.events, b.dp_rank),
        (12.25, vec![KvEvent::AllBlocksCleared], Some(3))
    );
    // SGLang's key for the rank, keys in another order.
    let sglang = mp(&V::M(vec![
        ("attn_dp_rank", V::U(5)),
        ("events", V::A(vec![])),
        ("ts", V::F(1.0)),
    ]));
    let b = decode_payload(&sglang).unwrap();
    assert_eq!((b.ts, b.events.len(), b.dp_rank), (1.0, 0, Some(5)));
    // A nil rank is no rank; a map without events is an error naming the field.
    let nil_rank = mp(&V::M(vec![
        ("ts", V::F(1.0)),
        ("events", V::A(vec![])),
        ("data_parallel_rank", V::Nil),
    ]));
    assert_eq!(decode_payload(&nil_rank).unwrap().dp_rank, None);
    let no_events = mp(&V::M(vec![("ts", V::F(1.0))]));
    assert_eq!(
        decode_payload(&no_events),
        Err(WireError::MissingField {
            record: "batch",
            field: "events"
        })
    );
}

#[test]
fn block_removed_arrays_of_two_to_four_elements() {
    let want = |medium: Medium, group_idx: Option<u32>, len: usize| {
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineHash(7), EngineHash(-7i64 as u64)],
            medium,
            group_idx,
            encoding: EventEncoding::Positional(len),
        })
    };
    let decode = |len| decode_payload(&one_event_batch(removed(len))).map(|b| b.events);
    assert_eq!(decode(2), Ok(vec![want(Medium::Gpu, None, 2)]));
    assert_eq!(decode(3), Ok(vec![want(Medium::Host, None, 3)]));
    assert_eq!(decode(4), Ok(vec![want(Medium::Host, Some(2), 4)]));
    assert_eq!(
        decode(1),
        Err(WireError::TooFewFields {
            record: "BlockRemoved",
            got: 1,
            min: 2
        })
    );
    assert_eq!(
        decode(5),
        Err(WireError::TooManyFields {
            record: "BlockRemoved",
            got: 5,
            max: 4
        })
    );
}

#[test]
fn named_map_events_ignore_unknown_keys() {
    let stored = V::M(vec![
        ("type", V::S("BlockStored")),
        ("future_flag", V::U(1)),
        ("block_hashes", V::A(vec![V::U(41)])),
        ("parent_block_hash", V::U(40)),
        ("token_ids", block_tokens()),
        ("block_size", V::U(16)),
        ("speculative", V::M(vec![("depth", V::U(3))])),
        ("medium", V::S("GPU")),
        ("lora_name", V::S("adapter-b")),
        ("group_idx", V::U(0)),
        ("kv_cache_spec_kind", V::S("full_attention")),
        ("trailing_list", V::A(vec![V::S("x"), V::Nil])),
    ]);
    let removed = V::M(vec![
        ("block_hashes", V::A(vec![V::U(41)])),
        ("type", V::S("BlockRemoved")),
        ("reason", V::S("evicted")),
    ]);
    let b = decode_payload(&mp(&V::A(vec![
        V::F(0.0),
        V::A(vec![stored, removed]),
        V::U(0),
    ])))
    .unwrap();
    let KvEvent::BlockStored(s) = &b.events[0] else {
        panic!("{:?}", b.events[0]);
    };
    assert_eq!(s.block_hashes, vec![EngineHash(41)]);
    assert_eq!(s.parent_block_hash, Some(EngineHash(40)));
    assert_eq!(s.token_ids, (0..16).collect::<Vec<u32>>());
    assert_eq!((s.block_size, s.medium.clone()), (16, Medium::Gpu));
    assert_eq!(s.lora_name.as_deref(), Some("adapter-b"));
    assert_eq!(
        (s.group_idx, s.kv_cache_spec_kind.as_deref()),
        (Some(0), Some("full_attention"))
    );
    assert_eq!(s.encoding, EventEncoding::Named);
    assert_eq!(
        b.events[1],
        KvEvent::BlockRemoved(BlockRemoved {
            block_hashes: vec![EngineHash(41)],
            medium: Medium::Gpu,
            group_idx: None,
            encoding: EventEncoding::Named,
        })
    );
}

/// SGLang's positional `BlockStored` with its metadata map at position 7 (where vLLM has
/// `lora_name`): the salt and LoRA name in it namespace the blocks; other keys are ignored.
#[test]
fn sglang_positional_store_with_a_metadata_map() {
    let ev = |meta: V| {
        V::A(vec![
            V::S("BlockStored"),
            V::A(vec![V::I(-9)]),
            V::Nil,
            block_tokens(),
            V::U(16),
            V::Nil,
            V::S("GPU"),
            meta,
        ])
    };
    let store =
        |meta: V| match decode_payload(&one_event_batch(ev(meta))).unwrap().events[0].clone() {
            KvEvent::BlockStored(s) => s,
            e => panic!("{e:?}"),
        };
    let s = store(V::M(vec![
        ("priority", V::U(2)),
        ("cache_salt", V::S("tenant-9")),
        ("lora_name", V::S("adapter-c")),
    ]));
    assert_eq!(s.block_hashes, vec![EngineHash(-9i64 as u64)]);
    assert_eq!(s.encoding, EventEncoding::Positional(8));
    assert_eq!(
        (s.cache_salt.as_deref(), s.lora_name.as_deref()),
        (Some("tenant-9"), Some("adapter-c"))
    );
    assert_eq!(
        s.namespace(),
        HashNamespace::new(Some("adapter-c"), Some("tenant-9"))
    );
    // Salt only.
    let s = store(V::M(vec![("cache_salt", V::S("tenant-9"))]));
    assert_eq!(
        (s.cache_salt.as_deref(), s.lora_name.as_deref()),
        (Some("tenant-9"), None)
    );
    assert_eq!(s.namespace(), HashNamespace::new(None, Some("tenant-9")));
    assert_ne!(s.namespace(), HashNamespace::DEFAULT);
    // An empty metadata map is the default namespace.
    let s = store(V::M(vec![]));
    assert_eq!((&s.cache_salt, &s.lora_name), (&None, &None));
    assert_eq!(s.namespace(), HashNamespace::DEFAULT);
}
