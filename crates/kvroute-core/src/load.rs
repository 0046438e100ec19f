//! A load sample: one worker's figures in the snapshot's units, whoever produced them (a
//! decoder of an engine's telemetry, the fleet simulator), and the validation every producer
//! shares.
//!
//! Engines report numbers in their own types (gauges as `f64`, JSON integers as `i64`);
//! the checks here ([`gauge_count`], [`int_count`], [`rate`], [`unit_interval`],
//! [`check_token_capacity`]) turn each into a lane value or a typed [`UpdateError`], so that
//! no bad value is lost in a cast. Every sample is validated whole before anything is
//! applied: one bad field rejects it and leaves the worker's last good figures untouched.

use core::fmt;

use crate::worker::WorkerId;

/// One DP rank's load in the snapshot's units, validated by [`LoadSample::validate`].
///
/// This is also the update path for producers that already hold exact figures (the fleet
/// simulator). `None` means "not reported"; the lane then holds 0 (tokens, utilisation) or
/// the engine's configured default (throughputs), and the slot's
/// `reported` bits in the load snapshot say which ([`LoadSample::reported`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct LoadSample {
    /// Requests in the running batch (requests).
    pub running: u32,
    /// Requests queued, not yet scheduled (requests).
    pub waiting: u32,
    /// The scheduler's cap on running requests (requests, > 0).
    pub max_running: u32,
    /// Fraction of KV-cache token capacity in use, `0.0..=1.0`.
    pub kv_usage: f32,
    /// Prompt tokens of waiting requests not found in the engine's prefix cache (tokens).
    pub waiting_prefill_tokens: Option<u32>,
    /// KV tokens held by running requests, the context decode steps attend over (tokens).
    pub active_decode_tokens: Option<u32>,
    /// Generation throughput (tokens/s, finite, >= 0).
    pub decode_tps: Option<f32>,
    /// Prefill throughput (tokens/s, finite, >= 0).
    pub prefill_tps: Option<f32>,
    /// Scheduler utilisation as the engine defines it (a ratio, finite, >= 0; may exceed 1
    /// when the engine is oversubscribed).
    pub utilization: Option<f32>,
}

impl LoadSample {
    /// A rank's request counts, scheduler cap and KV usage, nothing else reported (set the
    /// optional figures on the returned value). Not validated until
    /// [`validate`](Self::validate).
    pub fn new(running: u32, waiting: u32, max_running: u32, kv_usage: f32) -> Self {
        Self {
            running,
            waiting,
            kv_usage,
            ..Self::idle(max_running)
        }
    }

    /// An idle rank with cap `max_running` and nothing else reported.
    pub fn idle(max_running: u32) -> Self {
        Self {
            running: 0,
            waiting: 0,
            max_running,
            kv_usage: 0.0,
            waiting_prefill_tokens: None,
            active_decode_tokens: None,
            decode_tps: None,
            prefill_tps: None,
            utilization: None,
        }
    }

    /// Checks the sample for `worker`.
    ///
    /// # Errors
    /// [`UpdateError::ZeroCap`] for `max_running == 0`; [`UpdateError::NotFinite`],
    /// [`UpdateError::Negative`] or [`UpdateError::AboveOne`] for a bad `kv_usage`,
    /// throughput or utilisation.
    pub fn validate(&self, worker: WorkerId) -> Result<(), UpdateError> {
        if self.max_running == 0 {
            return Err(UpdateError::ZeroCap {
                worker,
                field: "max_running",
            });
        }
        unit_interval(worker, "kv_usage", f64::from(self.kv_usage))?;
        for (field, v) in [
            ("decode_tps", self.decode_tps),
            ("prefill_tps", self.prefill_tps),
            ("utilization", self.utilization),
        ] {
            if let Some(v) = v {
                rate(worker, field, f64::from(v))?;
            }
        }
        Ok(())
    }

    /// The fields this sample reports (requests always; the others when `Some`).
    pub fn reported(&self) -> Fields {
        let mut f = Fields::REQUESTS;
        for (bit, present) in [
            (
                Fields::PREFILL_TOKENS,
                self.waiting_prefill_tokens.is_some(),
            ),
            (Fields::DECODE_TOKENS, self.active_decode_tokens.is_some()),
            (Fields::DECODE_TPS, self.decode_tps.is_some()),
            (Fields::PREFILL_TPS, self.prefill_tps.is_some()),
            (Fields::UTILIZATION, self.utilization.is_some()),
        ] {
            if present {
                f = f | bit;
            }
        }
        f
    }
}

/// One rank of an engine-wide update: the rank, its sample (or why the decoder rejected
/// its figures) and, where the engine stamps its reports, the engine's own time.
///
/// A rejected sample (`Err`) marks the rank invalid, exactly as if a sample with bad values
/// had been applied; the rank's last good figures stay.
#[derive(Clone, Debug, PartialEq)]
pub struct RankReport {
    /// The DP rank (`WorkerId::dp_rank`).
    pub dp_rank: u32,
    /// The rank's validated sample, or the decoder's rejection of its figures.
    pub sample: Result<LoadSample, UpdateError>,
    /// The engine's own clock when it took the figures (seconds, finite, >= 0), used only
    /// to order reports of one rank (an older one is dropped as superseded); `None` when
    /// the engine does not stamp reports (vLLM's Prometheus gauges).
    pub engine_time: Option<f64>,
}

/// A set of load fields, as bits: which fields a slot's telemetry reports (published per
/// slot in the load snapshot's `reported` lane) and which reservation counters a
/// reconciliation clears.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Fields(pub u8);

impl Fields {
    /// No field.
    pub const NONE: Fields = Fields(0);
    /// Running and waiting request counts.
    pub const REQUESTS: Fields = Fields(1);
    /// Waiting uncached prefill tokens.
    pub const PREFILL_TOKENS: Fields = Fields(1 << 1);
    /// Active decode tokens (KV tokens of running requests).
    pub const DECODE_TOKENS: Fields = Fields(1 << 2);
    /// Decode throughput (from telemetry or the engine's configuration).
    pub const DECODE_TPS: Fields = Fields(1 << 3);
    /// Prefill throughput (from telemetry or the engine's configuration).
    pub const PREFILL_TPS: Fields = Fields(1 << 4);
    /// Scheduler utilisation.
    pub const UTILIZATION: Fields = Fields(1 << 5);
    /// The three fields that reservations also count (requests, prefill and decode tokens).
    pub const RESERVABLE: Fields = Fields(0b111);

    /// Whether every field of `other` is in `self`.
    pub const fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both sets.
    pub const fn union(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }

    /// The intersection of both sets.
    pub const fn intersect(self, other: Fields) -> Fields {
        Fields(self.0 & other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for Fields {
    type Output = Fields;
    fn bitor(self, rhs: Fields) -> Fields {
        self.union(rhs)
    }
}

/// Why a load update was rejected. The load publisher (`kvroute-load`) also counts each
/// rejection in its stats.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum UpdateError {
    /// The worker (or one rank of a whole update) is not registered with the publisher.
    UnknownWorker(WorkerId),
    /// A whole update listed no rank.
    EmptyUpdate {
        /// The engine.
        engine_id: u64,
    },
    /// A whole update listed the same rank twice.
    DuplicateRank(WorkerId),
    /// NaN or infinite.
    NotFinite {
        /// The rank.
        worker: WorkerId,
        /// The field, as the update names it.
        field: &'static str,
    },
    /// Below zero.
    Negative {
        /// The rank.
        worker: WorkerId,
        /// The field.
        field: &'static str,
        /// The value as reported.
        value: f64,
    },
    /// A count with a fractional part.
    NotInteger {
        /// The rank.
        worker: WorkerId,
        /// The field.
        field: &'static str,
        /// The value as reported.
        value: f64,
    },
    /// Larger than the lane can hold (`u32::MAX` for counts, `f32::MAX` for rates).
    TooLarge {
        /// The rank.
        worker: WorkerId,
        /// The field.
        field: &'static str,
        /// The value as reported.
        value: f64,
    },
    /// A fraction above 1.
    AboveOne {
        /// The rank.
        worker: WorkerId,
        /// The field.
        field: &'static str,
        /// The value as reported.
        value: f64,
    },
    /// An update that reports no scheduler cap (vLLM's) for an engine without a configured
    /// `max_running_per_rank`; name it with the load publisher's engine configuration
    /// (`Router::configure_engine`).
    MissingCap(WorkerId),
    /// A cap of zero.
    ZeroCap {
        /// The rank.
        worker: WorkerId,
        /// The field.
        field: &'static str,
    },
    /// Fields that contradict each other (used tokens above the token capacity).
    Inconsistent {
        /// The rank.
        worker: WorkerId,
        /// What disagrees.
        detail: &'static str,
    },
    /// Older than the figures already held (by the router's clock, or by the engine's own
    /// timestamp); dropped, the newer figures stay. Does not mark the slot invalid.
    Superseded(WorkerId),
    /// Observed at a time further ahead of the publisher's clock (the latest time
    /// published) than its configured lead: refused, the held figures stay. Does not mark
    /// the slot invalid.
    FromTheFuture {
        /// The rank.
        worker: WorkerId,
        /// The time given (caller's clock).
        now: crate::Nanos,
        /// The publisher's clock.
        clock: crate::Nanos,
    },
}

impl UpdateError {
    /// Whether this rejection marks the worker's slot invalid (the load snapshot's `Validity::Invalid`)
    /// (bad values), as opposed to an unknown worker or an out-of-order report.
    pub fn marks_invalid(&self) -> bool {
        !matches!(
            self,
            Self::UnknownWorker(_)
                | Self::EmptyUpdate { .. }
                | Self::Superseded(_)
                | Self::FromTheFuture { .. }
        )
    }
}

impl fmt::Display for UpdateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::EmptyUpdate { engine_id } => write!(f, "update for {engine_id} has no rank"),
            Self::DuplicateRank(w) => write!(f, "rank {w} appears twice in one update"),
            Self::NotFinite { worker, field } => write!(f, "{worker}: {field} is not finite"),
            Self::Negative {
                worker,
                field,
                value,
            } => write!(f, "{worker}: {field} = {value} is negative"),
            Self::NotInteger {
                worker,
                field,
                value,
            } => write!(f, "{worker}: {field} = {value} is not an integer"),
            Self::TooLarge {
                worker,
                field,
                value,
            } => write!(f, "{worker}: {field} = {value} is too large"),
            Self::AboveOne {
                worker,
                field,
                value,
            } => write!(f, "{worker}: {field} = {value} is above 1"),
            Self::MissingCap(w) => write!(
                f,
                "{w}: the engine reports no running-request cap; configure its max_running_per_rank (Router::configure_engine)"
            ),
            Self::ZeroCap { worker, field } => write!(f, "{worker}: {field} is zero"),
            Self::Inconsistent { worker, detail } => write!(f, "{worker}: {detail}"),
            Self::Superseded(w) => write!(f, "{w}: report older than the figures held"),
            Self::FromTheFuture { worker, now, clock } => write!(
                f,
                "{worker}: report at {now} is too far ahead of the clock ({clock}); check the caller's clock"
            ),
        }
    }
}

impl std::error::Error for UpdateError {}

/// A gauge (reported as `f64`) that must hold a non-negative integer that fits a `u32`
/// lane.
///
/// # Errors
/// [`UpdateError::NotFinite`], [`UpdateError::Negative`], [`UpdateError::NotInteger`] or
/// [`UpdateError::TooLarge`] (above `u32::MAX`); `-0.0` is a valid zero.
pub fn gauge_count(w: WorkerId, field: &'static str, v: f64) -> Result<u32, UpdateError> {
    let v = finite_non_negative(w, field, v)?;
    if v.fract() != 0.0 {
        return Err(UpdateError::NotInteger {
            worker: w,
            field,
            value: v,
        });
    }
    if v > f64::from(u32::MAX) {
        return Err(UpdateError::TooLarge {
            worker: w,
            field,
            value: v,
        });
    }
    Ok(v as u32)
}

/// `v` when it is finite and not below zero (`-0.0` passes).
fn finite_non_negative(w: WorkerId, field: &'static str, v: f64) -> Result<f64, UpdateError> {
    if !v.is_finite() {
        return Err(UpdateError::NotFinite { worker: w, field });
    }
    if v < 0.0 {
        return Err(UpdateError::Negative {
            worker: w,
            field,
            value: v,
        });
    }
    Ok(v)
}

/// An SGLang rank's token and request capacity, as its reports give them.
#[derive(Clone, Copy, Debug)]
pub struct TokenCapacity {
    /// KV tokens in use (tokens).
    pub used: u32,
    /// KV token capacity, `max_total_num_tokens` (tokens).
    pub total: u32,
    /// Running-request cap (requests).
    pub cap: u32,
    /// The report's name of the cap field, for the error.
    pub cap_field: &'static str,
    /// The error text when `used > total`.
    pub overflow: &'static str,
}

/// Checks an SGLang rank's capacity figures (shared by the `/v1/loads` update and the
/// wire decoder's `LoadStat` frames).
///
/// # Errors
/// [`UpdateError::ZeroCap`] when `total` or `cap` is 0; [`UpdateError::Inconsistent`] when
/// `used > total`.
pub fn check_token_capacity(w: WorkerId, c: TokenCapacity) -> Result<(), UpdateError> {
    if c.total == 0 {
        return Err(UpdateError::ZeroCap {
            worker: w,
            field: "max_total_num_tokens",
        });
    }
    if c.cap == 0 {
        return Err(UpdateError::ZeroCap {
            worker: w,
            field: c.cap_field,
        });
    }
    if c.used > c.total {
        return Err(UpdateError::Inconsistent {
            worker: w,
            detail: c.overflow,
        });
    }
    Ok(())
}

/// A reported count (requests or tokens) as `u32`, for decoders of the engines' formats.
///
/// # Errors
/// [`UpdateError::Negative`] below 0; [`UpdateError::TooLarge`] above `u32::MAX`.
pub fn int_count(w: WorkerId, field: &'static str, v: i64) -> Result<u32, UpdateError> {
    if v < 0 {
        return Err(UpdateError::Negative {
            worker: w,
            field,
            value: v as f64,
        });
    }
    u32::try_from(v).map_err(|_| UpdateError::TooLarge {
        worker: w,
        field,
        value: v as f64,
    })
}

/// A fraction in `0.0..=1.0`, as an `f32` lane value.
///
/// # Errors
/// As [`rate`], and [`UpdateError::AboveOne`] above 1.
pub fn unit_interval(w: WorkerId, field: &'static str, v: f64) -> Result<f32, UpdateError> {
    let r = rate(w, field, v)?;
    if v > 1.0 {
        return Err(UpdateError::AboveOne {
            worker: w,
            field,
            value: v,
        });
    }
    Ok(r)
}

/// A finite, non-negative rate (tokens/s, a ratio) that fits an `f32` lane.
///
/// # Errors
/// [`UpdateError::NotFinite`], [`UpdateError::Negative`], or [`UpdateError::TooLarge`]
/// above `f32::MAX`.
pub fn rate(w: WorkerId, field: &'static str, v: f64) -> Result<f32, UpdateError> {
    let v = finite_non_negative(w, field, v)?;
    if v > f64::from(f32::MAX) {
        return Err(UpdateError::TooLarge {
            worker: w,
            field,
            value: v,
        });
    }
    Ok(v as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_sets() {
        let f = Fields::REQUESTS | Fields::DECODE_TOKENS;
        assert_eq!(f, Fields(0b101));
        assert!(f.contains(Fields::REQUESTS));
        assert!(!f.contains(Fields::PREFILL_TOKENS));
        assert_eq!(f.intersect(Fields::RESERVABLE), f);
        assert!(Fields::NONE.is_empty());
        assert_eq!(LoadSample::idle(4).reported(), Fields::REQUESTS);
    }

    #[test]
    fn figure_checks() {
        let w = WorkerId::new(9, 0);
        assert_eq!(gauge_count(w, "g", 3.0), Ok(3));
        assert_eq!(gauge_count(w, "g", -0.0), Ok(0));
        assert!(matches!(
            gauge_count(w, "g", 2.5),
            Err(UpdateError::NotInteger { .. })
        ));
        assert!(matches!(
            gauge_count(w, "g", 4.3e9),
            Err(UpdateError::TooLarge { .. })
        ));
        assert_eq!(int_count(w, "c", 7), Ok(7));
        assert!(matches!(
            int_count(w, "c", -1),
            Err(UpdateError::Negative { .. })
        ));
        assert_eq!(unit_interval(w, "u", 0.25), Ok(0.25));
        assert!(matches!(
            unit_interval(w, "u", 1.01),
            Err(UpdateError::AboveOne { .. })
        ));
        assert!(matches!(
            rate(w, "r", f64::NAN),
            Err(UpdateError::NotFinite { .. })
        ));
        assert!(matches!(
            rate(w, "r", 1e39),
            Err(UpdateError::TooLarge { .. })
        ));
    }

    #[test]
    fn sample_validation() {
        let w = WorkerId::new(1, 0);
        assert!(LoadSample::idle(4).validate(w).is_ok());
        assert!(matches!(
            LoadSample::idle(0).validate(w),
            Err(UpdateError::ZeroCap { .. })
        ));
        let s = LoadSample {
            decode_tps: Some(-1.0),
            ..LoadSample::idle(4)
        };
        assert!(matches!(s.validate(w), Err(UpdateError::Negative { .. })));
        let s = LoadSample {
            kv_usage: f32::NAN,
            ..LoadSample::idle(4)
        };
        assert!(matches!(s.validate(w), Err(UpdateError::NotFinite { .. })));
        assert!(UpdateError::MissingCap(w).marks_invalid());
        assert!(!UpdateError::Superseded(w).marks_invalid());
    }
}
