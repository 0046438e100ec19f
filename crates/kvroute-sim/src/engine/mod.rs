//! One simulated inference engine.

/// An engine's capacity and speed.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Most running requests (continuous batching).
    pub max_running: u32,
    /// KV cache capacity (blocks).
    pub kv_blocks: u32,
    /// Tokens per KV block.
    pub block_size: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_running: 32,
            kv_blocks: 300_000,
            block_size: 16,
        }
    }
}
