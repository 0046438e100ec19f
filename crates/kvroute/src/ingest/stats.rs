//! Counters of the ingest path and their plain snapshot [`IngestStats`].
//!
//! Monotonic `Relaxed` tallies (nothing is published through them), plus the per-engine
//! block-size mismatch table, which is only written when a mismatch happens.

use std::collections::BTreeMap;

use kvroute_core::sync::Mutex;
use kvroute_core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kvroute_core::{SlotGeneration, WorkerId};

/// Declares the atomic counters and the matching fields of [`IngestStats`] in one list.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The router's ingest counters (one atomic each).
        #[derive(Debug)]
        pub(crate) struct IngestCounters {
            $(pub(crate) $name: AtomicU64,)*
            /// (engine worker, engine block size) → rejected stores, with the router's size.
            mismatches: Mutex<BTreeMap<(WorkerId, SlotGeneration, usize), (usize, u64)>>,
        }

        impl IngestCounters {
            pub(crate) fn new() -> Self {
                Self {
                    $($name: AtomicU64::new(0),)*
                    mismatches: Mutex::new(BTreeMap::new()),
                }
            }

            /// A plain copy; `untrusted_workers` is the gauge read by the caller.
            pub(crate) fn snapshot(&self, untrusted_workers: usize) -> IngestStats {
                let table = self.mismatches.lock().unwrap_or_else(|p| p.into_inner());
                IngestStats {
                    $($name: self.$name.load(Relaxed),)*
                    untrusted_workers,
                    block_size_mismatches: table
                        .iter()
                        .map(|(&(worker, generation, engine_block_size), &(router_block_size, stores))| {
                            BlockSizeMismatchCount {
                                worker,
                                generation,
                                engine_block_size,
                                router_block_size,
                                stores,
                            }
                        })
                        .collect(),
                }
            }
        }

        /// A copy of the ingest counters at one moment (see [`Router::ingest`](crate::Router::ingest)).
        /// Counts are monotonic since the router was built; blocks are engine block hashes.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct IngestStats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// Gauge: workers whose overlap `route` currently treats as zero.
            pub untrusted_workers: usize,
            /// Block-size mismatches per registered engine worker and engine block size
            /// (a removed worker's entries are dropped with it; `rejected_events` keeps
            /// counting them).
            pub block_size_mismatches: Vec<BlockSizeMismatchCount>,
        }

        #[cfg(feature = "metrics")]
        impl IngestStats {
            /// Each counter as `(metric name, its field's doc, value)`, in declaration order:
            /// the field `name` is exported as `kvroute_ingest_<name>_total`.
            pub(crate) fn metric_counters(
                &self,
            ) -> impl Iterator<Item = (&'static str, &'static str, u64)> {
                [$((
                    concat!("kvroute_ingest_", stringify!($name), "_total"),
                    concat!($($doc),*),
                    self.$name,
                ),)*]
                .into_iter()
            }
        }
    };
}

counters! {
    /// Messages handed to `ingest` (batches and end markers, any outcome).
    messages,
    /// Live batches whose sequence number was the next expected one (applied).
    contiguous,
    /// Sequence gaps detected on the live stream (each marks the worker untrusted).
    gaps,
    /// Batches lost in those gaps (sum of the jumps).
    missed_batches,
    /// Live batches held back (not applied) while a replay was pending.
    held,
    /// Batches already applied or older than the stream (duplicates, stale): dropped.
    stale,
    /// Engine restarts detected (the live sequence went back with a later batch `ts`, or
    /// repeated its last number near 0 with another `ts` or an `AllBlocksCleared`, or a
    /// replay's witness came with another `ts`): worker cleared.
    resets,
    /// Replayed batches applied.
    replayed,
    /// Replays that reached the live sequence (trust restored).
    replays_completed,
    /// Replays that skipped batches the engine no longer buffered, or began past their
    /// witness: worker cleared.
    replays_truncated,
    /// Replays whose witness (the last batch applied, sent again) carried the batch `ts` it
    /// was applied with: the stream did not restart inside the gap.
    replays_confirmed,
    /// Replays that ended before reaching the live sequence: worker cleared.
    replays_short,
    /// Pending replays the caller gave up on ([`Router::skip_replay`](crate::Router::skip_replay)): worker cleared.
    replays_skipped,
    /// Replays the caller asked for without a gap showing
    /// ([`Router::request_replay`](crate::Router::request_replay): batches it dropped
    /// before ingest).
    replays_requested,
    /// Replayed batches ahead of the live stream while no replay was pending: ignored.
    replay_ignored,
    /// Replay end markers received.
    end_markers,
    /// Gaps made moot by an `AllBlocksCleared` in the batch after them.
    gaps_cleared,
    /// Device-tier blocks stored (engine hashes, extra copies included).
    stored_blocks,
    /// Device-tier blocks removed (engine hashes listed, known or not; those the worker did
    /// not hold are also in `unknown_removed_blocks`).
    removed_blocks,
    /// Of `removed_blocks`, engine hashes the worker did not hold: nothing removed (the
    /// index's `unknown_removes` counts the same, with the typed `remove_blocks`).
    unknown_removed_blocks,
    /// `AllBlocksCleared` events applied.
    clears,
    /// Host, disk, external or unknown-tier blocks in stores and removes: counted, ignored.
    non_device_blocks,
    /// Blocks of KV groups other than the main full-attention group: counted, skipped.
    non_main_group_blocks,
    /// Events with a tag the decoder does not know: counted, skipped.
    unknown_events,
    /// Device-tier blocks stored with extra keys folded into their identity (vLLM's
    /// `extra_keys`: multimodal keys, cache salt, prompt-embedding digests): only requests
    /// presenting the same keys find them.
    extra_key_blocks,
    /// Stores whose parent this worker does not hold: not indexed (the index's rule).
    unknown_parent_stores,
    /// Blocks of those stores.
    unknown_parent_blocks,
    /// Events the index rejected (block-size mismatch and others), returned as errors.
    rejected_events,
    /// Batches whose DP rank differs from the publisher's: rejected whole.
    dp_rank_mismatches,
    /// Batches numbered `u64::MAX` (the replay end marker's number): rejected whole.
    reserved_seq_batches,
    /// Replay end markers received on the live channel: rejected.
    live_end_markers,
    /// Messages for a worker that is not registered: dropped.
    unknown_worker_messages,
    /// Typed events (`store`, `store_hashes`, `remove_blocks`, `clear_blocks`) for a worker
    /// that is not registered: rejected with `EventError::UnknownWorker`.
    unknown_worker_events,
}

/// Stores of one engine rejected for a block-size mismatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSizeMismatchCount {
    /// The publishing worker (engine id, DP rank).
    pub worker: WorkerId,
    /// Its tenancy of its slot: a worker removed and added again counts from zero under a
    /// new generation (a new metric series, as `kvroute_worker_decisions_total`).
    pub generation: SlotGeneration,
    /// The block size the engine sent (tokens per block).
    pub engine_block_size: usize,
    /// The router's block size (tokens per block).
    pub router_block_size: usize,
    /// `BlockStored` events rejected.
    pub stores: u64,
}

impl IngestCounters {
    /// Adds `by` to one counter.
    pub(crate) fn add(c: &AtomicU64, by: u64) {
        c.fetch_add(by, Relaxed);
    }

    /// Forgets the block-size mismatch counts of `worker` (it was removed), so workers
    /// coming and going do not accumulate entries.
    pub(crate) fn forget_worker(&self, worker: WorkerId) {
        let mut table = self.mismatches.lock().unwrap_or_else(|p| p.into_inner());
        table.retain(|&(w, _, _), _| w != worker);
    }

    /// Counts one rejected store of `worker` with the sizes involved.
    pub(crate) fn mismatch(
        &self,
        worker: WorkerId,
        generation: SlotGeneration,
        engine: usize,
        router: usize,
    ) {
        let mut table = self.mismatches.lock().unwrap_or_else(|p| p.into_inner());
        let entry = table
            .entry((worker, generation, engine))
            .or_insert((router, 0));
        entry.1 += 1;
    }
}
