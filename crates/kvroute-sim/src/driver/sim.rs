//! The simulation state and its event handlers (module docs of [`crate::driver`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::rc::Rc;

use kvroute::{
    Channel, Decision, IngestError, LoadSample, Nanos, Policy, RouteRequest, Router, RouterConfig,
    VllmLoadUpdate, VllmRankLoad, WorkerId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::queue::{Class, Kind, Queue};
use super::{RunError, RunOptions};
use crate::engine::{Catalog, Engine, Notice};
use crate::fault::{FaultKind, FaultWindows, secs_to_ns};
use crate::net::{ChannelConfig, TelemetryMode};
use crate::result::{EngineSample, Probe, RequestRecord, RunResult};
use crate::workload::Workload;

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
pub(super) struct Sim<'a> {
    w: &'a Workload,
    opts: &'a RunOptions<'a>,
    chan: ChannelConfig,
    cat: Catalog,
    router: Router,
    workers: Vec<WorkerId>,
    engines: Vec<Engine>,
    q: Queue,
    rng: StdRng,
    faults: FaultWindows,
    buffer_replays: bool,
    replay_buf: Vec<VecDeque<(u64, Rc<[u8]>)>>,
    replay_inflight: Vec<bool>,
    wake_pending: Vec<bool>,
    reqs: Vec<ReqState>,
    children: Vec<Vec<u32>>,
    notices: Vec<Notice>,
    enc: Vec<u8>,
    res: RunResult,
    now: u64,
    horizon: u64,
    done: usize,
    progress_pct: Option<usize>,
}

impl<'a> Sim<'a> {
    pub(super) fn new(
        w: &'a Workload,
        policy: Policy,
        opts: &'a RunOptions<'a>,
    ) -> Result<Self, RunError> {
        let fleet = &w.fleet;
        if fleet.engines == 0 {
            return Err(RunError::NoEngines);
        }
        fleet.engine.validate().map_err(RunError::Engine)?;
        fleet
            .channels
            .validate()
            .map_err(|(f, r)| RunError::Channel(f, r))?;
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        if !nonneg(opts.sample_interval_s) {
            return Err(RunError::Option(
                "sample_interval_s",
                "finite and >= 0 seconds",
            ));
        }
        if !nonneg(opts.retry_backoff_s) {
            return Err(RunError::Option(
                "retry_backoff_s",
                "finite and >= 0 seconds",
            ));
        }
        if !pos(opts.sweep_interval_s) {
            return Err(RunError::Option(
                "sweep_interval_s",
                "finite and > 0 seconds",
            ));
        }
        if opts.horizon_s.is_some_and(|h| !nonneg(h)) {
            return Err(RunError::Option("horizon_s", "finite and >= 0 seconds"));
        }
        if opts.probes.iter().any(|&p| !nonneg(p)) {
            return Err(RunError::Option("probes", "finite and >= 0 seconds"));
        }
        for (index, f) in w.faults.iter().enumerate() {
            f.check(fleet.engines)
                .map_err(|why| RunError::Fault { index, why })?;
        }
        let mut index_of = HashMap::with_capacity(w.requests.len());
        for (index, r) in w.requests.iter().enumerate() {
            if index_of.insert(r.id, index as u32).is_some() {
                return Err(RunError::Request {
                    index,
                    why: "duplicate id",
                });
            }
            if !nonneg(r.arrival_s) {
                return Err(RunError::Request {
                    index,
                    why: "arrival_s must be finite and >= 0 seconds",
                });
            }
            if r.pinned.is_some_and(|e| e >= fleet.engines) {
                return Err(RunError::Request {
                    index,
                    why: "pinned to an engine not in the fleet",
                });
            }
        }
        let mut children = vec![Vec::new(); w.requests.len()];
        for (index, r) in w.requests.iter().enumerate() {
            if let Some(f) = r.follows {
                let Some(&p) = index_of.get(&f.parent) else {
                    return Err(RunError::Request {
                        index,
                        why: "follows an unknown request",
                    });
                };
                if p as usize == index || !nonneg(f.think_s) {
                    return Err(RunError::Request {
                        index,
                        why: "follows itself or has a bad think_s",
                    });
                }
                children[p as usize].push(index as u32);
            }
        }
        // A follow-up chain must end at a request that arrives on its own.
        for (index, r) in w.requests.iter().enumerate() {
            let mut cur = r.follows;
            let mut hops = 0;
            while let Some(f) = cur {
                hops += 1;
                if hops > w.requests.len() {
                    return Err(RunError::Request {
                        index,
                        why: "follow-up cycle",
                    });
                }
                cur = w.requests[index_of[&f.parent] as usize].follows;
            }
        }

        let engines_n = fleet.engines as usize;
        let bs = fleet.engine.block_size as usize;
        let mut rc = RouterConfig::new(engines_n, bs);
        rc.admission = opts.admission;
        rc.near_tie_seed = opts.seed;
        rc.index.max_blocks_per_worker = rc
            .index
            .max_blocks_per_worker
            .max(2 * fleet.engine.kv_blocks as usize);
        let mut score = opts.score.unwrap_or_default();
        score.policy = policy;
        rc.score = score;
        let router = Router::new(rc).map_err(|e| RunError::Router(e.to_string()))?;
        let mut workers = Vec::with_capacity(engines_n);
        for e in 0..engines_n {
            let wid = WorkerId::new(e as u64, 0);
            router
                .add_worker(wid)
                .map_err(|e| RunError::Router(e.to_string()))?;
            router
                .configure_engine(
                    e as u64,
                    kvroute::EngineConfig {
                        dp_size: Some(1),
                        max_running_per_rank: Some(fleet.engine.max_running),
                        decode_tps: Some(fleet.engine.decode_tps(fleet.engine.max_running) as f32),
                        prefill_tps: Some(fleet.engine.prefill_tps as f32),
                    },
                )
                .map_err(|e| RunError::Router(e.to_string()))?;
            workers.push(wid);
        }
        let chan = fleet.channels;
        let buffer_replays = chan.replay
            && chan.replay_buffer_batches > 0
            && (chan.event_loss > 0.0 || chan.event_jitter_s > 0.0 || !w.faults.is_empty());
        let reqs = w
            .requests
            .iter()
            .map(|r| ReqState {
                status: Status::Pending,
                arrived: false,
                decision: None,
                engine: None,
                arrival: secs_to_ns(r.arrival_s),
                first_token: None,
                finish: None,
                cached: 0,
                predicted: 0,
                rejections: 0,
                reason: "",
            })
            .collect();
        let res = RunResult {
            workload: w.name.clone(),
            engines: fleet.engines,
            ..RunResult::default()
        };
        Ok(Self {
            w,
            opts,
            chan,
            cat: Catalog::new(&w.requests, fleet.engine.block_size),
            router,
            workers,
            engines: (0..engines_n)
                .map(|_| Engine::new(&fleet.engine, 0))
                .collect(),
            q: Queue::default(),
            rng: StdRng::seed_from_u64(opts.seed),
            faults: FaultWindows::new(&w.faults, fleet.engines),
            buffer_replays,
            replay_buf: vec![VecDeque::new(); engines_n],
            replay_inflight: vec![false; engines_n],
            wake_pending: vec![false; engines_n],
            reqs,
            children,
            notices: Vec::new(),
            enc: Vec::new(),
            res,
            now: 0,
            horizon: opts.horizon_s.map_or(u64::MAX, secs_to_ns),
            done: 0,
            progress_pct: None,
        })
    }

    fn all_done(&self) -> bool {
        self.done == self.reqs.len()
    }

    /// Runs the event loop to the end (every request settled, or the horizon).
    pub(super) fn run(&mut self) {
        // The fleet starts idle and routable.
        for (e, &w) in self.workers.iter().enumerate() {
            let s = self.sample_of(e);
            let _ = self.router.update_load(w, s, Nanos::ZERO);
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
        self.q.push(
            secs_to_ns(self.chan.telemetry_interval_s),
            Class::Tick,
            Kind::Telemetry,
        );
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
            } => self.apply_load(engine, sample, observed),
            Kind::Fault(i) => {
                let f = self.w.faults[i];
                if f.kind == FaultKind::Restart {
                    self.restart(f.engine);
                }
            }
            Kind::Telemetry => {
                self.telemetry_tick();
                let next = t.saturating_add(secs_to_ns(self.chan.telemetry_interval_s));
                self.q.push(next, Class::Tick, Kind::Telemetry);
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

    // ----- requests ------------------------------------------------------------------

    fn arrive(&mut self, i: u32) {
        let t = self.now;
        let st = &mut self.reqs[i as usize];
        if !st.arrived {
            st.arrived = true;
            st.arrival = t;
        }
        let r = &self.w.requests[i as usize];
        if let Some(e) = r.pinned {
            self.reqs[i as usize].reason = "pinned";
            self.place(i, e, None);
            return;
        }
        let entry = self.cat.entry(i);
        let req = RouteRequest::hashes(
            self.cat.prompt_hashes(i),
            entry.prompt_len,
            entry.output_len,
            Nanos(t),
        );
        match self.router.route(&req) {
            Ok(d) => {
                let bs = self.w.fleet.engine.block_size;
                let st = &mut self.reqs[i as usize];
                st.predicted = d.overlap_blocks.saturating_mul(bs).min(entry.prompt_len);
                st.reason = d.reason.name();
                let e = d.worker.worker_id as u32;
                self.place(i, e, Some(d));
            }
            Err(_) => {
                self.res.rejections += 1;
                let st = &mut self.reqs[i as usize];
                st.rejections += 1;
                if st.rejections > self.opts.max_retries {
                    st.status = Status::Rejected;
                    st.reason = "rejected";
                    self.settle(i);
                } else {
                    let next = t.saturating_add(secs_to_ns(self.opts.retry_backoff_s));
                    self.q.push(next, Class::Arrive, Kind::Arrive(i));
                }
            }
        }
    }

    fn place(&mut self, i: u32, e: u32, decision: Option<Decision>) {
        let prompt_len = self.cat.entry(i).prompt_len;
        let st = &mut self.reqs[i as usize];
        st.engine = Some(e);
        if !self.engines[e as usize].accepts(prompt_len) {
            drop(decision);
            st.status = Status::Refused;
            self.settle(i);
            return;
        }
        st.decision = decision;
        st.status = Status::OnEngine;
        st.first_token = None;
        st.cached = 0;
        self.engines[e as usize].enqueue(&self.cat, i);
        self.wake(e);
    }

    /// Counts request `i` as settled (finished, rejected or refused) and settles the
    /// follow-ups that can no longer arrive.
    fn settle(&mut self, i: u32) {
        self.done += 1;
        let completed = self.reqs[i as usize].status == Status::Done;
        let kids = std::mem::take(&mut self.children[i as usize]);
        for &c in &kids {
            if completed {
                let think = self.w.requests[c as usize]
                    .follows
                    .map_or(0.0, |f| f.think_s);
                let at = self.now.saturating_add(secs_to_ns(think));
                self.q.push(at, Class::Arrive, Kind::Arrive(c));
            } else {
                self.reqs[c as usize].status = Status::NeverArrived;
                self.reqs[c as usize].reason = "never_arrived";
                self.settle(c);
            }
        }
        self.children[i as usize] = kids;
        self.report_progress();
    }

    fn report_progress(&mut self) {
        let Some(p) = self.opts.progress else {
            return;
        };
        let n = self.reqs.len().max(1);
        let pct = self.done * 100 / n;
        if self.progress_pct != Some(pct) {
            self.progress_pct = Some(pct);
            p(self.done as f64 / n as f64);
        }
    }

    // ----- engines -------------------------------------------------------------------

    fn wake(&mut self, e: u32) {
        let ei = e as usize;
        if !self.engines[ei].in_step() && !self.wake_pending[ei] {
            self.wake_pending[ei] = true;
            self.q.push(self.now, Class::Engine, Kind::Wake(e));
        }
    }

    fn start_step(&mut self, e: u32) {
        let mut notices = std::mem::take(&mut self.notices);
        notices.clear();
        let eng = &mut self.engines[e as usize];
        if let Some(d) = eng.begin_step(&self.cat, &mut notices) {
            let epoch = eng.epoch();
            let end = self.now.saturating_add(secs_to_ns(d).max(1));
            self.q
                .push(end, Class::Engine, Kind::StepEnd { engine: e, epoch });
        }
        self.handle_notices(&notices);
        self.notices = notices;
    }

    fn step_end(&mut self, e: u32, epoch: u64) {
        let eng = &mut self.engines[e as usize];
        if eng.epoch() != epoch || !eng.in_step() {
            return;
        }
        let mut notices = std::mem::take(&mut self.notices);
        notices.clear();
        eng.end_step(&mut notices);
        self.handle_notices(&notices);
        self.notices = notices;
        self.publish(e);
        self.start_step(e);
    }

    fn handle_notices(&mut self, notices: &[Notice]) {
        let t = self.now;
        for &n in notices {
            match n {
                Notice::Admitted { req, hit_tokens } => {
                    self.reqs[req as usize].cached = hit_tokens;
                }
                Notice::FirstToken { req } => {
                    let st = &mut self.reqs[req as usize];
                    st.first_token = Some(t);
                    if let Some(d) = st.decision.as_mut() {
                        d.reservation.first_token();
                    }
                }
                Notice::Finished { req, .. } => {
                    let st = &mut self.reqs[req as usize];
                    st.finish = Some(t);
                    st.status = Status::Done;
                    st.decision = None;
                    self.res.completed += 1;
                    self.settle(req);
                }
            }
        }
    }

    fn restart(&mut self, e: u32) {
        let lost = self.engines[e as usize].restart();
        self.replay_buf[e as usize].clear();
        self.publish(e);
        for i in lost {
            self.res.restarted_requests += 1;
            let st = &mut self.reqs[i as usize];
            st.decision = None;
            st.status = Status::Pending;
            st.first_token = None;
            st.cached = 0;
            st.predicted = 0;
            self.q.push(self.now, Class::Arrive, Kind::Arrive(i));
        }
    }

    // ----- event channel -------------------------------------------------------------

    fn publish(&mut self, e: u32) {
        let t = self.now;
        let Some(seq) = self.engines[e as usize].take_batch(secs(t), &mut self.enc) else {
            return;
        };
        self.res.channel.batches_published += 1;
        let payload: Rc<[u8]> = Rc::from(&self.enc[..]);
        if self.buffer_replays {
            let buf = &mut self.replay_buf[e as usize];
            if buf.len() >= self.chan.replay_buffer_batches as usize {
                buf.pop_front();
            }
            buf.push_back((seq, Rc::clone(&payload)));
        }
        if self.faults.disconnected(e, t) {
            self.res.channel.batches_lost += 1;
            return;
        }
        let p = self.chan.event_loss.max(self.faults.burst_loss(e, t));
        if p > 0.0 && self.rng.random::<f64>() < p {
            self.res.channel.batches_lost += 1;
            return;
        }
        let mut delay = self.chan.event_delay_s;
        if self.chan.event_jitter_s > 0.0 {
            delay += self.rng.random::<f64>() * self.chan.event_jitter_s;
        }
        self.q.push(
            t.saturating_add(secs_to_ns(delay)),
            Class::Deliver,
            Kind::Batch {
                engine: e,
                seq,
                payload,
            },
        );
    }

    fn ingest(&mut self, e: u32, channel: Channel, seq: u64, payload: &[u8]) {
        let seq_bytes = seq.to_be_bytes();
        let msg = match kvroute_wire::decode_message(&[b"", &seq_bytes, payload]) {
            Ok(m) => m,
            Err(_) => {
                self.res.channel.decode_errors += 1;
                return;
            }
        };
        let w = self.workers[e as usize];
        let trusted = match self.router.ingest(w, channel, &msg) {
            Ok(r) => r.trusted,
            Err(IngestError::Rejected(b)) => {
                self.res.channel.ingest_errors += 1;
                b.report.trusted
            }
            Err(_) => {
                self.res.channel.ingest_errors += 1;
                true
            }
        };
        if !trusted && channel == Channel::Live {
            self.maybe_replay(e);
        }
    }

    fn maybe_replay(&mut self, e: u32) {
        let w = self.workers[e as usize];
        if !self.chan.replay {
            if self.router.is_trusted(w) == Some(false) && self.router.skip_replay(w).is_ok() {
                self.res.channel.replays_skipped += 1;
            }
            return;
        }
        if self.replay_inflight[e as usize] {
            return;
        }
        let Some(rr) = self
            .router
            .replay_requests()
            .into_iter()
            .find(|r| r.worker == w)
        else {
            return;
        };
        self.replay_inflight[e as usize] = true;
        self.res.channel.replays_requested += 1;
        let at = self.now.saturating_add(secs_to_ns(self.chan.event_delay_s));
        self.q.push(
            at,
            Class::Deliver,
            Kind::ReplayAsk {
                engine: e,
                from_seq: rr.from_seq,
            },
        );
    }

    fn replay_ask(&mut self, e: u32, from_seq: u64) {
        let t = self.now;
        if self.faults.disconnected(e, t) {
            self.replay_inflight[e as usize] = false;
            self.q.push(
                t.saturating_add(1_000_000_000),
                Class::Deliver,
                Kind::ReplayRetry(e),
            );
            return;
        }
        let batches: Vec<(u64, Rc<[u8]>)> = self.replay_buf[e as usize]
            .iter()
            .filter(|(s, _)| *s >= from_seq)
            .cloned()
            .collect();
        let at = t.saturating_add(secs_to_ns(self.chan.event_delay_s));
        self.q.push(
            at,
            Class::Deliver,
            Kind::ReplayAnswer { engine: e, batches },
        );
    }

    fn replay_answer(&mut self, e: u32, batches: Vec<(u64, Rc<[u8]>)>) {
        for (seq, payload) in &batches {
            self.res.channel.batches_replayed += 1;
            self.ingest(e, Channel::Replay, *seq, payload);
        }
        let w = self.workers[e as usize];
        if self
            .router
            .ingest(w, Channel::Replay, &kvroute_wire::KvMessage::EndOfReplay)
            .is_err()
        {
            self.res.channel.ingest_errors += 1;
        }
        self.replay_inflight[e as usize] = false;
        if self.router.is_trusted(w) == Some(false) {
            self.maybe_replay(e);
        }
    }

    // ----- telemetry -----------------------------------------------------------------

    fn sample_of(&self, e: usize) -> LoadSample {
        let cfg = self.engines[e].config();
        let f = self.engines[e].load();
        let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        LoadSample {
            running: f.running,
            waiting: f.waiting,
            max_running: cfg.max_running,
            kv_usage: f.kv_usage.clamp(0.0, 1.0),
            waiting_prefill_tokens: Some(sat(f.waiting_prefill_tokens)),
            active_decode_tokens: Some(sat(f.active_decode_tokens)),
            decode_tps: Some(cfg.decode_tps(f.running) as f32),
            prefill_tps: Some(cfg.prefill_tps as f32),
            utilization: None,
        }
    }

    fn telemetry_tick(&mut self) {
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
                    sample,
                    observed: t,
                },
            );
        }
    }

    fn apply_load(&mut self, e: u32, s: LoadSample, observed: u64) {
        let w = self.workers[e as usize];
        let r = match self.chan.telemetry {
            TelemetryMode::Full => self.router.update_load(w, s, Nanos(observed)),
            TelemetryMode::VllmMetrics => self.router.update_vllm_load(
                &VllmLoadUpdate {
                    worker_id: u64::from(e),
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

    // ----- the end -------------------------------------------------------------------

    /// The run's result (requests in id order).
    pub(super) fn finish(mut self) -> RunResult {
        let mut res = std::mem::take(&mut self.res);
        res.end_s = secs(self.now);
        let mut records: Vec<RequestRecord> = self
            .w
            .requests
            .iter()
            .zip(&self.reqs)
            .map(|(r, st)| RequestRecord {
                id: r.id,
                engine: st.engine,
                pinned: r.pinned.is_some(),
                arrival_s: secs(st.arrival),
                first_token_s: st.first_token.map(secs),
                finish_s: st.finish.map(secs),
                prompt_tokens: r.prompt.len(),
                cached_tokens: st.cached,
                predicted_cached_tokens: st.predicted,
                output_tokens: r.output_tokens,
                rejections: st.rejections,
                reason: st.reason.to_owned(),
            })
            .collect();
        records.sort_by_key(|r| r.id);
        res.requests = records;
        for st in &self.reqs {
            match st.status {
                Status::Rejected => res.rejected_for_good += 1,
                Status::Refused => res.refused += 1,
                Status::NeverArrived => res.never_arrived += 1,
                Status::OnEngine => res.in_flight_at_end += 1,
                Status::Pending if st.arrived => res.in_flight_at_end += 1,
                _ => {}
            }
        }
        res.generated_tokens = self.engines.iter().map(Engine::generated).collect();
        res.preemptions = self.engines.iter().map(Engine::preemptions).sum();
        let stats = self.router.stats();
        let mut by_reason = BTreeMap::new();
        for d in &stats.decisions {
            *by_reason.entry(d.reason.to_owned()).or_insert(0) += d.count;
        }
        res.decisions_by_reason = by_reason;
        let fb = stats.fallbacks;
        res.fallbacks = [
            ("missing", fb.missing),
            ("invalid", fb.invalid),
            ("stale", fb.stale),
            ("partial", fb.partial),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| (k.to_owned(), n))
        .collect();
        let ing = self.router.ingest_stats();
        res.channel.gaps = ing.gaps + ing.gaps_cleared;
        res.channel.resets = ing.resets;
        res.reservations_at_end = self
            .workers
            .iter()
            .filter_map(|&w| self.router.reserved(w))
            .map(|r| r.requests)
            .sum();
        res
    }
}
