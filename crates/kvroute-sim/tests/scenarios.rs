//! The expected results of the built-in scenarios (fixed seed), through the real driver,
//! engines and Router. Each bound is what the scenario's failure requires of a good policy
//! (`docs/FAILURE-MODES.md` lists the behaviours and their scenarios); the figures are
//! printed (`--nocapture`) so a failure shows how far off the model is.
//!
//! Run in release: `cargo test --release -p kvroute-sim --test scenarios`.

use kvroute::{Policy, ProjectedMode};
use kvroute_sim::driver::{RunOptions, run};
use kvroute_sim::report::{Metrics, compute};
use kvroute_sim::workload::Workload;
use kvroute_sim::workload::scenarios::{hot_owner, owner_canary, zipf};

/// The seed of every expected result (the command line's default).
const SEED: u64 = 1;

const PROJECTED: Policy = Policy::ProjectedTime {
    mode: ProjectedMode::Enforce,
};

/// Runs `policies` over `w` in parallel; metrics in the order given, plus each run's
/// engine samples for the checks that look at time series.
fn run_all(w: &Workload, policies: &[(&str, Policy)]) -> Vec<(Metrics, kvroute_sim::RunResult)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = policies
            .iter()
            .map(|&(label, p)| {
                s.spawn(move || {
                    let opts = RunOptions {
                        seed: SEED,
                        ..Default::default()
                    };
                    let r = run(w, p, &opts);
                    assert_eq!(r.error, None, "{label}: the run started");
                    let m = compute(label, &r);
                    eprintln!(
                        "{}/{label}: {:.0} tok/s, busy {:.1} (peak {}), max q {} on {:?}, \
                         share {:.3}..{:.3}, hit {:.4}, imbalance {:?}, cv {:?}, done {}/{}",
                        w.name,
                        m.output_tokens_per_s,
                        m.busy_engines_mean,
                        m.busy_engines_peak,
                        m.max_queue,
                        m.max_queue_engine,
                        m.generation_share_min,
                        m.generation_share_max,
                        m.hit_rate,
                        m.imbalance,
                        m.running_cv,
                        m.finished,
                        m.requests
                    );
                    (m, r)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn hot_owner_51_projected_time_spills_to_idle_peers() {
    let w = hot_owner::build(SEED);
    let runs = run_all(
        &w,
        &[("kv_aware", Policy::KvAware), ("projected_time", PROJECTED)],
    );
    let (kv, kv_run) = &runs[0];
    let (pt, _) = &runs[1];
    assert_eq!(kv.finished, kv.requests);
    assert_eq!(pt.finished, pt.requests);

    // kv_aware reproduces the collapse: every routed request on the owner, whose queue
    // keeps growing while the burst lasts, and most engines idle.
    assert_eq!(kv.generation_share[hot_owner::OWNER as usize], 1.0);
    assert_eq!(kv.max_queue_engine, Some(hot_owner::OWNER));
    assert!(kv.busy_engines_mean < f64::from(hot_owner::ENGINES) / 2.0);
    let last_arrival = w.requests.iter().map(|r| r.arrival_s).fold(0.0, f64::max);
    let owner_waiting: Vec<(f64, u32)> = kv_run
        .samples
        .iter()
        .filter(|s| s.engine == hot_owner::OWNER)
        .filter(|s| s.t_s >= hot_owner::BURST_START_S + 1.0 && s.t_s <= last_arrival)
        .map(|s| (s.t_s, s.waiting))
        .collect();
    assert!(owner_waiting.len() >= 10, "samples through the burst");
    // Growing: every sample at least 5 s later holds more waiting requests.
    for a in &owner_waiting {
        for b in owner_waiting.iter().filter(|b| b.0 >= a.0 + 5.0) {
            assert!(b.1 > a.1, "owner queue {a:?} then {b:?}");
        }
    }

    // projected_time (enforce) keeps at least 45 engines busy and delivers at least 3x
    // kv_aware's output tokens/s.
    assert!(
        pt.busy_engines_mean >= 45.0,
        "busy {}",
        pt.busy_engines_mean
    );
    assert!(
        pt.output_tokens_per_s >= 3.0 * kv.output_tokens_per_s,
        "{} vs {}",
        pt.output_tokens_per_s,
        kv.output_tokens_per_s
    );
}

#[test]
fn owner_canary_occupancy_pressure_splits_generation() {
    let w = owner_canary::build(SEED);
    let runs = run_all(
        &w,
        &[
            ("kv_aware", Policy::KvAware),
            ("owner_pressure", Policy::OwnerPressure),
            ("projected_time", PROJECTED),
        ],
    );
    let (kv, _) = &runs[0];
    for (m, _) in &runs {
        assert_eq!(m.finished, m.requests, "{}", m.policy);
    }
    // The control keeps a 100:0 generation share.
    assert_eq!(kv.generation_share[owner_canary::OWNER as usize], 1.0);
    for (m, _) in &runs[1..] {
        // At least 40% of the generation on both engines, at least 1.5x the control's
        // output tokens/s, and a cached prompt fraction within 2 points of the control's.
        assert!(
            m.generation_share_min >= 0.40,
            "{}: {}",
            m.policy,
            m.generation_share_min
        );
        assert!(
            m.output_tokens_per_s >= 1.5 * kv.output_tokens_per_s,
            "{}: {} vs {}",
            m.policy,
            m.output_tokens_per_s,
            kv.output_tokens_per_s
        );
        assert!(
            (m.hit_rate - kv.hit_rate).abs() <= 0.02,
            "{}: hit {} vs {}",
            m.policy,
            m.hit_rate,
            kv.hit_rate
        );
    }
}

/// `zipf-prefixes`: on caches warmed by an earlier, evenly spread run (the popular
/// prefixes on both engines), the original router's rule (`kv_aware_first`: the first
/// engine holding the deepest prefix, however busy; misses by load) sends every request
/// for a prefix both engines hold to the same engine. The incident's load-aware score
/// (`load_aware:0.5`) sees the same overlap on both and splits by in-flight requests: at
/// most 0.6x the control's imbalance (the incident: 2.358 → 1.249, 0.53x) at a hit rate
/// within 1.5 points (91.2 % → 90.7 %). The warm-up is done before the routed load.
#[test]
fn zipf_prefixes_load_aware_balances_at_the_same_hit_rate() {
    let w = zipf::build(SEED);
    let runs = run_all(
        &w,
        &[
            ("kv_aware_first", Policy::KvAwareFirst),
            ("load_aware:0.5", Policy::LoadAware { beta: 0.5 }),
        ],
    );
    for (m, r) in &runs {
        let warm: Vec<_> = r.requests.iter().filter(|q| q.pinned).collect();
        assert!(!warm.is_empty());
        for q in warm {
            let done = q.finish_s.expect("every warm-up request finishes");
            assert!(
                done < zipf::LOAD_START_S,
                "{}: warm-up ends at {done}",
                m.policy
            );
        }
    }
    let (kv, _) = &runs[0];
    let (la, _) = &runs[1];
    let kv_imb = kv.imbalance.expect("both engines ran something");
    let la_imb = la.imbalance.expect("both engines ran something");
    // At most 0.6x kv_aware's imbalance, with a hit rate within 1.5 points.
    assert!(la_imb <= 0.6 * kv_imb, "imbalance {la_imb} vs {kv_imb}");
    assert!(
        (la.hit_rate - kv.hit_rate).abs() <= 0.015,
        "hit {} vs {}",
        la.hit_rate,
        kv.hit_rate
    );
}

/// `fail-fast`: from 10 s engine 0 fails every request at once while its telemetry reads
/// idle. With outcomes reported, the default policy's breaker opens after 5 failures in a
/// row (the engine's requests from before 10 s still complete, which resets the count, so
/// it may take a few more) and re-opens after each failed probe (cooldowns 5, 10, 20, 40 s
/// over the ~80 s left), so the fleet serves as the same fleet without the failing engine:
/// output tokens/s within 5 % of that 7-engine run. Without the breaker the idle-looking
/// engine keeps drawing requests: at least 10 times the failed attempts and the requests
/// given up.
#[test]
fn fail_fast_keeps_the_throughput_of_the_fleet_without_the_failing_engine() {
    use kvroute_sim::workload::scenarios::faults;
    let failing = faults::build_fail_fast(SEED);
    let without = faults::fail_fast_without_the_failing_engine(SEED);
    let run_one = |w: &Workload, breaker: Option<kvroute::BreakerConfig>| {
        let opts = RunOptions {
            seed: SEED,
            breaker,
            ..Default::default()
        };
        let r = run(w, PROJECTED, &opts);
        assert_eq!(r.error, None);
        let m = compute("projected_time", &r);
        eprintln!(
            "{} ({} engines, breaker {}): {:.1} tok/s, failed attempts {}, given up {}, \
             done {}/{}",
            w.name,
            w.fleet.engines,
            breaker.is_some(),
            m.output_tokens_per_s,
            r.failed_attempts,
            r.rejected_for_good,
            m.finished,
            m.requests
        );
        (m, r)
    };
    let (m_fail, r_fail) = run_one(&failing, Some(Default::default()));
    let (m_base, r_base) = run_one(&without, Some(Default::default()));
    let (_, r_off) = run_one(&failing, None);
    assert_eq!((r_base.failed_attempts, r_base.rejected_for_good), (0, 0));
    assert!(
        m_fail.output_tokens_per_s >= 0.95 * m_base.output_tokens_per_s,
        "{:.1} tok/s against {:.1} without the failing engine",
        m_fail.output_tokens_per_s,
        m_base.output_tokens_per_s
    );
    assert!(
        r_fail.failed_attempts > 0,
        "the engine failed some attempts"
    );
    assert!(
        r_off.failed_attempts >= 10 * r_fail.failed_attempts,
        "failed attempts: {} with the breaker, {} without",
        r_fail.failed_attempts,
        r_off.failed_attempts
    );
    assert!(
        r_off.rejected_for_good >= 10 * r_fail.rejected_for_good.max(1),
        "given up: {} with the breaker, {} without",
        r_fail.rejected_for_good,
        r_off.rejected_for_good
    );
}

/// `partial-telemetry` at 16x: engines 0-3 report only vLLM's gauges (request counts),
/// engines 4-7 their queued prefill and decode tokens too. The counts-only half must be
/// costed on the same basis as the reporting half (its tokens per request estimated from
/// the reporting engines' figures): the two halves' mean running requests within 15 % of
/// each other (with the configured 512 tokens per waiting request against the reporting
/// engines' ~4,200, the counts-only half ran 28.2 on average against 20.2, 1.40x), and the
/// fleet's output within 3 % of the same load with every engine reporting everything.
#[test]
fn a_fleet_with_counts_only_telemetry_is_costed_on_one_basis() {
    use kvroute_sim::workload::arrivals::scale_arrivals;
    use kvroute_sim::workload::scenarios::faults;
    let mut partial = faults::build_partial_telemetry(SEED);
    scale_arrivals(&mut partial, 16.0).unwrap();
    let mut full = partial.clone();
    full.faults.clear();
    let (m_partial, _) = run_all(&partial, &[("projected_time", PROJECTED)]).remove(0);
    let (m_full, _) = run_all(&full, &[("projected_time", PROJECTED)]).remove(0);
    let half = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    let gauges = half(&m_partial.mean_running[..4]);
    let reporting = half(&m_partial.mean_running[4..]);
    eprintln!(
        "mean running: counts-only {gauges:.2}, reporting {reporting:.2}; \
         {:.0} tok/s against {:.0} with full telemetry",
        m_partial.output_tokens_per_s, m_full.output_tokens_per_s
    );
    assert!(
        gauges <= 1.15 * reporting && reporting <= 1.15 * gauges,
        "counts-only half {gauges:.2} against reporting half {reporting:.2}"
    );
    assert!(
        m_partial.output_tokens_per_s >= 0.97 * m_full.output_tokens_per_s,
        "{:.0} tok/s against {:.0}",
        m_partial.output_tokens_per_s,
        m_full.output_tokens_per_s
    );
}

/// `partial-telemetry` at 16x under `least_load`, which adds a worker's queued prefill and
/// decode tokens as they stand: a counts-only engine's figures are estimated from its
/// request counts, which include the requests routed there, so the tokens reserved for
/// those requests must leave its figures when the report that counts them arrives. The
/// two halves' mean running requests within 15 % of each other (while each counts-only
/// engine's reservations stayed until its requests ended, the counts-only half looked
/// twice as loaded and ran 19.8 requests on average against 25.3, 0.78x, seed 1).
#[test]
fn least_load_counts_a_counts_only_engine_once() {
    use kvroute_sim::workload::arrivals::scale_arrivals;
    use kvroute_sim::workload::scenarios::faults;
    let mut w = faults::build_partial_telemetry(SEED);
    scale_arrivals(&mut w, 16.0).unwrap();
    let (m, _) = run_all(&w, &[("least_load", Policy::LeastLoad)]).remove(0);
    let half = |r: &[f64]| r.iter().sum::<f64>() / r.len() as f64;
    let gauges = half(&m.mean_running[..4]);
    let reporting = half(&m.mean_running[4..]);
    eprintln!("mean running: counts-only {gauges:.2}, reporting {reporting:.2}");
    assert!(
        gauges >= reporting / 1.15 && reporting >= gauges / 1.15,
        "counts-only half {gauges:.2} against reporting half {reporting:.2}"
    );
}

/// `straggler` at 4x: from 10 s engine 0 steps three times slower while reporting its
/// nominal speed. Its capacity is then a third of a peer's, a share of (1/3) / (7 + 1/3) =
/// 4.5 % of the fleet's: the default policy, which sees only its queue and running count
/// grow, keeps its generation share below two thirds of the fair 12.5 % (8.3 %) while no
/// other engine falls below half the fair share, and serves at least 1.5 times the output
/// of `round_robin`, which gives the slow engine an eighth of the requests and waits for
/// it.
#[test]
fn a_straggler_gets_less_work_without_starving_the_fleet() {
    use kvroute_sim::workload::arrivals::scale_arrivals;
    use kvroute_sim::workload::scenarios::faults;
    let mut w = faults::build_straggler(SEED);
    scale_arrivals(&mut w, 4.0).unwrap();
    let runs = run_all(
        &w,
        &[
            ("projected_time", PROJECTED),
            ("round_robin", Policy::RoundRobin),
        ],
    );
    let (pt, rr) = (&runs[0].0, &runs[1].0);
    let share = &pt.generation_share;
    eprintln!("generation shares {share:?}");
    assert!(
        share[0] < 0.125 * 2.0 / 3.0,
        "slow engine's share {}",
        share[0]
    );
    for (e, &s) in share.iter().enumerate().skip(1) {
        assert!(s >= 0.0625, "engine {e}'s share {s}");
    }
    assert!(
        pt.output_tokens_per_s >= 1.5 * rr.output_tokens_per_s,
        "{:.0} tok/s against round_robin's {:.0}",
        pt.output_tokens_per_s,
        rr.output_tokens_per_s
    );
}
