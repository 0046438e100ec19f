//! Applying one batch's events to the prefix index, for one worker.
//!
//! Rules (`docs/WIRE-FORMAT.md`; the failures they prevent in `docs/FAILURE-MODES.md`):
//! * `BlockStored` of the device tier and the main full-attention KV group: indexed via
//!   [`block_store`] (LoRA name / id and cache salt namespace the hashes as
//!   the decoder gives them), each block's extra keys folded into its identity
//!   ([`block_extra_keys`]; an entry count other than one per block rejects the event). Host, disk, external and unknown tiers are **counted and
//!   ignored**: only device residency saves prefill outright, and no discounted credit is
//!   given for the other tiers. Other KV groups (sliding window, ...) are counted and
//!   skipped.
//! * `BlockRemoved`: one copy of each listed engine hash goes, applied as a set (SGLang's
//!   sweeps are unordered). Non-device removals are counted and ignored (they are the
//!   offload tier's evictions, not the device's); removals of a group other than the main
//!   one (the `group_idx` a main-group store reported, else 0) are skipped.
//! * Duplicate stores and removes follow the index's copy semantics: a second store of a
//!   resident hash adds a copy, each removal drops one, a removal of an unknown hash is
//!   counted and ignored.
//! * `AllBlocksCleared`: the worker holds nothing any more (no traffic goes to it for a
//!   cache it lost); it also clears a block-size distrust.
//! * A store whose parent the worker does not hold is not indexed (the index's rule: it
//!   could never extend a match from block 0) and is counted; it is not an error.
//! * A block-size mismatch is returned as a [`RejectedEvent`] naming engine and sizes
//!   (never dropped silently), counted per engine, and marks the worker untrusted; the rest
//!   of the batch is still applied.
//! * Unknown event kinds are counted and skipped.

use kvroute_core::{EngineHash, Slot, SlotGeneration, WorkerId};
use kvroute_index::index::{BlockStore, IndexError};
use kvroute_index::runs::RunIndex;
use kvroute_wire::{BlockRemoved, BlockStored, KvEvent};

use super::extra_keys::block_extra_keys;
use super::stats::IngestCounters;
use super::trust::BLOCK_SIZE;

/// What the applied part of one batch did (engine block hashes, not distinct blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventTally {
    /// Events looked at (from the first applied position on).
    pub events: usize,
    /// Device-tier main-group blocks indexed by stores (extra copies included).
    pub stored_blocks: usize,
    /// Engine hashes listed by applied device-tier removals (known or not: the ones the
    /// worker did not hold are also in `unknown_removed_blocks`).
    pub removed_blocks: usize,
    /// Of `removed_blocks`, engine hashes the worker did not hold (never stored, already
    /// removed, or stored under an unknown parent): nothing removed.
    pub unknown_removed_blocks: usize,
    /// `AllBlocksCleared` events applied.
    pub clears: usize,
    /// Blocks of host / disk / external / unknown-tier events: counted, ignored.
    pub non_device_blocks: usize,
    /// Blocks of other KV groups than the main full-attention one: counted, skipped.
    pub non_main_group_blocks: usize,
    /// Blocks of stores whose parent the worker does not hold: not indexed.
    pub unknown_parent_blocks: usize,
    /// Events of unknown kind: skipped.
    pub unknown_events: usize,
    /// Blocks of applied stores indexed with extra keys folded into their identity
    /// ([`block_extra_keys`](crate::ingest::block_extra_keys)): only requests presenting
    /// the same keys find them.
    pub extra_key_blocks: usize,
}

/// Why one event of a batch was not applied (the rest of the batch was).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventRejection {
    /// The engine's block size differs from the router's. The worker is untrusted until it
    /// is cleared or re-registered.
    BlockSizeMismatch {
        /// The publishing worker (engine id, DP rank).
        worker: WorkerId,
        /// Tokens per block the engine sent.
        engine_block_size: usize,
        /// Tokens per block of the router.
        router_block_size: usize,
        /// Blocks of the rejected store.
        blocks: usize,
    },
    /// Any other rejection by the index.
    Index(IndexError),
}

/// One rejected event and where it was in its batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectedEvent {
    /// Position of the event in the batch's `events` (0-based).
    pub position: usize,
    /// Why it was rejected.
    pub error: EventRejection,
}

impl core::fmt::Display for RejectedEvent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.error {
            EventRejection::BlockSizeMismatch {
                worker,
                engine_block_size,
                router_block_size,
                blocks,
            } => write!(
                f,
                "event {}: worker {worker} sent {blocks} blocks of {engine_block_size} tokens, \
                 the router's block size is {router_block_size}",
                self.position
            ),
            EventRejection::Index(e) => write!(f, "event {}: {e}", self.position),
        }
    }
}

/// Applies events for one worker; see the module docs.
pub(crate) struct Applier<'a> {
    pub index: &'a RunIndex,
    pub counters: &'a IngestCounters,
    pub slot: Slot,
    pub worker: WorkerId,
    /// The worker's tenancy of `slot` (labels its block-size mismatch counts).
    pub generation: SlotGeneration,
    /// The router's predicted residency, if on: a clear drops the slot's credits.
    pub predictions: Option<&'a crate::predicted::Predictions>,
}

/// Mutable per-batch state of the applier.
pub(crate) struct Applied<'a> {
    pub tally: EventTally,
    pub rejected: Vec<RejectedEvent>,
    /// The slot's trust flags (only [`BLOCK_SIZE`] is touched here).
    pub flags: &'a mut u32,
    /// The main KV group's `group_idx`, as main-group stores reported it.
    pub main_group: &'a mut Option<u32>,
    /// Engine hashes of consecutive removals not yet applied (empty between batches): a
    /// run of `BlockRemoved` events, vLLM's one per evicted block, goes to the index as
    /// one removal, whose lane lookups are prefetched ahead. Flushed before any other
    /// event and at the end of the batch, so the order of effects is the events' order.
    pub removals: &'a mut Vec<EngineHash>,
}

impl Applier<'_> {
    /// Clears the worker (restart, truncated or short replay, or `AllBlocksCleared`).
    pub fn clear(&self, out: &mut Applied<'_>) {
        self.flush_removals(out);
        // The slot is registered (the caller holds membership), so this cannot fail.
        let _ = self.index.clear(self.slot);
        // The prefixes routed there before the clear are gone with the cache.
        if let Some(p) = self.predictions {
            p.forget_slot(self.slot);
        }
        *out.flags &= !BLOCK_SIZE;
    }

    /// Applies `events[from..]`.
    pub fn apply(&self, events: &[KvEvent], from: usize, out: &mut Applied<'_>) {
        for (position, event) in events.iter().enumerate().skip(from) {
            out.tally.events += 1;
            match event {
                KvEvent::BlockStored(s) => self.store(position, s, out),
                KvEvent::BlockRemoved(r) => self.remove(r, out),
                KvEvent::AllBlocksCleared => {
                    self.clear(out);
                    out.tally.clears += 1;
                }
                // An event of a kind this version does not know is counted as unknown.
                KvEvent::Unknown { .. } | _ => out.tally.unknown_events += 1,
            }
        }
        self.flush_removals(out);
    }

    /// Applies the removals gathered so far (one index call for the run of events).
    fn flush_removals(&self, out: &mut Applied<'_>) {
        if out.removals.is_empty() {
            return;
        }
        // The slot is registered (the caller holds membership), so this cannot fail.
        if let Ok(r) = self.index.remove(self.slot, out.removals) {
            out.tally.unknown_removed_blocks += r.unknown;
        }
        out.removals.clear();
    }

    fn store(&self, position: usize, s: &BlockStored, out: &mut Applied<'_>) {
        self.flush_removals(out);
        let blocks = s.block_hashes.len();
        if !s.medium.is_device() {
            out.tally.non_device_blocks += blocks;
            return;
        }
        if !s.is_main_group() {
            out.tally.non_main_group_blocks += blocks;
            return;
        }
        if s.kv_cache_spec_kind.is_some() && s.group_idx.is_some() {
            *out.main_group = s.group_idx;
        }
        let extra = block_extra_keys(s);
        let error = match self
            .index
            .store_with_extra_keys(self.slot, &block_store(s), &extra)
        {
            Ok(_) => {
                out.tally.stored_blocks += blocks;
                out.tally.extra_key_blocks += extra.iter().filter(|d| d.is_some()).count();
                return;
            }
            Err(IndexError::UnknownParent { blocks, .. }) => {
                IngestCounters::add(&self.counters.unknown_parent_stores, 1);
                out.tally.unknown_parent_blocks += blocks;
                return;
            }
            Err(IndexError::BlockSizeMismatch { expected, got }) => {
                self.counters
                    .mismatch(self.worker, self.generation, got, expected);
                *out.flags |= BLOCK_SIZE;
                EventRejection::BlockSizeMismatch {
                    worker: self.worker,
                    engine_block_size: got,
                    router_block_size: expected,
                    blocks,
                }
            }
            Err(e) => EventRejection::Index(e),
        };
        out.rejected.push(RejectedEvent { position, error });
    }

    fn remove(&self, r: &BlockRemoved, out: &mut Applied<'_>) {
        let blocks = r.block_hashes.len();
        if !r.medium.is_device() {
            out.tally.non_device_blocks += blocks;
            return;
        }
        if r.group_idx
            .is_some_and(|g| g != out.main_group.unwrap_or(0))
        {
            out.tally.non_main_group_blocks += blocks;
            return;
        }
        out.removals.extend_from_slice(&r.block_hashes);
        out.tally.removed_blocks += blocks;
    }
}

impl EventTally {
    /// Adds this tally to the router's counters.
    pub(crate) fn count(&self, c: &IngestCounters) {
        let add = |a, n: usize| IngestCounters::add(a, n as u64);
        add(&c.stored_blocks, self.stored_blocks);
        add(&c.removed_blocks, self.removed_blocks);
        add(&c.unknown_removed_blocks, self.unknown_removed_blocks);
        add(&c.clears, self.clears);
        add(&c.non_device_blocks, self.non_device_blocks);
        add(&c.non_main_group_blocks, self.non_main_group_blocks);
        add(&c.unknown_parent_blocks, self.unknown_parent_blocks);
        add(&c.unknown_events, self.unknown_events);
        add(&c.extra_key_blocks, self.extra_key_blocks);
    }
}

/// A decoded `BlockStored` as the prefix index takes it: its hashes, tokens and block size,
/// namespaced by its LoRA name / id and cache salt ([`BlockStored::namespace`]). This is
/// the conversion [`Router::ingest`](crate::Router::ingest) applies to every device-tier,
/// main-group store.
pub fn block_store(s: &BlockStored) -> BlockStore<'_> {
    BlockStore {
        parent: s.parent_block_hash,
        block_hashes: &s.block_hashes,
        token_ids: &s.token_ids,
        block_size: s.block_size as usize,
        namespace: s.namespace(),
    }
}
