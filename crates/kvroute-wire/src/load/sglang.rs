//! SGLang's load figures as typed values: one rank's entry of SGLang's `/v1/loads`
//! ([`parse_sglang_loads`](crate::parse_sglang_loads) fills them), and its conversion to an
//! engine-neutral sample.

use kvroute_core::load::{TokenCapacity, check_token_capacity, int_count, rate, unit_interval};
use kvroute_core::{LoadSample, RankReport, UpdateError, WorkerId};

/// One rank's entry of SGLang's `/v1/loads` (field names as SGLang reports them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SglangRankLoad {
    /// The engine.
    pub engine_id: u64,
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

impl SglangRankLoad {
    /// The rank this entry describes.
    pub fn worker(&self) -> WorkerId {
        WorkerId::new(self.engine_id, self.dp_rank)
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
        Ok({
            let mut c = LoadSample::new(running, waiting, cap, kv_usage);
            c.waiting_prefill_tokens = Some(uncached);
            c.active_decode_tokens = Some(used);
            c.decode_tps = Some(decode_tps);
            c.utilization = Some(utilization);
            c
        })
    }

    /// The entry as a [`RankReport`] for `LoadPublisher::apply_ranks` (engine id
    /// [`engine_id`](Self::engine_id)): its sample, or the rejection of its figures, and the
    /// engine's `timestamp` to order it against the rank's other reports.
    pub fn to_report(&self) -> RankReport {
        RankReport {
            dp_rank: self.dp_rank,
            sample: self.to_sample(),
            engine_time: Some(self.timestamp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_core::Fields;

    fn sglang() -> SglangRankLoad {
        SglangRankLoad {
            engine_id: 7,
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
    fn report_carries_the_engine_timestamp() {
        let r = sglang().to_report();
        assert_eq!(r.dp_rank, 1);
        assert_eq!(r.engine_time, Some(1_700_000_000.5));
        assert_eq!(r.sample.map(|s| s.waiting), Ok(109));
    }
}
