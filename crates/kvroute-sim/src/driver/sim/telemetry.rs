//! Load telemetry: observing every engine, losing or delivering the reports, applying them
//! and publishing.

use kvroute::{LoadSample, Nanos, VllmLoadUpdate, VllmRankLoad};
use rand::Rng;

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

    pub(super) fn telemetry_tick(&mut self) {
        let t = self.now;
        let delay = secs_to_ns(self.chan.telemetry_delay_s);
        for e in 0..self.engines.len() {
            if self.faults.telemetry_down(e as u32, t) {
                continue;
            }
            self.res.channel.telemetry_sent += 1;
            if self.chan.telemetry_loss > 0.0 && self.rng.random::<f64>() < self.chan.telemetry_loss
            {
                self.res.channel.telemetry_lost += 1;
                continue;
            }
            let sample = self.sample_of(e);
            self.q.push(
                t.saturating_add(delay),
                Class::Deliver,
                Kind::Load {
                    engine: e as u32,
                    sample: Box::new(sample),
                    observed: t,
                },
            );
        }
    }

    pub(super) fn apply_load(&mut self, e: u32, s: LoadSample, observed: u64) {
        let w = self.workers[e as usize];
        let r = match self.chan.telemetry {
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
        let _ = self.router.publish(Nanos(self.now));
    }
}
