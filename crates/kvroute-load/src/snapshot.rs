//! The published load snapshot: one immutable structure of arrays per publication.
//!
//! Every lane has one element per slot (`0..len()`), padded with zeros to
//! [`lane_len()`](LoadSnapshot::lane_len) (a multiple of `LANE_PAD` (16)) so a
//! SIMD pass runs over whole vectors. All lanes of one snapshot come from the same
//! publication: a reader that loaded it sees no figure from any other.
//!
//! Lanes of a slot whose validity is not current ([`Validity::is_current`]) keep its last
//! good figures (or zeros if there are none); consumers decide by validity what to do.

use kvroute_core::{Slot, SlotGeneration, WorkerId};

use crate::lanes::{Validity, padded_len};
use kvroute_core::Fields;
use kvroute_core::Nanos;

/// Marks a slot with no engine in the [`LoadSnapshot::engine_index`] lane.
pub const NO_ENGINE: u32 = u32::MAX;

/// The figures of one engine (all DP ranks sharing a `engine_id`), summed over its ranks
/// whose own figures are current.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EngineLoad {
    /// The engine.
    pub engine_id: u64,
    /// DP ranks expected: the configured `dp_size`, or the number registered when none is
    /// configured.
    pub dp_size: u32,
    /// DP ranks registered.
    pub ranks_registered: u32,
    /// DP ranks whose own figures are current (fresh and valid).
    pub ranks_current: u32,
    /// Running requests summed over current ranks (requests).
    pub running: u64,
    /// Waiting requests summed over current ranks (requests).
    pub waiting: u64,
    /// Scheduler caps summed over current ranks (requests).
    pub max_running: u64,
}

impl EngineLoad {
    /// Whether every expected rank is registered and current, so the sums cover the whole
    /// engine.
    pub fn is_complete(&self) -> bool {
        self.ranks_registered >= self.dp_size && self.ranks_current == self.ranks_registered
    }

    /// Scheduler occupancy `(running + waiting) / max_running` over all ranks (a ratio; above
    /// 1 when requests queue), or `None` unless [`is_complete`](Self::is_complete) (caps are
    /// summed across DP ranks, and a partial sum is not used).
    pub fn occupancy(&self) -> Option<f32> {
        (self.is_complete() && self.max_running > 0)
            .then(|| ((self.running + self.waiting) as f64 / self.max_running as f64) as f32)
    }
}

/// Counters of the publisher, copied into every snapshot (monotonic since construction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Samples accepted (one per rank of a whole update).
    pub samples_applied: u64,
    /// Updates rejected for bad values (each also marks its ranks invalid).
    pub rejected_invalid: u64,
    /// Updates rejected because the worker is not registered (or the update is empty).
    pub rejected_unknown: u64,
    /// Reports dropped because newer figures were already held.
    pub rejected_superseded: u64,
    /// Publications made.
    pub publications: u64,
    /// Publications skipped because every spare buffer was pinned by readers.
    pub publish_pinned: u64,
    /// Reports refused, or figures dropped at the first publication, for a time too far
    /// ahead of the publisher's clock (`LoadConfig::max_clock_lead`).
    pub rejected_future: u64,
    /// Publications refused for a time too far ahead of the publisher's clock.
    pub publish_future: u64,
}

/// One slot's figures gathered from the lanes (a scalar view for tests and slow paths).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlotLoad {
    /// The worker in the slot.
    pub worker: WorkerId,
    /// Its tenancy.
    pub generation: SlotGeneration,
    /// How far the figures can be trusted.
    pub validity: Validity,
    /// Which fields telemetry (or configuration, for throughputs) supplied.
    pub reported: Fields,
    /// Running requests.
    pub running: u32,
    /// Waiting requests.
    pub waiting: u32,
    /// Scheduler cap (requests; 0 before the first good report).
    pub max_running: u32,
    /// KV usage, `0.0..=1.0`.
    pub kv_usage: f32,
    /// Waiting uncached prefill tokens (tokens): the report's, less what the engine has
    /// prefilled between the report's observation and the publication at its prefill
    /// throughput, within what its scheduler cap lets start (module `drain` of this crate:
    /// the rule and why).
    pub waiting_prefill_tokens: u32,
    /// Active decode tokens (tokens).
    pub active_decode_tokens: u32,
    /// Decode throughput (tokens/s).
    pub decode_tps: f32,
    /// Fixed part of a decode step (seconds; 0 = processor sharing), see
    /// [`LoadSnapshot::decode_step_base_s`].
    pub decode_step_base_s: f32,
    /// Per-sequence part of a decode step, inverted (tokens/s; 0 = unknown), see
    /// [`LoadSnapshot::decode_step_tps`].
    pub decode_step_tps: f32,
    /// Prefill throughput (tokens/s).
    pub prefill_tps: f32,
    /// Scheduler utilisation (ratio).
    pub utilization: f32,
    /// When the figures were observed, on the caller's clock (zero when none).
    pub observed_at: Nanos,
}

/// An immutable structure-of-arrays load snapshot; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct LoadSnapshot {
    pub(crate) seq: u64,
    pub(crate) stamp: u64,
    pub(crate) published_at: Nanos,
    pub(crate) slots: usize,
    pub(crate) running: Vec<u32>,
    pub(crate) waiting: Vec<u32>,
    pub(crate) max_running: Vec<u32>,
    pub(crate) waiting_prefill_tokens: Vec<u32>,
    pub(crate) active_decode_tokens: Vec<u32>,
    pub(crate) kv_usage: Vec<f32>,
    pub(crate) utilization: Vec<f32>,
    pub(crate) decode_tps: Vec<f32>,
    pub(crate) decode_step_base_s: Vec<f32>,
    pub(crate) decode_step_tps: Vec<f32>,
    pub(crate) prefill_tps: Vec<f32>,
    pub(crate) engine_occupancy: Vec<f32>,
    pub(crate) engine_requests: Vec<u64>,
    pub(crate) engine_max_running: Vec<u64>,
    pub(crate) validity: Vec<Validity>,
    pub(crate) excluded: Vec<bool>,
    pub(crate) reported: Vec<Fields>,
    pub(crate) observed_at: Vec<Nanos>,
    pub(crate) generation: Vec<u64>,
    pub(crate) worker: Vec<Option<WorkerId>>,
    pub(crate) engine_index: Vec<u32>,
    pub(crate) engines: Vec<EngineLoad>,
    pub(crate) stats: LoadStats,
    pub(crate) reported_tokens: ReportedTokens,
}

/// The token figures the fresh slots that report them add up to, per request: what a slot
/// that reports only request counts is estimated from ([`LoadSnapshot::tokens_per_waiting`],
/// [`LoadSnapshot::tokens_per_running`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReportedTokens {
    /// Sum of `waiting_prefill_tokens` over fresh slots reporting them (tokens).
    pub prefill_tokens: u64,
    /// Sum of `waiting` over the same slots (requests).
    pub waiting: u64,
    /// Sum of `active_decode_tokens` over fresh slots reporting them (tokens).
    pub decode_tokens: u64,
    /// Sum of `running` over the same slots (requests).
    pub running: u64,
    /// Fresh slots reporting `waiting_prefill_tokens`.
    pub prefill_slots: u32,
    /// Fresh slots reporting `active_decode_tokens`.
    pub decode_slots: u32,
}

impl ReportedTokens {
    /// The sums over `snap`'s fresh slots (validity [`Validity::Fresh`]) whose report has the
    /// field.
    pub(crate) fn of(snap: &LoadSnapshot) -> Self {
        let mut t = Self::default();
        for i in 0..snap.slots {
            if snap.validity[i] != Validity::Fresh {
                continue;
            }
            let r = snap.reported[i];
            if r.contains(Fields::PREFILL_TOKENS) {
                t.prefill_tokens += u64::from(snap.waiting_prefill_tokens[i]);
                t.waiting += u64::from(snap.waiting[i]);
                t.prefill_slots += 1;
            }
            if r.contains(Fields::DECODE_TOKENS) {
                t.decode_tokens += u64::from(snap.active_decode_tokens[i]);
                t.running += u64::from(snap.running[i]);
                t.decode_slots += 1;
            }
        }
        t
    }

    /// The token fields some fresh slot reports, whose per-request estimate therefore
    /// comes from the fleet's reports (with the configured prior counted as one more
    /// request) rather than from the prior alone: what a counts-only report reconciles
    /// besides its requests (`reconcile.rs`, "Fields a report estimates"). A property of
    /// which slots report what, not of how many requests they hold at the moment, so it
    /// changes only when a reporting slot goes stale or comes back.
    pub(crate) fn measured(&self) -> Fields {
        let mut f = Fields::NONE;
        if self.prefill_slots > 0 {
            f = f.union(Fields::PREFILL_TOKENS);
        }
        if self.decode_slots > 0 {
            f = f.union(Fields::DECODE_TOKENS);
        }
        f
    }
}

/// `(sum + prior) / (count + 1)`: the mean of `count` observations summing to `sum` with
/// `prior` counted as one more (tokens per request).
fn shrunk_mean(sum: u64, count: u64, prior: f32) -> f32 {
    ((sum as f64 + f64::from(prior)) / (count as f64 + 1.0)) as f32
}

impl LoadSnapshot {
    /// An empty snapshot (every slot vacant) for `slots` slots, lanes allocated and padded.
    pub fn empty(slots: usize) -> Self {
        let n = padded_len(slots);
        Self {
            seq: 0,
            stamp: 0,
            published_at: Nanos::ZERO,
            slots,
            running: vec![0; n],
            waiting: vec![0; n],
            max_running: vec![0; n],
            waiting_prefill_tokens: vec![0; n],
            active_decode_tokens: vec![0; n],
            kv_usage: vec![0.0; n],
            utilization: vec![0.0; n],
            decode_tps: vec![0.0; n],
            decode_step_base_s: vec![0.0; n],
            decode_step_tps: vec![0.0; n],
            prefill_tps: vec![0.0; n],
            engine_occupancy: vec![0.0; n],
            engine_requests: vec![0; n],
            engine_max_running: vec![0; n],
            validity: vec![Validity::Vacant; n],
            excluded: vec![false; n],
            reported: vec![Fields::NONE; n],
            observed_at: vec![Nanos::ZERO; n],
            generation: vec![0; n],
            worker: vec![None; n],
            engine_index: vec![NO_ENGINE; n],
            engines: Vec::new(),
            stats: LoadStats::default(),
            reported_tokens: ReportedTokens::default(),
        }
    }

    /// Publication number (0 for the initial empty snapshot).
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// A number unique in the process to the publication that made this snapshot, from
    /// any publisher (0 for a snapshot no publication made, such as [`Self::empty`]). Two
    /// snapshots with the same nonzero stamp hold the same figures, so a consumer may cache
    /// what it derives from a snapshot under its stamp (the scorer's lanes do).
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// The caller's time passed to the publication that made this snapshot.
    pub fn published_at(&self) -> Nanos {
        self.published_at
    }
    /// Number of slots (unpadded).
    pub fn len(&self) -> usize {
        self.slots
    }
    /// Whether the snapshot has no slot.
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }
    /// Length of every lane (slots rounded up to `LANE_PAD` (16)).
    pub fn lane_len(&self) -> usize {
        self.running.len()
    }
    /// Running requests per slot (requests).
    pub fn running(&self) -> &[u32] {
        &self.running
    }
    /// Waiting requests per slot (requests).
    pub fn waiting(&self) -> &[u32] {
        &self.waiting
    }
    /// Scheduler cap per slot (requests; 0 when unknown).
    pub fn max_running(&self) -> &[u32] {
        &self.max_running
    }
    /// Waiting uncached prefill tokens per slot (tokens; 0 when not reported), aged to
    /// [`published_at`](Self::published_at): the report's figure less what the engine has
    /// prefilled since [`observed_at`](Self::observed_at) at its prefill throughput, within
    /// what its scheduler cap lets start (`Q − min(drainable, age·π)`, `drainable` all of
    /// `Q` with nothing waiting, `Q·min(1, (M − r)/w)` with `w` waiting under a known cap
    /// `M`, else 0); as reported where no prefill throughput is known.
    pub fn waiting_prefill_tokens(&self) -> &[u32] {
        &self.waiting_prefill_tokens
    }

    /// Prefill tokens to assume per waiting request of a slot whose report has no token
    /// figures (vLLM's Prometheus gauges carry request counts only), given the configured
    /// figure `prior` (tokens): the mean over this publication's fresh slots that report
    /// them, `(Σ waiting_prefill_tokens + prior) / (Σ waiting + 1)`, the configured figure
    /// counted as one more request. Where no slot reports them it is `prior` itself, as
    /// before any report. The slots that report and those that do not serve one router's
    /// traffic, so the reporting slots' queue per waiting request is the best evidence of
    /// the others'; estimating the two halves of a mixed fleet on different bases (a fixed
    /// figure against the engines' own counts) made the half with the lower figure look
    /// idler and take more than its share (`docs/RESULTS.md`, "partial-telemetry").
    pub fn tokens_per_waiting(&self, prior: f32) -> f32 {
        let t = &self.reported_tokens;
        shrunk_mean(t.prefill_tokens, t.waiting, prior)
    }

    /// Active decode tokens to assume per running request of a slot whose report has no
    /// token figures, given the configured figure `prior` (tokens): as
    /// [`tokens_per_waiting`](Self::tokens_per_waiting), from the fresh slots' reported
    /// `active_decode_tokens` and `running`.
    pub fn tokens_per_running(&self, prior: f32) -> f32 {
        let t = &self.reported_tokens;
        shrunk_mean(t.decode_tokens, t.running, prior)
    }
    /// Active decode tokens per slot (tokens; 0 when not reported).
    pub fn active_decode_tokens(&self) -> &[u32] {
        &self.active_decode_tokens
    }
    /// KV usage per slot (`0.0..=1.0`).
    pub fn kv_usage(&self) -> &[f32] {
        &self.kv_usage
    }
    /// Scheduler utilisation per slot (ratio; 0 when not reported).
    pub fn utilization(&self) -> &[f32] {
        &self.utilization
    }
    /// Decode throughput per slot (tokens/s; telemetry, else the engine's configured value,
    /// else 0).
    pub fn decode_tps(&self) -> &[f32] {
        &self.decode_tps
    }
    /// The fixed part of a decode step per slot (seconds): a step of `n` decoding
    /// sequences lasts `decode_step_base_s + n / decode_step_tps`. From the engine's
    /// configured single-sequence speed and full-batch throughput
    /// (`EngineConfig::single_sequence_decode_tps`); 0 where they are not both configured
    /// (processor sharing: the step grows in proportion to the batch).
    pub fn decode_step_base_s(&self) -> &[f32] {
        &self.decode_step_base_s
    }
    /// The per-sequence part of a decode step per slot, inverted (tokens/s): one more
    /// decoding sequence lengthens a step by `1 / decode_step_tps` seconds. With
    /// [`decode_step_base_s`](Self::decode_step_base_s) 0 it is the decode throughput
    /// (telemetry, else configured; 0 when unknown).
    pub fn decode_step_tps(&self) -> &[f32] {
        &self.decode_step_tps
    }
    /// Prefill throughput per slot (tokens/s; telemetry, else configured, else 0).
    pub fn prefill_tps(&self) -> &[f32] {
        &self.prefill_tps
    }
    /// The slot's engine occupancy `(Σ running + Σ waiting) / Σ max_running` over all DP
    /// ranks of its engine (ratio), or 0 where [`EngineLoad::occupancy`] is `None`.
    pub fn engine_occupancy(&self) -> &[f32] {
        &self.engine_occupancy
    }
    /// The slot's engine's `Σ running + Σ waiting` over all DP ranks (requests), where
    /// [`EngineLoad::occupancy`] is known, else 0 (so the numerator of
    /// [`engine_occupancy`](Self::engine_occupancy), broadcast to the engine's slots).
    pub fn engine_requests(&self) -> &[u64] {
        &self.engine_requests
    }
    /// The slot's engine's `Σ max_running` over all DP ranks (requests), where
    /// [`EngineLoad::occupancy`] is known, else 0: nonzero exactly when the engine's
    /// occupancy is known (the denominator of [`engine_occupancy`](Self::engine_occupancy)).
    pub fn engine_max_running(&self) -> &[u64] {
        &self.engine_max_running
    }
    /// Validity per slot. A slot is occupied exactly when its validity is not
    /// [`Validity::Vacant`].
    pub fn validity(&self) -> &[Validity] {
        &self.validity
    }
    /// Per slot, whether the router took the worker out of the candidates
    /// ([`LoadPublisher::set_excluded`](crate::LoadPublisher::set_excluded): its requests
    /// fail); its figures and validity are still the telemetry's. `false` for vacant slots
    /// and padding.
    pub fn excluded(&self) -> &[bool] {
        &self.excluded
    }
    /// Fields supplied per slot.
    pub fn reported(&self) -> &[Fields] {
        &self.reported
    }
    /// Tenancy per slot: the [`SlotGeneration`] number of the worker in it (0 for vacant
    /// slots and padding).
    pub fn generation(&self) -> &[u64] {
        &self.generation
    }
    /// Observation time per slot (caller's clock; zero when none).
    pub fn observed_at(&self) -> &[Nanos] {
        &self.observed_at
    }
    /// Index into [`engines`](Self::engines) per slot ([`NO_ENGINE`] for vacant slots).
    pub fn engine_index(&self) -> &[u32] {
        &self.engine_index
    }
    /// Every engine with at least one registered rank, by ascending `engine_id`.
    pub fn engines(&self) -> &[EngineLoad] {
        &self.engines
    }
    /// The publisher's counters at publication time.
    pub fn stats(&self) -> LoadStats {
        self.stats
    }

    /// The worker in `slot` and its tenancy, if the slot is occupied.
    pub fn tenant(&self, slot: Slot) -> Option<(WorkerId, SlotGeneration)> {
        let i = slot.index();
        if i >= self.slots {
            return None;
        }
        self.worker[i].map(|w| (w, SlotGeneration(self.generation[i])))
    }

    /// The engine of the worker in `slot`.
    pub fn engine_of(&self, slot: Slot) -> Option<&EngineLoad> {
        let e = *self.engine_index.get(slot.index())?;
        self.engines.get(e as usize)
    }

    /// One slot's figures, or `None` for a vacant or out-of-range slot.
    pub fn slot(&self, slot: Slot) -> Option<SlotLoad> {
        let (worker, generation) = self.tenant(slot)?;
        let i = slot.index();
        Some(SlotLoad {
            worker,
            generation,
            validity: self.validity[i],
            reported: self.reported[i],
            running: self.running[i],
            waiting: self.waiting[i],
            max_running: self.max_running[i],
            kv_usage: self.kv_usage[i],
            waiting_prefill_tokens: self.waiting_prefill_tokens[i],
            active_decode_tokens: self.active_decode_tokens[i],
            decode_tps: self.decode_tps[i],
            decode_step_base_s: self.decode_step_base_s[i],
            decode_step_tps: self.decode_step_tps[i],
            prefill_tps: self.prefill_tps[i],
            utilization: self.utilization[i],
            observed_at: self.observed_at[i],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_snapshot_is_padded_and_vacant() {
        let s = LoadSnapshot::empty(20);
        assert_eq!(s.len(), 20);
        assert_eq!(s.lane_len(), 32);
        assert!(s.validity().iter().all(|v| *v == Validity::Vacant));
        assert_eq!(s.slot(Slot(3)), None);
        assert_eq!(s.slot(Slot(40)), None);
        assert_eq!(s.engine_of(Slot(0)), None);
    }

    #[test]
    fn engine_occupancy_needs_every_rank() {
        let mut e = EngineLoad {
            engine_id: 1,
            dp_size: 2,
            ranks_registered: 2,
            ranks_current: 2,
            running: 30,
            waiting: 44,
            max_running: 74,
        };
        // (30 + 44) / 74 = 1.0
        assert_eq!(e.occupancy(), Some(1.0));
        e.ranks_current = 1;
        assert_eq!(e.occupancy(), None);
        e.ranks_current = 1;
        e.ranks_registered = 1;
        assert_eq!(e.occupancy(), None, "a rank not yet registered");
    }
}
