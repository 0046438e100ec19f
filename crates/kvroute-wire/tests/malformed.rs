//! Bad input: every malformed shape is a typed error, counted, and never a panic; load
//! telemetry documents decode to the values written in them.

use kvroute_testkit::msgpack::V;
use kvroute_wire::{
    ErrorKind, KvEvent, VllmLoadUpdate, VllmRankLoad, WireCounters, WireError, decode_load_stat,
    decode_payload, parse_sglang_loads, parse_vllm_metrics,
};
use serde::Serialize;

/// msgpack of any serde value, for building inputs (rmp-serde writes arrays for tuples).
fn mp<T: Serialize>(v: &T) -> Vec<u8> {
    rmp_serde::to_vec(v).unwrap()
}

fn stored(fields: usize) -> Vec<u8> {
    // ["BlockStored", [1], nil, [0..16], 16, nil, "GPU", nil, nil, 0, "full_attention", nil]
    let all: Vec<V> = vec![
        V::S("BlockStored"),
        V::A(vec![V::U(1)]),
        V::Nil,
        V::A((0..16).map(V::U).collect()),
        V::U(16),
        V::Nil,
        V::S("GPU"),
        V::Nil,
        V::Nil,
        V::U(0),
        V::S("full_attention"),
        V::Nil,
        V::Nil,
    ];
    let ev = V::A(all[..fields].to_vec());
    mp(&V::A(vec![V::F(1.5), V::A(vec![ev]), V::U(0)]))
}

#[test]
fn every_positional_generation_of_block_stored() {
    for n in 6..=12 {
        let b = decode_payload(&stored(n)).unwrap_or_else(|e| panic!("{n} fields: {e}"));
        let KvEvent::BlockStored(s) = &b.events[0] else {
            panic!()
        };
        assert_eq!(s.block_hashes[0].0, 1);
        assert_eq!(s.token_ids, (0..16).collect::<Vec<u32>>());
        assert_eq!(s.group_idx, if n >= 10 { Some(0) } else { None });
    }
    assert_eq!(
        decode_payload(&stored(5)),
        Err(WireError::TooFewFields {
            record: "BlockStored",
            got: 5,
            min: 6
        })
    );
    assert_eq!(
        decode_payload(&stored(13)),
        Err(WireError::TooManyFields {
            record: "BlockStored",
            got: 13,
            max: 12
        })
    );
}

#[test]
fn malformed_payloads_are_typed_and_counted() {
    use V;
    let c = WireCounters::new();
    let batch = |ev: V| mp(&V::A(vec![V::F(0.0), V::A(vec![ev]), V::Nil]));
    let cases: Vec<(Vec<u8>, ErrorKind)> = vec![
        (vec![], ErrorKind::Malformed),
        (vec![0xc1], ErrorKind::Malformed),
        (stored(12)[..20].to_vec(), ErrorKind::Malformed),
        (
            {
                let mut v = stored(7);
                v.push(0);
                v
            },
            ErrorKind::TrailingBytes,
        ),
        (mp(&V::A(vec![V::F(0.0)])), ErrorKind::TooFewFields),
        (mp(&V::S("x")), ErrorKind::Malformed),
        (batch(V::A(vec![])), ErrorKind::UnexpectedTag),
        (
            batch(V::A(vec![
                V::S("BlockRemoved"),
                V::A(vec![V::B(vec![1; 31])]),
            ])),
            ErrorKind::HashSize,
        ),
        (
            batch(V::A(vec![
                V::S("BlockStored"),
                V::A(vec![V::U(1)]),
                V::Nil,
                V::A(vec![V::U(1)]),
                V::U(16),
                V::Nil,
            ])),
            ErrorKind::TokenCount,
        ),
        (
            batch(V::A(vec![
                V::S("BlockStored"),
                V::A(vec![]),
                V::Nil,
                V::A(vec![]),
                V::I(-16),
                V::Nil,
            ])),
            ErrorKind::OutOfRange,
        ),
        (
            batch(V::A(vec![
                V::S("BlockStored"),
                V::A(vec![]),
                V::Nil,
                V::A(vec![V::I(-1)]),
                V::U(16),
                V::Nil,
            ])),
            ErrorKind::Malformed,
        ),
        (
            batch(V::A(vec![V::S("AllBlocksCleared"), V::Nil])),
            ErrorKind::TooManyFields,
        ),
        (
            mp(&V::A(vec![V::F(0.0), V::A(vec![]), V::I(-1)])),
            ErrorKind::OutOfRange,
        ),
    ];
    for (i, (bytes, kind)) in cases.iter().enumerate() {
        let e = c.decode_payload(bytes).expect_err(&format!("case {i}"));
        assert_eq!(e.kind(), *kind, "case {i}: {e}");
    }
    let s = c.stats();
    assert_eq!(s.total_errors(), cases.len() as u64);
    assert_eq!(s.batches, 0);
    // Absurd declared lengths do not allocate or panic: array32 header of 2^32-1 elements.
    let huge = [
        0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff,
    ];
    assert_eq!(
        decode_payload(&huge).unwrap_err().kind(),
        ErrorKind::Malformed
    );
    // Deep nesting stops at the depth limit.
    let mut deep = vec![0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x82, 0xa4];
    deep.extend_from_slice(b"type");
    deep.push(0xa1);
    deep.push(b'X');
    deep.push(0xa1);
    deep.push(b'z');
    deep.extend(std::iter::repeat_n(0x91, 100_000));
    assert_eq!(
        decode_payload(&deep).unwrap_err().kind(),
        ErrorKind::Malformed
    );
}

#[test]
fn unknown_event_tags_are_kept_not_fatal() {
    use V;
    let b = mp(&V::A(vec![
        V::F(0.0),
        V::A(vec![V::A(vec![V::S("Future"), V::U(1)])]),
    ]));
    let batch = decode_payload(&b).unwrap();
    assert_eq!(batch.dp_rank, None);
    assert_eq!(
        batch.events,
        vec![KvEvent::Unknown {
            tag: "Future".into()
        }]
    );
}

#[test]
fn vllm_prometheus_text() {
    let text = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5.0\n\
vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2.0\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 0.0\n\
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\",tp=\"1\"} 0.0\n\
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n\
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.5\n\
vllm:prompt_tokens_total{engine=\"0\"} 1e9\n\
weird{label=\"unterminated\n";
    assert_eq!(
        parse_vllm_metrics(7, text),
        Ok(VllmLoadUpdate {
            engine_id: 7,
            ranks: vec![
                VllmRankLoad {
                    dp_rank: 0,
                    num_requests_running: 3.0,
                    num_requests_waiting: 0.0,
                    kv_cache_usage: 0.25
                },
                VllmRankLoad {
                    dp_rank: 1,
                    num_requests_running: 5.0,
                    num_requests_waiting: 2.0,
                    kv_cache_usage: 0.5
                },
            ]
        })
    );
    // Older name, no engine label: rank 0.
    let old = "vllm:num_requests_running 1\nvllm:num_requests_waiting 4\nvllm:gpu_cache_usage_perc 0.75\n";
    let u = parse_vllm_metrics(1, old).unwrap();
    assert_eq!(u.ranks.len(), 1);
    assert_eq!(
        (
            u.ranks[0].dp_rank,
            u.ranks[0].num_requests_waiting,
            u.ranks[0].kv_cache_usage
        ),
        (0, 4.0, 0.75)
    );
    assert_eq!(
        parse_vllm_metrics(1, "vllm:num_requests_running 1\n"),
        Err(WireError::MissingMetric {
            dp_rank: 0,
            metric: "vllm:num_requests_waiting"
        })
    );
    assert_eq!(
        parse_vllm_metrics(
            1,
            "vllm:num_requests_running{engine=\"0\",tp=\"0\"} 1\nvllm:num_requests_running{engine=\"0\",tp=\"1\"} 2\n"
        ),
        Err(WireError::ConflictingSamples {
            dp_rank: 0,
            metric: "vllm:num_requests_running"
        })
    );
    assert_eq!(
        parse_vllm_metrics(1, "# nothing\n"),
        Err(WireError::NoRanks)
    );
    assert_eq!(
        parse_vllm_metrics(1, "vllm:num_requests_running{engine=\"0\" 1\n")
            .unwrap_err()
            .kind(),
        ErrorKind::Prometheus
    );
    // An `engine` label that is a number but not a rank, and one that is no number (which
    // must not be reported as some made-up number).
    assert_eq!(
        parse_vllm_metrics(1, "vllm:num_requests_running{engine=\"-3\"} 1\n"),
        Err(WireError::OutOfRange {
            field: "engine",
            value: -3,
            valid: "0..=4294967295"
        })
    );
    assert_eq!(
        parse_vllm_metrics(1, "vllm:num_requests_running{engine=\"-3\"} 1\n")
            .unwrap_err()
            .to_string(),
        "engine = -3 is out of range 0..=4294967295"
    );
    assert_eq!(
        parse_vllm_metrics(1, "vllm:num_requests_running{engine=\"a\"} 1\n"),
        Err(WireError::Prometheus {
            line: 1,
            detail: "the `engine` label is not a DP rank number"
        })
    );
}

#[test]
fn sglang_loads_json() {
    let doc = r#"{"timestamp": 1700000000.5, "dp_rank_count": 2, "loads": [
        {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "num_waiting_uncached_tokens": 4096,
         "num_used_tokens": 1000, "max_total_num_tokens": 100000, "token_usage": 0.01,
         "gen_throughput": 812.5, "utilization": 0.5, "max_running_requests": 32, "extra": [1]},
        {"dp_rank": 1, "num_running_reqs": 0, "num_waiting_reqs": 0, "num_waiting_uncached_tokens": 0,
         "num_used_tokens": 0, "max_total_num_tokens": 100000, "token_usage": 0.0,
         "gen_throughput": 0.0, "utilization": 0.0, "max_running_requests": 32, "timestamp": 1700000001.0}]}"#;
    let r = parse_sglang_loads(9, doc).unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(
        (
            r[0].engine_id,
            r[0].dp_rank,
            r[0].num_running_reqs,
            r[0].num_waiting_uncached_tokens
        ),
        (9, 0, 3, 4096)
    );
    assert_eq!(
        (r[0].gen_throughput, r[0].timestamp),
        (812.5, 1_700_000_000.5)
    );
    assert_eq!((r[1].dp_rank, r[1].timestamp), (1, 1_700_000_001.0));
    assert!(r[0].to_sample().is_ok());
    assert_eq!(parse_sglang_loads(9, "[]"), Err(WireError::NoRanks));
    assert_eq!(
        parse_sglang_loads(9, "{").unwrap_err().kind(),
        ErrorKind::Malformed
    );
    let missing = r#"[{"dp_rank": 0, "num_running_reqs": 3}]"#;
    assert_eq!(
        parse_sglang_loads(9, missing).unwrap_err().kind(),
        ErrorKind::Malformed
    );
}

#[test]
fn sglang_load_stat_frames() {
    use V;
    let f = mp(&V::A(vec![
        V::S("LoadStat"),
        V::U(3),
        V::U(4),
        V::U(500),
        V::U(1000),
        V::U(2),
    ]));
    let s = decode_load_stat(&f).unwrap();
    assert_eq!(
        (
            s.running,
            s.waiting,
            s.num_tokens,
            s.max_total_num_tokens,
            s.dp_rank
        ),
        (3, 4, 500, 1000, 2)
    );
    let sample = s.to_sample(5, 32).unwrap();
    assert_eq!(
        (
            sample.running,
            sample.waiting,
            sample.max_running,
            sample.kv_usage
        ),
        (3, 4, 32, 0.5)
    );
    assert_eq!(sample.active_decode_tokens, Some(500));
    let short = mp(&V::A(vec![
        V::S("LoadStat"),
        V::U(3),
        V::U(4),
        V::U(500),
        V::U(1000),
    ]));
    assert_eq!(
        decode_load_stat(&short),
        Err(WireError::TooFewFields {
            record: "LoadStat",
            got: 5,
            min: 6
        })
    );
    // SGLang 0.5.23 appends five fields after the sixth; they are ignored.
    let long = mp(&V::A(vec![
        V::S("LoadStat"),
        V::U(3),
        V::U(4),
        V::U(500),
        V::U(1000),
        V::U(1),
        V::U(77),
        V::U(900),
        V::U(32),
        V::U(12345),
        V::U(6789),
    ]));
    let st = decode_load_stat(&long).unwrap();
    assert_eq!(
        (st.running, st.waiting, st.num_tokens, st.dp_rank),
        (3, 4, 500, 1)
    );
    let tag = mp(&V::A(vec![V::S("Other"), V::U(3)]));
    assert_eq!(
        decode_load_stat(&tag).unwrap_err().kind(),
        ErrorKind::UnexpectedTag
    );
    let over = mp(&V::A(vec![
        V::S("LoadStat"),
        V::U(3),
        V::U(4),
        V::U(2000),
        V::U(1000),
        V::U(0),
    ]));
    assert!(decode_load_stat(&over).unwrap().to_sample(5, 32).is_err());
}
