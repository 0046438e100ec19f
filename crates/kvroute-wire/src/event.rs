//! Typed KV events: what every wire generation of vLLM and SGLang decodes to.
//!
//! Field meanings follow `docs/WIRE-FORMAT.md` (vLLM's `vllm/distributed/kv_events.py`
//! `BlockStored` / `BlockRemoved` / `AllBlocksCleared` and SGLang's
//! `sglang/srt/disaggregation/kv_events.py` equivalents).

use kvroute_core::{EngineHash, HashNamespace};

/// One published batch: `[ts, events, data_parallel_rank]` on the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct KvEventBatch {
    /// The engine's wall-clock time of the batch (seconds since the Unix epoch, as sent).
    pub ts: f64,
    /// The events, in the engine's order (apply them in this order).
    pub events: Vec<KvEvent>,
    /// The publisher's data-parallel rank (`data_parallel_rank`, SGLang `attn_dp_rank`);
    /// `None` when nil or absent (very old vLLM sends a two-element batch).
    pub dp_rank: Option<u32>,
}

/// One KV event.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum KvEvent {
    /// Blocks became cached.
    BlockStored(BlockStored),
    /// Blocks left the cache (one copy per listed hash).
    BlockRemoved(BlockRemoved),
    /// The engine dropped its whole prefix cache (also the first event of a fresh SGLang).
    AllBlocksCleared,
    /// An event whose tag this decoder does not know: kept (not an error) so that a newer
    /// engine's extra event kinds do not reject whole batches; appliers count and skip it.
    Unknown {
        /// The tag as sent.
        tag: String,
    },
}

/// Where a block lives (`medium` on the wire; nil or absent means GPU).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Medium {
    /// `"GPU"` (or nil): device memory, the tier that saves prefill outright.
    Gpu,
    /// `"CPU"` or `"CPU_PINNED"`: host memory offload tier.
    Host,
    /// `"DISK"` or `"STORAGE"`: local disk / storage offload tier.
    Disk,
    /// `"EXTERNAL"` (SGLang): an external KV store.
    External,
    /// Any other value, as sent.
    Unknown(String),
}

impl Medium {
    /// Maps the wire string (or nil) to a tier, case-sensitively as engines send it.
    pub fn from_wire(s: Option<&str>) -> Self {
        match s {
            None | Some("GPU") => Self::Gpu,
            Some("CPU") | Some("CPU_PINNED") => Self::Host,
            Some("DISK") | Some("STORAGE") => Self::Disk,
            Some("EXTERNAL") => Self::External,
            Some(other) => Self::Unknown(other.to_owned()),
        }
    }

    /// Whether this is device (GPU) memory: only device residency drives overlap.
    pub fn is_device(&self) -> bool {
        matches!(self, Self::Gpu)
    }
}

/// One element of vLLM's per-block `extra_keys` tuple (LoRA name, multimodal hashes,
/// cache salt, prompt-embeds hash), kept as sent: vLLM does not label them.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ExtraKey {
    /// A string (LoRA name, multimodal identifier, cache salt).
    Str(String),
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A binary string (for example a prompt-embeds digest).
    Bytes(Vec<u8>),
    /// Nil.
    Nil,
    /// An array, its elements decoded by these rules (vLLM's multimodal key is the pair
    /// `(identifier, offset of the item from the block's first token)`).
    List(Vec<ExtraKey>),
    /// A map (not interpreted: only its presence is kept).
    Nested,
}

/// How an event was encoded: the generation it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventEncoding {
    /// A positional array of this many elements, tag included (vLLM before mid-2026, older
    /// SGLang).
    Positional(usize),
    /// A named map (vLLM from mid-2026, SGLang 0.5.23).
    Named,
}

/// `BlockStored`: blocks whose KV became cached, in sequence order.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockStored {
    /// The engine's hashes of the stored blocks (see [`crate::hash`] for how unsigned,
    /// signed and binary hashes become an [`EngineHash`]).
    pub block_hashes: Vec<EngineHash>,
    /// The engine hash of the block before `block_hashes[0]`; `None` at a sequence start.
    pub parent_block_hash: Option<EngineHash>,
    /// `block_size * block_hashes.len()` token ids (checked by the decoder).
    pub token_ids: Vec<u32>,
    /// Tokens per block (SGLang's page size), at least 1.
    pub block_size: u32,
    /// vLLM / SGLang `lora_id` (older vLLM's only LoRA identification).
    pub lora_id: Option<i64>,
    /// Storage tier.
    pub medium: Medium,
    /// LoRA adapter name (`lora_name`).
    pub lora_name: Option<String>,
    /// Cache salt, where the engine names it: SGLang's `cache_salt` key or trailing
    /// metadata map. vLLM folds its salt into `extra_keys` without a label, so for vLLM
    /// this is `None` and the salt, if any, is among [`BlockStored::extra_keys`].
    pub cache_salt: Option<String>,
    /// vLLM's per-block extra keys (one entry per block, nil when the block has none).
    pub extra_keys: Option<Vec<Option<Vec<ExtraKey>>>>,
    /// KV cache group index of hybrid models (`group_idx`).
    pub group_idx: Option<u32>,
    /// KV cache spec kind of the group (`"full_attention"`, `"sliding_window"`, ...).
    pub kv_cache_spec_kind: Option<String>,
    /// Sliding window of a sliding-window group (tokens).
    pub kv_cache_spec_sliding_window: Option<u32>,
    /// Wire generation of the event.
    pub encoding: EventEncoding,
}

impl BlockStored {
    /// A plain event as an engine without LoRA, salt or hybrid groups sends it: device tier
    /// ([`Medium::Gpu`]), main KV group, default namespace, named encoding. `token_ids`
    /// should be `block_size * block_hashes.len()` token ids; this constructor does not
    /// check it (the decoder does for events read off the wire).
    pub fn device(
        block_hashes: Vec<EngineHash>,
        parent_block_hash: Option<EngineHash>,
        token_ids: Vec<u32>,
        block_size: u32,
    ) -> Self {
        Self {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            lora_id: None,
            medium: Medium::Gpu,
            lora_name: None,
            cache_salt: None,
            extra_keys: None,
            group_idx: None,
            kv_cache_spec_kind: None,
            kv_cache_spec_sliding_window: None,
            encoding: EventEncoding::Named,
        }
    }

    /// The hashing namespace of these blocks, by the rule of
    /// [`HashNamespace::new`]: the LoRA part is `lora_name`, or, when only the older
    /// `lora_id` is sent, its decimal text (so adapter blocks never mix with the base
    /// model's); the salt part is [`BlockStored::cache_salt`].
    pub fn namespace(&self) -> HashNamespace {
        let id_text;
        let lora = match (&self.lora_name, self.lora_id) {
            (Some(name), _) => Some(name.as_str()),
            (None, Some(id)) => {
                id_text = id.to_string();
                Some(id_text.as_str())
            }
            (None, None) => None,
        };
        HashNamespace::new(lora, self.cache_salt.as_deref())
    }

    /// Whether the event describes the main full-attention KV group, the one that
    /// describes prefix residency: `kv_cache_spec_kind` is absent or `"full_attention"`,
    /// and, when the kind is absent, `group_idx` is absent or 0.
    pub fn is_main_group(&self) -> bool {
        match self.kv_cache_spec_kind.as_deref() {
            Some(kind) => kind == "full_attention",
            None => matches!(self.group_idx, None | Some(0)),
        }
    }
}

/// `BlockRemoved`: one copy of each listed block left the cache.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockRemoved {
    /// The engine hashes of the removed blocks (SGLang: a whole sweep, in no particular
    /// order: apply as a set).
    pub block_hashes: Vec<EngineHash>,
    /// Storage tier the blocks left.
    pub medium: Medium,
    /// KV cache group index (`group_idx`).
    pub group_idx: Option<u32>,
    /// Wire generation of the event.
    pub encoding: EventEncoding,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media() {
        assert_eq!(Medium::from_wire(None), Medium::Gpu);
        assert_eq!(Medium::from_wire(Some("CPU_PINNED")), Medium::Host);
        assert_eq!(Medium::from_wire(Some("STORAGE")), Medium::Disk);
        assert_eq!(Medium::from_wire(Some("EXTERNAL")), Medium::External);
        assert_eq!(
            Medium::from_wire(Some("gpu")),
            Medium::Unknown("gpu".into())
        );
        assert!(Medium::Gpu.is_device() && !Medium::Host.is_device());
    }

    #[test]
    fn device_event_is_plain() {
        let e = BlockStored::device(vec![EngineHash(7)], Some(EngineHash(3)), vec![1, 2], 2);
        assert_eq!(e.block_hashes, [EngineHash(7)]);
        assert_eq!(e.parent_block_hash, Some(EngineHash(3)));
        assert_eq!((e.token_ids.as_slice(), e.block_size), (&[1, 2][..], 2));
        assert!(e.medium.is_device() && e.is_main_group());
        assert_eq!(e.namespace(), HashNamespace::DEFAULT);
        assert_eq!(e.encoding, EventEncoding::Named);
    }
}
