//! Which implementation of the scoring pass runs: chosen once per process from the CPU's
//! features, or forced for tests and benches.

use std::sync::OnceLock;

/// An implementation of the scoring pass. Every one makes the same decision bit for bit
/// (the crate docs, *SIMD*); they differ only in speed.
///
/// [`Scorer::score`](crate::Scorer::score) runs [`SimdPath::active`], chosen once per
/// process; [`Scorer::score_with`](crate::Scorer::score_with) runs a given one (tests and
/// benches compare them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SimdPath {
    /// The scalar reference, one slot at a time
    /// ([`Scorer::score_reference`](crate::Scorer::score_reference)).
    Scalar,
    /// `wide::f32x8` as the build compiled it: on a default `x86_64` build two 128-bit SSE2
    /// halves, 256-bit AVX with `-C target-cpu=native` on an AVX machine, NEON on `aarch64`,
    /// plain arrays elsewhere. Always available.
    Portable,
    /// 256-bit AVX2 code (with BMI1 and POPCNT for the tie keys' bit scans) compiled into
    /// every build for `x86`/`x86_64` and run only on a CPU that has those features
    /// (detected at run time). Not available on other targets.
    Avx2,
}

impl SimdPath {
    /// Every path, in this order (not all of them available: [`is_available`](Self::is_available)).
    pub const ALL: [SimdPath; 3] = [SimdPath::Scalar, SimdPath::Portable, SimdPath::Avx2];

    /// The path's name as [`active`](Self::active) reads it from `KVROUTE_SIMD`:
    /// `"scalar"`, `"portable"`, `"avx2"`.
    pub const fn name(self) -> &'static str {
        match self {
            SimdPath::Scalar => "scalar",
            SimdPath::Portable => "portable",
            SimdPath::Avx2 => "avx2",
        }
    }

    /// The path named `name` ([`name`](Self::name), exactly), if any.
    pub fn from_name(name: &str) -> Option<SimdPath> {
        SimdPath::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether this process can run the path: `Scalar` and `Portable` always; `Avx2` on
    /// an `x86`/`x86_64` CPU with AVX2, BMI1 and POPCNT (detected once, then cached). Under
    /// valgrind the features are those valgrind emulates and reports (AVX2 included, never
    /// AVX-512, which this crate does not use).
    pub fn is_available(self) -> bool {
        match self {
            SimdPath::Scalar | SimdPath::Portable => true,
            SimdPath::Avx2 => avx2_available(),
        }
    }

    /// The fastest available path: `Avx2` where available, else `Portable`.
    pub fn detected() -> SimdPath {
        if avx2_available() {
            SimdPath::Avx2
        } else {
            SimdPath::Portable
        }
    }

    /// The path [`Scorer::score`](crate::Scorer::score) runs, chosen at its first call in
    /// the process and kept: the one named by the environment variable `KVROUTE_SIMD`
    /// (`scalar`, `portable` or `avx2`) when it is set to an available path's name (a way
    /// to force a path for tests and benches); otherwise, including for an unknown or
    /// unavailable name, [`detected`](Self::detected).
    pub fn active() -> SimdPath {
        static ACTIVE: OnceLock<SimdPath> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            std::env::var("KVROUTE_SIMD")
                .ok()
                .and_then(|v| SimdPath::from_name(&v))
                .filter(|p| p.is_available())
                .unwrap_or_else(SimdPath::detected)
        })
    }
}

impl core::fmt::Display for SimdPath {
    /// Writes [`name`](SimdPath::name).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn avx2_available() -> bool {
    crate::avx2::available()
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
fn avx2_available() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_the_portable_paths_always_run() {
        for p in SimdPath::ALL {
            assert_eq!(SimdPath::from_name(p.name()), Some(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(SimdPath::from_name("AVX2"), None);
        assert!(SimdPath::Scalar.is_available() && SimdPath::Portable.is_available());
        assert!(SimdPath::active().is_available());
        assert!(matches!(
            SimdPath::detected(),
            SimdPath::Avx2 | SimdPath::Portable
        ));
        assert_eq!(
            SimdPath::detected() == SimdPath::Avx2,
            SimdPath::Avx2.is_available()
        );
    }

    /// On x86, `Avx2` is available exactly when the CPU reports the three features.
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    #[test]
    fn avx2_follows_the_cpu() {
        let cpu = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("popcnt");
        assert_eq!(SimdPath::Avx2.is_available(), cpu);
    }
}
