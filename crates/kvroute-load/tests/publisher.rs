//! Load publisher: updates, validity, engine grouping and lanes. Expected values are
//! computed by hand in the comments.
#![cfg(not(kvroute_loom))]

mod engine_updates;

use kvroute_core::{Fields, LoadSample, Nanos, UpdateError};
use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_index::WorkerRegistry;
use kvroute_load::{
    EngineConfig, LoadConfig, LoadPublisher, LoadReader, NO_ENGINE, PublishError, Validity,
    WorkerError,
};
use kvroute_wire::{SglangRankLoad, VllmLoadUpdate, VllmRankLoad};

use engine_updates::EngineUpdates;

const S: u64 = 1_000_000_000;

fn publisher(capacity: usize) -> (LoadPublisher, LoadReader) {
    LoadPublisher::new({
        let mut c = LoadConfig::new(0);
        c.capacity = capacity;
        c.max_age = Nanos::from_secs(2);
        c.buffers = 3;
        c
    })
    .unwrap()
}

fn sample(running: u32, waiting: u32, cap: u32) -> LoadSample {
    {
        let mut c = LoadSample::new(running, waiting, cap, 0.5);
        c.waiting_prefill_tokens = Some(100);
        c.active_decode_tokens = Some(2000);
        c.decode_tps = Some(900.0);
        c.prefill_tps = Some(9000.0);
        c.utilization = Some(0.75);
        c
    }
}

fn sglang(engine_id: u64, dp_rank: u32, ts: f64) -> SglangRankLoad {
    SglangRankLoad {
        engine_id,
        dp_rank,
        num_running_reqs: 10,
        num_waiting_reqs: 4,
        num_waiting_uncached_tokens: 512,
        num_used_tokens: 6000,
        max_total_num_tokens: 24000,
        token_usage: 0.25,
        gen_throughput: 1500.0,
        utilization: 0.5,
        max_running_requests: 32,
        timestamp: ts,
    }
}

/// `configure_engine`, its error as the message a gateway logs.
trait ConfigureMsg {
    fn configure_engine_msg(&mut self, engine_id: u64, cfg: EngineConfig) -> Result<(), String>;
}

impl ConfigureMsg for LoadPublisher {
    fn configure_engine_msg(&mut self, engine_id: u64, cfg: EngineConfig) -> Result<(), String> {
        self.configure_engine(engine_id, cfg)
            .map_err(|e| e.to_string())
    }
}

#[test]
fn config_knobs_are_rejected_not_clamped() {
    let bad = |c: LoadConfig| LoadPublisher::new(c).err().map(|e| e.to_string());
    let ok = LoadConfig::new(4);
    assert_eq!(
        bad({
            let mut c = ok;
            c.capacity = 0;
            c
        }),
        Some("capacity = 0 is out of range 1..=4294967295 slots".to_string())
    );
    assert_eq!(
        bad({
            let mut c = ok;
            c.max_age = Nanos::ZERO;
            c
        }),
        Some("max_age = 0 is out of range 1.. ns".to_string())
    );
    assert_eq!(
        bad({
            let mut c = ok;
            c.buffers = 1;
            c
        }),
        Some("buffers = 1 is out of range 2..=65536".to_string())
    );
    let (mut p, _) = LoadPublisher::new(ok).unwrap();
    let cfg = EngineConfig::default();
    assert_eq!(
        p.configure_engine_msg(1, {
            let mut c = cfg;
            c.dp_size = Some(0);
            c
        }),
        Err("dp_size = 0 is out of range 1..=4294967295 ranks".to_string())
    );
    assert_eq!(
        p.configure_engine_msg(1, {
            let mut c = cfg;
            c.max_running_per_rank = Some(0);
            c
        }),
        Err("max_running_per_rank = 0 is out of range 1..=4294967295 requests".to_string())
    );
    assert_eq!(
        p.configure_engine_msg(1, {
            let mut c = cfg;
            c.decode_tps = Some(f32::NAN);
            c
        }),
        Err("decode_tps = NaN is out of range 0..=1000000000 tokens/s".to_string())
    );
    assert_eq!(
        p.configure_engine_msg(1, {
            let mut c = cfg;
            c.prefill_tps = Some(-1.0);
            c
        }),
        Err("prefill_tps = -1 is out of range 0..=1000000000 tokens/s".to_string())
    );
}

#[test]
fn initial_snapshot_is_empty_and_padded() {
    let (_p, r) = publisher(20);
    let s = r.load();
    assert_eq!(s.seq(), 0);
    assert_eq!(s.len(), 20);
    assert_eq!(s.lane_len(), 32);
    assert_eq!(s.running().len(), 32);
    assert_eq!(s.kv_usage().len(), 32);
    assert!(s.validity().iter().all(|v| *v == Validity::Vacant));
    assert!(s.engines().is_empty());
}

#[test]
fn registration_errors() {
    let (mut p, _) = publisher(2);
    let a = WorkerId::new(1, 0);
    let b = WorkerId::new(2, 0);
    assert_eq!(
        p.add_worker(Slot(5), a, SlotGeneration(1)),
        Err(WorkerError::UnknownSlot(Slot(5)))
    );
    p.add_worker(Slot(0), a, SlotGeneration(1)).unwrap();
    assert_eq!(
        p.add_worker(Slot(0), b, SlotGeneration(1)),
        Err(WorkerError::Occupied(Slot(0)))
    );
    assert_eq!(
        p.add_worker(Slot(1), a, SlotGeneration(1)),
        Err(WorkerError::AlreadyRegistered(a, Slot(0)))
    );
    assert_eq!(p.remove_worker(b), Err(WorkerError::UnknownWorker(b)));
    assert_eq!(p.remove_worker(a), Ok((Slot(0), SlotGeneration(1))));
}

/// A later publication publishes the queued prefill the engine still has by its report:
/// 10,000 tokens observed at 10 s on a rank with room (5 running of 16, 2 waiting), at
/// 9,000 tokens/s: published at 10 s, 10,000; at 10.5 s, 10,000 − 4,500 = 5,500; at 12 s
/// (18,000 possible), 0. The requests, decode tokens and observation time stay as reported.
/// Without a prefill throughput (none reported, none configured) the report stands.
#[test]
fn a_later_publication_ages_the_queued_prefill() {
    let (mut p, r) = publisher(4);
    let (w, v) = (WorkerId::new(7, 0), WorkerId::new(8, 0));
    p.add_worker(Slot(1), w, SlotGeneration(1)).unwrap();
    p.add_worker(Slot(2), v, SlotGeneration(1)).unwrap();
    let mut s = sample(5, 2, 16);
    s.waiting_prefill_tokens = Some(10_000);
    p.apply_sample(w, s, Nanos(10 * S)).unwrap();
    s.prefill_tps = None;
    p.apply_sample(v, s, Nanos(10 * S)).unwrap();
    let mut at = |t: u64| {
        p.publish(Nanos(t)).unwrap();
        let l = r.load();
        assert_eq!((l.running()[1], l.waiting()[1]), (5, 2));
        assert_eq!(l.active_decode_tokens()[1], 2000);
        assert_eq!(l.observed_at()[1], Nanos(10 * S));
        (l.waiting_prefill_tokens()[1], l.waiting_prefill_tokens()[2])
    };
    assert_eq!(at(10 * S), (10_000, 10_000));
    assert_eq!(at(10 * S + S / 2), (5_500, 10_000));
    assert_eq!(at(12 * S), (0, 10_000));
}

/// The per-request token estimates for slots that report request counts only come from the
/// fresh slots that report token figures, the configured figure counted as one more request:
/// slots 0 and 1 report 8,000 and 1,000 queued tokens for 2 and 1 waiting, 12,000 and 3,000
/// decode tokens for 3 and 1 running; slot 2 reports counts only; slot 3 reports 90,000 and
/// 90,000 but its report is stale (observed at 1 s, published at 10 s, max age 2 s) and is
/// left out. With a configured 512: (8,000 + 1,000 + 512) / (3 + 1) = 2,378 per waiting,
/// (12,000 + 3,000 + 512) / (4 + 1) = 3,102.4 per running. A fleet where no fresh slot
/// reports them gives the configured figure itself.
#[test]
fn counts_only_slots_are_estimated_from_the_reporting_slots() {
    let (mut p, r) = publisher(4);
    let ws: Vec<WorkerId> = (0..4).map(|i| WorkerId::new(10 + i, 0)).collect();
    for (i, &w) in ws.iter().enumerate() {
        p.add_worker(Slot(i as u32), w, SlotGeneration(1)).unwrap();
    }
    let full = |running, waiting, queued, decode| {
        let mut c = LoadSample::new(running, waiting, 16, 0.5);
        c.waiting_prefill_tokens = Some(queued);
        c.active_decode_tokens = Some(decode);
        c
    };
    p.apply_sample(ws[3], full(7, 9, 90_000, 90_000), Nanos(S))
        .unwrap();
    p.apply_sample(ws[2], LoadSample::new(2, 4, 16, 0.5), Nanos(10 * S))
        .unwrap();
    // Before any slot reports token figures: the configured value.
    p.publish(Nanos(10 * S)).unwrap();
    let l = r.load();
    assert_eq!(l.tokens_per_waiting(512.0), 512.0);
    assert_eq!(l.tokens_per_running(512.0), 512.0);
    p.apply_sample(ws[0], full(3, 2, 8_000, 12_000), Nanos(10 * S))
        .unwrap();
    p.apply_sample(ws[1], full(1, 1, 1_000, 3_000), Nanos(10 * S))
        .unwrap();
    p.publish(Nanos(10 * S)).unwrap();
    let l = r.load();
    assert_eq!(l.validity()[3], Validity::Stale);
    assert_eq!(l.tokens_per_waiting(512.0), 2_378.0);
    assert!((l.tokens_per_running(512.0) - 3_102.4).abs() < 1e-3);
    assert!(!l.reported()[2].contains(Fields::PREFILL_TOKENS));
}

#[test]
fn figures_reach_the_lanes_of_their_slot() {
    let (mut p, r) = publisher(4);
    let w = WorkerId::new(7, 0);
    p.add_worker(Slot(2), w, SlotGeneration(3)).unwrap();
    p.apply_sample(w, sample(5, 6, 16), Nanos(10 * S)).unwrap();
    assert_eq!(p.publish(Nanos(10 * S)), Ok(1));
    let s = r.load();
    assert_eq!(s.seq(), 1);
    assert_eq!(s.published_at(), Nanos(10 * S));
    assert_eq!(s.running()[2], 5);
    assert_eq!(s.waiting()[2], 6);
    assert_eq!(s.max_running()[2], 16);
    assert_eq!(s.kv_usage()[2], 0.5);
    assert_eq!(s.waiting_prefill_tokens()[2], 100);
    assert_eq!(s.active_decode_tokens()[2], 2000);
    assert_eq!(s.decode_tps()[2], 900.0);
    assert_eq!(s.prefill_tps()[2], 9000.0);
    assert_eq!(s.utilization()[2], 0.75);
    assert_eq!(s.observed_at()[2], Nanos(10 * S));
    assert_eq!(s.validity()[2], Validity::Fresh);
    assert_eq!(s.tenant(Slot(2)), Some((w, SlotGeneration(3))));
    // One engine of one rank: occupancy (5 + 6) / 16 = 0.6875.
    assert_eq!(s.engine_occupancy()[2], 0.6875);
    assert_eq!(s.engine_index()[2], 0);
    // Other slots untouched.
    for i in [0, 1, 3] {
        assert_eq!(s.validity()[i], Validity::Vacant);
        assert_eq!(s.running()[i], 0);
        assert_eq!(s.engine_index()[i], NO_ENGINE);
    }
    assert_eq!(s.stats().samples_applied, 1);
    assert_eq!(s.stats().publications, 1);
}

#[test]
fn validity_missing_stale_invalid_fresh() {
    let (mut p, r) = publisher(4);
    let (a, b, c) = (
        WorkerId::new(1, 0),
        WorkerId::new(2, 0),
        WorkerId::new(3, 0),
    );
    for (i, w) in [a, b, c].into_iter().enumerate() {
        p.add_worker(Slot(i as u32), w, SlotGeneration(1)).unwrap();
    }
    p.apply_sample(a, sample(1, 0, 8), Nanos(0)).unwrap();
    p.apply_sample(b, sample(1, 0, 8), Nanos(S)).unwrap();
    p.publish(Nanos(3 * S)).unwrap();
    {
        let s = r.load();
        // a observed 3 s ago > 2 s max age; b 2 s ago (not older than max age); c never.
        assert_eq!(s.validity()[0], Validity::Stale);
        assert_eq!(s.validity()[1], Validity::Fresh);
        assert_eq!(s.validity()[2], Validity::Missing);
    }
    // A bad report for b: rejected, counted, b's figures stay but b is Invalid.
    let bad = {
        let mut c = sample(99, 99, 8);
        c.kv_usage = 1.5;
        c
    };
    assert!(matches!(
        p.apply_sample(b, bad, Nanos(3 * S)),
        Err(UpdateError::AboveOne { .. })
    ));
    // A bad first report for c: Invalid rather than Missing.
    assert!(matches!(
        p.apply_sample(c, LoadSample::idle(0), Nanos(3 * S)),
        Err(UpdateError::ZeroCap { .. })
    ));
    p.publish(Nanos(3 * S)).unwrap();
    {
        let s = r.load();
        assert_eq!(s.validity()[1], Validity::Invalid);
        assert_eq!(s.running()[1], 1, "the good figures were not overwritten");
        assert_eq!(s.validity()[2], Validity::Invalid);
        assert_eq!(s.stats().rejected_invalid, 2);
    }
    // A good report clears Invalid.
    p.apply_sample(b, sample(2, 0, 8), Nanos(4 * S)).unwrap();
    p.publish(Nanos(4 * S)).unwrap();
    assert_eq!(r.load().validity()[1], Validity::Fresh);
    assert_eq!(r.load().running()[1], 2);
}

#[test]
fn out_of_order_reports_are_superseded() {
    let (mut p, r) = publisher(2);
    let w = WorkerId::new(4, 0);
    p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
    p.apply_sglang(&sglang(4, 0, 100.0), Nanos(5 * S)).unwrap();
    // Older by the router's clock.
    assert_eq!(
        p.apply_sglang(&sglang(4, 0, 101.0), Nanos(4 * S)),
        Err(UpdateError::Superseded(w))
    );
    // Older by the engine's timestamp.
    let mut old = sglang(4, 0, 99.0);
    old.num_running_reqs = 30;
    assert_eq!(
        p.apply_sglang(&old, Nanos(6 * S)),
        Err(UpdateError::Superseded(w))
    );
    p.publish(Nanos(6 * S)).unwrap();
    let s = r.load();
    assert_eq!(s.running()[0], 10);
    assert_eq!(
        s.validity()[0],
        Validity::Fresh,
        "superseded is not invalid"
    );
    assert_eq!(s.stats().rejected_superseded, 2);
}

/// A late report with bad values is superseded, not invalid: it never marks a slot that
/// holds newer good figures `Invalid` (checked for all three update paths).
#[test]
fn late_bad_reports_are_superseded_not_invalid() {
    let (mut p, r) = publisher(2);
    let w = WorkerId::new(4, 0);
    p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
    p.apply_sample(w, sample(3, 1, 8), Nanos(100 * S)).unwrap();
    let mut nan = sample(3, 1, 8);
    nan.kv_usage = f32::NAN;
    assert_eq!(
        p.apply_sample(w, nan, Nanos(50 * S)),
        Err(UpdateError::Superseded(w))
    );
    let mut bad = sglang(4, 0, 40.0);
    bad.token_usage = 2.0;
    assert_eq!(
        p.apply_sglang(&bad, Nanos(60 * S)),
        Err(UpdateError::Superseded(w))
    );
    p.publish(Nanos(100 * S)).unwrap();
    let s = r.load();
    assert_eq!(s.validity()[0], Validity::Fresh);
    assert_eq!(s.running()[0], 3);
    assert_eq!(s.stats().rejected_superseded, 2);
    assert_eq!(s.stats().rejected_invalid, 0);
}

#[test]
fn sglang_lanes_and_reported_fields() {
    let (mut p, r) = publisher(1);
    p.add_worker(Slot(0), WorkerId::new(9, 0), SlotGeneration(1))
        .unwrap();
    p.configure_engine(9, {
        let mut c = EngineConfig::default();
        c.prefill_tps = Some(12_000.0);
        c
    })
    .unwrap();
    p.apply_sglang(&sglang(9, 0, 1.0), Nanos(S)).unwrap();
    p.publish(Nanos(S)).unwrap();
    let s = r.load();
    let l = s.slot(Slot(0)).unwrap();
    assert_eq!((l.running, l.waiting, l.max_running), (10, 4, 32));
    assert_eq!(l.waiting_prefill_tokens, 512);
    assert_eq!(l.active_decode_tokens, 6000);
    assert_eq!(l.kv_usage, 0.25);
    assert_eq!(l.decode_tps, 1500.0);
    assert_eq!(l.prefill_tps, 12_000.0, "from the engine config");
    assert_eq!(l.utilization, 0.5);
    assert_eq!(
        l.reported,
        Fields::REQUESTS
            | Fields::PREFILL_TOKENS
            | Fields::DECODE_TOKENS
            | Fields::DECODE_TPS
            | Fields::PREFILL_TPS
            | Fields::UTILIZATION
    );
}

#[test]
fn vllm_whole_update_needs_a_configured_cap() {
    let (mut p, r) = publisher(4);
    let ranks = [WorkerId::new(5, 0), WorkerId::new(5, 1)];
    for (i, w) in ranks.into_iter().enumerate() {
        p.add_worker(Slot(i as u32), w, SlotGeneration(1)).unwrap();
    }
    let update = VllmLoadUpdate {
        engine_id: 5,
        ranks: vec![
            VllmRankLoad {
                dp_rank: 0,
                num_requests_running: 3.0,
                num_requests_waiting: 1.0,
                kv_cache_usage: 0.2,
            },
            VllmRankLoad {
                dp_rank: 1,
                num_requests_running: 7.0,
                num_requests_waiting: 0.0,
                kv_cache_usage: 0.4,
            },
        ],
    };
    assert_eq!(
        p.apply_vllm(&update, Nanos(S)),
        Err(UpdateError::MissingCap(ranks[0]))
    );
    p.publish(Nanos(S)).unwrap();
    assert_eq!(r.load().validity()[0], Validity::Invalid);
    assert_eq!(r.load().validity()[1], Validity::Invalid);
    assert_eq!(r.load().stats().rejected_invalid, 2);

    p.configure_engine(5, {
        let mut c = EngineConfig::default();
        c.max_running_per_rank = Some(8);
        c.decode_tps = Some(700.0);
        c
    })
    .unwrap();
    p.apply_vllm(&update, Nanos(2 * S)).unwrap();
    p.publish(Nanos(2 * S)).unwrap();
    let s = r.load();
    assert_eq!(&s.running()[..2], &[3, 7]);
    assert_eq!(&s.waiting()[..2], &[1, 0]);
    assert_eq!(&s.max_running()[..2], &[8, 8]);
    assert_eq!(&s.kv_usage()[..2], &[0.2, 0.4]);
    assert_eq!(&s.decode_tps()[..2], &[700.0, 700.0]);
    assert_eq!(s.reported()[0], Fields::REQUESTS | Fields::DECODE_TPS);
    assert_eq!(&s.validity()[..2], &[Validity::Fresh, Validity::Fresh]);
    // Engine 5: (3 + 1 + 7 + 0) / (8 + 8) = 11 / 16 = 0.6875 on both ranks.
    let e = s.engines()[0];
    assert_eq!(
        (e.engine_id, e.running, e.waiting, e.max_running),
        (5, 10, 1, 16)
    );
    assert_eq!(&s.engine_occupancy()[..2], &[0.6875, 0.6875]);
}

#[test]
fn vllm_structural_errors() {
    let (mut p, _r) = publisher(2);
    p.add_worker(Slot(0), WorkerId::new(5, 0), SlotGeneration(1))
        .unwrap();
    assert_eq!(
        p.apply_vllm(
            &VllmLoadUpdate {
                engine_id: 5,
                ranks: vec![]
            },
            Nanos(0)
        ),
        Err(UpdateError::EmptyUpdate { engine_id: 5 })
    );
    let r = VllmRankLoad {
        dp_rank: 0,
        num_requests_running: 1.0,
        num_requests_waiting: 0.0,
        kv_cache_usage: 0.0,
    };
    assert_eq!(
        p.apply_vllm(
            &VllmLoadUpdate {
                engine_id: 5,
                ranks: vec![r, r]
            },
            Nanos(0)
        ),
        Err(UpdateError::DuplicateRank(WorkerId::new(5, 0)))
    );
    assert_eq!(
        p.apply_sample(WorkerId::new(6, 0), LoadSample::idle(1), Nanos(0)),
        Err(UpdateError::UnknownWorker(WorkerId::new(6, 0)))
    );
    let st = p.stats();
    assert_eq!((st.rejected_unknown, st.rejected_invalid), (2, 1));
}

#[test]
fn dp_ranks_group_into_engines_and_partial_engines_are_flagged() {
    let (mut p, r) = publisher(8);
    // Engine 20 has DP 2 (both registered), engine 10 is configured for DP 3 but only two
    // ranks are registered; engine 30 has one rank.
    let regs = [
        (Slot(0), WorkerId::new(20, 0)),
        (Slot(1), WorkerId::new(10, 0)),
        (Slot(2), WorkerId::new(20, 1)),
        (Slot(3), WorkerId::new(30, 0)),
        (Slot(4), WorkerId::new(10, 1)),
    ];
    for (slot, w) in regs {
        p.add_worker(slot, w, SlotGeneration(1)).unwrap();
    }
    p.configure_engine(10, {
        let mut c = EngineConfig::default();
        c.dp_size = Some(3);
        c
    })
    .unwrap();
    // An owner at its running-request cap: engine 20 rank 0 is full (37 cap, 37 running,
    // 116 waiting).
    p.apply_sample(regs[0].1, sample(37, 116, 37), Nanos(S))
        .unwrap();
    p.apply_sample(regs[2].1, sample(0, 0, 37), Nanos(S))
        .unwrap();
    p.apply_sample(regs[1].1, sample(1, 0, 4), Nanos(S))
        .unwrap();
    p.apply_sample(regs[4].1, sample(1, 0, 4), Nanos(S))
        .unwrap();
    // Engine 30 gets no report.
    p.publish(Nanos(S)).unwrap();
    let s = r.load();
    let ids: Vec<u64> = s.engines().iter().map(|e| e.engine_id).collect();
    assert_eq!(ids, vec![10, 20, 30], "ascending engine_id");
    assert_eq!(&s.engine_index()[..5], &[1, 0, 1, 2, 0]);
    let e20 = s.engine_of(Slot(2)).unwrap();
    // (37 + 116 + 0 + 0) / (37 + 37) = 153 / 74
    assert_eq!(e20.occupancy(), Some((153.0f64 / 74.0) as f32));
    assert_eq!(s.engine_occupancy()[0], (153.0f64 / 74.0) as f32);
    assert_eq!(s.validity()[0], Validity::Fresh);
    assert_eq!(s.validity()[2], Validity::Fresh);
    // Engine 10: 2 of 3 ranks registered → Partial, no occupancy.
    let e10 = s.engine_of(Slot(1)).unwrap();
    assert_eq!(
        (e10.dp_size, e10.ranks_registered, e10.ranks_current),
        (3, 2, 2)
    );
    assert_eq!(e10.occupancy(), None);
    assert_eq!(s.validity()[1], Validity::Partial);
    assert_eq!(s.validity()[4], Validity::Partial);
    assert_eq!(s.engine_occupancy()[1], 0.0);
    // Engine 30 is Missing.
    assert_eq!(s.validity()[3], Validity::Missing);
    drop(s);

    // Rank 1 of engine 20 goes stale → rank 0 becomes Partial, occupancy withdrawn.
    p.apply_sample(regs[0].1, sample(37, 116, 37), Nanos(4 * S))
        .unwrap();
    p.publish(Nanos(4 * S)).unwrap();
    let s = r.load();
    assert_eq!(s.validity()[2], Validity::Stale);
    assert_eq!(s.validity()[0], Validity::Partial);
    assert_eq!(s.engine_of(Slot(0)).unwrap().occupancy(), None);
    let e20 = s.engine_of(Slot(0)).unwrap();
    assert_eq!((e20.running, e20.waiting, e20.max_running), (37, 116, 37));
}

#[test]
fn removal_vacates_the_slot_and_a_new_tenant_starts_missing() {
    let reg = WorkerRegistry::new(2);
    let (mut p, r) = publisher(2);
    let w = WorkerId::new(1, 0);
    let (slot, generation, _) = reg.get_or_add(w).unwrap();
    p.add_worker(slot, w, generation).unwrap();
    p.apply_sample(w, sample(3, 3, 8), Nanos(S)).unwrap();
    p.publish(Nanos(S)).unwrap();
    let retired = reg.remove(w).unwrap();
    p.remove_worker(w).unwrap();
    reg.release(retired).unwrap();
    p.publish(Nanos(S)).unwrap();
    assert_eq!(r.load().validity()[0], Validity::Vacant);
    assert_eq!(r.load().running()[0], 0);
    let (slot2, gen2, _) = reg.get_or_add(w).unwrap();
    assert_eq!((slot2, gen2), (slot, SlotGeneration(2)));
    p.add_worker(slot2, w, gen2).unwrap();
    p.publish(Nanos(S)).unwrap();
    let s = r.load();
    assert_eq!(s.validity()[0], Validity::Missing);
    assert_eq!(s.running()[0], 0, "the new tenant inherits nothing");
    assert_eq!(s.tenant(Slot(0)), Some((w, SlotGeneration(2))));
}

#[test]
fn pinned_readers_skip_a_publication_without_losing_updates() {
    let (mut p, r) = LoadPublisher::new({
        let mut c = LoadConfig::new(1);
        c.buffers = 2;
        c
    })
    .unwrap();
    let w = WorkerId::new(1, 0);
    p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
    p.publish(Nanos(0)).unwrap(); // buffer 1 current
    let pin = r.load(); // pins buffer 1
    p.publish(Nanos(0)).unwrap(); // buffer 0 current, 1 retired but pinned
    p.apply_sample(w, sample(4, 0, 8), Nanos(S)).unwrap();
    assert_eq!(p.publish(Nanos(S)), Err(PublishError::AllBuffersPinned));
    assert_eq!(p.stats().publish_pinned, 1);
    assert_eq!(pin.seq(), 1);
    drop(pin);
    assert_eq!(p.publish(Nanos(S)), Ok(3));
    assert_eq!(r.load().running()[0], 4);
}

/// A rank report's sample and timestamp are validated as `apply_sample` validates a sample:
/// a report whose public fields hold NaN, infinite or negative values, or a timestamp that
/// is not a finite time, is refused with the typed error, counted in `rejected_invalid`,
/// and marks the slot invalid; its figures never reach the lanes.
#[test]
fn rank_reports_are_validated_like_samples() {
    use kvroute_core::RankReport;
    let (mut p, reader) = publisher(2);
    let w = WorkerId::new(7, 0);
    p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
    let report = |sample: LoadSample, engine_time: Option<f64>| RankReport {
        dp_rank: 0,
        sample: Ok(sample),
        engine_time,
    };
    let mut nan_kv = sample(3, 1, 16);
    nan_kv.kv_usage = f32::NAN;
    assert_eq!(
        p.apply_ranks(7, &[report(nan_kv, Some(1.0))], Nanos(S)),
        Err(UpdateError::NotFinite {
            worker: w,
            field: "kv_usage"
        })
    );
    let mut negative = sample(3, 1, 16);
    negative.prefill_tps = Some(-5.0);
    assert!(matches!(
        p.apply_ranks(7, &[report(negative, Some(1.0))], Nanos(S)),
        Err(UpdateError::Negative { worker, .. }) if worker == w
    ));
    assert_eq!(
        p.apply_ranks(7, &[report(sample(3, 1, 16), Some(f64::NAN))], Nanos(S)),
        Err(UpdateError::NotFinite {
            worker: w,
            field: "engine_time"
        })
    );
    assert_eq!(
        p.apply_ranks(7, &[report(sample(3, 1, 16), Some(-1.0))], Nanos(S)),
        Err(UpdateError::Negative {
            worker: w,
            field: "engine_time",
            value: -1.0
        })
    );
    assert_eq!(p.stats().rejected_invalid, 4);
    assert_eq!(p.stats().samples_applied, 0);
    p.publish(Nanos(S)).unwrap();
    assert_eq!(
        reader.load().slot(Slot(0)).unwrap().validity,
        Validity::Invalid
    );
    // A good report is still taken afterwards.
    p.apply_ranks(7, &[report(sample(3, 1, 16), Some(2.0))], Nanos(2 * S))
        .unwrap();
    p.publish(Nanos(2 * S)).unwrap();
    let got = reader.load().slot(Slot(0)).unwrap();
    assert_eq!(
        (got.validity, got.running, got.kv_usage),
        (Validity::Fresh, 3, 0.5)
    );
}

/// A decoder's rejection handed over in a rank report is counted whatever its kind: an
/// unknown worker in `rejected_unknown`, a report from the future in `rejected_future`.
#[test]
fn every_rejection_in_a_rank_report_is_counted() {
    use kvroute_core::RankReport;
    let (mut p, _reader) = publisher(2);
    let w = WorkerId::new(7, 0);
    p.add_worker(Slot(0), w, SlotGeneration(1)).unwrap();
    let before = p.stats();
    let err = UpdateError::UnknownWorker(WorkerId::new(9, 0));
    let report = RankReport {
        dp_rank: 0,
        sample: Err(err.clone()),
        engine_time: None,
    };
    assert_eq!(p.apply_ranks(7, &[report], Nanos(S)), Err(err));
    let future = UpdateError::FromTheFuture {
        worker: w,
        now: Nanos(10 * S),
        clock: Nanos(S),
    };
    let report = RankReport {
        dp_rank: 0,
        sample: Err(future.clone()),
        engine_time: None,
    };
    assert_eq!(p.apply_ranks(7, &[report], Nanos(S)), Err(future));
    let after = p.stats();
    assert_eq!(after.rejected_unknown, before.rejected_unknown + 1);
    assert_eq!(after.rejected_future, before.rejected_future + 1);
    assert_eq!(after.rejected_invalid, before.rejected_invalid);
}

/// Generation 0 is the snapshot's vacant marker: a worker cannot be registered under it.
#[test]
fn a_worker_cannot_take_generation_zero() {
    let (mut p, _reader) = publisher(2);
    let w = WorkerId::new(7, 0);
    assert_eq!(
        p.add_worker(Slot(0), w, SlotGeneration(0)),
        Err(WorkerError::ZeroGeneration(Slot(0)))
    );
    // Nothing changed: the worker registers at generation 1.
    assert_eq!(p.add_worker(Slot(0), w, SlotGeneration(1)), Ok(()));
}
