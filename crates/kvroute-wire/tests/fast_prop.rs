//! Generated batches through the decoder's fast path and through serde
//! (`decode_payload_serde`, the reference): the two must give the same result or the same
//! error on every input. Batches are built in every msgpack form of each marker (long
//! integer, string and container forms), positional and named, with unknown keys, repeated
//! keys and trailing elements; the malformed ones put a wrong value in any field (negative
//! or oversized integers, floats, strings as binary, invalid UTF-8, extensions, nesting past
//! both readers' depth limits) and then truncate, overwrite, insert or append bytes.
//! Well-formed batches must be read by the fast path itself.

mod support;

use kvroute_wire::{DecodePath, decode_payload_serde, decode_payload_traced};
use proptest::prelude::*;
use proptest::sample::Index;
use support::encode::{M, Width};

fn width() -> impl Strategy<Value = Width> {
    prop_oneof![
        4 => Just(Width::Short),
        1 => Just(Width::W8),
        1 => Just(Width::W16),
        1 => Just(Width::W32),
        1 => Just(Width::W64),
    ]
}

/// A value the fast path never reads where a specific type belongs.
fn junk() -> impl Strategy<Value = M> {
    prop_oneof![
        Just(M::Nil),
        any::<bool>().prop_map(M::Bool),
        (i64::MIN..0, width()).prop_map(|(v, w)| M::I(v, w)),
        ((1u64 << 32).., width()).prop_map(|(v, w)| M::U(v, w)),
        (u64::MAX / 2..).prop_map(|v| M::U(v, Width::W64)),
        any::<f32>().prop_map(M::F32),
        any::<f64>().prop_map(M::F64),
        ("[a-z]{0,3}", width()).prop_map(|(s, w)| M::S(s, w)),
        (prop::collection::vec(any::<u8>(), 0..40), width()).prop_map(|(b, w)| M::B(b, w)),
        Just(M::SBytes(vec![0xff, 0xfe], Width::Short)),
        Just(M::A(vec![], Width::Short)),
        Just(M::Map(vec![], Width::Short)),
        (any::<i8>(), prop::collection::vec(any::<u8>(), 1..5)).prop_map(|(t, d)| M::Ext(t, d)),
        (1usize..40).prop_map(nested),
    ]
}

/// `depth` nested one-element arrays around a nil (raw bytes: past the fast path's nesting
/// limit from 14 or so, past serde's from about 30).
fn nested(depth: usize) -> M {
    let mut b = vec![0x91; depth];
    b.push(0xc0);
    M::Raw(b)
}

/// `good` most of the time; in a malformed batch sometimes [`junk`] instead.
fn field<S: Strategy<Value = M> + 'static>(good: S, clean: bool) -> BoxedStrategy<M> {
    if clean {
        good.boxed()
    } else {
        prop_oneof![40 => good, 1 => junk()].boxed()
    }
}

fn opt<S: Strategy<Value = M> + 'static>(good: S) -> impl Strategy<Value = M> {
    prop_oneof![1 => Just(M::Nil), 3 => good]
}

fn int_i64() -> impl Strategy<Value = M> {
    prop_oneof![
        (0..=i64::MAX as u64, width()).prop_map(|(v, w)| M::U(v, w)),
        (0u64..300, width()).prop_map(|(v, w)| M::U(v, w)),
        (any::<i64>(), width()).prop_map(|(v, w)| M::I(v, w)),
    ]
}

/// An integer for a `u32` field (group, window, rank): mostly in range.
fn int_u32() -> impl Strategy<Value = M> {
    prop_oneof![
        6 => (0..=u64::from(u32::MAX), width()).prop_map(|(v, w)| M::U(v, w)),
        1 => int_i64(),
    ]
}

fn string() -> impl Strategy<Value = M> {
    let names = prop::sample::select(vec![
        "GPU",
        "CPU",
        "CPU_PINNED",
        "DISK",
        "",
        "full_attention",
        "adapter-é",
    ]);
    (names, width()).prop_map(|(s, w)| M::S(s.to_owned(), w))
}

fn hash() -> impl Strategy<Value = M> {
    prop_oneof![
        8 => (any::<u64>(), width()).prop_map(|(v, w)| M::U(v, w)),
        4 => (any::<i64>(), width()).prop_map(|(v, w)| M::I(v, w)),
        3 => (prop::collection::vec(any::<u8>(), 32), width()).prop_map(|(b, w)| M::B(b, w)),
        1 => (prop::collection::vec(any::<u8>(), 0..40), width()).prop_map(|(b, w)| M::B(b, w)),
    ]
}

fn token() -> impl Strategy<Value = M> {
    prop_oneof![
        (0u64..128).prop_map(|v| M::U(v, Width::Short)),
        (0..=u64::from(u32::MAX), width()).prop_map(|(v, w)| M::U(v, w.min(Width::W32))),
        (100_000u64..200_000).prop_map(|v| M::U(v, Width::Short)),
    ]
}

fn array(items: Vec<M>, w: Width) -> M {
    M::A(items, w.min(Width::W32))
}

/// A value for an unknown key or a trailing element: anything but an extension, nested a
/// few levels.
fn any_value() -> impl Strategy<Value = M> {
    let leaf = prop_oneof![
        Just(M::Nil),
        int_i64(),
        any::<f64>().prop_map(M::F64),
        any::<f32>().prop_map(M::F32),
        string(),
        Just(M::SBytes(vec![0xc3, 0x28], Width::W8)),
        (prop::collection::vec(any::<u8>(), 0..8), width()).prop_map(|(b, w)| M::B(b, w)),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), width()).prop_map(|(v, w)| array(v, w)),
            (prop::collection::vec((string(), inner), 0..3), width())
                .prop_map(|(kv, w)| M::Map(kv, w.min(Width::W32))),
        ]
    })
}

/// vLLM's per-block extra keys: nil or an array of keys per block, each key a string,
/// integer, bool, float, binary string, nil or a nested value.
fn extra_keys(clean: bool) -> impl Strategy<Value = M> {
    let key = prop_oneof![
        string(),
        int_i64(),
        any::<bool>().prop_map(M::Bool),
        any::<f64>().prop_map(M::F64),
        (prop::collection::vec(any::<u8>(), 0..8), width()).prop_map(|(b, w)| M::B(b, w)),
        Just(M::Nil),
        (prop::collection::vec(any_value(), 0..3), width()).prop_map(|(v, w)| array(v, w)),
        prop::collection::vec((string(), any_value()), 0..3)
            .prop_map(|kv| M::Map(kv, Width::Short)),
    ];
    let key = field(key, clean);
    let block = opt((prop::collection::vec(key, 0..4), width()).prop_map(|(v, w)| array(v, w)));
    (prop::collection::vec(block, 0..3), width()).prop_map(|(v, w)| array(v, w))
}

/// The fields of one `BlockStored` (in wire order, tag excluded, 11 of them) with
/// `blocks * block_size` tokens (one more or fewer now and then).
fn store_fields(clean: bool) -> impl Strategy<Value = Vec<M>> {
    (
        0usize..4,
        1u64..5,
        prop_oneof![8 => Just(0i64), 1 => Just(1), 1 => Just(-1)],
    )
        .prop_flat_map(move |(blocks, bs, off)| {
            let tokens = (blocks as i64 * bs as i64 + off).max(0) as usize;
            let meta = prop::collection::vec(
                (
                    prop::sample::select(vec!["cache_salt", "lora_name", "other"]),
                    opt(string()),
                ),
                0..3,
            )
            .prop_map(|kv| {
                M::Map(
                    kv.into_iter()
                        .map(|(k, v)| (M::S(k.to_owned(), Width::Short), v))
                        .collect(),
                    Width::Short,
                )
            });
            vec![
                field(
                    (prop::collection::vec(hash(), blocks), width()).prop_map(|(v, w)| array(v, w)),
                    clean,
                ),
                field(opt(hash()), clean),
                field(
                    (prop::collection::vec(token(), tokens), width())
                        .prop_map(|(v, w)| array(v, w)),
                    clean,
                ),
                field(
                    prop_oneof![8 => Just(M::U(bs, Width::Short)), 1 => int_i64()],
                    clean,
                ),
                field(opt(int_i64()), clean),
                field(opt(string()), clean),
                field(prop_oneof![opt(string()), meta], clean),
                field(opt(extra_keys(clean)), clean),
                field(opt(int_u32()), clean),
                field(opt(string()), clean),
                field(opt(int_u32()), clean),
            ]
        })
}

fn tag(clean: bool) -> impl Strategy<Value = M> {
    let names = prop::sample::select(vec![
        "BlockStored",
        "BlockStored",
        "BlockRemoved",
        "AllBlocksCleared",
        "NewKind",
    ]);
    field(
        (names, width()).prop_map(|(s, w)| M::S(s.to_owned(), w)),
        clean,
    )
}

/// A positional event: the tag, `len - 1` fields (`BlockRemoved` takes the hashes, the
/// medium and the group of a store's fields), then trailing values; mostly a length the
/// tag's generations have.
fn positional(clean: bool) -> impl Strategy<Value = M> {
    (
        tag(clean),
        store_fields(clean),
        prop_oneof![8 => Just(None), 1 => (0usize..15).prop_map(Some)],
        any::<Index>(),
        prop::collection::vec(field(any_value(), clean), 0..3),
        width(),
    )
        .prop_map(|(tag, f, any_len, pick, extra, w)| {
            let name = match &tag {
                M::S(t, _) => t.as_str(),
                _ => "",
            };
            let (min, max) = match name {
                "BlockStored" => (6, 12),
                "BlockRemoved" => (2, 4),
                "AllBlocksCleared" => (1, 1),
                _ => (1, 14),
            };
            let len = any_len.unwrap_or(min + pick.index(max - min + 1));
            let is_removed = name == "BlockRemoved";
            let mut items = vec![tag];
            if is_removed {
                items.extend([f[0].clone(), f[5].clone(), f[8].clone()]);
            } else {
                items.extend(f);
            }
            items.extend(extra);
            items.truncate(len);
            array(items, w)
        })
}

/// A named event: a random subset of the fields in random order (`block_size` or SGLang's
/// `page_size`), unknown keys, now and then a repeated key, a key that is not UTF-8 or
/// (malformed) a non-string key.
fn named(clean: bool) -> impl Strategy<Value = M> {
    let unknown_key = prop::sample::select(vec!["locality", "ts", "session_id", "events"]);
    // A key that is not UTF-8 is an unknown key to both readers; one that is not a string
    // is one the fast path does not read.
    let not_utf8 = M::SBytes(vec![0x74, 0xff], Width::Short);
    let odd_key = if clean {
        prop_oneof![6 => Just(None), 1 => Just(Some(not_utf8))].boxed()
    } else {
        prop_oneof![
            6 => Just(None),
            1 => Just(Some(not_utf8)),
            1 => Just(Some(M::U(3, Width::Short))),
        ]
        .boxed()
    };
    (
        tag(clean),
        store_fields(clean),
        prop_oneof![
            // Type, hashes, tokens and block size, and any of the rest.
            8 => prop::sample::subsequence((4..12).collect::<Vec<usize>>(), 0..=8)
                .prop_map(|mut v| { v.extend([0, 1, 3, 4]); v }),
            1 => prop::sample::subsequence((0..12).collect::<Vec<usize>>(), 0..=12),
        ]
        .prop_shuffle(),
        prop::collection::vec((unknown_key, field(any_value(), clean)), 0..3),
        any::<Index>(),
        width(),
        odd_key,
        any::<bool>(),
    )
        .prop_map(
            move |(tag, f, picked, unknown, at, w, odd_key, page_size)| {
                let mut kv: Vec<(M, M)> = picked
                    .into_iter()
                    .map(|i| match i {
                        0 => (M::S("type".into(), Width::Short), tag.clone()),
                        // SGLang's name of the block size.
                        4 if page_size => (M::S("page_size".into(), Width::Short), f[3].clone()),
                        // The positional metadata map is no `lora_name` value.
                        7 if clean && matches!(f[6], M::Map(..)) => {
                            (M::S("lora_name".into(), Width::Short), M::Nil)
                        }
                        i => (
                            M::S(support::STORE_FIELDS[i - 1].into(), Width::Short),
                            f[i - 1].clone(),
                        ),
                    })
                    .collect();
                for (k, v) in unknown {
                    let i = at.index(kv.len() + 1);
                    kv.insert(i, (M::S(k.into(), Width::Short), v));
                }
                if let Some(k) = odd_key {
                    kv.push((k, M::Nil));
                }
                if !kv.is_empty() && at.index(4) == 0 {
                    let again = kv[at.index(kv.len())].clone();
                    kv.push(again);
                }
                M::Map(kv, w.min(Width::W32))
            },
        )
}

fn batch(clean: bool) -> impl Strategy<Value = M> {
    let event = prop_oneof![positional(clean), named(clean)];
    let ts = field(
        prop_oneof![Just(M::F64(1.789e9)), any::<f64>().prop_map(M::F64)],
        clean,
    );
    let dp_rank = field(opt(int_u32()), clean);
    (
        ts,
        (prop::collection::vec(event, 0..5), width()).prop_map(|(v, w)| array(v, w)),
        dp_rank,
        prop_oneof![8 => 2usize..4, 1 => 0usize..6],
        any::<bool>(),
        field(any_value(), clean),
        width(),
    )
        .prop_map(|(ts, events, rank, len, as_map, extra, w)| {
            if as_map {
                let key = |k: &str| M::S(k.into(), Width::Short);
                let mut kv = vec![(key("ts"), ts), (key("events"), events)];
                if len % 2 == 0 {
                    kv.push((key("attn_dp_rank"), rank));
                } else {
                    kv.insert(1, (key("data_parallel_rank"), rank));
                }
                if len >= 4 {
                    kv.push((key("other"), extra));
                }
                M::Map(kv, w.min(Width::W32))
            } else {
                let mut items = vec![ts, events, rank, extra];
                items.truncate(len.min(4));
                array(items, w)
            }
        })
}

/// A byte-level change to an encoded payload.
#[derive(Clone, Debug)]
enum Mutation {
    None,
    Truncate(Index),
    Overwrite(Index, u8),
    Insert(Index, u8),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => Just(Mutation::None),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => prop::collection::vec(any::<u8>(), 1..4).prop_map(Mutation::Append),
    ]
}

fn apply(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    match m {
        Mutation::None => {}
        Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
        Mutation::Overwrite(i, b) => {
            let at = i.index(bytes.len());
            bytes[at] = *b;
        }
        Mutation::Insert(i, b) => bytes.insert(i.index(bytes.len() + 1), *b),
        Mutation::Append(tail) => bytes.extend(tail),
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any batch, malformed or not: the fast path's result (or its fallback's error) is
    /// serde's.
    #[test]
    fn fast_path_equals_serde(b in prop_oneof![batch(true), batch(false)], m in mutation()) {
        let bytes = apply(b.encode(), &m);
        let (got, _) = decode_payload_traced(&bytes);
        let reference = decode_payload_serde(&bytes);
        // Debug text: a NaN timestamp is not equal to itself.
        prop_assert_eq!(format!("{got:?}"), format!("{reference:?}"));
    }

    /// Well-formed batches in any form of the markers the fast path reads: the fast path
    /// reads them, with serde's result.
    #[test]
    fn well_formed_batches_take_the_fast_path(b in batch(true)) {
        let bytes = b.encode();
        let (got, path) = decode_payload_traced(&bytes);
        let reference = decode_payload_serde(&bytes);
        prop_assert_eq!(format!("{got:?}"), format!("{reference:?}"));
        prop_assert_eq!(path, DecodePath::Fast, "{:?}", b);
    }
}
