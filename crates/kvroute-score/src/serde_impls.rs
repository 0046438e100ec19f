//! `serde` support (feature `serde`): a [`Policy`] is its written form (`"projected_time"`,
//! `"projected_time:shadow"`, `"load_aware:0.5"`, module `policy`), so a configuration file
//! names policies as the simulator's command line and the stats labels do.

use core::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::config::Policy;

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

struct PolicyVisitor;

impl Visitor<'_> for PolicyVisitor {
    type Value = Policy;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a routing policy: {}", Policy::accepted_forms())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Policy, E> {
        v.parse().map_err(E::custom)
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
        d.deserialize_str(PolicyVisitor)
    }
}
