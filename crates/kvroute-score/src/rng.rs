//! A tiny seeded generator for near-tie randomisation (router replicas that read the same
//! telemetry spreading over near-equal workers instead of all picking the same one).

/// SplitMix64: a seeded, deterministic stream of `u64` draws. Each router seeds its own,
/// so replicas that see the same telemetry draw differently; one seed replays exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NearTieRng {
    state: u64,
}

impl NearTieRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next draw.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
