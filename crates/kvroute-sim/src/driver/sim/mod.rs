//! The simulation state and its event handlers (module docs of [`crate::driver`]).

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use kvroute::{Channel, Decision, Nanos, Router, WorkerId};
use rand::rngs::StdRng;

use super::RunOptions;
use super::queue::{Class, Kind, Queue};
use crate::engine::{Catalog, Engine, Notice};
use crate::fault::{FaultKind, FaultWindows, secs_to_ns};
use crate::net::ChannelConfig;
use crate::result::{EngineSample, Probe, RunResult};
use crate::workload::Workload;

mod channel;
mod finish;
mod requests;
mod setup;
mod telemetry;

/// Where a request is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Not arrived yet (or waiting to retry).
    Pending,
    /// Queued or running on an engine.
    OnEngine,
    /// Finished.
    Done,
    /// Given up after its retries.
    Rejected,
    /// Refused by its engine.
    Refused,
    /// A follow-up whose parent did not complete.
    NeverArrived,
}

#[derive(Debug)]
struct ReqState {
    status: Status,
    arrived: bool,
    decision: Option<Decision>,
    engine: Option<u32>,
    arrival: u64,
    first_token: Option<u64>,
    finish: Option<u64>,
    cached: u32,
    predicted: u32,
    rejections: u32,
    reason: &'static str,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// One run's state.
pub(in crate::driver) struct Sim<'a> {
    w: &'a Workload,
    opts: &'a RunOptions<'a>,
    chan: ChannelConfig,
    cat: Arc<Catalog>,
    router: Router,
    workers: Vec<WorkerId>,
    engines: Vec<Engine>,
    q: Queue,
    rng: StdRng,
    faults: FaultWindows,
    buffer_replays: bool,
    replay_buf: Vec<VecDeque<(u64, Rc<Vec<u8>>)>>,
    replay_inflight: Vec<bool>,
    wake_pending: Vec<bool>,
    reqs: Vec<ReqState>,
    children: Vec<Vec<u32>>,
    notices: Vec<Notice>,
    /// Encoding buffers of delivered batches, reused so that a batch is encoded into warm
    /// memory and moved, not copied, into the event queue.
    spare_bufs: Vec<Vec<u8>>,
    res: RunResult,
    now: u64,
    horizon: u64,
    done: usize,
    progress_pct: Option<usize>,
}

impl<'a> Sim<'a> {
    fn all_done(&self) -> bool {
        self.done == self.reqs.len()
    }

    /// Runs the event loop to the end (every request settled, or the horizon).
    pub(in crate::driver) fn run(&mut self) {
        // The fleet starts idle and routable, each engine's first report on its own wire.
        for e in 0..self.workers.len() {
            let s = self.sample_of(e);
            self.hand_over_load(e as u32, s, 0);
        }
        let _ = self.router.publish(Nanos::ZERO);
        for (i, r) in self.w.requests.iter().enumerate() {
            if r.follows.is_none() {
                self.q
                    .push(self.reqs[i].arrival, Class::Arrive, Kind::Arrive(i as u32));
            }
        }
        for (i, f) in self.w.faults.iter().enumerate() {
            if f.kind == FaultKind::Restart {
                self.q
                    .push(secs_to_ns(f.at_s), Class::Fault, Kind::Fault(i));
            }
        }
        for (e, first) in self.first_reports().into_iter().enumerate() {
            self.q.push(first, Class::Tick, Kind::Telemetry(e as u32));
        }
        if self.opts.sample_interval_s > 0.0 {
            self.q.push(0, Class::Tick, Kind::Sample);
        }
        self.q.push(
            secs_to_ns(self.opts.sweep_interval_s),
            Class::Tick,
            Kind::Sweep,
        );
        let mut probes: Vec<u64> = self.opts.probes.iter().map(|&p| secs_to_ns(p)).collect();
        probes.sort_unstable();
        for p in probes {
            self.q.push(p, Class::Tick, Kind::Probe);
        }
        self.report_progress();
        while !self.all_done() {
            // Only periodic work left while requests are unsettled would loop forever; it
            // cannot happen (every request on an engine progresses), but never hang.
            if !self.q.has_live() {
                break;
            }
            let Some((t, kind)) = self.q.pop() else {
                break;
            };
            if t > self.horizon {
                break;
            }
            self.now = t;
            self.handle(kind);
        }
        if let Some(p) = self.opts.progress {
            p(1.0);
        }
    }

    fn handle(&mut self, kind: Kind) {
        let t = self.now;
        match kind {
            Kind::Arrive(i) => self.arrive(i),
            Kind::Wake(e) => {
                self.wake_pending[e as usize] = false;
                if !self.engines[e as usize].in_step() {
                    self.start_step(e);
                }
            }
            Kind::StepEnd { engine, epoch } => self.step_end(engine, epoch),
            Kind::Batch {
                engine,
                seq,
                payload,
            } => {
                self.res.channel.batches_delivered += 1;
                self.ingest(engine, Channel::Live, seq, &payload);
                self.recycle(payload);
            }
            Kind::ReplayAsk { engine, from_seq } => self.replay_ask(engine, from_seq),
            Kind::ReplayAnswer { engine, batches } => self.replay_answer(engine, batches),
            Kind::ReplayRetry(e) => {
                if self.router.is_trusted(self.workers[e as usize]) == Some(false) {
                    self.maybe_replay(e);
                }
            }
            Kind::Load {
                engine,
                sample,
                observed,
            } => self.apply_load(engine, *sample, observed),
            Kind::Fault(i) => {
                let f = self.w.faults[i];
                if f.kind == FaultKind::Restart {
                    self.restart(f.engine);
                }
            }
            Kind::Telemetry(e) => {
                self.report_load(e);
                let next = t.saturating_add(secs_to_ns(self.chan.telemetry_interval_s));
                self.q.push(next, Class::Tick, Kind::Telemetry(e));
            }
            Kind::Sample => {
                for e in 0..self.engines.len() {
                    let f = self.engines[e].load();
                    self.res.samples.push(EngineSample {
                        t_s: secs(t),
                        engine: e as u32,
                        running: f.running,
                        waiting: f.waiting,
                        kv_usage: f.kv_usage,
                    });
                }
                let next = t.saturating_add(secs_to_ns(self.opts.sample_interval_s));
                self.q.push(next, Class::Tick, Kind::Sample);
            }
            Kind::Sweep => {
                self.router.sweep(Nanos(t));
                let next = t.saturating_add(secs_to_ns(self.opts.sweep_interval_s));
                self.q.push(next, Class::Tick, Kind::Sweep);
            }
            Kind::Probe => {
                for e in 0..self.engines.len() {
                    let w = self.workers[e];
                    let slot = self.router.slot_of(w);
                    self.res.probes.push(Probe {
                        t_ns: t,
                        engine: e as u32,
                        engine_blocks: self.engines[e].cached_blocks() as u64,
                        indexed_blocks: slot
                            .map_or(0, |s| self.router.index().worker_blocks(s) as u64),
                        trusted: self.router.is_trusted(w).unwrap_or(false),
                    });
                }
            }
        }
    }
}
