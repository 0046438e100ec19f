//! The sparse `projected_time` decision: the same choice as the dense pass (slot, reason
//! and cost, bit for bit), costing only the slots that can be in the tie band.
//!
//! # Why it is exact
//! A slot's projected cost (module `coef`) is
//! `((start + n·(U·spp)) + out·(b + (2n − 1)·a)) + barrier`, every term at least 0 for a
//! slot whose coefficients are finite and not negative, and it grows with `n` and with the
//! uncached prompt `U`. With room `n = max(min(M, mean + 1), q + 1)`, when full `n = M`, so
//! `n >= min(M, mean + 1)` either way. Per publication ([`Order::build`]) the occupied
//! slots are sorted by `κ = start + barrier` (what the request does not change), with the
//! suffix minima of `spp`, `a`, `b` and `M` along that order. For the slots from position
//! `k` on, with `ν = min(M_min, mean + 1)` and `U_c` the uncached prompt at the match's
//! tail bound ([`kvroute_index::index::Overlaps::tail`]: every slot outside the tail holds
//! at most that many blocks, so its `U` is at least `U_c`),
//!
//! `cost >= κ_k + ν·(U_c·spp_min) + out·(b_min + (2ν − 1)·a_min)`,
//!
//! a bound that only grows with `k`. The decision costs the *special* slots one by one
//! (the tail's, the slots holding reservations now or when the order was built, whose
//! coefficients are not the order's, and the few whose coefficients are not finite and
//! non-negative), then walks the order, eight positions per bound, until the bound is
//! above the tie band's limit of the least cost seen so far. A slot it does not reach
//! costs more than that limit, which only falls as the walk goes on (costs are at least 0
//! and the band not negative), so it is neither the
//! least cost nor in the band. Rounding: each cost is a sum of non-negative terms of a
//! few exactly rounded operations (relative error below 2⁻²⁰), so the bound is shrunk by
//! 2⁻¹⁴ (and an absolute 10⁻³⁰ for subnormal values) before the comparison.
//!
//! Each walked slot's cost is the dense pass's formula on the same coefficients, eight
//! slots per vector, so the same bits. A slot above the band's limit when it is costed
//! is dropped at once (the limit only falls); the band's slots then go, in slot order,
//! through the same tie keys as the dense pass ([`pick_in_list`], the list form of the
//! dense pass's bit form), and the hard escape's test needs only the least `least_load`
//! cost, which does not depend on the request: the order keeps the slots sorted by it
//! too.
//!
//! # When the dense pass decides instead
//! When the escape could fire (the projected pick's `least_load` cost more than the
//! margin above the least), and whenever the fleet is not in this shape: telemetry not
//! all fresh (the caller's check), coefficients not current, no bound from a match (a
//! fleet made from figures: every slot could hold the whole prompt), more than
//! `MAX_SPECIAL` special slots, fewer than [`MIN_LANES`] lanes (no order is built), or a
//! walk that passes `walk_budget` positions without the bound stopping it (many slots
//! within the band's reach: the work done is lost, at most that many slots' costs).
//!
//! # Cost
//! Per publication: the sort, `O(n log n)`, and `O(n)` lanes. Per decision: the special
//! slots, then eight slots per step of the walk; on the benches' 512-worker fleet the
//! walk stops after three steps (24 slots), and about four costs are kept as candidates.

use crate::coef::CoefKey;
use crate::cost::Params;
use crate::fleet::Fleet;
use kvroute_index::index::OverlapParts;
use wide::f32x8;

use crate::lane::{Lane, Vector};
use crate::select::{TieRule, band_limit, finite, hmin, pick_in_list};

/// Fleets below this many lanes are decided by the dense pass (no order is built).
pub(crate) const MIN_LANES: usize = 64;

/// Special slots beyond which a decision runs the dense pass.
const MAX_SPECIAL: usize = 64;

/// Words of a bitset over every slot (4,096 slots, the router's maximum): larger fleets are
/// decided by the dense pass.
const WORDS: usize = 64;

/// The per-publication order of the occupied slots; see the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Order {
    /// The coefficients it was built from (`None`: not built or out of date).
    pub key: Option<CoefKey>,
    /// Occupied slots with finite, non-negative coefficients, by `κ` (then slot).
    slots: Vec<u32>,
    /// The order eight positions per chunk (the walk's step), each with what the walk's
    /// bound needs at the chunk's first position; the last chunk padded.
    chunks: Vec<Chunk>,
    /// Occupied slots left out of `slots`: costed one by one by every decision.
    loose: Vec<u32>,
    /// The slots of `slots` with a finite `least_load` cost, by that cost (then slot).
    least: Vec<u32>,
}

/// Eight consecutive positions of the [`Order`] (positions `8j..8j + 8` of chunk `j`).
#[derive(Clone, Debug)]
struct Chunk {
    /// Per coefficient (`cap`, `q1`, `room`, `spp`, `a`, `b`, `start`, `barrier`; module
    /// `coef`), the values of the eight positions; padding positions have `start` +∞ (a
    /// cost of +∞, never eligible) and zeros elsewhere.
    cols: [[f32; 8]; 8],
    /// The positions' slots (padding: slot 0, whose lanes the walk masks out): what the
    /// walk gathers the overlaps by.
    ids: [u32; 8],
    /// `κ` of the chunk's first position and the suffix minima of `cap`, `spp`, `a` and
    /// `b` from it to the order's end: the walk's lower bound for every position from
    /// here on (module docs).
    head: Head,
}

/// See [`Chunk::head`].
#[derive(Clone, Copy, Debug)]
struct Head {
    kappa: f32,
    cap: f32,
    spp: f32,
    a: f32,
    b: f32,
}

impl Order {
    /// Builds the order from `f`'s prepared coefficients (valid under `key`), treating the
    /// slots that hold reservations now as loose (their coefficients are not the
    /// publication's). `O(n log n)`; allocates only to grow.
    pub(crate) fn build(&mut self, f: &Fleet, key: CoefKey) {
        let k = &f.coef;
        self.slots.clear();
        self.loose.clear();
        self.least.clear();
        let mut reserved = [0u64; WORDS];
        let reserved = if f.len <= WORDS * 64 {
            for slot in f.reserved_slots() {
                reserved[slot / 64] |= 1 << (slot % 64);
            }
            &reserved[..]
        } else {
            // Larger than the router ever builds: no order (every decision is dense).
            self.key = None;
            return;
        };
        let ok = |v: f32| v.is_finite() && v >= 0.0;
        for i in 0..f.len {
            if f.occupied[i] <= 0.0 {
                continue;
            }
            let kappa = k.start[i] + k.barrier[i];
            let regular = ok(k.spp[i])
                && ok(k.a[i])
                && ok(f.dbase[i])
                && ok(k.cap[i])
                && ok(k.q1[i])
                && ok(k.start[i])
                && ok(k.barrier[i])
                && ok(kappa);
            if regular && reserved[i / 64] >> (i % 64) & 1 == 0 {
                self.slots.push(i as u32);
                if k.least[i].is_finite() {
                    self.least.push(i as u32);
                }
            } else {
                self.loose.push(i as u32);
            }
        }
        let kap = |i: u32| k.start[i as usize] + k.barrier[i as usize];
        self.slots
            .sort_unstable_by(|&x, &y| kap(x).total_cmp(&kap(y)).then(x.cmp(&y)));
        self.least.sort_unstable_by(|&x, &y| {
            k.least[x as usize]
                .total_cmp(&k.least[y as usize])
                .then(x.cmp(&y))
        });
        self.chunks.clear();
        for chunk in self.slots.chunks(8) {
            let mut ids = [0u32; 8];
            ids[..chunk.len()].copy_from_slice(chunk);
            let mut cols = [[0.0f32; 8]; 8];
            cols[START] = [f32::INFINITY; 8];
            for (j, &i) in chunk.iter().enumerate() {
                for (c, v) in Packed::of(f, i as usize).0.into_iter().enumerate() {
                    cols[c][j] = v;
                }
            }
            let head = Head {
                kappa: kap(chunk[0]),
                cap: f32::INFINITY,
                spp: f32::INFINITY,
                a: f32::INFINITY,
                b: f32::INFINITY,
            };
            self.chunks.push(Chunk { cols, ids, head });
        }
        // The suffix minima, from the order's end back to each chunk's first position.
        let mut least = [f32::INFINITY; 4];
        for j in (0..self.slots.len()).rev() {
            let i = self.slots[j] as usize;
            for (l, v) in least
                .iter_mut()
                .zip([k.cap[i], k.spp[i], k.a[i], f.dbase[i]])
            {
                *l = if v < *l { v } else { *l };
            }
            if j % 8 == 0 {
                let h = &mut self.chunks[j / 8].head;
                [h.cap, h.spp, h.a, h.b] = least;
            }
        }
        self.key = Some(key);
    }
}

/// What the sparse decision found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Outcome {
    /// The projected pick and its cost; the escape does not fire.
    Pick(usize, f32),
    /// No slot is eligible for one of the two costs (the dense pass's `none`).
    NoneEligible,
    /// Not decided here: run the dense pass.
    Dense,
}

/// One slot's coefficients in one line: `cap`, `q1`, `room` (a mask), `spp`, `a`, `b`,
/// `start`, `barrier` (module `coef`).
#[derive(Clone, Copy, Debug)]
struct Packed([f32; 8]);

/// The index of `start` in a [`Packed`] line and in [`Order`]'s columns.
const START: usize = 6;

impl Packed {
    /// Slot `i`'s coefficients as `f` holds them now.
    #[inline(always)]
    fn of(f: &Fleet, i: usize) -> Self {
        let k = &f.coef;
        Packed([
            k.cap[i],
            k.q1[i],
            k.room[i],
            k.spp[i],
            k.a[i],
            f.dbase[i],
            k.start[i],
            k.barrier[i],
        ])
    }
}

/// The projected cost of eight slots at their `overlap` blocks from their coefficients
/// `k` (as [`Packed`] lines, one vector per coefficient): the operations of the dense
/// pass's `projected_from_coefficients`, in the same order, so the same bits per lane as
/// that pass and as the scalar reference.
#[inline(always)]
fn cost8<V: Vector>(p: &Params, k: &[V; 8], overlap: V) -> V {
    let [cap, q1, room, spp, a, b, start, barrier] = *k;
    let one = V::splat(1.0);
    let lifted = cap.min_(V::splat(p.mean_load + 1.0)).max_(q1);
    let n = room.select(lifted, cap);
    let uncached = (V::splat(p.prompt) - overlap * V::splat(p.block_size)).max_(V::splat(0.0));
    let prefill = n * (uncached * spp);
    let decode = V::splat(p.output) * (b + (n + n - one) * a);
    start + prefill + decode + barrier
}

/// The eight columns of a block as vectors, loaded one by one (not through
/// `core::array::from_fn`, whose closure would not be inlined into an AVX2 kernel: a
/// function compiled without AVX cannot inline one compiled with it).
#[inline(always)]
fn columns<V: Vector>(block: &[[f32; 8]; 8]) -> [V; 8] {
    [
        V::load(block[0]),
        V::load(block[1]),
        V::load(block[2]),
        V::load(block[3]),
        V::load(block[4]),
        V::load(block[5]),
        V::load(block[6]),
        V::load(block[7]),
    ]
}

/// Reusable scratch of the sparse decision: the costed slots with their costs and
/// overlaps, the special slots costed, the band (slots with their overlaps, which its tie
/// keys read), and a bitset of the slots holding reservations (sized only when some do;
/// cleared at the start of each decision).
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    seen: Vec<(u32, f32, f32)>,
    special: Vec<u32>,
    band: Vec<(u32, f32)>,
    held: Vec<u64>,
}

/// What the walk needs of a vector beyond [`Vector`]: eight slots' overlaps read from the
/// match buffer.
pub(crate) trait Gather: Vector {
    /// What [`overlaps`](Self::overlaps) reads, prepared once per decision from the match
    /// buffer's layout.
    type Source<'a>: Copy;

    /// The source of `raw`.
    fn source<'a>(raw: &OverlapParts<'a>) -> Self::Source<'a>;

    /// Lane `j < lanes`: `raw.get(ids[j])` (`raw` the parts `src` was made from)
    /// converted as `u32 as f32` does (round to nearest, ties to even), 0 where `ids[j]`
    /// is past `raw`'s slots; the lanes from `lanes` on: 0. `lanes` is at most 8 and every
    /// id below 2^31 (the order's slots are below 4,096).
    fn overlaps(src: &Self::Source<'_>, ids: &[u32; 8], lanes: usize) -> Self;

    /// The least of the eight lanes, none of them NaN (the walk's costs are finite or
    /// +∞). Any order of comparisons gives the same value then, up to the sign of a zero,
    /// which no use of it tells apart (comparisons, and `band_limit`, where `±0 + 0`
    /// is `+0`).
    fn least(self) -> f32;
}

impl Gather for f32x8 {
    type Source<'a> = OverlapParts<'a>;

    #[inline(always)]
    fn source<'a>(raw: &OverlapParts<'a>) -> OverlapParts<'a> {
        *raw
    }

    #[inline(always)]
    fn overlaps(raw: &OverlapParts<'_>, ids: &[u32; 8], lanes: usize) -> Self {
        let mut ov = [0f32; 8];
        for (x, &i) in ov.iter_mut().zip(ids).take(lanes) {
            *x = raw.get(i as usize) as f32;
        }
        f32x8::load(ov)
    }

    #[inline(always)]
    fn least(self) -> f32 {
        hmin(self)
    }
}

/// One slot's projected cost from the coefficients (lane 0 of [`cost8`] over `V`).
#[inline(always)]
fn projected<V: Vector>(p: &Params, f: &Fleet, i: usize) -> f32 {
    projected_at::<V>(p, f, i, f.overlap_at(i))
}

/// [`projected`] with slot `i`'s overlap given (`f.overlap_at(i)`, read by the caller).
#[inline(always)]
fn projected_at<V: Vector>(p: &Params, f: &Fleet, i: usize, overlap: f32) -> f32 {
    let [cap, q1, room, spp, a, b, start, barrier] = Packed::of(f, i).0;
    let k = [
        V::splat(cap),
        V::splat(q1),
        V::splat(room),
        V::splat(spp),
        V::splat(a),
        V::splat(b),
        V::splat(start),
        V::splat(barrier),
    ];
    cost8(p, &k, V::splat(overlap)).to_array()[0]
}

/// Whether `x` is finite and at least 0 (`x.is_finite() && x >= 0.0`; NaN is not), from
/// its bits: +0 up to the largest finite value are the bit patterns below +∞'s, and −0 is
/// the one other. Two integer comparisons, where the float form compiles to a longer
/// classification of the bits.
#[inline(always)]
fn finite_non_negative(x: f32) -> bool {
    let bits = x.to_bits();
    bits < f32::INFINITY.to_bits() || bits == (-0.0f32).to_bits()
}

#[inline(always)]
fn has(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 != 0
}

/// Slot `i`'s projected cost from the prepared coefficients, as the dense pass computes it
/// (for a caller that needs one slot's cost after a sparse decision).
pub(crate) fn cost_of(p: &Params, f: &Fleet, i: usize) -> f32 {
    projected::<f32x8>(p, f, i)
}

/// The sparse `projected_time` (enforce) decision of `f` under `p`, `rule` and the escape's
/// absolute `margin` (module docs). The caller has checked that every occupied slot is
/// fresh; everything else this checks itself, answering [`Outcome::Dense`] when the fleet
/// is not in the shape it needs.
pub(crate) fn enforce(
    f: &Fleet,
    p: &Params,
    rule: &TieRule,
    margin: f32,
    s: &mut Scratch,
) -> Outcome {
    enforce_on::<f32x8>(f, p, rule, margin, s)
}

/// [`enforce`] over the vector `V`: the portable `f32x8` there, the AVX2 engine's own
/// vector inside its kernel (module `avx2`); the same IEEE operations in the same order
/// either way, so the same outcome bit for bit.
#[inline(always)]
pub(crate) fn enforce_on<V: Gather>(
    f: &Fleet,
    p: &Params,
    rule: &TieRule,
    margin: f32,
    s: &mut Scratch,
) -> Outcome {
    let o = &f.order;
    let shaped = CoefKey::is_of(o.key, p)
        && f.coef.projected_for(p)
        && f.len <= WORDS * 64
        && finite_non_negative(rule.band)
        && finite_non_negative(p.mean_load)
        && finite_non_negative(p.output)
        && p.prompt.is_finite()
        && p.block_size.is_finite();
    if !shaped {
        return Outcome::Dense;
    }
    let (tail, bound) = f.tail();
    // Without a bound from the match (a fleet made from figures) every slot could hold
    // the whole prompt: the walk's bound could not cut anything short.
    if bound == f32::INFINITY
        || f.reserved_slots().count() + tail.len() + o.loose.len() > MAX_SPECIAL
    {
        return Outcome::Dense;
    }
    s.seen.clear();
    s.special.clear();
    s.band.clear();
    s.held.clear();
    if f.reserved_slots().next().is_some() {
        s.held.resize(f.lane_len().div_ceil(64), 0);
    }
    decide::<V>(f, p, rule, margin, tail, bound, s)
}

/// Positions of the order a decision walks at most before it leaves the fleet to the dense
/// pass (the bound did not cut the walk short: a fleet where many slots are close).
fn walk_budget(n: usize) -> usize {
    64 + n / 16
}

/// [`enforce`] once the fleet's shape is checked and the scratch sized.
#[inline(always)]
fn decide<V: Gather>(
    f: &Fleet,
    p: &Params,
    rule: &TieRule,
    margin: f32,
    tail: &[u32],
    bound: f32,
    s: &mut Scratch,
) -> Outcome {
    let o = &f.order;
    let mut m = f32::INFINITY;
    // The special slots, each costed from its own lanes once (three plain loops: a
    // chained iterator is not inlined into the kernel).
    let special = &mut s.special;
    let mut add = |i: usize| {
        if i < f.len && f.occupied[i] > 0.0 && !special.iter().any(|&x| x as usize == i) {
            special.push(i as u32);
        }
    };
    for i in f.reserved_slots() {
        add(i);
    }
    for &i in tail {
        add(i as usize);
    }
    for &i in &o.loose {
        add(i as usize);
    }
    // Each special slot costed from its own coefficients broadcast to every lane (lane 0
    // read back): no vector is assembled from scalar stores, which a load could not take
    // from the store buffer at once.
    for &i in &s.special {
        let o = f.overlap_at(i as usize);
        let c = projected_at::<V>(p, f, i as usize, o);
        if c.is_finite() {
            s.seen.push((i, c, o));
            m = if c < m { c } else { m };
        }
    }
    let any_held = !s.held.is_empty();
    for i in f.reserved_slots() {
        s.held[i / 64] |= 1 << (i % 64);
    }
    // The walk: a bound per eight positions, then the positions' exact costs.
    let u_c = (p.prompt - bound * p.block_size).max_(0.0);
    let lifted = p.mean_load + 1.0;
    let n = o.slots.len();
    let budget = walk_budget(n);
    // The match buffer's layout (`OverlapParts`) while the fleet's overlap lane is not
    // converted, prepared once for the walk's gathers.
    let raw = f.deferred_overlaps();
    let src = raw.as_ref().map(V::source);
    for (c, chunk) in o.chunks.iter().enumerate() {
        let k = c * 8;
        let limit = band_limit(m, rule.band);
        let h = chunk.head;
        let nu = h.cap.min_(lifted);
        let lb = h.kappa + nu * (u_c * h.spp) + p.output * (h.b + (nu + nu - 1.0) * h.a);
        if lb * (1.0 - 1.0 / 16_384.0) - 1e-30 > limit {
            break;
        }
        if k >= budget {
            return Outcome::Dense;
        }
        let lanes = (n - k).min(8);
        let cols = columns(&chunk.cols);
        let slots = &chunk.ids;
        let ov = match &src {
            Some(src) => V::overlaps(src, slots, lanes),
            None => {
                let mut ov = [0f32; 8];
                for (x, &i) in ov.iter_mut().zip(slots).take(lanes) {
                    *x = f.overlap_at(i as usize);
                }
                V::load(ov)
            }
        };
        let cv = cost8(p, &cols, ov);
        // Lanes past the order's end are padding (cost +∞, never finite).
        let fin = finite(cv);
        let mut ok = fin.bits();
        // The kept lanes' costs, +∞ elsewhere: their least, then the lanes within the
        // band's limit (usually a few). A tail slot costed again gives the same cost
        // (harmless in the band).
        let least = if any_held {
            // A slot holding a reservation has other coefficients now than the order's
            // (it was costed above).
            for (j, &i) in slots.iter().enumerate().take(lanes) {
                if has(&s.held, i as usize) {
                    ok &= !(1 << j);
                }
            }
            let costs = cv.to_array();
            let mut least = [f32::INFINITY; 8];
            for (j, (l, &c)) in least.iter_mut().zip(&costs).enumerate() {
                if ok >> j & 1 != 0 {
                    *l = c;
                }
            }
            V::load(least)
        } else {
            fin.select(cv, V::splat(f32::INFINITY))
        };
        let lm = least.least();
        m = if lm < m { lm } else { m };
        let costs = cv.to_array();
        let limit = band_limit(m, rule.band);
        let mut within = least.le_mask(V::splat(limit)).bits() & ok;
        let ovs = ov.to_array();
        while within != 0 {
            let j = within.trailing_zeros() as usize;
            s.seen.push((slots[j], costs[j], ovs[j]));
            within &= within - 1;
        }
    }
    if s.seen.is_empty() {
        return Outcome::NoneEligible;
    }
    // The band, as a list of slots (with their overlaps) in slot order, then the tie keys.
    let limit = band_limit(m, rule.band);
    // Kept in slot order as it is built (an insertion sort: the band is a few slots); a
    // slot costed twice (a tail slot the walk reached) has the same overlap both times
    // and goes in once.
    for &(i, c, o) in &s.seen {
        if c <= limit {
            let band = &mut s.band;
            band.push((i, o));
            let mut j = band.len() - 1;
            while j > 0 && band[j - 1].0 > i {
                band.swap(j - 1, j);
                j -= 1;
            }
            if j > 0 && band[j - 1].0 == i {
                band.remove(j);
            }
        }
    }
    let Some(pick) = pick_in_list(f, rule, &mut s.band) else {
        return Outcome::NoneEligible;
    };
    // The escape: the least `least_load` cost of the eligible slots (those holding
    // reservations and the loose ones from their own lanes, the rest from the order).
    let least = &f.coef.least;
    let mut ml = f32::INFINITY;
    let mut lower = |i: usize| {
        if i < f.len && f.occupied[i] > 0.0 && least[i].is_finite() && least[i] < ml {
            ml = least[i];
        }
    };
    for i in f.reserved_slots() {
        lower(i);
    }
    for &i in &o.loose {
        lower(i as usize);
    }
    if let Some(&i) = o
        .least
        .iter()
        .find(|&&i| !any_held || !has(&s.held, i as usize))
    {
        let c = least[i as usize];
        ml = if c < ml { c } else { ml };
    }
    if ml == f32::INFINITY {
        return Outcome::NoneEligible;
    }
    if least[pick] - ml <= margin {
        let c = s
            .seen
            .iter()
            .find(|&&(i, _, _)| i as usize == pick)
            .map_or(f32::NAN, |&(_, c, _)| c);
        Outcome::Pick(pick, c)
    } else {
        Outcome::Dense
    }
}

#[cfg(test)]
mod tests {
    use kvroute_core::SplitMix64;
    use kvroute_load::Validity;

    use super::*;
    use crate::fleet::SlotFigures;
    use crate::{ScoreConfig, ScoreRequest, Scorer, SimdPath, TieInput};

    /// The bit test is the float test `is_finite() && x >= 0.0` on every class of value:
    /// ±0, the least subnormal, 1, the largest finite, ±∞, NaN of either sign and a
    /// negative value, and on random bit patterns.
    #[test]
    fn finite_non_negative_is_the_float_test() {
        let float = |x: f32| x.is_finite() && x >= 0.0;
        let mut cases = vec![
            0.0f32,
            -0.0,
            f32::from_bits(1),
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            -1.0,
            -f32::from_bits(1),
        ];
        let mut r = SplitMix64::new(9);
        cases.extend((0..10_000).map(|_| f32::from_bits(r.next_u64() as u32)));
        for x in cases {
            assert_eq!(
                finite_non_negative(x),
                float(x),
                "{x:?} ({:#x})",
                x.to_bits()
            );
        }
        // By hand: +0 and −0 in, the negatives and non-finite values out.
        assert!(finite_non_negative(-0.0) && finite_non_negative(f32::MAX));
        assert!(!finite_non_negative(f32::INFINITY) && !finite_non_negative(-1.0));
    }

    /// A fresh fleet of `n` slots (every 13th vacant), loads drawn from few values so that
    /// exact ties are common; `deep` slots hold `deep_blocks`, the rest `shared` blocks.
    fn fleet(r: &mut SplitMix64, n: usize, shared: u32, deep: &[u32], deep_blocks: u32) -> Fleet {
        let slots: Vec<Option<SlotFigures>> = (0..n)
            .map(|i| {
                if i % 13 == 5 {
                    return None;
                }
                let running = (r.next_u64() % 8) as f32;
                let waiting = (r.next_u64() % 3) as f32;
                let overlap = if deep.contains(&(i as u32)) {
                    deep_blocks
                } else if r.next_u64() % 4 == 0 {
                    0
                } else {
                    shared
                };
                // Some slots whose coefficients the bound cannot use (a negative queue, a
                // negative step base): the decision costs them one by one.
                let queued = if i % 97 == 3 {
                    -500.0
                } else {
                    waiting * 1_000.0
                };
                let step = if i % 89 == 4 {
                    -0.001
                } else {
                    [0.0, 0.007][(r.next_u64() % 2) as usize]
                };
                Some(SlotFigures {
                    validity: Validity::Fresh,
                    overlap_blocks: overlap as f32,
                    requests: running + waiting,
                    queued_tokens: queued,
                    decode_tokens: running * 2_000.0,
                    kv_usage: (r.next_u64() % 5) as f32 / 10.0,
                    utilization: 0.0,
                    occupancy: Some((running + waiting) / 16.0),
                    prefill_tps: [8_000.0, 8_000.0, 6_000.0][(r.next_u64() % 3) as usize],
                    decode_tps: 1_000.0,
                    decode_step_base_s: step,
                    below_report: false,
                })
            })
            .collect();
        let mut f = Fleet::from_slots(&slots);
        f.set_tail_for_test(deep, shared as f32);
        f
    }

    /// On fleets of 64 to 1,024 slots where a few hold a deep prefix, the sparse decision
    /// chooses as the scalar reference does (slot, reason and cost) whatever the draw,
    /// cursor and band, and decides most requests itself while costing a small part of
    /// the fleet.
    #[test]
    fn sparse_decisions_equal_the_reference_and_cost_few_slots() {
        let mut r = SplitMix64::new(11);
        let mut scorer = Scorer::new();
        let (mut decided, mut total, mut costed, mut slots) = (0u32, 0u32, 0usize, 0usize);
        for &n in &[64usize, 65, 200, 512, 1_000, 1_024] {
            for round in 0..6 {
                let deep: Vec<u32> = (0..(round % 4) * 4)
                    .map(|_| (r.next_u64() % n as u64) as u32)
                    .collect();
                let mut deep = deep;
                deep.sort_unstable();
                deep.dedup();
                let mut f = fleet(&mut r, n, 32, &deep, 128);
                let mut cfg = ScoreConfig::default();
                if round % 3 == 2 {
                    cfg.near_tie_band = 0.05;
                }
                f.prepare_costs(&cfg);
                assert!(f.order.key.is_some(), "{n} slots: the order is built");
                for q in 0..20u32 {
                    let req = ScoreRequest {
                        prompt_tokens: 512 + (r.next_u64() % 3_000) as u32,
                        block_size: 16,
                        expected_output_tokens: (r.next_u64() % 400) as u32,
                    };
                    let tie = TieInput {
                        cursor: q,
                        random: Some(r.next_u64()),
                    };
                    let want = scorer.score_reference(&f, req, &cfg, tie);
                    for path in [SimdPath::Portable, SimdPath::Avx2] {
                        let got = scorer.score_with(path, &f, req, &cfg, tie);
                        assert!(
                            got.same_as(&want),
                            "{n} slots, {path:?}: {got:?} vs {want:?}"
                        );
                    }
                    // The sparse decision itself, and how much of the fleet it costed.
                    let (p, rule) = crate::decide::inputs(&f, req, &cfg, tie);
                    let mut s = Scratch::default();
                    total += 1;
                    let portable = enforce(&f, &p, &rule, cfg.escape_margin_s, &mut s);
                    // The AVX2 copy (the portable one where the CPU lacks AVX2): the same
                    // outcome, the cost's bits included.
                    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
                    {
                        let mut s2 = Scratch::default();
                        let avx2 = crate::avx2::sparse_enforce(
                            &f,
                            &p,
                            &rule,
                            cfg.escape_margin_s,
                            &mut s2,
                        );
                        assert_eq!(format!("{avx2:?}"), format!("{portable:?}"), "{n} slots");
                        assert_eq!(s2.seen, s.seen, "{n} slots: the same slots costed");
                    }
                    if let Outcome::Pick(i, _) = portable {
                        assert_eq!(Some(i), want.slot.map(|s| s.index()), "{n} slots");
                        decided += 1;
                        costed += s.seen.len();
                        slots += f.len();
                    }
                }
            }
        }
        assert!(
            decided * 10 >= total * 9,
            "sparse decided {decided} of {total}"
        );
        assert!(
            costed * 4 < slots,
            "costed {costed} slot costs over {slots} slots of the decided fleets"
        );
    }
}
