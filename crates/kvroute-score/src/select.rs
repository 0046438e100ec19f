//! The two implementations of the pass: cost lanes and masked argmin with tie keys.
//!
//! [`Simd`] runs over `wide::f32x8` vectors (the lanes are padded, so there is no scalar
//! tail), and on x86 the AVX2 engine (module `avx2`) runs the same code over 256-bit AVX2
//! vectors: the vector pass is written once over [`Vector`] (`simd_costs`, `simd_select`,
//! `simd_costs2_select_escape`, `#[inline(always)]` so that each engine compiles it for its own
//! instruction set). [`Scalar`] is the reference, one slot at a time. All implement the
//! same rule:
//!
//! 1. a slot is *eligible* when it is occupied, passes the mask (overlap at least
//!    `min_overlap`, when given) and its cost is finite (NaN and ±inf fail);
//! 2. `m` = the smallest eligible cost; the *band* is the eligible slots with
//!    `cost <= m + band·|m|`;
//! 3. with a random draw `r`: keep the band slots whose overlap is not below the band's
//!    deepest (when `overlap`: a near-tie draw never moves a conversation off the worker
//!    holding its cache), then the `(r mod |kept|)`-th of them in slot order;
//! 4. otherwise: keep band slots whose requests are not above the band's least (when
//!    `load`), then whose overlap is not below the rest's deepest (when `overlap`); NaN
//!    keys never exclude; then the `(cursor mod |kept|)`-th kept slot in slot order, so
//!    consecutive cursors rotate evenly over the tied workers whatever the slot capacity
//!    and wherever vacant or ineligible slots sit.
//!
//! Every step is a comparison of exact values, so the two agree bit for bit.
//!
//! The SIMD selection makes two vector passes (eligibility with the running minimum, then
//! the band, both into one candidate byte per chunk of eight slots); the tie keys of step 4
//! then visit only the band's slots, so a small band costs nothing more. `projected_time`
//! computes its two cost kinds (projected seconds and the escape's `least_load` seconds)
//! in one pass over the lanes that also does both selections' eligibility pass
//! ([`Engine::costs2_select_escape`]); the `least_load` selection's band pass and tie keys
//! run only when its least cost leaves an escape possible.

#![allow(clippy::needless_range_loop)] // parallel lanes are indexed together

use wide::f32x8;

use crate::cost::{CostKind, LaneIn, Params, cost};
use crate::fleet::Fleet;
use crate::lane::Vector;

/// Which slots may be chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Mask {
    /// Only slots whose overlap is at least this (blocks).
    pub min_overlap: Option<f32>,
}

impl Mask {
    pub const ALL: Mask = Mask { min_overlap: None };
}

/// How ties are broken.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct TieRule {
    pub band: f32,
    pub load: bool,
    pub overlap: bool,
    pub cursor: u32,
    pub random: Option<u64>,
}

/// One implementation of the pass.
pub(crate) trait Engine {
    /// Whether `projected_time` (enforce) may take the sparse decision (module `sparse`),
    /// which gives the same choice: every engine but the scalar reference.
    const SPARSE: bool = true;
    /// Writes the cost of every lane (padded length) into `out`.
    fn costs(kind: CostKind, p: &Params, fleet: &Fleet, out: &mut Vec<f32>);
    /// [`costs`](Self::costs) of two kinds at once, [`select`](Self::select) on the first
    /// cost lane with [`Mask::ALL`] and `rule`, and on the second only when needed: when the
    /// second lane's cost at the first pick exceeds its least eligible cost by more than
    /// `margin` (otherwise no slot of the second lane can be more than `margin` below the
    /// first pick, whichever the tie rule would pick). One pass over the lanes where the
    /// implementation can share the loads and the eligibility pass.
    fn costs2_select_escape(
        kinds: [CostKind; 2],
        p: &Params,
        fleet: &Fleet,
        out: [&mut Vec<f32>; 2],
        rule: &TieRule,
        margin: f32,
    ) -> (Option<usize>, Escape) {
        let [a, b] = out;
        Self::costs(kinds[0], p, fleet, a);
        Self::costs(kinds[1], p, fleet, b);
        let min = (0..fleet.len)
            .filter(|&i| fleet.occupied[i] > 0.0 && b[i].is_finite())
            .map(|i| b[i])
            .fold(None, |m: Option<f32>, c| match m {
                Some(m) if m <= c => Some(m),
                _ => Some(c),
            });
        let first = Self::select(fleet, a, Mask::ALL, rule);
        let escape = Escape::judge(first, b, min, margin, || {
            Self::select(fleet, b, Mask::ALL, rule)
        });
        (first, escape)
    }
    /// The chosen slot under `mask` and `rule`, or `None` when no slot is eligible.
    fn select(fleet: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize>;
    /// The sum of `costs` (padded length) over the occupied slots whose cost is finite, and
    /// their number: eight accumulators (slot `i` into `i mod 8`) added in lane order, so
    /// every engine gets the same bits (the reference uses the portable vectors too).
    fn occupied_sums(fleet: &Fleet, costs: &[f32]) -> (f32, f32) {
        simd_occupied_sums::<f32x8>(fleet, costs)
    }
}

/// What [`Engine::costs2_select_escape`] found on its second cost lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Escape {
    /// No slot is eligible in it.
    NoneEligible,
    /// Its cost at the first pick is within the margin of its least eligible cost.
    Within,
    /// Past the margin: its own pick.
    Pick(usize),
}

impl Escape {
    /// The rule of [`Engine::costs2_select_escape`], given the first pick, the second
    /// lane, its least eligible cost and how to select on it.
    #[inline(always)]
    fn judge(
        first: Option<usize>,
        second: &[f32],
        min: Option<f32>,
        margin: f32,
        select: impl FnOnce() -> Option<usize>,
    ) -> Self {
        let Some(min) = min else {
            return Escape::NoneEligible;
        };
        if first.is_some_and(|p| second[p] - min <= margin) {
            return Escape::Within;
        }
        select().map_or(Escape::NoneEligible, Escape::Pick)
    }
}

/// The scalar reference.
pub(crate) struct Scalar;

/// The SIMD pass (`wide::f32x8`).
pub(crate) struct Simd;

pub(crate) fn band_limit(m: f32, band: f32) -> f32 {
    m + band * m.abs()
}

fn pick_rotating(len: usize, cursor: u32, mut kept: impl FnMut(usize) -> bool) -> Option<usize> {
    let n = (0..len).filter(|&i| kept(i)).count();
    if n == 0 {
        return None;
    }
    (0..len).filter(|&i| kept(i)).nth(cursor as usize % n)
}

/// Slot `i`'s figures as one scalar lane.
pub(crate) fn lane_at(f: &Fleet, i: usize) -> LaneIn<f32> {
    LaneIn {
        overlap: f.overlap[i],
        requests: f.requests[i],
        queued: f.queued[i],
        decode: f.decode[i],
        kv: f.kv[i],
        util: f.util[i],
        occ: f.occ[i],
        ptps: f.ptps[i],
        dtps: f.dtps[i],
        dbase: f.dbase[i],
    }
}

impl Engine for Scalar {
    const SPARSE: bool = false;

    fn costs(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
        out.clear();
        out.extend((0..f.lane_len()).map(|i| cost::<f32>(kind, p, &lane_at(f, i))));
    }

    fn select(f: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize> {
        let eligible = |i: usize| {
            let c = costs[i];
            f.occupied[i] > 0.0
                && mask.min_overlap.is_none_or(|t| f.overlap[i] >= t)
                && c.is_finite()
        };
        let mut m = f32::INFINITY;
        let mut any = false;
        for i in 0..f.len {
            if eligible(i) {
                any = true;
                if costs[i] < m {
                    m = costs[i];
                }
            }
        }
        if !any {
            return None;
        }
        let t = band_limit(m, rule.band);
        let in_band = |i: usize| eligible(i) && costs[i] <= t;
        if let Some(r) = rule.random {
            let mut deepest = f32::NEG_INFINITY;
            if rule.overlap {
                for i in (0..f.len).filter(|&i| in_band(i)) {
                    if f.overlap[i] > deepest {
                        deepest = f.overlap[i];
                    }
                }
            }
            let kept = |i: usize| in_band(i) && !(rule.overlap && f.overlap[i] < deepest);
            let n = (0..f.len).filter(|&i| kept(i)).count() as u64;
            let k = (r % n.max(1)) as usize;
            return (0..f.len).filter(|&i| kept(i)).nth(k);
        }
        let mut min_req = f32::INFINITY;
        if rule.load {
            for i in (0..f.len).filter(|&i| in_band(i)) {
                if f.requests[i] < min_req {
                    min_req = f.requests[i];
                }
            }
        }
        let keep1 = |i: usize| in_band(i) && !(rule.load && f.requests[i] > min_req);
        let mut max_ovl = f32::NEG_INFINITY;
        if rule.overlap {
            for i in (0..f.len).filter(|&i| keep1(i)) {
                if f.overlap[i] > max_ovl {
                    max_ovl = f.overlap[i];
                }
            }
        }
        let keep2 = |i: usize| keep1(i) && !(rule.overlap && f.overlap[i] < max_ovl);
        pick_rotating(f.len, rule.cursor, keep2)
    }
}

/// A lane as whole chunks of eight, cut to exactly `chunks` of them so that indexing
/// with `c < chunks` needs no bounds check in the loops below.
#[inline(always)]
fn chunked(lane: &[f32], chunks: usize) -> &[[f32; 8]] {
    let whole: &[[f32; 8]] = bytemuck::cast_slice(&lane[..chunks * 8]);
    &whole[..chunks]
}

/// The mutable form of [`chunked`].
#[inline(always)]
fn chunked_mut(lane: &mut [f32], chunks: usize) -> &mut [[f32; 8]] {
    let whole: &mut [[f32; 8]] = bytemuck::cast_slice_mut(&mut lane[..chunks * 8]);
    &mut whole[..chunks]
}

/// Every lane the pass reads, chunked (see [`chunked`]).
struct Cols<'a> {
    chunks: usize,
    occupied: &'a [[f32; 8]],
    overlap: &'a [[f32; 8]],
    requests: &'a [[f32; 8]],
    queued: &'a [[f32; 8]],
    decode: &'a [[f32; 8]],
    kv: &'a [[f32; 8]],
    util: &'a [[f32; 8]],
    occ: &'a [[f32; 8]],
    ptps: &'a [[f32; 8]],
    dtps: &'a [[f32; 8]],
    dbase: &'a [[f32; 8]],
}

impl<'a> Cols<'a> {
    #[inline(always)]
    fn new(f: &'a Fleet) -> Self {
        let n = f.lane_len() / 8;
        Cols {
            chunks: n,
            occupied: chunked(&f.occupied, n),
            overlap: chunked(&f.overlap, n),
            requests: chunked(&f.requests, n),
            queued: chunked(&f.queued, n),
            decode: chunked(&f.decode, n),
            kv: chunked(&f.kv, n),
            util: chunked(&f.util, n),
            occ: chunked(&f.occ, n),
            ptps: chunked(&f.ptps, n),
            dtps: chunked(&f.dtps, n),
            dbase: chunked(&f.dbase, n),
        }
    }

    /// The worker figures of chunk `c`.
    #[inline(always)]
    fn lanes<V: Vector>(&self, c: usize) -> LaneIn<V> {
        LaneIn {
            overlap: V::load(self.overlap[c]),
            requests: V::load(self.requests[c]),
            queued: V::load(self.queued[c]),
            decode: V::load(self.decode[c]),
            kv: V::load(self.kv[c]),
            util: V::load(self.util[c]),
            occ: V::load(self.occ[c]),
            ptps: V::load(self.ptps[c]),
            dtps: V::load(self.dtps[c]),
            dbase: V::load(self.dbase[c]),
        }
    }

    /// Eligibility mask of chunk `c` with costs `cv`.
    #[inline(always)]
    fn eligible<V: Vector>(&self, cv: V, mask: Mask, c: usize) -> V {
        let mut e = V::load(self.occupied[c]).gt_mask(V::splat(0.0)) & finite(cv);
        if let Some(t) = mask.min_overlap {
            e &= V::load(self.overlap[c]).ge_mask(V::splat(t));
        }
        e
    }
}

/// All ones where `x` is finite (not NaN, not ±inf): `x − x` is +0 exactly for finite `x`
/// and NaN otherwise (two instructions per half, where `is_finite`'s bit test takes four).
#[inline(always)]
#[allow(clippy::eq_op)] // `x − x` is the point: +0 or NaN
pub(crate) fn finite<V: Vector>(x: V) -> V {
    (x - x).eq_mask(V::splat(0.0))
}

#[inline(always)]
pub(crate) fn hmin<V: Vector>(x: V) -> f32 {
    x.to_array()
        .into_iter()
        .fold(f32::INFINITY, |m, e| if e < m { e } else { m })
}

/// [`Engine::occupied_sums`] over `V`.
#[inline(always)]
pub(crate) fn simd_occupied_sums<V: Vector>(f: &Fleet, costs: &[f32]) -> (f32, f32) {
    let n = f.lane_len() / 8;
    let (occupied, cs) = (chunked(&f.occupied, n), chunked(costs, n));
    let (zero, one) = (V::splat(0.0), V::splat(1.0));
    let (mut acc, mut count) = (zero, zero);
    for c in 0..n {
        let cv = V::load(cs[c]);
        let keep = V::load(occupied[c]).gt_mask(zero) & finite(cv);
        acc = acc + keep.select(cv, zero);
        count = count + keep.select(one, zero);
    }
    let sum = acc.to_array().iter().fold(0.0f32, |a, &b| a + b);
    let k = count.to_array().iter().fold(0.0f32, |a, &b| a + b);
    (sum, k)
}

/// The fleet's cost coefficients (module `coef`), chunked like [`Cols`].
struct CoefCols<'a> {
    spp: &'a [[f32; 8]],
    a: &'a [[f32; 8]],
    q1: &'a [[f32; 8]],
    cap: &'a [[f32; 8]],
    room: &'a [[f32; 8]],
    start: &'a [[f32; 8]],
    barrier: &'a [[f32; 8]],
    least: &'a [[f32; 8]],
}

/// How a pass computes one kind of cost: from the lanes, or from the coefficients where
/// the fleet holds them for the pass's parameters (the same bits either way).
enum Plan<'a> {
    Lanes(CostKind),
    Projected(CoefCols<'a>),
    Least(CoefCols<'a>),
}

impl<'a> Plan<'a> {
    #[inline(always)]
    fn new(kind: CostKind, p: &Params, f: &'a Fleet) -> Self {
        let k = &f.coef;
        let usable = match kind {
            CostKind::Projected => k.projected_for(p),
            CostKind::LeastLoad => k.least_for(p),
            _ => false,
        };
        if !usable || k.spp.len() != f.lane_len() {
            return Plan::Lanes(kind);
        }
        let n = f.lane_len() / 8;
        let cols = CoefCols {
            spp: chunked(&k.spp, n),
            a: chunked(&k.a, n),
            q1: chunked(&k.q1, n),
            cap: chunked(&k.cap, n),
            room: chunked(&k.room, n),
            start: chunked(&k.start, n),
            barrier: chunked(&k.barrier, n),
            least: chunked(&k.least, n),
        };
        match kind {
            CostKind::Projected => Plan::Projected(cols),
            _ => Plan::Least(cols),
        }
    }

    /// The costs of chunk `c`.
    #[inline(always)]
    fn chunk<V: Vector>(&self, p: &Params, cols: &Cols<'_>, c: usize) -> V {
        match self {
            Plan::Lanes(kind) => cost::<V>(*kind, p, &cols.lanes(c)),
            Plan::Projected(k) => projected_from_coefficients(p, cols, k, c),
            Plan::Least(k) => V::load(k.least[c]),
        }
    }
}

/// `projected_time` of chunk `c` from the coefficients: the operations of
/// [`cost`]'s `Projected` arm that depend on the request and the mean load, in the same
/// order, on the terms the coefficients hold (module `coef`).
#[inline(always)]
fn projected_from_coefficients<V: Vector>(
    p: &Params,
    cols: &Cols<'_>,
    k: &CoefCols<'_>,
    c: usize,
) -> V {
    let one = V::splat(1.0);
    let cap = V::load(k.cap[c]);
    let room = cap.min_(V::splat(p.mean_load + 1.0)).max_(V::load(k.q1[c]));
    let n = V::load(k.room[c]).select(room, cap);
    let uncached = (V::splat(p.prompt) - V::load(cols.overlap[c]) * V::splat(p.block_size))
        .max_(V::splat(0.0));
    let prefill = n * (uncached * V::load(k.spp[c]));
    let decode = V::splat(p.output) * (V::load(cols.dbase[c]) + (n + n - one) * V::load(k.a[c]));
    V::load(k.start[c]) + prefill + decode + V::load(k.barrier[c])
}

/// [`Engine::costs`] of the vector pass over `V`.
#[inline(always)]
pub(crate) fn simd_costs<V: Vector>(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
    let cols = Cols::new(f);
    let plan = Plan::new(kind, p, f);
    // Every lane is overwritten below: size the buffer without clearing it.
    out.resize(f.lane_len(), 0.0);
    out.truncate(f.lane_len());
    let o = chunked_mut(out, cols.chunks);
    for c in 0..cols.chunks {
        o[c] = plan.chunk::<V>(p, &cols, c).to_array();
    }
}

/// [`Engine::costs2_select_escape`] of the vector pass over `V`.
#[inline(always)]
pub(crate) fn simd_costs2_select_escape<V: Vector>(
    kinds: [CostKind; 2],
    p: &Params,
    f: &Fleet,
    out: [&mut Vec<f32>; 2],
    rule: &TieRule,
    margin: f32,
) -> (Option<usize>, Escape) {
    let cols = Cols::new(f);
    let chunks = cols.chunks;
    let plans = [Plan::new(kinds[0], p, f), Plan::new(kinds[1], p, f)];
    let [a, b] = out;
    for o in [&mut *a, &mut *b] {
        o.resize(f.lane_len(), 0.0);
        o.truncate(f.lane_len());
    }
    let (ca, cb) = (chunked_mut(a, chunks), chunked_mut(b, chunks));
    let mut stack = [[0u8; STACK_BYTES]; 2];
    let mut heap = Vec::new();
    let [ba, bb] = candidate_bytes(chunks, &mut stack, &mut heap);
    // Costs and both eligibility passes (Mask::ALL) at once: the same values and
    // comparisons, in the same order, as `costs` then `select`'s first pass on each.
    let (mut sa, mut sb) = (Scan::<V>::new(), Scan::<V>::new());
    {
        let (ea, eb) = (&mut ba[..chunks], &mut bb[..chunks]);
        // A macro, not a closure: a closure would not inherit the AVX2 kernel's target
        // features, and its vector operations would not be inlined.
        macro_rules! take {
            ($c:expr, $va:expr, $vb:expr) => {{
                let (c, va, vb): (usize, V, V) = ($c, $va, $vb);
                ca[c] = va.to_array();
                cb[c] = vb.to_array();
                let occupied = V::load(cols.occupied[c]).gt_mask(V::splat(0.0));
                ea[c] = sa.add(occupied & finite(va), va);
                eb[c] = sb.add(occupied & finite(vb), vb);
            }};
        }
        match &plans {
            // `projected_time` enforce's pair from the coefficients: no plan to match per
            // chunk.
            [Plan::Projected(k), Plan::Least(l)] => {
                for c in 0..chunks {
                    take!(
                        c,
                        projected_from_coefficients(p, &cols, k, c),
                        V::load(l.least[c])
                    );
                }
            }
            _ => {
                for c in 0..chunks {
                    take!(
                        c,
                        plans[0].chunk::<V>(p, &cols, c),
                        plans[1].chunk::<V>(p, &cols, c)
                    );
                }
            }
        }
    }
    let first = finish(f, chunked(a, chunks), rule, sa, ba);
    let min = (sb.any != 0).then(|| hmin(sb.acc));
    // Not `Escape::judge`: a closure would not inherit the AVX2 kernel's target features.
    let escape = match min {
        None => Escape::NoneEligible,
        Some(m) if first.is_some_and(|p| b[p] - m <= margin) => Escape::Within,
        Some(_) => {
            finish(f, chunked(b, chunks), rule, sb, bb).map_or(Escape::NoneEligible, Escape::Pick)
        }
    };
    (first, escape)
}

/// [`Engine::select`] of the vector pass over `V`.
#[inline(always)]
pub(crate) fn simd_select<V: Vector>(
    f: &Fleet,
    costs: &[f32],
    mask: Mask,
    rule: &TieRule,
) -> Option<usize> {
    let cols = Cols::new(f);
    let chunks = cols.chunks;
    let cs = chunked(costs, chunks);
    let mut stack = [[0u8; STACK_BYTES]; 2];
    let mut heap = Vec::new();
    let [bytes, _] = candidate_bytes(chunks, &mut stack, &mut heap);
    let mut scan = Scan::<V>::new();
    for (c, byte) in bytes[..chunks].iter_mut().enumerate() {
        let cv = V::load(cs[c]);
        *byte = scan.add(cols.eligible(cv, mask, c), cv);
    }
    finish(f, cs, rule, scan, bytes)
}

impl Engine for Simd {
    fn costs(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
        simd_costs::<f32x8>(kind, p, f, out);
    }

    fn costs2_select_escape(
        kinds: [CostKind; 2],
        p: &Params,
        f: &Fleet,
        out: [&mut Vec<f32>; 2],
        rule: &TieRule,
        margin: f32,
    ) -> (Option<usize>, Escape) {
        simd_costs2_select_escape::<f32x8>(kinds, p, f, out, rule, margin)
    }

    fn select(f: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize> {
        simd_select::<f32x8>(f, costs, mask, rule)
    }
}

/// Candidate bytes kept on the stack per cost lane: 512 chunks, 4,096 slots (the router's
/// maximum).
const STACK_BYTES: usize = 512;

/// Two zeroed candidate byte buffers of `chunks.div_ceil(8) * 8` bytes (whole `u64`
/// words): `stack`'s when they fit, else `heap`, grown.
#[inline(always)]
fn candidate_bytes<'a>(
    chunks: usize,
    stack: &'a mut [[u8; STACK_BYTES]; 2],
    heap: &'a mut Vec<u8>,
) -> [&'a mut [u8]; 2] {
    let n = chunks.div_ceil(8) * 8;
    if n <= STACK_BYTES {
        let [a, b] = stack;
        [&mut a[..n], &mut b[..n]]
    } else {
        heap.resize(2 * n, 0);
        let (a, b) = heap.split_at_mut(n);
        [a, b]
    }
}

/// The eligibility pass of one cost lane: the running minimum of eligible costs (one
/// accumulator per vector lane) and whether any slot is eligible.
#[derive(Clone, Copy)]
struct Scan<V> {
    acc: V,
    any: u32,
}

impl<V: Vector> Scan<V> {
    #[inline(always)]
    fn new() -> Self {
        Scan {
            acc: V::splat(f32::INFINITY),
            any: 0,
        }
    }

    /// Takes one chunk's eligibility `e` and costs `cv`; returns its candidate byte (bit
    /// `j`: lane `j` eligible).
    #[inline(always)]
    fn add(&mut self, e: V, cv: V) -> u8 {
        let m = e.bits();
        self.any |= u32::from(m);
        // `cv < acc ? cv : acc` where eligible (`min_`: one `minps` on x86), else `acc`.
        self.acc = e.select(cv, V::splat(f32::INFINITY)).min_(self.acc);
        m
    }
}

/// Calls `each(i)` for every set bit `i` of `bits` (slot order).
#[inline(always)]
fn for_each_bit(bits: &[u64], mut each: impl FnMut(usize)) {
    for (w, &word) in bits.iter().enumerate() {
        let mut b = word;
        while b != 0 {
            each(w * 64 + b.trailing_zeros() as usize);
            b &= b - 1;
        }
    }
}

/// Clears every set bit `i` of `bits` for which `drop(i)` holds.
#[inline(always)]
fn retain_bits(bits: &mut [u64], mut drop: impl FnMut(usize) -> bool) {
    for (w, word) in bits.iter_mut().enumerate() {
        let mut b = *word;
        while b != 0 {
            let i = b.trailing_zeros() as usize;
            if drop(w * 64 + i) {
                *word &= !(1u64 << i);
            }
            b &= b - 1;
        }
    }
}

/// The selection after the eligibility pass (`scan`, and `bytes`: one candidate byte
/// per chunk of `costs`, then zeros to a whole number of `u64` words).
///
/// One more vector pass narrows the candidates to the band (`cost <= limit`, chunks
/// without a candidate skipped); the candidates then become one bit per slot in `u64`
/// words (byte `c` is bits `8(c mod 8)..` of word `c/8`), and the tie keys visit only
/// band slots, one at a time in slot order, with the same comparisons as the scalar
/// reference.
#[inline(always)]
fn finish<V: Vector>(
    f: &Fleet,
    cs: &[[f32; 8]],
    rule: &TieRule,
    scan: Scan<V>,
    bytes: &mut [u8],
) -> Option<usize> {
    if scan.any == 0 {
        return None;
    }
    let t = V::splat(band_limit(hmin(scan.acc), rule.band));
    for (b, c) in bytes.iter_mut().zip(cs) {
        if *b == 0 {
            continue;
        }
        *b &= V::load(*c).le_mask(t).bits();
    }
    let mut words = [0u64; STACK_BYTES / 8];
    let mut heap = Vec::new();
    let bits = if bytes.len() <= STACK_BYTES {
        &mut words[..bytes.len() / 8]
    } else {
        heap.resize(bytes.len() / 8, 0);
        &mut heap[..]
    };
    for (w, b) in bits.iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
    pick_in_band(f, rule, bits)
}

/// [`pick_in_band`] on a band given as a list: `band` holds the band's slots in slot order,
/// each once, with each slot's overlap as [`Fleet::overlap_at`] reads it (the caller has
/// it from costing the slot). The same kept set in the same order, so the same pick (with
/// both keys on, in one pass instead of two); narrows `band` in place.
// `!(x < y)` is not `x >= y` for a NaN key, which the rule keeps (it never excludes).
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub(crate) fn pick_in_list(f: &Fleet, rule: &TieRule, band: &mut Vec<(u32, f32)>) -> Option<usize> {
    let req = |i: u32| f.requests[i as usize];
    if let Some(r) = rule.random {
        if rule.overlap {
            let mut deepest = f32::NEG_INFINITY;
            for &(_, o) in band.iter() {
                if o > deepest {
                    deepest = o;
                }
            }
            keep_where(band, |(_, o)| !(o < deepest));
        }
        let k = r % (band.len() as u64).max(1);
        return band.get(k as usize).map(|&(i, _)| i as usize);
    }
    if rule.load && rule.overlap {
        // Both keys in one pass: the least requests, and the most overlap among the slots
        // the load key keeps (those at the least requests, and those whose requests are
        // NaN, which `!(r > min)` keeps); then one compaction. Keeps what the two passes
        // below keep.
        let (mut min_req, mut top, mut top_nan) =
            (f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY);
        for &(i, o) in band.iter() {
            let r = req(i);
            if r < min_req {
                min_req = r;
                top = f32::NEG_INFINITY;
            }
            if r == min_req {
                top = if o > top { o } else { top };
            } else if r.is_nan() {
                top_nan = if o > top_nan { o } else { top_nan };
            }
        }
        let top = if top_nan > top { top_nan } else { top };
        keep_where(band, |(i, o)| !(req(i) > min_req) && !(o < top));
        if band.is_empty() {
            return None;
        }
        return Some(band[rule.cursor as usize % band.len()].0 as usize);
    }
    if rule.load {
        let mut min_req = f32::INFINITY;
        for &(i, _) in band.iter() {
            if req(i) < min_req {
                min_req = req(i);
            }
        }
        keep_where(band, |(i, _)| !(req(i) > min_req));
    }
    if rule.overlap {
        let mut max_ovl = f32::NEG_INFINITY;
        for &(_, o) in band.iter() {
            if o > max_ovl {
                max_ovl = o;
            }
        }
        keep_where(band, |(_, o)| !(o < max_ovl));
    }
    if band.is_empty() {
        return None;
    }
    Some(band[rule.cursor as usize % band.len()].0 as usize)
}

/// Keeps the entries of `band` for which `keep` holds, in order (a plain compaction: the
/// band is a few entries, where `Vec::retain`'s set-up costs more than the loop).
#[inline(always)]
fn keep_where<T: Copy>(band: &mut Vec<T>, keep: impl Fn(T) -> bool) {
    let mut n = 0;
    for j in 0..band.len() {
        let i = band[j];
        if keep(i) {
            band[n] = i;
            n += 1;
        }
    }
    band.truncate(n);
}

/// Steps 3 and 4 of the rule (module docs) on the band `bits` (one bit per slot, `u64`
/// words in slot order): the tie keys visit only the band's slots, one at a time in slot
/// order, with the same comparisons as the scalar reference. Narrows `bits` in place.
#[inline(always)]
pub(crate) fn pick_in_band(f: &Fleet, rule: &TieRule, bits: &mut [u64]) -> Option<usize> {
    if let Some(r) = rule.random {
        if rule.overlap {
            let mut deepest = f32::NEG_INFINITY;
            for_each_bit(bits, |i| {
                if f.overlap[i] > deepest {
                    deepest = f.overlap[i];
                }
            });
            retain_bits(bits, |i| f.overlap[i] < deepest);
        }
        // The kept slots' count, counted only here (the SSE2 baseline has no `popcnt`).
        let n: u64 = bits.iter().map(|w| u64::from(w.count_ones())).sum();
        let mut k = r % n.max(1);
        let mut pick = None;
        for_each_bit(bits, |i| {
            if k == 0 && pick.is_none() {
                pick = Some(i);
            }
            k = k.wrapping_sub(1);
        });
        return pick;
    }
    if rule.load {
        let mut min_req = f32::INFINITY;
        for_each_bit(bits, |i| {
            if f.requests[i] < min_req {
                min_req = f.requests[i];
            }
        });
        retain_bits(bits, |i| f.requests[i] > min_req);
    }
    if rule.overlap {
        let mut max_ovl = f32::NEG_INFINITY;
        for_each_bit(bits, |i| {
            if f.overlap[i] > max_ovl {
                max_ovl = f.overlap[i];
            }
        });
        retain_bits(bits, |i| f.overlap[i] < max_ovl);
    }
    // The `(cursor mod |kept|)`-th kept slot in slot order.
    let n: usize = bits.iter().map(|w| w.count_ones() as usize).sum();
    if n == 0 {
        return None;
    }
    let mut k = rule.cursor as usize % n;
    for (w, &word) in bits.iter().enumerate() {
        let ones = word.count_ones() as usize;
        if k >= ones {
            k -= ones;
            continue;
        }
        let mut b = word;
        for _ in 0..k {
            b &= b - 1;
        }
        return Some(w * 64 + b.trailing_zeros() as usize);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list form of the tie keys picks what the bit form picks, on random bands of
    /// random fleets whose requests and overlaps tie often and are sometimes NaN, under
    /// every combination of keys, cursors and draws.
    #[test]
    fn pick_in_list_equals_pick_in_band() {
        use crate::fleet::SlotFigures;
        let mut r = kvroute_core::SplitMix64::new(5);
        let key = |r: &mut kvroute_core::SplitMix64| match r.next_u64() % 8 {
            0 => f32::NAN,
            k => (k % 3) as f32,
        };
        for n in [1usize, 7, 64, 65, 130, 512] {
            let slots: Vec<Option<SlotFigures>> = (0..n)
                .map(|_| {
                    let mut s = SlotFigures::idle();
                    s.requests = key(&mut r);
                    s.overlap_blocks = key(&mut r);
                    Some(s)
                })
                .collect();
            let f = Fleet::from_slots(&slots);
            for round in 0..50u32 {
                let band: Vec<u32> = (0..n as u32).filter(|_| r.next_u64() % 3 == 0).collect();
                let rule = TieRule {
                    band: 0.0,
                    load: round % 2 == 0,
                    overlap: round % 4 < 2,
                    cursor: round * 7,
                    random: (round % 3 == 0).then(|| r.next_u64()),
                };
                let mut bits = vec![0u64; f.lane_len().div_ceil(64)];
                for &i in &band {
                    bits[i as usize / 64] |= 1 << (i % 64);
                }
                let mut list: Vec<(u32, f32)> = band
                    .iter()
                    .map(|&i| (i, f.overlap_at(i as usize)))
                    .collect();
                assert_eq!(
                    pick_in_list(&f, &rule, &mut list),
                    pick_in_band(&f, &rule, &mut bits),
                    "{n} slots, band {band:?}, {rule:?}"
                );
            }
        }
    }

    /// `finite` is `f32::is_finite` per lane, on every class of value.
    #[test]
    fn finite_matches_is_finite() {
        let x = [
            [
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                -0.0,
                0.0,
                1.5,
                -3.0e38,
                f32::MAX,
            ],
            [
                f32::MIN_POSITIVE,
                1.0e-45,
                -1.0e-45,
                f32::MIN,
                -f32::NAN,
                7.0,
                -7.0,
                1.0e30,
            ],
        ];
        for lanes in x {
            let got = i32::from(finite(f32x8::new(lanes)).bits());
            let want = lanes
                .iter()
                .enumerate()
                .fold(0, |m, (i, v)| m | (i32::from(v.is_finite()) << i));
            assert_eq!(got, want, "{lanes:?}");
        }
    }
}
