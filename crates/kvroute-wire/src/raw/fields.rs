//! Raw field types shared by the serde visitors and the fast path: an event's tag, its block
//! hashes and its medium, each in the form validation needs, so the common values cost no
//! allocation of their own (a known tag or medium is not kept as a string, and hashes are
//! converted as they are read).

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};

use core::fmt;

use kvroute_core::EngineHash;

use crate::error::WireError;
use crate::event::Medium;
use crate::hash::WireHash;

/// An event's tag (positional element 0 or the `type` key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tag {
    /// `"BlockStored"`.
    BlockStored,
    /// `"BlockRemoved"`.
    BlockRemoved,
    /// `"AllBlocksCleared"`.
    AllBlocksCleared,
    /// Any other tag, as sent.
    Other(String),
}

impl Tag {
    /// The tag of `s`; allocates only for an unknown tag.
    pub fn from_wire(s: &str) -> Self {
        match s {
            "BlockStored" => Self::BlockStored,
            "BlockRemoved" => Self::BlockRemoved,
            "AllBlocksCleared" => Self::AllBlocksCleared,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Exactly what a `String` accepts (a string, or binary that is UTF-8).
        String::deserialize(d).map(|s| Self::from_wire(&s))
    }
}

/// A `medium` value that was sent (not nil): its tier by [`Medium::from_wire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawMedium(pub Medium);

impl<'de> Deserialize<'de> for RawMedium {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Self(Medium::from_wire(Some(&s))))
    }
}

/// Largest starting capacity taken from a declared array length (it grows past this).
const MAX_PREALLOC: usize = 4096;

/// A `block_hashes` array, each hash converted by [`WireHash::to_engine_hash`] as it is
/// read; the first conversion error is kept for validation to report.
#[derive(Debug, Default)]
pub(crate) struct RawHashes {
    hashes: Vec<EngineHash>,
    error: Option<WireError>,
}

impl RawHashes {
    /// Room for `n` hashes (at most [`MAX_PREALLOC`] up front).
    pub fn with_capacity(n: usize) -> Self {
        Self {
            hashes: Vec::with_capacity(n.min(MAX_PREALLOC)),
            error: None,
        }
    }

    /// Appends one hash.
    pub fn push(&mut self, h: WireHash) {
        match h.to_engine_hash() {
            Ok(e) => self.hashes.push(e),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Appends unsigned hashes (each its own engine hash, by the rule of
    /// [`WireHash::Unsigned`]).
    pub fn extend_unsigned(&mut self, hashes: impl Iterator<Item = u64>) {
        self.hashes.extend(hashes.map(EngineHash));
    }

    /// The engine hashes, or the error of the first hash that had none.
    pub fn into_engine_hashes(self) -> Result<Vec<EngineHash>, WireError> {
        match self.error {
            None => Ok(self.hashes),
            Some(e) => Err(e),
        }
    }
}

impl<'de> Deserialize<'de> for RawHashes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // What a `Vec<WireHash>` accepts: a sequence of hashes.
        d.deserialize_seq(HashesVisitor)
    }
}

struct HashesVisitor;

impl<'de> Visitor<'de> for HashesVisitor {
    type Value = RawHashes;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawHashes, A::Error> {
        let mut out = RawHashes::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(h) = seq.next_element::<WireHash>()? {
            out.push(h);
        }
        Ok(out)
    }
}
