//! Which instruction set extensions kvroute's run-time dispatched code may use in this
//! process.
//!
//! kvroute's default build targets the `x86_64` baseline (SSE2), so its hot paths (the
//! prefix match, the fleet fill, the scoring pass) carry a second copy compiled with
//! `#[target_feature(enable = "avx2,bmi1,popcnt")]` and pick one per call from
//! [`avx2_enabled`]. Both copies compute the same values (integer code, and float code with
//! the same IEEE operations: Rust never fuses a multiply and an add on its own), so the
//! choice changes speed only; each crate's tests compare the two.
//!
//! `KVROUTE_SIMD` set to `scalar` or `portable` keeps every dispatched path on the
//! baseline copy (for tests and benches; the scorer reads the same variable to pick its
//! pass, `kvroute_score::SimdPath`). Any other value, or none, leaves the choice to the
//! CPU.

use std::sync::OnceLock;

/// Whether the CPU has AVX2, BMI1 and POPCNT and `KVROUTE_SIMD` does not ask for the
/// baseline (module docs). Detected at the first call and cached for the process (one
/// load afterwards). Always `false` off `x86`/`x86_64`. Under valgrind the features are
/// those it emulates and reports (AVX2, BMI1 and POPCNT included).
#[inline]
pub fn avx2_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let forced_off = matches!(
            std::env::var("KVROUTE_SIMD").as_deref(),
            Ok("scalar") | Ok("portable")
        );
        !forced_off && avx2_detected()
    })
}

/// Whether the CPU has AVX2, BMI1 and POPCNT, whatever `KVROUTE_SIMD` says.
pub fn avx2_detected() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enabled_only_where_detected() {
        assert!(!avx2_enabled() || avx2_detected());
        let forced = matches!(
            std::env::var("KVROUTE_SIMD").as_deref(),
            Ok("scalar") | Ok("portable")
        );
        assert_eq!(avx2_enabled(), avx2_detected() && !forced);
    }
}
