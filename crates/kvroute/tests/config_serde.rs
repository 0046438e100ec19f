//! Configurations read from a gateway's own config files (feature `serde`): every field
//! optional with the documented default, durations in nanoseconds, policies in their
//! written form, unknown keys refused.

use kvroute::{
    AdmissionConfig, EngineConfig, Nanos, Policy, PredictedConfig, ProjectedMode, RouterConfig,
    ScoreConfig,
};

#[test]
fn a_toml_router_config_sets_what_it_names_and_defaults_the_rest() {
    let text = r#"
        worker_slots = 64
        block_size = 32
        max_load_age = 500_000_000
        reservation_ttl = 30_000_000_000
        max_model_len = 131_072

        [admission]
        max_outstanding_requests = 48

        [score]
        policy = "projected_time:shadow"
        tie_epsilon = 0.01
        router_replicas = 3

        [predicted]
        ttl = 2_000_000_000
    "#;
    let c: RouterConfig = toml::from_str(text).unwrap();
    let mut want = RouterConfig::new(64, 32);
    want.max_load_age = Nanos::from_millis(500);
    want.reservation_ttl = Nanos::from_secs(30);
    want.max_model_len = Some(131_072);
    want.admission = Some(AdmissionConfig::new(48));
    want.score.policy = Policy::ProjectedTime {
        mode: ProjectedMode::Shadow,
    };
    want.score.tie_epsilon = 0.01;
    want.score.router_replicas = 3;
    let mut predicted = PredictedConfig::default();
    predicted.ttl = Nanos::from_secs(2);
    want.predicted = Some(predicted);
    assert_eq!(c, want);
    assert_eq!(
        c.predicted.map(|p| (p.entries, p.min_tokens)),
        Some((16_384, 256))
    );
    // Untouched settings keep their documented defaults.
    assert_eq!(c.snapshot_buffers, 4);
    assert_eq!(c.max_rescores, 8);
    assert_eq!(c.score.watermark, 0.9);
}

#[test]
fn an_empty_document_is_the_default_config() {
    let c: RouterConfig = toml::from_str("").unwrap();
    assert_eq!(c, RouterConfig::default());
    let s: ScoreConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(s, ScoreConfig::default());
}

#[test]
fn configs_round_trip_through_text() {
    let mut c = RouterConfig::new(16, 16);
    c.score.policy = Policy::LoadAware { beta: 0.25 };
    c.admission = Some(AdmissionConfig::new(7));
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.contains(r#""policy":"load_aware:0.25""#), "{json}");
    let back: RouterConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, c);
    let toml_text = toml::to_string(&c).unwrap();
    assert_eq!(toml::from_str::<RouterConfig>(&toml_text).unwrap(), c);
    let e: EngineConfig = toml::from_str("dp_size = 2\nmax_running_per_rank = 256").unwrap();
    assert_eq!(
        (e.dp_size, e.max_running_per_rank, e.decode_tps),
        (Some(2), Some(256), None)
    );
}

#[test]
fn unknown_keys_and_policies_are_errors_that_name_them() {
    let e = toml::from_str::<RouterConfig>("worker_slot = 8").unwrap_err();
    assert!(e.to_string().contains("worker_slot"), "{e}");
    let e = toml::from_str::<RouterConfig>("[score]\npolicy = \"fastest\"").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("fastest") && msg.contains("projected_time"),
        "{msg}"
    );
    // Text is parsed, not validated: an out-of-range value is refused by Router::new.
    let c: RouterConfig = toml::from_str("max_rescores = 99").unwrap();
    assert_eq!(
        kvroute::Router::new(c).err().unwrap().to_string(),
        "max_rescores = 99 is out of range 0..=64"
    );
}

/// The configuration file shown in the README parses to what it says.
#[test]
fn the_readme_config_example_parses() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("the workspace README");
    let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    let c: RouterConfig = toml::from_str(&readme[start..end]).unwrap();
    assert_eq!((c.worker_slots, c.block_size), (64, 16));
    assert_eq!(c.max_load_age, Nanos::from_secs(2));
    assert_eq!(c.admission, Some(AdmissionConfig::new(64)));
    assert_eq!(
        c.score.policy,
        Policy::ProjectedTime {
            mode: ProjectedMode::Shadow
        }
    );
    assert!(kvroute::Router::new(c).is_ok());
}
