//! An emulated engine DP rank speaking the engines' protocol over libzmq: a publishing
//! socket sending `[topic, seq, payload]` (an XPUB, which a SUB reads as the engines' PUB,
//! and which tells when a subscription has arrived: a PUB drops what it sends before a new
//! subscriber's subscription has reached it, ZeroMQ's "slow joiner", so a test that needs
//! its first live batch delivered waits for it, [`EmulatedRank::wait_subscribed`]), a replay ROUTER answering `[empty, seq]` requests from
//! a bounded buffer with `[empty, topic, seq, payload]` messages and the end marker, as
//! vLLM's and SGLang's `ZmqEventPublisher` do. Batches are encoded by `kvroute-wire`'s
//! encoder. A batch can be buffered without being sent (a forced loss), and the rank can
//! restart (new sockets on the same ports, sequence from 0, empty buffer).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kvroute_wire::KvEventBatch;
use kvroute_wire::encode::{HashStyle, encode_batch};

struct Inner {
    ctx: zmq::Context,
    pub_sock: zmq::Socket,
    router: Option<zmq::Socket>,
    next_seq: u64,
    buffer: VecDeque<(u64, Vec<u8>)>,
    depth: usize,
    topic: Vec<u8>,
    pub_ep: String,
    replay_ep: Option<String>,
    /// Per replay request served: (sequence asked for, first sequence sent, if any).
    served: Vec<(u64, Option<u64>)>,
    /// Whether the publishing socket has seen a subscription since it was bound.
    subscribed: bool,
}

impl Inner {
    /// Reads the subscription messages queued on the publishing socket (an XPUB passes
    /// each new subscription up as a message whose first byte is 1).
    fn read_subscriptions(&mut self) {
        while let Ok(m) = self.pub_sock.recv_bytes(zmq::DONTWAIT) {
            if m.first() == Some(&1) {
                self.subscribed = true;
            }
        }
    }
}

/// One emulated rank.
pub struct EmulatedRank {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn bind(ctx: &zmq::Context, kind: zmq::SocketType, ep: &str) -> (zmq::Socket, String) {
    let s = ctx.socket(kind).expect("socket");
    s.set_linger(0).unwrap();
    // No high-water mark: a ROUTER at its mark drops replay messages silently.
    s.set_sndhwm(0).unwrap();
    // A port released by a restart can take a moment to be free again.
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Err(e) = s.bind(ep) {
        assert!(std::time::Instant::now() < end, "bind {ep}: {e}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let at = s.get_last_endpoint().unwrap().expect("endpoint");
    (s, at)
}

impl EmulatedRank {
    /// Binds on ephemeral loopback ports; `replay_depth: None` runs no replay socket.
    pub fn start(topic: &str, replay_depth: Option<usize>) -> Self {
        let ctx = zmq::Context::new();
        let (pub_sock, pub_ep) = bind(&ctx, zmq::XPUB, "tcp://127.0.0.1:*");
        let (router, replay_ep) = match replay_depth {
            Some(_) => {
                let (r, ep) = bind(&ctx, zmq::ROUTER, "tcp://127.0.0.1:*");
                (Some(r), Some(ep))
            }
            None => (None, None),
        };
        let inner = Arc::new(Mutex::new(Inner {
            ctx,
            pub_sock,
            router,
            next_seq: 0,
            buffer: VecDeque::new(),
            depth: replay_depth.unwrap_or(0),
            topic: topic.as_bytes().to_vec(),
            pub_ep,
            replay_ep,
            served: Vec::new(),
            subscribed: false,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (i, s) = (inner.clone(), stop.clone());
        let thread = std::thread::spawn(move || serve(i, s));
        Self {
            inner,
            stop,
            thread: Some(thread),
        }
    }

    /// The PUB endpoint.
    pub fn events_endpoint(&self) -> String {
        self.inner.lock().unwrap().pub_ep.clone()
    }

    /// The replay endpoint, if any.
    pub fn replay_endpoint(&self) -> Option<String> {
        self.inner.lock().unwrap().replay_ep.clone()
    }

    /// Every replay request served: (sequence asked for, first sequence sent).
    pub fn served(&self) -> Vec<(u64, Option<u64>)> {
        self.inner.lock().unwrap().served.clone()
    }

    /// Publishes `batch` as the next sequence number (buffered for replay); sent only when
    /// `deliver`. Returns its sequence number.
    pub fn publish(&self, batch: &KvEventBatch, deliver: bool) -> u64 {
        self.publish_as(batch, deliver.then_some(|_: &mut [u8]| {}))
    }

    /// Publishes `batch` as the next sequence number, buffered for replay as it is, but
    /// sent live with a payload that does not decode (its first byte made `0xc1`, which
    /// msgpack never uses): a batch damaged on the way. Returns its sequence number.
    pub fn publish_damaged(&self, batch: &KvEventBatch) -> u64 {
        self.publish_as(batch, Some(|p: &mut [u8]| p[0] = 0xc1))
    }

    /// Waits up to `timeout` until the publishing socket has seen a subscription since it
    /// was bound (or last restarted), so that a live batch sent now reaches the subscriber;
    /// whether it has.
    pub fn wait_subscribed(&self, timeout: std::time::Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        loop {
            let mut g = self.inner.lock().unwrap();
            g.read_subscriptions();
            if g.subscribed {
                return true;
            }
            if std::time::Instant::now() >= end {
                return false;
            }
            drop(g);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Publishes `batch` as the next sequence number, buffered for replay; sent live when
    /// `live` is given, its payload first passed through it.
    fn publish_as(&self, batch: &KvEventBatch, live: Option<fn(&mut [u8])>) -> u64 {
        let mut g = self.inner.lock().unwrap();
        let seq = g.next_seq;
        g.next_seq += 1;
        let payload = encode_batch(batch, HashStyle::Signed);
        if let Some(change) = live {
            let mut sent = payload.clone();
            change(&mut sent);
            let frames: [&[u8]; 3] = [&g.topic, &seq.to_be_bytes(), &sent];
            g.pub_sock.send_multipart(frames, 0).expect("send");
        }
        if g.depth > 0 {
            if g.buffer.len() == g.depth {
                g.buffer.pop_front();
            }
            g.buffer.push_back((seq, payload));
        }
        seq
    }

    /// An engine restart: the sockets are closed and bound again on the same ports, the
    /// sequence starts from 0 and the replay buffer is empty.
    pub fn restart(&self) {
        let mut g = self.inner.lock().unwrap();
        let ctx = g.ctx.clone();
        let pub_ep = g.pub_ep.clone();
        // Closing the old sockets (linger 0) releases their ports.
        g.pub_sock = ctx.socket(zmq::XPUB).expect("socket");
        g.router = None;
        g.pub_sock = bind(&ctx, zmq::XPUB, &pub_ep).0;
        g.subscribed = false;
        if let Some(ep) = g.replay_ep.clone() {
            g.router = Some(bind(&ctx, zmq::ROUTER, &ep).0);
        }
        g.next_seq = 0;
        g.buffer.clear();
    }
}

impl Drop for EmulatedRank {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(inner: Arc<Mutex<Inner>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        {
            let mut g = inner.lock().unwrap();
            let g = &mut *g;
            g.read_subscriptions();
            if let Some(r) = &g.router {
                while let Ok(req) = r.recv_multipart(zmq::DONTWAIT) {
                    if req.len() != 3 || req[2].len() != 8 {
                        continue;
                    }
                    let from = u64::from_be_bytes(req[2][..].try_into().unwrap());
                    let first = g.buffer.iter().map(|(s, _)| *s).find(|s| *s >= from);
                    g.served.push((from, first));
                    for (seq, payload) in g.buffer.iter().filter(|(s, _)| *s >= from) {
                        let m: [&[u8]; 5] = [&req[0], b"", &g.topic, &seq.to_be_bytes(), payload];
                        let _ = r.send_multipart(m, 0);
                    }
                    let end: [&[u8]; 5] = [&req[0], b"", b"", &u64::MAX.to_be_bytes(), b""];
                    let _ = r.send_multipart(end, 0);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
