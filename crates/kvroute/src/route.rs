//! `route` = hash → match → load snapshot → score → reserve, with the sibling check.
//!
//! # Concurrent siblings (simultaneous identical requests must spread)
//! A decision fills its fleet view from the published snapshot and the live reservation
//! counters, scores it, and then reserves on the chosen slot with
//! [`ReservationTable::reserve_at_most`](kvroute_load::ReservationTable::reserve_at_most),
//! allowing no more reserved requests than the fleet view showed for that slot. If a
//! concurrent decision reserved the slot in between, the reservation is refused (nothing is
//! held) and the decision re-reads the counters and re-scores, up to `max_rescores` times;
//! the last attempt reserves unconditionally (counted as an unchecked reserve), or, with
//! admission enabled, only within the admission bound. That loop is `rescore.rs`'s
//! `claim_rescoring`, which the loom models in `src/loom_models.rs` run too.
//!
//! Why this spreads siblings: a checked reservation succeeds only if the slot still holds
//! what the decision read, and counters only grow while siblings are in flight, so at the
//! moment a slot goes from `r` to `r + 1` reservations every other slot the decision
//! compared it with held at least what was read, and the chosen slot was the cheapest. On
//! an idle fleet of identical workers, N simultaneous identical requests therefore end at
//! most `ceil(N/W)` per worker, plus what unchecked last attempts add.
//!
//! The argument takes a reservation's counters as visible together: `kvroute-load` adds a
//! reservation's tokens before its request count (`Release`) and reads the request count
//! first (`Acquire`), so a decision that counts a sibling's request also counts its tokens
//! and never under-costs that slot (kvroute-load's `reserve/table.rs`, `# Orderings`; loom
//! model `loom_reader_never_sees_requests_without_tokens`). What it can still see is the
//! converse, a sibling's tokens without its request for a moment (over-costing the slot,
//! the safe side), or the request of a reservation being returned without its tokens (an
//! ending request, not a sibling). The `+ 1` of the bound is the unchecked last attempt's.

use kvroute_load::Work;
use kvroute_score::{ScoreRequest, TieInput};

use crate::admission::admit;
use crate::decision::{Decision, Shadow};
use crate::error::RouteError;
use crate::request::{Prompt, RouteRequest};
use crate::rescore::{Claim, Claimed, claim_rescoring};
use crate::router::Router;
use crate::scratch::Scratch;
use crate::stats::Record;

impl Router {
    /// Routes one request: hashes its prompt (or takes its hashes), matches it against the
    /// prefix index, loads the latest load snapshot, scores every worker with the current
    /// policy, and reserves the request's work (one request, its uncached prefill tokens,
    /// its expected output tokens as decode) on the chosen worker, re-scoring if a
    /// concurrent decision took that worker meanwhile.
    ///
    /// # Concurrent identical requests
    /// The reservation is checked: it succeeds only while the chosen worker holds no more
    /// reserved requests than the decision read. A decision that lost that race re-reads
    /// the counters and scores again (at most
    /// [`RouterConfig::max_rescores`](crate::RouterConfig::max_rescores) times; the last
    /// attempt reserves unconditionally, or within the admission bound when admission is
    /// enabled). Counters only grow while siblings are in flight, so each reservation goes
    /// to a worker that was the cheapest when it was taken: on an idle fleet of `W`
    /// identical workers, `N` simultaneous identical requests end at most `ceil(N/W) + 1`
    /// per worker.
    ///
    /// Takes no lock once warm: the buffers it works in are its thread's own (a
    /// thread-local cache of a few buffer sets, reused across routers; a set's first
    /// decision for a router registers the set's decision tally under the router's tally
    /// lock and its own snapshot reader under the snapshot cell's registration lock, as
    /// does every decision of a thread that alternates among more routers than the cache
    /// keeps sets), the scorer configuration is the one
    /// the thread cached under the cell's stamp (one atomic load, and a reference count
    /// only when a new value was installed:
    /// [`SharedConfig::stamp`](kvroute_score::SharedConfig::stamp)), and matching, the load
    /// snapshot, the scoring pass, the stats (array counters indexed by the policy's label
    /// and the reason on the thread's own tally, no name compared) and the reservation are
    /// lock-free; it never takes the router's `membership` or `load` locks. Allocates
    /// nothing once warm (the first decisions of a thread size its buffers and register
    /// its tally, its snapshot reader and its reservation table lease; a thread
    /// alternating among more routers than its cache keeps sets registers them per
    /// decision). Memory: a thread keeps up to four buffer sets, one per router it routed
    /// with lately, each as large as the largest fleet it served; a dropped router's set
    /// (and through it that router's snapshot buffers and reservation table) is freed
    /// within 4,096 decisions of the thread on any router, or when the thread exits.
    /// Never panics on bad input.
    ///
    /// # Errors
    /// [`RouteError::ExtraKeysOutOfOrder`] when [`RouteRequest::extra_keys`] is not in
    /// strictly increasing block order;
    /// [`RouteError::EmptyPrompt`], [`RouteError::PromptLengthMismatch`] and
    /// [`RouteError::TooManyHashes`] for a malformed request; [`RouteError::NotPublished`] before the first [`publish`](Self::publish),
    /// [`RouteError::NoEligibleWorker`] when no worker is published;
    /// [`RouteError::Rejected`] when admission is enabled and every worker is at its bound;
    /// [`RouteError::Contended`] when every attempt lost its slot;
    /// [`RouteError::Saturated`]. Each is counted in [`RouterStats::rejections`](crate::RouterStats).
    pub fn route(&self, req: &RouteRequest<'_>) -> Result<Decision, RouteError> {
        let result = crate::scratch::with(self.id, |s| self.route_in(s, req, &mut |_, _| {}));
        if let Err(e) = &result {
            self.counters.rejection(e);
        }
        result
    }

    /// `route`, calling `between(self, slot)` after each scoring and before the matching
    /// reservation (tests use it to play a concurrent sibling deterministically).
    pub(crate) fn route_in(
        &self,
        s: &mut Scratch,
        req: &RouteRequest<'_>,
        between: &mut dyn FnMut(&Router, kvroute_core::Slot),
    ) -> Result<Decision, RouteError> {
        let Scratch {
            hashes: hash_buf,
            fleet,
            scorer,
            config,
            seq,
            pooled,
            tally,
            attached,
        } = s;
        let bs = self.block_size;
        if req.prompt_tokens == 0 {
            return Err(RouteError::EmptyPrompt);
        }
        let hashes = match req.prompt {
            Prompt::Tokens(tokens) => {
                if tokens.len() != req.prompt_tokens as usize {
                    return Err(RouteError::PromptLengthMismatch {
                        prompt_tokens: req.prompt_tokens,
                        token_ids: tokens.len(),
                    });
                }
                hash_buf.clear();
                let hasher = match req.namespace {
                    Some(ns) => kvroute_index::BlockHasher::new(bs, ns),
                    None => self.hasher,
                };
                if req.extra_keys.is_empty() {
                    hasher.sequence_hashes_into(tokens, None, hash_buf);
                } else if let Err(e) = hasher.sequence_hashes_with_extra_keys_into(
                    tokens,
                    None,
                    req.extra_keys,
                    hash_buf,
                ) {
                    return Err(RouteError::ExtraKeysOutOfOrder {
                        position: e.position,
                    });
                }
                &hash_buf[..]
            }
            Prompt::Hashes(h) => {
                let full_blocks = req.prompt_tokens as usize / bs;
                if h.len() > full_blocks {
                    return Err(RouteError::TooManyHashes {
                        hashes: h.len(),
                        full_blocks,
                    });
                }
                h
            }
        };
        // Matched into the fleet's own buffer, which its fill reads without converting
        // every slot's overlap (`Fleet::fill_with_matched`).
        self.index.match_prefix(hashes, fleet.matched_mut());
        self.ingest.mask_untrusted(fleet.matched_mut());
        // Predicted residency (`predicted.rs`): prompts routed to a worker whose events
        // have not arrived. The index's own overlap of each raised slot is kept to report
        // it (`Decision::overlap_blocks`); the buffer holds every raise of a prompt of up
        // to `min_blocks · 2^23` blocks (`RAISED`).
        let raised = self.predictions.as_ref().map(|p| {
            let mut raised = Raised::default();
            p.apply(
                hashes,
                req.now,
                // An untrusted worker gets no credit either (its cache is not believed).
                |slot| {
                    self.ingest
                        .slot_trusted(slot)
                        .then(|| self.table.tenancy(slot))
                        .flatten()
                },
                fleet.matched_mut(),
                |slot, before| raised.push(slot, before),
            );
            raised
        });

        // One value for the whole decision: the one this thread cached under the cell's
        // current stamp (one atomic load, no lock, no reference count), else loaded now.
        let stamp = self.score.stamp();
        let cfg: &kvroute_score::ScoreConfig = match config {
            Some((s, c)) if *s == stamp => c,
            _ => &config.insert(self.score.load_stamped()).1,
        };
        let seq = seq.take(&self.decision_seq);
        // A set kept in the thread's cache counts its decisions on its own tally (one
        // registration per set and router); a one-off set counts on the shared counters.
        if *pooled && tally.is_none() {
            *tally = Some(self.counters.new_tally());
        }
        // Its own reader of the load snapshots and its own lease of the reservation
        // table, made by its first decision for the router (a one-off set, which only a
        // decision during the thread's teardown uses, makes them for its one decision).
        let crate::scratch::Attached { pin, lease, .. } =
            attached.get_or_insert_with(|| crate::scratch::Attached {
                pin: self.reader.pinned(),
                lease: self.table.lease(),
                alive: std::sync::Arc::downgrade(&self.alive),
            });
        // The tie cursor rotates through `u32` (its low half, as a `u32` counter would).
        let cursor = seq as u32;
        let random = (cfg.near_tie_band > 0.0).then(|| self.draw(seq));
        // The output an engine can generate after this prompt (`max_model_len`).
        let room = self
            .max_model_len
            .map(|l| l.saturating_sub(req.prompt_tokens));
        let output = match room {
            Some(room) if req.expected_output_tokens > room => {
                self.counters.output_capped();
                room
            }
            _ => req.expected_output_tokens,
        };
        let sreq = ScoreRequest {
            prompt_tokens: req.prompt_tokens,
            block_size: u32::try_from(bs).unwrap_or(u32::MAX),
            expected_output_tokens: output,
        };
        let max = self.max_rescores;
        // The attempt in progress, so that an exit with an error still counts the re-scores
        // made before it.
        let mut current = 0;
        let claimed = claim_rescoring(lease, max, req.now, |attempt| {
            current = attempt;
            // The snapshot is loaded before the counters are read (reconciliation rule).
            let snap = pin.load();
            // A snapshot older than the staleness bound at the request's time means the
            // telemetry thread stopped publishing: no slot's figures are current then,
            // whatever the snapshot said when it was published.
            let stale = snap.seq() != 0
                && req.now.saturating_since(snap.published_at()) > self.max_load_age;
            fleet.fill_with_matched(&snap, &self.table, cfg, stale);
            let tie = TieInput {
                cursor: cursor.wrapping_add(attempt),
                random,
            };
            let choice = scorer.score_matched(fleet, sreq, cfg, tie);
            let Some(picked) = choice.slot else {
                return Err(if snap.seq() == 0 {
                    RouteError::NotPublished
                } else {
                    RouteError::NoEligibleWorker
                });
            };
            let Some((picked_worker, _)) = snap.tenant(picked) else {
                return Err(RouteError::NoEligibleWorker);
            };
            let (slot, redirect) = match self.admission {
                None => (picked, None),
                Some(a) => admit(
                    &snap,
                    fleet,
                    picked,
                    picked_worker,
                    a.max_outstanding_requests,
                    cursor,
                )?,
            };
            let Some((worker, generation)) = snap.tenant(slot) else {
                return Err(RouteError::NoEligibleWorker);
            };
            let i = slot.index();
            let reported = u64::from(snap.running()[i]) + u64::from(snap.waiting()[i]);
            let read = fleet.reserved_at(i);
            let overlap = fleet.matched().get(slot);
            let cached = (u64::from(overlap) * bs as u64).min(u64::from(req.prompt_tokens));
            let claim = Claim {
                slot,
                generation,
                work: Work {
                    prefill_tokens: req.prompt_tokens - cached as u32,
                    decode_tokens: output,
                },
                // The table's reserved requests as this attempt read them, and the bound
                // on them that keeps report + reserved − ended (`Reserved::finished`, what
                // admission counted) under the admission bound.
                seen: read.requests,
                last_limit: self.admission.map(|a| {
                    (u64::from(a.max_outstanding_requests.saturating_sub(1)) + read.finished)
                        .saturating_sub(reported)
                }),
            };
            between(self, slot);
            let shadow = choice.shadow.map(|cf| Shadow {
                worker: cf.slot.and_then(|s| snap.tenant(s)).map(|t| t.0),
                reason: cf.reason,
                cost: cf.cost,
                overlap_blocks: cf.slot.map_or(0, |s| fleet.matched().get(s)),
                // The scorer costed its own pick, not admission's.
                dispatched_cost: match redirect {
                    None => cf.dispatched_cost,
                    Some(_) => f32::NAN,
                },
            });
            Ok((claim, (choice, shadow, redirect, worker, overlap)))
        });
        let claimed = match claimed {
            Ok(c) => c,
            Err(e) => {
                self.counters.rescores(current);
                return Err(e);
            }
        };
        let (reservation, attempt, checked, pick) = match claimed {
            Claimed::Won {
                reservation,
                attempt,
                checked,
                pick,
            } => (reservation, attempt, checked, pick),
            Claimed::Saturated {
                attempt,
                pick: (.., worker, _),
            } => {
                self.counters.rescores(attempt);
                return Err(RouteError::Saturated { worker });
            }
            Claimed::Contended => {
                self.counters.rescores(max);
                return Err(RouteError::Contended { rescores: max });
            }
        };
        let (choice, shadow, redirect, worker, credited) = pick;
        if !checked {
            self.counters.unchecked();
        }
        let (overlap, predicted) = match raised.as_ref().and_then(|r| r.before(reservation.slot()))
        {
            Some(before) => (before, credited),
            None => (credited, 0),
        };
        if let Some(p) = &self.predictions {
            let (slot, generation) = (reservation.slot(), reservation.generation());
            p.record(hashes, slot, generation, req.now, overlap);
        }
        self.counters.rescores(attempt);
        let (reason, cost) = match redirect {
            Some(_) => (kvroute_score::Reason::LoadEscape, f32::NAN),
            None => (choice.reason, choice.cost),
        };
        self.counters.decision(
            &Record {
                policy: &cfg.policy,
                reason,
                fallback: choice.fallback,
                shadow_disagrees: choice.shadow.is_some_and(|cf| cf.slot != choice.slot),
                redirected: redirect.is_some(),
                slot: reservation.slot(),
                generation: reservation.generation(),
            },
            tally.as_deref(),
        );
        Ok(Decision {
            worker,
            slot: reservation.slot(),
            generation: reservation.generation(),
            overlap_blocks: overlap,
            predicted_blocks: predicted,
            cost,
            policy: cfg.policy,
            reason,
            fallback: choice.fallback,
            shadow,
            redirect,
            rescores: attempt,
            reservation,
        })
    }
}

/// The slots a prediction raised in one lookup, with their overlap before (the index's).
struct Raised {
    slots: [(u32, u32); RAISED],
    len: usize,
}

impl Default for Raised {
    fn default() -> Self {
        Self {
            slots: [(0, 0); RAISED],
            len: 0,
        }
    }
}

/// Raises kept per lookup: `WAYS` per probed depth, for up to 24 depths (prompts of up to
/// `min_blocks · 2^23` blocks; a longer one, with more raised slots than this, would report
/// a raised slot's credit as its `overlap_blocks`).
const RAISED: usize = crate::predicted::WAYS * 24;

impl Raised {
    fn push(&mut self, slot: kvroute_core::Slot, before: u32) {
        if self.len < RAISED && self.before(slot).is_none() {
            self.slots[self.len] = (slot.0, before);
            self.len += 1;
        }
    }

    /// The overlap of `slot` before its first raise, if a prediction raised it.
    fn before(&self, slot: kvroute_core::Slot) -> Option<u32> {
        self.slots[..self.len]
            .iter()
            .find(|&&(s, _)| s == slot.0)
            .map(|&(_, b)| b)
    }
}

#[cfg(test)]
mod tests {
    use kvroute_core::EngineHash;
    use kvroute_core::{HashNamespace, WorkerId};
    use kvroute_core::{LoadSample, Nanos};
    use kvroute_index::index::BlockStore;
    use kvroute_load::Work;

    use super::*;
    use crate::config::RouterConfig;

    /// Worker 1 holds 256 of the 260 blocks of a 4,160-token prompt; worker 2 is idle; both
    /// report 8,000 prefill and 1,000 decode tokens/s and 64 slots. Projected for a request
    /// expecting 1,000 output tokens (1 s of decode): worker 1 = 64/8,000 + 1 = 1.008 s,
    /// worker 2 = 4,160/8,000 + 1 = 1.52 s. After one reservation (one request, 64 prefill
    /// and 1,000 decode tokens) worker 1 decodes in a batch of 2: 0.008 (queued) +
    /// 2 × 0.008 + 3 × 1 = 3.024 s, so a second decision must go to worker 2.
    fn fleet(max_rescores: u32) -> (Router, Vec<u32>, [WorkerId; 2]) {
        let mut cfg = RouterConfig::new(4, 16);
        cfg.max_rescores = max_rescores;
        let r = Router::new(cfg).unwrap();
        let ws = [WorkerId::new(1, 0), WorkerId::new(2, 0)];
        for w in ws {
            r.add_worker(w).unwrap();
        }
        let prompt: Vec<u32> = (0..4_160u32).map(|i| i * 31 % 152_000).collect();
        let hashes: Vec<EngineHash> = (0..256).map(EngineHash).collect();
        r.store(
            ws[0],
            &BlockStore {
                parent: None,
                block_hashes: &hashes,
                token_ids: &prompt[..4_096],
                block_size: 16,
                namespace: HashNamespace::DEFAULT,
            },
        )
        .unwrap();
        let now = Nanos::from_secs(1);
        for w in ws {
            let s = {
                let mut c = LoadSample::idle(64);
                c.prefill_tps = Some(8_000.0);
                c.decode_tps = Some(1_000.0);
                c.waiting_prefill_tokens = Some(0);
                c.active_decode_tokens = Some(0);
                c
            };
            r.update_load(w, s, now).unwrap();
        }
        r.publish(now).unwrap();
        (r, prompt, ws)
    }

    /// A sibling that reserves the chosen slot between this decision's read and its
    /// reservation (played by the hook) is detected, and the re-score sends this decision
    /// to the idle peer.
    #[test]
    fn a_sibling_between_read_and_reserve_is_detected_and_rescored() {
        let (r, prompt, ws) = fleet(RouterConfig::DEFAULT_MAX_RESCORES);
        let req = RouteRequest::tokens(&prompt, 1_000, Nanos::from_secs(1));
        let mut sibling = None;
        let mut hook = |router: &Router, slot: kvroute_core::Slot| {
            if sibling.is_none() {
                let generation = router.table.tenancy(slot).unwrap();
                let work = Work {
                    prefill_tokens: 64,
                    decode_tokens: 1_000,
                };
                sibling = Some(
                    router
                        .table
                        .reserve(slot, generation, work, req.now)
                        .unwrap(),
                );
            }
        };
        let mut scratch = Scratch::default();
        let d = r.route_in(&mut scratch, &req, &mut hook).unwrap();
        assert_eq!(sibling.as_ref().unwrap().slot(), kvroute_core::Slot(0));
        assert_eq!((d.worker, d.rescores), (ws[1], 1));
        assert_eq!(r.stats().rescores, 1);
        assert_eq!(r.stats().reservations.rejected_contended, 1);
    }

    /// With no re-score allowed the same race lands both on the owner (unchecked, counted):
    /// the check above is what spreads them.
    #[test]
    fn without_rescores_the_race_is_not_corrected() {
        let (r, prompt, ws) = fleet(0);
        let req = RouteRequest::tokens(&prompt, 1_000, Nanos::from_secs(1));
        let mut sibling = None;
        let mut hook = |router: &Router, slot: kvroute_core::Slot| {
            let generation = router.table.tenancy(slot).unwrap();
            sibling = Some(
                router
                    .table
                    .reserve(slot, generation, Work::default(), req.now),
            );
        };
        let mut scratch = Scratch::default();
        let d = r.route_in(&mut scratch, &req, &mut hook).unwrap();
        assert_eq!((d.worker, d.rescores), (ws[0], 0));
        assert_eq!(r.stats().unchecked_reserves, 1);
    }

    /// A decision that loses its slot to a sibling and then finds every worker at the
    /// admission bound is rejected; the re-score it made is counted all the same.
    #[test]
    fn rescores_before_a_rejection_are_counted() {
        let mut cfg = RouterConfig::new(4, 16);
        cfg.admission = Some(crate::config::AdmissionConfig {
            max_outstanding_requests: 1,
        });
        let r = Router::new(cfg).unwrap();
        let ws = [WorkerId::new(1, 0), WorkerId::new(2, 0)];
        for w in ws {
            r.add_worker(w).unwrap();
        }
        let now = Nanos::from_secs(1);
        for w in ws {
            r.update_load(w, LoadSample::idle(64), now).unwrap();
        }
        r.publish(now).unwrap();
        let prompt: Vec<u32> = (0..64).collect();
        let req = RouteRequest::tokens(&prompt, 16, now);
        // Before the first reservation, a sibling takes one request on each worker: the
        // chosen slot is contended, and on the re-score both are at the bound of 1.
        let mut siblings = Vec::new();
        let mut hook = |router: &Router, _: kvroute_core::Slot| {
            if siblings.is_empty() {
                for i in 0..2 {
                    let slot = kvroute_core::Slot(i);
                    let generation = router.table.tenancy(slot).unwrap();
                    let work = Work::default();
                    siblings.push(router.table.reserve(slot, generation, work, now).unwrap());
                }
            }
        };
        let mut scratch = Scratch::default();
        let got = r.route_in(&mut scratch, &req, &mut hook);
        assert_eq!(
            got.map(|d| d.worker),
            Err(RouteError::Rejected {
                bound: 1,
                least_outstanding: 1
            })
        );
        assert_eq!(r.stats().reservations.rejected_contended, 1);
        assert_eq!(r.stats().rescores, 1);
    }

    /// A configuration installed between two decisions of one thread is the one the second
    /// decides with (the thread's cached value is replaced when the stamp changes), through
    /// `set_score_config` and through `update_score_config`.
    #[test]
    fn a_new_configuration_reaches_the_next_decision_on_the_same_thread() {
        let (r, prompt, _) = fleet(8);
        let req = RouteRequest::tokens(&prompt, 1_000, Nanos::from_secs(1));
        let mut scratch = Scratch::default();
        let first = r.route_in(&mut scratch, &req, &mut |_, _| {}).unwrap();
        assert_eq!(first.policy, kvroute_score::Policy::default());
        drop(first);
        let least = kvroute_score::Policy::LeastLoad;
        r.set_score_config(kvroute_score::ScoreConfig::with_policy(least))
            .unwrap();
        let second = r.route_in(&mut scratch, &req, &mut |_, _| {}).unwrap();
        assert_eq!(second.policy, least);
        drop(second);
        let kv = kvroute_score::Policy::KvAware;
        r.update_score_config(|c| c.policy = kv).unwrap();
        let third = r.route_in(&mut scratch, &req, &mut |_, _| {}).unwrap();
        assert_eq!(third.policy, kv);
    }

    /// Sequentially, the second request sees the first's reservation and goes to the peer.
    #[test]
    fn sequential_siblings_see_each_other() {
        let (r, prompt, ws) = fleet(8);
        let req = RouteRequest::tokens(&prompt, 1_000, Nanos::from_secs(1));
        let a = r.route(&req).unwrap();
        let b = r.route(&req).unwrap();
        assert_eq!((a.worker, b.worker), (ws[0], ws[1]));
        assert!((a.cost - 1.008).abs() < 1e-6, "{a:?}");
        assert!((b.cost - 1.52).abs() < 1e-6, "{b:?}");
    }
}
