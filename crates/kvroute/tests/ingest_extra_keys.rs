//! Blocks whose identity the tokens do not carry: vLLM's per-block `extra_keys` (cache salt
//! on block 0, multimodal `(identifier, offset)` pairs on the blocks an image's placeholder
//! tokens fall in, prompt-embedding digests, the LoRA name) fold into the block's identity
//! on ingest, and a `RouteRequest` finds such blocks only by presenting the same keys.
//!
//! Stores are msgpack payloads in vLLM's own shapes (0.33's named maps; the 12-element
//! positional arrays of the generation before), decoded by `kvroute_wire::decode_message`
//! and applied by `Router::ingest`. Expected overlaps are counted by hand from the chain
//! rule (a block matches only when it and every block before it match); the sequence
//! hashes are also recomputed here from the documented encoding (`docs/WIRE-FORMAT.md`,
//! "Extra keys") with the general XXH3, and matched against the index.

mod common;

use kvroute::{
    BlockExtraKeys, Channel, ExtraKey, HashNamespace, RouteError, RouteRequest, Router,
    SequenceHash, WorkerId, block_extra_keys,
};
use kvroute_testkit::msgpack::V;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use common::{BS, NOW, idle};

/// Qwen2-VL's image placeholder token: the same id for every image.
const IMAGE_PAD: u32 = 151_655;

// ---- reference model of the documented hashing, written from WIRE-FORMAT -------------

/// One extra key as the reference encodes it.
enum K {
    S(&'static str),
    I(i128),
    B(&'static [u8]),
    L(Vec<K>),
}

fn encode(k: &K, out: &mut Vec<u8>) {
    match k {
        K::S(s) => {
            out.push(0x01);
            out.extend_from_slice(&(s.len() as u64).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        K::I(v) => {
            out.push(0x02);
            out.extend_from_slice(&v.to_le_bytes());
        }
        K::B(b) => {
            out.push(0x04);
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(b);
        }
        K::L(items) => {
            out.push(0x06);
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|i| encode(i, out));
        }
    }
}

fn digest(keys: &[K]) -> u64 {
    let mut bytes = Vec::new();
    keys.iter().for_each(|k| encode(k, &mut bytes));
    xxh3_64_with_seed(&bytes, 1337)
}

/// The chained hashes of `tokens` in the namespace of `seed`, `extra[i]` the digest of
/// block `i`'s keys.
fn reference_hashes(tokens: &[u32], seed: u64, extra: &[Option<u64>]) -> Vec<SequenceHash> {
    let mut out = Vec::new();
    let mut prev: Option<u64> = None;
    for (i, block) in tokens.chunks_exact(BS).enumerate() {
        let bytes: Vec<u8> = block.iter().flat_map(|t| t.to_le_bytes()).collect();
        let mut local = xxh3_64_with_seed(&bytes, seed);
        if let Some(Some(d)) = extra.get(i) {
            let mut f = Vec::new();
            f.extend_from_slice(&local.to_le_bytes());
            f.extend_from_slice(&d.to_le_bytes());
            f.extend_from_slice(b"extrakey");
            local = xxh3_64_with_seed(&f, 1337);
        }
        let seq = match prev {
            None => local,
            Some(p) => {
                let mut c = Vec::new();
                c.extend_from_slice(&p.to_le_bytes());
                c.extend_from_slice(&local.to_le_bytes());
                xxh3_64_with_seed(&c, 1337)
            }
        };
        out.push(SequenceHash(seq));
        prev = Some(seq);
    }
    out
}

// ---- vLLM-shaped payloads ------------------------------------------------------------

fn tokens_value(tokens: &[u32]) -> V {
    V::A(tokens.iter().map(|&t| V::U(u64::from(t))).collect())
}

fn hashes_value(first: u64, blocks: usize) -> V {
    V::A((first..first + blocks as u64).map(V::U).collect())
}

/// A vLLM 0.33 `BlockStored` map (the shape of `engine_examples.json`), `extra_keys`
/// omitted when `None`, as vLLM omits a field at its default.
fn named_store(
    first: u64,
    parent: Option<u64>,
    tokens: &[u32],
    lora: Option<(u64, &'static str)>,
    extra_keys: Option<V>,
) -> V {
    let mut m = vec![
        ("type", V::S("BlockStored")),
        ("block_hashes", hashes_value(first, tokens.len() / BS)),
        ("parent_block_hash", parent.map_or(V::Nil, V::U)),
        ("token_ids", tokens_value(tokens)),
        ("block_size", V::U(BS as u64)),
        ("lora_id", lora.map_or(V::Nil, |(id, _)| V::U(id))),
        ("medium", V::S("GPU")),
        ("lora_name", lora.map_or(V::Nil, |(_, n)| V::S(n))),
    ];
    if let Some(k) = extra_keys {
        m.push(("extra_keys", k));
    }
    m.push(("group_idx", V::U(0)));
    m.push(("kv_cache_spec_kind", V::S("full_attention")));
    m.push(("locality", V::Nil));
    V::M(m)
}

/// The 12-element positional `BlockStored` of vLLM just before the switch to maps.
fn positional_store(first: u64, parent: Option<u64>, tokens: &[u32], extra_keys: V) -> V {
    V::A(vec![
        V::S("BlockStored"),
        hashes_value(first, tokens.len() / BS),
        parent.map_or(V::Nil, V::U),
        tokens_value(tokens),
        V::U(BS as u64),
        V::Nil,
        V::S("GPU"),
        V::Nil,
        extra_keys,
        V::Nil,
        V::Nil,
        V::Nil,
    ])
}

/// Per-block extra keys: nil or a tuple of keys per block.
fn per_block(blocks: Vec<Option<Vec<V>>>) -> V {
    V::A(blocks.into_iter().map(|b| b.map_or(V::Nil, V::A)).collect())
}

/// vLLM's multimodal key: `(identifier, offset of the item from the block's first token)`.
fn mm(id: &'static str, offset: i64) -> V {
    V::A(vec![V::S(id), V::I(offset)])
}

/// Ingests one batch `[ts, events, 0]` as live sequence number `seq` of `w`, through the
/// ZMQ framing and the wire decoder.
fn ingest(
    r: &Router,
    w: WorkerId,
    seq: u64,
    events: Vec<V>,
) -> Result<kvroute::IngestReport, kvroute::IngestError> {
    let payload = V::A(vec![V::F(1_789_095_808.25), V::A(events), V::U(0)]).to_msgpack();
    let msg = kvroute::decode_message(&[b"", &seq.to_be_bytes(), &payload]).expect("decodes");
    r.ingest(w, Channel::Live, &msg)
}

/// Two idle workers, published.
fn fleet() -> (Router, WorkerId, WorkerId) {
    let (r, w) = common::router(2, 2, |_| {});
    for &x in &w {
        r.update_load(x, idle(), NOW).unwrap();
    }
    r.publish(NOW).unwrap();
    (r, w[0], w[1])
}

/// The worker `route` picks and the overlap it credits (blocks) for `prompt` with `keys`
/// in `namespace`.
fn route(
    r: &Router,
    prompt: &[u32],
    namespace: Option<HashNamespace>,
    keys: &[BlockExtraKeys],
) -> (WorkerId, u32) {
    let mut req = RouteRequest::tokens(prompt, 64, NOW).with_extra_keys(keys);
    req.namespace = namespace;
    let d = r.route(&req).expect("routes");
    (d.worker, d.overlap_blocks)
}

/// The index's overlap of `hashes` for the worker in slot `slot`.
fn overlap(r: &Router, hashes: &[SequenceHash], slot: u32) -> u32 {
    let mut o = r.index().new_overlaps();
    r.index().match_prefix(hashes, &mut o);
    o.get(kvroute::Slot(slot))
}

fn key(block: u32, keys: &[ExtraKey]) -> BlockExtraKeys {
    block_extra_keys(block, keys).expect("keys given")
}

fn s(text: &str) -> ExtraKey {
    ExtraKey::Str(text.into())
}

fn mm_key(id: &str, offset: i128) -> ExtraKey {
    ExtraKey::List(vec![s(id), ExtraKey::Int(offset)])
}

/// 4 full blocks of text and a 5-token tail (never hashed).
fn text_prompt() -> Vec<u32> {
    common::tokens(11, 4 * BS + 5)
}

// ---- cache salt ----------------------------------------------------------------------

/// vLLM salts block 0 only; the chain carries the salt to every later block. A salted
/// store is found with the same salt only, a plain store of the same tokens without one.
#[test]
fn a_cache_salt_separates_tenants_and_a_request_without_it_finds_only_unsalted_blocks() {
    let (r, a, b) = fleet();
    let prompt = text_prompt();
    let stored = &prompt[..4 * BS];
    let salted = per_block(vec![Some(vec![V::S("tenant-a")]), None, None, None]);
    ingest(
        &r,
        a,
        0,
        vec![named_store(1, None, stored, None, Some(salted))],
    )
    .unwrap();
    ingest(&r, b, 0, vec![named_store(1, None, stored, None, None)]).unwrap();

    // The index holds the hashes the documented rule gives.
    let salt = Some(digest(&[K::S("tenant-a")]));
    let with_salt = reference_hashes(stored, 1337, &[salt]);
    let plain = reference_hashes(stored, 1337, &[]);
    assert_eq!(
        (overlap(&r, &with_salt, 0), overlap(&r, &with_salt, 1)),
        (4, 0)
    );
    assert_eq!((overlap(&r, &plain, 0), overlap(&r, &plain, 1)), (0, 4));

    // No keys: the plain store only.
    assert_eq!(route(&r, &prompt, None, &[]), (b, 4));
    // The same salt: the salted store, all 4 blocks.
    assert_eq!(
        route(&r, &prompt, None, &[key(0, &[s("tenant-a")])]),
        (a, 4)
    );
    // Another tenant's salt: nothing, on either worker.
    assert_eq!(route(&r, &prompt, None, &[key(0, &[s("tenant-b")])]).1, 0);
    // The salt on block 1 instead of 0: block 0 is plain (worker b's), block 1 no one's.
    assert_eq!(
        route(&r, &prompt, None, &[key(1, &[s("tenant-a")])]),
        (b, 1)
    );
    let s = r.ingest_stats();
    assert_eq!((s.extra_key_blocks, s.stored_blocks), (1, 8));
}

// ---- multimodal keys -----------------------------------------------------------------

/// An image whose 16 placeholder tokens are 24..40: block 1 holds it from offset 8, block
/// 2 from offset -8 (it began 8 tokens before the block).
fn image_prompt() -> Vec<u32> {
    let mut p = common::tokens(21, 4 * BS + 3);
    p[24..40].fill(IMAGE_PAD);
    p
}

fn image_keys(id: &'static str) -> V {
    // The store of blocks 0-1 carries the first two entries, that of 2-3 the last two.
    per_block(vec![None, Some(vec![mm(id, 8)])])
}

fn image_keys_tail(id: &'static str) -> V {
    per_block(vec![Some(vec![mm(id, -8)]), None])
}

/// Same placeholder tokens, different images: each worker's blocks from the image on are
/// found only with its own image's keys at the right offsets; block 0 (text) by anyone.
#[test]
fn multimodal_keys_separate_images_behind_identical_placeholder_tokens() {
    let (r, a, b) = fleet();
    let prompt = image_prompt();
    let stored = &prompt[..4 * BS];
    // Worker a: img-1 in two positional stores chained by parent; worker b: img-2, maps.
    let a_events = vec![
        positional_store(100, None, &stored[..2 * BS], image_keys("img-1")),
        positional_store(102, Some(101), &stored[2 * BS..], image_keys_tail("img-1")),
    ];
    ingest(&r, a, 0, a_events).unwrap();
    let b_events = vec![
        named_store(
            200,
            None,
            &stored[..2 * BS],
            None,
            Some(image_keys("img-2")),
        ),
        named_store(
            202,
            Some(201),
            &stored[2 * BS..],
            None,
            Some(image_keys_tail("img-2")),
        ),
    ];
    ingest(&r, b, 0, b_events).unwrap();

    let img1 = [
        None,
        Some(digest(&[K::L(vec![K::S("img-1"), K::I(8)])])),
        Some(digest(&[K::L(vec![K::S("img-1"), K::I(-8)])])),
    ];
    let reference = reference_hashes(stored, 1337, &img1);
    assert_eq!(
        (overlap(&r, &reference, 0), overlap(&r, &reference, 1)),
        (4, 1)
    );

    let keys = |id: &str| [key(1, &[mm_key(id, 8)]), key(2, &[mm_key(id, -8)])];
    assert_eq!(route(&r, &prompt, None, &keys("img-1")), (a, 4));
    assert_eq!(route(&r, &prompt, None, &keys("img-2")), (b, 4));
    // An image neither worker holds, or no keys at all: the text block only.
    assert_eq!(route(&r, &prompt, None, &keys("img-3")).1, 1);
    assert_eq!(route(&r, &prompt, None, &[]).1, 1);
    // img-1 at another offset in block 2: blocks 0 and 1 only.
    let shifted = [
        key(1, &[mm_key("img-1", 8)]),
        key(2, &[mm_key("img-1", -7)]),
    ];
    assert_eq!(route(&r, &prompt, None, &shifted), (a, 2));
}

// ---- LoRA with salt ------------------------------------------------------------------

/// vLLM lists the LoRA name first in every block's keys and sends it as `lora_name`: it is
/// the namespace already, so a LoRA store without other keys is found in its namespace
/// without keys, and one with a salt with the salt alone.
#[test]
fn the_lora_name_in_extra_keys_is_the_namespace_and_a_salt_beside_it_still_counts() {
    let (r, a, b) = fleet();
    let prompt = common::tokens(31, 3 * BS + 1);
    let stored = &prompt[..3 * BS];
    let lora = Some((3, "adapter-a"));
    let salted = per_block(vec![
        Some(vec![V::S("adapter-a"), V::S("tenant-a")]),
        Some(vec![V::S("adapter-a")]),
        Some(vec![V::S("adapter-a")]),
    ]);
    let plain = per_block(vec![Some(vec![V::S("adapter-a")]); 3]);
    ingest(
        &r,
        a,
        0,
        vec![named_store(1, None, stored, lora, Some(salted))],
    )
    .unwrap();
    ingest(
        &r,
        b,
        0,
        vec![named_store(1, None, stored, lora, Some(plain))],
    )
    .unwrap();

    let seed = 1337u64.wrapping_add(xxh3_64_with_seed(b"adapter-a", 0));
    let reference = reference_hashes(stored, seed, &[Some(digest(&[K::S("tenant-a")]))]);
    assert_eq!(
        (overlap(&r, &reference, 0), overlap(&r, &reference, 1)),
        (3, 0)
    );

    let ns = Some(HashNamespace::new(Some("adapter-a"), None));
    assert_eq!(route(&r, &prompt, ns, &[key(0, &[s("tenant-a")])]), (a, 3));
    assert_eq!(route(&r, &prompt, ns, &[]), (b, 3));
    // The base model finds neither.
    assert_eq!(route(&r, &prompt, None, &[]).1, 0);
}

// ---- prompt embeddings, maps, bad counts, bad requests --------------------------------

/// Prompt-embedding digests (binary keys, one per block): the same bytes find the blocks,
/// other bytes do not.
#[test]
fn prompt_embedding_digests_are_binary_keys_per_block() {
    let (r, a, _) = fleet();
    let prompt = common::tokens(41, 2 * BS);
    let embeds = per_block(vec![
        Some(vec![V::B(vec![0xaa; 32])]),
        Some(vec![V::B(vec![0xbb; 32])]),
    ]);
    ingest(
        &r,
        a,
        0,
        vec![named_store(1, None, &prompt, None, Some(embeds))],
    )
    .unwrap();
    let reference = reference_hashes(
        &prompt,
        1337,
        &[
            Some(digest(&[K::B(&[0xaa; 32])])),
            Some(digest(&[K::B(&[0xbb; 32])])),
        ],
    );
    assert_eq!(overlap(&r, &reference, 0), 2);
    let bytes = |b: u8| ExtraKey::Bytes(vec![b; 32]);
    let same = [key(0, &[bytes(0xaa)]), key(1, &[bytes(0xbb)])];
    assert_eq!(route(&r, &prompt, None, &same), (a, 2));
    let other = [key(0, &[bytes(0xaa)]), key(1, &[bytes(0xbc)])];
    assert_eq!(route(&r, &prompt, None, &other), (a, 1));
    assert_eq!(route(&r, &prompt, None, &[]).1, 0);
}

/// A map key's content is not kept by the decoder, so no request can reproduce it: the
/// block is stored (and removable) but credited to no request, with or without keys.
#[test]
fn a_block_with_a_map_key_is_credited_to_no_request() {
    let (r, a, _) = fleet();
    let prompt = common::tokens(51, 2 * BS);
    let keys = per_block(vec![Some(vec![V::M(vec![("k", V::U(1))])]), None]);
    ingest(
        &r,
        a,
        0,
        vec![named_store(1, None, &prompt, None, Some(keys))],
    )
    .unwrap();
    assert_eq!(r.ingest_stats().stored_blocks, 2);
    assert_eq!(r.index().worker_blocks(kvroute::Slot(0)), 2);
    assert_eq!(route(&r, &prompt, None, &[]).1, 0);
    assert_eq!(
        route(&r, &prompt, None, &[key(0, &[ExtraKey::Nested])]).1,
        0
    );
}

/// Extra keys for fewer blocks than the store has: which block each belongs to is unknown,
/// so the event is rejected (typed, counted) and nothing of it is indexed.
#[test]
fn extra_keys_for_another_number_of_blocks_reject_the_store() {
    let (r, a, _) = fleet();
    let prompt = common::tokens(61, 3 * BS);
    let keys = per_block(vec![Some(vec![V::S("tenant-a")]), None]);
    let err = ingest(
        &r,
        a,
        0,
        vec![named_store(1, None, &prompt, None, Some(keys))],
    )
    .expect_err("rejected");
    let kvroute::IngestError::Rejected(batch) = err else {
        panic!("{err:?}")
    };
    assert_eq!(batch.rejected.len(), 1);
    assert_eq!(
        batch.rejected[0].error,
        kvroute::ingest::EventRejection::Index(kvroute::IndexError::ExtraKeysCountMismatch {
            blocks: 3,
            extra_keys: 2,
        })
    );
    assert_eq!(r.index_stats().extra_keys_count_mismatches, 1);
    assert_eq!(r.ingest_stats().rejected_events, 1);
    assert_eq!(r.index().worker_blocks(kvroute::Slot(0)), 0);
    assert_eq!(route(&r, &prompt, None, &[key(0, &[s("tenant-a")])]).1, 0);
}

/// A request's extra keys must name blocks in strictly increasing order: otherwise a typed
/// error, counted as an invalid request, and nothing reserved.
#[test]
fn extra_keys_out_of_block_order_are_an_invalid_request() {
    let (r, _, _) = fleet();
    let prompt = text_prompt();
    let keys = [key(2, &[s("x")]), key(1, &[s("y")])];
    let req = RouteRequest::tokens(&prompt, 64, NOW).with_extra_keys(&keys);
    assert_eq!(
        r.route(&req).unwrap_err(),
        RouteError::ExtraKeysOutOfOrder { position: 1 }
    );
    assert_eq!(r.stats().rejections.invalid_request, 1);
    let dup = [key(1, &[s("x")]), key(1, &[s("y")])];
    assert!(
        r.route(&RouteRequest::tokens(&prompt, 64, NOW).with_extra_keys(&dup))
            .is_err()
    );
}
