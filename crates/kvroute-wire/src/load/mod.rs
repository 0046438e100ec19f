//! Load telemetry decoding: vLLM's Prometheus text, SGLang's `/v1/loads` JSON and its
//! `LoadStat` msgpack frames (`docs/WIRE-FORMAT.md`, "Load telemetry"). Each becomes a
//! typed engine update ([`VllmLoadUpdate`], [`SglangRankLoad`], [`SglangLoadStat`]) whose
//! ranks convert to the engine-neutral samples and reports `kvroute-load` publishes.

mod loadstat;
mod prometheus;
mod sglang;
mod sglang_json;
mod vllm;

pub use loadstat::{SglangLoadStat, decode_load_stat};
pub use prometheus::parse_vllm_metrics;
pub use sglang::SglangRankLoad;
pub use sglang_json::parse_sglang_loads;
pub use vllm::{VllmLoadUpdate, VllmRankLoad};
