//! vLLM's load figures as typed values: the scheduler gauges vLLM's Prometheus endpoint
//! exports per DP rank ([`parse_vllm_metrics`](crate::parse_vllm_metrics) fills them), and
//! their conversion to engine-neutral samples.

use kvroute_core::load::{gauge_count, unit_interval};
use kvroute_core::{LoadSample, RankReport, UpdateError, WorkerId};

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
/// the load publisher's engine configuration (`EngineConfig::max_running_per_rank` in
/// `kvroute-load`, set through `Router::configure_engine`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct VllmLoadUpdate {
    /// The engine.
    pub engine_id: u64,
    /// The ranks reported (at least one, each at most once).
    pub ranks: Vec<VllmRankLoad>,
}

impl VllmRankLoad {
    /// Validates the rank's gauges and builds its sample with the configured cap.
    ///
    /// # Errors
    /// [`UpdateError::MissingCap`] / [`UpdateError::ZeroCap`] without a positive cap; a
    /// count that is not a finite non-negative integer; a usage outside `0.0..=1.0`.
    pub fn to_sample(&self, engine_id: u64, cap: Option<u32>) -> Result<LoadSample, UpdateError> {
        let w = WorkerId::new(engine_id, self.dp_rank);
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
        Ok(LoadSample::new(running, waiting, max_running, kv_usage))
    }
}

impl VllmLoadUpdate {
    /// Every listed rank as a [`RankReport`] for `LoadPublisher::apply_ranks`, each rank's
    /// sample built with `cap` (the engine's configured `max_running_per_rank`, see
    /// `LoadPublisher::configured_cap`), in the listed order. vLLM does not stamp its
    /// gauges, so no report carries an engine time.
    pub fn to_reports(&self, cap: Option<u32>) -> Vec<RankReport> {
        self.ranks
            .iter()
            .map(|r| RankReport {
                dp_rank: r.dp_rank,
                sample: r.to_sample(self.engine_id, cap),
                engine_time: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvroute_core::Fields;

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
    fn reports_carry_each_rank_and_no_engine_time() {
        let rank = |dp_rank, running| VllmRankLoad {
            dp_rank,
            num_requests_running: running,
            num_requests_waiting: 1.0,
            kv_cache_usage: 0.5,
        };
        let u = VllmLoadUpdate {
            engine_id: 4,
            ranks: vec![rank(1, 2.0), rank(0, 2.5)],
        };
        let r = u.to_reports(Some(16));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].dp_rank, 1);
        assert_eq!(r[0].engine_time, None);
        assert_eq!(
            r[0].sample.as_ref().map(|s| (s.running, s.max_running)),
            Ok((2, 16))
        );
        assert!(matches!(r[1].sample, Err(UpdateError::NotInteger { .. })));
    }
}
