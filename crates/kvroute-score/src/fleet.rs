//! The scorer's input: one request's view of every worker slot as structure-of-arrays
//! `f32` lanes, padded to [`LANE_PAD`], plus fleet-wide aggregates computed once.
//!
//! A [`Fleet`] is filled either from a published [`LoadSnapshot`], the live reservations
//! and the request's [`Overlaps`] ([`Fleet::fill`]), or from explicit per-slot figures
//! ([`Fleet::from_slots`], for tests and the simulator). It is reused across decisions:
//! filling allocates only when the slot count grows.

use kvroute_index::Slot;
use kvroute_index::index::Overlaps;
use kvroute_load::{Fields, LANE_PAD, LoadSnapshot, ReservationTable, Validity, padded_len};

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
    /// (ratio), `None` when some rank's cap is missing, partial or stale (incident B).
    pub occupancy: Option<f32>,
    /// Prefill throughput (tokens/s; 0 = unknown, the configured default is used).
    pub prefill_tps: f32,
    /// Decode throughput (tokens/s; 0 = unknown).
    pub decode_tps: f32,
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
    pub(crate) validity: Vec<Validity>,
    pub(crate) occ_known: Vec<bool>,
    pub(crate) agg: Option<Aggregates>,
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
        self.agg.unwrap_or(Aggregates {
            occupied: 0,
            mean_load: 0.0,
            max_load: f32::NEG_INFINITY,
            min_load: f32::INFINITY,
            deepest: 0.0,
            worst_validity: Validity::Fresh,
            occupancy_unknown: None,
        })
    }

    /// Overlap of slot `i` (blocks; 0 for vacant or out of range).
    pub fn overlap(&self, i: usize) -> f32 {
        self.overlap.get(i).copied().unwrap_or(0.0)
    }

    /// Requests of slot `i` (requests; 0 for vacant or out of range).
    pub fn requests(&self, i: usize) -> f32 {
        self.requests.get(i).copied().unwrap_or(0.0)
    }

    fn reset(&mut self, slots: usize) {
        let n = padded_len(slots);
        debug_assert_eq!(n % LANE_PAD, 0);
        self.len = slots;
        for lane in [
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
        ] {
            lane.clear();
            lane.resize(n, 0.0);
        }
        self.validity.clear();
        self.validity.resize(n, Validity::Vacant);
        self.occ_known.clear();
        self.occ_known.resize(n, false);
        self.agg = None;
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
        self.validity[i] = s.validity;
    }

    fn finish(&mut self) {
        let mut a = Fleet::new().aggregates();
        let mut sum = 0.0f64;
        for i in 0..self.len {
            if self.occupied[i] == 0.0 {
                continue;
            }
            a.occupied += 1;
            let r = self.requests[i];
            sum += f64::from(r);
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
    pub fn fill(
        &mut self,
        snapshot: &LoadSnapshot,
        table: &ReservationTable,
        overlaps: &Overlaps,
        tokens_per_request: u32,
    ) {
        self.reset(snapshot.len());
        let tpr = tokens_per_request as f32;
        let ov = overlaps.as_slice();
        for i in 0..snapshot.len() {
            let slot = Slot(i as u32);
            let Some(s) = snapshot.slot(slot) else {
                continue;
            };
            let reserved = table.reserved_for(slot, s.generation).unwrap_or_default();
            let queued = if s.reported.contains(Fields::PREFILL_TOKENS) {
                s.waiting_prefill_tokens as f32
            } else {
                s.waiting as f32 * tpr
            };
            let decode = if s.reported.contains(Fields::DECODE_TOKENS) {
                s.active_decode_tokens as f32
            } else {
                s.running as f32 * tpr
            };
            let occupancy = snapshot.engine_of(slot).and_then(|e| {
                e.occupancy()?;
                let num = e.running + e.waiting + reserved.requests;
                Some((num as f64 / e.max_running as f64) as f32)
            });
            self.set(
                i,
                &SlotFigures {
                    validity: s.validity,
                    overlap_blocks: ov.get(i).copied().unwrap_or(0) as f32,
                    requests: (u64::from(s.running) + u64::from(s.waiting) + reserved.requests)
                        as f32,
                    queued_tokens: queued + reserved.prefill_tokens as f32,
                    decode_tokens: decode + reserved.decode_tokens as f32,
                    kv_usage: s.kv_usage,
                    utilization: s.utilization,
                    occupancy,
                    prefill_tps: s.prefill_tps,
                    decode_tps: s.decode_tps,
                },
            );
        }
        self.finish();
    }
}
