//! Feeds arbitrary bytes to every kvroute-wire decoder: as a msgpack batch payload, as ZMQ
//! messages (live with topic, older replay without), as a `LoadStat` frame and, when UTF-8,
//! as Prometheus text and `/v1/loads` JSON. No input may panic; a decoded batch must hold
//! the decoder's invariants and apply to a prefix index without panicking; the payload
//! decoder (fast path, falling back to serde) must give exactly the result or error of the
//! serde-only reference decoder, `decode_payload_serde`.
//!
//! Seed the corpus from the example payloads with `bash seed_wire_decode.sh` (in `fuzz/`).
#![no_main]

use kvroute_core::Slot;
use kvroute_index::index::{IndexConfig, PrefixIndex};
use kvroute_wire::{
    KvEvent, KvMessage, decode_load_stat, decode_message, decode_payload, decode_payload_serde,
    parse_sglang_loads, parse_vllm_metrics,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = decode_payload(data);
    // Debug text, not `==`: a NaN timestamp is not equal to itself.
    assert_eq!(
        format!("{decoded:?}"),
        format!("{:?}", decode_payload_serde(data)),
        "fast path and serde disagree"
    );
    if let Ok(batch) = decoded {
        let mut config = IndexConfig::new(1, 16);
        config.expected_blocks = 64;
        config.max_blocks_per_worker = 1024;
        let index = PrefixIndex::new(config).unwrap();
        for ev in &batch.events {
            match ev {
                KvEvent::BlockStored(s) => {
                    assert!(s.block_size > 0);
                    assert_eq!(
                        s.token_ids.len(),
                        s.block_size as usize * s.block_hashes.len()
                    );
                    let _ = index.store(Slot(0), &kvroute::ingest::block_store(s));
                }
                KvEvent::BlockRemoved(r) => {
                    let _ = index.remove(Slot(0), &r.block_hashes);
                }
                KvEvent::AllBlocksCleared => {
                    let _ = index.clear(Slot(0));
                }
                KvEvent::Unknown { .. } | _ => {}
            }
        }
    }
    let cut = data.len().min(8);
    let (seq, payload) = data.split_at(cut);
    for frames in [&[&b""[..], seq, payload][..], &[seq, payload][..]] {
        if let Ok(KvMessage::Batch { batch, .. }) = decode_message(frames) {
            // Debug text, not `==`: a NaN timestamp is not equal to itself.
            let again = decode_payload(payload).expect("the payload decoded inside a message");
            assert_eq!(format!("{batch:?}"), format!("{again:?}"));
        }
    }
    let _ = decode_load_stat(data);
    if let Ok(text) = core::str::from_utf8(data) {
        let _ = parse_vllm_metrics(0, text);
        let _ = parse_sglang_loads(0, text);
    }
});
