//! Lane layout shared by the snapshot and its consumers: padding, per-slot validity and the
//! set of fields a slot's telemetry reports.

/// Lanes are padded to a multiple of this many elements (16 × `f32` = one 512-bit vector,
/// two 256-bit ones), so a SIMD pass needs no scalar tail. Padding elements are zero and
/// their validity is [`Validity::Vacant`].
pub const LANE_PAD: usize = 16;

/// `slots` rounded up to a multiple of [`LANE_PAD`] (0 stays 0).
pub const fn padded_len(slots: usize) -> usize {
    slots.div_ceil(LANE_PAD) * LANE_PAD
}

/// How far a slot's load figures can be trusted, computed once per publication.
///
/// Ordered from least to most trustworthy, so `v >= Validity::Partial` means "has
/// current figures for this rank".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum Validity {
    /// No worker is registered in the slot (also every padding lane).
    #[default]
    Vacant = 0,
    /// A worker is registered but no valid report has been accepted for it.
    Missing = 1,
    /// The latest report for the slot was rejected as invalid (NaN, negative, usage above 1,
    /// zero or missing cap, …). The lanes keep the last good figures, if any, but they are
    /// not current. See [`crate::UpdateError`].
    Invalid = 2,
    /// The last good report is older than the configured maximum age.
    Stale = 3,
    /// This rank is current, but some other DP rank of the same engine is not (not yet
    /// registered, missing, invalid or stale), so engine-wide sums are incomplete.
    Partial = 4,
    /// Current, and every DP rank of the engine is current.
    Fresh = 5,
}

impl Validity {
    /// Whether the slot's own figures are current (`Fresh` or `Partial`).
    pub fn is_current(self) -> bool {
        self >= Validity::Partial
    }
}

/// A set of load fields, as bits: which fields a slot's telemetry reports (published per
/// slot in [`crate::LoadSnapshot::reported`]) and which reservation counters a
/// reconciliation clears.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Fields(pub u8);

impl Fields {
    /// No field.
    pub const NONE: Fields = Fields(0);
    /// Running and waiting request counts.
    pub const REQUESTS: Fields = Fields(1);
    /// Waiting uncached prefill tokens.
    pub const PREFILL_TOKENS: Fields = Fields(1 << 1);
    /// Active decode tokens (KV tokens of running requests).
    pub const DECODE_TOKENS: Fields = Fields(1 << 2);
    /// Decode throughput (from telemetry or the engine's configuration).
    pub const DECODE_TPS: Fields = Fields(1 << 3);
    /// Prefill throughput (from telemetry or the engine's configuration).
    pub const PREFILL_TPS: Fields = Fields(1 << 4);
    /// Scheduler utilisation.
    pub const UTILIZATION: Fields = Fields(1 << 5);
    /// The three fields that reservations also count (requests, prefill and decode tokens).
    pub const RESERVABLE: Fields = Fields(0b111);

    /// Whether every field of `other` is in `self`.
    pub const fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of both sets.
    pub const fn union(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }

    /// The intersection of both sets.
    pub const fn intersect(self, other: Fields) -> Fields {
        Fields(self.0 & other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for Fields {
    type Output = Fields;
    fn bitor(self, rhs: Fields) -> Fields {
        self.union(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding() {
        assert_eq!(padded_len(0), 0);
        assert_eq!(padded_len(1), 16);
        assert_eq!(padded_len(16), 16);
        assert_eq!(padded_len(17), 32);
        assert_eq!(padded_len(512), 512);
    }

    #[test]
    fn validity_order_and_fields() {
        assert!(Validity::Fresh.is_current());
        assert!(Validity::Partial.is_current());
        assert!(!Validity::Stale.is_current());
        assert!(!Validity::Missing.is_current());
        let f = Fields::REQUESTS | Fields::DECODE_TOKENS;
        assert_eq!(f, Fields(0b101));
        assert!(f.contains(Fields::REQUESTS));
        assert!(!f.contains(Fields::PREFILL_TOKENS));
        assert_eq!(f.intersect(Fields::RESERVABLE), f);
        assert!(Fields::NONE.is_empty());
    }
}
