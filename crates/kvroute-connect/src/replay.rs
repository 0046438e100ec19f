//! The replay client: asks a rank's replay ROUTER socket for the batches from a sequence
//! number on and collects the answer up to the end marker.
//!
//! Protocol (vLLM's and SGLang's `ZmqEventPublisher`, `docs/WIRE-FORMAT.md`, "Replay"):
//! a DEALER sends `[empty, start seq as 8 bytes big-endian]`; the ROUTER answers one message
//! per buffered batch, `[empty, topic, seq, payload]` (older publishers: no topic), then
//! `[empty, topic, 0xFFFF_FFFF_FFFF_FFFF, empty]`. The empty delimiter is removed here;
//! the rest goes to `decode_message` unchanged.

use core::fmt;
use std::time::{Duration, Instant};

use crate::socket::Frames;

/// Why a replay brought nothing usable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplayError {
    /// libzmq refused the socket, the endpoint or a send (its message).
    Socket(String),
    /// No message for `timeout` before the end marker (engine gone, or no replay socket
    /// behind the endpoint). The messages received before are returned with it.
    Timeout {
        /// Messages received before the silence.
        received: usize,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Socket(m) => write!(f, "replay socket: {m}"),
            Self::Timeout { received } => {
                write!(f, "replay answer stopped after {received} messages")
            }
        }
    }
}

impl std::error::Error for ReplayError {}

fn zerr(e: zmq::Error) -> ReplayError {
    ReplayError::Socket(e.to_string())
}

/// Whether `frames` (delimiter removed) are the end marker: a sequence frame of all ones.
fn is_end(frames: &Frames) -> bool {
    let n = frames.len();
    n >= 2 && frames[n - 2] == u64::MAX.to_be_bytes() && frames[n - 1].is_empty()
}

/// Blocking: asks `endpoint` for the batches from `from_seq` and returns every answer
/// message (end marker included, as the last one), each without its empty delimiter. A
/// silence of `timeout` between messages fails the replay.
///
/// # Errors
/// [`ReplayError::Socket`]; [`ReplayError::Timeout`], with what had arrived dropped (a
/// partial answer ingested without its end marker would leave the replay pending).
pub fn fetch(
    ctx: &zmq::Context,
    endpoint: &str,
    from_seq: u64,
    timeout: Duration,
) -> Result<Vec<Frames>, ReplayError> {
    let dealer = ctx.socket(zmq::DEALER).map_err(zerr)?;
    dealer.set_linger(0).map_err(zerr)?;
    dealer.set_rcvhwm(0).map_err(zerr)?;
    dealer.connect(endpoint).map_err(zerr)?;
    let request: [&[u8]; 2] = [b"", &kvroute_wire::replay_request(from_seq)];
    dealer.send_multipart(request, 0).map_err(zerr)?;
    let mut out = Vec::new();
    let mut last = Instant::now();
    loop {
        let left = timeout.saturating_sub(last.elapsed());
        if left.is_zero() {
            return Err(ReplayError::Timeout {
                received: out.len(),
            });
        }
        let ms = left.as_millis().clamp(1, 1000) as i64;
        if dealer.poll(zmq::POLLIN, ms).map_err(zerr)? == 0 {
            continue;
        }
        while let Ok(mut frames) = dealer.recv_multipart(zmq::DONTWAIT) {
            last = Instant::now();
            if frames.first().is_some_and(|f| f.is_empty()) {
                frames.remove(0);
            }
            let end = is_end(&frames);
            out.push(frames);
            if end {
                return Ok(out);
            }
        }
    }
}
