//! A concurrency stress test of the whole [`Router`]: many threads drive one router through
//! every kind of operation at once, and the result is compared with reference models.
//!
//! The loom models (`scripts/loom.sh`) prove each lock-free protocol on its own, in small
//! configurations, and do not model crossbeam-epoch's collector. This test runs the real
//! protocols together, at full size, with real reclamation: run under AddressSanitizer
//! (`scripts/asan.sh`) it also shows that no use-after-free, double free or out-of-bounds
//! access happens on any path it reaches (retired index nodes and tables, snapshot buffers,
//! reservation guards outliving their worker).
//!
//! Threads (all on one router of 48 slots, blocks of 4 tokens, 64 blocks per worker):
//! * 3 writers, each owning 8 workers (5 fed through `store` / `store_hashes` /
//!   `remove_blocks` / `clear_blocks`, 3 through `ingest` with sequence numbers, gaps
//!   recovered by `skip_replay` or by a replay, stale duplicates, wrong DP ranks), which they
//!   add, remove and re-add; every store is a chain after its parent (refused when the
//!   worker does not hold it), and stores conflict and burst past the cap (eviction, which
//!   the model reconciles with the engine hashes the index kept). Each worker's events come
//!   from its one writer, in a deterministic order.
//! * 3 routing threads: token and hash prompts over a small tree of shared blocks, cold
//!   prompts, another namespace, malformed requests; decisions are held for a while and
//!   ended by `release`, `commit` or `first_token`.
//! * telemetry (load reports, some bad, some workers going stale, and `publish`), the TTL
//!   sweeper, and a knob thread cycling every policy through `set_score_config`.
//! * 3 stable workers, registered before and never touched during the run, holding fixed
//!   blocks.
//!
//! What it proves, whatever the interleaving:
//! * every writer call returns exactly what the writer's reference model
//!   (`index_common::Model`) predicts (but for which blocks the cap evicts), every ingest report is exact, events for a removed
//!   worker are refused, and a re-added worker starts empty and trusted;
//! * every decision names a worker of the fleet plan, never claims more overlap than the
//!   prompt has blocks, claims none for a cold prompt, claims exactly the known overlap on a
//!   stable worker, and reserves exactly one request, the uncached prefill and the expected
//!   output on the slot and tenancy it names; a (slot, tenancy) always names one worker,
//!   one that was registered in that slot;
//! * the worker list, load updates and publication numbers stay consistent, and a refused
//!   knob change changes nothing.
//!
//! The run ends with a quiet window: telemetry and the sweeper stop, so nothing reconciles
//! or sweeps reservations any more, while writers and routing threads go on. And once
//! quiescent (every decision ended):
//! * the index equals the merged models: every overlap of a set of queries, per-worker
//!   block counts, nodes, residencies and every index counter;
//! * no reservation is left on any worker once the router ends the work it carried into
//!   re-added workers (a guard that failed to return its amounts in the quiet window would
//!   leave them there), every reserved amount, the carried ones included, came back
//!   (returned live, swept, reconciled or dropped with its worker), nothing was clamped;
//! * the router's decision, fallback, redirect, shadow, unchecked, re-score, rejection,
//!   sweep and ingest counters equal what the threads tallied, and every outcome the
//!   routing threads recorded is counted once (for its tenancy, or as stale), with breakers
//!   opening, going half-open and re-opening during the run and none open after the final
//!   publication;
//! * with fresh telemetry and the `kv_aware` policy, every tree prompt goes to a worker with
//!   the deepest overlap the model predicts.
//!
//! The run is done twice, without and with admission control. No timing is asserted: the
//! duration only bounds the run, and every thread does a minimum number of operations
//! whatever the machine's speed. `router_stress_short` (in `cargo test`) runs 2 s in all;
//! `router_stress_full` (ignored by default) runs `KVROUTE_STRESS_SECS` seconds (default 60),
//! which is what `scripts/asan.sh` runs under AddressSanitizer.

// kvroute-index's reference model of the index, shared with that crate's own tests.
#[path = "../crates/kvroute-index/tests/index_common/mod.rs"]
mod index_common;
mod stress;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use index_common::{Model, Rng, check_matches, check_run_stats};
use kvroute::ingest::IngestStats;
use kvroute::{
    AdmissionConfig, EventError, LoadSample, Nanos, Policy, RejectionCounts, Reserved,
    RouteRequest, Router, RouterConfig, RouterStats, ScoreConfig, SequenceHash, Slot, WorkerId,
};

use stress::control::{START, TelemetryOut, knobs, sweeper, telemetry};
use stress::routing::{RouteOut, router_thread};
use stress::writer::{IngestTally, WriterOut, writer};
use stress::{
    BRANCHES, BS, CAP, Clock, DEPTH, MAX_AGE, MAX_OUTPUT, MAX_PROMPT, MAX_RESCORES, MIN_DECISIONS,
    PREFIX, ROUTERS, Run, SLOTS, STABLE, TTL, Tree, WRITERS, stable_plan,
};

#[test]
fn router_stress_short() {
    both(Duration::from_secs(2));
}

#[test]
#[ignore = "a minute; run by scripts/asan.sh (KVROUTE_STRESS_SECS sets the duration)"]
fn router_stress_full() {
    let secs: f64 = std::env::var("KVROUTE_STRESS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    both(Duration::from_secs_f64(secs));
}

/// Half the duration without admission control, half with it.
fn both(total: Duration) {
    stress(None, total / 2);
    let admission = AdmissionConfig::new(24);
    stress(Some(admission), total / 2);
}

fn config(admission: Option<AdmissionConfig>) -> RouterConfig {
    let mut cfg = RouterConfig::new(SLOTS, BS);
    cfg.expected_blocks = 16;
    cfg.max_blocks_per_worker = CAP;
    cfg.max_load_age = MAX_AGE;
    cfg.reservation_ttl = TTL;
    cfg.max_rescores = MAX_RESCORES;
    cfg.admission = admission;
    cfg.near_tie_seed = 7;
    // Breakers open on the routing threads' failed outcomes and go half-open at the first
    // publication 1 ms later: every transition runs during the run, and none is left open
    // by the final check's publication.
    let mut breaker = kvroute::BreakerConfig::default();
    breaker.cooldown = Nanos(1_000_000);
    breaker.max_cooldown = Nanos(1_000_000);
    cfg.breaker = Some(breaker);
    cfg
}

fn idle() -> LoadSample {
    {
        let mut c = LoadSample::idle(32);
        c.prefill_tps = Some(8_000.0);
        c.decode_tps = Some(1_000.0);
        c.waiting_prefill_tokens = Some(0);
        c.active_decode_tokens = Some(0);
        c
    }
}

/// Everything the threads hand back.
struct Outs {
    writers: Vec<WriterOut>,
    routes: Vec<RouteOut>,
    telemetry: TelemetryOut,
    swept: Reserved,
    sweeps: u64,
    knob_rounds: u64,
}

fn stress(admission: Option<AdmissionConfig>, duration: Duration) {
    let router = Router::new(config(admission)).expect("valid config");
    let tree = Tree::new();
    let clock = Clock::new(START);
    let mut model = Model::new(SLOTS, BS, CAP);
    for (k, (slot, b, blocks)) in stable_plan().into_iter().enumerate() {
        assert_eq!(router.add_worker(STABLE[k]), Ok(slot));
        // The branch's chain up to the last block of the plan, as one store, then the
        // blocks the plan leaves out removed (a hole, as an engine's eviction leaves it).
        let end = blocks.last().map_or(0, |&p| p + 1);
        let pairs: Vec<_> = (0..end)
            .map(|p| (Tree::eh(b, p), tree.chains[b][p]))
            .collect();
        let want = model.store_hashes(slot, &pairs).map_err(EventError::Index);
        assert_eq!(router.store_hashes(STABLE[k], None, &pairs), want);
        let holes: Vec<_> = (0..end)
            .filter(|p| !blocks.contains(p))
            .map(|p| Tree::eh(b, p))
            .collect();
        let want = model.remove(slot, &holes).map_err(EventError::Index);
        assert_eq!(router.remove_blocks(STABLE[k], &holes), want);
        router.update_load(STABLE[k], idle(), clock.now()).unwrap();
    }
    router.publish(clock.now()).unwrap();
    let stable = model.clone();
    let run = Run::default();

    let outs = std::thread::scope(|s| {
        let (r, t, st, c, rn) = (&router, &tree, &stable, &clock, &run);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| s.spawn(move || writer(r, t, rn, w, 0x5eed_0000 + w as u64)))
            .collect();
        let routes: Vec<_> = (0..ROUTERS)
            .map(|i| s.spawn(move || router_thread(r, t, st, c, rn, admission, 0xd1ce + i as u64)))
            .collect();
        let tele = s.spawn(move || telemetry(r, c, rn, 0x7e1e));
        let sweep = s.spawn(move || sweeper(r, c, rn));
        let knob = s.spawn(move || knobs(r, rn, 0x4b0b));
        // Three quarters with telemetry and sweeping, then the quiet window.
        std::thread::sleep(duration * 3 / 4);
        run.quiet();
        let (sweeps, swept) = sweep.join().unwrap();
        let telemetry = tele.join().unwrap();
        std::thread::sleep(duration / 4);
        run.stop();
        let knob_rounds = knob.join().unwrap();
        Outs {
            writers: writers.into_iter().map(|h| h.join().unwrap()).collect(),
            routes: routes.into_iter().map(|h| h.join().unwrap()).collect(),
            telemetry,
            swept,
            sweeps,
            knob_rounds,
        }
    });

    let mut registered: Vec<(WorkerId, Slot)> =
        STABLE.iter().copied().zip((0..3).map(Slot)).collect();
    let mut history: BTreeSet<(WorkerId, Slot)> = registered.iter().copied().collect();
    let mut ingest = IngestTally::default();
    for w in &outs.writers {
        registered.extend(&w.registered);
        history.extend(&w.history);
        ingest.add(&w.ingest);
        model.merge(w.model.clone());
    }
    registered.sort_by_key(|&(w, s)| (s, w));
    let listed: Vec<(WorkerId, Slot)> = router.workers().into_iter().map(|(s, w)| (w, s)).collect();
    assert_eq!(listed, registered, "registered workers");

    check_coverage(&outs, &model);
    check_index(&router, &tree, &model);
    check_tenancies(&outs.routes, &history);
    check_reservations(&router, &registered, &outs);
    check_counters(&router.stats(), &outs, admission);
    check_ingest(&router.ingest_stats(), &ingest);
    check_final_routing(&router, &tree, &model, &registered, &clock);
    summary(&router, &outs, admission);
}

/// What each writer did depends only on its seed and minimum count, so these hold on any
/// machine; the route side is timing-dependent and only printed.
fn check_coverage(outs: &Outs, model: &Model) {
    for w in &outs.writers {
        let c = &w.coverage;
        assert!(
            c.adds > 1 && c.removals > 0 && c.refused_events > 0,
            "{c:?}"
        );
        assert!(c.gaps_skipped > 0 && c.gaps_replayed > 0, "{c:?}");
    }
    let m = &model.counters;
    assert!(
        m.evicted_blocks > 0 && m.hash_conflicts > 0 && m.unknown_removes > 0,
        "{m:?}"
    );
    assert!(m.unknown_parent_stores > 0, "{m:?}");
    let calls: u64 = outs.routes.iter().map(|r| r.calls).sum();
    assert!(calls >= ROUTERS as u64 * MIN_DECISIONS);
}

/// The index is the merged model: overlaps of every tree path prefix, of paths followed by unstored blocks and of
/// the prefix alone, per-worker block counts, nodes, residencies and counters.
fn check_index(router: &Router, tree: &Tree, model: &Model) {
    let mut queries: Vec<Vec<SequenceHash>> = Vec::new();
    for c in &tree.chains {
        queries.extend((1..=DEPTH).map(|n| c[..n].to_vec()));
        queries.push(c[PREFIX..].to_vec());
    }
    // A path of the tree followed by blocks nobody stored, as a new turn of a
    // conversation is. (A query mixing blocks of two branches is not one: a chained hash
    // names its whole prefix, so no prompt hashes to it.)
    let mut rng = Rng::new(77);
    queries.extend((0..32).map(|_| {
        let (b, n) = (
            rng.below(BRANCHES as u64) as usize,
            rng.below(DEPTH as u64 + 1),
        );
        let mut q = tree.chains[b][..n as usize].to_vec();
        q.extend((n..DEPTH as u64).map(|_| SequenceHash(rng.next_u64() | 1)));
        q
    }));
    let slots: Vec<Slot> = (0..SLOTS as u32).map(Slot).collect();
    let mut out = router.index().new_overlaps();
    check_matches(router.index(), model, &queries, &slots, &mut out).unwrap();
    check_run_stats(&router.index_stats(), model).unwrap();
}

/// Every (slot, tenancy) a decision named belongs to one worker, registered in that slot.
fn check_tenancies(routes: &[RouteOut], history: &BTreeSet<(WorkerId, Slot)>) {
    let mut owner: BTreeMap<(Slot, u64), WorkerId> = BTreeMap::new();
    for (w, slot, generation) in routes.iter().flat_map(|r| &r.tenancies) {
        assert!(
            history.contains(&(*w, *slot)),
            "{w} was never in slot {}",
            slot.0
        );
        let prev = owner.insert((*slot, generation.0), *w);
        assert!(
            prev.is_none_or(|p| p == *w),
            "slot {slot:?} tenancy {generation:?}: {prev:?} and {w}"
        );
    }
}

fn add(a: &mut Reserved, b: &Reserved) {
    a.requests += b.requests;
    a.prefill_tokens += b.prefill_tokens;
    a.decode_tokens += b.decode_tokens;
}

/// Nothing is left reserved, and every reserved amount came back exactly once.
///
/// Each decision added one request, its prefill and its decode tokens; each is returned by
/// its guard (live), or dropped by the sweeper, reconciliation or the worker's removal, which
/// count what they drop. So `made <= returned + dropped`, field by field. The drops can also
/// include additions of reservations that were refused (a stale tenancy: a request and its
/// tokens; a contended one: its tokens) and taken back after a drop, and `first_token` grows
/// the decode counter by at most the prefill it held, which bounds the excess.
fn check_reservations(router: &Router, registered: &[(WorkerId, Slot)], outs: &Outs) {
    // Work carried into a re-added worker stays reserved until its own telemetry reports,
    // and the quiet window has none: the router ends it here, and it counts as made by the
    // router (`stats().carried.reserved`) and came back by its own return
    // (`stats().carried.returned`) when not reconciled, swept or removed first.
    // A request whose reservation a report absorbed and that has since ended stays counted
    // as ended (`Reserved::finished`) until the worker's next report, which the quiet
    // window has none of: at most one per decision.
    let decisions: u64 = outs.routes.iter().map(RouteOut::decisions).sum();
    for &(w, _) in registered {
        let _ = router.end_carried(w);
        let left = router.reserved(w).expect("registered");
        assert_eq!(
            Reserved {
                finished: 0,
                ..left
            },
            Reserved::default(),
            "{w}"
        );
        assert!(left.finished <= decisions, "{w}: {left:?}");
    }
    let carry = router.stats().carried;
    let r = router.stats().reservations;
    assert_eq!(r.underflow_clamped, 0);
    assert_eq!(r.rejected_saturated, 0);
    let (mut made, mut back) = (Reserved::default(), Reserved::default());
    let mut first_token_prefill = 0;
    for o in &outs.routes {
        add(&mut made, &o.made);
        add(&mut back, &o.returned);
        first_token_prefill += o.first_token_prefill;
    }
    for dropped in [r.swept, r.reconciled, r.removed] {
        add(&mut back, &dropped);
    }
    assert_eq!(
        made.requests,
        outs.routes.iter().map(RouteOut::decisions).sum::<u64>()
    );
    add(&mut made, &carry.reserved);
    add(&mut back, &carry.returned);
    let ctx = format!("made {made:?}, returned or dropped {back:?}, table {r:?}");
    assert!(made.requests <= back.requests, "{ctx}");
    assert!(back.requests <= made.requests + r.rejected_stale, "{ctx}");
    assert!(made.prefill_tokens <= back.prefill_tokens, "{ctx}");
    assert!(made.decode_tokens <= back.decode_tokens, "{ctx}");
    let refused = r.rejected_stale + r.rejected_contended;
    let slack = first_token_prefill + refused * u64::from(MAX_PROMPT + MAX_OUTPUT);
    let (m, b) = (
        made.prefill_tokens + made.decode_tokens,
        back.prefill_tokens + back.decode_tokens,
    );
    assert!(b <= m + slack, "{ctx}, slack {slack}");
    assert_eq!(r.swept, outs.swept, "only the sweeper thread sweeps");
}

/// The router's counters equal the threads' tallies.
fn check_counters(st: &RouterStats, outs: &Outs, admission: Option<AdmissionConfig>) {
    let mut by_reason: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut fallbacks = [0u64; 4];
    let mut errors = RejectionCounts::default();
    let (mut redirects, mut at_max, mut rescores, mut shadow, mut shadow_extra) = (0, 0, 0, 0, 0);
    for o in &outs.routes {
        for (k, n) in &o.by_reason {
            *by_reason.entry(*k).or_default() += n;
        }
        for (f, n) in fallbacks.iter_mut().zip(o.fallbacks) {
            *f += n;
        }
        errors.invalid_request += o.errors.invalid_request;
        errors.contended += o.errors.contended;
        errors.over_bound += o.errors.over_bound;
        redirects += o.redirects;
        at_max += o.at_max_rescores;
        rescores += o.rescores;
        shadow += o.shadow_disagreements;
        shadow_extra += o.shadow_redirected;
    }
    let counted: BTreeMap<(&str, &str), u64> = st
        .decisions
        .iter()
        .map(|d| ((d.policy, d.reason.name()), d.count))
        .collect();
    assert_eq!(counted, by_reason, "decisions by policy and reason");
    let f = &st.fallbacks;
    assert_eq!(
        [f.missing, f.invalid, f.stale, f.partial],
        fallbacks,
        "fallbacks"
    );
    assert_eq!(st.rejections, errors, "rejections");
    assert_eq!(st.admission_redirects, redirects, "admission redirects");
    // Without admission the last attempt reserves unchecked; with it, within the bound.
    let unchecked = if admission.is_none() { at_max } else { 0 };
    assert_eq!(st.unchecked_reserves, unchecked, "unchecked reserves");
    // Each decision's re-scores, all of them for each contended request, and up to all of
    // them for each admission rejection (the error does not say how many it made).
    let lo = rescores + errors.contended * u64::from(MAX_RESCORES);
    let hi = lo + errors.over_bound * u64::from(MAX_RESCORES);
    assert!(
        (lo..=hi).contains(&st.rescores),
        "re-scores {} not in {lo}..={hi}",
        st.rescores
    );
    assert!(
        (shadow..=shadow + shadow_extra).contains(&st.shadow_disagreements),
        "shadow disagreements {} not in {shadow}..={}",
        st.shadow_disagreements,
        shadow + shadow_extra
    );
    assert_eq!(st.reservations_swept, outs.swept);
    // Every outcome is counted once: for its worker's tenancy, or as stale (the worker was
    // removed or replaced since the decision).
    let mut outcomes = [0u64; 3];
    for o in &outs.routes {
        for (t, n) in outcomes.iter_mut().zip(o.outcomes) {
            *t += n;
        }
    }
    let b = st.breaker;
    assert_eq!(
        b.completed + b.failed + b.cancelled + b.stale_outcomes,
        outcomes.iter().sum::<u64>(),
        "{b:?}"
    );
    assert!(b.completed <= outcomes[0] && b.failed <= outcomes[1] && b.cancelled <= outcomes[2]);
    // Each opening or re-opening is followed by at most one half-opening, and each closing
    // ends one half-open period.
    assert!(b.half_opened <= b.opened + b.reopened, "{b:?}");
    assert!(b.closed + b.reopened <= b.half_opened, "{b:?}");
}

/// The ingest counters equal the writers' tallies; counters of paths the writers never
/// take stay 0, and no worker is left untrusted.
fn check_ingest(s: &IngestStats, t: &IngestTally) {
    let got = IngestTally {
        messages: s.messages,
        contiguous: s.contiguous,
        gaps: s.gaps,
        missed_batches: s.missed_batches,
        stale: s.stale,
        resets: s.resets,
        gaps_cleared: s.gaps_cleared,
        replayed: s.replayed,
        replays_completed: s.replays_completed,
        replays_confirmed: s.replays_confirmed,
        replays_skipped: s.replays_skipped,
        end_markers: s.end_markers,
        stored_blocks: s.stored_blocks,
        removed_blocks: s.removed_blocks,
        unknown_removed_blocks: s.unknown_removed_blocks,
        clears: s.clears,
        unknown_parent_stores: s.unknown_parent_stores,
        unknown_parent_blocks: s.unknown_parent_blocks,
        unknown_worker_messages: s.unknown_worker_messages,
        unknown_worker_events: s.unknown_worker_events,
        dp_rank_mismatches: s.dp_rank_mismatches,
    };
    assert_eq!(&got, t, "ingest counters");
    let untouched = [
        s.held,
        s.replays_truncated,
        s.replays_short,
        s.replay_ignored,
        s.non_device_blocks,
        s.non_main_group_blocks,
        s.unknown_events,
        s.rejected_events,
    ];
    assert_eq!(untouched, [0; 8], "{s:?}");
    assert_eq!(s.untrusted_workers, 0);
    assert!(s.block_size_mismatches.is_empty());
}

/// With fresh telemetry everywhere and `kv_aware` (deepest overlap wins), every tree prompt
/// gets the deepest overlap the model predicts among the registered workers.
fn check_final_routing(
    router: &Router,
    tree: &Tree,
    model: &Model,
    registered: &[(WorkerId, Slot)],
    clock: &Clock,
) {
    let now = clock.advance(MAX_AGE);
    for &(w, _) in registered {
        router.update_load(w, idle(), now).unwrap();
    }
    router.publish(now).unwrap();
    assert_eq!(
        router.stats().breaker.open_now,
        0,
        "every breaker half-open"
    );
    let kv_aware = ScoreConfig::with_policy(Policy::KvAware);
    router.set_score_config(kv_aware).unwrap();
    for b in 0..BRANCHES {
        for n in 1..=DEPTH {
            let want = registered
                .iter()
                .map(|&(_, s)| model.overlap(s.0, &tree.chains[b][..n]))
                .max()
                .unwrap();
            let req = RouteRequest::tokens(&tree.tokens[b][..n * BS], 16, now);
            let d = router.route(&req).unwrap();
            assert_eq!(d.fallback, None);
            assert_eq!(d.overlap_blocks, want, "branch {b}, {n} blocks: {d:?}");
            assert_eq!(model.overlap(d.slot.0, &tree.chains[b][..n]), want);
        }
    }
}

fn summary(router: &Router, outs: &Outs, admission: Option<AdmissionConfig>) {
    let st = router.stats();
    let ops: u64 = outs.writers.iter().map(|w| w.coverage.ops).sum();
    let adds: u64 = outs.writers.iter().map(|w| w.coverage.adds).sum();
    let decisions: u64 = outs.routes.iter().map(RouteOut::decisions).sum();
    let t = &outs.telemetry;
    println!(
        "admission {:?}: {ops} writer ops ({adds} registrations), {decisions} decisions, \
         {} re-scores, {} unchecked, {} redirects, rejections {:?}, {} publications \
         ({} pinned), {} sweeps, {} knob changes; reservations {:?}; carried {:?}; breakers \
         {:?}; index: {} run splits",
        admission.map(|a| a.max_outstanding_requests),
        st.rescores,
        st.unchecked_reserves,
        st.admission_redirects,
        st.rejections,
        t.publications,
        t.pinned,
        outs.sweeps,
        outs.knob_rounds,
        st.reservations,
        router.stats().carried,
        st.breaker,
        router.index_stats().splits,
    );
}
