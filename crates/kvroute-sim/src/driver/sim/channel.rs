//! The event channel: publishing batches (loss, jitter, disconnects), decoding and ingesting
//! them, and replays.

use std::rc::Rc;

use kvroute::{Channel, IngestError};
use rand::Rng;

use super::{Sim, secs};
use crate::driver::queue::{Class, Kind};
use crate::fault::secs_to_ns;

/// Encoding buffers kept for reuse (batches in flight at once beyond this allocate).
const SPARE_BUFS: usize = 64;

impl<'a> Sim<'a> {
    pub(super) fn publish(&mut self, e: u32) {
        let t = self.now;
        let mut buf = self.spare_bufs.pop().unwrap_or_default();
        let Some(seq) = self.engines[e as usize].take_batch(&self.cat, secs(t), &mut buf) else {
            self.spare_bufs.push(buf);
            return;
        };
        self.res.channel.batches_published += 1;
        let payload = Rc::new(buf);
        if self.buffer_replays {
            let buf = &mut self.replay_buf[e as usize];
            let old = if buf.len() >= self.chan.replay_buffer_batches as usize {
                buf.pop_front()
            } else {
                None
            };
            buf.push_back((seq, Rc::clone(&payload)));
            if let Some((_, old)) = old {
                self.recycle(old);
            }
        }
        if self.faults.disconnected(e, t) {
            self.res.channel.batches_lost += 1;
            self.recycle(payload);
            return;
        }
        let p = self.chan.event_loss.max(self.faults.burst_loss(e, t));
        if p > 0.0 && self.rng.random::<f64>() < p {
            self.res.channel.batches_lost += 1;
            self.recycle(payload);
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

    /// Keeps a batch's buffer for the next encoding once nothing else holds it (a replay
    /// buffer may); at most [`SPARE_BUFS`] are kept.
    pub(super) fn recycle(&mut self, payload: Rc<Vec<u8>>) {
        if self.spare_bufs.len() < SPARE_BUFS {
            if let Ok(buf) = Rc::try_unwrap(payload) {
                self.spare_bufs.push(buf);
            }
        }
    }

    pub(super) fn ingest(&mut self, e: u32, channel: Channel, seq: u64, payload: &[u8]) {
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

    pub(super) fn maybe_replay(&mut self, e: u32) {
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

    pub(super) fn replay_ask(&mut self, e: u32, from_seq: u64) {
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
        let batches: Vec<(u64, Rc<Vec<u8>>)> = self.replay_buf[e as usize]
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

    pub(super) fn replay_answer(&mut self, e: u32, batches: Vec<(u64, Rc<Vec<u8>>)>) {
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
}
