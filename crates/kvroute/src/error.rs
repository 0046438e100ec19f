//! Typed errors of the router's operations. None of them leaves partial state behind.

use core::fmt;

use kvroute_core::WorkerId;
use kvroute_index::index::IndexError;

/// Why `route` produced no decision. Nothing is reserved after any of these.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum RouteError {
    /// [`Prompt::Tokens`](crate::Prompt::Tokens) whose length differs from
    /// `prompt_tokens`.
    PromptLengthMismatch {
        /// `prompt_tokens` as given (tokens).
        prompt_tokens: u32,
        /// Token ids given.
        token_ids: usize,
    },
    /// `prompt_tokens` is 0: engines refuse an empty prompt (vLLM and SGLang reject it
    /// before scheduling), so there is nothing to place and nothing is reserved.
    EmptyPrompt,
    /// [`Prompt::Hashes`](crate::Prompt::Hashes) with more hashes than the prompt has
    /// full blocks.
    TooManyHashes {
        /// Hashes given.
        hashes: usize,
        /// `prompt_tokens / block_size`.
        full_blocks: usize,
    },
    /// [`RouteRequest::extra_keys`](crate::RouteRequest::extra_keys) not in strictly
    /// increasing block order.
    ExtraKeysOutOfOrder {
        /// Position (in `extra_keys`) of the first entry whose block is not after the
        /// block of the entry before it.
        position: usize,
    },
    /// No load snapshot has been published yet: call [`Router::publish`](crate::Router::publish)
    /// (on a timer, after [`add_worker`](crate::Router::add_worker) and the first load
    /// updates). Counted as `no_eligible_worker`.
    NotPublished,
    /// No occupied worker slot with usable figures in the published load snapshot (no
    /// worker added before the last publication, or every cost non-finite).
    NoEligibleWorker,
    /// Admission is enabled and no worker, cached or not, can take the request within the
    /// bound.
    Rejected {
        /// The configured bound (outstanding requests per worker).
        bound: u32,
        /// The fewest outstanding requests of any occupied worker (requests).
        least_outstanding: u64,
    },
    /// Every attempt lost its slot: the chosen workers were removed, or (with admission)
    /// concurrent decisions filled them, through all the allowed re-scores.
    Contended {
        /// Re-scores made.
        rescores: u32,
    },
    /// The chosen worker's reserved-request counter would pass `u32::MAX` (its token
    /// counters saturate instead, counted in `ReservationStats::saturated_tokens`).
    Saturated {
        /// The chosen worker.
        worker: WorkerId,
    },
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PromptLengthMismatch {
                prompt_tokens,
                token_ids,
            } => write!(
                f,
                "prompt_tokens is {prompt_tokens} but {token_ids} token ids were given"
            ),
            Self::EmptyPrompt => write!(
                f,
                "the prompt is empty (prompt_tokens 0): engines refuse empty prompts"
            ),
            Self::TooManyHashes {
                hashes,
                full_blocks,
            } => write!(
                f,
                "{hashes} block hashes for a prompt of {full_blocks} full blocks"
            ),
            Self::ExtraKeysOutOfOrder { position } => write!(
                f,
                "extra_keys entry {position} does not name a later block than the entry \
                 before it (entries must be in strictly increasing block order)"
            ),
            Self::NotPublished => f.write_str(
                "no load snapshot published yet: call Router::publish after adding workers \
                 (and on a timer)",
            ),
            Self::NoEligibleWorker => f.write_str(
                "no eligible worker: no registered worker has usable figures in the last \
                 published snapshot (none added or all removed since, or every cost is \
                 non-finite)",
            ),
            Self::Rejected {
                bound,
                least_outstanding,
            } => write!(
                f,
                "admission: every worker has at least {least_outstanding} outstanding \
                 requests, bound {bound}"
            ),
            Self::Contended { rescores } => {
                write!(
                    f,
                    "chosen workers kept changing through {rescores} re-scores"
                )
            }
            Self::Saturated { worker } => write!(f, "reservations of {worker} saturated"),
        }
    }
}

impl std::error::Error for RouteError {}

/// Errors of adding and removing workers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkerError {
    /// Every slot is taken (or retired and not yet released).
    Full {
        /// The router's `worker_slots`.
        capacity: usize,
    },
    /// The worker is already registered.
    AlreadyRegistered(WorkerId),
    /// The worker is not registered.
    UnknownWorker(WorkerId),
    /// The router's parts disagreed about the worker (a bug; the operation was undone as
    /// far as possible). Names the part.
    Inconsistent(&'static str),
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { capacity } => write!(f, "all {capacity} worker slots are in use"),
            Self::AlreadyRegistered(w) => write!(f, "worker {w} is already registered"),
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::Inconsistent(part) => write!(f, "router parts disagree: {part}"),
        }
    }
}

impl std::error::Error for WorkerError {}

/// Errors of applying a KV event.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventError {
    /// The event's worker is not registered (the event is dropped).
    UnknownWorker(WorkerId),
    /// The index rejected the event (block-size or token-count mismatch, unknown parent);
    /// counted in the index's stats, index unchanged.
    Index(IndexError),
}

impl fmt::Display for EventError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            Self::Index(e) => write!(f, "index: {e}"),
        }
    }
}

impl std::error::Error for EventError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Index(e) => Some(e),
            Self::UnknownWorker(_) => None,
        }
    }
}

impl From<IndexError> for EventError {
    fn from(e: IndexError) -> Self {
        Self::Index(e)
    }
}
