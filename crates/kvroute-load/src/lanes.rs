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
///
/// Deliberately exhaustive (not `#[non_exhaustive]`): the states are the trust lattice
/// every policy's telemetry rule is written against, so a new state is a breaking change
/// that every `match` on it must be made to handle.
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
    /// not current. See [`UpdateError`](kvroute_core::UpdateError).
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
    fn validity_order() {
        assert!(Validity::Fresh.is_current());
        assert!(Validity::Partial.is_current());
        assert!(!Validity::Stale.is_current());
        assert!(!Validity::Missing.is_current());
    }
}
