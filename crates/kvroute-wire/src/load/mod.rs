//! Load telemetry decoding: vLLM's Prometheus text, SGLang's `/v1/loads` JSON and its
//! `LoadStat` msgpack frames (`docs/WIRE-FORMAT.md`, "Load telemetry"). Each becomes
//! the typed update `kvroute-load` validates and publishes.

mod loadstat;
mod prometheus;
mod sglang_json;

pub use loadstat::{SglangLoadStat, decode_load_stat};
pub use prometheus::parse_vllm_metrics;
pub use sglang_json::parse_sglang_loads;
