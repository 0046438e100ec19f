//! The `kvroute-sim` binary: `list`, argument errors, and tiny runs with `--quiet --json`.

mod driver_common;

use std::path::PathBuf;
use std::process::{Command, Output};

use driver_common::SCENARIO_NAMES;

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvroute-sim"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvroute-sim-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes twelve requests 0.25 s apart (0, 0.25, ..., 2.75 s), each of 700 prompt tokens
/// (the shared first trace block and one of its own) and 8 output tokens, to `path`.
fn write_short_trace(path: &std::path::Path) {
    let lines: String = (0..12)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 700, \"output_length\": 8, \"hash_ids\": [0, {}]}}\n",
                i * 250,
                i + 1
            )
        })
        .collect();
    std::fs::write(path, lines).unwrap();
}

/// Runs `replay --quiet` on `trace` with `args` and `--json` into a file beside the trace;
/// asserts success and returns the parsed JSON.
fn replay_json(trace: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let json = trace.with_extension("json");
    let mut all = vec!["replay", "--trace", trace.to_str().unwrap(), "--quiet"];
    all.extend_from_slice(args);
    all.extend(["--json", json.to_str().unwrap()]);
    let out = sim(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn list_shows_every_scenario_and_policy() {
    let out = sim(&["list"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    let policies = ["round_robin", "projected_time:shadow", "cache_aware"];
    for name in SCENARIO_NAMES.into_iter().chain(policies) {
        assert!(s.contains(name), "{name} missing from:\n{s}");
    }
    assert!(s.contains("A hot cached owner") && s.contains("Identical requests at once"));
}

/// The default set is every policy label but `projected_time:off`, in the library's
/// order; `--policies` entries may carry spaces, and `projected_time:enforce` is reported
/// as `projected_time`.
#[test]
fn list_names_the_default_policies_and_entries_are_trimmed() {
    let out = sim(&["list"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    let defaults = "policies (--policies a,b,c; these by default):\n  round_robin\n  \
                    least_load\n  kv_aware\n  load_aware:0.5\n  owner_pressure\n  \
                    projected_time\n  projected_time:shadow\n  dynamo_cost\n  lmetric\n  \
                    cache_aware\n  kv_aware_first\naccepted:\n";
    assert!(s.contains(defaults), "{s}");
    let out = sim(&[
        "scenario",
        "burst-siblings",
        "--limit",
        "8",
        "--policies",
        " projected_time:enforce , kv_aware",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.lines().any(|l| l.starts_with("projected_time ")),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("kv_aware ")), "{table}");
}

#[test]
fn unknown_policy_is_a_usage_error_listing_valid_names() {
    let out = sim(&["scenario", "burst-siblings", "--policies", "kv_aware,magic"]);
    // clap's usage errors exit with 2.
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("unknown policy `magic`"), "{err}");
    for name in ["round_robin", "load_aware", "owner_pressure", "lmetric"] {
        assert!(err.contains(name), "{err}");
    }
    let out = sim(&["--policies", "load_aware:500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("out of range"));
    // An empty entry says so, rather than naming an empty policy.
    for list in ["", "kv_aware,", ","] {
        let out = sim(&["scenario", "burst-siblings", "--policies", list]);
        assert_eq!(out.status.code(), Some(2), "{list:?}");
        assert!(text(&out.stderr).contains("empty policy name"), "{list:?}");
    }
}

#[test]
fn unknown_scenario_lists_the_scenarios() {
    let out = sim(&["scenario", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("hot-owner-51") && err.contains("event-loss"),
        "{err}"
    );
}

#[test]
fn tiny_scenario_quiet_json() {
    let dir = scratch("tiny");
    let json = dir.join("out.json");
    let out = sim(&[
        "scenario",
        "burst-siblings",
        "--limit",
        "8",
        "--policies",
        "kv_aware,load_aware:1.0",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "--quiet writes nothing to stderr");
    let table = text(&out.stdout);
    assert!(table.contains("burst-siblings[..8]"));
    assert!(table.lines().any(|l| l.starts_with("kv_aware ")));
    assert!(table.lines().any(|l| l.starts_with("load_aware:1 ")));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let w = &v["workloads"][0];
    assert_eq!(w["name"], "burst-siblings[..8]");
    assert_eq!(w["engines"], 8);
    let runs = w["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["policy"], "kv_aware");
    assert_eq!(runs[1]["policy"], "load_aware:1");
    for r in runs {
        // 8 identical requests, all served.
        assert_eq!(r["metrics"]["requests"], 8);
        assert_eq!(r["metrics"]["finished"], 8);
        assert_eq!(r["engines"].as_array().unwrap().len(), 8);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replay_reads_a_trace_and_reports_bad_lines() {
    let dir = scratch("replay");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n\
         {\"timestamp\": 500, \"input_length\": 700, \"output_length\": 4, \"hash_ids\": [0, 2]}\n",
    )
    .unwrap();
    let v = replay_json(
        &trace,
        &[
            "--engines",
            "2",
            "--rate-scale",
            "2",
            "--policies",
            "least_load",
        ],
    );
    assert_eq!(v["workloads"][0]["engines"], 2);
    assert_eq!(v["workloads"][0]["routed_requests"], 2);

    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\nnot json\n").unwrap();
    let out = sim(&["replay", "--trace", trace.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("line 2"),
        "{}",
        text(&out.stderr)
    );

    let out = sim(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--rate-scale",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Out-of-range sizes are usage errors before anything runs: more engines than the router
/// has worker slots (4,096), a rate scale that would stretch a run without end (or a
/// negative one), and an empty `--limit`.
#[test]
fn out_of_range_sizes_are_usage_errors() {
    let dir = scratch("bounds");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n",
    )
    .unwrap();
    let t = trace.to_str().unwrap();
    for (args, needle) in [
        (vec!["replay", "--trace", t, "--engines", "4097"], "4097"),
        (
            vec!["replay", "--trace", t, "--rate-scale", "1e-300"],
            "0.001..=1000",
        ),
        (
            vec!["replay", "--trace", t, "--rate-scale", "-1"],
            "0.001..=1000",
        ),
        (
            vec!["replay", "--trace", t, "--limit", "0"],
            "limit must be",
        ),
        (
            vec!["scenario", "burst-siblings", "--limit", "0"],
            "limit must be",
        ),
    ] {
        let out = sim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = sim(&["replay", "--trace", "/nonexistent/kvroute.jsonl"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot open"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Checks that fail before any simulation runs (nothing on stdout): an empty trace, a
/// `--json` file that cannot be created, an `--svg` folder that is a file. And the output
/// tokens of a request asking beyond the context length are what the engine generates.
#[test]
fn empty_traces_and_unwritable_outputs_fail_before_running() {
    let dir = scratch("early");
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = sim(&["replay", "--trace", empty.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no request to route"));
    assert!(out.stdout.is_empty());

    // One 600-token prompt asking for 10,000,000 output tokens: the default engine's
    // context is 131,072 tokens, so it generates 131,072 - 600 = 130,472.
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 10000000, \"hash_ids\": [0, 1]}\n",
    )
    .unwrap();
    // An output that cannot be written fails with exit code 1, naming the flag, before
    // anything runs (nothing on stdout).
    let fails_early = |flag: &str, path: &std::path::Path| {
        let out = sim(&[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--quiet",
            flag,
            path.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert!(text(&out.stderr).contains(flag), "{}", text(&out.stderr));
        assert!(out.stdout.is_empty(), "{flag}: ran before failing");
    };
    fails_early("--json", &dir.join("no-such-dir").join("r.json"));
    fails_early("--svg", &trace);

    let v = replay_json(&trace, &["--engines", "1", "--policies", "round_robin"]);
    // Output tokens/s over the run's window (arrival to last finish) gives back the tokens.
    let m = &v["workloads"][0]["runs"][0]["metrics"];
    let generated = m["output_tokens_per_s"].as_f64().unwrap() * m["window_s"].as_f64().unwrap();
    assert!((generated - 130_472.0).abs() < 0.5, "{m}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The real trace's first 300 requests at 8x: `--seed` changes the table, the same seed
/// repeats it byte for byte. Skipped (with a notice) without the shared data.
#[test]
fn replay_seed_matters_and_repeats() {
    let Some(path) = kvroute_testkit::data_file("traces/mooncake_conversation_trace.jsonl") else {
        return;
    };
    let table = |seed: &str| {
        let out = sim(&[
            "--quiet",
            "--seed",
            seed,
            "replay",
            "--trace",
            path.to_str().unwrap(),
            "--limit",
            "300",
            "--rate-scale",
            "8",
            "--policies",
            "projected_time,least_load",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let one = table("1");
    assert_eq!(one, table("1"));
    assert_ne!(one, table("2"));
}

/// A one-engine sweep: every policy sends every request to the one engine, and nothing a
/// seed draws changes what the engine does, so each cell's seeds agree (zero-width
/// intervals) and every policy is tied with the reference. Its JSON records the router
/// settings the command line gave.
#[test]
fn sweep_on_one_engine_is_all_ties() {
    let dir = scratch("sweep");
    let trace = dir.join("t.jsonl");
    write_short_trace(&trace);
    let json = dir.join("sweep.json");
    let svg = dir.join("plots");
    let out = sim(&[
        "sweep",
        "--trace",
        trace.to_str().unwrap(),
        "--engines",
        "1",
        "--seeds",
        "3",
        "--rate-scales",
        "1,2",
        "--policies",
        "round_robin,least_load",
        "--jobs",
        "2",
        "--quiet",
        "--kv-bound-usage",
        "0.5",
        "--predicted-ttl-ms",
        "1500",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("rate x2"));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(
        v["settings"],
        serde_json::json!({
            "telemetry": "workload",
            "predicted_ttl_ms": 1500,
            "kv_bound_usage": 0.5,
        })
    );
    assert_eq!(v["reference"], "projected_time");
    assert_eq!(v["policies"].as_array().unwrap().len(), 3);
    assert_eq!(v["seeds"], serde_json::json!([1, 2, 3]));
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 3);
    let metrics = v["metrics"].as_array().unwrap().len();
    assert_eq!(metrics, 11);
    for (p, policy) in cells.iter().enumerate() {
        let scales = policy.as_array().unwrap();
        assert_eq!(scales.len(), 2);
        for scale in scales {
            for c in scale.as_array().unwrap() {
                let want = if p == 0 { "reference" } else { "tied" };
                assert_eq!(c["mark"], want, "{c}");
                if c["mean"].is_f64() {
                    assert_eq!(c["half_width"], 0.0, "{c}");
                }
            }
        }
    }
    // One engine serves everything: its generation share is 100 %.
    let share = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .position(|m| m == "gen_share_min_pct");
    assert_eq!(cells[0][0][share.unwrap()]["mean"], 100.0);
    assert_eq!(std::fs::read_dir(&svg).unwrap().count(), 11);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The generated workloads run as scenarios; bad sweep and jitter arguments are usage
/// errors.
#[test]
fn generated_workloads_run_and_bad_arguments_are_usage_errors() {
    let out = sim(&[
        "scenario",
        "no-sharing",
        "--limit",
        "20",
        "--policies",
        "least_load",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("no-sharing[..20]"));
    for args in [
        &["replay", "--trace", "x.jsonl", "--arrival-jitter", "-1"][..],
        &["sweep", "--trace", "x.jsonl", "--jobs", "0"],
        &["sweep", "--trace", "x.jsonl", "--seeds", "0"],
        &["sweep", "--trace", "x.jsonl", "--workload", "no-sharing"],
        &["sweep", "--workload", "nope"],
        &["sweep"],
    ] {
        let out = sim(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `--arrival-jitter` reaches the replay: two requests 0.5 s apart on one engine, moved by
/// up to 30 s each, no longer span the same measuring window; without it (or with 0) the
/// run is the trace's own.
#[test]
fn replay_arrival_jitter_moves_the_arrivals() {
    let dir = scratch("jitter");
    let trace = dir.join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n\
         {\"timestamp\": 500, \"input_length\": 700, \"output_length\": 4, \"hash_ids\": [0, 2]}\n",
    )
    .unwrap();
    let window = |jitter: &str| {
        let v = replay_json(
            &trace,
            &[
                "--engines",
                "1",
                "--policies",
                "least_load",
                "--arrival-jitter",
                jitter,
            ],
        );
        v["workloads"][0]["runs"][0]["metrics"]["window_s"]
            .as_f64()
            .unwrap()
    };
    let own = window("0");
    assert_eq!(own, window("0"));
    assert_ne!(own, window("30"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same sweep twice gives the same tables (runs finish in any order on the threads;
/// each cell's seed alone decides its result), and its seeds differ from each other.
/// Skipped (with a notice) without the shared data.
#[test]
fn sweep_repeats_itself() {
    let Some(path) = kvroute_testkit::data_file("traces/mooncake_conversation_trace.jsonl") else {
        return;
    };
    let dir = scratch("sweep-repeat");
    let json = dir.join("s.json");
    let go = || {
        let out = sim(&[
            "--quiet",
            "sweep",
            "--trace",
            path.to_str().unwrap(),
            "--limit",
            "200",
            "--rate-scales",
            "8",
            "--seeds",
            "3",
            "--policies",
            "least_load",
            "--jobs",
            "2",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(go(), go());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // projected_time's TTFT p95 over seeds 1, 2, 3: not all the same.
    let ttft_p95 = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .position(|m| m == "ttft_p95");
    let values = v["cells"][0][0][ttft_p95.unwrap()]["values"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(values.len(), 3);
    assert!(values.iter().any(|x| *x != values[0]), "{values:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reader that closes the pipe before the simulator prints (`kvroute-sim list | head
/// -0`) ends it by `SIGPIPE`, as it ends other command-line tools, with no panic message.
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_the_simulator_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvroute-sim"))
        .arg("list")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Closes the read end before the child writes (it has only just been started).
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the binary ends");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.status.signal() == Some(libc::SIGPIPE) || out.status.success(),
        "{:?}: {stderr}",
        out.status
    );
}

/// A write error on standard output other than a closed pipe (a full device) is an error
/// message and exit code 1, not a panic.
#[cfg(target_os = "linux")]
#[test]
fn a_failed_write_to_stdout_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("skipped: no /dev/full on this machine");
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_kvroute-sim"))
        .arg("list")
        .stdout(full)
        .output()
        .expect("the binary runs");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: writing the results to standard output"),
        "{stderr}"
    );
}

/// A scenario's table title names the seed, the rate scale and the telemetry mode it ran
/// with (`workload` when `--telemetry` is not given).
#[test]
fn a_table_title_names_the_run_settings() {
    let first_line = |args: &[&str]| {
        let out = sim(args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let given = first_line(&[
        "--quiet",
        "--seed",
        "3",
        "--policies",
        "least_load",
        "--telemetry",
        "gauges",
        "scenario",
        "flap",
        "--rate-scale",
        "2",
        "--limit",
        "60",
    ]);
    assert!(
        given.ends_with("(seed 3, rate scale 2, telemetry gauges) =="),
        "{given}"
    );
    let defaults = first_line(&[
        "--quiet",
        "--policies",
        "least_load",
        "scenario",
        "flap",
        "--limit",
        "60",
    ]);
    assert!(
        defaults.ends_with("(seed 1, rate scale 1, telemetry workload) =="),
        "{defaults}"
    );
}

/// A run cut so short (`--limit 5`: a couple of seconds) that none of `restart`'s four
/// scheduled restarts (20, 35, 50 and 65 s) is reached prints, even with `--quiet`, one
/// note per restart, naming its engine and time.
#[test]
fn faults_the_run_never_reached_are_noted() {
    let out = sim(&[
        "scenario",
        "restart",
        "--limit",
        "5",
        "--policies",
        "round_robin",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for (i, (at, engine)) in kvroute_sim::workload::scenarios::faults::RESTARTS
        .iter()
        .enumerate()
    {
        let want = format!(
            "note: restart[..5]: scheduled fault {i} (the workload's own faults first, then \
             --faults'; engine {engine}, at {at:.1} s of the run) was not applied in 1 of 1 runs"
        );
        assert!(err.contains(&want), "missing `{want}` in:\n{err}");
    }
}

/// `sweep --workload NAME --limit N` cuts the named workload as `scenario --limit` does
/// (its name gets the `[..N]` suffix), and a cut so short that none of `restart`'s four
/// restarts is reached is noted for every rate scale: all 2 policies x 2 seeds runs at
/// each. `--whole-trace` with a named workload is refused.
#[test]
fn sweep_cuts_a_named_workload_and_notes_the_faults_it_never_reached() {
    let out = sim(&[
        "sweep",
        "--workload",
        "restart",
        "--limit",
        "5",
        "--policies",
        "round_robin",
        "--rate-scales",
        "1,2",
        "--seeds",
        "2",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("== sweep: restart[..5], 2 policies"),
        "{stdout}"
    );
    for scale in ["x1", "x2"] {
        let want = format!(
            "note: restart[..5] at {scale}: 4 of 4 runs ended before some of the workload's \
             faults started (never applied; scheduled faults [0, 1, 2, 3] in the first of \
             them, counting the workload's own faults first, then --faults')"
        );
        assert!(stderr.contains(&want), "missing `{want}` in:\n{stderr}");
    }
    let out = sim(&["sweep", "--workload", "restart", "--whole-trace", "--quiet"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--whole-trace is for --trace"),
        "{}",
        text(&out.stderr)
    );
}

/// `--engine` puts a preset on every engine: a 125,000-token prompt fits the default
/// engine's 131,072-token context and is refused by `vllm-calibration`'s 122,880.
#[test]
fn the_engine_preset_replaces_every_engine() {
    let dir = scratch("engine-preset");
    let trace = dir.join("long.jsonl");
    let blocks: Vec<String> = (0..125_000u32.div_ceil(512))
        .map(|b| b.to_string())
        .collect();
    std::fs::write(
        &trace,
        format!(
            "{{\"timestamp\": 0, \"input_length\": 125000, \"output_length\": 4, \"hash_ids\": [{}]}}\n",
            blocks.join(",")
        ),
    )
    .unwrap();
    let args = ["--engines", "2", "--policies", "least_load"];
    let served = replay_json(&trace, &args);
    let m = &served["workloads"][0]["runs"][0]["metrics"];
    assert_eq!(m["finished"], 1, "the default engine serves it: {m}");
    let mut with = vec!["--engine", "vllm-calibration"];
    with.extend_from_slice(&args);
    let refused = replay_json(&trace, &with);
    let m = &refused["workloads"][0]["runs"][0]["metrics"];
    assert_eq!(m["finished"], 0, "the preset's context refuses it: {m}");
    // The table names the preset; a sweep notes the requests its engines refused.
    let out = sim(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--quiet",
        "--engines",
        "2",
        "--policies",
        "least_load",
        "--engine",
        "vllm-calibration",
    ]);
    assert!(
        text(&out.stdout).contains("engine vllm-calibration) =="),
        "{}",
        text(&out.stdout)
    );
    let out = sim(&[
        "sweep",
        "--trace",
        trace.to_str().unwrap(),
        "--quiet",
        "--engines",
        "2",
        "--policies",
        "least_load",
        "--rate-scales",
        "1",
        "--seeds",
        "2",
        "--engine",
        "vllm-calibration",
    ]);
    assert!(
        text(&out.stdout).contains("(engine vllm-calibration)"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("4 requests refused by their engine"),
        "2 policies (projected_time, the reference, and least_load) x 2 seeds, one each: {}",
        text(&out.stderr)
    );
    let list = text(&sim(&["list"]).stdout);
    for p in [
        "sim-default",
        "llama-8b-h100",
        "deepseek-v3-h200x8",
        "vllm-calibration",
    ] {
        assert!(list.contains(&format!("\n  {p}\n")), "{p} in {list}");
    }
    let bad = sim(&["--engine", "h100", "list"]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown preset is a usage error"
    );
    assert!(
        text(&bad.stderr).contains("llama-8b-h100"),
        "{}",
        text(&bad.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--faults`: a fault program added to a trace. Twelve requests arrive 0.25 s apart on
/// one engine (0, 0.25, ..., 2.75 s, each done within 0.1 s); the engine fails every
/// request from 1.375 s on, so the six arriving from 1.5 s on are never served, at every
/// rate scale (the fault moves with the load: at 4x it starts at 0.34375 s, between the
/// sixth arrival at 0.3125 s and the seventh at 0.375 s). A program the fleet refuses, or
/// one `--telemetry` would cut short, is an error naming the file and the fault.
#[test]
fn a_fault_program_runs_with_the_load_at_every_rate_scale() {
    let dir = scratch("faults");
    let trace = dir.join("t.jsonl");
    write_short_trace(&trace);
    let program = dir.join("faults.json");
    std::fs::write(
        &program,
        r#"[{"at_s": 1.375, "engine": 0, "kind": "fail_fast", "duration_s": 100000}]"#,
    )
    .unwrap();
    let finished = |faults: Option<&std::path::Path>, scale: &str| {
        let json = dir.join(format!("out-{scale}-{}.json", faults.is_some()));
        let mut args = vec![
            "--quiet",
            "--policies",
            "round_robin",
            "--json",
            json.to_str().unwrap(),
        ];
        if let Some(p) = faults {
            args.extend(["--faults", p.to_str().unwrap()]);
        }
        args.extend([
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--engines",
            "1",
            "--rate-scale",
            scale,
        ]);
        let out = sim(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let w = &v["workloads"][0];
        assert_eq!(
            w["faults"].as_str(),
            faults.map(|p| p.to_str().unwrap()),
            "{w}"
        );
        w["runs"][0]["metrics"]["finished"].as_u64().unwrap()
    };
    for scale in ["1", "2", "4"] {
        assert_eq!(finished(None, scale), 12, "rate scale {scale}");
        assert_eq!(finished(Some(&program), scale), 6, "rate scale {scale}");
    }

    // A program refused: exit code 1, and standard error holds `want`.
    let refused = |program_text: &str, extra: &[&str], want: &str| {
        std::fs::write(&program, program_text).unwrap();
        let mut args = vec!["--quiet"];
        args.extend_from_slice(extra);
        args.extend([
            "--faults",
            program.to_str().unwrap(),
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--engines",
            "1",
        ]);
        let out = sim(&args);
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains(want), "missing `{want}` in {err}");
    };
    refused(
        r#"[{"at_s": 1, "engine": 0, "kind": "restart"}, {"at_s": 1, "engine": 1, "kind": "restart"}]"#,
        &[],
        "faults.json: fault 1: engine is not in the fleet",
    );
    // `--telemetry` would drop a partial-telemetry fault: the two are refused together.
    refused(
        r#"[{"at_s": 1, "engine": 0, "kind": "partial_telemetry", "duration_s": 5}]"#,
        &["--telemetry", "full"],
        "fault 0 (partial_telemetry) contradicts --telemetry full",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
