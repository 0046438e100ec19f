//! One routing thread: requests of every shape (token ids and hashes, prompts of the tree,
//! cold prompts, other namespaces, malformed requests), each decision checked at once
//! against what must hold whatever the interleaving, held for a while (so reservations
//! meet publications, sweeps, worker removals and re-additions), then ended by `release`,
//! `commit` or `first_token` + `release`. Everything the router counts is tallied here from
//! the decisions themselves, for the exact comparison after the run.

use std::collections::{BTreeMap, BTreeSet};

use kvroute::Work;
use kvroute::{
    AdmissionConfig, Decision, FallbackCause, HashNamespace, Outcome, Prompt, Reason,
    RejectionCounts, Reservation, Reserved, RouteError, RouteRequest, Router, SequenceHash, Slot,
    SlotGeneration, WorkerId,
};

use super::{
    BRANCHES, BS, Clock, DEPTH, MAX_OUTPUT, MAX_RESCORES, MIN_DECISIONS, MIN_QUIET_DECISIONS, Run,
    STABLE, Tree, universe,
};
use crate::index_common::{Model, Rng};

/// What one routing thread saw and did, for the comparison with the router's counters.
#[derive(Debug, Default)]
pub struct RouteOut {
    /// `route` calls made.
    pub calls: u64,
    /// Decisions by (policy name, reason name).
    pub by_reason: BTreeMap<(&'static str, &'static str), u64>,
    /// Decisions with a fallback: missing, invalid, stale, partial.
    pub fallbacks: [u64; 4],
    /// Decisions admission redirected.
    pub redirects: u64,
    /// Decisions that used their last attempt (`rescores == MAX_RESCORES`).
    pub at_max_rescores: u64,
    /// Sum of the decisions' `rescores`.
    pub rescores: u64,
    /// Decisions not redirected whose shadow counterfactual chose another worker.
    pub shadow_disagreements: u64,
    /// Redirected decisions with a shadow (the router compares the scorer's pick, which the
    /// decision does not expose, with the counterfactual: counted or not).
    pub shadow_redirected: u64,
    /// Errors by kind.
    pub errors: RejectionCounts,
    /// What the decisions reserved: one request each, their prefill and decode tokens.
    pub made: Reserved,
    /// What the guards returned live (`release`, `commit`, `first_token`'s prefill part).
    pub returned: Reserved,
    /// Prefill tokens held when `first_token` was called (an upper bound on what it moved to
    /// the decode counter).
    pub first_token_prefill: u64,
    /// Every (worker, slot, tenancy) a decision named.
    pub tenancies: BTreeSet<(WorkerId, Slot, SlotGeneration)>,
    /// Outcomes recorded for the decisions: completed, failed, cancelled.
    pub outcomes: [u64; 3],
}

impl RouteOut {
    /// Decisions made.
    pub fn decisions(&self) -> u64 {
        self.by_reason.values().sum()
    }
}

fn add(a: &mut Reserved, b: &Reserved) {
    a.requests += b.requests;
    a.prefill_tokens += b.prefill_tokens;
    a.decode_tokens += b.decode_tokens;
}

/// The request's shape and what its decision must show.
struct Shape {
    tokens: Vec<u32>,
    hashes: Vec<SequenceHash>,
    by_hashes: bool,
    prompt_tokens: u32,
    /// Full blocks of the prompt.
    blocks: u32,
    namespace: Option<HashNamespace>,
    /// Nobody ever stores these blocks: the overlap must be 0.
    cold: bool,
    /// The error a malformed request must get.
    malformed: Option<RouteError>,
}

fn shape(rng: &mut Rng, tree: &Tree) -> Shape {
    let b = rng.below(BRANCHES as u64) as usize;
    let blocks = rng.below(DEPTH as u64 + 1) as usize;
    let tail = rng.below(BS as u64) as usize;
    let mut s = Shape {
        tokens: tree.tokens[b][..blocks * BS].to_vec(),
        hashes: tree.chains[b][..blocks].to_vec(),
        by_hashes: false,
        prompt_tokens: (blocks * BS + tail) as u32,
        blocks: blocks as u32,
        namespace: None,
        cold: false,
        malformed: None,
    };
    s.tokens.extend((0..tail as u32).map(|i| 7 + i));
    match rng.below(100) {
        0..=49 => {}
        // Hashes of mixed branches position by position (not a real chain: residency that
        // is not prefix-closed meets it).
        50..=69 => {
            s.by_hashes = true;
            s.hashes = (0..blocks)
                .map(|p| tree.chains[rng.below(BRANCHES as u64) as usize][p])
                .collect();
        }
        // Tokens nobody stores.
        70..=79 => {
            s.tokens = (0..s.prompt_tokens).map(|i| 500_000 + i).collect();
            s.cold = true;
        }
        // The tree's tokens in another namespace (an adapter nobody serves).
        80..=89 => {
            s.namespace = Some(HashNamespace::new(Some("adapter-x"), None));
            s.cold = true;
        }
        90..=94 => {
            s.malformed = Some(RouteError::PromptLengthMismatch {
                prompt_tokens: s.prompt_tokens + 1,
                token_ids: s.tokens.len(),
            });
            s.prompt_tokens += 1;
        }
        _ => {
            s.by_hashes = true;
            s.hashes.push(tree.chains[b][blocks.min(DEPTH - 1)]);
            s.malformed = Some(RouteError::TooManyHashes {
                hashes: blocks + 1,
                full_blocks: blocks,
            });
        }
    }
    // No block and no tail: an empty prompt, refused before anything else is checked.
    if s.prompt_tokens == 0 {
        s.malformed = Some(RouteError::EmptyPrompt);
    }
    s
}

/// Everything a decision must satisfy whatever the interleaving.
fn check(d: &Decision, s: &Shape, output: u32, stable: &Model, admission: bool, all: &[WorkerId]) {
    assert!(
        all.contains(&d.worker),
        "decision for unknown worker: {d:?}"
    );
    assert!(
        d.overlap_blocks <= s.blocks,
        "overlap {} > {} prompt blocks: {d:?}",
        d.overlap_blocks,
        s.blocks
    );
    if s.cold {
        assert_eq!(d.overlap_blocks, 0, "overlap on a cold prompt: {d:?}");
    }
    if let Some(k) = STABLE.iter().position(|&w| w == d.worker) {
        assert_eq!(d.slot, Slot(k as u32), "stable worker moved: {d:?}");
        let want = if s.cold {
            0
        } else {
            stable.overlap(k as u32, &s.hashes)
        };
        assert_eq!(d.overlap_blocks, want, "stable worker's overlap: {d:?}");
    }
    let r = &d.reservation;
    assert_eq!((r.slot(), r.generation()), (d.slot, d.generation));
    let cached = (d.overlap_blocks * BS as u32).min(s.prompt_tokens);
    let work = Work {
        prefill_tokens: s.prompt_tokens - cached,
        decode_tokens: output,
    };
    assert_eq!(r.work(), work, "{d:?}");
    let held = Reserved {
        requests: 1,
        prefill_tokens: work.prefill_tokens.into(),
        decode_tokens: work.decode_tokens.into(),
        finished: 0,
    };
    assert_eq!(r.held(), held, "{d:?}");
    assert!(d.rescores <= MAX_RESCORES);
    if d.redirect.is_some() {
        assert!(admission, "a redirect without admission: {d:?}");
        assert_eq!(d.reason, Reason::LoadEscape);
    }
}

/// Ends a reservation one of three ways and tallies what it returned live.
fn finish(r: Reservation, rng: &mut Rng, out: &mut RouteOut) {
    let before = r.held();
    let live = match rng.below(4) {
        0 => {
            let mut r = r;
            out.first_token_prefill += before.prefill_tokens;
            if r.first_token() {
                out.returned.prefill_tokens += before.prefill_tokens;
            }
            assert_eq!(r.held().prefill_tokens, 0);
            assert!(r.is_decoding());
            r.release()
        }
        1 => r.commit(),
        _ => {
            let live = r.release();
            assert!(live.prefill_tokens <= before.prefill_tokens);
            live
        }
    };
    assert!(
        live.requests <= 1 && live.decode_tokens <= before.decode_tokens + before.prefill_tokens
    );
    add(&mut out.returned, &live);
}

fn cause_index(c: FallbackCause) -> usize {
    c.index()
}

/// Runs one routing thread until `run` says stop (and at least [`MIN_DECISIONS`] calls, of
/// which [`MIN_QUIET_DECISIONS`] in the quiet window).
pub fn router_thread(
    router: &Router,
    tree: &Tree,
    stable: &Model,
    clock: &Clock,
    run: &Run,
    admission: Option<AdmissionConfig>,
    seed: u64,
) -> RouteOut {
    let mut rng = Rng::new(seed);
    let mut out = RouteOut::default();
    let all = universe();
    let mut held: Vec<Decision> = Vec::new();
    let mut target = 0;
    let mut quiet_calls = 0;
    while run.keep_going(out.calls, MIN_DECISIONS) || quiet_calls < MIN_QUIET_DECISIONS {
        quiet_calls += u64::from(run.is_quiet());
        if out.calls % 64 == 0 {
            target = rng.below(48) as usize;
        }
        let s = shape(&mut rng, tree);
        let output = 1 + rng.below(u64::from(MAX_OUTPUT)) as u32;
        let req = RouteRequest {
            prompt: if s.by_hashes {
                Prompt::Hashes(&s.hashes)
            } else {
                Prompt::Tokens(&s.tokens)
            },
            prompt_tokens: s.prompt_tokens,
            expected_output_tokens: output,
            namespace: s.namespace,
            extra_keys: &[],
            now: clock.now(),
        };
        out.calls += 1;
        match (router.route(&req), &s.malformed) {
            (Ok(d), None) => {
                check(&d, &s, output, stable, admission.is_some(), &all);
                *out.by_reason
                    .entry((d.policy.label(), d.reason.name()))
                    .or_default() += 1;
                if let Some(c) = d.fallback {
                    out.fallbacks[cause_index(c)] += 1;
                }
                match (d.redirect, d.shadow) {
                    (Some(_), Some(_)) => out.shadow_redirected += 1,
                    (None, Some(sh)) if sh.worker != Some(d.worker) => {
                        out.shadow_disagreements += 1
                    }
                    _ => {}
                }
                out.redirects += u64::from(d.redirect.is_some());
                out.at_max_rescores += u64::from(d.rescores == MAX_RESCORES);
                out.rescores += u64::from(d.rescores);
                out.tenancies.insert((d.worker, d.slot, d.generation));
                add(&mut out.made, &d.reservation.held());
                held.push(d);
            }
            (Err(e), Some(want)) => {
                assert_eq!(&e, want);
                out.errors.invalid_request += 1;
            }
            (Err(RouteError::Contended { rescores }), None) => {
                assert_eq!(rescores, MAX_RESCORES);
                out.errors.contended += 1;
            }
            (Err(RouteError::Rejected { bound, .. }), None) if admission.is_some() => {
                assert_eq!(Some(bound), admission.map(|a| a.max_outstanding_requests));
                out.errors.over_bound += 1;
            }
            (got, want) => panic!("request {req:?}: got {got:?}, expected error {want:?}"),
        }
        while held.len() > target {
            let i = rng.below(held.len() as u64) as usize;
            let d = held.swap_remove(i);
            end(router, d, &mut rng, &mut out);
        }
    }
    for d in held {
        end(router, d, &mut rng, &mut out);
    }
    out
}

/// Ends a decision: its guard as [`finish`] does, then an outcome for the worker's breaker:
/// every request of an engine whose id is a multiple of 3 fails (so its breakers open, go
/// half-open, fail their probe and open again), the others' fail 3 % of the time, are
/// cancelled 3 % and complete otherwise, while decisions, publications and worker churn
/// run.
fn end(router: &Router, d: Decision, rng: &mut Rng, out: &mut RouteOut) {
    let (worker, generation) = (d.worker, d.generation);
    finish(d.into_reservation(), rng, out);
    let roll = if worker.engine_id % 3 == 0 {
        0
    } else {
        rng.below(100)
    };
    let (outcome, k) = match roll {
        0..=2 => (Outcome::Failed, 1),
        3..=5 => (Outcome::Cancelled, 2),
        _ => (Outcome::Completed, 0),
    };
    router.record_outcome(worker, generation, outcome);
    out.outcomes[k] += 1;
}
