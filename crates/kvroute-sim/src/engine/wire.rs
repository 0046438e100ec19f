//! The KV events of one engine step and their encoding as the engine's real msgpack batch.
//!
//! Shape (vLLM 0.33's named maps, `docs/WIRE-FORMAT.md` and
//! `shared/data/kv_events/engine_examples.json`): the batch is the array
//! `[ts, [events], data_parallel_rank]`; events are maps
//! `{"type": "BlockStored", "block_hashes": [u64…], "parent_block_hash": u64 | nil,
//! "token_ids": [u32…], "block_size": n, "lora_id": nil, "medium": "GPU", "lora_name": nil}`,
//! `{"type": "BlockRemoved", "block_hashes": [u64], "medium": "GPU"}` and
//! `{"type": "AllBlocksCleared"}`. SGLang 0.5.23 sends the same map shapes (with signed
//! hashes, which a decoder treats as opaque keys too).
//!
//! Encoding is on the simulator's hot path (every prompt token of every store), so
//! [`EventBuf::encode`] writes the msgpack bytes itself, with the shortest encoding of every
//! value as `rmp-serde` chooses it; [`EventBuf::encode_serde`] does the same through serde
//! and `rmp-serde`, and the tests check that both give the same bytes.

#[cfg(test)]
use serde::Serialize;
#[cfg(test)]
use serde::ser::{SerializeMap, SerializeSeq, SerializeTuple, Serializer};

use super::catalog::Catalog;

/// Where a store's token ids come from.
#[derive(Clone, Copy, Debug)]
enum Toks {
    /// The buffer's `tokens[a..b]` (explicit token ids; the engine itself describes its
    /// stores by request).
    #[cfg_attr(not(test), allow(dead_code))]
    Buf(usize, usize),
    /// Tokens `start..end` of catalog request `req`, generated while encoding.
    Req { req: u32, start: u32, end: u32 },
}

/// One event, its hashes and tokens held in the buffer's arrays (or described).
#[derive(Clone, Copy, Debug)]
enum Ev {
    Stored {
        hashes: (usize, usize),
        parent: Option<u64>,
        tokens: Toks,
    },
    Removed {
        hashes: (usize, usize),
    },
    Cleared,
}

/// The events of one step, in engine order, ready to be encoded.
#[derive(Debug, Default)]
pub(crate) struct EventBuf {
    events: Vec<Ev>,
    hashes: Vec<u64>,
    tokens: Vec<u32>,
    block_size: u32,
}

impl EventBuf {
    pub(crate) fn new(block_size: u32) -> Self {
        Self {
            block_size,
            ..Self::default()
        }
    }

    /// Whether the step produced no event.
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Empties the buffer (capacity kept).
    pub(crate) fn clear(&mut self) {
        self.events.clear();
        self.hashes.clear();
        self.tokens.clear();
    }

    #[cfg(test)]
    /// Appends a store of `hashes` after `parent`; the caller then appends exactly
    /// `block_size × hashes.len()` token ids through the returned buffer.
    pub(crate) fn store(&mut self, hashes: &[u64], parent: Option<u64>) -> &mut Vec<u32> {
        let h0 = self.hashes.len();
        self.hashes.extend_from_slice(hashes);
        let t0 = self.tokens.len();
        self.events.push(Ev::Stored {
            hashes: (h0, self.hashes.len()),
            parent,
            tokens: Toks::Buf(t0, t0 + hashes.len() * self.block_size as usize),
        });
        &mut self.tokens
    }

    /// Appends a store of `hashes` after `parent` whose token ids are tokens
    /// `start..start + block_size × hashes.len()` of catalog request `req` (generated when
    /// the batch is encoded).
    pub(crate) fn store_request(
        &mut self,
        hashes: &[u64],
        parent: Option<u64>,
        req: u32,
        start: u32,
    ) {
        let h0 = self.hashes.len();
        self.hashes.extend_from_slice(hashes);
        let end = start + hashes.len() as u32 * self.block_size;
        self.events.push(Ev::Stored {
            hashes: (h0, self.hashes.len()),
            parent,
            tokens: Toks::Req { req, start, end },
        });
    }

    /// Appends a removal of `hashes` (one copy each).
    pub(crate) fn remove(&mut self, hashes: &[u64]) {
        let h0 = self.hashes.len();
        self.hashes.extend_from_slice(hashes);
        self.events.push(Ev::Removed {
            hashes: (h0, self.hashes.len()),
        });
    }

    /// Appends an `AllBlocksCleared`.
    pub(crate) fn clear_all(&mut self) {
        self.events.push(Ev::Cleared);
    }

    /// Encodes the batch `[ts, events, dp_rank]` into `out` (cleared first): the bytes of
    /// [`encode_serde`](Self::encode_serde), written directly.
    pub(crate) fn encode(&self, cat: &Catalog, ts: f64, dp_rank: u32, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(16 + self.events.len() * 96 + self.hashes.len() * 9 + self.tokens.len() * 5);
        array_header(out, 3);
        out.push(0xcb);
        out.extend_from_slice(&ts.to_bits().to_be_bytes());
        array_header(out, self.events.len());
        for &ev in &self.events {
            match ev {
                Ev::Stored {
                    hashes,
                    parent,
                    tokens,
                } => {
                    map_header(out, 8);
                    str_(out, "type");
                    str_(out, "BlockStored");
                    str_(out, "block_hashes");
                    array_header(out, hashes.1 - hashes.0);
                    for &h in &self.hashes[hashes.0..hashes.1] {
                        uint(out, h);
                    }
                    str_(out, "parent_block_hash");
                    match parent {
                        Some(p) => uint(out, p),
                        None => out.push(0xc0),
                    }
                    str_(out, "token_ids");
                    match tokens {
                        Toks::Buf(a, b) => {
                            array_header(out, b - a);
                            uints32(out, &self.tokens[a..b]);
                        }
                        Toks::Req { req, start, end } => {
                            array_header(out, (end - start) as usize);
                            out.reserve((end - start) as usize * 5);
                            cat.token_runs(req, start, end, |first, len| run32(out, first, len));
                        }
                    }
                    str_(out, "block_size");
                    uint(out, u64::from(self.block_size));
                    str_(out, "lora_id");
                    out.push(0xc0);
                    str_(out, "medium");
                    str_(out, "GPU");
                    str_(out, "lora_name");
                    out.push(0xc0);
                }
                Ev::Removed { hashes } => {
                    map_header(out, 3);
                    str_(out, "type");
                    str_(out, "BlockRemoved");
                    str_(out, "block_hashes");
                    array_header(out, hashes.1 - hashes.0);
                    for &h in &self.hashes[hashes.0..hashes.1] {
                        uint(out, h);
                    }
                    str_(out, "medium");
                    str_(out, "GPU");
                }
                Ev::Cleared => {
                    map_header(out, 1);
                    str_(out, "type");
                    str_(out, "AllBlocksCleared");
                }
            }
        }
        uint(out, u64::from(dp_rank));
    }

    /// Encodes the batch `[ts, events, dp_rank]` into `out` (cleared first) with serde and
    /// `rmp-serde`: the reference for [`encode`](Self::encode).
    ///
    /// # Panics
    /// Never for these shapes: writing msgpack into a `Vec` cannot fail.
    #[cfg(test)]
    pub(crate) fn encode_serde(&self, cat: &Catalog, ts: f64, dp_rank: u32, out: &mut Vec<u8>) {
        out.clear();
        let batch = (ts, Events(self, cat), dp_rank);
        let mut ser = rmp_serde::Serializer::new(&mut *out);
        batch
            .serialize(&mut ser)
            .expect("msgpack encoding into a Vec cannot fail");
    }
}

/// msgpack array header (shortest form).
fn array_header(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= 0xffff {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// msgpack map header (the maps here have at most 8 entries).
fn map_header(out: &mut Vec<u8>, n: u8) {
    debug_assert!(n < 16);
    out.push(0x80 | n);
}

/// msgpack string (the strings here are shorter than 32 bytes).
fn str_(out: &mut Vec<u8>, s: &str) {
    debug_assert!(s.len() < 32);
    out.push(0xa0 | s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// msgpack unsigned integer (shortest form).
#[inline]
fn uint(out: &mut Vec<u8>, v: u64) {
    if v < 0x80 {
        out.push(v as u8);
    } else if v <= 0xff {
        out.extend_from_slice(&[0xcc, v as u8]);
    } else if v <= 0xffff {
        out.push(0xcd);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= 0xffff_ffff {
        out.push(0xce);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// The msgpack unsigned integers `first, first + 1, …` (`len` of them, wrapping in
/// `u32`), each in its shortest form (as [`uint`]).
fn run32(out: &mut Vec<u8>, first: u32, len: u32) {
    if first >= 0x1_0000 && first.checked_add(len).is_some() {
        // Every value takes the 5-byte form: write them in one pass.
        let start = out.len();
        out.resize(start + len as usize * 5, 0);
        for (k, chunk) in out[start..].chunks_exact_mut(5).enumerate() {
            chunk[0] = 0xce;
            chunk[1..].copy_from_slice(&(first + k as u32).to_be_bytes());
        }
    } else {
        for k in 0..len {
            uint(out, u64::from(first.wrapping_add(k)));
        }
    }
}

/// msgpack unsigned integers, each in its shortest form (as [`uint`]), written into a
/// buffer sized once for the worst case.
fn uints32(out: &mut Vec<u8>, values: &[u32]) {
    let start = out.len();
    out.resize(start + values.len() * 5, 0);
    let buf = &mut out[start..];
    let mut at = 0;
    for &v in values {
        if v >= 0x1_0000 {
            buf[at] = 0xce;
            buf[at + 1..at + 5].copy_from_slice(&v.to_be_bytes());
            at += 5;
        } else if v >= 0x100 {
            buf[at] = 0xcd;
            buf[at + 1..at + 3].copy_from_slice(&(v as u16).to_be_bytes());
            at += 3;
        } else if v >= 0x80 {
            buf[at] = 0xcc;
            buf[at + 1] = v as u8;
            at += 2;
        } else {
            buf[at] = v as u8;
            at += 1;
        }
    }
    out.truncate(start + at);
}

#[cfg(test)]
struct Events<'a>(&'a EventBuf, &'a Catalog);

#[cfg(test)]
struct One<'a> {
    buf: &'a EventBuf,
    cat: &'a Catalog,
    ev: Ev,
}

#[cfg(test)]
impl Serialize for Events<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.events.len()))?;
        for &ev in &self.0.events {
            seq.serialize_element(&One {
                buf: self.0,
                cat: self.1,
                ev,
            })?;
        }
        seq.end()
    }
}

/// Serialises a slice as a msgpack array (`&[u64]` / `&[u32]` would too; this keeps the
/// element type explicit).
#[cfg(test)]
struct Arr<'a, T>(&'a [T]);

#[cfg(test)]
impl<T: Serialize> Serialize for Arr<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(self.0.len())?;
        for v in self.0 {
            t.serialize_element(v)?;
        }
        t.end()
    }
}

#[cfg(test)]
impl Serialize for One<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.buf;
        match self.ev {
            Ev::Stored {
                hashes,
                parent,
                tokens,
            } => {
                let mut m = s.serialize_map(Some(8))?;
                m.serialize_entry("type", "BlockStored")?;
                m.serialize_entry("block_hashes", &Arr(&b.hashes[hashes.0..hashes.1]))?;
                m.serialize_entry("parent_block_hash", &parent)?;
                let mut generated = Vec::new();
                let ids: &[u32] = match tokens {
                    Toks::Buf(a, z) => &b.tokens[a..z],
                    Toks::Req { req, start, end } => {
                        self.cat.tokens_into(req, start, end, &mut generated);
                        &generated
                    }
                };
                m.serialize_entry("token_ids", &Arr(ids))?;
                m.serialize_entry("block_size", &b.block_size)?;
                m.serialize_entry("lora_id", &Option::<i64>::None)?;
                m.serialize_entry("medium", "GPU")?;
                m.serialize_entry("lora_name", &Option::<&str>::None)?;
                m.end()
            }
            Ev::Removed { hashes } => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("type", "BlockRemoved")?;
                m.serialize_entry("block_hashes", &Arr(&b.hashes[hashes.0..hashes.1]))?;
                m.serialize_entry("medium", "GPU")?;
                m.end()
            }
            Ev::Cleared => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("type", "AllBlocksCleared")?;
                m.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding decodes to exactly what vLLM 0.33's own bytes for the published example
    /// `vllm_0.33.0_store_remove_clear` (`shared/data/kv_events/engine_examples.json`)
    /// decode to. (The bytes differ only in map headers: vLLM's encoder writes a 16-bit map
    /// header for `BlockStored`, `rmp-serde` the shortest one.)
    #[test]
    fn decodes_like_the_vllm_example() {
        let mut buf = EventBuf::new(16);
        buf.store(&[11, 18_446_744_073_709_551_609], None)
            .extend(1000..1032);
        buf.remove(&[18_446_744_073_709_551_609]);
        buf.clear_all();
        let mut out = Vec::new();
        let cat = Catalog::new(&[], 16);
        buf.encode(&cat, 1_789_095_808.25, 0, &mut out);
        let hex = "93cb41daa8dbe010000093de0008a474797065ab426c6f636b53746f726564ac626c6f636b5f686173686573920bcffffffffffffffff9b1706172656e745f626c6f636b5f68617368c0a9746f6b656e5f696473dc0020cd03e8cd03e9cd03eacd03ebcd03eccd03edcd03eecd03efcd03f0cd03f1cd03f2cd03f3cd03f4cd03f5cd03f6cd03f7cd03f8cd03f9cd03facd03fbcd03fccd03fdcd03fecd03ffcd0400cd0401cd0402cd0403cd0404cd0405cd0406cd0407aa626c6f636b5f73697a6510a76c6f72615f6964c0a66d656469756da3475055a96c6f72615f6e616d65c083a474797065ac426c6f636b52656d6f766564ac626c6f636b5f68617368657391cffffffffffffffff9a66d656469756da347505581a474797065b0416c6c426c6f636b73436c656172656400";
        let real: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        let ours = kvroute_wire::decode_payload(&out).unwrap();
        assert_eq!(ours, kvroute_wire::decode_payload(&real).unwrap());
        assert_eq!(ours.events.len(), 3);
        let mut reference = Vec::new();
        buf.encode_serde(&cat, 1_789_095_808.25, 0, &mut reference);
        assert_eq!(out, reference);
    }

    /// The direct encoder writes exactly the bytes `rmp-serde` writes, on random batches
    /// whose integers cross every msgpack width boundary.
    #[test]
    fn direct_encoding_equals_rmp_serde() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let edges = [
            0u64,
            1,
            0x7f,
            0x80,
            0xff,
            0x100,
            0xffff,
            0x1_0000,
            0xffff_ffff,
            0x1_0000_0000,
            u64::MAX,
        ];
        let pick = |rng: &mut rand::rngs::StdRng| {
            let e = edges[rng.random_range(0..edges.len())];
            match rng.random_range(0..3) {
                0 => e,
                1 => e.wrapping_sub(1),
                _ => rng.random(),
            }
        };
        // Requests whose generated tokens cross the width boundaries too.
        let reqs: Vec<crate::SimRequest> = (0..4u64)
            .map(|i| crate::SimRequest {
                id: [0, 1, 1_000_000, u64::from(u32::MAX)][i as usize],
                arrival_s: 0.0,
                prompt: match i {
                    0 => crate::PromptSpec::Tokens(std::sync::Arc::from(
                        (0..300u32).map(|t| t * 37 % 70_000).collect::<Vec<_>>(),
                    )),
                    _ => crate::PromptSpec::TraceBlocks {
                        hash_ids: std::sync::Arc::from(vec![0u32, 1, 127, 8_388_607]),
                        input_length: 2_000,
                    },
                },
                output_tokens: 500,
                follows: None,
                pinned: None,
            })
            .collect();
        for case in 0..200 {
            let bs = [1u32, 16, 200][case % 3];
            let cat = Catalog::new(&reqs, bs);
            let mut buf = EventBuf::new(bs);
            for _ in 0..rng.random_range(0..20) {
                match rng.random_range(0..4) {
                    3 => {
                        let req = rng.random_range(0..4);
                        let len = cat.entry(req).prompt_len;
                        let blocks = rng.random_range(1..4);
                        let start = rng.random_range(0..len + 200);
                        let hashes: Vec<u64> = (0..blocks).map(|_| pick(&mut rng)).collect();
                        buf.store_request(&hashes, None, req, start);
                    }
                    0 => {
                        let n = [1usize, 15, 16, 17, 70][rng.random_range(0..5)];
                        let hashes: Vec<u64> = (0..n).map(|_| pick(&mut rng)).collect();
                        let parent = rng.random_bool(0.5).then(|| pick(&mut rng));
                        let tokens: Vec<u32> = (0..n * bs as usize)
                            .map(|_| pick(&mut rng) as u32)
                            .collect();
                        buf.store(&hashes, parent).extend(tokens);
                    }
                    1 => buf.remove(&[pick(&mut rng)]),
                    _ => buf.clear_all(),
                }
            }
            let ts = f64::from_bits(rng.random::<u64>() >> 2);
            let rank = pick(&mut rng) as u32;
            let (mut a, mut b) = (Vec::new(), Vec::new());
            buf.encode(&cat, ts, rank, &mut a);
            buf.encode_serde(&cat, ts, rank, &mut b);
            assert_eq!(a, b, "case {case}");
        }
    }
}
