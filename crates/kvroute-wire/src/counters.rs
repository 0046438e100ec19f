//! Counters of everything decoded and rejected, shared by the threads that decode.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::batch::{DecodePath, decode_payload_traced};
use crate::error::{ErrorKind, WireError};
use crate::event::{KvEvent, KvEventBatch};
use crate::frame::{KvMessage, decode_message_traced};

/// Monotonic decode counters (`Relaxed` atomics: statistics, nothing is published
/// through them). Feed every decoder result to [`WireCounters::record`], or decode through
/// [`WireCounters::decode_message`] / [`WireCounters::decode_payload`].
#[derive(Debug, Default)]
pub struct WireCounters {
    batches: AtomicU64,
    events: AtomicU64,
    stored_blocks: AtomicU64,
    removed_blocks: AtomicU64,
    clears: AtomicU64,
    unknown_events: AtomicU64,
    end_markers: AtomicU64,
    fast_reads: AtomicU64,
    serde_reads: AtomicU64,
    errors: [AtomicU64; ErrorKind::COUNT],
}

/// A copy of [`WireCounters`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Batches decoded.
    pub batches: u64,
    /// Events in decoded batches (all kinds).
    pub events: u64,
    /// Block hashes in decoded `BlockStored` events.
    pub stored_blocks: u64,
    /// Block hashes in decoded `BlockRemoved` events.
    pub removed_blocks: u64,
    /// `AllBlocksCleared` events decoded.
    pub clears: u64,
    /// Events with an unknown tag (decoded as [`KvEvent::Unknown`]).
    pub unknown_events: u64,
    /// Replay end markers.
    pub end_markers: u64,
    /// Payloads the fast path read (whatever validation then found).
    pub fast_reads: u64,
    /// Payloads the fast path did not recognise and handed to serde (unusual encodings
    /// and malformed bytes): a share that grows names a shape worth adding to it.
    pub serde_reads: u64,
    /// Rejections by [`ErrorKind`].
    pub errors: ErrorCounts,
}

impl WireStats {
    /// Rejections of one kind.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors.get(kind)
    }

    /// All rejections.
    pub fn total_errors(&self) -> u64 {
        self.errors.total()
    }
}

/// Rejections counted per [`ErrorKind`]; printed (`{:?}`) as `kind: count` pairs of the
/// kinds seen.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts([u64; ErrorKind::COUNT]);

impl ErrorCounts {
    /// Rejections of `kind`.
    pub fn get(&self, kind: ErrorKind) -> u64 {
        self.0[kind as usize]
    }

    /// Every kind with its count, in [`ErrorKind::ALL`] order (zeros included).
    pub fn iter(&self) -> impl Iterator<Item = (ErrorKind, u64)> + '_ {
        ErrorKind::ALL.iter().map(|&k| (k, self.get(k)))
    }

    /// All rejections.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl core::fmt::Debug for ErrorCounts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_map()
            .entries(
                self.iter()
                    .filter(|&(_, n)| n > 0)
                    .map(|(k, n)| (k.name(), n)),
            )
            .finish()
    }
}

fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

impl WireCounters {
    /// Zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts a rejection.
    pub fn record_error(&self, e: &WireError) {
        bump(&self.errors[e.kind() as usize], 1);
    }

    /// Counts a decoded batch and its events.
    pub fn record_batch(&self, batch: &KvEventBatch) {
        bump(&self.batches, 1);
        bump(&self.events, batch.events.len() as u64);
        for e in &batch.events {
            match e {
                KvEvent::BlockStored(s) => bump(&self.stored_blocks, s.block_hashes.len() as u64),
                KvEvent::BlockRemoved(r) => bump(&self.removed_blocks, r.block_hashes.len() as u64),
                KvEvent::AllBlocksCleared => bump(&self.clears, 1),
                KvEvent::Unknown { .. } => bump(&self.unknown_events, 1),
            }
        }
    }

    /// Counts which reader read a payload.
    pub fn record_path(&self, path: DecodePath) {
        match path {
            DecodePath::Fast => bump(&self.fast_reads, 1),
            DecodePath::Serde => bump(&self.serde_reads, 1),
        }
    }

    /// Counts a decoder result (either side) and passes it through.
    pub fn record<T>(&self, r: Result<T, WireError>) -> Result<T, WireError> {
        if let Err(e) = &r {
            self.record_error(e);
        }
        r
    }

    /// [`decode_message`](crate::decode_message), counted.
    ///
    /// # Errors
    /// As [`decode_message`](crate::decode_message).
    pub fn decode_message(&self, frames: &[&[u8]]) -> Result<KvMessage, WireError> {
        let (r, path) = decode_message_traced(frames);
        if let Some(path) = path {
            self.record_path(path);
        }
        let r = self.record(r);
        match &r {
            Ok(KvMessage::Batch { batch, .. }) => self.record_batch(batch),
            Ok(KvMessage::EndOfReplay) => bump(&self.end_markers, 1),
            Err(_) => {}
        }
        r
    }

    /// `decode_payload`, counted.
    ///
    /// # Errors
    /// As `decode_payload`.
    pub fn decode_payload(&self, payload: &[u8]) -> Result<KvEventBatch, WireError> {
        let (r, path) = decode_payload_traced(payload);
        self.record_path(path);
        let r = self.record(r);
        if let Ok(b) = &r {
            self.record_batch(b);
        }
        r
    }

    /// The counters now.
    pub fn stats(&self) -> WireStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut errors = [0; ErrorKind::COUNT];
        for (o, a) in errors.iter_mut().zip(&self.errors) {
            *o = r(a);
        }
        WireStats {
            batches: r(&self.batches),
            events: r(&self.events),
            stored_blocks: r(&self.stored_blocks),
            removed_blocks: r(&self.removed_blocks),
            clears: r(&self.clears),
            unknown_events: r(&self.unknown_events),
            end_markers: r(&self.end_markers),
            fast_reads: r(&self.fast_reads),
            serde_reads: r(&self.serde_reads),
            errors: ErrorCounts(errors),
        }
    }
}
