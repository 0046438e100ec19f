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
//! remain. With `π = ptps`, `δ = dtps` (the configured defaults where a lane reports none),
//! `q = requests`, `U = uncached`, `O = out`:
//!
//! 1. **Batch.** The request decodes in a batch of `n` sequences: `n = q + 1` while the
//!    batch has room (`occ < 1`, or occupancy unknown), else the cap `M = q/occ`
//!    (`occ = q/M`), so `n = M` (at least 1).
//! 2. **Start.** Its prefill starts after the prefill queued ahead of it, `queued/π`, and,
//!    when the batch is full, after a running slot frees. A full batch generates `δ`
//!    tokens/s; with requests like this one (`O` tokens each) it completes one every
//!    `O/δ` seconds, and the request needs the `(q − M + 1)`-th slot to free:
//!    `wait = (q − M + 1)·O/δ`. The two overlap (queued requests are admitted as slots
//!    free), so `start = max(queued/π, wait)` (`wait = 0` while there is room).
//! 3. **Prefill.** Its `U` uncached tokens take `U/π` of engine time, which delays its own
//!    first token and stalls every other request of the batch for as long (a prefill chunk
//!    lengthens the step they decode in): `n·U/π`.
//! 4. **Decode.** Processor sharing: the engine's decode throughput `δ` is shared evenly by
//!    the batch, so a step takes `n/δ` seconds. Its `O` tokens, one per step: `n·O/δ`; and
//!    it takes `1/δ` of every step from each of the `n − 1` other sequences for its `O`
//!    steps: `(n − 1)·O/δ`.
//! 5. **KV pressure**: `barrier` (the gateway's; preemption risk near a full cache).
//!
//! `projected = max(queued/π, wait) + n·U/π + (2n − 1)·O/δ + barrier`.
//!
//! Units: tokens over tokens/s throughout, so seconds; the request terms are seconds of
//! latency summed over the requests they delay. The cache enters through `U`: a cached
//! prefix saves `n·matched/π`, its prefill time for every request of the batch. An idle
//! worker costs `U/π + O/δ + barrier`, the request's prefill and decode alone.
//!
//! Why the others' delay counts: scored by its own latency alone, a request would take any
//! worker where its own prefill is short, however many requests decode there; but each
//! prefill chunk holds up every decoding request of that worker for the chunk's duration,
//! and on long-prompt traffic that stall, not the request's own wait, is most of what a
//! placement costs. Counting it is what makes a miss go where few requests decode, and a
//! hit stay with its owner while the owner's batch is small.
//!
//! Where it is approximate: processor sharing over-states the step time of a small batch
//! (a step's fixed cost, reading the weights once, is shared: `δ` grows with the batch), so
//! the decode terms lean towards spreading at low load; the outputs of the running requests
//! are unknown and taken as this request's `O`; the prefill queue is
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
    /// derivation): `max(queued/π, wait) + n·uncached/π + (2n − 1)·out/δ + barrier`,
    /// `wait = (q − M + 1)·out/δ` when the batch is full.
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
    pub mean_load: f32,
    pub beta: f32,
    pub least_load_tps: f32,
    pub default_prefill_tps: f32,
    pub default_decode_tps: f32,
    pub kv_barrier_s: f32,
    pub dynamo_weight: f32,
    /// The request's expected output (tokens).
    pub output: f32,
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
            // Seconds per prefill token and per decode token of the whole engine.
            let spp = one / x.ptps.pos_or(V::splat(p.default_prefill_tps));
            let spd = one / x.dtps.pos_or(V::splat(p.default_decode_tps));
            let out_s = V::splat(p.output) * spd;
            // The batch it decodes in: q + 1 with room, the cap M = q/occ when full, at least
            // 1 (a DP rank holding few requests of an engine full on its other ranks; a NaN
            // occupancy).
            let q1 = x.requests + one;
            let n = x.occ.below_or(1.0, q1, (x.requests / x.occ).max_(one));
            // A full batch frees a slot every out/δ seconds; it needs the (q − M + 1)-th
            // (0 with room, where n = q + 1).
            let wait = (q1 - n) * out_s;
            let start = (x.queued * spp).max_(wait);
            let prefill = n * (uncached(p, x) * spp);
            let decode = (n + n - one) * out_s;
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
        }
    }

    /// Hand-computed projected seconds. Every lane holds 10 blocks (160 tokens) of the
    /// 1,000-token prompt: U = 840. The active context (`decode`, 50,000 tokens) plays no
    /// part.
    /// * Room (q 3, occupancy 0.5: n = 4), 2,000 queued, π 4,000, δ 2,000, KV 0.5:
    ///   2,000/4,000 + 4 × 840/4,000 + 7 × 200/2,000 + 0.15 × 0.5/0.5
    ///   = 0.5 + 0.84 + 0.7 + 0.15 = 2.19 s.
    /// * Full (q 12, occupancy 1.5: M = n = 8), 1,000 queued (0.25 s): the 5th slot to free,
    ///   5 × 200/2,000 = 0.5 s; 8 × 0.21 + 15 × 0.1 = 1.68 + 1.5: 3.68 s. With 4,000 queued
    ///   the queue (1 s) is longer than the wait: 1 + 3.18 = 4.18 s.
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
            (lane(12.0, 1_000.0, 1.5, 0.0, 4_000.0, 2_000.0), 3.68),
            (lane(12.0, 4_000.0, 1.5, 0.0, 4_000.0, 2_000.0), 4.18),
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
        };
        let simd = cost::<f32x8>(CostKind::Projected, &p, &v).to_array();
        for (i, x) in lanes.iter().enumerate() {
            let scalar = cost::<f32>(CostKind::Projected, &p, x);
            assert_eq!(simd[i].to_bits(), scalar.to_bits(), "lane {i}");
        }
    }
}
