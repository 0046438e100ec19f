//! Engines from TOML: the DP rank port rule, explicit ranks, defaults and rejections.

use std::time::Duration;

use kvroute_connect::{ConfigError, ConnectConfig, EngineKind, RankSpec, offset_endpoint};

#[test]
fn dp_size_expands_ranks_by_port_offset() {
    let c = ConnectConfig::from_toml(
        r#"
        queue_capacity = 64
        tick_interval_ms = 250
        [[engine]]
        id = 1
        kind = "sglang"
        dp_size = 3
        events = "tcp://10.0.0.5:5557"
        replay = "tcp://10.0.0.5:5567"
        telemetry = "http://10.0.0.5:30000/v1/loads"

        [[engine]]
        id = 2
        kind = "vllm"
        topic = "kv"
        max_running_per_rank = 256
        telemetry = "http://10.0.0.6:8000/metrics"
        poll_interval_ms = 1000
        [[engine.rank]]
        dp_rank = 4
        events = "ipc:///run/e2"
        "#,
    )
    .unwrap();
    assert_eq!(c.options.queue_capacity, 64);
    assert_eq!(c.options.tick_interval, Some(Duration::from_millis(250)));
    let e1 = &c.engines[0];
    assert_eq!(e1.kind, EngineKind::Sglang);
    let ports: Vec<(&str, Option<&str>)> = e1
        .ranks
        .iter()
        .map(|r| (r.events.as_str(), r.replay.as_deref()))
        .collect();
    assert_eq!(
        ports,
        [
            ("tcp://10.0.0.5:5557", Some("tcp://10.0.0.5:5567")),
            ("tcp://10.0.0.5:5558", Some("tcp://10.0.0.5:5568")),
            ("tcp://10.0.0.5:5559", Some("tcp://10.0.0.5:5569")),
        ]
    );
    assert_eq!(e1.workers()[2], kvroute::WorkerId::new(1, 2));
    let e2 = &c.engines[1];
    assert_eq!(e2.ranks, vec![RankSpec::new(4, "ipc:///run/e2")]);
    assert_eq!(
        (e2.topic.as_str(), e2.max_running_per_rank),
        ("kv", Some(256))
    );
    assert_eq!(e2.poll_interval, Duration::from_secs(1));
    assert_eq!(e2.poll_timeout, Duration::from_secs(1));
}

#[test]
fn bad_configs_are_typed_errors() {
    let engine = |body: &str| format!("[[engine]]\nid = 1\n{body}");
    let err = |t: &str| ConnectConfig::from_toml(t).unwrap_err();
    assert!(matches!(err("nonsense = = 1"), ConfigError::Toml(_)));
    assert!(matches!(err("unknown_key = 1"), ConfigError::Toml(_)));
    assert!(matches!(
        err(&engine("kind = \"sglang\"")),
        ConfigError::Engine { id: 1, .. }
    ));
    assert!(matches!(
        err(&engine(
            "kind = \"vllm\"\ndp_size = 1\nevents = \"tcp://h:1\"\ntelemetry = \"http://h/metrics\""
        )),
        ConfigError::Engine { id: 1, .. }
    ));
    let two = format!(
        "{}\n{}",
        engine("kind = \"sglang\"\ndp_size = 1\nevents = \"tcp://h:1\""),
        engine("kind = \"sglang\"\ndp_size = 1\nevents = \"tcp://h:2\"")
    );
    assert_eq!(err(&two), ConfigError::DuplicateEngine(1));
    let dup = engine(
        "kind = \"sglang\"\n[[engine.rank]]\ndp_rank = 0\nevents = \"tcp://h:1\"\n[[engine.rank]]\ndp_rank = 0\nevents = \"tcp://h:2\"",
    );
    assert!(matches!(err(&dup), ConfigError::Engine { id: 1, .. }));
    assert_eq!(
        offset_endpoint("tcp://h:65535", 1),
        Err(ConfigError::NoPort("tcp://h:65535".into()))
    );
    assert_eq!(offset_endpoint("inproc://x", 2).unwrap(), "inproc://x_dp2");
}

/// A zero tick interval (which cannot drive a timer) or a zero replay timeout (which would
/// fail every replay before it is asked) is refused, from a file and from code, naming the
/// knob; the connector then starts nothing.
#[test]
fn zero_intervals_are_refused() {
    let err = |t: &str| ConnectConfig::from_toml(t).unwrap_err();
    assert_eq!(
        err("tick_interval_ms = 0"),
        ConfigError::Option {
            name: "tick_interval_ms",
            why: "must be above zero (leave it out for the Router's own interval)"
        }
    );
    assert!(matches!(
        err("replay_timeout_ms = 0"),
        ConfigError::Option {
            name: "replay_timeout_ms",
            ..
        }
    ));
    assert!(ConnectConfig::from_toml("tick_interval_ms = 1").is_ok());
    let mut o = kvroute_connect::ConnectOptions::default();
    o.tick_interval = Some(Duration::ZERO);
    let router = std::sync::Arc::new(
        kvroute::Router::new(kvroute::RouterConfig::new(4, 16)).expect("router"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = rt.block_on(async { kvroute_connect::Connector::start(router, o).err() });
    assert!(matches!(
        started,
        Some(ConfigError::Option {
            name: "tick_interval_ms",
            ..
        })
    ));
}
