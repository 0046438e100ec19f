//! Typed load updates shaped like what engines report, and their validation.
//!
//! Parsing wire formats (Prometheus text, `/v1/loads` JSON) is not done here; a parser fills
//! these structs with the numbers as reported, in the reported types (gauges as `f64`, JSON
//! integers as `i64`), so that every bad value reaches validation and becomes a typed
//! [`UpdateError`] instead of being lost in a cast.
//!
//! Every update is validated whole before anything is applied: one bad field rejects the
//! update and leaves the slot's last good figures untouched.

use core::fmt;

use kvroute_index::WorkerId;

use crate::lanes::Fields;

/// One DP rank's load in the snapshot's units, validated by [`LoadSample::validate`].
///
/// This is also the update path for producers that already hold exact figures (the fleet
/// simulator). `None` means "not reported"; the lane then holds 0 (tokens, utilisation) or
/// the engine's configured default (throughputs), and the slot's
/// [`reported`](crate::LoadSnapshot::reported) bits say which.
#[derive(Clone, Copy, Debug, PartialEq)]
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

/// One DP rank of a vLLM-style update: the scheduler gauges vLLM exports per engine index.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VllmRankLoad {
    /// The DP rank (vLLM's engine index).
    pub dp_rank: u32,
    /// `num_requests_running` (requests; a gauge, must be a non-negative integer).
    pub num_requests_running: f64,
    /// `num_requests_waiting` (requests; a gauge, must be a non-negative integer).
    pub num_requests_waiting: f64,
    /// `kv_cache_usage_perc` (a fraction `0.0..=1.0`, despite the name).
    pub kv_cache_usage: f64,
}

/// A whole vLLM-style update: every reported DP rank of one engine. The scheduler cap
/// (`max_num_seqs`) is not reported by vLLM; it comes from
/// [`EngineConfig::max_running_per_rank`](crate::EngineConfig::max_running_per_rank).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VllmLoadUpdate {
    /// The engine.
    pub worker_id: u64,
    /// The ranks reported (at least one, each at most once).
    pub ranks: Vec<VllmRankLoad>,
}

/// One rank's entry of SGLang's `/v1/loads` (field names as SGLang reports them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SglangRankLoad {
    /// The engine.
    pub worker_id: u64,
    /// The DP rank.
    pub dp_rank: u32,
    /// Requests running (requests, >= 0).
    pub num_running_reqs: i64,
    /// Requests waiting (requests, >= 0).
    pub num_waiting_reqs: i64,
    /// Prompt tokens of waiting requests not in the prefix cache (tokens, >= 0).
    pub num_waiting_uncached_tokens: i64,
    /// KV tokens in use by requests (tokens, `0..=max_total_num_tokens`); published as the
    /// slot's active decode tokens.
    pub num_used_tokens: i64,
    /// KV token capacity (tokens, > 0).
    pub max_total_num_tokens: i64,
    /// `num_used_tokens / max_total_num_tokens` as the engine computed it (`0.0..=1.0`).
    pub token_usage: f64,
    /// Generation throughput (tokens/s, finite, >= 0).
    pub gen_throughput: f64,
    /// Scheduler utilisation (finite, >= 0).
    pub utilization: f64,
    /// The scheduler's cap on running requests (requests, > 0).
    pub max_running_requests: i64,
    /// The engine's wall-clock time of the figures (seconds, finite, >= 0). Used only to
    /// order reports of one rank; staleness uses the router's clock.
    pub timestamp: f64,
}

/// Why an update was rejected. Each rejection is also counted in
/// [`LoadStats`](crate::LoadStats).
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateError {
    /// The worker (or one rank of a whole update) is not registered with the publisher.
    UnknownWorker(WorkerId),
    /// A whole update listed no rank.
    EmptyUpdate {
        /// The engine.
        worker_id: u64,
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
    /// A vLLM-style update for an engine without a configured `max_running_per_rank`.
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
}

impl UpdateError {
    /// Whether this rejection marks the worker's slot [`Invalid`](crate::Validity::Invalid)
    /// (bad values), as opposed to an unknown worker or an out-of-order report.
    pub fn marks_invalid(&self) -> bool {
        !matches!(
            self,
            Self::UnknownWorker(_) | Self::EmptyUpdate { .. } | Self::Superseded(_)
        )
    }
}

impl fmt::Display for UpdateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::EmptyUpdate { worker_id } => write!(f, "update for {worker_id} has no rank"),
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
            Self::MissingCap(w) => write!(f, "{w}: no max_running configured for the engine"),
            Self::ZeroCap { worker, field } => write!(f, "{worker}: {field} is zero"),
            Self::Inconsistent { worker, detail } => write!(f, "{worker}: {detail}"),
            Self::Superseded(w) => write!(f, "{w}: report older than the figures held"),
        }
    }
}

impl std::error::Error for UpdateError {}

/// A gauge that must hold a non-negative integer that fits a `u32` lane.
pub(crate) fn gauge_count(w: WorkerId, field: &'static str, v: f64) -> Result<u32, UpdateError> {
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

/// A fraction in `0.0..=1.0`.
pub(crate) fn unit_interval(w: WorkerId, field: &'static str, v: f64) -> Result<f32, UpdateError> {
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

/// A finite, non-negative rate that fits an `f32` lane.
pub(crate) fn rate(w: WorkerId, field: &'static str, v: f64) -> Result<f32, UpdateError> {
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
    if v > f64::from(f32::MAX) {
        return Err(UpdateError::TooLarge {
            worker: w,
            field,
            value: v,
        });
    }
    Ok(v as f32)
}

impl VllmRankLoad {
    /// Validates the rank's gauges and builds its sample with the configured cap.
    ///
    /// # Errors
    /// [`UpdateError::MissingCap`] / [`UpdateError::ZeroCap`] without a positive cap; a
    /// count that is not a finite non-negative integer; a usage outside `0.0..=1.0`.
    pub fn to_sample(&self, worker_id: u64, cap: Option<u32>) -> Result<LoadSample, UpdateError> {
        let w = WorkerId::new(worker_id, self.dp_rank);
        let running = gauge_count(w, "num_requests_running", self.num_requests_running)?;
        let waiting = gauge_count(w, "num_requests_waiting", self.num_requests_waiting)?;
        let kv_usage = unit_interval(w, "kv_cache_usage", self.kv_cache_usage)?;
        let max_running = match cap {
            None => return Err(UpdateError::MissingCap(w)),
            Some(0) => {
                return Err(UpdateError::ZeroCap {
                    worker: w,
                    field: "max_running_per_rank",
                });
            }
            Some(c) => c,
        };
        Ok(LoadSample {
            running,
            waiting,
            max_running,
            kv_usage,
            waiting_prefill_tokens: None,
            active_decode_tokens: None,
            decode_tps: None,
            prefill_tps: None,
            utilization: None,
        })
    }
}

impl SglangRankLoad {
    /// The rank this entry describes.
    pub fn worker(&self) -> WorkerId {
        WorkerId::new(self.worker_id, self.dp_rank)
    }

    /// Validates every field and builds the rank's sample.
    ///
    /// # Errors
    /// A negative or oversized count; a zero `max_running_requests` or
    /// `max_total_num_tokens`; `num_used_tokens > max_total_num_tokens`; a non-finite,
    /// negative or (for `token_usage`) above-one float; a bad `timestamp`.
    pub fn to_sample(&self) -> Result<LoadSample, UpdateError> {
        let w = self.worker();
        let running = int_count(w, "num_running_reqs", self.num_running_reqs)?;
        let waiting = int_count(w, "num_waiting_reqs", self.num_waiting_reqs)?;
        let uncached = int_count(
            w,
            "num_waiting_uncached_tokens",
            self.num_waiting_uncached_tokens,
        )?;
        let used = int_count(w, "num_used_tokens", self.num_used_tokens)?;
        let total = int_count(w, "max_total_num_tokens", self.max_total_num_tokens)?;
        let cap = int_count(w, "max_running_requests", self.max_running_requests)?;
        check_token_capacity(
            w,
            TokenCapacity {
                used,
                total,
                cap,
                cap_field: "max_running_requests",
                overflow: "num_used_tokens exceeds max_total_num_tokens",
            },
        )?;
        let kv_usage = unit_interval(w, "token_usage", self.token_usage)?;
        let decode_tps = rate(w, "gen_throughput", self.gen_throughput)?;
        let utilization = rate(w, "utilization", self.utilization)?;
        rate(w, "timestamp", self.timestamp)?;
        Ok(LoadSample {
            running,
            waiting,
            max_running: cap,
            kv_usage,
            waiting_prefill_tokens: Some(uncached),
            active_decode_tokens: Some(used),
            decode_tps: Some(decode_tps),
            prefill_tps: None,
            utilization: Some(utilization),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sglang() -> SglangRankLoad {
        SglangRankLoad {
            worker_id: 7,
            dp_rank: 1,
            num_running_reqs: 38,
            num_waiting_reqs: 109,
            num_waiting_uncached_tokens: 4096,
            num_used_tokens: 30_000,
            max_total_num_tokens: 120_000,
            token_usage: 0.25,
            gen_throughput: 812.5,
            utilization: 1.0,
            max_running_requests: 38,
            timestamp: 1_700_000_000.5,
        }
    }

    #[test]
    fn sglang_fields_map_to_lanes() {
        let s = sglang().to_sample().unwrap();
        assert_eq!((s.running, s.waiting, s.max_running), (38, 109, 38));
        assert_eq!(s.waiting_prefill_tokens, Some(4096));
        assert_eq!(s.active_decode_tokens, Some(30_000));
        assert_eq!(s.kv_usage, 0.25);
        assert_eq!(s.decode_tps, Some(812.5));
        assert_eq!(s.utilization, Some(1.0));
        assert_eq!(s.prefill_tps, None);
        assert_eq!(
            s.reported(),
            Fields::REQUESTS
                | Fields::PREFILL_TOKENS
                | Fields::DECODE_TOKENS
                | Fields::DECODE_TPS
                | Fields::UTILIZATION
        );
    }

    #[test]
    fn sglang_rejections() {
        let w = WorkerId::new(7, 1);
        let mut u = sglang();
        u.num_waiting_reqs = -1;
        assert_eq!(
            u.to_sample(),
            Err(UpdateError::Negative {
                worker: w,
                field: "num_waiting_reqs",
                value: -1.0
            })
        );
        let mut u = sglang();
        u.max_running_requests = 0;
        assert_eq!(
            u.to_sample(),
            Err(UpdateError::ZeroCap {
                worker: w,
                field: "max_running_requests"
            })
        );
        let mut u = sglang();
        u.token_usage = 1.01;
        assert!(matches!(u.to_sample(), Err(UpdateError::AboveOne { .. })));
        let mut u = sglang();
        u.gen_throughput = f64::NAN;
        assert_eq!(
            u.to_sample(),
            Err(UpdateError::NotFinite {
                worker: w,
                field: "gen_throughput"
            })
        );
        let mut u = sglang();
        u.num_used_tokens = 120_001;
        assert!(matches!(
            u.to_sample(),
            Err(UpdateError::Inconsistent { .. })
        ));
        let mut u = sglang();
        u.num_running_reqs = i64::from(u32::MAX) + 1;
        assert!(matches!(u.to_sample(), Err(UpdateError::TooLarge { .. })));
        let mut u = sglang();
        u.timestamp = f64::INFINITY;
        assert!(matches!(u.to_sample(), Err(UpdateError::NotFinite { .. })));
    }

    #[test]
    fn vllm_gauges() {
        let r = VllmRankLoad {
            dp_rank: 0,
            num_requests_running: 3.0,
            num_requests_waiting: 0.0,
            kv_cache_usage: 0.5,
        };
        let s = r.to_sample(9, Some(256)).unwrap();
        assert_eq!((s.running, s.waiting, s.max_running), (3, 0, 256));
        assert_eq!(s.reported(), Fields::REQUESTS);
        let w = WorkerId::new(9, 0);
        assert_eq!(r.to_sample(9, None), Err(UpdateError::MissingCap(w)));
        assert!(matches!(
            r.to_sample(9, Some(0)),
            Err(UpdateError::ZeroCap { .. })
        ));
        let frac = VllmRankLoad {
            num_requests_running: 2.5,
            ..r
        };
        assert!(matches!(
            frac.to_sample(9, Some(8)),
            Err(UpdateError::NotInteger { .. })
        ));
        let neg = VllmRankLoad {
            num_requests_waiting: -1.0,
            ..r
        };
        assert!(matches!(
            neg.to_sample(9, Some(8)),
            Err(UpdateError::Negative { .. })
        ));
        let nan = VllmRankLoad {
            kv_cache_usage: f64::NAN,
            ..r
        };
        assert!(matches!(
            nan.to_sample(9, Some(8)),
            Err(UpdateError::NotFinite { .. })
        ));
        // -0.0 is a valid zero.
        let negzero = VllmRankLoad {
            num_requests_waiting: -0.0,
            ..r
        };
        assert_eq!(negzero.to_sample(9, Some(8)).unwrap().waiting, 0);
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
