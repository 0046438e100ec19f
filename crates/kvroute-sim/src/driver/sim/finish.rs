//! The run's result.

use std::collections::BTreeMap;

use kvroute::FallbackCause;

use super::{Sim, Status, secs};
use crate::engine::Engine;
use crate::result::{RequestRecord, RunResult};

impl<'a> Sim<'a> {
    /// The run's result (requests in id order).
    pub(in crate::driver) fn finish(mut self) -> RunResult {
        let mut res = std::mem::take(&mut self.res);
        res.end_s = secs(self.now);
        res.faults_after_end = (self.w.faults.iter().enumerate())
            .filter(|(_, f)| crate::fault::secs_to_ns(f.at_s) > self.now)
            .map(|(i, _)| i)
            .collect();
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
                output_tokens: match (st.status, st.engine) {
                    (Status::Refused, _) | (_, None) => r.output_tokens,
                    (_, Some(e)) => {
                        self.engines[e as usize].output_len(r.prompt.len(), r.output_tokens)
                    }
                },
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
                Status::Pending => res.pending_at_end += 1,
                Status::Done => {}
            }
        }
        res.generated_tokens = self.engines.iter().map(Engine::generated).collect();
        res.preemptions = self.engines.iter().map(Engine::preemptions).sum();
        let stats = self.router.stats();
        let mut by_reason = BTreeMap::new();
        for d in &stats.decisions {
            *by_reason.entry(d.reason.name().to_owned()).or_insert(0) += d.count;
        }
        res.decisions_by_reason = by_reason;
        res.fallbacks = FallbackCause::ALL
            .into_iter()
            .map(|c| (c.name(), stats.fallbacks.get(c)))
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
