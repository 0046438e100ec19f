//! Per-worker cost formulas, one per [`CostKind`], written once over [`Lane`]. Lower cost
//! always wins; scores where higher wins are negated. Units are stated per kind.
//!
//! Notation, per worker lane: `overlap` (blocks of the request's prefix it holds),
//! `requests` (running + waiting + reserved), `queued` (waiting uncached prefill tokens +
//! reserved prefill tokens), `decode` (active decode tokens + reserved decode tokens), `k`
//! (KV usage), `util`, `occ` (DP-summed scheduler occupancy), `ptps`/`dtps` (prefill/decode
//! tokens/s). Per request: `prompt` (tokens), `bs` (block size, tokens).
//! `matched = min(overlap·bs, prompt)`, `uncached = max(prompt − overlap·bs, 0)`,
//! `barrier = kv_barrier_s · kc/(1 − kc)`, `kc = min(max(k, 0), 0.999)` (seconds).

use crate::lane::Lane;

/// Which formula a pass computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CostKind {
    /// 0 for every worker (round robin: only the cursor decides).
    Zero,
    /// Field notes, peers, the gateway's `least_load` (seconds):
    /// `(queued + decode) / ptps' + barrier`, `ptps'` = the lane's prefill throughput, else
    /// `least_load_tps` (2,000 tokens/s).
    LeastLoad,
    /// `−overlap` (blocks): `kv_aware`, deepest first (incident C's control).
    Overlap,
    /// Incident C, negated: `−(matched/max(prompt,1) − beta·(requests − mean)/max(1, mean))`
    /// (dimensionless), mean over occupied workers.
    LoadAware,
    /// Incident B: `max(k, util, occ)` (ratio).
    Pressure,
    /// Incident B's old pressure, its fleet-wide fallback: `max(k, util)` (ratio).
    OldPressure,
    /// Incident A (seconds): `queued/ptps + decode/dtps + uncached/ptps + barrier`, with the
    /// configured defaults where a lane reports no throughput; with
    /// `decode_full_batch_only`, the decode term is 0 where `occ < 1`.
    Projected,
    /// Field notes, Dynamo-style (blocks): `w·((queued + prompt)/bs − overlap)
    /// + decode/bs + max(prompt/bs − overlap, 0)`.
    Dynamo,
    /// Field notes, LMetric (tokens × requests): `(prompt − matched)·(requests + 1)`.
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
    pub decode_full_batch_only: bool,
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
            let ptps = x.ptps.pos_or(V::splat(p.default_prefill_tps));
            let dtps = x.dtps.pos_or(V::splat(p.default_decode_tps));
            let decode = if p.decode_full_batch_only {
                // Decode delays the first token only when the batch is full (occupancy at
                // or above 1): below that, continuous batching schedules the request at once.
                x.occ.below_or(1.0, V::splat(0.0), x.decode / dtps)
            } else {
                x.decode / dtps
            };
            x.queued / ptps + decode + uncached(p, x) / ptps + barrier(p, x.kv)
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
