//! The glue from an engine's typed load update to the publisher, as the router applies it
//! (`Router::update_vllm_load`, `Router::update_sglang_load`), so the publisher's tests can
//! feed the engines' own shapes.

use kvroute_core::{Nanos, UpdateError};
use kvroute_load::LoadPublisher;
use kvroute_wire::{SglangRankLoad, VllmLoadUpdate};

/// vLLM and SGLang updates applied through [`LoadPublisher::apply_ranks`].
pub trait EngineUpdates {
    /// A vLLM update, each rank's cap the engine's configured `max_running_per_rank`.
    fn apply_vllm(&mut self, update: &VllmLoadUpdate, now: Nanos) -> Result<(), UpdateError>;
    /// One SGLang `/v1/loads` entry, ordered by its engine timestamp.
    fn apply_sglang(&mut self, update: &SglangRankLoad, now: Nanos) -> Result<(), UpdateError>;
}

impl EngineUpdates for LoadPublisher {
    fn apply_vllm(&mut self, update: &VllmLoadUpdate, now: Nanos) -> Result<(), UpdateError> {
        let reports = update.to_reports(self.configured_cap(update.engine_id));
        self.apply_ranks(update.engine_id, &reports, now)
    }

    fn apply_sglang(&mut self, update: &SglangRankLoad, now: Nanos) -> Result<(), UpdateError> {
        self.apply_ranks(update.engine_id, &[update.to_report()], now)
    }
}
