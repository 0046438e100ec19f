//! One shape for every bounded setting: a [`Bounds`] written once per value (beside the
//! setting it bounds), checked the same way everywhere, and one error,
//! [`OutOfRange`], naming the setting, the value given and the valid range.
//!
//! Out-of-range values are rejected, never clamped.

use core::fmt;

/// A setting's value as given, printed in its own type (an `f32` knob prints `0.9`, not
/// the `f64` widening `0.8999999761581421`).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Number {
    /// An integer setting.
    Int(u64),
    /// An `f32` setting (NaN and infinities included).
    F32(f32),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(v) => write!(f, "{v}"),
            Self::F32(v) => write!(f, "{v}"),
        }
    }
}

/// An inclusive range `lo..=hi` with its unit (`""` for a dimensionless value). An integer
/// range whose `hi` is `u64::MAX` prints as `lo..`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    lo: Number,
    hi: Number,
    unit: &'static str,
}

impl Bounds {
    /// Integers `lo..=hi`, in `unit`.
    pub const fn ints(lo: u64, hi: u64, unit: &'static str) -> Self {
        Self {
            lo: Number::Int(lo),
            hi: Number::Int(hi),
            unit,
        }
    }

    /// `f32` values `lo..=hi` (finite; NaN is outside every range), in `unit`.
    pub const fn floats(lo: f32, hi: f32, unit: &'static str) -> Self {
        Self {
            lo: Number::F32(lo),
            hi: Number::F32(hi),
            unit,
        }
    }

    /// The lowest valid value.
    pub const fn lo(&self) -> Number {
        self.lo
    }

    /// The highest valid value.
    pub const fn hi(&self) -> Number {
        self.hi
    }

    /// The unit (`""` when dimensionless).
    pub const fn unit(&self) -> &'static str {
        self.unit
    }

    /// Whether `v` lies in the range (always false for a float range).
    pub fn contains_int(&self, v: u64) -> bool {
        matches!((self.lo, self.hi), (Number::Int(lo), Number::Int(hi)) if lo <= v && v <= hi)
    }

    /// Whether `v` lies in the range (false for NaN, and always for an integer range).
    pub fn contains_f32(&self, v: f32) -> bool {
        matches!((self.lo, self.hi), (Number::F32(lo), Number::F32(hi)) if lo <= v && v <= hi)
    }

    /// `v` when it lies in the range.
    ///
    /// # Errors
    /// [`OutOfRange`] naming `field`, `v` and the range.
    pub fn check_int(&self, field: &'static str, v: u64) -> Result<u64, OutOfRange> {
        if self.contains_int(v) {
            Ok(v)
        } else {
            Err(OutOfRange {
                field,
                value: Number::Int(v),
                bounds: *self,
            })
        }
    }

    /// `v` (a count or size) when it lies in the range.
    ///
    /// # Errors
    /// [`OutOfRange`] naming `field`, `v` and the range.
    pub fn check_usize(&self, field: &'static str, v: usize) -> Result<usize, OutOfRange> {
        self.check_int(field, v as u64).map(|_| v)
    }

    /// `v` when it lies in the range (NaN never does).
    ///
    /// # Errors
    /// [`OutOfRange`] naming `field`, `v` and the range.
    pub fn check_f32(&self, field: &'static str, v: f32) -> Result<f32, OutOfRange> {
        if self.contains_f32(v) {
            Ok(v)
        } else {
            Err(OutOfRange {
                field,
                value: Number::F32(v),
                bounds: *self,
            })
        }
    }
}

impl fmt::Display for Bounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.hi {
            Number::Int(u64::MAX) => write!(f, "{}..", self.lo)?,
            hi => write!(f, "{}..={hi}", self.lo)?,
        }
        if !self.unit.is_empty() {
            write!(f, " {}", self.unit)?;
        }
        Ok(())
    }
}

/// A setting outside its [`Bounds`]; nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutOfRange {
    /// The setting, as its config names it (`"worker_slots"`, `"score.tie_epsilon"`, …).
    pub field: &'static str,
    /// The value given.
    pub value: Number,
    /// Its valid range.
    pub bounds: Bounds,
}

impl OutOfRange {
    /// The same error under a longer name (a sub-config's field seen from its parent:
    /// `"beta"` becomes `"score.policy.beta"`).
    pub fn within(self, field: &'static str) -> Self {
        Self { field, ..self }
    }
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} = {} is out of range {}",
            self.field, self.value, self.bounds
        )
    }
}

impl std::error::Error for OutOfRange {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_field_value_and_range() {
        let slots = Bounds::ints(1, 4096, "");
        assert_eq!(slots.check_int("worker_slots", 4096), Ok(4096));
        let e = slots.check_usize("worker_slots", 0).unwrap_err();
        assert_eq!(e.to_string(), "worker_slots = 0 is out of range 1..=4096");
        let ttl = Bounds::ints(1, u64::MAX, "ns");
        assert_eq!(
            ttl.check_int("reservation_ttl", 0).unwrap_err().to_string(),
            "reservation_ttl = 0 is out of range 1.. ns"
        );
        let w = Bounds::floats(0.0, 2.0, "");
        // The f32 value prints as given, not widened to f64 (0.8999999761581421).
        let e = Bounds::floats(0.0, 0.5, "")
            .check_f32("tie_epsilon", 0.9)
            .unwrap_err();
        assert_eq!(e.to_string(), "tie_epsilon = 0.9 is out of range 0..=0.5");
        assert!(w.check_f32("watermark", f32::NAN).is_err());
        assert!(w.check_f32("watermark", 2.5).is_err());
        assert_eq!(w.check_f32("watermark", 2.0), Ok(2.0));
        assert!(!w.contains_int(1), "an integer never lies in a float range");
        let tps = Bounds::floats(1.0, 1e9, "tokens/s");
        assert_eq!(
            tps.check_f32("least_load_tps", 0.5)
                .unwrap_err()
                .within("score.least_load_tps")
                .to_string(),
            "score.least_load_tps = 0.5 is out of range 1..=1000000000 tokens/s"
        );
    }
}
