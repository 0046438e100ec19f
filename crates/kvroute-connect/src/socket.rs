//! The socket side of a rank: one OS thread owning the rank's ZMQ SUB socket (libzmq
//! sockets are blocking and not `Sync`), which pushes every live message into the rank's
//! bounded queue and watches the socket's monitor for connects and disconnects.
//!
//! libzmq reconnects on its own after a disconnect (an engine restart), waiting
//! `reconnect_initial`, doubling on every failed attempt up to `reconnect_max`: the bounded
//! exponential backoff. A message that meets a full queue is not dropped silently: it is
//! counted (`overflows`) and the rank's overflow flag is raised, which makes the ingest
//! side mark the worker for a replay (`Router::request_replay`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use tokio::sync::mpsc::{self, error::TrySendError};

use crate::stats::RankCounters;
use crate::task::Tasks;

/// One multipart message, frames as received.
pub(crate) type Frames = Vec<Vec<u8>>;

/// What a socket thread needs.
pub(crate) struct SocketParams {
    pub ctx: zmq::Context,
    pub endpoint: String,
    pub topic: Vec<u8>,
    pub reconnect_initial_ms: i32,
    pub reconnect_max_ms: i32,
    pub queue: mpsc::Sender<Frames>,
    pub counters: Arc<RankCounters>,
    pub overflow: Arc<AtomicBool>,
    pub stop: Arc<AtomicBool>,
    /// A name unique in the process, for the monitor's inproc endpoint.
    pub monitor_name: String,
    /// Starts the thread (its panic counted).
    pub tasks: Tasks,
}

/// How often the thread looks at its stop flag (ms).
const POLL_MS: i64 = 50;

/// Starts the socket thread.
///
/// # Errors
/// The libzmq error of creating, configuring or connecting the socket (an endpoint libzmq
/// cannot parse, say).
pub(crate) fn spawn(p: SocketParams) -> Result<JoinHandle<()>, zmq::Error> {
    let sub = p.ctx.socket(zmq::SUB)?;
    sub.set_linger(0)?;
    sub.set_rcvhwm(100_000)?;
    sub.set_reconnect_ivl(p.reconnect_initial_ms)?;
    sub.set_reconnect_ivl_max(p.reconnect_max_ms)?;
    let events = zmq::SocketEvent::CONNECTED as i32 | zmq::SocketEvent::DISCONNECTED as i32;
    let mon_addr = format!("inproc://{}", p.monitor_name);
    sub.monitor(&mon_addr, events)?;
    let mon = p.ctx.socket(zmq::PAIR)?;
    mon.connect(&mon_addr)?;
    sub.set_subscribe(&p.topic)?;
    sub.connect(&p.endpoint)?;
    let name = format!("kvroute-sub-{}", p.monitor_name);
    p.tasks
        .clone()
        .thread(name, move || run(sub, mon, p))
        .map_err(|_| zmq::Error::ENOMEM)
}

fn run(sub: zmq::Socket, mon: zmq::Socket, p: SocketParams) {
    let mut ever_connected = false;
    while !p.stop.load(Ordering::Relaxed) {
        let mut items = [sub.as_poll_item(zmq::POLLIN), mon.as_poll_item(zmq::POLLIN)];
        if zmq::poll(&mut items, POLL_MS).is_err() {
            continue;
        }
        let (data, events) = (items[0].is_readable(), items[1].is_readable());
        if events {
            while let Ok(m) = mon.recv_multipart(zmq::DONTWAIT) {
                let Some(ev) = m.first().and_then(|f| f.get(..2)) else {
                    continue;
                };
                let ev = zmq::SocketEvent::from_raw(u16::from_ne_bytes([ev[0], ev[1]]));
                match ev {
                    zmq::SocketEvent::CONNECTED => {
                        if ever_connected {
                            p.counters.reconnects.add(1);
                        }
                        ever_connected = true;
                        p.counters.set_connected(true);
                    }
                    zmq::SocketEvent::DISCONNECTED => p.counters.set_connected(false),
                    _ => {}
                }
            }
        }
        if data && !drain(&sub, &p) {
            break;
        }
    }
    p.counters.set_connected(false);
    let _ = sub.disconnect(&p.endpoint);
}

/// Moves every waiting message into the queue; `false` when the ingest side is gone.
fn drain(sub: &zmq::Socket, p: &SocketParams) -> bool {
    while let Ok(frames) = sub.recv_multipart(zmq::DONTWAIT) {
        p.counters.batches.add(1);
        match p.queue.try_send(frames) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                p.counters.overflows.add(1);
                p.overflow.store(true, Ordering::Release);
            }
            Err(TrySendError::Closed(_)) => return false,
        }
        p.counters
            .set_queue_depth(p.queue.max_capacity() - p.queue.capacity());
    }
    true
}
