//! A tiny seeded generator for near-tie randomisation (router replicas that read the same
//! telemetry spreading over near-equal workers instead of all picking the same one).

use kvroute_core::SplitMix64;

/// A seeded, deterministic stream of `u64` draws ([`SplitMix64`]). Each router seeds its
/// own, so replicas that see the same telemetry draw differently; one seed replays exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearTieRng(SplitMix64);

impl NearTieRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    /// The next draw.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}
