//! Load telemetry: observing every engine, losing or delivering the reports, applying them
//! and publishing.

use kvroute::{LoadSample, Nanos, VllmLoadUpdate, VllmRankLoad};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seed offset of the telemetry phases' draw, independent of the channel draws (which use
/// the run's seed itself).
const STAGGER_SEED_OFFSET: u64 = 0x57A6_6E12;

use super::Sim;
use crate::driver::queue::{Class, Kind};
use crate::fault::secs_to_ns;
use crate::net::TelemetryMode;

impl<'a> Sim<'a> {
    pub(super) fn sample_of(&self, e: usize) -> LoadSample {
        let cfg = self.engines[e].config();
        let f = self.engines[e].load();
        let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        {
            let mut c = LoadSample::new(
                f.running,
                f.waiting,
                cfg.max_running,
                f.kv_usage.clamp(0.0, 1.0),
            );
            c.waiting_prefill_tokens = Some(sat(f.waiting_prefill_tokens));
            c.active_decode_tokens = Some(sat(f.active_decode_tokens));
            c.decode_tps = Some(cfg.decode_tps(f.running) as f32);
            c.prefill_tps = Some(cfg.prefill_tps as f32);
            c
        }
    }

    /// When each engine's first load report after the time-0 one is observed (ns): one
    /// interval in, or, with `telemetry_stagger`, at a seeded uniform phase in
    /// `(0, interval]` of its own (module docs of [`crate::net`]).
    pub(super) fn first_reports(&self) -> Vec<u64> {
        let interval = self.chan.telemetry_interval_s;
        let mut rng = StdRng::seed_from_u64(self.opts.seed ^ STAGGER_SEED_OFFSET);
        (0..self.engines.len())
            .map(|_| {
                let phase = if self.chan.telemetry_stagger {
                    // `1 - u` is in (0, 1]: no engine reports twice at time 0.
                    interval * (1.0 - rng.random::<f64>())
                } else {
                    interval
                };
                secs_to_ns(phase).max(1)
            })
            .collect()
    }

    /// Observes engine `e`'s load now and sends the report (unless its telemetry is down
    /// or the report is lost).
    pub(super) fn report_load(&mut self, e: u32) {
        let t = self.now;
        if self.faults.telemetry_down(e, t) {
            return;
        }
        self.res.channel.telemetry_sent += 1;
        if self.chan.telemetry_loss > 0.0 && self.rng.random::<f64>() < self.chan.telemetry_loss {
            self.res.channel.telemetry_lost += 1;
            return;
        }
        let mut delay = self.chan.telemetry_delay_s;
        if self.chan.telemetry_jitter_s > 0.0 {
            delay += self.rng.random::<f64>() * self.chan.telemetry_jitter_s;
        }
        let sample = self.sample_of(e as usize);
        self.q.push(
            t.saturating_add(secs_to_ns(delay)),
            Class::Deliver,
            Kind::Load {
                engine: e,
                sample: Box::new(sample),
                observed: t,
            },
        );
    }

    pub(super) fn apply_load(&mut self, e: u32, s: LoadSample, observed: u64) {
        self.hand_over_load(e, s, observed);
        let _ = self.router.publish(Nanos(self.now));
    }

    /// Hands engine `e`'s report observed at `observed` (ns) to the router on the wire its
    /// telemetry uses then (SGLang's full figures, or vLLM's gauges under
    /// `--telemetry gauges` or a partial-telemetry fault), without publishing.
    pub(super) fn hand_over_load(&mut self, e: u32, s: LoadSample, observed: u64) {
        let w = self.workers[e as usize];
        let mode = if self.faults.gauges_only(e, observed) {
            TelemetryMode::VllmMetrics
        } else {
            self.chan.telemetry
        };
        let r = match mode {
            TelemetryMode::Full => self.router.update_load(w, s, Nanos(observed)),
            TelemetryMode::VllmMetrics => self.router.update_vllm_load(
                &VllmLoadUpdate {
                    engine_id: u64::from(e),
                    ranks: vec![VllmRankLoad {
                        dp_rank: 0,
                        num_requests_running: f64::from(s.running),
                        num_requests_waiting: f64::from(s.waiting),
                        kv_cache_usage: f64::from(s.kv_usage),
                    }],
                },
                Nanos(observed),
            ),
        };
        if r.is_err() {
            self.res.channel.telemetry_rejected += 1;
        }
    }
}
