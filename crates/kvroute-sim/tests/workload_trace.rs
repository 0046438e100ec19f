//! The Mooncake trace reader: hand-written lines, typed errors with line numbers, and the
//! real conversation trace (skipped with a notice when the shared data is absent).

use std::io::Cursor;

use kvroute_sim::PromptSpec;
use kvroute_sim::workload::trace::{TraceError, TraceOptions, load_trace, read_trace};

fn opts(rate_scale: f64) -> TraceOptions {
    TraceOptions {
        engines: 4,
        rate_scale,
        ..Default::default()
    }
}

fn read(text: &str, o: &TraceOptions) -> Result<kvroute_sim::workload::Workload, TraceError> {
    read_trace(Cursor::new(text), "t", o).map(|(w, _)| w)
}

const GOOD: &str = r#"{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 3000, "input_length": 512, "output_length": 7, "hash_ids": [0], "extra": true}
"#;

#[test]
fn lines_become_trace_block_requests() {
    let (w, stats) = read_trace(Cursor::new(GOOD), "t", &opts(2.0)).unwrap();
    assert_eq!(stats.lines, 3);
    assert_eq!(stats.blank_lines, 1);
    assert_eq!(stats.requests, 2);
    assert_eq!(w.fleet.engines, 4);
    assert_eq!(w.requests.len(), 2);
    let r = &w.requests[1];
    assert_eq!(r.id, 1);
    // 3,000 ms at rate scale 2 → 1.5 s.
    assert_eq!(r.arrival_s, 1.5);
    assert_eq!(r.output_tokens, 7);
    assert!(r.follows.is_none() && r.pinned.is_none());
    let r0 = &w.requests[0];
    assert_eq!(r0.prompt.len(), 600);
    let mut toks = Vec::new();
    r0.prompt.tokens_into(&mut toks);
    // Block 0: tokens 0..512; block 1: 512..600 (cut at input_length).
    let want: Vec<u32> = (0..600).collect();
    assert_eq!(toks, want);
    assert!(matches!(&r0.prompt, PromptSpec::TraceBlocks { hash_ids, .. } if **hash_ids == [0, 1]));
}

#[test]
fn limit_keeps_the_first_requests() {
    let o = TraceOptions {
        limit: Some(1),
        ..opts(1.0)
    };
    assert_eq!(read(GOOD, &o).unwrap().requests.len(), 1);
}

#[test]
fn bad_json_names_its_line() {
    let text = format!("{GOOD}{{\"timestamp\": 5, \"input_length\": 1\n");
    let e = read(&text, &opts(1.0)).unwrap_err();
    assert!(matches!(e, TraceError::Json { line: 4, .. }), "{e}");
    assert_eq!(e.line(), Some(4));
    assert!(e.to_string().starts_with("line 4:"));
}

#[test]
fn missing_or_mistyped_keys_are_json_errors() {
    for bad in [
        r#"{"timestamp": 0, "input_length": 10, "hash_ids": [0]}"#,
        r#"{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [0]}"#,
        r#"{"timestamp": 0, "input_length": "10", "output_length": 1, "hash_ids": [0]}"#,
        "[1, 2, 3",
    ] {
        let e = read(bad, &opts(1.0)).unwrap_err();
        assert!(matches!(e, TraceError::Json { line: 1, .. }), "{bad}: {e}");
    }
}

#[test]
fn block_count_must_cover_the_prompt_exactly() {
    // 1,025 tokens need ⌈1025/512⌉ = 3 blocks.
    let short = r#"{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [0, 1]}"#;
    let e = read(short, &opts(1.0)).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::BlockCount {
                line: 1,
                expected: 3,
                got: 2
            }
        ),
        "{e}"
    );
    let long = format!(
        "{}\n{}",
        GOOD.lines().next().unwrap(),
        r#"{"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [0, 1]}"#
    );
    let e = read(&long, &opts(1.0)).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::BlockCount {
                line: 2,
                expected: 1,
                got: 2
            }
        ),
        "{e}"
    );
}

#[test]
fn zero_lengths_and_time_going_backwards_are_rejected() {
    let e = read(
        r#"{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}"#,
        &opts(1.0),
    )
    .unwrap_err();
    assert!(matches!(e, TraceError::EmptyLength { line: 1 }), "{e}");
    let e = read(
        r#"{"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [3]}"#,
        &opts(1.0),
    )
    .unwrap_err();
    assert!(matches!(e, TraceError::EmptyLength { line: 1 }), "{e}");
    let back = r#"{"timestamp": 10, "input_length": 5, "output_length": 1, "hash_ids": [3]}
{"timestamp": 9, "input_length": 5, "output_length": 1, "hash_ids": [3]}"#;
    let e = read(back, &opts(1.0)).unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::TimeBackwards {
                line: 2,
                previous_ms: 10,
                timestamp_ms: 9
            }
        ),
        "{e}"
    );
}

#[test]
fn invalid_options_are_rejected_before_reading() {
    for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = read(GOOD, &opts(scale)).unwrap_err();
        assert!(matches!(e, TraceError::Options(_)), "{scale}: {e}");
        assert_eq!(e.line(), None);
    }
    let o = TraceOptions {
        engines: 0,
        ..opts(1.0)
    };
    assert!(matches!(read(GOOD, &o), Err(TraceError::Options(_))));
}

#[test]
fn missing_file_is_an_io_error() {
    let e = load_trace(std::path::Path::new("no/such/trace.jsonl"), &opts(1.0)).unwrap_err();
    assert!(matches!(e, TraceError::Io { line: 0, .. }), "{e}");
}

#[test]
fn real_conversation_trace() {
    let Some(path) = kvroute_testkit::data_file("traces/mooncake_conversation_trace.jsonl") else {
        return;
    };
    let (w, stats) = load_trace(&path, &opts(4.0)).unwrap();
    // Figures of shared/data/README.md and of a separate count over the file: 12,031
    // requests, last timestamp 3,536,999 ms, 144,793,823 input and 4,122,048 output
    // tokens, every prompt starting with block 0.
    assert_eq!(stats.requests, 12_031);
    assert_eq!(stats.blank_lines, 0);
    assert_eq!(w.name, "mooncake_conversation_trace");
    assert!((w.requests.last().unwrap().arrival_s - 3_536.999 / 4.0).abs() < 1e-9);
    let input: u64 = w.requests.iter().map(|r| u64::from(r.prompt.len())).sum();
    let output: u64 = w.requests.iter().map(|r| u64::from(r.output_tokens)).sum();
    assert_eq!(input, 144_793_823);
    assert_eq!(output, 4_122_048);
    assert!(w.requests.iter().all(|r| matches!(&r.prompt,
        PromptSpec::TraceBlocks { hash_ids, .. } if hash_ids[0] == 0)));
}
