//! ZMQ multipart messages of the KV event publisher and its replay socket
//! (`docs/WIRE-FORMAT.md`, "Transport").
//!
//! * Live (PUB): `[topic, seq, payload]`; the topic is UTF-8 and often empty.
//! * Replay (ROUTER), newer engines: `[topic, seq, payload]`; older: `[seq, payload]`.
//! * `seq` is 8 bytes, big-endian `u64`, starting at 0 and +1 per batch.
//! * The replay stream ends with seq `0xFFFF_FFFF_FFFF_FFFF` and an empty payload.

use crate::batch::{DecodePath, decode_payload_traced};
use crate::error::WireError;
use crate::event::KvEventBatch;

/// The sequence number of the replay end marker.
pub const END_OF_REPLAY_SEQ: u64 = u64::MAX;

/// A multipart message split into its parts, payload not decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frames<'a> {
    /// The topic; `None` for a two-frame (older replay) message.
    pub topic: Option<&'a str>,
    /// The batch sequence number.
    pub seq: u64,
    /// The msgpack payload (empty for the end marker).
    pub payload: &'a [u8],
}

impl<'a> Frames<'a> {
    /// Splits a 2- or 3-frame message.
    ///
    /// # Errors
    /// [`WireError::FrameCount`], [`WireError::SequenceLength`],
    /// [`WireError::TopicNotUtf8`].
    pub fn split(frames: &[&'a [u8]]) -> Result<Self, WireError> {
        let (topic, seq, payload) = match *frames {
            [topic, seq, payload] => (
                Some(core::str::from_utf8(topic).map_err(|_| WireError::TopicNotUtf8)?),
                seq,
                payload,
            ),
            [seq, payload] => (None, seq, payload),
            _ => return Err(WireError::FrameCount { got: frames.len() }),
        };
        let seq = <[u8; 8]>::try_from(seq)
            .map(u64::from_be_bytes)
            .map_err(|_| WireError::SequenceLength { got: seq.len() })?;
        Ok(Self {
            topic,
            seq,
            payload,
        })
    }

    /// Whether this is the replay end marker (end-marker sequence, empty payload).
    pub fn is_end_of_replay(&self) -> bool {
        self.seq == END_OF_REPLAY_SEQ && self.payload.is_empty()
    }
}

/// A decoded KV event message.
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): the engines' protocol has exactly
/// these two messages, and a consumer must handle both (a new one would be a breaking
/// change of the wire format, not an addition).
#[derive(Clone, Debug, PartialEq)]
pub enum KvMessage {
    /// One event batch.
    Batch {
        /// Its sequence number.
        seq: u64,
        /// The batch.
        batch: KvEventBatch,
    },
    /// The replay end marker: every buffered batch has been sent.
    EndOfReplay,
}

/// Decodes a live or replay message.
///
/// # Errors
/// The errors of [`Frames::split`]; [`WireError::EmptyPayload`] for an empty payload that
/// is not the end marker; [`WireError::EndMarkerWithPayload`]; those of
/// `decode_payload`.
pub fn decode_message(frames: &[&[u8]]) -> Result<KvMessage, WireError> {
    decode_message_traced(frames).0
}

/// [`decode_message`], with the reader that read the payload (`None` when no payload was
/// decoded: an end marker or a framing error).
pub(crate) fn decode_message_traced(
    frames: &[&[u8]],
) -> (Result<KvMessage, WireError>, Option<DecodePath>) {
    let f = match Frames::split(frames) {
        Ok(f) => f,
        Err(e) => return (Err(e), None),
    };
    if f.is_end_of_replay() {
        return (Ok(KvMessage::EndOfReplay), None);
    }
    if f.seq == END_OF_REPLAY_SEQ {
        let len = f.payload.len();
        return (Err(WireError::EndMarkerWithPayload { len }), None);
    }
    if f.payload.is_empty() {
        return (Err(WireError::EmptyPayload { seq: f.seq }), None);
    }
    let (batch, path) = decode_payload_traced(f.payload);
    let msg = batch.map(|batch| KvMessage::Batch { seq: f.seq, batch });
    (msg, Some(path))
}

/// The request a replay client sends to the ROUTER socket: the start sequence as 8
/// big-endian bytes.
pub fn replay_request(start_seq: u64) -> [u8; 8] {
    start_seq.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_marker_and_bad_frames() {
        let end = END_OF_REPLAY_SEQ.to_be_bytes();
        assert_eq!(
            decode_message(&[b"", &end, b""]),
            Ok(KvMessage::EndOfReplay)
        );
        assert_eq!(decode_message(&[&end, b""]), Ok(KvMessage::EndOfReplay));
        assert_eq!(
            decode_message(&[&end, b"\x90"]),
            Err(WireError::EndMarkerWithPayload { len: 1 })
        );
        assert_eq!(
            decode_message(&[&5u64.to_be_bytes(), b""]),
            Err(WireError::EmptyPayload { seq: 5 })
        );
        assert_eq!(
            decode_message(&[b"x"]),
            Err(WireError::FrameCount { got: 1 })
        );
        assert_eq!(
            decode_message(&[b"t", b"1234567", b"\x90"]),
            Err(WireError::SequenceLength { got: 7 })
        );
        assert_eq!(
            decode_message(&[b"\xff", &[0; 8], b"\x90"]),
            Err(WireError::TopicNotUtf8)
        );
        assert_eq!(replay_request(258), [0, 0, 0, 0, 0, 0, 1, 2]);
    }
}
