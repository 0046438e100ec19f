//! A msgpack value to build test and benchmark inputs with: every shape the engines send
//! (arrays, maps in the order written, unsigned, signed, float, string, binary, nil),
//! written by `rmp-serde`.

use serde::Serialize;
use serde::ser::SerializeMap;

/// One msgpack value.
#[derive(Clone, Debug, PartialEq)]
pub enum V {
    /// Nil.
    Nil,
    /// An unsigned integer.
    U(u64),
    /// A signed integer (msgpack writes a non-negative one in the unsigned encodings).
    I(i64),
    /// A 64-bit float.
    F(f64),
    /// A string.
    S(&'static str),
    /// A binary string.
    B(Vec<u8>),
    /// An array.
    A(Vec<V>),
    /// A map with string keys, in this order.
    M(Vec<(&'static str, V)>),
}

impl Serialize for V {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            V::Nil => s.serialize_unit(),
            V::U(v) => s.serialize_u64(*v),
            V::I(v) => s.serialize_i64(*v),
            V::F(v) => s.serialize_f64(*v),
            V::S(v) => s.serialize_str(v),
            V::B(v) => s.serialize_bytes(v),
            V::A(v) => v.serialize(s),
            V::M(kv) => {
                let mut m = s.serialize_map(Some(kv.len()))?;
                for (k, v) in kv {
                    m.serialize_entry(k, v)?;
                }
                m.end()
            }
        }
    }
}

impl V {
    /// The msgpack bytes of this value.
    pub fn to_msgpack(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).expect("plain values always encode")
    }
}
