//! The table, the JSON document and the SVG plots, on hand-built runs.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kvroute_sim::report::{PolicyRun, RunSettings, WorkloadRuns, json, svg, table};
use kvroute_sim::{EngineSample, RequestRecord, RunResult};

/// A run on `engines` engines: engine 0 runs `max_running` requests at every sample, the
/// others one; requests `i` (routed) arrive at `i` s and get their first token after
/// `(i + 1) / 10` s, finishing 1 s after arrival with 10 output tokens.
fn run(engines: u32, max_running: u32, requests: u64) -> RunResult {
    let mut samples = Vec::new();
    for t in 0..5 {
        for e in 0..engines {
            samples.push(EngineSample {
                t_s: f64::from(t),
                engine: e,
                running: if e == 0 { max_running } else { 1 },
                waiting: t * e,
                kv_usage: 0.25,
            });
        }
    }
    RunResult {
        workload: "w".into(),
        policy: "p".into(),
        engines,
        end_s: 5.0,
        requests: (0..requests)
            .map(|i| RequestRecord {
                id: i,
                engine: Some((i % u64::from(engines)) as u32),
                pinned: false,
                arrival_s: i as f64,
                first_token_s: Some(i as f64 + (i + 1) as f64 / 10.0),
                finish_s: Some(i as f64 + 1.0),
                prompt_tokens: 100,
                cached_tokens: 50,
                predicted_cached_tokens: 50,
                output_tokens: 10,
                rejections: 0,
                reason: "least_load".into(),
            })
            .collect(),
        samples,
        generated_tokens: vec![0; engines as usize],
        decisions_by_reason: BTreeMap::from([("least_load".into(), requests)]),
        ..Default::default()
    }
}

fn runs(engines: u32, labels: &[&str]) -> WorkloadRuns {
    WorkloadRuns {
        name: format!("w{engines}"),
        description: "test workload".into(),
        engines,
        max_running: 4,
        routed_requests: 3,
        settings: RunSettings::default(),
        runs: labels
            .iter()
            .map(|l| PolicyRun::new(l, run(engines, 4, 3)))
            .collect(),
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvroute-sim-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn layout_aligns_columns() {
    let rows = vec![
        vec!["xxx".to_string(), "1".to_string()],
        vec!["y".to_string(), "22".to_string()],
    ];
    // Widths 3 and 2, two spaces between; first column left-aligned, the rest right.
    assert_eq!(
        table::layout(&["a", "bb"], &rows),
        "a    bb\n-------\nxxx   1\ny    22\n"
    );
}

#[test]
fn row_cells_are_the_metrics() {
    let w = runs(2, &["least_load"]);
    let cells = table::row(&w.runs[0].metrics);
    // 3 requests × 10 tokens over 0 → 3 s (last finish) = 10 tok/s; TTFT {0.1, 0.2, 0.3};
    // E2E all 1 s; hit 50/100; engine 0 mean running 4, engine 1 1 → imbalance 4, CV of
    // {4, 1} = 1.5 / 2.5 = 0.6; most waiting 3 (engine 1 at t = 3, the window's last
    // sample: the last finish is at 3 s); both engines busy at every sample; engine 0 served requests 0 and 2 (20 tokens), engine 1 request 1 (10).
    let want = [
        "least_load",
        "3/3",
        "10",
        "0.20",
        "0.30",
        "0.30",
        "1.00",
        "1.00",
        "50.0",
        "0.0",
        "4.00",
        // Engine 1 has a waiting request at t = 1, 2, 3 (of the window's t = 0..3): the
        // imbalance over those instants is 4 too.
        "4.00",
        "0.60",
        "3",
        "2.0 (2)",
        "33.3/66.7",
        "0",
    ];
    assert_eq!(cells, want);
    assert_eq!(cells.len(), table::COLUMNS.len());
}

#[test]
fn rendered_table_has_one_aligned_row_per_policy() {
    let w = runs(
        2,
        &["least_load", "load_aware:0.5", "projected_time:shadow"],
    );
    let text = w.table();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].contains("w2") && lines[0].contains("2 engines"));
    // Header, rule, then one row per policy, all as wide as the rule (the last column is
    // right-aligned, so every line ends at the same place).
    let width = lines[2].len();
    assert!(lines[2].chars().all(|c| c == '-'));
    for (i, label) in ["least_load", "load_aware:0.5", "projected_time:shadow"]
        .iter()
        .enumerate()
    {
        assert!(lines[3 + i].starts_with(label));
        assert_eq!(lines[3 + i].len(), width, "{}", lines[3 + i]);
    }
    assert_eq!(lines[1].len(), width);
    assert!(text.contains("least_load=3"));
}

/// The settings a run was made with are in its table's title and in its JSON workload
/// entry, in the order seed, rate scale, telemetry, engine, predicted residency TTL,
/// KV-bound switch, fault program; a run that recorded none has the plain title and no such keys.
#[test]
fn title_and_json_record_the_run_settings() {
    let plain = runs(2, &["kv_aware"]);
    assert!(
        plain
            .table()
            .starts_with("== w2: 2 engines, 3 routed requests ==\n"),
        "{}",
        plain.table()
    );
    let mut set = runs(2, &["kv_aware"]);
    set.settings = RunSettings {
        seed: Some(7),
        rate_scale: Some(0.5),
        telemetry: Some("full".into()),
        engine: Some("llama-8b-h100".into()),
        predicted_ttl_ms: Some(2_500),
        kv_bound_usage: Some(0.75),
        faults: Some("f.json".into()),
    };
    assert!(
        set.table().starts_with(
            "== w2: 2 engines, 3 routed requests (seed 7, rate scale 0.5, telemetry full, \
             engine llama-8b-h100, predicted TTL 2500 ms, KV-bound usage 0.75, faults f.json) \
             ==\n"
        ),
        "{}",
        set.table()
    );
    let doc = serde_json::to_value(json::document(7, &[plain, set])).unwrap();
    let w = &doc["workloads"];
    for key in [
        "seed",
        "rate_scale",
        "telemetry",
        "engine",
        "predicted_ttl_ms",
        "kv_bound_usage",
        "faults",
    ] {
        assert!(w[0].get(key).is_none(), "{key} in {}", w[0]);
    }
    assert_eq!(w[1]["seed"], 7);
    assert_eq!(w[1]["rate_scale"], 0.5);
    assert_eq!(w[1]["telemetry"], "full");
    assert_eq!(w[1]["engine"], "llama-8b-h100");
    assert_eq!(w[1]["predicted_ttl_ms"], 2_500);
    // 0.75 is exact in f32, so it reads back as the same f64.
    assert_eq!(w[1]["kv_bound_usage"], 0.75);
    assert_eq!(w[1]["faults"], "f.json");
}

#[test]
fn json_document_holds_metrics_and_series() {
    let dir = scratch("json");
    let path = dir.join("out.json");
    json::write(&path, 9, &[runs(2, &["kv_aware"])]).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["seed"], 9);
    let w = &v["workloads"][0];
    assert_eq!(w["name"], "w2");
    let r = &w["runs"][0];
    assert_eq!(r["policy"], "kv_aware");
    // 1 + 0.2 − 1 in floating point.
    assert!((r["metrics"]["ttft"]["p50"].as_f64().unwrap() - 0.2).abs() < 1e-12);
    assert_eq!(r["metrics"]["imbalance"], 4.0);
    assert_eq!(
        r["engines"][1]["waiting"],
        serde_json::json!([0, 1, 2, 3, 4])
    );
    assert_eq!(
        r["engines"][0]["running"],
        serde_json::json!([4, 4, 4, 4, 4])
    );
    assert_eq!(
        r["engines"][0]["t_s"],
        serde_json::json!([0.0, 1.0, 2.0, 3.0, 4.0])
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_write_to_a_missing_folder_is_an_io_error() {
    let dir = scratch("json-missing");
    let err = json::write(&dir.join("no/such/dir/out.json"), 1, &[]).unwrap_err();
    assert!(
        matches!(err, kvroute_sim::report::ReportError::Io { .. }),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn svg_lines_for_few_engines_heatmap_for_many() {
    let dir = scratch("svg");
    let few = runs(2, &["kv_aware", "load_aware:0.5"]);
    let many = runs(10, &["kv_aware"]);
    let files = svg::write_all(&dir, &[few, many]).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "w2-kv_aware-engines.svg",
            "w2-load_aware_0_5-engines.svg",
            "w2-ttft-cdf.svg",
            "w10-kv_aware-engines.svg",
            "w10-ttft-cdf.svg",
        ]
    );
    let lines = std::fs::read_to_string(dir.join("w2-kv_aware-engines.svg")).unwrap();
    assert!(lines.starts_with("<svg"));
    assert!(
        lines.contains("engine 1"),
        "line plot has a legend per engine"
    );
    let heat = std::fs::read_to_string(dir.join("w10-kv_aware-engines.svg")).unwrap();
    // Engine 0 runs at its cap (4 of 4) at every sample: its cells get the darkest colour,
    // RGB(128, 0, 0); a line plot would have no such cell.
    assert!(heat.contains("#800000"));
    assert!(!lines.contains("#800000"));
    let cdf = std::fs::read_to_string(dir.join("w2-ttft-cdf.svg")).unwrap();
    assert!(cdf.contains("load_aware:0.5"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn wrap_breaks_at_word_boundaries() {
    assert_eq!(
        table::wrap("aa bb cc ddddddd e", 5),
        ["aa bb", "cc", "ddddddd", "e"]
    );
    assert!(table::wrap("   ", 5).is_empty());
}

#[test]
fn imbalance_cell_says_inf_only_when_someone_ran() {
    let mut idle = run(2, 4, 3);
    for s in &mut idle.samples {
        if s.engine == 1 {
            s.running = 0;
        }
    }
    assert_eq!(table::row(&PolicyRun::new("a", idle).metrics)[10], "inf");
    let nothing = RunResult {
        engines: 2,
        ..Default::default()
    };
    assert_eq!(table::row(&PolicyRun::new("a", nothing).metrics)[10], "-");
}
