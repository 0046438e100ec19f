//! The ingest side of a rank: a tokio task that takes live messages from the rank's queue,
//! decodes them (`kvroute::decode_message`) and feeds them to `Router::ingest`, and serves
//! the worker's replay when the Router asks for one (`IngestReport::replay`) or when the
//! socket side overflowed the queue.
//!
//! A replay is fetched from the rank's replay socket (module `replay`) and ingested with
//! `Channel::Replay`, end marker included; the Router's rules then restore trust, or clear
//! the worker when the engine no longer holds the range (truncated or short replay). When
//! the rank has no replay socket, the replay fails, or the Router still waits after the
//! whole answer, the replay is given up with `Router::skip_replay`: the worker's residency
//! is cleared and it is trusted again. Live messages wait in the queue meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kvroute::ingest::SeqOutcome;
use kvroute::{
    Channel, IngestError, IngestReport, KvMessage, ReplayRequest, Router, WorkerId, decode_message,
};
use tokio::sync::{mpsc, watch};

use crate::socket::Frames;
use crate::stats::RankCounters;
use crate::task::Tasks;

/// What the ingest task of one rank holds.
pub(crate) struct RankIngest {
    pub router: Arc<Router>,
    pub worker: WorkerId,
    pub ctx: zmq::Context,
    pub replay_endpoint: Option<String>,
    pub replay_timeout: Duration,
    pub counters: Arc<RankCounters>,
    pub overflow: Arc<AtomicBool>,
    /// Starts the replay fetches (their panics counted).
    pub tasks: Tasks,
}

fn wall_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl RankIngest {
    /// Runs until `stop` turns true or the socket side is gone.
    ///
    /// On stop, the batches already queued are ingested before it returns (no replay is
    /// served for them any more: a gap they leave stays pending in the Router, the worker
    /// untrusted), so a batch received is never dropped unseen.
    pub(crate) async fn run(self, mut rx: mpsc::Receiver<Frames>, mut stop: watch::Receiver<bool>) {
        loop {
            let frames = tokio::select! {
                biased;
                _ = crate::stopped(&mut stop) => {
                    while let Ok(f) = rx.try_recv() {
                        let _ = self.live(&f);
                    }
                    self.counters.set_queue_depth(0);
                    break;
                }
                f = rx.recv() => match f {
                    Some(f) => f,
                    None => break,
                },
            };
            self.counters.set_queue_depth(rx.len());
            let mut pending = self.live(&frames);
            if self.overflow.swap(false, Ordering::AcqRel) {
                pending = self.router.request_replay(self.worker).ok();
            }
            if let Some(req) = pending {
                self.serve(req).await;
            }
        }
    }

    /// Decodes one message (a failure counted).
    fn decode(&self, frames: &Frames) -> Option<KvMessage> {
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let msg = decode_message(&refs).ok();
        if msg.is_none() {
            self.counters.decode_errors.add(1);
        }
        msg
    }

    /// Ingests one decoded message; the report, when the Router took it.
    fn ingest(&self, channel: Channel, msg: &KvMessage) -> Option<IngestReport> {
        if let KvMessage::Batch { batch, .. } = &msg {
            self.counters.set_lag((wall_seconds() - batch.ts).max(0.0));
        }
        self.counters.ingested.add(1);
        let report = match self.router.ingest(self.worker, channel, msg) {
            Ok(r) => r,
            Err(IngestError::Rejected(b)) => {
                self.counters.ingest_errors.add(1);
                b.report
            }
            Err(_) => {
                self.counters.ingest_errors.add(1);
                return None;
            }
        };
        if report.reset_from.is_some() {
            self.counters.resets.add(1);
        }
        Some(report)
    }

    /// A live message; the replay to serve, if the Router now waits for one. A live
    /// message that does not decode is a batch lost (what it held is unknown, a removal
    /// perhaps): the worker's replay is requested at once, not when a later batch shows
    /// the gap (an idle engine may send none for a long time). A batch that never decodes
    /// then ends in a truncated replay and a cleared worker.
    fn live(&self, frames: &Frames) -> Option<ReplayRequest> {
        let Some(msg) = self.decode(frames) else {
            return self.router.request_replay(self.worker).ok();
        };
        let r = self.ingest(Channel::Live, &msg)?;
        if matches!(r.outcome, SeqOutcome::Gap { .. }) {
            self.counters.gaps.add(1);
        }
        r.replay
    }

    fn skip(&self) {
        if self.router.skip_replay(self.worker).is_ok() {
            self.counters.replays_skipped.add(1);
        }
    }

    /// Serves one replay request (module docs).
    async fn serve(&self, req: ReplayRequest) {
        let Some(endpoint) = self.replay_endpoint.clone() else {
            self.skip();
            return;
        };
        let (ctx, timeout) = (self.ctx.clone(), self.replay_timeout);
        let from = req.from_seq;
        let fetch = self
            .tasks
            .spawn_blocking(move || crate::replay::fetch(&ctx, &endpoint, from, timeout));
        // A fetch that panicked or was cancelled (counted by `tasks`) is a failed replay too.
        let Some(Ok(messages)) = self.tasks.join(fetch).await else {
            self.counters.replay_failures.add(1);
            self.skip();
            return;
        };
        self.counters.replays.add(1);
        let mut still_pending = true;
        for m in &messages {
            if let Some(r) = self
                .decode(m)
                .and_then(|msg| self.ingest(Channel::Replay, &msg))
            {
                still_pending = r.replay.is_some();
            }
        }
        if still_pending {
            self.skip();
        }
    }
}
