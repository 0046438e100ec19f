//! The scorer's input: one request's view of every worker slot as structure-of-arrays
//! `f32` lanes, padded to [`LANE_PAD`], plus fleet-wide aggregates computed once.
//!
//! A [`Fleet`] is filled either from a published [`LoadSnapshot`], the live reservations
//! and the request's [`Overlaps`] ([`Fleet::fill`]), or from explicit per-slot figures
//! ([`Fleet::from_slots`], for tests and the simulator). It is reused across decisions:
//! filling allocates only when the slot count grows.

use kvroute_core::Fields;
use kvroute_core::Slot;
use kvroute_index::index::{OverlapParts, Overlaps};
use kvroute_load::{LANE_PAD, LoadSnapshot, ReservationTable, Reserved, Validity, padded_len};

use crate::coef::Coefficients;
use crate::path::SimdPath;

/// Every validity, to map a `u8` back.
const VALIDITIES: [Validity; 6] = [
    Validity::Vacant,
    Validity::Missing,
    Validity::Invalid,
    Validity::Stale,
    Validity::Partial,
    Validity::Fresh,
];

/// One occupied slot's figures, in the scorer's units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotFigures {
    /// Telemetry validity of the slot (never `Vacant` here; use `None` for a vacant slot).
    pub validity: Validity,
    /// Leading blocks of the request's prefix the worker holds (blocks).
    pub overlap_blocks: f32,
    /// Running + waiting + reserved requests (requests).
    pub requests: f32,
    /// Waiting uncached prefill tokens + reserved prefill tokens (tokens).
    pub queued_tokens: f32,
    /// Active decode tokens + reserved decode tokens (tokens).
    pub decode_tokens: f32,
    /// KV usage (ratio, `0..=1`).
    pub kv_usage: f32,
    /// Scheduler utilisation (ratio).
    pub utilization: f32,
    /// `(Σ running + Σ waiting + reserved) / Σ max_running` over the engine's DP ranks
    /// (ratio); for a stale rank (its engine's is unknown) its own last report's
    /// `(running + waiting + reserved − ended) / max_running`; `None` when some rank's cap
    /// is missing or partial and the rank is not stale (`owner_pressure` then uses the old
    /// pressure `max(k, util)` fleet-wide).
    pub occupancy: Option<f32>,
    /// Prefill throughput (tokens/s; 0 = unknown, the configured default is used).
    pub prefill_tps: f32,
    /// Decode throughput (tokens/s; 0 = unknown): with
    /// [`decode_step_base_s`](Self::decode_step_base_s) 0, the engine's throughput shared
    /// by its batch (processor sharing); otherwise the per-sequence part of a step,
    /// inverted: a step of `n` decoding sequences lasts `decode_step_base_s + n/decode_tps`
    /// seconds (`kvroute_load::LoadSnapshot::decode_step_tps`).
    pub decode_tps: f32,
    /// Fixed part of a decode step (seconds, >= 0; 0 = processor sharing), from the
    /// engine's configured step model (`kvroute_load::LoadSnapshot::decode_step_base_s`).
    pub decode_step_base_s: f32,
    /// The router has seen more of the requests the slot's last report counts end
    /// ([`Reserved::finished`]) than it has reserved there since: its load is below that
    /// report. A slot whose telemetry is not fresh keeps its cost then, rather than the
    /// floor above the best fresh slot (`decide` module docs).
    pub below_report: bool,
}

impl SlotFigures {
    /// An idle, fresh worker holding nothing, with caps known (occupancy 0) and unknown
    /// throughputs.
    pub fn idle() -> Self {
        Self {
            validity: Validity::Fresh,
            overlap_blocks: 0.0,
            requests: 0.0,
            queued_tokens: 0.0,
            decode_tokens: 0.0,
            kv_usage: 0.0,
            utilization: 0.0,
            occupancy: Some(0.0),
            prefill_tps: 0.0,
            decode_tps: 0.0,
            decode_step_base_s: 0.0,
            below_report: false,
        }
    }
}

/// Fleet-wide figures over occupied slots, computed once per fill (scalar, shared by the
/// SIMD pass and the scalar reference).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Aggregates {
    /// Occupied slots.
    pub occupied: usize,
    /// Mean of `requests` over occupied slots (requests; 0 when none).
    pub mean_load: f32,
    /// Mean batch over occupied slots (requests; 0 when none): each slot's `requests`
    /// counted at most at its batch cap `requests / occupancy` (at least 1), as a slot can
    /// run no more, and in full where its occupancy is unknown (0 or NaN in the lane); each
    /// slot's figure rounded down to 1/1024 of a request, so that the sum is
    /// exact and every fill path gets the same bits. `projected_time`'s batch lift reads it:
    /// a worker far past its cap (a hot owner's queue) does not lift every other worker.
    pub mean_batch: f32,
    /// Mean KV usage over occupied slots (ratio, as the slots report it; 0 when none):
    /// each slot's `kv` lane rounded down to a multiple of 2⁻²⁰ (a NaN or negative one
    /// counts 0, one above 1 counts 1; a worker without a good report is published idle,
    /// so it counts 0), so that the sum is exact and every fill path gets
    /// the same bits. `projected_time`'s KV-bound switch reads it
    /// ([`ScoreConfig::kv_bound_usage`](crate::ScoreConfig::kv_bound_usage)).
    pub mean_kv_usage: f32,
    /// Largest `requests` (requests; ignores NaN; −inf when none).
    pub max_load: f32,
    /// Smallest `requests` (requests; ignores NaN; +inf when none).
    pub min_load: f32,
    /// Deepest overlap (blocks; ignores NaN; 0 when none).
    pub deepest: f32,
    /// The least trustworthy validity among occupied slots (`Fresh` when none).
    pub worst_validity: Validity,
    /// The least trustworthy validity among occupied slots whose occupancy is unknown, or
    /// `None` when every occupied slot's occupancy is known.
    pub occupancy_unknown: Option<Validity>,
}

/// Structure-of-arrays lanes of one decision; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Fleet {
    pub(crate) len: usize,
    pub(crate) occupied: Vec<f32>,
    pub(crate) overlap: Vec<f32>,
    pub(crate) requests: Vec<f32>,
    pub(crate) queued: Vec<f32>,
    pub(crate) decode: Vec<f32>,
    pub(crate) kv: Vec<f32>,
    pub(crate) util: Vec<f32>,
    pub(crate) occ: Vec<f32>,
    pub(crate) ptps: Vec<f32>,
    pub(crate) dtps: Vec<f32>,
    pub(crate) dbase: Vec<f32>,
    pub(crate) validity: Vec<Validity>,
    pub(crate) occ_known: Vec<bool>,
    /// Per slot: its occupancy is its own last report's (a stale rank, whose engine's is
    /// unknown), not its engine's.
    occ_own: Vec<bool>,
    /// Per slot: [`SlotFigures::below_report`].
    pub(crate) below_report: Vec<bool>,
    pub(crate) agg: Option<Aggregates>,
    /// Scratch of [`fill`](Self::fill): all ones where a slot is occupied, else 0.
    mask: Vec<u32>,
    /// Scratch of [`fill`](Self::fill): the slots holding reservations (those the last
    /// fill folded reservations into).
    reserved: Vec<(Slot, Reserved)>,
    /// What the lanes' snapshot-only part was computed from (`None`: nothing reusable).
    base: Option<BaseKey>,
    /// The aggregates of that part.
    base_agg: BaseAgg,
    /// The cost coefficients (module `coef`), when prepared.
    pub(crate) coef: Coefficients,
    /// Slots whose lanes (other than `overlap`) the last fill changed without rebuilding
    /// the base: those it restored and those it folded reservations into.
    pub(crate) touched: Vec<u32>,
    /// Whether the last fill rebuilt the base lanes (every slot changed).
    pub(crate) rebuilt: bool,
    /// The match's tail (`Overlaps::tail`) as the last fill read it: the slots that may
    /// hold more than `tail_bound` blocks (`None`: no bound known, as for a fleet made
    /// from figures).
    tail: Vec<u32>,
    tail_bound: Option<f32>,
    /// The sparse decision's order of the slots (module `sparse`), built with the
    /// coefficients.
    pub(crate) order: crate::sparse::Order,
    /// The match buffer of [`fill_with_matched`](Self::fill_with_matched).
    matched: Overlaps,
    /// Whether the `overlap` lane is out of date because the last fill was
    /// [`fill_with_matched`](Self::fill_with_matched) (the per-slot reads go to `matched`;
    /// [`convert_lane`](Self::convert_lane) brings the lane up to date).
    pub(crate) lane_deferred: bool,
}

impl Fleet {
    /// An empty fleet (no slot).
    pub fn new() -> Self {
        Self::default()
    }

    /// A fleet with one lane per entry of `slots` (`None` = vacant).
    pub fn from_slots(slots: &[Option<SlotFigures>]) -> Self {
        let mut f = Self::new();
        f.reset(slots.len());
        for (i, s) in slots.iter().enumerate() {
            if let Some(s) = s {
                f.set(i, s);
            }
        }
        f.finish();
        f
    }

    /// Slots (unpadded).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lane length: `len()` rounded up to [`LANE_PAD`].
    pub fn lane_len(&self) -> usize {
        self.occupied.len()
    }

    /// The fleet-wide aggregates.
    pub fn aggregates(&self) -> Aggregates {
        self.agg.unwrap_or(EMPTY_AGGREGATES)
    }

    /// Whether slot `i` is a candidate: occupied, and not excluded by the router
    /// ([`LoadSnapshot::excluded`]); `false` out of range.
    pub fn is_candidate(&self, i: usize) -> bool {
        self.occupied.get(i).is_some_and(|&o| o > 0.0)
    }

    /// Overlap of slot `i` (blocks; 0 for vacant or out of range), whether or not the
    /// `overlap` lane was converted after [`fill_with_matched`](Self::fill_with_matched).
    #[inline]
    pub fn overlap(&self, i: usize) -> f32 {
        if self.lane_deferred {
            if i < self.len && self.mask.get(i).is_some_and(|&m| m != 0) {
                self.matched.parts().get(i) as f32
            } else {
                0.0
            }
        } else {
            self.overlap.get(i).copied().unwrap_or(0.0)
        }
    }

    /// The match buffer (blocks per slot, [`Overlaps::parts`]) while the `overlap` lane is
    /// not converted, else `None`: an occupied slot's overlap is its value as `f32` (0 past
    /// the slots).
    #[inline(always)]
    pub(crate) fn deferred_overlaps(&self) -> Option<OverlapParts<'_>> {
        self.lane_deferred.then(|| self.matched.parts())
    }

    /// [`overlap`](Self::overlap) of an occupied slot `i < len` (the decisions' reads):
    /// the lane's value, or the match buffer's converted the same way (`u32` to `f32`; the
    /// lane's `i32` conversion gives the same value) while the lane is deferred.
    #[inline(always)]
    pub(crate) fn overlap_at(&self, i: usize) -> f32 {
        if self.lane_deferred {
            self.matched.parts().get(i) as f32
        } else {
            self.overlap[i]
        }
    }

    /// Requests of slot `i` (requests; 0 for vacant or out of range).
    pub fn requests(&self, i: usize) -> f32 {
        self.requests.get(i).copied().unwrap_or(0.0)
    }

    /// What the last [`fill`](Self::fill) read from the reservation table for slot `i`:
    /// its reserved requests and tokens, and the ended requests it subtracted from the
    /// report ([`Reserved::finished`]: those beyond the reservations the report's
    /// publication absorbed); zero for a fleet made from figures, a slot without any, or out of
    /// range. `O(log k)` in the `k` slots the fill folded in.
    #[inline]
    pub fn reserved_at(&self, i: usize) -> Reserved {
        self.reserved
            .binary_search_by_key(&i, |(slot, _)| slot.index())
            .map_or(Reserved::default(), |k| self.reserved[k].1)
    }

    /// The slots the last fill folded reservations into (occupied ones, in slot order).
    pub(crate) fn reserved_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.reserved
            .iter()
            .map(|(slot, _)| slot.index())
            .filter(|&i| self.mask.get(i).is_some_and(|&m| m != 0))
    }

    /// The tail of the last fill's overlaps: slots that may have an overlap lane above the
    /// bound, which bounds every other slot's (+∞ when none is known).
    pub(crate) fn tail(&self) -> (&[u32], f32) {
        (&self.tail, self.tail_bound.unwrap_or(f32::INFINITY))
    }

    /// Sets the tail a fill would read from a match (tests of the sparse decision).
    #[cfg(test)]
    pub(crate) fn set_tail_for_test(&mut self, slots: &[u32], bound: f32) {
        self.tail = slots.to_vec();
        self.tail_bound = Some(bound);
    }

    /// Every `f32` lane, for sizing them together.
    fn f32_lanes(&mut self) -> [&mut Vec<f32>; 11] {
        [
            &mut self.occupied,
            &mut self.overlap,
            &mut self.requests,
            &mut self.queued,
            &mut self.decode,
            &mut self.kv,
            &mut self.util,
            &mut self.occ,
            &mut self.ptps,
            &mut self.dtps,
            &mut self.dbase,
        ]
    }

    fn reset(&mut self, slots: usize) {
        let n = padded_len(slots);
        debug_assert_eq!(n % LANE_PAD, 0);
        self.len = slots;
        for lane in self.f32_lanes() {
            lane.clear();
            lane.resize(n, 0.0);
        }
        self.validity.clear();
        self.validity.resize(n, Validity::Vacant);
        self.occ_known.clear();
        self.occ_known.resize(n, false);
        self.occ_own.clear();
        self.occ_own.resize(n, false);
        self.below_report.clear();
        self.below_report.resize(n, false);
        self.agg = None;
        self.base = None;
        self.coef.key = None;
        self.order.key = None;
        self.tail.clear();
        self.tail_bound = None;
        self.lane_deferred = false;
    }

    /// Sizes the lanes for `slots` slots without clearing them (a fill writes every lane
    /// element, padding included); a no-op on lanes already that long.
    fn size(&mut self, slots: usize) {
        let n = padded_len(slots);
        self.len = slots;
        for lane in self.f32_lanes() {
            lane.resize(n, 0.0);
        }
        self.validity.resize(n, Validity::Vacant);
        self.occ_known.resize(n, false);
        self.occ_own.resize(n, false);
        self.below_report.resize(n, false);
        self.mask.resize(n, 0);
        self.agg = None;
        self.coef.key = None;
        self.order.key = None;
    }

    fn set(&mut self, i: usize, s: &SlotFigures) {
        if s.validity == Validity::Vacant {
            return;
        }
        self.occupied[i] = 1.0;
        self.overlap[i] = s.overlap_blocks;
        self.requests[i] = s.requests;
        self.queued[i] = s.queued_tokens;
        self.decode[i] = s.decode_tokens;
        self.kv[i] = s.kv_usage;
        self.util[i] = s.utilization;
        self.occ[i] = s.occupancy.unwrap_or(0.0);
        self.occ_known[i] = s.occupancy.is_some();
        self.ptps[i] = s.prefill_tps;
        self.dtps[i] = s.decode_tps;
        self.dbase[i] = s.decode_step_base_s;
        self.validity[i] = s.validity;
        self.below_report[i] = s.below_report;
    }

    fn finish(&mut self) {
        let mut a = EMPTY_AGGREGATES;
        let mut sum = 0.0f64;
        let mut batch = 0u64;
        let mut kv = 0u64;
        for i in 0..self.len {
            if self.occupied[i] == 0.0 {
                continue;
            }
            a.occupied += 1;
            let r = self.requests[i];
            sum += f64::from(r);
            batch += batch_units(r, self.occ[i]);
            kv += kv_units(self.kv[i]);
            if r > a.max_load {
                a.max_load = r;
            }
            if r < a.min_load {
                a.min_load = r;
            }
            if self.overlap[i] > a.deepest {
                a.deepest = self.overlap[i];
            }
            a.worst_validity = a.worst_validity.min(self.validity[i]);
            if !self.occ_known[i] {
                let v = self.validity[i];
                a.occupancy_unknown = Some(a.occupancy_unknown.map_or(v, |u| u.min(v)));
            }
        }
        if a.occupied > 0 {
            a.mean_load = (sum / a.occupied as f64) as f32;
            a.mean_batch = mean_of_units(batch, a.occupied);
            a.mean_kv_usage = mean_kv_of_units(kv, a.occupied);
        }
        self.agg = Some(a);
    }

    /// Fills the lanes for one decision from `snapshot` (loaded *before* this call reads the
    /// reservation counters, as the reconciliation rule requires), the live reservations of
    /// each slot's tenancy in `table`, and the request's `overlaps`.
    ///
    /// Token figures a slot's telemetry does not report are estimated from its request
    /// counts: queued = waiting × `tokens_per_request`, decode = running ×
    /// `tokens_per_request` (tokens). Occupancy adds this slot's reserved requests to its
    /// engine's DP-summed running + waiting, over the engine's summed caps; it is unknown
    /// when the engine's ranks are not all current ([`kvroute_load::EngineLoad::occupancy`]).
    /// A slot also has the requests its report counted that have since ended, beyond the
    /// reservations the report's publication absorbed ([`Reserved::finished`]), subtracted
    /// from its requests (at least 0);
    /// a stale one's occupancy, unknown for its engine, is its own last report's
    /// (`(running + waiting + reserved − ended) / max_running`, when that report gave a
    /// cap).
    ///
    /// Cost: the lanes that depend only on the snapshot (and `tokens_per_request`) are
    /// computed in one lane-wise pass (straight loops the compiler vectorises) when the
    /// snapshot differs from the previous fill's ([`LoadSnapshot::stamp`]), and kept
    /// otherwise: between publications a fill only restores the few slots the previous
    /// fill's reservations changed, converts the overlaps, makes one pass over the
    /// reservation table ([`ReservationTable::reserved_nonzero`]), folds in the slots holding
    /// reservations, and adjusts the kept aggregates for them. The result is the same
    /// either way (tests compare both with a per-slot reference).
    pub fn fill(
        &mut self,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        tokens_per_request: u32,
    ) {
        self.fill_as_of(snapshot, table, overlaps, tokens_per_request, false);
    }

    /// [`fill`](Self::fill), with every occupied slot's validity capped at
    /// [`Validity::Stale`] when `snapshot_stale`: the caller judged the whole snapshot too
    /// old to trust (the telemetry thread stopped publishing), so no slot's figures count
    /// as current, whatever the snapshot says. The cap is part of what the kept lanes were
    /// computed from, so a fill with the other value recomputes them.
    pub fn fill_as_of(
        &mut self,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        tokens_per_request: u32,
        snapshot_stale: bool,
    ) {
        self.fill_lanes(
            snapshot,
            table,
            overlaps,
            tokens_per_request,
            snapshot_stale,
        );
        // The coefficients (`prepare_costs`, `fill_with`) no longer describe every lane.
        if self.rebuilt || !self.touched.is_empty() {
            self.coef.key = None;
            self.order.key = None;
        }
    }

    /// [`fill_as_of`](Self::fill_as_of) without touching the cost coefficients: the
    /// caller brings them up to date from `touched` and `rebuilt`. Runs the copy compiled
    /// for AVX2 where [`SimdPath::active`] is [`SimdPath::Avx2`], the baseline copy
    /// otherwise (the same lanes bit for bit: integer moves, one `i32`/`u32` to `f32`
    /// conversion per slot, `max` and `+` in the same order).
    pub(crate) fn fill_lanes(
        &mut self,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        tokens_per_request: u32,
        snapshot_stale: bool,
    ) {
        self.fill_lanes_on(
            SimdPath::active(),
            snapshot,
            table,
            Some(overlaps),
            tokens_per_request,
            snapshot_stale,
            true,
        );
    }

    /// [`fill_lanes`](Self::fill_lanes) from the fleet's own match buffer
    /// ([`matched_mut`](Self::matched_mut)), the `overlap` lane left for
    /// [`convert_lane`](Self::convert_lane) (module docs of `decide`, `score_matched`).
    pub(crate) fn fill_lanes_matched(
        &mut self,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        tokens_per_request: u32,
        snapshot_stale: bool,
    ) {
        // `None`: the fleet's own match buffer (read in place, not moved out and back).
        self.fill_lanes_on(
            SimdPath::active(),
            snapshot,
            table,
            None,
            tokens_per_request,
            snapshot_stale,
            false,
        );
    }

    /// Brings the `overlap` lane up to date with the match buffer after
    /// [`fill_with_matched`](Self::fill_with_matched) (a no-op when it is): every slot's
    /// overlap converted to `f32`, 0 for a vacant slot, as [`fill`](Self::fill) writes it.
    pub fn convert_lane(&mut self) {
        if !self.lane_deferred {
            return;
        }
        let n = self.lane_len();
        let m = self.matched.len().min(self.len);
        convert_overlaps(&mut self.overlap[..n], &self.matched, &self.mask[..n], m);
        self.lane_deferred = false;
    }

    /// The buffer the fleet's overlaps are read from by
    /// [`fill_with_matched`](Self::fill_with_matched): a match writes into it
    /// (`RunIndex::match_prefix(hashes, fleet.matched_mut())`), then the fill reads it.
    pub fn matched_mut(&mut self) -> &mut Overlaps {
        &mut self.matched
    }

    /// The match buffer as the last [`fill_with_matched`](Self::fill_with_matched) read it
    /// (per slot in blocks, with its tail).
    pub fn matched(&self) -> &Overlaps {
        &self.matched
    }

    /// [`fill_lanes`](Self::fill_lanes) on the copy for `path` (`Avx2` where available;
    /// any other path, or `Avx2` where the CPU lacks it, runs the baseline copy), from
    /// `overlaps`, or from the fleet's own match buffer when `None`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fill_lanes_on(
        &mut self,
        path: SimdPath,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: Option<&Overlaps>,
        tokens_per_request: u32,
        snapshot_stale: bool,
        convert: bool,
    ) {
        let input = FillInput {
            snapshot,
            table,
            overlaps,
            tokens_per_request,
            snapshot_stale,
            convert,
        };
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if path == SimdPath::Avx2 && crate::avx2::available() {
            // SAFETY: `fill_lanes_avx2`'s only precondition is that the CPU supports AVX2,
            // BMI1 and POPCNT, which `available` just detected.
            unsafe { self.fill_lanes_avx2(input) };
            return;
        }
        let _ = path;
        self.fill_lanes_body(input);
    }

    /// The fill compiled for AVX2, BMI1 and POPCNT (eight overlaps converted per
    /// instruction instead of four).
    ///
    /// # Safety
    /// The CPU must support AVX2, BMI1 and POPCNT.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    #[target_feature(enable = "avx2,bmi1,popcnt")]
    unsafe fn fill_lanes_avx2(&mut self, input: FillInput<'_>) {
        self.fill_lanes_body(input);
    }

    /// The fill itself, inlined into each copy.
    #[inline(always)]
    fn fill_lanes_body(&mut self, input: FillInput<'_>) {
        let FillInput {
            snapshot,
            table,
            overlaps,
            tokens_per_request,
            snapshot_stale,
            convert,
        } = input;
        let len = snapshot.len();
        let key = BaseKey {
            stamp: snapshot.stamp(),
            slots: len,
            tokens_per_request,
            stale: snapshot_stale,
        };
        self.touched.clear();
        if key.stamp != 0 && self.base == Some(key) && self.lane_len() == padded_len(len) {
            self.restore_reserved(snapshot, tokens_per_request);
            self.rebuilt = false;
        } else {
            self.fill_base(snapshot, tokens_per_request, snapshot_stale);
            self.base = (key.stamp != 0).then_some(key);
            self.rebuilt = true;
        }
        let n = self.lane_len();
        let mask = &self.mask[..n];
        let overlaps = overlaps.unwrap_or(&self.matched);

        let m = overlaps.len().min(len);
        let deepest = if convert {
            self.lane_deferred = false;
            convert_overlaps(&mut self.overlap[..n], overlaps, mask, m)
        } else {
            // The lane is converted by the first reader that needs all of it
            // ([`convert_lane`](Self::convert_lane)); the deepest overlap is the same `f32`
            // either way.
            self.lane_deferred = true;
            masked_deepest(overlaps, mask, m)
        };
        let (tail, bound) = overlaps.tail();
        self.tail.clear();
        self.tail.extend(tail.iter().filter(|&&i| (i as usize) < m));
        // Converted as the lane is (the same `f32` either way up to `i32::MAX`): every
        // slot outside the tail has a lane value at most this.
        self.tail_bound = Some(if bound <= i32::MAX as u32 {
            (bound as i32) as f32
        } else {
            bound as f32
        });

        // Slots holding reservations (few): fold them in as the per-slot formula does, and
        // adjust the aggregates of the requests lane for them.
        let running = &snapshot.running()[..n];
        let waiting = &snapshot.waiting()[..n];
        let engine_requests = &snapshot.engine_requests()[..n];
        let engine_max_running = &snapshot.engine_max_running()[..n];
        let mut agg = self.base_agg;
        let (mut min_moved, mut max_moved) = (false, false);
        table.reserved_nonzero(&snapshot.generation()[..len], &mut self.reserved);
        for k in 0..self.reserved.len() {
            let (slot, r) = &mut self.reserved[k];
            let i = slot.index();
            if self.mask[i] == 0 {
                continue;
            }
            let r = *r;
            self.touched.push(slot.0);
            let before = self.requests[i];
            let batch_before = batch_units(before, self.occ[i]);
            let after = (u64::from(running[i]) + u64::from(waiting[i]) + r.requests)
                .saturating_sub(r.finished) as f32;
            self.requests[i] = after;
            self.below_report[i] = r.finished > r.requests;
            // Exact: both are integers below 2^53.
            agg.sum += f64::from(after) - f64::from(before);
            agg.max = if after > agg.max { after } else { agg.max };
            agg.min = if after < agg.min { after } else { agg.min };
            min_moved |= before == agg.min && after > before;
            max_moved |= before == agg.max && after < before;
            self.queued[i] += r.prefill_tokens as f32;
            self.decode[i] += r.decode_tokens as f32;
            if self.occ_own[i] {
                let max = snapshot.max_running()[i];
                self.occ[i] = own_occupancy(running[i], waiting[i], r.requests, r.finished, max);
            } else if self.occ_known[i] {
                let num = (engine_requests[i] + r.requests).saturating_sub(r.finished);
                self.occ[i] = (num as f64 / engine_max_running[i] as f64) as f32;
            }
            // Exact: integers.
            agg.batch = agg.batch.saturating_sub(batch_before) + batch_units(after, self.occ[i]);
        }
        if min_moved || max_moved {
            // A slot that was at the minimum rose, or one at the maximum fell: take both
            // again.
            let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
            for (r, m) in self.requests[..n].iter().zip(mask) {
                let lo = f32::from_bits(r.to_bits() & m | f32::INFINITY.to_bits() & !m);
                min = if lo < min { lo } else { min };
                let hi = f32::from_bits(r.to_bits() & m | f32::NEG_INFINITY.to_bits() & !m);
                max = if hi > max { hi } else { max };
            }
            agg.min = min;
            agg.max = max;
        }
        let mut a = self.base_aggregates(agg);
        a.deepest = deepest;
        self.agg = Some(a);
    }

    /// The lanes and aggregates that depend only on `snapshot` and `tokens_per_request`
    /// (every lane but `overlap`; requests, queued, decode and occupancy without
    /// reservations), in one lane-wise pass.
    fn fill_base(&mut self, snapshot: &LoadSnapshot, tokens_per_request: u32, stale: bool) {
        let len = snapshot.len();
        self.size(len);
        let n = self.lane_len();
        let tpr = tokens_per_request as f32;
        // Every snapshot lane has `padded_len(len)` elements, padding vacant and zero.
        let validity = &snapshot.validity()[..n];
        let reported = &snapshot.reported()[..n];
        let running = &snapshot.running()[..n];
        let waiting = &snapshot.waiting()[..n];
        let engine_max_running = &snapshot.engine_max_running()[..n];

        // Per-slot masks as all-ones / all-zero `u32`s, so every lane below is a branch-free
        // select: a vacant slot (and padding) reads 0.0 (+0) in every `f32` lane.
        self.validity[..n].copy_from_slice(validity);
        if stale {
            for v in &mut self.validity[..n] {
                *v = (*v).min(Validity::Stale);
            }
        }
        // A worker the router excluded (its requests fail) is no candidate: to the scorer
        // it is a vacant slot, in every lane, the aggregates and the fallback rules. Unless
        // every occupied slot is excluded: routing to a failing worker beats rejecting
        // every request (the fleet fails open).
        let excluded = &snapshot.excluded()[..n];
        let candidates = self.validity[..n]
            .iter()
            .zip(excluded)
            .any(|(v, &x)| *v != Validity::Vacant && !x);
        if candidates {
            for (v, &x) in self.validity[..n].iter_mut().zip(excluded) {
                if x {
                    *v = Validity::Vacant;
                }
            }
        }
        let mask = &mut self.mask[..n];
        for (m, v) in mask.iter_mut().zip(&self.validity[..n]) {
            *m = 0u32.wrapping_sub(u32::from(*v != Validity::Vacant));
        }
        let mask = &self.mask[..n];
        let one = 1.0f32.to_bits();
        for (o, m) in self.occupied[..n].iter_mut().zip(mask) {
            *o = f32::from_bits(one & m);
        }
        for (i, r) in self.requests[..n].iter_mut().enumerate() {
            *r = f32::from_bits(base_requests(running[i], waiting[i]).to_bits() & mask[i]);
        }
        for (dst, reported_lane, field, fallback, per_request) in [
            (
                &mut self.queued,
                snapshot.waiting_prefill_tokens(),
                Fields::PREFILL_TOKENS,
                waiting,
                snapshot.tokens_per_waiting(tpr),
            ),
            (
                &mut self.decode,
                snapshot.active_decode_tokens(),
                Fields::DECODE_TOKENS,
                running,
                snapshot.tokens_per_running(tpr),
            ),
        ] {
            let reported_lane = &reported_lane[..n];
            for (i, d) in dst[..n].iter_mut().enumerate() {
                let has = 0u32.wrapping_sub(u32::from(reported[i].0 & field.0 != 0));
                let from_report = (reported_lane[i] as f32).to_bits();
                let estimate = (fallback[i] as f32 * per_request).to_bits();
                *d = f32::from_bits(((from_report & has) | (estimate & !has)) & mask[i]);
            }
        }
        for (dst, src) in [
            (&mut self.kv, snapshot.kv_usage()),
            (&mut self.util, snapshot.utilization()),
            (&mut self.ptps, snapshot.prefill_tps()),
            (&mut self.dtps, snapshot.decode_step_tps()),
            (&mut self.dbase, snapshot.decode_step_base_s()),
        ] {
            for ((d, s), m) in dst[..n].iter_mut().zip(&src[..n]).zip(mask) {
                *d = f32::from_bits(s.to_bits() & m);
            }
        }
        // Occupancy is known where the engine's is; without reservations it is the
        // published `engine_occupancy` (the same quotient).
        let engine_occupancy = &snapshot.engine_occupancy()[..n];
        for (i, (occ, known_out)) in self.occ[..n]
            .iter_mut()
            .zip(&mut self.occ_known[..n])
            .enumerate()
        {
            let known = (mask[i] != 0) & (engine_max_running[i] != 0);
            *known_out = known;
            let k = 0u32.wrapping_sub(u32::from(known));
            *occ = f32::from_bits(engine_occupancy[i].to_bits() & k);
        }
        // A stale rank's engine has no occupancy (not every rank is current): the rank's
        // own last report gives what is known of it.
        let max_running = &snapshot.max_running()[..n];
        for i in 0..n {
            let own = !self.occ_known[i]
                && mask[i] != 0
                && self.validity[i] == Validity::Stale
                && max_running[i] != 0;
            self.occ_own[i] = own;
            if own {
                self.occ_known[i] = true;
                self.occ[i] = own_occupancy(running[i], waiting[i], 0, 0, max_running[i]);
            }
        }
        self.below_report[..n].fill(false);
        self.reserved.clear();
        self.base_agg = self.finish_base();
    }

    /// Puts back the snapshot's own figures in the slots the previous fill folded
    /// reservations into (the same formulas as [`fill_base`](Self::fill_base), per slot).
    fn restore_reserved(&mut self, snapshot: &LoadSnapshot, tokens_per_request: u32) {
        let tpr = tokens_per_request as f32;
        let reported = snapshot.reported();
        for &(slot, _) in &self.reserved {
            let i = slot.index();
            if self.mask[i] == 0 {
                continue;
            }
            self.touched.push(slot.0);
            let (running, waiting) = (snapshot.running()[i], snapshot.waiting()[i]);
            self.requests[i] = base_requests(running, waiting);
            self.queued[i] = if reported[i].contains(Fields::PREFILL_TOKENS) {
                snapshot.waiting_prefill_tokens()[i] as f32
            } else {
                waiting as f32 * snapshot.tokens_per_waiting(tpr)
            };
            self.decode[i] = if reported[i].contains(Fields::DECODE_TOKENS) {
                snapshot.active_decode_tokens()[i] as f32
            } else {
                running as f32 * snapshot.tokens_per_running(tpr)
            };
            self.occ[i] = if self.occ_own[i] {
                own_occupancy(running, waiting, 0, 0, snapshot.max_running()[i])
            } else if self.occ_known[i] {
                snapshot.engine_occupancy()[i]
            } else {
                0.0
            };
            self.below_report[i] = false;
        }
    }

    /// The snapshot-only aggregates of lanes written by [`fill_base`](Self::fill_base), in
    /// 8-wide independent accumulators. The same aggregates as [`finish`](Self::finish):
    /// there `requests` is never NaN or −0 (integers converted to `f32`), so max and min do
    /// not depend on the order, and its sum in `f64` is exact (below 2^53), so neither does
    /// the mean.
    fn finish_base(&self) -> BaseAgg {
        const W: usize = 8;
        let n = self.lane_len();
        let mut count = [0u32; W];
        let mut sum = [0f64; W];
        let mut max = [f32::NEG_INFINITY; W];
        let mut min = [f32::INFINITY; W];
        let mut worst = [Validity::Fresh as u8; W];
        let mut unknown = [u8::MAX; W];
        let lanes = self.mask[..n]
            .chunks_exact(W)
            .zip(self.requests[..n].chunks_exact(W))
            .zip(self.validity[..n].chunks_exact(W))
            .zip(self.occ_known[..n].chunks_exact(W));
        for (((mask, requests), validity), known) in lanes {
            for j in 0..W {
                let m = mask[j];
                let r = requests[j].to_bits();
                count[j] += m & 1;
                sum[j] += f64::from(f32::from_bits(r & m));
                let hi = f32::from_bits(r & m | f32::NEG_INFINITY.to_bits() & !m);
                max[j] = if hi > max[j] { hi } else { max[j] };
                let lo = f32::from_bits(r & m | f32::INFINITY.to_bits() & !m);
                min[j] = if lo < min[j] { lo } else { min[j] };
                // Slots left out of a minimum (vacant; known occupancy) read u8::MAX.
                let v = validity[j] as u8;
                let vm = m as u8;
                worst[j] = worst[j].min(v | !vm);
                let um = vm & !0u8.wrapping_sub(u8::from(known[j]));
                unknown[j] = unknown[j].min(v | !um);
            }
        }
        let mut batch = 0u64;
        let mut kv = 0u64;
        for i in 0..n {
            if self.mask[i] != 0 {
                batch += batch_units(self.requests[i], self.occ[i]);
                kv += kv_units(self.kv[i]);
            }
        }
        let occupied = count.iter().map(|&c| c as usize).sum();
        BaseAgg {
            occupied,
            sum: sum.iter().sum(),
            batch,
            mean_kv: if occupied > 0 {
                mean_kv_of_units(kv, occupied)
            } else {
                0.0
            },
            max: max
                .into_iter()
                .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a }),
            min: min
                .into_iter()
                .fold(f32::INFINITY, |a, b| if b < a { b } else { a }),
            worst: worst.into_iter().min().unwrap_or(u8::MAX),
            unknown: unknown.into_iter().min().unwrap_or(u8::MAX),
        }
    }

    /// The decision's aggregates from the (reservation-adjusted) requests aggregates;
    /// `deepest` is left 0 for the caller.
    fn base_aggregates(&self, b: BaseAgg) -> Aggregates {
        let validity = |v: u8| VALIDITIES.into_iter().find(|x| *x as u8 == v);
        let mut a = EMPTY_AGGREGATES;
        a.occupied = b.occupied;
        a.max_load = b.max;
        a.min_load = b.min;
        a.worst_validity = validity(b.worst).unwrap_or(Validity::Fresh);
        a.occupancy_unknown = validity(b.unknown);
        if b.occupied > 0 {
            a.mean_load = (b.sum / b.occupied as f64) as f32;
            a.mean_batch = mean_of_units(b.batch, b.occupied);
            a.mean_kv_usage = b.mean_kv;
        }
        a
    }
}

/// What one fill reads: the snapshot and the reservation table, the overlaps, the tokens a
/// request is assumed to generate, whether the snapshot is too old to trust, and whether
/// the overlap lane is converted now (else left for [`Fleet::convert_lane`]).
#[derive(Clone, Copy)]
struct FillInput<'a> {
    snapshot: &'a LoadSnapshot,
    table: &'a ReservationTable,
    /// The request's overlaps; `None`: the fleet's match buffer (`matched`).
    overlaps: Option<&'a Overlaps>,
    tokens_per_request: u32,
    snapshot_stale: bool,
    convert: bool,
}

/// The overlaps of slots `8c..8c + 8` of `p` (each below its length): the entries where
/// all eight are explicit, the word's depth eight times where none is, a per-slot choice
/// otherwise (a word of 64 slots holds eight such chunks).
#[inline(always)]
fn chunk_of(p: &OverlapParts<'_>, c: usize) -> [u32; 8] {
    let w = c / 8;
    let bits = (p.explicit()[w] >> ((c % 8) * 8)) as u8;
    let d = p.depths()[w];
    let mut x = [d; 8];
    if bits != 0 {
        let e = &p.entries()[c * 8..c * 8 + 8];
        for (j, (x, &e)) in x.iter_mut().zip(e).enumerate() {
            *x = if bits >> j & 1 != 0 { e } else { d };
        }
    }
    x
}

/// Writes the `overlap` lane (`lane`, the padded length) from the overlaps of the first
/// `m` slots of `overlaps`, 0 for a slot whose `mask` is 0 and past `m`, and returns its
/// maximum.
#[inline(always)]
fn convert_overlaps(lane: &mut [f32], overlaps: &Overlaps, mask: &[u32], m: usize) -> f32 {
    let ov = overlaps.parts();
    // Lanes are padded to a multiple of 8: independent accumulators of the largest
    // overlap lane (every lane is at least +0, so the maximum does not depend on the
    // order it is taken in).
    let mut deepest = [0f32; 8];
    if overlaps.deepest() <= i32::MAX as u32 {
        // Every overlap fits an `i32` (`deepest` is their maximum), where the conversion is
        // one instruction (`cvtdq2ps`) and gives the same `f32` as from the `u32`. Eight at
        // a time with the maximum taken as they are written.
        let whole = m / 8 * 8;
        let chunks = lane[..whole]
            .chunks_exact_mut(8)
            .zip(mask[..whole].chunks_exact(8))
            .enumerate();
        for (c, (o, k)) in chunks {
            let b = chunk_of(&ov, c);
            let mut x = [0f32; 8];
            for ((x, &b), &k) in x.iter_mut().zip(&b).zip(k) {
                *x = f32::from_bits(((b as i32) as f32).to_bits() & k);
            }
            o.copy_from_slice(&x);
            for (d, &x) in deepest.iter_mut().zip(&x) {
                *d = if x > *d { x } else { *d };
            }
        }
        for i in whole..m {
            let x = f32::from_bits(((ov.get(i) as i32) as f32).to_bits() & mask[i]);
            lane[i] = x;
            deepest[i % 8] = if x > deepest[i % 8] {
                x
            } else {
                deepest[i % 8]
            };
        }
    } else {
        for (i, (o, k)) in lane[..m].iter_mut().zip(mask).enumerate() {
            *o = f32::from_bits((ov.get(i) as f32).to_bits() & k);
        }
        for chunk in lane[..m].chunks(8) {
            for (d, &x) in deepest.iter_mut().zip(chunk) {
                *d = if x > *d { x } else { *d };
            }
        }
    }
    // The lanes past the overlaps read 0 (no change to the maximum).
    lane[m..].fill(0.0);
    deepest
        .into_iter()
        .fold(0.0, |d, x| if x > d { x } else { d })
}

/// The largest overlap among the first `m` slots of `overlaps` whose `mask` is set, as
/// `f32` (what [`convert_overlaps`] returns, without writing the lane). An occupied
/// [`Overlaps::deepest_slot`] holds the largest of all; otherwise, since every slot outside
/// the match's tail holds at most its bound, when an occupied tail slot holds more the
/// tail alone decides; otherwise one pass over the entries.
#[inline(always)]
fn masked_deepest(overlaps: &Overlaps, mask: &[u32], m: usize) -> f32 {
    if overlaps.deepest() == 0 {
        return 0.0;
    }
    let ov = overlaps.parts();
    // A known holder of the deepest overlap that is occupied: nothing holds more.
    if let Some(w) = overlaps.deepest_slot() {
        if w.index() < m && mask[w.index()] != 0 && ov.get(w.index()) == overlaps.deepest() {
            return overlaps.deepest() as f32;
        }
    }
    let (tail, bound) = overlaps.tail();
    let mut most = 0u32;
    for &i in tail {
        let i = i as usize;
        if i < m && mask[i] != 0 && ov.get(i) > most {
            most = ov.get(i);
        }
    }
    if most <= bound {
        // Eight independent maxima (one vector register where the copy has AVX2).
        let mut lanes = [0u32; 8];
        let whole = m / 8 * 8;
        for (c, k) in mask[..whole].chunks_exact(8).enumerate() {
            let o = chunk_of(&ov, c);
            for ((l, &o), &k) in lanes.iter_mut().zip(&o).zip(k) {
                let o = o & k;
                *l = if o > *l { o } else { *l };
            }
        }
        for (i, &k) in (whole..m).zip(&mask[whole..m]) {
            let o = ov.get(i) & k;
            most = if o > most { o } else { most };
        }
        most = lanes
            .into_iter()
            .fold(most, |a, b| if b > a { b } else { a });
    }
    most as f32
}

/// The aggregates of a fleet with no occupied slot (before any fill).
const EMPTY_AGGREGATES: Aggregates = Aggregates {
    occupied: 0,
    mean_load: 0.0,
    mean_batch: 0.0,
    mean_kv_usage: 0.0,
    max_load: f32::NEG_INFINITY,
    min_load: f32::INFINITY,
    deepest: 0.0,
    worst_validity: Validity::Fresh,
    occupancy_unknown: None,
};

/// Units of 1/1024 request in a slot's batch for [`Aggregates::mean_batch`]: `requests`
/// at most its cap `requests / occupancy` (at least 1) where the occupancy is positive,
/// else all of `requests` (occupancy unknown: 0 or NaN), rounded down to a unit (in `f64`;
/// down, so that a slot's own share never exceeds its `requests`: a fleet of one slot is
/// not lifted above itself; a NaN or negative `requests` counts 0; saturating at `u64::MAX / 2^16`, far above
/// any fleet's).
#[inline]
fn batch_units(requests: f32, occupancy: f32) -> u64 {
    let r = f64::from(requests);
    let o = f64::from(occupancy);
    let b = if o > 0.0 { r.min((r / o).max(1.0)) } else { r };
    let u = (b * 1024.0).floor();
    if u > 0.0 {
        u.min((u64::MAX >> 16) as f64) as u64
    } else {
        0
    }
}

/// The mean of `units` (1/1024 request each) over `occupied` slots (`occupied > 0`).
#[inline]
fn mean_of_units(units: u64, occupied: usize) -> f32 {
    (units as f64 / 1024.0 / occupied as f64) as f32
}

/// Units per 1.0 of KV usage in [`Aggregates::mean_kv_usage`] (2²⁰).
const KV_UNITS: f64 = 1_048_576.0;

/// Units of 2⁻²⁰ in a slot's KV usage for [`Aggregates::mean_kv_usage`]: `kv` rounded
/// down to a unit, 0 for a NaN or negative `kv`, at most 2²⁰ (a usage of 1: no engine
/// uses more than its whole KV, and a report above it cannot lift the fleet's mean past
/// 1), so that a sum over up to 2³³ slots is exact in `f64`.
#[inline]
fn kv_units(kv: f32) -> u64 {
    // The conversion truncates, which is the floor for the positive values it gets (no
    // `f64::floor`, a library call in the baseline x86-64 build).
    let u = f64::from(kv) * KV_UNITS;
    if u > 0.0 { u.min(KV_UNITS) as u64 } else { 0 }
}

/// One unit of [`kv_units`] as an `f32` (2⁻²⁰): the switch compares the mean with its
/// threshold less this, so that a fleet whose every slot reports exactly the threshold
/// (each rounded down by less than a unit) switches.
pub(crate) const KV_UNIT: f32 = (1.0 / KV_UNITS) as f32;

/// The mean KV usage of `units` (2⁻²⁰ each) over `occupied` slots (`occupied > 0`).
#[inline]
fn mean_kv_of_units(units: u64, occupied: usize) -> f32 {
    (units as f64 / KV_UNITS / occupied as f64) as f32
}

/// A stale rank's own occupancy: `(running + waiting + reserved − ended) / max_running` of
/// its last report (at least 0), rounded once to `f32` as the engine quotient is.
#[inline]
fn own_occupancy(running: u32, waiting: u32, reserved: u64, ended: u64, max_running: u32) -> f32 {
    let num = (u64::from(running) + u64::from(waiting) + reserved).saturating_sub(ended);
    (num as f64 / f64::from(max_running)) as f32
}

/// `running + waiting` as the `requests` lane holds it without reservations: exact in
/// `f64` (below 2^33), so one rounding to `f32`, as from the `u64` sum.
#[inline]
fn base_requests(running: u32, waiting: u32) -> f32 {
    (f64::from(running) + f64::from(waiting)) as f32
}

/// What the lanes' snapshot-only part was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BaseKey {
    /// [`LoadSnapshot::stamp`] (never 0 here).
    stamp: u64,
    /// Slots of the snapshot.
    slots: usize,
    /// Tokens per request of the estimates (tokens).
    tokens_per_request: u32,
    /// Whether every occupied slot's validity was capped at `Stale`.
    stale: bool,
}

/// Aggregates of the snapshot-only lanes (requests without reservations).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct BaseAgg {
    /// Occupied slots.
    occupied: usize,
    /// Sum of `requests` over occupied slots (exact in `f64`).
    sum: f64,
    /// Sum of [`batch_units`] over occupied slots (exact).
    batch: u64,
    /// [`Aggregates::mean_kv_usage`] (reservations do not change it: computed once per
    /// base, not per decision).
    mean_kv: f32,
    /// Largest `requests` (−inf when none).
    max: f32,
    /// Smallest `requests` (+inf when none).
    min: f32,
    /// Least trustworthy validity among occupied slots, as `u8` (`u8::MAX` when none).
    worst: u8,
    /// The same among occupied slots whose occupancy is unknown (`u8::MAX` when none).
    unknown: u8,
}

#[cfg(test)]
mod tests {
    use kvroute_core::{LoadSample, Nanos};
    use kvroute_core::{SlotGeneration, WorkerId};
    use kvroute_load::{EngineConfig, LoadConfig, LoadPublisher, LoadReader, Reservation, Work};

    use super::*;
    use crate::rng::NearTieRng;

    /// The per-slot fill the lane-wise one replaced, kept as its reference: one gathered
    /// [`kvroute_load::SlotLoad`] and one [`ReservationTable::reserved_for`] per slot.
    fn fill_per_slot(
        f: &mut Fleet,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        tokens_per_request: u32,
    ) {
        f.reset(snapshot.len());
        let tpr = tokens_per_request as f32;
        let ov = overlaps.to_vec();
        for i in 0..snapshot.len() {
            let slot = Slot(i as u32);
            let Some(s) = snapshot.slot(slot) else {
                continue;
            };
            let reserved = table.reserved_for(slot, s.generation).unwrap_or_default();
            // The per-request estimates, from the reporting slots by hand (the snapshot's
            // own method is what is checked).
            let per = |field: Fields,
                       tokens: fn(&kvroute_load::SlotLoad) -> u32,
                       count: fn(&kvroute_load::SlotLoad) -> u32| {
                let (mut sum, mut n) = (0f64, 0f64);
                for j in 0..snapshot.len() {
                    if let Some(o) = snapshot.slot(Slot(j as u32)) {
                        if o.validity == Validity::Fresh && o.reported.contains(field) {
                            sum += f64::from(tokens(&o));
                            n += f64::from(count(&o));
                        }
                    }
                }
                ((sum + f64::from(tpr)) / (n + 1.0)) as f32
            };
            let queued = if s.reported.contains(Fields::PREFILL_TOKENS) {
                s.waiting_prefill_tokens as f32
            } else {
                s.waiting as f32
                    * per(
                        Fields::PREFILL_TOKENS,
                        |o| o.waiting_prefill_tokens,
                        |o| o.waiting,
                    )
            };
            let decode = if s.reported.contains(Fields::DECODE_TOKENS) {
                s.active_decode_tokens as f32
            } else {
                s.running as f32
                    * per(
                        Fields::DECODE_TOKENS,
                        |o| o.active_decode_tokens,
                        |o| o.running,
                    )
            };
            let engine = snapshot.engine_of(slot).and_then(|e| {
                e.occupancy()?;
                let num =
                    (e.running + e.waiting + reserved.requests).saturating_sub(reserved.finished);
                Some((num as f64 / e.max_running as f64) as f32)
            });
            let own = (s.validity == Validity::Stale && s.max_running > 0).then(|| {
                let num = (u64::from(s.running) + u64::from(s.waiting) + reserved.requests)
                    .saturating_sub(reserved.finished);
                (num as f64 / f64::from(s.max_running)) as f32
            });
            let occupancy = engine.or(own);
            f.set(
                i,
                &SlotFigures {
                    validity: s.validity,
                    overlap_blocks: ov.get(i).copied().unwrap_or(0) as f32,
                    requests: (u64::from(s.running) + u64::from(s.waiting) + reserved.requests)
                        .saturating_sub(reserved.finished) as f32,
                    queued_tokens: queued + reserved.prefill_tokens as f32,
                    decode_tokens: decode + reserved.decode_tokens as f32,
                    kv_usage: s.kv_usage,
                    utilization: s.utilization,
                    occupancy,
                    prefill_tps: s.prefill_tps,
                    decode_tps: s.decode_step_tps,
                    decode_step_base_s: s.decode_step_base_s,
                    below_report: reserved.finished > reserved.requests,
                },
            );
        }
        f.finish();
    }

    fn bits(lane: &[f32]) -> Vec<u32> {
        lane.iter().map(|x| x.to_bits()).collect()
    }

    fn assert_same(a: &Fleet, b: &Fleet, what: &str) {
        assert_eq!(a.len, b.len, "{what}: len");
        for (name, x, y) in [
            ("occupied", &a.occupied, &b.occupied),
            ("overlap", &a.overlap, &b.overlap),
            ("requests", &a.requests, &b.requests),
            ("queued", &a.queued, &b.queued),
            ("decode", &a.decode, &b.decode),
            ("kv", &a.kv, &b.kv),
            ("util", &a.util, &b.util),
            ("occ", &a.occ, &b.occ),
            ("ptps", &a.ptps, &b.ptps),
            ("dtps", &a.dtps, &b.dtps),
            ("dbase", &a.dbase, &b.dbase),
        ] {
            assert_eq!(bits(x), bits(y), "{what}: lane {name}");
        }
        assert_eq!(a.validity, b.validity, "{what}: validity");
        assert_eq!(a.occ_known, b.occ_known, "{what}: occ_known");
        let n = a.len;
        assert_eq!(
            a.below_report[..n],
            b.below_report[..n],
            "{what}: below_report"
        );
        let (x, y) = (a.aggregates(), b.aggregates());
        assert_eq!(
            (x.occupied, x.worst_validity, x.occupancy_unknown),
            (y.occupied, y.worst_validity, y.occupancy_unknown),
            "{what}: aggregates"
        );
        for (name, p, q) in [
            ("mean", x.mean_load, y.mean_load),
            ("mean batch", x.mean_batch, y.mean_batch),
            ("mean KV usage", x.mean_kv_usage, y.mean_kv_usage),
            ("max", x.max_load, y.max_load),
            ("min", x.min_load, y.min_load),
            ("deepest", x.deepest, y.deepest),
        ] {
            assert_eq!(p.to_bits(), q.to_bits(), "{what}: aggregate {name}");
        }
    }

    fn pick(r: &mut NearTieRng, n: u64) -> u64 {
        r.next_u64() % n
    }

    fn opt_u32(r: &mut NearTieRng, max: u32) -> Option<u32> {
        (pick(r, 3) != 0).then(|| (r.next_u64() % (u64::from(max) + 1)) as u32)
    }

    fn opt_f32(r: &mut NearTieRng, max: f32) -> Option<f32> {
        (pick(r, 3) != 0).then(|| pick(r, 1_000) as f32 / 1_000.0 * max)
    }

    /// A random published fleet: vacant slots, engines of 1 to 3 DP ranks (some configured
    /// with more ranks than registered), missing, stale, invalid and fresh ranks, optional
    /// token and throughput fields, huge counts, and random live reservations, some on
    /// slots whose table tenancy differs from the snapshot's. Returns the reservations so
    /// they stay live.
    fn random_fill(seed: u64, cap: usize) -> Vec<Reservation> {
        let mut r = NearTieRng::new(seed);
        let (mut publisher, reader) = LoadPublisher::new(LoadConfig::new(cap)).unwrap();
        let table = ReservationTable::new(cap, ReservationTable::DEFAULT_TTL).unwrap();
        let now = Nanos::from_secs(100);
        let mut tenants = Vec::new();
        let mut i = 0;
        let mut engine = 0u64;
        while i < cap {
            if pick(&mut r, 5) == 0 {
                i += 1;
                continue;
            }
            let ranks = (1 + pick(&mut r, 3) as usize).min(cap - i);
            engine += 1;
            if pick(&mut r, 4) == 0 {
                let cfg = {
                    let mut c = EngineConfig::default();
                    c.dp_size = Some(ranks as u32 + pick(&mut r, 2) as u32);
                    c.decode_tps = opt_f32(&mut r, 2_000.0);
                    c.prefill_tps = opt_f32(&mut r, 9_000.0);
                    c
                };
                publisher.configure_engine(engine, cfg).unwrap();
            }
            for rank in 0..ranks {
                let slot = Slot((i + rank) as u32);
                let w = WorkerId::new(engine, rank as u32);
                let generation = SlotGeneration(1 + pick(&mut r, 3));
                publisher.add_worker(slot, w, generation).unwrap();
                let table_generation = if pick(&mut r, 8) == 0 {
                    SlotGeneration(generation.0 + 1)
                } else {
                    generation
                };
                table.add_worker(slot, table_generation, now).unwrap();
                tenants.push((slot, w, table_generation));
                let big = pick(&mut r, 10) == 0;
                let max = if big { u32::MAX } else { 64 };
                let sample = {
                    let mut c = LoadSample::new(
                        pick(&mut r, u64::from(max) + 1) as u32,
                        pick(&mut r, u64::from(max) + 1) as u32,
                        pick(&mut r, 65) as u32,
                        pick(&mut r, 1_001) as f32 / 1_000.0,
                    );
                    c.waiting_prefill_tokens = opt_u32(&mut r, if big { u32::MAX } else { 50_000 });
                    c.active_decode_tokens = opt_u32(&mut r, if big { u32::MAX } else { 90_000 });
                    c.decode_tps = opt_f32(&mut r, 2_000.0);
                    c.prefill_tps = opt_f32(&mut r, 9_000.0);
                    c.utilization = opt_f32(&mut r, 1.2);
                    c
                };
                let at = match pick(&mut r, 6) {
                    0 => None,
                    1 => Some(Nanos::from_secs(90)),
                    _ => Some(now),
                };
                if let Some(at) = at {
                    // Invalid samples (a zero cap) are rejected and counted; that is a case.
                    let _ = publisher.apply_sample(w, sample, at);
                }
            }
            i += ranks;
        }
        publisher.publish(now).unwrap();
        let mut guards = Vec::new();
        // Requests a report absorbed (reconciled) and of which some have ended since:
        // counted in the slot's `finished`, which the fill subtracts.
        for &(slot, _, generation) in &tenants {
            if pick(&mut r, 3) == 0 {
                let absorbed: Vec<Reservation> = (0..1 + pick(&mut r, 6))
                    .map(|_| {
                        table
                            .reserve(slot, generation, Work::default(), now)
                            .unwrap()
                    })
                    .collect();
                table.reconcile(slot, generation, Fields::REQUESTS);
                let ended = pick(&mut r, absorbed.len() as u64 + 1) as usize;
                let mut absorbed = absorbed;
                guards.extend(absorbed.split_off(ended));
            }
        }
        for &(slot, _, generation) in &tenants {
            for _ in 0..pick(&mut r, 4) {
                let work = Work {
                    prefill_tokens: pick(&mut r, 5_000) as u32,
                    decode_tokens: pick(&mut r, 3) as u32 * 777,
                };
                guards.push(table.reserve(slot, generation, work, now).unwrap());
            }
        }
        let ov_len = match pick(&mut r, 3) {
            0 => cap,
            1 => cap / 2,
            _ => cap + 5,
        };
        let overlaps = Overlaps::from_blocks(
            (0..ov_len)
                .map(|_| pick(&mut r, 4) as u32 * pick(&mut r, 300) as u32)
                .collect(),
        );
        let snap = reader.load();
        for tpr in [0, 1, 512, 3_001] {
            let mut reference = Fleet::new();
            fill_per_slot(&mut reference, &snap, &table, &overlaps, tpr);
            // Reused scratch: sized for another fleet first, so stale lanes would show.
            let mut lanes = Fleet::from_slots(&vec![Some(SlotFigures::idle()); cap * 2 + 3]);
            lanes.fill(&snap, &table, &overlaps, tpr);
            assert_same(
                &lanes,
                &reference,
                &format!("seed {seed} cap {cap} tpr {tpr}"),
            );
            lanes.fill(&snap, &table, &overlaps, tpr);
            assert_same(&lanes, &reference, &format!("refill seed {seed} cap {cap}"));
            // Each copy of the fill (baseline and, where the CPU has it, AVX2) alone.
            for path in [SimdPath::Portable, SimdPath::Avx2] {
                let mut own = Fleet::from_slots(&vec![Some(SlotFigures::idle()); cap + 1]);
                own.fill_lanes_on(path, &snap, &table, Some(&overlaps), tpr, false, true);
                assert_same(&own, &reference, &format!("{path} seed {seed} cap {cap}"));
            }
        }
        // The same snapshot again with other reservations and other overlaps: the fill
        // reuses its snapshot-only lanes and must still equal a fresh per-slot fill.
        let tpr = 512;
        let mut lanes = Fleet::new();
        lanes.fill(&snap, &table, &overlaps, tpr);
        // The same fills with the cost coefficients kept up to date between publications.
        let cfg = crate::ScoreConfig {
            tokens_per_request: tpr,
            ..Default::default()
        };
        let mut kept = Fleet::new();
        kept.fill_with(&snap, &table, &overlaps, &cfg, false);
        assert_coefficients_fresh(&kept, &cfg, "first fill_with");
        // The same fills from the fleet's own match buffer, its lane left unconverted.
        let mut matched = Fleet::new();
        for round in 0..3 {
            let keep = guards.len() / 2;
            guards.truncate(keep);
            for &(slot, _, generation) in &tenants {
                if pick(&mut r, 3) == 0 {
                    let work = Work {
                        prefill_tokens: pick(&mut r, 4_000) as u32,
                        decode_tokens: pick(&mut r, 2) as u32 * 501,
                    };
                    guards.push(table.reserve(slot, generation, work, now).unwrap());
                }
            }
            // The last round's overlaps pass `i32::MAX` (the fill converts them another way).
            let overlaps = Overlaps::from_blocks(
                (0..cap)
                    .map(|_| match round {
                        2 => (1u32 << 31) + pick(&mut r, 3) as u32 * 0x3fff_ffff,
                        _ => pick(&mut r, 3) as u32 * pick(&mut r, 200) as u32,
                    })
                    .collect(),
            );
            let mut reference = Fleet::new();
            fill_per_slot(&mut reference, &snap, &table, &overlaps, tpr);
            assert!(
                lanes.base.is_some(),
                "a published snapshot's lanes are kept"
            );
            lanes.fill(&snap, &table, &overlaps, tpr);
            assert_same(
                &lanes,
                &reference,
                &format!("reused lanes, seed {seed} cap {cap} round {round}"),
            );
            kept.fill_with(&snap, &table, &overlaps, &cfg, false);
            assert_same(&kept, &reference, &format!("fill_with, round {round}"));
            check_matched_fill(
                &mut matched,
                &kept,
                &reference,
                &snap,
                &table,
                &overlaps,
                &cfg,
            );
            assert!(kept.coef.key.is_some());
            assert_coefficients_fresh(&kept, &cfg, &format!("seed {seed} cap {cap} round {round}"));
        }
        // A plain fill that changes lanes leaves no coefficient that could be stale.
        drop(guards.pop());
        kept.fill(&snap, &table, &overlaps, tpr);
        if !kept.touched.is_empty() {
            assert!(
                kept.coef.key.is_none(),
                "a plain fill drops the coefficients"
            );
        }
        guards
    }

    /// `f`'s coefficients equal those `prepare_costs` computes from its lanes now, bit for
    /// bit (lanes and the irregular count).
    fn assert_coefficients_fresh(f: &Fleet, cfg: &crate::ScoreConfig, what: &str) {
        let mut fresh = f.clone();
        fresh.prepare_costs(cfg);
        let (a, b) = (&f.coef, &fresh.coef);
        assert_eq!(a.key, b.key, "{what}: key");
        for (name, x, y) in [
            ("spp", &a.spp, &b.spp),
            ("a", &a.a, &b.a),
            ("q1", &a.q1, &b.q1),
            ("cap", &a.cap, &b.cap),
            ("room", &a.room, &b.room),
            ("start", &a.start, &b.start),
            ("barrier", &a.barrier, &b.barrier),
            ("least", &a.least, &b.least),
        ] {
            assert_eq!(bits(x), bits(y), "{what}: coefficient {name}");
        }
        assert_eq!(a.irregular, b.irregular, "{what}: irregular slots");
    }

    /// `projected_time` enforce on a fleet kept by `fill_with` between publications (every
    /// worker fresh, the SIMD passes computing from the coefficients, the slots that
    /// reservations changed recomputed) decides as the scalar reference does, round after
    /// round of new and released reservations.
    /// `cap` fresh workers of 16 slots published at 100 s, their loads drawn from `r`
    /// (0-7 running, 0-3 waiting, queues of at most 0.5 s) and KV usage from `kv`, each
    /// registered in the reservation table too; the reader, the table and the slots.
    fn published(
        cap: usize,
        r: &mut NearTieRng,
        kv: impl Fn(&mut NearTieRng) -> f32,
    ) -> (LoadReader, ReservationTable, Vec<Slot>) {
        let (mut publisher, reader) = LoadPublisher::new(LoadConfig::new(cap)).unwrap();
        let table = ReservationTable::new(cap, ReservationTable::DEFAULT_TTL).unwrap();
        let now = Nanos::from_secs(100);
        let mut tenants = Vec::new();
        for i in 0..cap {
            let slot = Slot(i as u32);
            let w = WorkerId::new(i as u64, 0);
            publisher.add_worker(slot, w, SlotGeneration(1)).unwrap();
            table.add_worker(slot, SlotGeneration(1), now).unwrap();
            let mut sample = LoadSample::new(pick(r, 8) as u32, pick(r, 4) as u32, 16, kv(r));
            // Queues of at most 0.5 s: the least-load gap rarely passes the 2 s escape
            // margin, so the decisions mostly skip the least-load selection.
            sample.waiting_prefill_tokens = Some(pick(r, 2_000) as u32);
            sample.prefill_tps = Some(4_000.0 + pick(r, 8_000) as f32);
            publisher.apply_sample(w, sample, now).unwrap();
            tenants.push(slot);
        }
        publisher.publish(now).unwrap();
        (reader, table, tenants)
    }

    #[test]
    fn decisions_on_kept_coefficients_equal_the_reference() {
        let cap = 300;
        let mut r = NearTieRng::new(7);
        let (reader, table, tenants) = published(cap, &mut r, |r| pick(r, 500) as f32 / 1_000.0);
        let now = Nanos::from_secs(100);
        let snap = reader.load();
        let cfg = crate::ScoreConfig::default();
        let mut kept = Fleet::new();
        let mut scorer = crate::Scorer::new();
        // Heavy reservations on a few slots when the coefficients are first computed,
        // released before the first decision: only recomputing those slots gives their
        // costs now.
        let mut guards: Vec<Reservation> = (0..20)
            .map(|k| {
                let work = Work {
                    prefill_tokens: 60_000,
                    decode_tokens: 5_000,
                };
                table
                    .reserve(tenants[k * 7], SlotGeneration(1), work, now)
                    .unwrap()
            })
            .collect();
        let none = Overlaps::from_blocks(vec![0; cap]);
        kept.fill_with(&snap, &table, &none, &cfg, false);
        // The same fills from the fleet's own match buffer (the router's): decided by
        // `score_matched`, sparsely without converting the overlap lane where it can.
        let mut matched = Fleet::new();
        *matched.matched_mut() = none.clone();
        matched.fill_with_matched(&snap, &table, &cfg, false);
        let mut unconverted = 0;
        guards.clear();
        for round in 0..12 {
            let overlaps = Overlaps::from_blocks(
                (0..cap)
                    .map(|_| pick(&mut r, 2) as u32 * pick(&mut r, 100) as u32)
                    .collect(),
            );
            kept.fill_with(&snap, &table, &overlaps, &cfg, false);
            *matched.matched_mut() = overlaps.clone();
            matched.fill_with_matched(&snap, &table, &cfg, false);
            assert_eq!(
                format!("{:?}", matched.aggregates()),
                format!("{:?}", kept.aggregates()),
                "round {round}"
            );
            for cursor in 0..4 {
                let req = crate::ScoreRequest {
                    prompt_tokens: pick(&mut r, 4_000) as u32,
                    block_size: 16,
                    expected_output_tokens: pick(&mut r, 500) as u32,
                };
                let tie = crate::TieInput {
                    cursor,
                    random: None,
                };
                let got = scorer.score(&kept, req, &cfg, tie);
                let want = scorer.score_reference(&kept, req, &cfg, tie);
                assert!(got.same_as(&want), "round {round}: {got:?} vs {want:?}");
                // Refilled per decision (the router fills per attempt), so that each one
                // starts from the unconverted lane.
                matched.fill_with_matched(&snap, &table, &cfg, false);
                let on_buffer = scorer.score_matched(&mut matched, req, &cfg, tie);
                assert!(on_buffer.same_as(&want), "round {round}: {on_buffer:?}");
                if matched.lane_deferred {
                    assert!(scorer.sparse_decided);
                    unconverted += 1;
                }
                for i in 0..cap + 1 {
                    assert_eq!(matched.overlap(i).to_bits(), kept.overlap(i).to_bits());
                }
            }
            // More reservations each round, and some released.
            guards.truncate(guards.len() * 3 / 4);
            for _ in 0..10 {
                let slot = tenants[pick(&mut r, cap as u64) as usize];
                let work = Work {
                    prefill_tokens: pick(&mut r, 3_000) as u32,
                    decode_tokens: 100,
                };
                guards.push(table.reserve(slot, SlotGeneration(1), work, now).unwrap());
            }
        }
        // The unconverted lane served most decisions (the sparse path is exercised), and
        // converted afterwards it is the eager fill's.
        assert!(
            unconverted >= 24,
            "{unconverted} of 48 decisions without the lane"
        );
        matched.convert_lane();
        assert_same(&matched, &kept, "converted lane");
    }

    /// On a fleet whose mean KV usage reaches `kv_bound_usage` (every worker at 0.90-0.99;
    /// 0.9 by default), the router's path (`fill_with_matched`, then `score_matched`)
    /// never decides sparsely: it converts the overlap lane and decides by the blocks cost,
    /// the slot and cost `dynamo_cost` gives on the same fleet, with the reason
    /// `kv_bound`, as the scalar reference does. With the switch above the mean, the same
    /// fleet is decided by projected seconds again.
    #[test]
    fn a_kv_bound_fleet_is_decided_by_the_blocks_cost_on_every_path() {
        let cap = 200;
        let mut r = NearTieRng::new(19);
        let (reader, table, _) = published(cap, &mut r, |r| 0.9 + pick(r, 100) as f32 / 1_000.0);
        let snap = reader.load();
        let cfg = crate::ScoreConfig::default();
        let dynamo = crate::ScoreConfig::with_policy(crate::Policy::DynamoCost);
        let mut scorer = crate::Scorer::new();
        let mut matched = Fleet::new();
        for round in 0..8u32 {
            let overlaps = Overlaps::from_blocks(
                (0..cap)
                    .map(|_| pick(&mut r, 2) as u32 * pick(&mut r, 100) as u32)
                    .collect(),
            );
            *matched.matched_mut() = overlaps;
            matched.fill_with_matched(&snap, &table, &cfg, false);
            let mean = matched.aggregates().mean_kv_usage;
            assert!((0.9..1.0).contains(&mean), "mean KV usage {mean}");
            let req = crate::ScoreRequest {
                prompt_tokens: 800 + pick(&mut r, 3_000) as u32,
                block_size: 16,
                expected_output_tokens: pick(&mut r, 500) as u32,
            };
            let tie = crate::TieInput {
                cursor: round,
                random: None,
            };
            let got = scorer.score_matched(&mut matched, req, &cfg, tie);
            assert!(
                !scorer.sparse_decided && !matched.lane_deferred,
                "round {round}"
            );
            let want = scorer.score_reference(&matched, req, &cfg, tie);
            assert!(got.same_as(&want), "round {round}: {got:?} vs {want:?}");
            let blocks = scorer.score_reference(&matched, req, &dynamo, tie);
            assert_eq!(
                (got.slot, got.reason, got.cost.to_bits()),
                (blocks.slot, crate::Reason::KvBound, blocks.cost.to_bits()),
                "round {round}: {blocks:?}"
            );
            let mut above = cfg;
            above.kv_bound_usage = 1.0;
            let projected = scorer.score_reference(&matched, req, &above, tie);
            assert_ne!(projected.reason, crate::Reason::KvBound, "round {round}");
        }
    }

    /// `fill_with_matched` from `overlaps` against the eager fill `kept` of the same
    /// inputs and the per-slot `reference`: the same overlaps per slot and the same
    /// aggregates before the lane is converted, the same decisions whichever way the
    /// fleet is scored (`score_matched`, `score` on the unconverted fleet, `score` on the
    /// eager one), and the same lanes once converted.
    fn check_matched_fill(
        matched: &mut Fleet,
        kept: &Fleet,
        reference: &Fleet,
        snap: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        cfg: &crate::ScoreConfig,
    ) {
        *matched.matched_mut() = overlaps.clone();
        matched.fill_with_matched(snap, table, cfg, false);
        assert!(matched.lane_deferred || reference.len == 0);
        for i in 0..reference.len + 2 {
            assert_eq!(
                matched.overlap(i).to_bits(),
                reference.overlap(i).to_bits(),
                "slot {i}"
            );
        }
        assert_eq!(
            format!("{:?}", matched.aggregates()),
            format!("{:?}", reference.aggregates())
        );
        let req = crate::ScoreRequest {
            prompt_tokens: 2_048,
            block_size: 16,
            expected_output_tokens: 100,
        };
        for policy in [crate::Policy::default(), crate::Policy::LeastLoad] {
            let cfg = crate::ScoreConfig { policy, ..*cfg };
            for cursor in [0, 7] {
                let tie = crate::TieInput {
                    cursor,
                    random: None,
                };
                let want = format!("{:?}", crate::Scorer::new().score(kept, req, &cfg, tie));
                let unconverted =
                    format!("{:?}", crate::Scorer::new().score(matched, req, &cfg, tie));
                assert_eq!(
                    unconverted, want,
                    "score on the unconverted fleet, {policy:?}"
                );
                let mut copy = matched.clone();
                let got = crate::Scorer::new().score_matched(&mut copy, req, &cfg, tie);
                assert_eq!(format!("{got:?}"), want, "score_matched, {policy:?}");
            }
        }
        matched.convert_lane();
        assert!(!matched.lane_deferred);
        assert_same(matched, reference, "converted lane");
    }

    #[test]
    fn lane_wise_fill_equals_the_per_slot_fill() {
        for cap in [1, 2, 7, 16, 17, 64, 100, 513] {
            for seed in 0..24 {
                drop(random_fill(seed * 1_000 + cap as u64, cap));
            }
        }
    }

    /// The mean batch counts each slot at most at its cap `requests / occupancy`: a worker
    /// of 38 slots holding 147 requests (occupancy 147/38) counts 38, two holding 10
    /// (occupancy 10/38) count 10 each, one of unknown occupancy holding 5 counts 5, an idle
    /// one 0: (38 + 10 + 10 + 5 + 0)/5 = 12.6 requests, against the mean load's
    /// (147 + 10 + 10 + 5)/5 = 34.4. A worker of 4 slots holding 2 requests but with an
    /// occupancy of 2 (its engine full on its other DP ranks) counts its cap max(2/2, 1) = 1.
    #[test]
    fn mean_batch_counts_each_worker_at_most_at_its_cap() {
        let at = |requests: f32, occupancy: Option<f32>| {
            Some(SlotFigures {
                requests,
                occupancy,
                ..SlotFigures::idle()
            })
        };
        let f = Fleet::from_slots(&[
            at(147.0, Some(147.0 / 38.0)),
            at(10.0, Some(10.0 / 38.0)),
            at(10.0, Some(10.0 / 38.0)),
            at(5.0, None),
            at(0.0, Some(0.0)),
            None,
        ]);
        let a = f.aggregates();
        assert_eq!(a.occupied, 5);
        assert!((a.mean_batch - 12.6).abs() < 1e-3, "{a:?}");
        assert!((a.mean_load - 34.4).abs() < 1e-4, "{a:?}");
        let g = Fleet::from_slots(&[at(2.0, Some(2.0)), at(3.0, Some(0.5))]);
        // (1 + 3)/2: the second has room, all 3 count.
        assert!(
            (g.aggregates().mean_batch - 2.0).abs() < 1e-3,
            "{:?}",
            g.aggregates()
        );
    }
}
