//! The AVX2 engine: the vector pass of `select` compiled for AVX2 and chosen at run time
//! (x86 and x86_64 only).
//!
//! `wide::f32x8` picks its implementation when the crate is compiled, so a default build
//! (SSE2 baseline) runs each `f32x8` as two 128-bit halves even on an AVX2 machine. This
//! module instead instantiates the pass (`select::simd_costs`, `simd_select`,
//! `simd_costs2_select_escape`, `simd_occupied_sums`, written once over [`Vector`] and
//! `#[inline(always)]`) with its own
//! 256-bit vector [`F32x8`] (`core::arch` intrinsics) inside functions compiled with
//! `#[target_feature(enable = "avx2,bmi1,popcnt")]`, so LLVM emits AVX2 (and `tzcnt`,
//! `popcnt` for the tie keys' bit scans) for them whatever the build's baseline.
//!
//! No fused multiply-add is used: every lane performs the same IEEE operations as the
//! scalar reference (module `lane`), so this engine agrees with it bit for bit like the
//! portable one. `vmaxps`/`vminps` are defined exactly as `maxps`/`minps` (`a > b ? a : b`,
//! `a < b ? a : b`), comparisons are the ordered, non-signalling predicates (`_CMP_GT_OQ`
//! and friends: false when either operand is NaN, as `f32`'s operators), and `vblendvps`
//! selects by each lane's sign bit, which a mask sets in all of a lane's bits or none.
//!
//! # Safety argument
//! Executing an AVX2 instruction on a CPU without AVX2 is undefined behaviour. Every
//! instruction of this module runs inside one of its `#[target_feature]` kernels, and each
//! kernel is called only from [`Avx2`]'s [`Engine`] methods right after [`available`]
//! returned true (the CPU has AVX2, BMI1 and POPCNT, detected with
//! `is_x86_feature_detected!`); otherwise those methods run the portable pass. [`F32x8`] is
//! private to this module, so no code elsewhere can make or use one: its methods (safe
//! functions wrapping the intrinsics) are reached only through the generic pass as the
//! kernels instantiate it, that is, after the detection.

#[cfg(target_arch = "x86")]
use core::arch::x86 as arch;
#[cfg(target_arch = "x86_64")]
use core::arch::x86_64 as arch;

use arch::{
    __m256, __m256i, _CMP_EQ_OQ, _CMP_GE_OQ, _CMP_GT_OQ, _CMP_LE_OQ, _CMP_LT_OQ, _mm_cvtss_f32,
    _mm_min_ps, _mm_min_ss, _mm_movehdup_ps, _mm_movehl_ps, _mm256_add_ps, _mm256_and_ps,
    _mm256_and_si256, _mm256_blendv_ps, _mm256_castps_si256, _mm256_castps256_ps128,
    _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32, _mm256_cvtepi32_ps, _mm256_div_ps,
    _mm256_extractf128_ps, _mm256_loadu_ps, _mm256_loadu_si256, _mm256_mask_i32gather_epi32,
    _mm256_max_ps, _mm256_min_ps, _mm256_movemask_ps, _mm256_mul_ps, _mm256_set1_epi32,
    _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_sllv_epi32,
    _mm256_srli_epi32, _mm256_storeu_ps, _mm256_sub_epi32, _mm256_sub_ps,
};
use core::ops::{Add, BitAnd, BitAndAssign, Div, Mul, Sub};
use std::sync::OnceLock;

use crate::cost::{CostKind, Params};
use crate::fleet::Fleet;
use crate::lane::{Lane, Vector};
use crate::select::{
    Engine, Escape, Mask, Simd, TieRule, simd_costs, simd_costs2_select_escape, simd_occupied_sums,
    simd_select,
};
use crate::sparse::{Gather, Outcome, Scratch};
use kvroute_index::index::OverlapParts;

/// Whether this CPU runs the AVX2 engine: AVX2, BMI1 and POPCNT detected, once per process.
#[inline]
pub(crate) fn available() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("popcnt")
    })
}

/// The AVX2 engine ([`Engine`]): the vector pass over [`F32x8`] where [`available`], the
/// portable pass ([`Simd`]) otherwise.
pub(crate) struct Avx2;

impl Engine for Avx2 {
    fn costs(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
        if available() {
            // SAFETY: `costs_avx2` needs AVX2, BMI1 and POPCNT, which `available` just
            // detected on this CPU.
            unsafe { costs_avx2(kind, p, f, out) }
        } else {
            Simd::costs(kind, p, f, out);
        }
    }

    fn costs2_select_escape(
        kinds: [CostKind; 2],
        p: &Params,
        f: &Fleet,
        out: [&mut Vec<f32>; 2],
        rule: &TieRule,
        margin: f32,
    ) -> (Option<usize>, Escape) {
        if available() {
            // SAFETY: `costs2_select_escape_avx2` needs AVX2, BMI1 and POPCNT, which
            // `available` just detected on this CPU.
            unsafe { costs2_select_escape_avx2(kinds, p, f, out, rule, margin) }
        } else {
            Simd::costs2_select_escape(kinds, p, f, out, rule, margin)
        }
    }

    fn select(f: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize> {
        if available() {
            // SAFETY: `select_avx2` needs AVX2, BMI1 and POPCNT, which `available` just
            // detected on this CPU.
            unsafe { select_avx2(f, costs, mask, rule) }
        } else {
            Simd::select(f, costs, mask, rule)
        }
    }

    fn occupied_sums(f: &Fleet, costs: &[f32]) -> (f32, f32) {
        if available() {
            // SAFETY: `occupied_sums_avx2` needs AVX2, BMI1 and POPCNT, which `available`
            // just detected on this CPU.
            unsafe { occupied_sums_avx2(f, costs) }
        } else {
            Simd::occupied_sums(f, costs)
        }
    }
}

/// [`Engine::occupied_sums`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, BMI1 and POPCNT ([`available`]).
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn occupied_sums_avx2(f: &Fleet, costs: &[f32]) -> (f32, f32) {
    simd_occupied_sums::<F32x8>(f, costs)
}

/// [`Engine::costs`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, BMI1 and POPCNT ([`available`]).
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn costs_avx2(kind: CostKind, p: &Params, f: &Fleet, out: &mut Vec<f32>) {
    simd_costs::<F32x8>(kind, p, f, out);
}

/// [`Engine::costs2_select_escape`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, BMI1 and POPCNT ([`available`]).
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn costs2_select_escape_avx2(
    kinds: [CostKind; 2],
    p: &Params,
    f: &Fleet,
    out: [&mut Vec<f32>; 2],
    rule: &TieRule,
    margin: f32,
) -> (Option<usize>, Escape) {
    simd_costs2_select_escape::<F32x8>(kinds, p, f, out, rule, margin)
}

/// [`Engine::select`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, BMI1 and POPCNT ([`available`]).
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn select_avx2(f: &Fleet, costs: &[f32], mask: Mask, rule: &TieRule) -> Option<usize> {
    simd_select::<F32x8>(f, costs, mask, rule)
}

/// The sparse `projected_time` decision ([`crate::sparse::enforce`]) compiled for AVX2
/// where [`available`], the portable one otherwise: the same outcome either way (the same
/// operations per lane).
pub(crate) fn sparse_enforce(
    f: &Fleet,
    p: &Params,
    rule: &TieRule,
    margin: f32,
    s: &mut Scratch,
) -> Outcome {
    if available() {
        // SAFETY: `sparse_enforce_avx2` needs AVX2, BMI1 and POPCNT, which `available`
        // just detected on this CPU.
        unsafe { sparse_enforce_avx2(f, p, rule, margin, s) }
    } else {
        crate::sparse::enforce(f, p, rule, margin, s)
    }
}

/// [`sparse_enforce`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2, BMI1 and POPCNT ([`available`]).
#[target_feature(enable = "avx2,bmi1,popcnt")]
unsafe fn sparse_enforce_avx2(
    f: &Fleet,
    p: &Params,
    rule: &TieRule,
    margin: f32,
    s: &mut Scratch,
) -> Outcome {
    crate::sparse::enforce_on::<F32x8>(f, p, rule, margin, s)
}

/// Eight `f32` lanes in one 256-bit AVX register. Private to this module (module docs,
/// *Safety argument*): every value and every call exists only inside the AVX2 kernels.
#[derive(Clone, Copy)]
struct F32x8(__m256);

/// Wraps one AVX intrinsic call. Every use is inside a method of [`F32x8`], which runs
/// only inside this module's `#[target_feature]` kernels after [`available`] returned true
/// (module docs, *Safety argument*); the intrinsics used take and return registers only
/// (the load and store take pointers to whole `[f32; 8]` arrays, checked at their call).
macro_rules! avx {
    ($e:expr) => {
        // SAFETY: the CPU has AVX2 (see the macro's docs: `F32x8` is used only by the
        // kernels, after `available` detected AVX2, BMI1 and POPCNT).
        unsafe { $e }
    };
}

macro_rules! binop {
    ($tr:ident, $m:ident, $f:ident) => {
        impl $tr for F32x8 {
            type Output = F32x8;
            #[inline(always)]
            fn $m(self, o: F32x8) -> F32x8 {
                F32x8(avx!($f(self.0, o.0)))
            }
        }
    };
}

binop!(Add, add, _mm256_add_ps);
binop!(Sub, sub, _mm256_sub_ps);
binop!(Mul, mul, _mm256_mul_ps);
binop!(Div, div, _mm256_div_ps);
binop!(BitAnd, bitand, _mm256_and_ps);

impl BitAndAssign for F32x8 {
    #[inline(always)]
    fn bitand_assign(&mut self, o: F32x8) {
        *self = *self & o;
    }
}

impl Lane for F32x8 {
    #[inline(always)]
    fn splat(v: f32) -> Self {
        F32x8(avx!(_mm256_set1_ps(v)))
    }
    #[inline(always)]
    fn max_(self, o: Self) -> Self {
        // `vmaxps`: `self > o ? self : o` per lane (module docs).
        F32x8(avx!(_mm256_max_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn min_(self, o: Self) -> Self {
        // `vminps`: `self < o ? self : o` per lane (module docs).
        F32x8(avx!(_mm256_min_ps(self.0, o.0)))
    }
    #[inline(always)]
    fn pos_or(self, fallback: Self) -> Self {
        let zero = F32x8(avx!(_mm256_setzero_ps()));
        self.gt_mask(zero).select(self, fallback)
    }
    #[inline(always)]
    fn below_or(self, t: f32, below: Self, other: Self) -> Self {
        let lt = F32x8(avx!(_mm256_cmp_ps::<_CMP_LT_OQ>(self.0, Self::splat(t).0)));
        lt.select(below, other)
    }
}

impl Vector for F32x8 {
    #[inline(always)]
    fn load(a: [f32; 8]) -> Self {
        // `_mm256_loadu_ps` reads 8 unaligned `f32` from `a`, which holds exactly 8.
        F32x8(avx!(_mm256_loadu_ps(a.as_ptr())))
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 8] {
        let mut a = [0.0f32; 8];
        // `_mm256_storeu_ps` writes 8 unaligned `f32` to `a`, which holds exactly 8.
        avx!(_mm256_storeu_ps(a.as_mut_ptr(), self.0));
        a
    }
    #[inline(always)]
    fn gt_mask(self, o: Self) -> Self {
        F32x8(avx!(_mm256_cmp_ps::<_CMP_GT_OQ>(self.0, o.0)))
    }
    #[inline(always)]
    fn ge_mask(self, o: Self) -> Self {
        F32x8(avx!(_mm256_cmp_ps::<_CMP_GE_OQ>(self.0, o.0)))
    }
    #[inline(always)]
    fn le_mask(self, o: Self) -> Self {
        F32x8(avx!(_mm256_cmp_ps::<_CMP_LE_OQ>(self.0, o.0)))
    }
    #[inline(always)]
    fn eq_mask(self, o: Self) -> Self {
        F32x8(avx!(_mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0)))
    }
    #[inline(always)]
    fn select(self, t: Self, f: Self) -> Self {
        // `vblendvps f, t, mask`: `t` where the mask lane's sign bit is set.
        F32x8(avx!(_mm256_blendv_ps(f.0, t.0, self.0)))
    }
    #[inline(always)]
    fn bits(self) -> u8 {
        // `vmovmskps` sets bits 0..8 only.
        avx!(_mm256_movemask_ps(self.0)) as u8
    }
}

/// [`Gather::Source`] of the AVX2 vector: the match buffer's three parts as `i32` arrays
/// and the number of slots every part covers, splat across the lanes.
#[derive(Clone, Copy)]
pub(crate) struct GatherSource<'a> {
    entries: *const i32,
    explicit: *const i32,
    depths: *const i32,
    /// The slots (below 2^31) every part covers, in every lane.
    slots: __m256i,
    /// Whether there is any slot.
    any: bool,
    parts: core::marker::PhantomData<OverlapParts<'a>>,
}

impl Gather for F32x8 {
    type Source<'a> = GatherSource<'a>;

    #[inline(always)]
    fn source<'a>(raw: &OverlapParts<'a>) -> GatherSource<'a> {
        let (entries, explicit, depths) = (raw.entries(), raw.explicit(), raw.depths());
        // The slots every part covers (all of `entries` for an `OverlapParts`, whose words
        // cover its entries; checked again here, as the gathers rely on it). Compared
        // with ids as `i32`: every id is below 2^31 (the trait's contract), and a count
        // beyond `i32::MAX` admits every such id either way.
        let slots = entries
            .len()
            .min(explicit.len().saturating_mul(64))
            .min(depths.len().saturating_mul(64))
            .min(i32::MAX as usize);
        GatherSource {
            entries: entries.as_ptr().cast::<i32>(),
            explicit: explicit.as_ptr().cast::<i32>(),
            depths: depths.as_ptr().cast::<i32>(),
            slots: avx!(_mm256_set1_epi32(slots as i32)),
            any: slots > 0,
            parts: core::marker::PhantomData,
        }
    }

    /// Three masked `vpgatherdd`s of the lanes below `lanes` whose id is below the
    /// source's slots (the entries, the 32-bit halves of the explicit words holding each
    /// id's bit, and the word depths), the entry taken where the id's bit is set and the
    /// word's depth elsewhere ([`OverlapParts::get`]); then the exact `u32` to `f32`
    /// conversion in two halves: `hi · 2^16 + lo` with `hi` and `lo` below 2^16 (each
    /// converted and scaled exactly), so the one rounding is the final addition's, to
    /// nearest, ties to even, as `u32 as f32` rounds.
    #[inline(always)]
    fn overlaps(src: &GatherSource<'_>, ids: &[u32; 8], lanes: usize) -> Self {
        let zero = avx!(_mm256_setzero_si256());
        if !src.any || lanes == 0 {
            return F32x8(avx!(_mm256_cvtepi32_ps(zero)));
        }
        let lanes = lanes.min(8) as i32;
        // SAFETY: `ids` is 8 `u32` (32 bytes), exactly what the unaligned load reads.
        let idx = avx!(_mm256_loadu_si256(ids.as_ptr().cast::<__m256i>()));
        let lane_no = avx!(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        let live = avx!(_mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), lane_no));
        let inside = avx!(_mm256_cmpgt_epi32(src.slots, idx));
        let mask = avx!(_mm256_and_si256(live, inside));
        // SAFETY: `src` was made by `source` from parts that outlive it (its lifetime), so
        // its pointers address live slices. Each gather reads only the lanes whose mask is
        // set, each with `0 <= idx[j] < slots` (ids below 2^31 compare as non-negative
        // `i32`s against the count `source` computed); a lane whose mask is clear reads
        // nothing and keeps `zero`. The entries: `entries[idx[j]]`, inside them
        // (`slots <= entries.len()`). The explicit bits: the 4-byte half `idx[j] / 32` of
        // the `u64` words, inside them (`idx[j] / 32 < slots / 32 <= 2 · explicit.len()`),
        // holding bit `idx[j] % 32` for slot `idx[j]` on this little-endian target (bit
        // `b` of word `w` is bit `b % 32` of half `2w + b / 32`). The depths:
        // `depths[idx[j] / 64]`, inside them (`slots <= 64 · depths.len()`).
        let got = avx!(_mm256_mask_i32gather_epi32::<4>(
            zero,
            src.entries,
            idx,
            mask
        ));
        let halves = avx!(_mm256_mask_i32gather_epi32::<4>(
            zero,
            src.explicit,
            _mm256_srli_epi32::<5>(idx),
            mask
        ));
        let depth = avx!(_mm256_mask_i32gather_epi32::<4>(
            zero,
            src.depths,
            _mm256_srli_epi32::<6>(idx),
            mask
        ));
        // The id's bit moved to the sign bit: `vblendvps` takes the entry where it is set.
        let own = avx!(_mm256_sllv_epi32(
            halves,
            _mm256_sub_epi32(
                _mm256_set1_epi32(31),
                _mm256_and_si256(idx, _mm256_set1_epi32(31))
            )
        ));
        let got = avx!(_mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(depth),
            _mm256_castsi256_ps(got),
            _mm256_castsi256_ps(own)
        )));
        let low16 = avx!(_mm256_set1_epi32(0xFFFF));
        let hi = avx!(_mm256_cvtepi32_ps(_mm256_srli_epi32::<16>(got)));
        let lo = avx!(_mm256_cvtepi32_ps(_mm256_and_si256(got, low16)));
        F32x8(avx!(_mm256_add_ps(
            _mm256_mul_ps(hi, _mm256_set1_ps(65_536.0)),
            lo
        )))
    }

    /// Three `min` steps over halves (256 → 128 → 64 → 32 bits) instead of a store and
    /// seven scalar comparisons: a shorter dependency chain on the walk's path.
    #[inline(always)]
    fn least(self) -> f32 {
        let x = self.0;
        let m = avx!(_mm_min_ps(
            _mm256_castps256_ps128(x),
            _mm256_extractf128_ps::<1>(x)
        ));
        let m = avx!(_mm_min_ps(m, _mm_movehl_ps(m, m)));
        avx!(_mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::finite;
    use kvroute_index::index::Overlaps;

    /// The AVX2 lanes' operations, lane by lane, against `f32`'s on every class of value
    /// (NaN on either side, signed zeros, infinities): the same bits for arithmetic,
    /// `max_`/`min_`/`pos_or`/`below_or` (the `lane` module's NaN rule), comparisons and
    /// `finite`.
    ///
    /// # Safety
    /// The CPU has AVX2, BMI1 and POPCNT.
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    unsafe fn check_lanes(a: [f32; 8], b: [f32; 8]) {
        let (va, vb) = (F32x8::load(a), F32x8::load(b));
        let got = [
            (va + vb).to_array(),
            (va - vb).to_array(),
            (va * vb).to_array(),
            (va / vb).to_array(),
            va.max_(vb).to_array(),
            va.min_(vb).to_array(),
            va.pos_or(vb).to_array(),
            va.below_or(1.0, va, vb).to_array(),
        ];
        let scalar: [fn(f32, f32) -> f32; 8] = [
            |x, y| x + y,
            |x, y| x - y,
            |x, y| x * y,
            |x, y| x / y,
            |x, y| if x > y { x } else { y },
            |x, y| if x < y { x } else { y },
            |x, y| if x > 0.0 { x } else { y },
            |x, y| if x < 1.0 { x } else { y },
        ];
        for (op, (g, s)) in got.iter().zip(scalar).enumerate() {
            for j in 0..8 {
                let want = s(a[j], b[j]);
                assert!(
                    g[j].to_bits() == want.to_bits() || (g[j].is_nan() && want.is_nan()),
                    "op {op} lane {j}: {} vs {want} ({} {})",
                    g[j],
                    a[j],
                    b[j]
                );
            }
        }
        let masks = [
            (va.gt_mask(vb).bits(), 0),
            (va.ge_mask(vb).bits(), 1),
            (va.le_mask(vb).bits(), 2),
            (va.eq_mask(vb).bits(), 3),
            (finite(va).bits(), 4),
        ];
        for (bits, kind) in masks {
            let want = (0..8).fold(0u8, |m, j| {
                let (x, y) = (a[j], b[j]);
                let t = match kind {
                    0 => x > y,
                    1 => x >= y,
                    2 => x <= y,
                    3 => x == y,
                    _ => x.is_finite(),
                };
                m | (u8::from(t) << j)
            });
            assert_eq!(bits, want, "mask {kind}: {a:?} {b:?}");
        }
    }

    /// [`Gather::overlaps`] compiled for AVX2, as an array.
    ///
    /// # Safety
    /// The CPU has AVX2, BMI1 and POPCNT.
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    unsafe fn gathered(raw: &Overlaps, ids: &[u32; 8], lanes: usize) -> [f32; 8] {
        F32x8::overlaps(&F32x8::source(&raw.parts()), ids, lanes).to_array()
    }

    /// The gathered overlaps against `raw.get(id).map_or(0, |&b| b as f32)` written out
    /// lane by lane: values that round (2^24 + 1, `u32::MAX`, odd values above 2^24 with
    /// ties to even), values at and above 2^31 (where a signed conversion would differ),
    /// ids past the buffer's end, fewer lanes than eight and an empty buffer.
    #[test]
    fn gathered_overlaps_convert_as_u32_to_f32() {
        if !available() {
            return;
        }
        let dense: Vec<u32> = vec![
            0,
            1,
            16_777_217,
            u32::MAX,
            1 << 31,
            (1 << 31) + 129,
            33_554_435,
            4_294_967_041,
            96,
            128,
        ];
        let raw = Overlaps::from_blocks(dense.clone());
        let cases: [([u32; 8], usize); 5] = [
            ([0, 1, 2, 3, 4, 5, 6, 7], 8),
            ([9, 8, 7, 6, 5, 4, 3, 2], 8),
            ([3, 10, 11, 4_095, 2, 0, 1, 9], 8),
            ([2, 3, 4, 5, 6, 7, 8, 9], 3),
            ([1, 1, 1, 1, 1, 1, 1, 1], 0),
        ];
        for (ids, lanes) in cases {
            let want: [f32; 8] = core::array::from_fn(|j| {
                if j < lanes {
                    dense.get(ids[j] as usize).map_or(0.0, |&b| b as f32)
                } else {
                    0.0
                }
            });
            // SAFETY: `available` detected AVX2, BMI1 and POPCNT.
            let got = unsafe { gathered(&raw, &ids, lanes) };
            assert_eq!(
                got.map(f32::to_bits),
                want.map(f32::to_bits),
                "{ids:?}, {lanes}"
            );
        }
        // Hand values: 2^24 + 1 rounds to 2^24 (tie to even), u32::MAX to 2^32, 2^31 + 129
        // to 2^31 + 256, 2^25 + 3 to 2^25 + 4, 2^32 − 255 to 2^32 − 256.
        // SAFETY: as above.
        let got = unsafe { gathered(&raw, &[2, 3, 5, 6, 7, 8, 9, 4], 8) };
        let hand = [
            16_777_216.0f32,
            4_294_967_296.0,
            2_147_483_904.0,
            33_554_436.0,
            4_294_967_040.0,
            96.0,
            128.0,
            2_147_483_648.0,
        ];
        assert_eq!(got, hand);
        // SAFETY: as above.
        let empty = unsafe { gathered(&Overlaps::default(), &[0; 8], 8) };
        assert_eq!(empty.map(f32::to_bits), [0u32; 8]);
    }

    /// The gather reads a run-index match's layout (a depth per word of 64 slots, the
    /// slots that differ as entries) as `Overlaps::get` does, on a fleet built so that
    /// every kind of word occurs: 200 slots; workers 0-149 hold blocks 1-4 and workers 3
    /// and 140 blocks 1-8, so the match of blocks 1-8 gives 8 to those two, 4 to the rest
    /// of 0-149 and 0 to 150-199 (by hand), with words 0 and 1 mostly at depth 4, word 2
    /// split 22 / 42 and word 3 eight slots of a partial word.
    #[test]
    fn gathered_overlaps_read_the_word_layout() {
        use kvroute_core::{EngineHash, SequenceHash, Slot};
        use kvroute_index::index::IndexConfig;
        use kvroute_index::runs::RunIndex;
        if !available() {
            return;
        }
        let index = RunIndex::new(IndexConfig::new(200, 16)).expect("valid config");
        let block = |k: u64| (EngineHash(1_000 + k), SequenceHash(k));
        for w in 0..150u32 {
            let upto = if w == 3 || w == 140 { 8 } else { 4 };
            let pairs: Vec<_> = (1..=upto).map(block).collect();
            index
                .store_hashes(Slot(w), None, &pairs)
                .expect("valid slot");
        }
        let query: Vec<SequenceHash> = (1..=8).map(SequenceHash).collect();
        let mut out = index.new_overlaps();
        index.match_prefix(&query, &mut out);
        let want = |s: u32| match s {
            3 | 140 => 8,
            0..150 => 4,
            _ => 0,
        };
        assert!((0..200).all(|s| out.get(Slot(s)) == want(s)));
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..400 {
            let ids: [u32; 8] = core::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Past the slots too (200-231 read 0).
                (x % 232) as u32
            });
            let lanes = round % 9;
            let hand: [f32; 8] =
                core::array::from_fn(|j| if j < lanes { want(ids[j]) as f32 } else { 0.0 });
            // SAFETY: `available` detected AVX2, BMI1 and POPCNT.
            let got = unsafe { gathered(&out, &ids, lanes) };
            assert_eq!(got, hand, "{ids:?}, {lanes}");
        }
    }

    /// [`Gather::least`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2, BMI1 and POPCNT.
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    unsafe fn least_of(a: [f32; 8]) -> f32 {
        F32x8::load(a).least()
    }

    /// The least lane wherever it lies, against a hand-picked value per case: +∞ lanes
    /// (the walk's excluded slots), all +∞, equal values, negative and subnormal values.
    #[test]
    fn least_lane_is_the_minimum_wherever_it_lies() {
        if !available() {
            return;
        }
        let inf = f32::INFINITY;
        let cases: [([f32; 8], f32); 5] = [
            ([3.0, 2.5, inf, 7.0, 1.25, 9.0, inf, 4.0], 1.25),
            ([inf; 8], inf),
            ([5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 0.5], 0.5),
            ([inf, inf, inf, inf, inf, inf, -2.0, inf], -2.0),
            ([1e-40, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 1e-40),
        ];
        for (lanes, want) in cases {
            for shift in 0..8 {
                let mut a = lanes;
                a.rotate_left(shift);
                // SAFETY: `available` detected AVX2, BMI1 and POPCNT.
                let got = unsafe { least_of(a) };
                assert_eq!(got.to_bits(), want.to_bits(), "{a:?}");
            }
        }
    }

    #[test]
    fn lanes_match_f32() {
        if !available() {
            return;
        }
        let cases = [
            (
                [f32::NAN, 1.0, -0.0, 0.0, f32::INFINITY, 2.0, f32::NAN, -1.0],
                [
                    0.5,
                    f32::NAN,
                    0.0,
                    -0.0,
                    1.0,
                    f32::NEG_INFINITY,
                    f32::NAN,
                    -1.0,
                ],
            ),
            (
                [3.0, -2.5, 1e-45, f32::MAX, 0.999, 1.0, -0.0, 7.0],
                [3.0, 2.5, -1e-45, f32::MAX, 1.0, 0.999, 0.0, f32::INFINITY],
            ),
        ];
        for (a, b) in cases {
            // SAFETY: `available` returned true: the CPU has AVX2, BMI1 and POPCNT.
            unsafe { check_lanes(a, b) };
            // SAFETY: as above.
            unsafe { check_lanes(b, a) };
        }
    }
}
