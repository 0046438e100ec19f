//! Connecting real engines: two vLLM engines' KV events and load telemetry, from the bytes
//! on the wire to a routing decision, including the failure every embedding must handle, a
//! lost event batch.
//!
//! No socket is opened: each engine is emulated by exactly what it would send. Its KV event
//! batches are msgpack, encoded here with `rmp-serde` in the two shapes vLLM uses (named
//! maps since mid-2026, positional arrays before), inside the three-frame ZMQ message
//! `[topic, 8-byte big-endian sequence number, payload]` of its PUB socket; its replay
//! socket answers with `[sequence, payload]` messages and an end marker; its load is the
//! Prometheus text of `GET /metrics`. A gateway receives the same frames from one ZMQ SUB
//! socket per engine DP rank, and passes them to [`kvroute::decode_message`] and
//! [`Router::ingest`] exactly as below. Every format is described in `docs/WIRE-FORMAT.md`.
//!
//! What it shows, in order:
//! 1. both engines publish; telemetry is applied and published on a 500 ms timer;
//! 2. engine A's batch 2 is lost: the next batch is a gap, A is untrusted (its cache is
//!    ignored by `route`) and [`Router::replay_requests`] asks for a replay from 1, the
//!    last batch applied (the witness that shows whether A restarted inside the gap);
//! 3. A's replay socket resends batches 1 to 3: batch 1 is the copy applied (confirmed),
//!    2 and 3 are applied, trust is back and the request for A's conversation goes to A
//!    with all its cached blocks;
//! 4. engine B (no replay socket) loses a batch too: [`Router::skip_replay`] clears B's
//!    residency and trusts it again at once;
//! 5. B's telemetry stops: the next publications mark B stale (the telemetry rule is scoped
//!    to it: one worker of two is not past half the fleet). B, whose figures are no longer
//!    current, is costed without its cache from what is known of it (its last report, less
//!    the requests it counted that have ended, plus what was routed there since): as the
//!    only router, that is B's whole change, and B takes the request on its slightly lower
//!    KV usage; with `router_replicas` 2, B is costed no better than A.
//!
//! Run: `cargo run --release -p kvroute --example engine_events`. The test
//! `crates/kvroute/tests/engine_events_example.rs` runs the same scenario, so the facts
//! asserted here are checked by `cargo test`.

use std::error::Error;
use std::io::Write;

use kvroute::ingest::SeqOutcome;
use kvroute::{
    Channel, Decision, EngineConfig, KvMessage, Nanos, Reason, ReplayRequest, RouteRequest, Router,
    RouterConfig, Validity, WorkerId,
};
use kvroute::{END_OF_REPLAY_SEQ, WireCounters, parse_vllm_metrics};
use serde::Serialize;

/// Tokens per KV block: vLLM's default, and the router's.
const BLOCK: usize = 16;

/// Blocks per prefill chunk (vLLM publishes one `BlockStored` per scheduled chunk).
const CHUNK_BLOCKS: usize = 32;

/// vLLM's `max_num_seqs` of both engines (requests per DP rank): deployment configuration,
/// not a metric, so the gateway tells the router.
const MAX_NUM_SEQS: u32 = 64;

/// One vLLM KV event as a named map (vLLM from mid-2026: msgspec tagged struct, tag key
/// `type`). `lora_id`, `medium` and `lora_name` are always sent; the optional fields
/// (`extra_keys`, `group_idx`, ...) are omitted when they hold their default.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Named {
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
        lora_id: Option<i64>,
        medium: Option<&'static str>,
        lora_name: Option<&'static str>,
    },
}

/// The same event as a positional array (vLLM before mid-2026; this is the 7-element
/// generation of about v0.10: tag, hashes, parent, token ids, block size, LoRA id, medium).
#[derive(Serialize)]
#[serde(untagged)]
enum Positional {
    BlockStored(
        &'static str,
        Vec<u64>,
        Option<u64>,
        Vec<u32>,
        u32,
        Option<i64>,
        Option<&'static str>,
    ),
}

/// One event in either encoding (a batch holds one engine's encoding only).
#[derive(Serialize)]
#[serde(untagged)]
enum Event {
    Named(Named),
    Positional(Positional),
}

/// One emulated engine DP rank: its PUB socket's sequence numbers, its replay buffer and
/// its own block hashes (opaque to kvroute, which hashes the token ids).
struct Engine {
    worker: WorkerId,
    topic: &'static str,
    positional: bool,
    next_seq: u64,
    next_hash: u64,
    /// `(seq, payload)` of every batch published: what the replay socket serves.
    buffer: Vec<(u64, Vec<u8>)>,
}

impl Engine {
    fn new(worker: WorkerId, topic: &'static str, positional: bool) -> Self {
        Self {
            worker,
            topic,
            positional,
            next_seq: 0,
            next_hash: worker.engine_id.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            buffer: Vec::new(),
        }
    }

    /// A `BlockStored` of whole blocks of `tokens` after `parent` (the engine hash of the
    /// block before, `None` at the start of a sequence); returns it and its last hash.
    fn store(&mut self, parent: Option<u64>, tokens: &[u32]) -> (Event, u64) {
        let blocks = tokens.len() / BLOCK;
        let hashes: Vec<u64> = (0..blocks)
            .map(|_| {
                // Stand-in for vLLM's SHA-256 block hash: any 64-bit value, never derived.
                self.next_hash = self.next_hash.wrapping_mul(6_364_136_223_846_793_005) ^ 0x5851;
                self.next_hash
            })
            .collect();
        let last = *hashes.last().expect("at least one block");
        let token_ids = tokens[..blocks * BLOCK].to_vec();
        let event = if self.positional {
            Event::Positional(Positional::BlockStored(
                "BlockStored",
                hashes,
                parent,
                token_ids,
                BLOCK as u32,
                None,
                Some("GPU"),
            ))
        } else {
            Event::Named(Named::BlockStored {
                block_hashes: hashes,
                parent_block_hash: parent,
                token_ids,
                block_size: BLOCK as u32,
                lora_id: None,
                medium: Some("GPU"),
                lora_name: None,
            })
        };
        (event, last)
    }

    /// Publishes one batch `[ts, events, data_parallel_rank]` at engine time `ts` (seconds
    /// since the Unix epoch) and returns the PUB message's three frames.
    fn publish(&mut self, ts: f64, events: Vec<Event>) -> [Vec<u8>; 3] {
        let batch = (ts, events, Some(self.worker.dp_rank));
        // `to_vec_named`: structs (the named events) as msgpack maps, tuples as arrays.
        let payload = rmp_serde::to_vec_named(&batch).expect("a batch always encodes");
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buffer.push((seq, payload.clone()));
        [
            self.topic.as_bytes().to_vec(),
            seq.to_be_bytes().to_vec(),
            payload,
        ]
    }

    /// What the replay (ROUTER) socket answers to the 8 bytes `request`: every buffered
    /// batch from that sequence number as `[seq, payload]`, then the end marker.
    fn replay(&self, request: [u8; 8]) -> Vec<Vec<Vec<u8>>> {
        let from = u64::from_be_bytes(request);
        let mut out: Vec<Vec<Vec<u8>>> = self
            .buffer
            .iter()
            .filter(|(seq, _)| *seq >= from)
            .map(|(seq, payload)| vec![seq.to_be_bytes().to_vec(), payload.clone()])
            .collect();
        out.push(vec![END_OF_REPLAY_SEQ.to_be_bytes().to_vec(), Vec::new()]);
        out
    }
}

/// The gateway side: decode (counted) and ingest one message.
struct Gateway<'a> {
    router: &'a Router,
    wire: WireCounters,
}

impl Gateway<'_> {
    fn receive(
        &self,
        from: WorkerId,
        channel: Channel,
        frames: &[Vec<u8>],
    ) -> Result<kvroute::IngestReport, Box<dyn Error>> {
        let parts: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        // A malformed message is a typed error, counted in `wire.stats()`; a real gateway
        // logs it and goes on (the batch's sequence number then shows up as a gap).
        let msg: KvMessage = self.wire.decode_message(&parts)?;
        Ok(self.router.ingest(from, channel, &msg)?)
    }

    /// One telemetry tick: applies the scrapes that answered, then publishes. `publish`
    /// runs on every tick even when a scrape is missing: staleness is judged when a
    /// snapshot is published.
    fn tick(&self, now: Nanos, scrapes: &[(u64, String)]) -> Result<(), Box<dyn Error>> {
        for (engine_id, text) in scrapes {
            let update = parse_vllm_metrics(*engine_id, text)?;
            self.router.update_vllm_load(&update, now)?;
        }
        self.router.publish(now)?;
        Ok(())
    }
}

/// `GET /metrics` of a vLLM engine with one DP rank (only the lines kvroute reads, plus a
/// comment and an unrelated metric, which are skipped).
fn metrics(running: u32, waiting: u32, kv_usage: f64) -> String {
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0\n\
         vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}.0\n\
         vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"m\"}} {kv_usage}\n\
         vllm:prompt_tokens_total{{engine=\"0\",model_name=\"m\"}} 123456.0\n"
    )
}

/// Distinct token ids: `n` tokens from `start`.
fn tokens(start: u32, n: usize) -> Vec<u32> {
    (start..start + n as u32).collect()
}

/// Routes `prompt` at `now` and prints the decision.
fn route(
    out: &mut dyn Write,
    router: &Router,
    what: &str,
    prompt: &[u32],
    now: Nanos,
) -> Result<Decision, Box<dyn Error>> {
    let d = router.route(&RouteRequest::tokens(prompt, 128, now))?;
    writeln!(
        out,
        "  route {what} ({} tokens): worker {}, {} cached blocks, reason {}",
        prompt.len(),
        d.worker,
        d.overlap_blocks,
        d.reason.name()
    )?;
    Ok(d)
}

/// What the scenario observed (the test checks these against hand-derived values).
#[derive(Debug, PartialEq)]
pub struct Summary {
    /// The replay requests after engine A's lost batch.
    pub replay_after_gap: Vec<ReplayRequest>,
    /// The cached blocks `route` credited A with while A was untrusted.
    pub overlap_while_untrusted: u32,
    /// The decision after A's replay: worker, cached blocks, reason.
    pub after_replay: (WorkerId, u32, Reason),
    /// Batches `skip_replay` gave up for engine B.
    pub skipped_batches: u64,
    /// Whether B was trusted after `skip_replay`.
    pub b_trusted_after_skip: bool,
    /// The first decision once B's telemetry went stale: worker and reason.
    pub stale_decision: (WorkerId, Reason),
    /// The same decision with `router_replicas` 2.
    pub stale_decision_replicas: (WorkerId, Reason),
}

/// The whole scenario; prints what happens to `out`.
pub fn run(out: &mut dyn Write) -> Result<Summary, Box<dyn Error>> {
    let router = Router::new(RouterConfig::new(16, BLOCK))?;
    let (a, b) = (WorkerId::new(1, 0), WorkerId::new(2, 0));
    for w in [a, b] {
        router.add_worker(w)?;
        router.configure_engine(w.engine(), {
            let mut c = EngineConfig::default();
            c.max_running_per_rank = Some(MAX_NUM_SEQS);
            c
        })?;
    }
    let gw = Gateway {
        router: &router,
        wire: WireCounters::new(),
    };
    // Engine A: vLLM 0.33 (named maps). Engine B: an older vLLM (positional arrays).
    let mut ea = Engine::new(a, "kv-events", false);
    let mut eb = Engine::new(b, "kv-events", true);
    let t = |ms: u64| Nanos::from_millis(ms);
    let ts = |ms: u64| 1_789_000_000.0 + ms as f64 / 1000.0;
    // Both engines run 3 requests and queue 1; A's KV cache is a little fuller (30 % against
    // 25 %), so B is cheaper for a request neither holds, and A for one it holds.
    let (load_a, load_b) = (metrics(3, 1, 0.30), metrics(3, 1, 0.25));
    let both = |la: &str, lb: &str| vec![(1, la.to_owned()), (2, lb.to_owned())];

    writeln!(out, "t=0.0 s: telemetry of both engines, published")?;
    gw.tick(t(0), &both(&load_a, &load_b))?;

    // A prefills a 96-block conversation in three chunks of 32 blocks (one store per
    // chunk, each chained to the previous one by `parent_block_hash`); B a 4-block document.
    let conversation = tokens(10_000, 3 * CHUNK_BLOCKS * BLOCK);
    let document = tokens(50_000, 4 * BLOCK);
    let chunk = |i: usize| &conversation[i * CHUNK_BLOCKS * BLOCK..(i + 1) * CHUNK_BLOCKS * BLOCK];
    let (s0, h0) = ea.store(None, chunk(0));
    let (s1, h1) = ea.store(Some(h0), chunk(1));
    let (s2, _) = ea.store(Some(h1), chunk(2));
    let (other, _) = ea.store(None, &tokens(90_000, 2 * BLOCK));
    let (doc, _) = eb.store(None, &document);

    writeln!(out, "t=0.1 s: A publishes batches 0 and 1, B its batch 0")?;
    for frames in [ea.publish(ts(100), vec![s0]), ea.publish(ts(110), vec![s1])] {
        let r = gw.receive(a, Channel::Live, &frames)?;
        assert_eq!(r.outcome, SeqOutcome::Contiguous);
    }
    gw.receive(b, Channel::Live, &eb.publish(ts(100), vec![doc]))?;

    writeln!(
        out,
        "t=0.2 s: A's batch 2 is lost on the PUB socket; batch 3 arrives"
    )?;
    let _lost = ea.publish(ts(200), vec![s2]);
    let r = gw.receive(a, Channel::Live, &ea.publish(ts(210), vec![other]))?;
    writeln!(
        out,
        "  ingest of batch 3: {:?}, A trusted: {}",
        r.outcome, r.trusted
    )?;
    assert_eq!(r.outcome, SeqOutcome::Gap { missed: 1 });
    assert!(!r.trusted);
    let replay_after_gap = router.replay_requests();
    for rq in &replay_after_gap {
        writeln!(
            out,
            "  replay_requests(): worker {} from seq {} (request bytes {:02x?}), \
             complete once seq {} is applied",
            rq.worker,
            rq.from_seq,
            rq.request_bytes(),
            rq.last_live_seq.unwrap_or(rq.from_seq)
        )?;
    }

    writeln!(out, "t=0.5 s: telemetry tick")?;
    gw.tick(t(500), &both(&load_a, &load_b))?;
    let mut request = conversation.clone();
    request.extend(tokens(80_000, 20));
    let d = route(out, &router, "A's conversation", &request, t(510))?;
    writeln!(
        out,
        "  (A's cache is ignored until the replay: it could be missing the lost blocks)"
    )?;
    let overlap_while_untrusted = d.overlap_blocks;
    assert_eq!(overlap_while_untrusted, 0);
    drop(d);

    writeln!(
        out,
        "t=0.6 s: the gateway asks A's replay socket for batches from 1 (the witness)"
    )?;
    for rq in &replay_after_gap {
        assert_eq!(rq.worker, a);
        for frames in ea.replay(rq.request_bytes()) {
            let r = gw.receive(a, Channel::Replay, &frames)?;
            let what = r
                .seq
                .map_or("the end marker".to_owned(), |s| format!("seq {s}"));
            writeln!(
                out,
                "  replay sends {what}: {:?}, A trusted: {}",
                r.outcome, r.trusted
            )?;
        }
    }
    assert_eq!(router.is_trusted(a), Some(true));
    assert!(router.replay_requests().is_empty());

    writeln!(out, "t=1.0 s: telemetry tick")?;
    gw.tick(t(1000), &both(&load_a, &load_b))?;
    let d = route(out, &router, "A's conversation", &request, t(1010))?;
    assert_eq!(
        d.worker, a,
        "the request goes to the engine holding its prefix"
    );
    let after_replay = (d.worker, d.overlap_blocks, d.reason);
    drop(d);
    let d = route(out, &router, "B's document", &document, t(1010))?;
    assert_eq!((d.worker, d.overlap_blocks), (b, 4));
    drop(d);

    writeln!(
        out,
        "t=1.2 s: B (no replay socket configured) loses its batch 1; batch 2 arrives"
    )?;
    let (more, _) = eb.store(None, &tokens(60_000, 2 * BLOCK));
    let (again, _) = eb.store(None, &tokens(70_000, 2 * BLOCK));
    let _lost = eb.publish(ts(1200), vec![more]);
    let r = gw.receive(b, Channel::Live, &eb.publish(ts(1210), vec![again]))?;
    writeln!(
        out,
        "  ingest of batch 2: {:?}, B trusted: {}",
        r.outcome, r.trusted
    )?;
    let skipped_batches = router.skip_replay(b)?;
    let b_trusted_after_skip = router.is_trusted(b) == Some(true);
    writeln!(
        out,
        "  skip_replay(B): {skipped_batches} batches never applied; B's residency cleared, \
         B trusted: {b_trusted_after_skip}"
    )?;
    assert!(b_trusted_after_skip);
    let d = route(out, &router, "B's document", &document, t(1220))?;
    writeln!(
        out,
        "  (B's cache is under-stated from now on, never over-stated)"
    )?;
    assert_eq!(d.overlap_blocks, 0);
    drop(d);

    writeln!(
        out,
        "t=2.0 s on: B's /metrics stops answering; publish still runs every 500 ms"
    )?;
    gw.tick(t(1500), &both(&load_a, &load_b))?;
    let mut stale_decision = (a, Reason::NoEligibleWorker);
    let mut stale_decision_replicas = stale_decision;
    let b_slot = router.slot_of(b).expect("B is registered").index();
    for ms in (2000..=4500).step_by(500) {
        gw.tick(t(ms), &[(1, load_a.clone())])?;
        let b_stale = router.load_reader().load().validity()[b_slot] == Validity::Stale;
        let d = router.route(&RouteRequest::tokens(&document, 128, t(ms + 10)))?;
        stale_decision = (d.worker, d.reason);
        if b_stale {
            writeln!(
                out,
                "  t={:.1} s: B's last report is {:.1} s old at publication: B is stale \
                 (one worker of two: the rule is scoped), costed from what is known of it; \
                 worker {}, reason {}",
                ms as f64 / 1000.0,
                (ms - 1500) as f64 / 1000.0,
                d.worker,
                d.reason.name()
            )?;
            drop(d);
            router.update_score_config(|c| c.router_replicas = 2)?;
            let d = router.route(&RouteRequest::tokens(&document, 128, t(ms + 20)))?;
            stale_decision_replicas = (d.worker, d.reason);
            writeln!(
                out,
                "  with router_replicas 2, B is costed no better than A: worker {}, reason {}",
                d.worker,
                d.reason.name()
            )?;
            break;
        }
    }
    let stats = gw.wire.stats();
    writeln!(
        out,
        "decoded {} batches ({} stored blocks), {} decode errors; ingest: {} gaps, {} replayed, \
         {} replays completed, {} skipped",
        stats.batches,
        stats.stored_blocks,
        stats.total_errors(),
        router.ingest_stats().gaps,
        router.ingest_stats().replayed,
        router.ingest_stats().replays_completed,
        router.ingest_stats().replays_skipped,
    )?;
    Ok(Summary {
        replay_after_gap,
        overlap_while_untrusted,
        after_replay,
        skipped_batches,
        b_trusted_after_skip,
        stale_decision,
        stale_decision_replicas,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let summary = run(&mut std::io::stdout())?;
    assert_eq!(summary.after_replay.0, WorkerId::new(1, 0));
    Ok(())
}
