//! Caller-supplied time.
//!
//! The core never reads a clock: every operation that needs the time takes a [`Nanos`]
//! from the caller (a router passes its monotonic clock, the simulator its virtual clock),
//! so runs are deterministic and the simulator can drive time.

use core::fmt;

/// A point on the caller's monotonic clock, or a duration on it, in nanoseconds.
///
/// Only differences between two `Nanos` from the same clock are meaningful. Arithmetic
/// saturates (a clock that steps backwards yields an age of zero, never a wrap).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero nanoseconds.
    pub const ZERO: Nanos = Nanos(0);

    /// `secs` seconds as nanoseconds (`secs * 1e9`, saturating at `u64::MAX`).
    pub const fn from_secs(secs: u64) -> Nanos {
        Nanos(secs.saturating_mul(1_000_000_000))
    }

    /// `ms` milliseconds as nanoseconds (saturating at `u64::MAX`).
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// `self - earlier`, or zero when `earlier` is later than `self`.
    pub const fn saturating_since(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at `u64::MAX`.
    pub const fn saturating_add(self, d: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(d.0))
    }

    /// The value in seconds (`f64`, exact below 2^53 ns ≈ 104 days).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

/// `a + b` is [`Nanos::saturating_add`] (saturates at `u64::MAX`; never panics).
impl core::ops::Add for Nanos {
    type Output = Nanos;
    fn add(self, d: Nanos) -> Nanos {
        self.saturating_add(d)
    }
}

/// `a += b` is [`Nanos::saturating_add`].
impl core::ops::AddAssign for Nanos {
    fn add_assign(&mut self, d: Nanos) {
        *self = self.saturating_add(d);
    }
}

/// `a - b` is [`Nanos::saturating_since`] (zero when `b` is later; never panics).
impl core::ops::Sub for Nanos {
    type Output = Nanos;
    fn sub(self, earlier: Nanos) -> Nanos {
        self.saturating_since(earlier)
    }
}

/// A [`Duration`](core::time::Duration) as nanoseconds, saturating at `u64::MAX` (about
/// 584 years).
impl From<core::time::Duration> for Nanos {
    fn from(d: core::time::Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ns", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_and_saturation() {
        assert_eq!(Nanos::from_secs(2), Nanos(2_000_000_000));
        assert_eq!(Nanos::from_millis(250), Nanos(250_000_000));
        assert_eq!(Nanos(5).saturating_since(Nanos(9)), Nanos::ZERO);
        assert_eq!(Nanos(5) + Nanos(9), Nanos(14));
        assert_eq!(Nanos(u64::MAX - 1) + Nanos(9), Nanos(u64::MAX));
        assert_eq!(Nanos(9) - Nanos(5), Nanos(4));
        assert_eq!(Nanos(5) - Nanos(9), Nanos::ZERO);
        let mut t = Nanos::from_secs(1);
        t += Nanos::from_millis(10);
        assert_eq!(t, Nanos(1_010_000_000));
        assert_eq!(
            Nanos::from(core::time::Duration::from_micros(3)),
            Nanos(3_000)
        );
        assert_eq!(Nanos::from(core::time::Duration::MAX), Nanos(u64::MAX));
        assert_eq!(Nanos(9).saturating_since(Nanos(5)), Nanos(4));
        assert_eq!(Nanos(u64::MAX).saturating_add(Nanos(1)), Nanos(u64::MAX));
        assert_eq!(Nanos(1_500_000_000).as_secs_f64(), 1.5);
    }
}
