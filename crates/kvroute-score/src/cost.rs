//! Per-worker cost formulas, one per [`CostKind`], written once over [`Lane`]. Lower cost
//! always wins; scores where higher wins are negated. Units are stated per kind.
//!
//! Notation, per worker lane: `overlap` (blocks of the request's prefix it holds),
//! `requests` (running + waiting + reserved), `queued` (waiting uncached prefill tokens +
//! reserved prefill tokens), `decode` (active decode tokens + reserved decode tokens), `k`
//! (KV usage), `util`, `occ` (DP-summed scheduler occupancy), `ptps`/`dtps` (prefill/decode
//! tokens/s). Per request: `prompt` (tokens), `bs` (block size, tokens), `out` (expected
//! output tokens). `matched = min(overlap·bs, prompt)`, `uncached = max(prompt − overlap·bs,
//! 0)`, `barrier = kv_barrier_s · kc/(1 − kc)`, `kc = min(max(k, 0), 0.999)` (seconds).
//!
//! # `projected_time`: the latency a request adds to a worker
//! [`CostKind::Projected`] estimates, in seconds, how much latency sending the request to a
//! worker adds: its own (queue, prefill, decode) plus the delay its work imposes on the
//! requests already in flight there. The engine it models is a continuous-batching engine
//! (vLLM, SGLang; `kvroute-sim`'s engine follows vLLM's scheduler): each step runs one decode
//! token of every running request together with up to a chunk of prefill tokens, and lasts
//! `base + per_seq·batch + per_ctx·context + prefill_tokens/ptps`; waiting requests are
//! admitted in FIFO order while a running slot (at most `max_running`) and token budget
//! remain. With `π = ptps` (the configured default where a lane reports none), `q =
//! requests`, `U = uncached`, `O = out`, and the decode step model of the lane, a step of
//! `n` decoding sequences lasting `s(n) = b + a·n` seconds (`b = dbase`, `a = 1/dtps`, the
//! configured default decode throughput where a lane has none):
//!
//! 1. **Batch.** The request runs in a batch of `n` sequences. When the batch is full
//!    (`occ >= 1`) that is the cap `M = q/occ` (`occ = q/M`; at least 1). While it has room
//!    it is what the worker holds with the request, `q + 1`, lifted to the fleet's mean
//!    batch: `n = max(q + 1, min(M, mean + 1))`, `mean` the mean over the occupied slots
//!    of each one's `requests` counted at most at its cap, `min(q, max(q/occ, 1))`, and in
//!    full where its occupancy is unknown (`Aggregates::mean_batch`; without a known cap,
//!    no upper bound to the lift). A worker below the mean is the cheaper one, so the next
//!    decisions send it work until it holds about the mean: by the time the request's
//!    prefill (seconds for a long prompt) and decode run, the batch they share has grown to
//!    the fleet's. The mean is of batches, not of requests: a worker far past its cap (a
//!    hot owner with a long waiting queue) runs no more than its cap, and counting its
//!    queue lifted every other worker's batch, so that a worker with room looked as dear as
//!    a full one and new work kept joining the queues of the full ones (`docs/RESULTS.md`,
//!    "The batch lift to the mean batch"). Without the
//!    lift, under overload every full worker is costed at `M` and a worker with room at its
//!    current `q + 1`, so the workers busy with a few long prefills (few requests, a long
//!    prefill queue) look cheapest for every further long prompt and pile up prefill work
//!    while their generation starves. An idle worker keeps `n = 1` (its `q/occ` is 0/0, a
//!    NaN, and the cap is taken as 1).
//! 2. **Start.** Its prefill starts after the prefill queued ahead of it, `queued/π`, and,
//!    when the batch is full, after a running slot frees. A full batch steps every
//!    `s(M)` seconds and, its requests generating `T` tokens each, completes one every
//!    `T·s(M)/M` seconds; the request needs the `(q − M + 1)`-th slot to free:
//!    `wait = (q − M + 1)·T·(b/M + a)` (`wait = 0` while there is room). The engine runs
//!    the queued prefill and those decode steps in the same steps, and a step lasts its
//!    prefill chunk's time plus its decode's (the step formula above), so the two add:
//!    `start = queued/π + wait`. `T` is the typical request's output
//!    (`ScoreConfig::tokens_per_request`), not this request's `O`: the requests ahead are
//!    other requests. (Taking the larger of the two instead, as if the queue drained while
//!    slots freed, and this request's own `O` for `T`, made a request with a long output
//!    avoid full workers and one with a short output ignore their slot wait: with prompts
//!    shared by nothing, at 16x load, the workers' request counts drifted apart (imbalance
//!    1.60 against 1.22 for `cache_aware`) and TTFT p95 was 14 % above its 19.4 s, in
//!    `docs/RESULTS.md`'s sweep before the change.)
//! 3. **Prefill.** Its `U` uncached tokens take `U/π` of engine time, which delays its own
//!    first token and stalls every other request of the batch for as long (a prefill chunk
//!    lengthens the step they decode in): `n·U/π`.
//! 4. **Decode.** Its `O` tokens, one per step of the batch: `O·s(n) = O·(b + a·n)`; and,
//!    as one of the batch, it lengthens each of those steps by `a` for the `n − 1` other
//!    sequences: `(n − 1)·O·a`. Together `O·(b + (2n − 1)·a)`.
//! 5. **KV pressure**: `barrier` (the gateway's; preemption risk near a full cache).
//!
//! `projected = queued/π + wait + n·U/π + O·(b + (2n − 1)·a) + barrier`.
//!
//! **The step model.** A decode step reads the weights once for the whole batch, then
//! does per-sequence work, so its time is close to a line in the batch (`kvroute-sim`'s
//! engine: `0.0069 + 0.0001·n` s for an 8B model on one H100). With the engine's configured
//! single-sequence speed (`1/s(1)`) and full-batch throughput (`M/s(M)`), the load
//! publisher draws that line (`LoadSnapshot::decode_step_base_s`, `decode_step_tps`);
//! without them `b = 0` and `a = 1/δ`, processor sharing at the decode throughput `δ` (the
//! engine's report, else configured): a step of `n` lasts `n/δ`. Processor sharing at a
//! throughput measured at the current batch `r` over-states a small batch's step (it
//! charges `n/δ(r)` where the step takes `b + a·n`): with the 8B engine's 2 running
//! requests, `δ(2)` = 282 tokens/s and one more request looks 2 × 350/282 = 2.5 s dearer in
//! decode, against 0.07 s on the line, far above the cache credit of a typical
//! conversation prefix, so at light load the formula spread requests off their cache
//! owners for nothing.
//!
//! Units: tokens over tokens/s throughout, so seconds; the request terms are seconds of
//! latency summed over the requests they delay. The cache enters through `U`: a cached
//! prefix saves `n·matched/π`, its prefill time for every request of the batch. An idle
//! worker costs `U/π + O·s(1) + barrier`, the request's prefill and decode alone.
//!
//! Why the others' delay counts: scored by its own latency alone, a request would take any
//! worker where its own prefill is short, however many requests decode there; but each
//! prefill chunk holds up every decoding request of that worker for the chunk's duration,
//! and on long-prompt traffic that stall, not the request's own wait, is most of what a
//! placement costs. Counting it is what makes a miss go where few requests decode, and a
//! hit stay with its owner while the owner's batch is small.
//!
//! Where it is approximate: without a configured step model, processor sharing over-states
//! the step time of a small batch (above), so the decode terms lean towards spreading at
//! low load; the step model leaves out the context term (each step also reads every
//! sequence's KV) and the prefill chunks a step carries while the engine has prefill
//! queued, which at overload make a step many times longer than `s(n)`; the lift takes the
//! fleet's mean batch, which does not see how far behind a worker's queue is (a worker at
//! its cap with a long wait counts as much as one just full); the outputs of
//! the running requests are unknown and taken as this request's `O`; the prefill queue is
//! the engine's report, which counts a waiting request's whole prompt (its prefix hit is
//! known only at admission); the active context tokens (`decode`) are left out: what they
//! cost a step is in the reported `δ`. With DP ranks, `M = q/occ` estimates one rank's cap
//! from the engine's occupancy.

use crate::lane::Lane;

/// Which formula a pass computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CostKind {
    /// 0 for every worker (round robin: only the cursor decides).
    Zero,
    /// Peers (`docs/FAILURE-MODES.md`), the gateway's `least_load` (seconds):
    /// `(queued + decode) / ptps' + barrier`, `ptps'` = the lane's prefill throughput, else
    /// `least_load_tps` (2,000 tokens/s).
    LeastLoad,
    /// `−overlap` (blocks): `kv_aware`, deepest first (pure affinity, the control).
    Overlap,
    /// `load_aware`'s score (hit rate less the load penalty), negated:
    /// `−(matched/max(prompt,1) − beta·(requests − mean)/max(1, mean))`
    /// (dimensionless), mean over occupied workers.
    LoadAware,
    /// `owner_pressure`'s pressure, scheduler occupancy included: `max(k, util, occ)`
    /// (ratio).
    Pressure,
    /// The old pressure without occupancy, `owner_pressure`'s fleet-wide fallback when an
    /// occupancy is unknown: `max(k, util)` (ratio).
    OldPressure,
    /// `projected_time` (seconds): the latency the request adds to the worker (module docs,
    /// derivation): `queued/π + wait + n·uncached/π + out·(b + (2n − 1)·a) + barrier`,
    /// `wait = (q − M + 1)·T·(b/M + a)` when the batch is full, `T` the typical output.
    Projected,
    /// Peers (`docs/FAILURE-MODES.md`), Dynamo-style (blocks): `w·((queued + prompt)/bs − overlap)
    /// + decode/bs + max(prompt/bs − overlap, 0)`.
    Dynamo,
    /// Peers (`docs/FAILURE-MODES.md`), LMetric (tokens × requests): `(prompt − matched)·(requests + 1)`.
    LMetric,
    /// `requests` (requests): the gateway's "least loaded".
    Requests,
}

/// Scalars shared by every lane of one pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    pub prompt: f32,
    pub block_size: f32,
    /// The fleet's mean (requests): `load_aware`'s mean `requests`
    /// ([`crate::Aggregates::mean_load`]); `projected_time`'s mean batch, each worker
    /// counted at most at its cap ([`crate::Aggregates::mean_batch`]).
    pub mean_load: f32,
    pub beta: f32,
    pub least_load_tps: f32,
    pub default_prefill_tps: f32,
    pub default_decode_tps: f32,
    pub kv_barrier_s: f32,
    pub dynamo_weight: f32,
    /// The request's expected output (tokens).
    pub output: f32,
    /// The output assumed for each request already on a worker (tokens): the typical
    /// request's, `ScoreConfig::tokens_per_request`.
    pub typical_output: f32,
}

/// One vector (or one scalar) of worker figures.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneIn<V> {
    pub overlap: V,
    pub requests: V,
    pub queued: V,
    pub decode: V,
    pub kv: V,
    pub util: V,
    pub occ: V,
    pub ptps: V,
    pub dtps: V,
    pub dbase: V,
}

#[inline(always)]
fn barrier<V: Lane>(p: &Params, k: V) -> V {
    let kc = k.max_(V::splat(0.0)).min_(V::splat(0.999));
    V::splat(p.kv_barrier_s) * (kc / (V::splat(1.0) - kc))
}

#[inline(always)]
fn matched<V: Lane>(p: &Params, x: &LaneIn<V>) -> V {
    (x.overlap * V::splat(p.block_size)).min_(V::splat(p.prompt))
}

#[inline(always)]
fn uncached<V: Lane>(p: &Params, x: &LaneIn<V>) -> V {
    (V::splat(p.prompt) - x.overlap * V::splat(p.block_size)).max_(V::splat(0.0))
}

/// The cost of `kind` for the lanes `x`.
#[inline(always)]
pub(crate) fn cost<V: Lane>(kind: CostKind, p: &Params, x: &LaneIn<V>) -> V {
    let prompt_div = V::splat(p.prompt.max_(1.0));
    match kind {
        CostKind::Zero => V::splat(0.0),
        CostKind::LeastLoad => {
            let tps = x.ptps.pos_or(V::splat(p.least_load_tps));
            (x.queued + x.decode) / tps + barrier(p, x.kv)
        }
        CostKind::Overlap => V::splat(0.0) - x.overlap,
        CostKind::LoadAware => {
            let rate = matched(p, x) / prompt_div;
            let norm = V::splat(p.mean_load.max_(1.0));
            let penalty = V::splat(p.beta) * ((x.requests - V::splat(p.mean_load)) / norm);
            V::splat(0.0) - (rate - penalty)
        }
        CostKind::Pressure => x.kv.max_(x.util).max_(x.occ),
        CostKind::OldPressure => x.kv.max_(x.util),
        CostKind::Projected => {
            let one = V::splat(1.0);
            let out = V::splat(p.output);
            // Seconds per prefill token; the step model's per-sequence seconds `a` and fixed
            // seconds `b` (b = 0: processor sharing at the decode throughput).
            let spp = one / x.ptps.pos_or(V::splat(p.default_prefill_tps));
            let a = one / x.dtps.pos_or(V::splat(p.default_decode_tps));
            let b = x.dbase;
            // The batch it runs in: the cap M = q/occ when full, at least 1 (a DP rank
            // holding few requests of an engine full on its other ranks; a NaN occupancy);
            // with room, q + 1 lifted to the fleet's mean batch, mean + 1, at most M (an idle
            // worker's 0/0 gives M = 1, so n = 1; an unknown occupancy, 0 in the lane, gives
            // M = ∞: no cap to the lift).
            let q1 = x.requests + one;
            let cap = (x.requests / x.occ).max_(one);
            let room = cap.min_(V::splat(p.mean_load + 1.0)).max_(q1);
            let n = x.occ.below_or(1.0, room, cap);
            // A full batch of M frees a slot every out·(b + M·a)/M seconds; it needs the
            // (q − M + 1)-th (0 with room, where q + 1 <= n).
            let wait = (q1 - n).max_(V::splat(0.0)) * V::splat(p.typical_output) * (b / n + a);
            let start = x.queued * spp + wait;
            let prefill = n * (uncached(p, x) * spp);
            let decode = out * (b + (n + n - one) * a);
            start + prefill + decode + barrier(p, x.kv)
        }
        CostKind::Dynamo => {
            let bs = V::splat(p.block_size);
            let prefill = (x.queued + V::splat(p.prompt)) / bs - x.overlap;
            let new_blocks = (V::splat(p.prompt) / bs - x.overlap).max_(V::splat(0.0));
            V::splat(p.dynamo_weight) * prefill + (x.decode / bs + new_blocks)
        }
        CostKind::LMetric => (V::splat(p.prompt) - matched(p, x)) * (x.requests + V::splat(1.0)),
        CostKind::Requests => x.requests,
    }
}

#[cfg(test)]
mod tests {
    use wide::f32x8;

    use super::*;

    /// Defaults of the knobs the formula reads (`ScoreConfig::default`), a 1,000-token
    /// prompt in blocks of 16, 200 output tokens.
    fn params() -> Params {
        Params {
            prompt: 1_000.0,
            block_size: 16.0,
            mean_load: 0.0,
            beta: 0.0,
            least_load_tps: 2_000.0,
            default_prefill_tps: 8_000.0,
            default_decode_tps: 1_000.0,
            kv_barrier_s: 0.15,
            dynamo_weight: 1.0,
            output: 200.0,
            typical_output: 200.0,
        }
    }

    fn lane(requests: f32, queued: f32, occ: f32, kv: f32, ptps: f32, dtps: f32) -> LaneIn<f32> {
        LaneIn {
            overlap: 10.0,
            requests,
            queued,
            decode: 50_000.0,
            kv,
            util: 0.0,
            occ,
            ptps,
            dtps,
            dbase: 0.0,
        }
    }

    /// Hand-computed projected seconds. Every lane holds 10 blocks (160 tokens) of the
    /// 1,000-token prompt: U = 840. The active context (`decode`, 50,000 tokens) plays no
    /// part.
    /// * Room (q 3, occupancy 0.5: n = 4), 2,000 queued, π 4,000, δ 2,000, KV 0.5:
    ///   2,000/4,000 + 4 × 840/4,000 + 7 × 200/2,000 + 0.15 × 0.5/0.5
    ///   = 0.5 + 0.84 + 0.7 + 0.15 = 2.19 s.
    /// * Full (q 12, occupancy 1.5: M = n = 8), 1,000 queued (0.25 s): the 5th slot to free,
    ///   5 × 200/2,000 = 0.5 s (typical output 200); 8 × 0.21 + 15 × 0.1 = 1.68 + 1.5:
    ///   0.25 + 0.5 + 3.18 = 3.93 s. With 4,000 queued: 1 + 0.5 + 3.18 = 4.68 s.
    /// * Occupancy 2 with no request on this slot (a DP rank of an engine full on its other
    ///   ranks): M = 0/2, so n = 1 and nothing to wait for: 840/4,000 + 200/2,000 = 0.31 s.
    /// * No throughput reported (defaults 8,000 and 1,000), idle: 840/8,000 + 200/1,000
    ///   = 0.105 + 0.2 = 0.305 s; occupancy unknown (0 in the lane) with q 1 counts as room
    ///   (n = 2): 2 × 0.105 + 3 × 0.2 = 0.81 s.
    #[test]
    fn projected_seconds_by_hand() {
        let p = params();
        let cases = [
            (lane(3.0, 2_000.0, 0.5, 0.5, 4_000.0, 2_000.0), 2.19),
            (lane(12.0, 1_000.0, 1.5, 0.0, 4_000.0, 2_000.0), 3.93),
            (lane(12.0, 4_000.0, 1.5, 0.0, 4_000.0, 2_000.0), 4.68),
            (lane(0.0, 0.0, 2.0, 0.0, 4_000.0, 2_000.0), 0.31),
            (lane(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.305),
            (lane(1.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0.81),
        ];
        for (x, want) in cases {
            let got = cost::<f32>(CostKind::Projected, &p, &x);
            assert!((got - want).abs() < 1e-5, "{x:?}: {got} != {want}");
        }
        // The SIMD lanes compute the same bits, each lane on its own.
        let mut lanes = [cases[0].0; 8];
        for (i, (x, _)) in cases.iter().enumerate() {
            lanes[i] = *x;
        }
        let col = |f: fn(&LaneIn<f32>) -> f32| f32x8::new(lanes.map(|x| f(&x)));
        let v = LaneIn {
            overlap: col(|x| x.overlap),
            requests: col(|x| x.requests),
            queued: col(|x| x.queued),
            decode: col(|x| x.decode),
            kv: col(|x| x.kv),
            util: col(|x| x.util),
            occ: col(|x| x.occ),
            ptps: col(|x| x.ptps),
            dtps: col(|x| x.dtps),
            dbase: col(|x| x.dbase),
        };
        let simd = cost::<f32x8>(CostKind::Projected, &p, &v).to_array();
        for (i, x) in lanes.iter().enumerate() {
            let scalar = cost::<f32>(CostKind::Projected, &p, x);
            assert_eq!(simd[i].to_bits(), scalar.to_bits(), "lane {i}");
        }
    }

    /// The step model and the batch lift, by hand: 1,000-token prompt, 10 blocks held
    /// (U = 840), π 4,000, 200 output tokens, a step of `n` sequences `b + n·a` with
    /// `a` = 1/2,000 s.
    /// * Step base b = 0.01 s, room (q 3, occupancy 0.5: M 6; mean 0: n = 4), 2,000 queued,
    ///   KV 0.5: 0.5 + 4 × 0.21 + 200 × (0.01 + 7 × 0.0005) + 0.15 = 0.5 + 0.84 + 2.7 + 0.15
    ///   = 4.19 s.
    /// * b = 0.01, full (q 12, occupancy 1.5: M = n = 8), 1,000 queued (0.25 s): a slot
    ///   frees every 200 × (0.01/8 + 0.0005) = 0.35 s, the 5th after 1.75 s; 8 × 0.21 +
    ///   200 × (0.01 + 15 × 0.0005) = 1.68 + 3.5: 0.25 + 1.75 + 5.18 = 7.18 s.
    /// * Processor sharing (b = 0), room (q 3, M 6), 2,000 queued, KV 0.5, fleet mean 9:
    ///   n = min(6, 10) = 6: 0.5 + 6 × 0.21 + 200 × 11 × 0.0005 + 0.15 = 0.5 + 1.26 + 1.1 +
    ///   0.15 = 3.01 s; mean 3.5: n = 4.5: 0.5 + 0.945 + 200 × 8 × 0.0005 + 0.15 = 2.395 s;
    ///   mean 1 (below its own q): n = q + 1 = 4: 0.5 + 0.84 + 0.7 + 0.15 = 2.19 s.
    /// * Idle (q 0, occupancy 0: 0/0 gives the cap 1), mean 9: n = 1: 0.21 + 200 × 0.0005 =
    ///   0.31 s. Occupancy unknown (0 in the lane) with q 3, mean 9: no cap, n = 10:
    ///   0.5 + 10 × 0.21 + 200 × 19 × 0.0005 + 0.15 = 0.5 + 2.1 + 1.9 + 0.15 = 4.65 s.
    #[test]
    fn step_model_and_mean_lift_by_hand() {
        let with = |mean: f32| Params {
            mean_load: mean,
            ..params()
        };
        let based = |x: LaneIn<f32>| LaneIn { dbase: 0.01, ..x };
        let cases = [
            (
                0.0,
                based(lane(3.0, 2_000.0, 0.5, 0.5, 4_000.0, 2_000.0)),
                4.19,
            ),
            (
                0.0,
                based(lane(12.0, 1_000.0, 1.5, 0.0, 4_000.0, 2_000.0)),
                7.18,
            ),
            (9.0, lane(3.0, 2_000.0, 0.5, 0.5, 4_000.0, 2_000.0), 3.01),
            (3.5, lane(3.0, 2_000.0, 0.5, 0.5, 4_000.0, 2_000.0), 2.395),
            (1.0, lane(3.0, 2_000.0, 0.5, 0.5, 4_000.0, 2_000.0), 2.19),
            (9.0, lane(0.0, 0.0, 0.0, 0.0, 4_000.0, 2_000.0), 0.31),
            (9.0, lane(3.0, 2_000.0, 0.0, 0.5, 4_000.0, 2_000.0), 4.65),
        ];
        for (mean, x, want) in cases {
            let got = cost::<f32>(CostKind::Projected, &with(mean), &x);
            assert!(
                (got - want).abs() < 1e-5,
                "mean {mean} {x:?}: {got} != {want}"
            );
        }
    }
}
