//! An engine's capacity, scheduler limits and speed, with the documented presets.
//!
//! # Step time
//! One engine step runs one scheduled batch (prefill chunks and decode tokens together, as
//! vLLM's continuous batching does). Its duration is
//!
//! ```text
//! step_s = step_base_s
//!        + step_per_seq_s     · decode_seqs
//!        + prefill_tokens     / prefill_tps
//!        + step_per_ctx_token_s · context tokens of the decoding requests
//! ```
//!
//! so the prefill of `u` uncached prompt tokens costs `u / prefill_tps` seconds (spread over
//! chunks of at most [`EngineConfig::chunk_tokens`]), and a decode step grows linearly with
//! the batch and with the KV context it attends over.
//!
//! # Presets and their sources
//! Both are derived from the vendors' published datasheet figures (NVIDIA H100 SXM5:
//! 989 TFLOPS dense BF16, 1,979 TFLOPS dense FP8, 3.35 TB/s HBM3, 80 GB; H200 SXM: same
//! compute, 4.8 TB/s HBM3e, 141 GB) and the models' published shapes, with the usual
//! serving efficiencies: prefill at about 50 % (dense) or 35 % (MoE, FP8) of peak compute,
//! decode reading weights and KV at about 70 % of peak bandwidth.
//!
//! * [`EngineConfig::llama_8b_h100`]: Llama-3.1-8B, BF16, one H100 (vLLM).
//!   Weights 8.03 B × 2 B = 16.1 GB. Prefill: 2 × 8.03 G = 16.1 GFLOP per token; 50 % of
//!   989 TFLOPS gives 30.7 k tokens/s, lowered to **25,000 tokens/s** for the attention
//!   FLOPs of multi-thousand-token prompts. Decode: one step reads the weights once,
//!   16.1 GB / (0.7 × 3.35 TB/s) = **6.9 ms** base; KV per token 32 layers × 8 KV heads ×
//!   128 × 2 (K, V) × 2 B = 128 KiB, read at 0.7 × 3.35 TB/s = **56 ns per context token**;
//!   **0.1 ms per sequence** for sampling and scheduling. KV capacity: 0.9 × 80 GB − 16.1 GB
//!   weights − ~4 GB activations ≈ 57 GB / 128 KiB ≈ 435 k tokens = **27,000 blocks** of 16.
//!   `max_num_seqs` 256 and `max_num_batched_tokens` 8,192 (vLLM's online-serving defaults
//!   of its 0.6–0.8 releases).
//! * [`EngineConfig::deepseek_v3_h200x8`]: DeepSeek-V3 (671 B total, 37 B active, FP8),
//!   tensor-parallel over 8 × H200 (one engine). Prefill: 2 × 37 G = 74 GFLOP per token;
//!   35 % of 8 × 1,979 TFLOPS ≈ 75 k tokens/s, taken as **30,000 tokens/s** for MLA
//!   attention and expert imbalance (DeepSeek reports 73.7 k tokens/s per node *including
//!   cache hits* with expert parallelism across nodes, an upper reference). Decode: **20 ms**
//!   base (the attention and shared-expert weights plus the routed experts a small batch
//!   touches), **0.4 ms per sequence** (a larger batch touches more of the 256 routed experts
//!   per layer), MLA latent KV 61 layers × 576 × 2 B = 70,272 B per token, replicated on
//!   each tensor-parallel GPU and read at 0.7 × 4.8 TB/s = **21 ns per context token**. KV
//!   capacity per GPU: 0.88 × 141 GB − 85.6 GB weights − ~8 GB ≈ 30 GB / 70,272 B ≈ 427 k
//!   tokens = **26,700 blocks** of 16. 128 running requests.
//! * [`EngineConfig::vllm_calibration`] and [`EngineConfig::sglang_calibration`]: the
//!   recorded CPU runs of `shared/data/kv_events` (see the engine module docs): a step
//!   costs 10 ms plus 0.02 ms per scheduled token (their `step_base_ms` and
//!   `step_ms_per_token`), i.e. `prefill_tps` 50,000 and 0.02 ms per decoding request.

/// An engine's capacity and speed. All fields public; [`Default`] is an engine with the
/// 8B-on-H100 timing of [`EngineConfig::llama_8b_h100`], the scheduler limits and KV
/// capacity of the recorded vLLM stream (32 running, 300,000 blocks of 16, 8,192-token
/// chunks) and a 131,072-token context.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Most running requests (continuous batching; vLLM `max_num_seqs`, SGLang
    /// `max_running_requests`), > 0.
    pub max_running: u32,
    /// KV cache capacity (blocks), > 0. vLLM reserves one of them (its null block).
    pub kv_blocks: u32,
    /// Tokens per KV block (SGLang's page size), > 0.
    pub block_size: u32,
    /// Most tokens scheduled in one step (vLLM `max_num_batched_tokens`, SGLang
    /// `chunked_prefill_size`); longer prompts are prefilled in chunks (tokens), > 0.
    pub chunk_tokens: u32,
    /// Longest sequence (prompt + output) the engine serves (tokens). A longer prompt is
    /// refused when it reaches the engine; output stops at this length, or where the
    /// sequence alone fills the usable cache if that comes first.
    pub max_model_len: u32,
    /// Fixed cost of one step (seconds), >= 0.
    pub step_base_s: f64,
    /// Extra step time per decoding request (seconds), >= 0.
    pub step_per_seq_s: f64,
    /// Extra step time per context token of the decoding requests (seconds), >= 0.
    pub step_per_ctx_token_s: f64,
    /// Prefill throughput (tokens/s), > 0.
    pub prefill_tps: f64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_running: 32,
            kv_blocks: 300_000,
            block_size: 16,
            chunk_tokens: 8_192,
            max_model_len: 131_072,
            ..Self::llama_8b_h100()
        }
    }
}

/// A named engine preset ([`EngineConfig::PRESETS`]).
#[derive(Clone, Copy, Debug)]
pub struct Preset {
    /// Its name, as `--engine` takes it.
    pub name: &'static str,
    /// What it is, in one line.
    pub what: &'static str,
    /// Its configuration.
    pub make: fn() -> EngineConfig,
}

/// A configuration value out of range.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// Its valid range, in words.
    pub range: &'static str,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "engine config: {} must be {}", self.field, self.range)
    }
}

impl std::error::Error for ConfigError {}

impl EngineConfig {
    /// Llama-3.1-8B on one H100 under vLLM (derivation in the module docs).
    pub fn llama_8b_h100() -> Self {
        Self {
            max_running: 256,
            kv_blocks: 27_000,
            block_size: 16,
            chunk_tokens: 8_192,
            max_model_len: 131_072,
            step_base_s: 0.0069,
            step_per_seq_s: 0.000_1,
            step_per_ctx_token_s: 56e-9,
            prefill_tps: 25_000.0,
        }
    }

    /// DeepSeek-V3 on 8 × H200 (one tensor-parallel engine; derivation in the module
    /// docs).
    pub fn deepseek_v3_h200x8() -> Self {
        Self {
            max_running: 128,
            kv_blocks: 26_700,
            block_size: 16,
            chunk_tokens: 8_192,
            max_model_len: 131_072,
            step_base_s: 0.020,
            step_per_seq_s: 0.000_4,
            step_per_ctx_token_s: 21e-9,
            prefill_tps: 30_000.0,
        }
    }

    /// The engine of the recorded vLLM 0.33 stream (`shared/data/kv_events`): 32 running,
    /// 300,000 blocks of 16 tokens, 8,192-token chunks, 122,880-token context, and the CPU
    /// run's step clock of 10 ms plus 0.02 ms per scheduled token.
    pub fn vllm_calibration() -> Self {
        Self {
            max_running: 32,
            kv_blocks: 300_000,
            block_size: 16,
            chunk_tokens: 8_192,
            max_model_len: 122_880,
            step_base_s: 0.010,
            step_per_seq_s: 0.000_02,
            step_per_ctx_token_s: 0.0,
            prefill_tps: 50_000.0,
        }
    }

    /// The capacity of the recorded SGLang 0.5.23 stream: 32 running, 125,000 pages of 16
    /// tokens, 8,192-token chunks, 121,856-token context, the same step clock. The engine
    /// still schedules and caches by vLLM's rules (module docs of [`crate::engine`]: how
    /// close that comes to SGLang's recorded hits).
    pub fn sglang_calibration() -> Self {
        Self {
            max_running: 32,
            kv_blocks: 125_000,
            block_size: 16,
            chunk_tokens: 8_192,
            max_model_len: 121_856,
            step_base_s: 0.010,
            step_per_seq_s: 0.000_02,
            step_per_ctx_token_s: 0.0,
            prefill_tps: 50_000.0,
        }
    }

    /// The named presets, as `--engine` takes them.
    pub const PRESETS: [Preset; 5] = [
        Preset {
            name: "sim-default",
            what: "EngineConfig::default(): 8B-on-H100 step time, the recorded vLLM stream's \
                   capacity (300,000 blocks, 32 running); the trace's and most workloads' engine",
            make: Self::default,
        },
        Preset {
            name: "llama-8b-h100",
            what: "Llama-3.1-8B on one H100: 27,000 blocks of 16, 256 running",
            make: Self::llama_8b_h100,
        },
        Preset {
            name: "deepseek-v3-h200x8",
            what: "DeepSeek-V3 on 8 x H200 (one engine): 26,700 blocks of 16, 128 running",
            make: Self::deepseek_v3_h200x8,
        },
        Preset {
            name: "vllm-calibration",
            what: "the recorded vLLM stream's engine: 300,000 blocks, 32 running, \
                   122,880-token context, CPU step clock",
            make: Self::vllm_calibration,
        },
        Preset {
            name: "sglang-calibration",
            what: "the recorded SGLang stream's capacity: 125,000 pages, 32 running, \
                   121,856-token context, CPU step clock",
            make: Self::sglang_calibration,
        },
    ];

    /// The preset called `name` (one of [`EngineConfig::PRESETS`]), if any.
    pub fn preset(name: &str) -> Option<Self> {
        Self::PRESETS
            .iter()
            .find(|p| p.name == name)
            .map(|p| (p.make)())
    }

    /// Checks every field's range.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, range| Err(ConfigError { field, range });
        if self.max_running == 0 {
            return err("max_running", "> 0 requests");
        }
        if self.block_size == 0 {
            return err("block_size", "> 0 tokens");
        }
        if self.kv_blocks < 2 {
            return err("kv_blocks", ">= 2 blocks");
        }
        if self.chunk_tokens == 0 {
            return err("chunk_tokens", "> 0 tokens");
        }
        if self.max_model_len < 2 {
            return err("max_model_len", ">= 2 tokens");
        }
        for (field, v) in [
            ("step_base_s", self.step_base_s),
            ("step_per_seq_s", self.step_per_seq_s),
            ("step_per_ctx_token_s", self.step_per_ctx_token_s),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return err(field, "finite and >= 0 seconds");
            }
        }
        if !(self.prefill_tps.is_finite() && self.prefill_tps > 0.0) {
            return err("prefill_tps", "finite and > 0 tokens/s");
        }
        if self.step_base_s + self.step_per_seq_s <= 0.0 {
            return err("step_base_s", "> 0 together with step_per_seq_s");
        }
        Ok(())
    }

    /// Duration of one step (seconds): the formula of the module docs.
    pub fn step_time(&self, prefill_tokens: u64, decode_seqs: u32, decode_ctx_tokens: u64) -> f64 {
        self.step_base_s
            + self.step_per_seq_s * f64::from(decode_seqs)
            + prefill_tokens as f64 / self.prefill_tps
            + self.step_per_ctx_token_s * decode_ctx_tokens as f64
    }

    /// Nominal decode throughput at `running` decoding requests with no context term
    /// (tokens/s): `running / (step_base_s + step_per_seq_s · running)`.
    pub fn decode_tps(&self, running: u32) -> f64 {
        let r = f64::from(running.max(1));
        r / (self.step_base_s + self.step_per_seq_s * r)
    }
}

#[cfg(test)]
mod tests {
    use super::EngineConfig;

    #[test]
    fn every_preset_is_found_by_its_name_and_is_valid() {
        let want = [
            ("sim-default", EngineConfig::default()),
            ("llama-8b-h100", EngineConfig::llama_8b_h100()),
            ("deepseek-v3-h200x8", EngineConfig::deepseek_v3_h200x8()),
            ("vllm-calibration", EngineConfig::vllm_calibration()),
            ("sglang-calibration", EngineConfig::sglang_calibration()),
        ];
        assert_eq!(EngineConfig::PRESETS.len(), want.len());
        for (name, cfg) in want {
            assert_eq!(EngineConfig::preset(name), Some(cfg.clone()), "{name}");
            assert_eq!(cfg.validate(), Ok(()), "{name}");
        }
        assert_eq!(EngineConfig::preset("h100"), None);
        assert_eq!(EngineConfig::preset("default"), None);
        // The H100 preset is the one sized as the GPU: 27,000 blocks, 256 running.
        let h100 = EngineConfig::preset("llama-8b-h100").unwrap();
        assert_eq!((h100.kv_blocks, h100.max_running), (27_000, 256));
    }
}
