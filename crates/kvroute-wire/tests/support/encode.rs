//! A msgpack encoder that lets a test choose each value's marker, written from the msgpack
//! specification ("Formats"): canonical encoders (rmp-serde, Python's msgpack) always pick
//! the shortest form, but a decoder must accept every form, so tests write the longer ones
//! (`uint 32` for 5, `array 16` for two elements, `str 8` for a short tag), the rare ones
//! (`float 32`, extensions) and raw bytes too.

/// Which form of a marker family to write: `Short` is the shortest that fits; the others
/// are used when the value fits them, else the shortest that does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Width {
    /// The shortest form (fixint, fixstr, fixarray, fixmap where they fit).
    Short,
    /// The 8-bit form (`uint 8`, `int 8`, `str 8`, `bin 8`; arrays and maps have none).
    W8,
    /// The 16-bit form.
    W16,
    /// The 32-bit form.
    W32,
    /// The 64-bit form (integers only).
    W64,
}

/// One msgpack value with its encoding.
#[derive(Clone, Debug, PartialEq)]
pub enum M {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool(bool),
    /// An unsigned integer in an unsigned form.
    U(u64, Width),
    /// A signed integer in a signed form (negative fixint for -32..=-1 when `Short`; a
    /// non-negative value with `Short` is a positive fixint when below 128).
    I(i64, Width),
    /// `float 32`.
    F32(f32),
    /// `float 64`.
    F64(f64),
    /// A UTF-8 string in a str form.
    S(String, Width),
    /// Raw bytes in a str form (for invalid UTF-8).
    SBytes(Vec<u8>, Width),
    /// A binary string.
    B(Vec<u8>, Width),
    /// An array.
    A(Vec<M>, Width),
    /// A map, entries in this order (keys of any kind, repeats allowed).
    Map(Vec<(M, M)>, Width),
    /// An extension of this type and data.
    Ext(i8, Vec<u8>),
    /// Bytes written as they are.
    Raw(Vec<u8>),
}

/// A string value in its shortest form.
pub fn s(v: &str) -> M {
    M::S(v.to_owned(), Width::Short)
}

/// An unsigned integer in its shortest form.
pub fn u(v: u64) -> M {
    M::U(v, Width::Short)
}

/// An array in its shortest form.
pub fn a(v: Vec<M>) -> M {
    M::A(v, Width::Short)
}

/// A map with string keys in its shortest form.
pub fn map(kv: Vec<(&str, M)>) -> M {
    M::Map(
        kv.into_iter().map(|(k, v)| (s(k), v)).collect(),
        Width::Short,
    )
}

impl M {
    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out);
        out
    }

    fn write(&self, o: &mut Vec<u8>) {
        match self {
            M::Nil => o.push(0xc0),
            M::Bool(b) => o.push(if *b { 0xc3 } else { 0xc2 }),
            M::U(v, w) => uint(o, *v, *w),
            M::I(v, w) => int(o, *v, *w),
            M::F32(v) => {
                o.push(0xca);
                o.extend(v.to_be_bytes());
            }
            M::F64(v) => {
                o.push(0xcb);
                o.extend(v.to_be_bytes());
            }
            M::S(v, w) => bytes(o, v.as_bytes(), *w, [0xa0, 0xd9, 0xda, 0xdb], 32),
            M::SBytes(v, w) => bytes(o, v, *w, [0xa0, 0xd9, 0xda, 0xdb], 32),
            M::B(v, w) => bytes(o, v, (*w).max(Width::W8), [0, 0xc4, 0xc5, 0xc6], 0),
            M::A(v, w) => {
                header(o, v.len(), *w, [0x90, 0xdc, 0xdd]);
                v.iter().for_each(|x| x.write(o));
            }
            M::Map(kv, w) => {
                header(o, kv.len(), *w, [0x80, 0xde, 0xdf]);
                for (k, v) in kv {
                    k.write(o);
                    v.write(o);
                }
            }
            M::Ext(t, d) => {
                match d.len() {
                    1 => o.push(0xd4),
                    2 => o.push(0xd5),
                    4 => o.push(0xd6),
                    8 => o.push(0xd7),
                    16 => o.push(0xd8),
                    n => {
                        o.push(0xc7);
                        o.push(u8::try_from(n).expect("short extension"));
                    }
                }
                o.push(t.to_be_bytes()[0]);
                o.extend(d);
            }
            M::Raw(b) => o.extend(b),
        }
    }
}

fn uint(o: &mut Vec<u8>, v: u64, w: Width) {
    let fits = |bits: u32| bits == 64 || v < (1u64 << bits);
    match w {
        Width::W8 if fits(8) => {
            o.push(0xcc);
            o.push(v as u8);
        }
        Width::W16 if fits(16) => {
            o.push(0xcd);
            o.extend((v as u16).to_be_bytes());
        }
        Width::W32 if fits(32) => {
            o.push(0xce);
            o.extend((v as u32).to_be_bytes());
        }
        Width::W64 => {
            o.push(0xcf);
            o.extend(v.to_be_bytes());
        }
        _ if v < 128 => o.push(v as u8),
        _ if fits(8) => uint(o, v, Width::W8),
        _ if fits(16) => uint(o, v, Width::W16),
        _ if fits(32) => uint(o, v, Width::W32),
        _ => uint(o, v, Width::W64),
    }
}

fn int(o: &mut Vec<u8>, v: i64, w: Width) {
    let fits = |bits: u32| bits == 64 || (v >= -(1i64 << (bits - 1)) && v < (1i64 << (bits - 1)));
    match w {
        Width::W8 if fits(8) => {
            o.push(0xd0);
            o.extend((v as i8).to_be_bytes());
        }
        Width::W16 if fits(16) => {
            o.push(0xd1);
            o.extend((v as i16).to_be_bytes());
        }
        Width::W32 if fits(32) => {
            o.push(0xd2);
            o.extend((v as i32).to_be_bytes());
        }
        Width::W64 => {
            o.push(0xd3);
            o.extend(v.to_be_bytes());
        }
        _ if (-32..128).contains(&v) => o.push(v as u8),
        _ if fits(8) => int(o, v, Width::W8),
        _ if fits(16) => int(o, v, Width::W16),
        _ if fits(32) => int(o, v, Width::W32),
        _ => int(o, v, Width::W64),
    }
}

/// A str or bin header (`markers`: fix form base or 0 for none, 8-, 16-, 32-bit) and data.
fn bytes(o: &mut Vec<u8>, data: &[u8], w: Width, markers: [u8; 4], fix_max: usize) {
    let n = data.len();
    if w == Width::Short && n < fix_max {
        o.push(markers[0] | n as u8);
    } else if w <= Width::W8 && n < 256 {
        o.push(markers[1]);
        o.push(n as u8);
    } else if w <= Width::W16 && n < 65_536 {
        o.push(markers[2]);
        o.extend((n as u16).to_be_bytes());
    } else {
        o.push(markers[3]);
        o.extend((n as u32).to_be_bytes());
    }
    o.extend(data);
}

/// An array or map header (`markers`: fix form base, 16-bit, 32-bit).
fn header(o: &mut Vec<u8>, n: usize, w: Width, markers: [u8; 3]) {
    if w == Width::Short && n < 16 {
        o.push(markers[0] | n as u8);
    } else if w <= Width::W16 && n < 65_536 {
        o.push(markers[1]);
        o.extend((n as u16).to_be_bytes());
    } else {
        o.push(markers[2]);
        o.extend((n as u32).to_be_bytes());
    }
}
