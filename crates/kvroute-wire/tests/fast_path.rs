//! The decoder's fast path (a hand-written msgpack reader for the common shapes) against
//! hand-computed batches and against the serde reader (`decode_payload_serde`): payloads
//! in every long form of the msgpack markers, the shapes it hands to serde, every encoded
//! example of the shared data and every batch of the real vLLM and SGLang streams. Each
//! test also checks which reader ran, so a fast path that always fell back would fail.

mod support;

use kvroute_core::EngineHash;
use kvroute_testkit::stream::{Engine, records};
use kvroute_wire::{
    BlockRemoved, BlockStored, DecodePath, ErrorKind, EventEncoding, ExtraKey, KvEvent,
    KvEventBatch, Medium, WireCounters, WireError, decode_payload, decode_payload_serde,
    decode_payload_traced,
};
use serde_json::Value;
use support::encode::{M, Width, a, map, s, u};
use support::{data_file, unhex};

/// Decodes through the fast path and through serde: both must agree (as Debug text, so a
/// NaN timestamp compares equal to itself); returns the result and the reader that ran.
fn both(bytes: &[u8]) -> (Result<KvEventBatch, WireError>, DecodePath) {
    let (got, path) = decode_payload_traced(bytes);
    let reference = decode_payload_serde(bytes);
    assert_eq!(
        format!("{got:?}"),
        format!("{reference:?}"),
        "bytes {bytes:02x?}"
    );
    assert_eq!(format!("{:?}", decode_payload(bytes)), format!("{got:?}"));
    (got, path)
}

fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32], block_size: u32) -> BlockStored {
    BlockStored {
        encoding: EventEncoding::Positional(0),
        ..BlockStored::device(
            hashes.iter().map(|&h| EngineHash(h)).collect(),
            parent.map(EngineHash),
            tokens.to_vec(),
            block_size,
        )
    }
}

/// Positional events and the batch in the long forms canonical encoders never write.
#[test]
fn long_forms_of_positional_events() {
    let mut digest = vec![0xaa; 32];
    digest[24..].copy_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
    let store = M::A(
        vec![
            M::S("BlockStored".into(), Width::W8),
            M::A(vec![M::I(5, Width::W8), M::I(-3, Width::Short)], Width::W16),
            M::U(9, Width::W64),
            M::A(
                vec![
                    M::U(1, Width::W32),
                    M::U(200, Width::W16),
                    M::U(70_000, Width::W32),
                    M::U(3, Width::W8),
                ],
                Width::W32,
            ),
            M::U(2, Width::W16),
            M::Nil,
            M::S("CPU".into(), Width::W16),
            // SGLang's trailing metadata map, with a key this decoder does not read.
            // A repeated key's last value counts, nil included.
            M::Map(
                vec![
                    (s("cache_salt"), s("salt")),
                    (s("other"), a(vec![a(vec![M::Nil]), M::F32(0.5)])),
                    (s("lora_name"), s("adapter")),
                    (s("cache_salt"), M::Nil),
                ],
                Width::W16,
            ),
        ],
        Width::W16,
    );
    let remove = a(vec![
        s("BlockRemoved"),
        a(vec![M::B(digest, Width::W32)]),
        M::Nil,
        M::U(0, Width::W32),
    ]);
    let unknown = a(vec![s("SomethingNew"), u(1), a(vec![u(2)])]);
    let clear = a(vec![M::S("AllBlocksCleared".into(), Width::W32)]);
    let payload = M::A(
        vec![
            M::F64(1.5),
            M::A(vec![store, remove, unknown, clear], Width::W32),
            M::I(2, Width::W8),
        ],
        Width::W16,
    )
    .encode();
    let (got, path) = both(&payload);
    assert_eq!(path, DecodePath::Fast);
    let want = KvEventBatch {
        ts: 1.5,
        dp_rank: Some(2),
        events: vec![
            KvEvent::BlockStored(BlockStored {
                medium: Medium::Host,
                lora_name: Some("adapter".into()),
                encoding: EventEncoding::Positional(8),
                ..stored(&[5, (-3i64) as u64], Some(9), &[1, 200, 70_000, 3], 2)
            }),
            KvEvent::BlockRemoved(BlockRemoved {
                block_hashes: vec![EngineHash(0x102)],
                medium: Medium::Gpu,
                group_idx: Some(0),
                encoding: EventEncoding::Positional(4),
            }),
            KvEvent::Unknown {
                tag: "SomethingNew".into(),
            },
            KvEvent::AllBlocksCleared,
        ],
    };
    assert_eq!(got, Ok(want));
}

/// A map batch of a named event: unknown keys (nested values, one not UTF-8) skipped, a
/// repeated key's last value kept, every kind of extra key, SGLang's `page_size` and
/// `attn_dp_rank`.
#[test]
fn named_events_with_unknown_and_repeated_keys() {
    let extra = a(vec![
        s("a"),
        u(1),
        M::I(-1, Width::W16),
        M::Bool(true),
        M::B(vec![1, 2], Width::W8),
        M::Nil,
        M::F64(0.5),
        a(vec![u(1), a(vec![u(2)])]),
        map(vec![]),
    ]);
    let event = M::Map(
        vec![
            (s("type"), s("BlockStored")),
            (s("page_size"), u(1)),
            (s("block_hashes"), a(vec![u(7)])),
            (s("token_ids"), a(vec![M::U(42, Width::W32)])),
            (
                s("locality"),
                map(vec![("x", a(vec![u(1), M::F64(2.5), s("y")]))]),
            ),
            (s("medium"), s("GPU")),
            // A key that is not UTF-8: unknown to both readers.
            (M::SBytes(vec![0x74, 0xff], Width::Short), u(1)),
            (s("medium"), s("DISK")),
            (s("extra_keys"), a(vec![extra, M::Nil])),
            (s("lora_name"), M::Nil),
            (s("group_idx"), u(1)),
            (s("kv_cache_spec_kind"), s("sliding_window")),
            (s("kv_cache_spec_sliding_window"), M::U(128, Width::W16)),
        ],
        Width::W16,
    );
    let payload = map(vec![
        ("attn_dp_rank", u(1)),
        ("ts", M::F64(2.0)),
        ("other", map(vec![("k", a(vec![M::Nil]))])),
        ("events", a(vec![event])),
    ])
    .encode();
    let (got, path) = both(&payload);
    assert_eq!(path, DecodePath::Fast);
    let keys = vec![
        ExtraKey::Str("a".into()),
        ExtraKey::Int(1),
        ExtraKey::Int(-1),
        ExtraKey::Int(1),
        ExtraKey::Bytes(vec![1, 2]),
        ExtraKey::Nil,
        ExtraKey::Float(0.5),
        ExtraKey::List(vec![
            ExtraKey::Int(1),
            ExtraKey::List(vec![ExtraKey::Int(2)]),
        ]),
        ExtraKey::Nested,
    ];
    let want = KvEventBatch {
        ts: 2.0,
        dp_rank: Some(1),
        events: vec![KvEvent::BlockStored(BlockStored {
            medium: Medium::Disk,
            extra_keys: Some(vec![Some(keys), None]),
            group_idx: Some(1),
            kv_cache_spec_kind: Some("sliding_window".into()),
            kv_cache_spec_sliding_window: Some(128),
            encoding: EventEncoding::Named,
            ..stored(&[7], None, &[42], 1)
        })],
    };
    assert_eq!(got, Ok(want));
}

/// Nesting in a value the decoder skips: the fast path follows 16 levels of containers
/// (the batch array is level 1), serde 31 (`MAX_DEPTH` 32); past 16 the payload goes to
/// serde, which decodes it up to its own limit and rejects it past that.
#[test]
fn deep_nesting_in_skipped_values() {
    for depth in 1..=40usize {
        // `[1.0, [], 0, <depth nested arrays around nil>]`: the batch is level 1.
        let mut bytes = vec![0x94, 0xcb];
        bytes.extend(1.0f64.to_be_bytes());
        bytes.extend([0x90, 0x00]);
        bytes.extend(vec![0x91; depth]);
        bytes.push(0xc0);
        let (got, path) = both(&bytes);
        let levels = depth + 1;
        let want_path = if levels <= 16 {
            DecodePath::Fast
        } else {
            DecodePath::Serde
        };
        assert_eq!(path, want_path, "depth {depth}");
        if levels < 32 {
            // Four elements: a batch has at most three.
            let four = WireError::TooManyFields {
                record: "batch",
                got: 4,
                max: 3,
            };
            assert_eq!(got, Err(four), "depth {depth}");
        } else {
            assert_eq!(
                got.unwrap_err().kind(),
                ErrorKind::Malformed,
                "depth {depth}"
            );
        }
    }
}

/// One store of one block of one token, in a `[ts, [event], 0]` batch, with `tokens` in
/// place of the token array.
fn one_store(ts: M, tokens: M) -> Vec<u8> {
    let ev = a(vec![
        s("BlockStored"),
        a(vec![u(1)]),
        M::Nil,
        tokens,
        u(1),
        M::Nil,
    ]);
    a(vec![ts, a(vec![ev]), u(0)]).encode()
}

/// Encodings the fast path does not read go to serde, which decodes them (values by hand).
#[test]
fn unusual_encodings_are_read_by_serde() {
    let batch = |ts: f64, token: u32| KvEventBatch {
        ts,
        dp_rank: Some(0),
        events: vec![KvEvent::BlockStored(BlockStored {
            encoding: EventEncoding::Positional(6),
            ..stored(&[1], None, &[token], 1)
        })],
    };
    // A timestamp sent as an integer.
    let (got, path) = both(&one_store(u(7), a(vec![u(3)])));
    assert_eq!((got, path), (Ok(batch(7.0, 3)), DecodePath::Serde));
    // A timestamp sent as `float 32`.
    let (got, path) = both(&one_store(M::F32(0.25), a(vec![u(3)])));
    assert_eq!((got, path), (Ok(batch(0.25, 3)), DecodePath::Serde));
    // A token id in a signed form.
    let (got, path) = both(&one_store(M::F64(1.0), a(vec![M::I(5, Width::W8)])));
    assert_eq!((got, path), (Ok(batch(1.0, 5)), DecodePath::Serde));
    // A token id in `uint 64` that fits 32 bits.
    let (got, path) = both(&one_store(M::F64(1.0), a(vec![M::U(9, Width::W64)])));
    assert_eq!((got, path), (Ok(batch(1.0, 9)), DecodePath::Serde));
}

/// Malformed payloads go to serde and get serde's error.
#[test]
fn malformed_payloads_get_the_serde_error() {
    let good = one_store(M::F64(1.0), a(vec![u(3)]));
    assert_eq!(both(&good).1, DecodePath::Fast);
    let malformed = |bytes: &[u8]| {
        let (got, path) = both(bytes);
        assert_eq!(path, DecodePath::Serde);
        got.unwrap_err()
    };
    // A negative and an oversized token id.
    for token in [M::I(-1, Width::Short), M::U(1 << 32, Width::Short)] {
        let e = malformed(&one_store(M::F64(1.0), a(vec![token])));
        assert_eq!(e.kind(), ErrorKind::Malformed, "{e}");
    }
    // A `lora_id` past `i64::MAX`, positional and named.
    let huge = M::U(1 << 63, Width::W64);
    let ev = a(vec![
        s("BlockStored"),
        a(vec![u(1)]),
        M::Nil,
        a(vec![u(3)]),
        u(1),
        huge.clone(),
    ]);
    let named = map(vec![
        ("type", s("BlockStored")),
        ("block_hashes", a(vec![u(1)])),
        ("token_ids", a(vec![u(3)])),
        ("block_size", u(1)),
        ("lora_id", huge),
    ]);
    for ev in [ev, named] {
        let e = malformed(&a(vec![M::F64(1.0), a(vec![ev]), u(0)]).encode());
        assert_eq!(e.kind(), ErrorKind::Malformed, "{e}");
    }
    // Truncated anywhere.
    for cut in 0..good.len() {
        let e = malformed(&good[..cut]);
        assert_eq!(e.kind(), ErrorKind::Malformed, "cut at {cut}: {e}");
    }
    // Trailing bytes.
    let mut long = good.clone();
    long.extend([0xc0, 0xc0]);
    assert_eq!(malformed(&long), WireError::TrailingBytes { len: 2 });
    // An extension where a medium string belongs.
    let ev = a(vec![
        s("BlockRemoved"),
        a(vec![u(1)]),
        M::Ext(1, vec![0; 4]),
    ]);
    let e = malformed(&a(vec![M::F64(1.0), a(vec![ev]), u(0)]).encode());
    assert_eq!(e.kind(), ErrorKind::Malformed, "{e}");
}

/// A binary block hash whose declared length runs past the end of the payload is malformed
/// for both readers, whatever follows its header: here the header `bin 16` of length
/// 0xcd30 swallows a `uint 16` hash's marker, and the bytes after it (`0x30 0x39`, the rest
/// of that hash) would read as a valid positive fixint hash and a valid event if the fast
/// path resumed at the length instead of giving up.
#[test]
fn a_binary_hash_longer_than_the_payload_is_malformed_for_both_readers() {
    for named in [false, true] {
        let hashes = a(vec![M::U(0x3039, Width::W16)]);
        let ev = if named {
            map(vec![("type", s("BlockRemoved")), ("block_hashes", hashes)])
        } else {
            a(vec![s("BlockRemoved"), hashes])
        };
        let good = a(vec![M::F64(1.0), a(vec![ev]), u(0)]).encode();
        let at = good
            .windows(3)
            .position(|w| w == [0xcd, 0x30, 0x39])
            .expect("the hash's uint 16 form");
        let mut bad = good.clone();
        bad.insert(at, 0xc5);
        let (got, path) = both(&bad);
        assert_eq!(path, DecodePath::Serde, "named {named}");
        assert_eq!(
            got.unwrap_err().kind(),
            ErrorKind::Malformed,
            "named {named}"
        );
    }
}

/// A NaN or infinite batch timestamp is rejected by both readers, with its bits in the error
/// and the counter of its kind raised; the largest finite value still decodes.
#[test]
fn non_finite_timestamps_are_rejected() {
    let counters = WireCounters::default();
    for ts in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        for encoded in [M::F64(ts), M::F32(ts as f32)] {
            let (got, _) = both(&one_store(encoded, a(vec![u(3)])));
            let e = counters.record(got).unwrap_err();
            // `f32` widens to the same `f64` value: NaN stays NaN, infinities stay infinite.
            let bits = match e {
                WireError::NonFiniteTimestamp { bits } => bits,
                other => panic!("{ts}: {other}"),
            };
            let back = f64::from_bits(bits);
            assert!(
                back.is_nan() == ts.is_nan() && (ts.is_nan() || back == ts),
                "{ts}"
            );
        }
    }
    assert_eq!(
        counters.stats().errors.get(ErrorKind::NonFiniteTimestamp),
        6
    );
    let (got, path) = both(&one_store(M::F64(f64::MAX), a(vec![u(3)])));
    assert_eq!((got.unwrap().ts, path), (f64::MAX, DecodePath::Fast));
}

/// Every encoded example of the shared data: the fast path reads it, with serde's result.
#[test]
fn shared_examples_take_the_fast_path() {
    for file in ["engine_examples.json", "examples.json"] {
        let Some(path) = data_file(&format!("kv_events/{file}")) else {
            return;
        };
        let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let examples = all.as_object().unwrap();
        assert!(examples.len() >= 4, "{file}: {} examples", examples.len());
        for (name, ex) in examples {
            let payload = unhex(ex["payload_hex"].as_str().unwrap());
            let (got, path) = both(&payload);
            assert!(got.is_ok(), "{file} {name}: {got:?}");
            assert_eq!(path, DecodePath::Fast, "{file} {name}");
        }
    }
}

/// Every single-byte edit of every encoded example of the shared data (each byte replaced
/// by each other value, deleted, or preceded by each value): both readers give the same
/// result or the same error. Exhaustive where random mutation only samples: a header whose
/// declared length runs past the end, an integer marker turned into a string marker, a
/// container count off by one, at every position of every real shape.
#[test]
fn every_single_byte_edit_of_the_shared_examples_decodes_alike() {
    let mut edits = 0u64;
    for file in ["engine_examples.json", "examples.json"] {
        let Some(path) = data_file(&format!("kv_events/{file}")) else {
            return;
        };
        let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for ex in all.as_object().unwrap().values() {
            let payload = unhex(ex["payload_hex"].as_str().unwrap());
            let mut edited = Vec::with_capacity(payload.len() + 1);
            for i in 0..payload.len() {
                for v in 0..=u8::MAX {
                    for insert in [false, true] {
                        if !insert && v == payload[i] {
                            continue;
                        }
                        edited.clear();
                        edited.extend_from_slice(&payload[..i]);
                        edited.push(v);
                        edited.extend_from_slice(&payload[i + usize::from(!insert)..]);
                        let _ = both(&edited);
                        edits += 1;
                    }
                }
                edited.clear();
                edited.extend_from_slice(&payload[..i]);
                edited.extend_from_slice(&payload[i + 1..]);
                let _ = both(&edited);
                edits += 1;
            }
        }
    }
    assert!(edits > 100_000, "{edits} edits");
}

/// Every batch of a real engine stream: the fast path reads it, with serde's result.
fn stream_takes_the_fast_path(engine: Engine) {
    let Some(path) = data_file(engine.stream_file()) else {
        return;
    };
    let counters = WireCounters::new();
    for rec in records(&path).filter(|r| r.kind == "batch") {
        let payload = rec.payload();
        let got = counters.decode_payload(&payload);
        let reference = decode_payload_serde(&payload);
        assert_eq!(got, reference, "batch {:?}", rec.seq);
    }
    let stats = counters.stats();
    assert!(stats.batches > 900, "{engine:?}: {} batches", stats.batches);
    assert_eq!((stats.fast_reads, stats.serde_reads), (stats.batches, 0));
    assert_eq!(stats.total_errors(), 0);
}

#[test]
fn vllm_stream_takes_the_fast_path() {
    stream_takes_the_fast_path(Engine::Vllm);
}

#[test]
fn sglang_stream_takes_the_fast_path() {
    stream_takes_the_fast_path(Engine::Sglang);
}
