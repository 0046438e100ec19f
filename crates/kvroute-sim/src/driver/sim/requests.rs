//! Requests: arrival, routing and retries, placement on an engine, follow-ups; engine steps
//! and what they report; restarts.

use kvroute::{Decision, Nanos, Outcome, RouteRequest};

use super::{Sim, Status};
use crate::driver::queue::{Class, Kind};
use crate::engine::Notice;
use crate::fault::{FAILOVER_DELAY_S, secs_to_ns};

impl<'a> Sim<'a> {
    pub(super) fn arrive(&mut self, i: u32) {
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
                // At most what an engine can reuse: the last prompt token is always
                // recomputed, so `(prompt − 1)/bs` full blocks.
                let reusable = entry.prompt_len.saturating_sub(1) / bs * bs;
                st.predicted = d.overlap_blocks.saturating_mul(bs).min(reusable);
                st.reason = d.reason.name();
                let e = d.worker.engine_id as u32;
                self.place(i, e, Some(d));
            }
            Err(_) => {
                self.res.rejections += 1;
                self.retry_or_give_up(i, self.opts.retry_backoff_s, "rejected");
            }
        }
    }

    pub(super) fn place(&mut self, i: u32, e: u32, decision: Option<Decision>) {
        let prompt_len = self.cat.entry(i).prompt_len;
        if self.faults.failing(e, self.now) {
            self.fail_attempt(i, decision);
            return;
        }
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

    /// The engine failed request `i` at once: the failure goes to the router, and the
    /// request is tried again [`FAILOVER_DELAY_S`] later, or given up past its retries.
    fn fail_attempt(&mut self, i: u32, decision: Option<Decision>) {
        if let Some(d) = decision {
            self.router.finish(d, Outcome::Failed);
        }
        self.res.failed_attempts += 1;
        self.retry_or_give_up(i, FAILOVER_DELAY_S, "failed");
    }

    /// Counts one more refused attempt of request `i`: tries it again `delay_s` later, or
    /// past the retries gives it up with `reason`.
    fn retry_or_give_up(&mut self, i: u32, delay_s: f64, reason: &'static str) {
        let st = &mut self.reqs[i as usize];
        st.rejections += 1;
        if st.rejections > self.opts.max_retries {
            st.status = Status::Rejected;
            st.reason = reason;
            self.settle(i);
        } else {
            let next = self.now.saturating_add(secs_to_ns(delay_s));
            self.q.push(next, Class::Arrive, Kind::Arrive(i));
        }
    }

    /// Counts request `i` as settled (finished, rejected or refused) and settles the
    /// follow-ups that can no longer arrive.
    pub(super) fn settle(&mut self, i: u32) {
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

    pub(super) fn report_progress(&mut self) {
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

    pub(super) fn wake(&mut self, e: u32) {
        let ei = e as usize;
        if !self.engines[ei].in_step() && !self.wake_pending[ei] {
            self.wake_pending[ei] = true;
            self.q.push(self.now, Class::Engine, Kind::Wake(e));
        }
    }

    pub(super) fn start_step(&mut self, e: u32) {
        let mut notices = std::mem::take(&mut self.notices);
        notices.clear();
        let eng = &mut self.engines[e as usize];
        if let Some(d) = eng.begin_step(&self.cat, &mut notices) {
            let d = d * self.faults.slowdown(e, self.now);
            let epoch = eng.epoch();
            let end = self.now.saturating_add(secs_to_ns(d).max(1));
            self.q
                .push(end, Class::Engine, Kind::StepEnd { engine: e, epoch });
        }
        self.handle_notices(&notices);
        self.notices = notices;
    }

    pub(super) fn step_end(&mut self, e: u32, epoch: u64) {
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

    pub(super) fn handle_notices(&mut self, notices: &[Notice]) {
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
                    if let Some(d) = st.decision.take() {
                        self.router.finish(d, Outcome::Completed);
                    }
                    self.res.completed += 1;
                    self.settle(req);
                }
            }
        }
    }

    pub(super) fn restart(&mut self, e: u32) {
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
}
