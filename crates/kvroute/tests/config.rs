//! The router's configuration: every setting bounded once, one error shape naming the
//! setting, the value and the range, with the error chain a logger walks.

use std::error::Error;

use kvroute::{AdmissionConfig, Nanos, Router, RouterConfig, RouterConfigError};

fn refused(tweak: impl FnOnce(&mut RouterConfig)) -> RouterConfigError {
    let mut c = RouterConfig::new(8, 16);
    tweak(&mut c);
    match Router::new(c) {
        Err(e) => e,
        Ok(_) => panic!("the config is out of range"),
    }
}

#[test]
fn each_setting_out_of_range_is_named_with_its_range() {
    let cases: Vec<(RouterConfigError, &str)> = vec![
        (
            refused(|c| c.worker_slots = 0),
            "worker_slots = 0 is out of range 1..=4096",
        ),
        (
            refused(|c| c.worker_slots = 4097),
            "worker_slots = 4097 is out of range 1..=4096",
        ),
        (
            refused(|c| c.block_size = 0),
            "block_size = 0 is out of range 1..=1048576 tokens",
        ),
        (
            refused(|c| c.expected_blocks = 0),
            "expected_blocks = 0 is out of range 1..=4294967296 blocks",
        ),
        (
            refused(|c| c.max_blocks_per_worker = 0),
            "max_blocks_per_worker = 0 is out of range 1..=4294967295 blocks",
        ),
        (
            refused(|c| c.max_load_age = Nanos::ZERO),
            "max_load_age = 0 is out of range 1.. ns",
        ),
        (
            refused(|c| c.snapshot_buffers = 1),
            "snapshot_buffers = 1 is out of range 2..=65536",
        ),
        (
            refused(|c| c.reservation_ttl = Nanos::ZERO),
            "reservation_ttl = 0 is out of range 1.. ns",
        ),
        (
            refused(|c| c.max_rescores = 65),
            "max_rescores = 65 is out of range 0..=64",
        ),
        (
            refused(|c| c.admission = Some(AdmissionConfig::new(0))),
            "admission.max_outstanding_requests = 0 is out of range 1..=1000000 requests",
        ),
        // An f32 knob prints as given, not as its f64 widening (0.8999999761581421).
        (
            refused(|c| c.score.tie_epsilon = 0.9),
            "score.tie_epsilon = 0.9 is out of range 0..=0.5",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}

#[test]
fn errors_chain_to_the_out_of_range_setting() {
    let e = refused(|c| c.score.watermark = f32::NAN);
    let RouterConfigError::Score(inner) = e else {
        panic!("a scorer knob: {e:?}");
    };
    assert_eq!(inner.field, "watermark");
    let source = e.source().expect("the out-of-range knob");
    assert_eq!(source.to_string(), "watermark = NaN is out of range 0..=2");
    let e = refused(|c| c.worker_slots = 0);
    assert!(matches!(e, RouterConfigError::OutOfRange(r) if r.field == "worker_slots"));
    assert!(e.source().is_some());
}

#[test]
fn every_value_lives_once_and_the_parts_are_derived_from_it() {
    let mut c = RouterConfig::new(96, 32);
    c.expected_blocks = 1 << 10;
    c.max_blocks_per_worker = 5_000;
    c.max_load_age = Nanos::from_millis(750);
    c.snapshot_buffers = 3;
    let index = c.index_config();
    assert_eq!(
        (
            index.worker_slots,
            index.block_size,
            index.expected_blocks,
            index.max_blocks_per_worker
        ),
        (96, 32, 1 << 10, 5_000)
    );
    let load = c.load_config();
    assert_eq!(
        (load.capacity, load.max_age, load.buffers),
        (96, Nanos(750_000_000), 3)
    );
    assert!(Router::new(c).is_ok());
}
