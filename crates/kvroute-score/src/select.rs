//! The two implementations of the pass: cost lanes and masked argmin with tie keys.
//!
//! [`Simd`] runs over `wide::f32x8` vectors (the lanes are padded, so there is no scalar
//! tail); [`Scalar`] is the reference, one slot at a time. Both implement the same rule:
//!
//! 1. a slot is *eligible* when it is occupied, passes the mask (overlap at least
//!    `min_overlap`, when given) and its cost is finite (NaN and ±inf fail);
//! 2. `m` = the smallest eligible cost; the *band* is the eligible slots with
//!    `cost <= m + band·|m|`;
//! 3. with a random draw `r`: the `(r mod |band|)`-th band slot in slot order;
//! 4. otherwise: keep band slots whose requests are not above the band's least (when
//!    `load`), then whose overlap is not below the rest's deepest (when `overlap`); NaN
//!    keys never exclude; then the first kept slot at or after `cursor mod len`, wrapping.
//!
//! Every step is a comparison of exact values, so the two agree bit for bit.

#![allow(clippy::needless_range_loop)] // parallel lanes are indexed together

use wide::{CmpGe, CmpGt, CmpLe, CmpLt, f32x8};

use crate::cost::{CostKind, LaneIn, Params, cost};
use crate::fleet::Fleet;

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
    /// Writes the cost of every lane (padded length) into `out`.
    fn costs(kind: CostKind, p: &Params, fleet: &Fleet, out: &mut Vec<f32>);
    /// The chosen slot under `mask` and `rule`, or `None` when no slot is eligible.
    fn select(fleet: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize>;
}

/// The scalar reference.
pub(crate) struct Scalar;

/// The SIMD pass (`wide::f32x8`).
pub(crate) struct Simd;

fn band_limit(m: f32, band: f32) -> f32 {
    m + band * m.abs()
}

fn pick_rotating(len: usize, cursor: u32, mut kept: impl FnMut(usize) -> bool) -> Option<usize> {
    let start = cursor as usize % len.max(1);
    (start..len).chain(0..start).find(|&i| kept(i))
}

impl Engine for Scalar {
    fn costs(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
        out.clear();
        out.extend((0..f.lane_len()).map(|i| {
            let x = LaneIn {
                overlap: f.overlap[i],
                requests: f.requests[i],
                queued: f.queued[i],
                decode: f.decode[i],
                kv: f.kv[i],
                util: f.util[i],
                occ: f.occ[i],
                ptps: f.ptps[i],
                dtps: f.dtps[i],
            };
            cost::<f32>(kind, p, &x)
        }));
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
            let n = (0..f.len).filter(|&i| in_band(i)).count() as u64;
            let k = (r % n) as usize;
            return (0..f.len).filter(|&i| in_band(i)).nth(k);
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

#[inline(always)]
fn v(lane: &[f32], c: usize) -> f32x8 {
    let mut a = [0.0f32; 8];
    a.copy_from_slice(&lane[c * 8..c * 8 + 8]);
    f32x8::new(a)
}

fn hmin(x: f32x8) -> f32 {
    x.to_array()
        .into_iter()
        .fold(f32::INFINITY, |m, e| if e < m { e } else { m })
}

fn hmax(x: f32x8) -> f32 {
    x.to_array()
        .into_iter()
        .fold(f32::NEG_INFINITY, |m, e| if e > m { e } else { m })
}

impl Simd {
    /// Eligibility mask of chunk `c`.
    #[inline(always)]
    fn eligible(f: &Fleet, costs: &[f32], mask: Mask, c: usize) -> f32x8 {
        let cv = v(costs, c);
        let mut e = v(&f.occupied, c).cmp_gt(f32x8::ZERO) & cv.is_finite();
        if let Some(t) = mask.min_overlap {
            e &= v(&f.overlap, c).cmp_ge(f32x8::splat(t));
        }
        e
    }
}

impl Engine for Simd {
    fn costs(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
        let n = f.lane_len();
        out.clear();
        out.resize(n, 0.0);
        for c in 0..n / 8 {
            let x = LaneIn {
                overlap: v(&f.overlap, c),
                requests: v(&f.requests, c),
                queued: v(&f.queued, c),
                decode: v(&f.decode, c),
                kv: v(&f.kv, c),
                util: v(&f.util, c),
                occ: v(&f.occ, c),
                ptps: v(&f.ptps, c),
                dtps: v(&f.dtps, c),
            };
            out[c * 8..c * 8 + 8].copy_from_slice(&cost::<f32x8>(kind, p, &x).to_array());
        }
    }

    fn select(f: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize> {
        let chunks = f.lane_len() / 8;
        let inf = f32x8::splat(f32::INFINITY);
        let mut acc = inf;
        let mut any = false;
        for c in 0..chunks {
            let e = Self::eligible(f, costs, mask, c);
            any |= e.any();
            let cv = v(costs, c);
            acc = (e & cv.cmp_lt(acc)).blend(cv, acc);
        }
        if !any {
            return None;
        }
        let t = f32x8::splat(band_limit(hmin(acc), rule.band));
        let band = |c: usize| Self::eligible(f, costs, mask, c) & v(costs, c).cmp_le(t);
        if let Some(r) = rule.random {
            let n: u64 = (0..chunks)
                .map(|c| u64::from((band(c).move_mask() as u32).count_ones()))
                .sum();
            let mut k = (r % n) as u32;
            for c in 0..chunks {
                let mut bits = band(c).move_mask() as u32;
                let cnt = bits.count_ones();
                if k < cnt {
                    for _ in 0..k {
                        bits &= bits - 1;
                    }
                    return Some(c * 8 + bits.trailing_zeros() as usize);
                }
                k -= cnt;
            }
            return None;
        }
        let mut min_req = f32::INFINITY;
        if rule.load {
            let mut acc = inf;
            for c in 0..chunks {
                let r = v(&f.requests, c);
                acc = (band(c) & r.cmp_lt(acc)).blend(r, acc);
            }
            min_req = hmin(acc);
        }
        let keep1 = |c: usize| {
            let b = band(c);
            if rule.load {
                let over = v(&f.requests, c).cmp_gt(f32x8::splat(min_req));
                b & !over
            } else {
                b
            }
        };
        let mut max_ovl = f32::NEG_INFINITY;
        if rule.overlap {
            let mut acc = f32x8::splat(f32::NEG_INFINITY);
            for c in 0..chunks {
                let o = v(&f.overlap, c);
                acc = (keep1(c) & o.cmp_gt(acc)).blend(o, acc);
            }
            max_ovl = hmax(acc);
        }
        let keep2 = |c: usize| {
            let k = keep1(c);
            if rule.overlap {
                let under = v(&f.overlap, c).cmp_lt(f32x8::splat(max_ovl));
                k & !under
            } else {
                k
            }
        };
        // First kept slot at or after `start`, else the first kept slot (wrap).
        let start = rule.cursor as usize % f.len.max(1);
        let mut first = None;
        for c in 0..chunks {
            let mut bits = keep2(c).move_mask() as u32;
            if bits == 0 {
                continue;
            }
            if first.is_none() {
                first = Some(c * 8 + bits.trailing_zeros() as usize);
            }
            if c * 8 + 8 <= start {
                continue;
            }
            if c * 8 < start {
                bits &= !((1u32 << (start - c * 8)) - 1);
            }
            if bits != 0 {
                return Some(c * 8 + bits.trailing_zeros() as usize);
            }
        }
        first
    }
}
