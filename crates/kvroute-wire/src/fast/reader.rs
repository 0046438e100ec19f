//! A msgpack reader over a byte slice for the fast path. Every read takes only the markers
//! it names (msgpack specification, "Formats") and returns `None` for anything else: another
//! marker, truncated data, invalid UTF-8, an integer out of the target's range, nesting past
//! [`MAX_NESTING`]. `None` never means "absent": it means "not recognised, let serde read
//! it", so a `None` anywhere abandons the whole payload. A read that returns `None` may
//! have moved the cursor (past a header whose data is short), so no caller tries another
//! read at the same place after one: each read is chosen by peeking at the marker first.

use crate::event::{ExtraKey, Medium};
use crate::hash::WireHash;
use crate::raw::{RawHashes, RawMedium, Tag};

/// Deepest container nesting the reader follows (the batch array is level 1). Well inside
/// serde's limit of [`MAX_DEPTH`](crate::MAX_DEPTH), so a payload this reader accepts is
/// never one serde rejects for depth.
pub(crate) const MAX_NESTING: usize = 16;

/// An integer as its marker family delivers it: unsigned markers (positive fixint,
/// `uint 8`..`uint 64`) or signed ones (negative fixint, `int 8`..`int 64`).
#[derive(Clone, Copy)]
enum Int {
    U(u64),
    I(i64),
}

/// A cursor over one msgpack payload.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Whether every byte has been read.
    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn be16(&mut self) -> Option<usize> {
        Some(usize::from(u16::from_be_bytes(self.be()?)))
    }

    fn be32(&mut self) -> Option<usize> {
        usize::try_from(u32::from_be_bytes(self.be()?)).ok()
    }

    /// Consumes a nil if one is next.
    pub fn nil(&mut self) -> bool {
        let is_nil = self.peek() == Some(0xc0);
        self.pos += usize::from(is_nil);
        is_nil
    }

    /// `f`'s value, or `Some(None)` for a nil (serde's `Option<T>`).
    pub fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.nil() {
            Some(None)
        } else {
            f(self).map(Some)
        }
    }

    /// An array header: its element count.
    pub fn array_len(&mut self) -> Option<usize> {
        match self.peek()? {
            m @ 0x90..=0x9f => {
                self.pos += 1;
                Some(usize::from(m & 0x0f))
            }
            0xdc => {
                self.pos += 1;
                self.be16()
            }
            0xdd => {
                self.pos += 1;
                self.be32()
            }
            _ => None,
        }
    }

    /// A map header: its entry count.
    pub fn map_len(&mut self) -> Option<usize> {
        match self.peek()? {
            m @ 0x80..=0x8f => {
                self.pos += 1;
                Some(usize::from(m & 0x0f))
            }
            0xde => {
                self.pos += 1;
                self.be16()
            }
            0xdf => {
                self.pos += 1;
                self.be32()
            }
            _ => None,
        }
    }

    /// Whether the next value is a map (not consumed).
    pub fn at_map(&self) -> bool {
        matches!(self.peek(), Some(0x80..=0x8f | 0xde | 0xdf))
    }

    /// The bytes of a string (str markers only), not checked for UTF-8.
    fn str_bytes(&mut self) -> Option<&'a [u8]> {
        let len = match self.peek()? {
            m @ 0xa0..=0xbf => {
                self.pos += 1;
                usize::from(m & 0x1f)
            }
            0xd9 => {
                self.pos += 1;
                usize::from(self.byte()?)
            }
            0xda => {
                self.pos += 1;
                self.be16()?
            }
            0xdb => {
                self.pos += 1;
                self.be32()?
            }
            _ => return None,
        };
        self.take(len)
    }

    /// A string (str markers only, valid UTF-8 only).
    pub fn str(&mut self) -> Option<&'a str> {
        core::str::from_utf8(self.str_bytes()?).ok()
    }

    /// A map key (str markers only), as bytes: the keys this decoder knows are ASCII, and
    /// any other key, valid UTF-8 or not, is skipped by both readers alike, so the bytes are
    /// not checked for UTF-8.
    pub fn key(&mut self) -> Option<&'a [u8]> {
        self.str_bytes()
    }

    /// [`Self::str`], owned.
    pub fn string(&mut self) -> Option<String> {
        self.str().map(str::to_owned)
    }

    /// An event tag (a string); the known tags are compared as bytes.
    pub fn tag(&mut self) -> Option<Tag> {
        Some(match self.str_bytes()? {
            b"BlockStored" => Tag::BlockStored,
            b"BlockRemoved" => Tag::BlockRemoved,
            b"AllBlocksCleared" => Tag::AllBlocksCleared,
            other => Tag::from_wire(core::str::from_utf8(other).ok()?),
        })
    }

    /// A `medium` (a string); `"GPU"`, the usual value, is compared as bytes.
    pub fn medium(&mut self) -> Option<RawMedium> {
        let medium = match self.str_bytes()? {
            b"GPU" => Medium::Gpu,
            other => Medium::from_wire(Some(core::str::from_utf8(other).ok()?)),
        };
        Some(RawMedium(medium))
    }

    /// A binary string (bin markers).
    fn bin(&mut self) -> Option<&'a [u8]> {
        let len = match self.peek()? {
            0xc4 => {
                self.pos += 1;
                usize::from(self.byte()?)
            }
            0xc5 => {
                self.pos += 1;
                self.be16()?
            }
            0xc6 => {
                self.pos += 1;
                self.be32()?
            }
            _ => return None,
        };
        self.take(len)
    }

    fn int(&mut self) -> Option<Int> {
        let m = self.peek()?;
        self.pos += 1;
        Some(match m {
            0x00..=0x7f => Int::U(u64::from(m)),
            0xe0..=0xff => Int::I(i64::from(m as i8)),
            0xcc => Int::U(u64::from(self.byte()?)),
            0xcd => Int::U(u64::from(u16::from_be_bytes(self.be()?))),
            0xce => Int::U(u64::from(u32::from_be_bytes(self.be()?))),
            0xcf => Int::U(u64::from_be_bytes(self.be()?)),
            0xd0 => Int::I(i64::from(i8::from_be_bytes(self.be()?))),
            0xd1 => Int::I(i64::from(i16::from_be_bytes(self.be()?))),
            0xd2 => Int::I(i64::from(i32::from_be_bytes(self.be()?))),
            0xd3 => Int::I(i64::from_be_bytes(self.be()?)),
            _ => {
                self.pos -= 1;
                return None;
            }
        })
    }

    /// An integer that fits `i64` (serde's `i64` rejects larger unsigned values).
    pub fn i64(&mut self) -> Option<i64> {
        match self.int()? {
            Int::U(v) => i64::try_from(v).ok(),
            Int::I(v) => Some(v),
        }
    }

    /// A 64-bit float (`float 64` only: timestamps as engines write them).
    pub fn f64(&mut self) -> Option<f64> {
        if self.peek()? != 0xcb {
            return None;
        }
        self.pos += 1;
        Some(f64::from_be_bytes(self.be()?))
    }

    /// A block hash: an integer (a non-negative signed one is [`WireHash::Unsigned`], as
    /// the serde visitor makes it) or a binary string.
    pub fn hash(&mut self) -> Option<WireHash> {
        // A bin marker commits to a binary hash: `bin` may have consumed its header before
        // finding the data short, so its `None` is final, never a cue to read an integer.
        if matches!(self.peek()?, 0xc4..=0xc6) {
            let b = self.bin()?;
            return Some(match <[u8; 32]>::try_from(b) {
                Ok(d) => WireHash::Binary(d),
                Err(_) => WireHash::BadLength(b.len()),
            });
        }
        Some(match self.int()? {
            Int::U(v) => WireHash::Unsigned(v),
            Int::I(v) => match u64::try_from(v) {
                Ok(u) => WireHash::Unsigned(u),
                Err(_) => WireHash::Signed(v),
            },
        })
    }

    /// An array of block hashes; runs of `uint 64` hashes (vLLM's, and SGLang's
    /// non-negative ones) are read in one loop.
    pub fn hashes(&mut self) -> Option<RawHashes> {
        let n = self.array_len()?;
        let mut out = RawHashes::with_capacity(n.min(self.remaining()));
        let mut left = n;
        while left > 0 {
            let src = &self.buf[self.pos..];
            let whole = &src[..(src.len() / 9).min(left) * 9];
            let count = whole.chunks_exact(9).take_while(|c| c[0] == 0xcf).count();
            if count == 0 {
                out.push(self.hash()?);
                left -= 1;
                continue;
            }
            out.extend_unsigned(
                whole[..count * 9]
                    .chunks_exact(9)
                    .map(|c| u64::from_be_bytes([c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]])),
            );
            self.pos += count * 9;
            left -= count;
        }
        Some(out)
    }

    /// An array of token ids, each a positive fixint or `uint 8` / `uint 16` / `uint 32`
    /// (any other marker: `None`), read as runs of one form each in tight loops.
    pub fn tokens(&mut self) -> Option<Vec<u32>> {
        let n = self.array_len()?;
        // Each token takes at least one byte, so `n` bounds the allocation by the input.
        if n > self.remaining() {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let (count, bytes) = token_run(&self.buf[self.pos..], n - out.len(), &mut out);
            if count == 0 {
                return None;
            }
            self.pos += bytes;
        }
        Some(out)
    }

    /// One `extra_keys` element at nesting `depth`, as the serde visitor reads it: nil,
    /// bool (as 0 / 1), integer, float (32 or 64 bits), string (one that is not UTF-8 as
    /// binary), binary, an array (its elements read
    /// the same way, one level deeper) or a map (skipped).
    pub fn extra_key(&mut self, depth: usize) -> Option<ExtraKey> {
        Some(match self.peek()? {
            0xc0 => {
                self.pos += 1;
                ExtraKey::Nil
            }
            b @ (0xc2 | 0xc3) => {
                self.pos += 1;
                ExtraKey::Int(i128::from(b == 0xc3))
            }
            0xcb => ExtraKey::Float(self.f64()?),
            0xca => {
                self.pos += 1;
                ExtraKey::Float(f64::from(f32::from_be_bytes(self.be()?)))
            }
            // A string that is not UTF-8 reaches serde's visitor as bytes.
            0xa0..=0xbf | 0xd9..=0xdb => {
                let raw = self.str_bytes()?;
                match core::str::from_utf8(raw) {
                    Ok(text) => ExtraKey::Str(text.to_owned()),
                    Err(_) => ExtraKey::Bytes(raw.to_vec()),
                }
            }
            0xc4..=0xc6 => ExtraKey::Bytes(self.bin()?.to_vec()),
            0x90..=0x9f | 0xdc | 0xdd => {
                // The same nesting bound as `skip`, so both readers reject the same input.
                if depth >= MAX_NESTING {
                    return None;
                }
                let n = self.array_len()?;
                // Each element takes at least one byte, so `n` bounds the list by the input.
                if n > self.remaining() {
                    return None;
                }
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.extra_key(depth + 1)?);
                }
                ExtraKey::List(items)
            }
            0x80..=0x8f | 0xde | 0xdf => {
                self.skip(depth)?;
                ExtraKey::Nested
            }
            _ => match self.int()? {
                Int::U(v) => ExtraKey::Int(i128::from(v)),
                Int::I(v) => ExtraKey::Int(i128::from(v)),
            },
        })
    }

    /// Skips `n` values inside a container at nesting `depth`.
    pub fn skip_n(&mut self, n: usize, depth: usize) -> Option<()> {
        for _ in 0..n {
            self.skip(depth)?;
        }
        Some(())
    }

    /// Skips one value of any kind but an extension (or a reserved marker) inside a
    /// container at nesting `depth`.
    pub fn skip(&mut self, depth: usize) -> Option<()> {
        let m = self.byte()?;
        let len = match m {
            0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0xe0..=0xff => 0,
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xcc | 0xd0 => 1,
            0xcd | 0xd1 => 2,
            0xca | 0xce | 0xd2 => 4,
            0xcb | 0xcf | 0xd3 => 8,
            0xc4 | 0xd9 => usize::from(self.byte()?),
            0xc5 | 0xda => self.be16()?,
            0xc6 | 0xdb => self.be32()?,
            0x80..=0x9f | 0xdc..=0xdf => {
                if depth >= MAX_NESTING {
                    return None;
                }
                let n = match m {
                    0x80..=0x8f => usize::from(m & 0x0f) * 2,
                    0x90..=0x9f => usize::from(m & 0x0f),
                    0xdc => self.be16()?,
                    0xdd => self.be32()?,
                    0xde => self.be16()? * 2,
                    _ => self.be32()?.checked_mul(2)?,
                };
                return self.skip_n(n, depth + 1);
            }
            // Extensions (0xc7..=0xc9, 0xd4..=0xd8) and the reserved 0xc1.
            _ => return None,
        };
        self.take(len).map(|_| ())
    }
}

/// Appends to `out` the token ids of the longest run (at most `max`) at the start of `src`
/// written in the form of the first one; returns how many and the bytes they took (0 and 0
/// when the first is not a token id the fast path reads).
fn token_run(src: &[u8], max: usize, out: &mut Vec<u32>) -> (usize, usize) {
    match src.first() {
        Some(&m) if m < 0x80 => run::<1>(src, max, out, |c| c[0] < 0x80, |c| u32::from(c[0])),
        Some(0xcc) => run::<2>(src, max, out, |c| c[0] == 0xcc, |c| u32::from(c[1])),
        Some(0xcd) => run::<3>(
            src,
            max,
            out,
            |c| c[0] == 0xcd,
            |c| u32::from(u16::from_be_bytes([c[1], c[2]])),
        ),
        Some(0xce) => run::<5>(
            src,
            max,
            out,
            |c| c[0] == 0xce,
            |c| u32::from_be_bytes([c[1], c[2], c[3], c[4]]),
        ),
        _ => (0, 0),
    }
}

/// [`token_run`] of `W`-byte tokens: counts the run first, then converts it in one pass
/// the compiler can unroll (no per-token capacity or bounds checks).
fn run<const W: usize>(
    src: &[u8],
    max: usize,
    out: &mut Vec<u32>,
    is_form: impl Fn(&[u8]) -> bool,
    value: impl Fn(&[u8]) -> u32,
) -> (usize, usize) {
    let whole = &src[..(src.len() / W).min(max) * W];
    let count = whole.chunks_exact(W).take_while(|c| is_form(c)).count();
    let bytes = count * W;
    out.extend(whole[..bytes].chunks_exact(W).map(value));
    (count, bytes)
}
