//! Per-slot coefficients of the two costs a `projected_time` decision computes, folded once
//! per publication: every part of [`CostKind::Projected`] and [`CostKind::LeastLoad`]
//! (module `cost`) that depends only on a slot's lanes and the configured defaults, not on
//! the request or the fleet's mean batch.
//!
//! With `spp = 1/π`, `a`, `b`, `q1 = q + 1`, the cap `M = max(q/occ, 1)`, `room = occ < 1`
//! and the typical output `T`, the projected cost is
//! `((start + n·(U·spp)) + out·(b + (2n − 1)·a)) + barrier`, where
//! * `n = room ? max(min(M, mean + 1), q1) : M` is the only part that depends on the fleet
//!   (its mean batch), and `U` (the uncached prompt) and `out` the only parts that depend on
//!   the request;
//! * `start = queued·spp + wait` does not: with room, `n >= q1` makes the slot wait
//!   `(q1 − n)⁺·T·(b/n + a)` exactly +0 or −0 whatever `n` is, as long as `b/n + a` is
//!   finite (`b`, `a` finite, `n >= 1`), and adding a zero leaves `queued·spp` unchanged
//!   unless it is −0; when full, `n = M` and the wait is a per-slot constant.
//!
//! So a decision computes per slot only `n`, `U` and the three sums, with the same IEEE
//! operations in the same order as the reference formula: the same bits. A slot whose
//! lanes break the zero-wait argument (requests negative or not finite, `b` or `a` not
//! finite, queued −0) is counted in [`Coefficients::irregular`], and a pass over a fleet
//! with any such slot computes the projected cost from the lanes instead. The least-load
//! cost, `(queued + decode)/tps + barrier`, depends on nothing else and is kept whole.
//!
//! The coefficients are valid for the [`CoefKey`] they were made with (the configured
//! defaults they read); a pass checks it against its own parameters and falls back to the
//! lanes when it differs (a knob changed since the fill, or a fleet never prepared).

use crate::cost::Params;
use crate::lane::Lane;

/// The configured values the coefficients read, as bits (equality is bitwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CoefKey([u32; 5]);

impl CoefKey {
    /// The key of these configured values: default prefill and decode throughput
    /// (tokens/s), KV barrier (s), typical output (tokens), least-load throughput
    /// (tokens/s).
    pub(crate) fn new(dp: f32, dd: f32, kvb: f32, t: f32, llt: f32) -> Self {
        Self([dp, dd, kvb, t, llt].map(f32::to_bits))
    }

    /// Whether `key` holds the values of `p` it keys (prefill and decode defaults, barrier,
    /// typical output, least-load throughput, as [`new`](Self::new) takes them), comparing
    /// each value's bits where it lies (a key assembled on the stack and compared as one
    /// array makes the load wait for the five scalar stores, which it cannot take from the
    /// store buffer at once).
    #[inline(always)]
    pub(crate) fn is_of(key: Option<Self>, p: &Params) -> bool {
        let Some(Self(k)) = key else {
            return false;
        };
        k[0] == p.default_prefill_tps.to_bits()
            && k[1] == p.default_decode_tps.to_bits()
            && k[2] == p.kv_barrier_s.to_bits()
            && k[3] == p.typical_output.to_bits()
            && k[4] == p.least_load_tps.to_bits()
    }

    fn get(self, k: usize) -> f32 {
        f32::from_bits(self.0[k])
    }
}

/// One slot's lanes, as the coefficients read them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotLanes {
    pub requests: f32,
    pub queued: f32,
    pub decode: f32,
    pub kv: f32,
    pub occ: f32,
    pub ptps: f32,
    pub dtps: f32,
    pub dbase: f32,
}

/// The coefficient lanes of a fleet (padded like its lanes); see the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct Coefficients {
    /// What they were computed with; `None`: not computed.
    pub key: Option<CoefKey>,
    /// Seconds per prefill token, `1/π`.
    pub spp: Vec<f32>,
    /// Seconds per sequence of a decode step, `a`.
    pub a: Vec<f32>,
    /// `q + 1` (requests).
    pub q1: Vec<f32>,
    /// The batch cap `max(q/occ, 1)` (requests).
    pub cap: Vec<f32>,
    /// All ones where the batch has room (`occ < 1`), else 0 (a mask lane).
    pub room: Vec<f32>,
    /// `queued·spp + wait` (seconds).
    pub start: Vec<f32>,
    /// The KV barrier (seconds).
    pub barrier: Vec<f32>,
    /// The least-load cost (seconds).
    pub least: Vec<f32>,
    /// Per slot: its lanes break the zero-wait argument.
    odd: Vec<bool>,
    /// How many slots do.
    pub irregular: usize,
}

impl Coefficients {
    /// Sizes every lane for `n` lanes and forgets the key (the caller recomputes them all).
    pub(crate) fn resize(&mut self, n: usize) {
        for lane in [
            &mut self.spp,
            &mut self.a,
            &mut self.q1,
            &mut self.cap,
            &mut self.room,
            &mut self.start,
            &mut self.barrier,
            &mut self.least,
        ] {
            lane.resize(n, 0.0);
        }
        self.odd.clear();
        self.odd.resize(n, false);
        self.irregular = 0;
        self.key = None;
    }

    /// Whether a pass with parameters `p` may use the projected coefficients.
    #[inline]
    pub(crate) fn projected_for(&self, p: &Params) -> bool {
        self.irregular == 0 && CoefKey::is_of(self.key, p)
    }

    /// Whether a pass with parameters `p` may use the least-load lane.
    #[inline]
    pub(crate) fn least_for(&self, p: &Params) -> bool {
        CoefKey::is_of(self.key, p)
    }

    /// Computes lane `i` from the slot's lanes `x` under `key` (the formulas of
    /// `cost::cost`, term by term).
    pub(crate) fn set(&mut self, i: usize, x: &SlotLanes, key: CoefKey) {
        let one = 1.0f32;
        let (dp, dd, kvb, t, llt) = (key.get(0), key.get(1), key.get(2), key.get(3), key.get(4));
        let spp = one / x.ptps.pos_or(dp);
        let a = one / x.dtps.pos_or(dd);
        let b = x.dbase;
        let q1 = x.requests + one;
        let cap = (x.requests / x.occ).max_(one);
        let room = x.occ < 1.0;
        let wait = if room {
            0.0
        } else {
            (q1 - cap).max_(0.0) * t * (b / cap + a)
        };
        let start = if room {
            x.queued * spp
        } else {
            x.queued * spp + wait
        };
        let kc = x.kv.max_(0.0).min_(0.999);
        let barrier = kvb * (kc / (one - kc));
        let least = (x.queued + x.decode) / x.ptps.pos_or(llt) + barrier;
        self.spp[i] = spp;
        self.a[i] = a;
        self.q1[i] = q1;
        self.cap[i] = cap;
        self.room[i] = f32::from_bits(if room { u32::MAX } else { 0 });
        self.start[i] = start;
        self.barrier[i] = barrier;
        self.least[i] = least;
        let regular = x.requests.is_finite()
            && x.requests >= 0.0
            && b.is_finite()
            && a.is_finite()
            && x.queued.to_bits() != (-0.0f32).to_bits();
        let odd = !regular;
        if odd != self.odd[i] {
            self.odd[i] = odd;
            if odd {
                self.irregular += 1;
            } else {
                self.irregular -= 1;
            }
        }
    }
}

impl crate::fleet::Fleet {
    /// The lanes of slot `i` that the coefficients read.
    fn slot_lanes(&self, i: usize) -> SlotLanes {
        SlotLanes {
            requests: self.requests[i],
            queued: self.queued[i],
            decode: self.decode[i],
            kv: self.kv[i],
            occ: self.occ[i],
            ptps: self.ptps[i],
            dtps: self.dtps[i],
            dbase: self.dbase[i],
        }
    }

    /// Precomputes the per-slot cost coefficients of `projected_time` and `least_load`
    /// for `cfg`'s defaults (`default_prefill_tps`, `default_decode_tps`, `kv_barrier_s`,
    /// `tokens_per_request`, `least_load_tps`), so that the SIMD passes compute per slot
    /// only what the request and the fleet's mean batch change. The decisions are the same
    /// with or without them (bit for bit, the scalar reference never uses them); a
    /// decision under other defaults, or after the lanes changed, computes from the lanes.
    /// [`fill_with`](Self::fill_with) keeps them current between publications. One pass
    /// over the lanes (`O(slots)`, a few divisions per slot).
    pub fn prepare_costs(&mut self, cfg: &crate::ScoreConfig) {
        let key = key_of(cfg);
        let n = self.lane_len();
        self.coef.resize(n);
        for i in 0..n {
            let x = self.slot_lanes(i);
            self.coef.set(i, &x, key);
        }
        self.coef.key = Some(key);
        if n >= crate::sparse::MIN_LANES && self.coef.irregular == 0 {
            let mut order = core::mem::take(&mut self.order);
            order.build(self, key);
            self.order = order;
        } else {
            self.order.key = None;
        }
    }

    /// [`fill_as_of`](Self::fill_as_of) with `cfg`'s `tokens_per_request`, then the cost
    /// coefficients of [`prepare_costs`](Self::prepare_costs) for `cfg`: all of them when
    /// the fill rebuilt the lanes from a new snapshot (or `cfg`'s defaults changed),
    /// otherwise only the slots whose reservations changed since the previous fill.
    pub fn fill_with(
        &mut self,
        snapshot: &kvroute_load::LoadSnapshot,
        table: &kvroute_load::ReservationTable,
        overlaps: &kvroute_index::index::Overlaps,
        cfg: &crate::ScoreConfig,
        snapshot_stale: bool,
    ) {
        self.fill_lanes(
            snapshot,
            table,
            overlaps,
            cfg.tokens_per_request,
            snapshot_stale,
        );
        self.refresh_coefficients(cfg);
    }

    /// [`fill_with`](Self::fill_with) from the fleet's own match buffer
    /// ([`matched_mut`](Self::matched_mut): match into it first), with one difference: the
    /// per-slot overlaps are not converted into the `overlap` lane. Every read of a slot's
    /// overlap ([`overlap`](Self::overlap), the aggregates' `deepest`, the sparse
    /// `projected_time` decision) takes it from the match buffer, and
    /// [`Scorer::score_matched`](crate::Scorer::score_matched) converts the lane only when
    /// it decides with a pass over every slot ([`convert_lane`](Self::convert_lane)), so a
    /// sparse decision costs no per-slot overlap work. Any other scoring call on the fleet
    /// sees the same values (it converts a copy first; slower, never different).
    pub fn fill_with_matched(
        &mut self,
        snapshot: &kvroute_load::LoadSnapshot,
        table: &kvroute_load::ReservationTable,
        cfg: &crate::ScoreConfig,
        snapshot_stale: bool,
    ) {
        self.fill_lanes_matched(snapshot, table, cfg.tokens_per_request, snapshot_stale);
        self.refresh_coefficients(cfg);
    }

    /// The coefficients' update after a fill: all of them when the fill rebuilt the lanes
    /// (or `cfg`'s defaults changed), otherwise the slots the fill touched.
    fn refresh_coefficients(&mut self, cfg: &crate::ScoreConfig) {
        let key = key_of(cfg);
        if self.rebuilt || self.coef.key != Some(key) || self.coef.spp.len() != self.lane_len() {
            self.prepare_costs(cfg);
            return;
        }
        for k in 0..self.touched.len() {
            let i = self.touched[k] as usize;
            let x = self.slot_lanes(i);
            self.coef.set(i, &x, key);
        }
    }
}

fn key_of(cfg: &crate::ScoreConfig) -> CoefKey {
    CoefKey::new(
        cfg.default_prefill_tps,
        cfg.default_decode_tps,
        cfg.kv_barrier_s,
        cfg.tokens_per_request as f32,
        cfg.least_load_tps,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::SlotFigures;
    use crate::{Fleet, ScoreConfig};

    fn lanes(requests: f32, queued: f32, dbase: f32, dtps: f32) -> SlotLanes {
        SlotLanes {
            requests,
            queued,
            decode: 0.0,
            kv: 0.5,
            occ: 0.5,
            ptps: 4_000.0,
            dtps,
            dbase,
        }
    }

    /// Hand values: π 4,000, δ 2,000, occupancy 0.5 (room), q 3, 2,000 queued, KV 0.5,
    /// barrier 0.15: `spp` 1/4,000, `a` 1/2,000, `q1` 4, `M` 6, `start` 0.5 s, least-load
    /// 2,000/4,000 + 0.15 = 0.65 s (`cost` module docs, first hand case).
    #[test]
    fn terms_by_hand() {
        let key = CoefKey::new(8_000.0, 1_000.0, 0.15, 200.0, 4_000.0);
        let mut c = Coefficients::default();
        c.resize(1);
        c.set(0, &lanes(3.0, 2_000.0, 0.0, 2_000.0), key);
        let got = [
            c.spp[0],
            c.a[0],
            c.q1[0],
            c.cap[0],
            c.start[0],
            c.barrier[0],
            c.least[0],
        ];
        let want = [0.000_25, 0.000_5, 4.0, 6.0, 0.5, 0.15, 0.65];
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{got:?} != {want:?}");
        }
        assert_eq!(c.room[0].to_bits(), u32::MAX);
        assert_eq!(c.irregular, 0);
    }

    /// A slot whose lanes break the zero-wait argument is counted while it holds them (a
    /// pass uses the projected coefficients only while none is).
    #[test]
    fn irregular_slots_are_counted_while_they_hold_their_lanes() {
        let key = CoefKey::new(8_000.0, 1_000.0, 0.15, 200.0, 4_000.0);
        let mut c = Coefficients::default();
        c.resize(4);
        c.set(0, &lanes(f32::NAN, 0.0, 0.0, 2_000.0), key);
        c.set(1, &lanes(-1.0, 0.0, 0.0, 2_000.0), key);
        c.set(2, &lanes(1.0, 0.0, f32::INFINITY, 2_000.0), key);
        c.set(3, &lanes(1.0, -0.0, 0.0, 2_000.0), key);
        assert_eq!(c.irregular, 4);
        for i in 0..4 {
            c.set(i, &lanes(1.0, 0.0, 0.0, 2_000.0), key);
        }
        assert_eq!(c.irregular, 0);
        // A positive decode throughput so small that `a` overflows.
        c.set(0, &lanes(1.0, 0.0, 0.0, 1e-40), key);
        assert_eq!(c.irregular, 1);

        let mut f = Fleet::from_slots(&[Some(SlotFigures::idle()); 3]);
        f.prepare_costs(&ScoreConfig::default());
        assert_eq!(f.coef.irregular, 0);
        let mut odd = SlotFigures::idle();
        odd.decode_step_base_s = f32::INFINITY;
        let mut g = Fleet::from_slots(&[Some(SlotFigures::idle()), Some(odd)]);
        g.prepare_costs(&ScoreConfig::default());
        assert_eq!(g.coef.irregular, 1);
    }
}
