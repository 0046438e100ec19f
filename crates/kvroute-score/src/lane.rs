//! The lane abstraction the cost formulas are written against: `f32` (the scalar
//! reference), `wide::f32x8` (the portable SIMD pass) and, on x86, the AVX2 pass's own
//! 256-bit vector (module `avx2`). [`Vector`] adds what the SIMD passes need beyond the
//! formulas (masks, selects, loads), so the passes are written once over it.
//!
//! Each formula is written once, generic over [`Lane`], so both paths perform the same IEEE
//! operations in the same order: `+ − × ÷` are exactly rounded per lane in both, no fused
//! multiply-add is used, and `max_`/`min_`/`pos_or` are defined by comparison and select
//! with the same NaN rule in both (a NaN comparison is false, so the second operand wins).
//! On x86 the SIMD `max_`/`min_` are the `maxps`/`minps` instructions, which are defined
//! exactly so (`a > b ? a : b`, `a < b ? a : b`: the second operand when either is NaN or
//! both are zero); elsewhere a comparison and a select.
//! What the SIMD path implements on its own (chunking, masks, reductions, padding, tie
//! keys) is checked against the scalar reference in `tests/prop_simd_vs_scalar.rs`.

use core::ops::{Add, BitAnd, BitAndAssign, Div, Mul, Sub};

use wide::{CmpEq, CmpGe, CmpGt, CmpLe, CmpLt, f32x8};

/// Arithmetic every cost formula needs, per lane.
pub(crate) trait Lane:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    /// Every lane `v`.
    fn splat(v: f32) -> Self;
    /// `if self > o { self } else { o }` per lane.
    fn max_(self, o: Self) -> Self;
    /// `if self < o { self } else { o }` per lane.
    fn min_(self, o: Self) -> Self;
    /// `if self > 0 { self } else { fallback }` per lane.
    fn pos_or(self, fallback: Self) -> Self;
    /// `if self < t { below } else { other }` per lane (a NaN `self` gives `other`).
    fn below_or(self, t: f32, below: Self, other: Self) -> Self;
}

/// Eight lanes with masks: what the SIMD passes (`select`) need beyond [`Lane`]. A mask is
/// a vector whose lanes are all ones (true) or all zeros (false); comparisons are ordered
/// (a NaN operand gives false), as `f32`'s operators.
pub(crate) trait Vector: Lane + BitAnd<Output = Self> + BitAndAssign {
    /// The eight values `a`, lane `j` from `a[j]`.
    fn load(a: [f32; 8]) -> Self;
    /// The eight lanes.
    fn to_array(self) -> [f32; 8];
    /// `self > o` per lane, as a mask.
    fn gt_mask(self, o: Self) -> Self;
    /// `self >= o` per lane, as a mask.
    fn ge_mask(self, o: Self) -> Self;
    /// `self <= o` per lane, as a mask.
    fn le_mask(self, o: Self) -> Self;
    /// `self == o` per lane, as a mask.
    fn eq_mask(self, o: Self) -> Self;
    /// Per lane of the mask `self`: `t` where set, else `f`.
    fn select(self, t: Self, f: Self) -> Self;
    /// The mask `self` as bits, bit `j` set when lane `j` is.
    fn bits(self) -> u8;
}

impl Lane for f32 {
    #[inline]
    fn splat(v: f32) -> Self {
        v
    }
    #[inline]
    fn max_(self, o: Self) -> Self {
        if self > o { self } else { o }
    }
    #[inline]
    fn min_(self, o: Self) -> Self {
        if self < o { self } else { o }
    }
    #[inline]
    fn pos_or(self, fallback: Self) -> Self {
        if self > 0.0 { self } else { fallback }
    }
    #[inline]
    fn below_or(self, t: f32, below: Self, other: Self) -> Self {
        if self < t { below } else { other }
    }
}

/// Whether `wide`'s `fast_max`/`fast_min` are the `maxps`/`minps` instructions here (x86 with
/// SSE), whose results are the comparison and select of the module docs; elsewhere their
/// NaN rule is not documented, so the comparison and select are written out.
const X86_MINMAX: bool = cfg!(all(
    any(target_arch = "x86", target_arch = "x86_64"),
    target_feature = "sse"
));

impl Lane for f32x8 {
    #[inline]
    fn splat(v: f32) -> Self {
        f32x8::splat(v)
    }
    #[inline]
    fn max_(self, o: Self) -> Self {
        if X86_MINMAX {
            // `maxps self, o`: `self > o ? self : o` per lane (module docs).
            self.fast_max(o)
        } else {
            self.cmp_gt(o).blend(self, o)
        }
    }
    #[inline]
    fn min_(self, o: Self) -> Self {
        if X86_MINMAX {
            // `minps self, o`: `self < o ? self : o` per lane (module docs).
            self.fast_min(o)
        } else {
            self.cmp_lt(o).blend(self, o)
        }
    }
    #[inline]
    fn pos_or(self, fallback: Self) -> Self {
        self.cmp_gt(f32x8::ZERO).blend(self, fallback)
    }
    #[inline]
    fn below_or(self, t: f32, below: Self, other: Self) -> Self {
        self.cmp_lt(f32x8::splat(t)).blend(below, other)
    }
}

impl Vector for f32x8 {
    #[inline(always)]
    fn load(a: [f32; 8]) -> Self {
        f32x8::new(a)
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 8] {
        f32x8::to_array(self)
    }
    #[inline(always)]
    fn gt_mask(self, o: Self) -> Self {
        self.cmp_gt(o)
    }
    #[inline(always)]
    fn ge_mask(self, o: Self) -> Self {
        self.cmp_ge(o)
    }
    #[inline(always)]
    fn le_mask(self, o: Self) -> Self {
        self.cmp_le(o)
    }
    #[inline(always)]
    fn eq_mask(self, o: Self) -> Self {
        self.cmp_eq(o)
    }
    #[inline(always)]
    fn select(self, t: Self, f: Self) -> Self {
        self.blend(t, f)
    }
    #[inline(always)]
    fn bits(self) -> u8 {
        // `move_mask` sets bits 0..8 only.
        self.move_mask() as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_rule_is_the_same_in_both() {
        let a = [f32::NAN, 1.0, -0.0, 0.0, f32::INFINITY, 2.0, f32::NAN, -1.0];
        let b = [
            0.5,
            f32::NAN,
            0.0,
            -0.0,
            1.0,
            f32::NEG_INFINITY,
            f32::NAN,
            -1.0,
        ];
        let va = f32x8::new(a);
        let vb = f32x8::new(b);
        let mx = va.max_(vb).to_array();
        let mn = va.min_(vb).to_array();
        let po = va.pos_or(vb).to_array();
        for i in 0..8 {
            assert_eq!(mx[i].to_bits(), a[i].max_(b[i]).to_bits(), "max lane {i}");
            assert_eq!(mn[i].to_bits(), a[i].min_(b[i]).to_bits(), "min lane {i}");
            assert_eq!(
                po[i].to_bits(),
                a[i].pos_or(b[i]).to_bits(),
                "pos_or lane {i}"
            );
        }
    }
}
