//! Engine block hashes on the wire and the rule that makes each an [`EngineHash`].
//!
//! * **Unsigned** msgpack integers (vLLM's default, `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`:
//!   the low 64 bits of a 32-byte SHA-256 digest): the value itself.
//! * **Signed** msgpack integers (SGLang: the first 8 digest bytes as a big-endian `i64`;
//!   very old vLLM): the two's-complement bit pattern as `u64` (`-1` becomes `u64::MAX`),
//!   as [`EngineHash::from(i64)`](EngineHash) does. A non-negative value encoded as a
//!   signed msgpack integer is the same key as the unsigned encoding of that value.
//! * **32-byte binary** (vLLM with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`): the *last 8
//!   bytes read big-endian*. This is exactly the integer vLLM publishes for the same block
//!   when configured for integer hashes (vLLM takes `int.from_bytes(digest[-8:], "big")`),
//!   so one engine's blocks get the same keys whichever way it is configured; the
//!   `vllm_legacy_bytes_hashes` example checks it against the integer form of the same
//!   blocks. Binary hashes of any other length are rejected ([`WireError::HashSize`]).
//!
//! Engine hashes are opaque keys: they resolve removals and parents, never hashing.

use core::fmt;

use kvroute_core::EngineHash;
use serde::de::{self, Deserialize, Deserializer, Visitor};

use crate::error::WireError;

/// A block hash as it came off the wire, before [`WireHash::to_engine_hash`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireHash {
    /// An unsigned integer.
    Unsigned(u64),
    /// A negative integer (non-negative signed encodings arrive as [`Self::Unsigned`]).
    Signed(i64),
    /// A 32-byte binary string.
    Binary([u8; 32]),
    /// A binary string of another length (rejected on conversion).
    BadLength(usize),
}

impl WireHash {
    /// The engine hash by the module's rule.
    ///
    /// # Errors
    /// [`WireError::HashSize`] for a binary hash that is not 32 bytes.
    pub fn to_engine_hash(self) -> Result<EngineHash, WireError> {
        match self {
            Self::Unsigned(v) => Ok(EngineHash(v)),
            Self::Signed(v) => Ok(EngineHash::from(v)),
            Self::Binary(b) => Ok(binary_hash(&b)),
            Self::BadLength(len) => Err(WireError::HashSize { len }),
        }
    }
}

/// The engine hash of a 32-byte binary block hash: its last 8 bytes, big-endian.
pub fn binary_hash(digest: &[u8; 32]) -> EngineHash {
    let mut tail = [0u8; 8];
    tail.copy_from_slice(&digest[24..]);
    EngineHash(u64::from_be_bytes(tail))
}

struct HashVisitor;

impl<'de> Visitor<'de> for HashVisitor {
    type Value = WireHash;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a block hash (integer or 32-byte binary)")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<WireHash, E> {
        Ok(WireHash::Unsigned(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<WireHash, E> {
        Ok(if v >= 0 {
            WireHash::Unsigned(v as u64)
        } else {
            WireHash::Signed(v)
        })
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<WireHash, E> {
        Ok(match <[u8; 32]>::try_from(v) {
            Ok(b) => WireHash::Binary(b),
            Err(_) => WireHash::BadLength(v.len()),
        })
    }
}

impl<'de> Deserialize<'de> for WireHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HashVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert_eq!(WireHash::Unsigned(7).to_engine_hash(), Ok(EngineHash(7)));
        assert_eq!(
            WireHash::Signed(-1).to_engine_hash(),
            Ok(EngineHash(u64::MAX))
        );
        let mut b = [0u8; 32];
        b[24..].copy_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(WireHash::Binary(b).to_engine_hash(), Ok(EngineHash(0x102)));
        assert_eq!(
            WireHash::BadLength(31).to_engine_hash(),
            Err(WireError::HashSize { len: 31 })
        );
    }
}
