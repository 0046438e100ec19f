//! Reshaping a workload's arrival times: speeding it up or slowing it down (the sweep's
//! rate scales) and the opt-in seeded arrival jitter.
//!
//! Both act on the requests that arrive on their own (`follows` unset); a follow-up
//! arrives its think time after its parent finishes, so it moves with its parent and keeps
//! its think time.

use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::workload::Workload;

/// Longest accepted arrival jitter (seconds): an hour, the length of the released traces.
pub const MAX_ARRIVAL_JITTER_S: f64 = 3_600.0;

/// Seed offset of the arrival jitter's draws, so that they are independent of a scenario's
/// own draws and of the run's channel draws, which use the seed itself.
const JITTER_SEED_OFFSET: u64 = 0xA771_7A11;

/// Why arrival times could not be changed; the workload is left untouched.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrivalError {
    /// The rate scale is not finite and positive (the value given).
    RateScale(f64),
    /// The jitter is not finite, negative, or above [`MAX_ARRIVAL_JITTER_S`] (seconds).
    Jitter(f64),
}

impl fmt::Display for ArrivalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RateScale(v) => write!(f, "rate scale must be finite and > 0, got {v}"),
            Self::Jitter(v) => write!(
                f,
                "arrival jitter must be within 0..={MAX_ARRIVAL_JITTER_S} seconds, got {v}"
            ),
        }
    }
}

impl std::error::Error for ArrivalError {}

/// Compresses the workload's timeline after its load starts by `scale` (a scale of 2
/// offers the same requests twice as fast), as the trace reader's own `rate_scale` does:
/// every time `t` past [`Workload::load_start_s`] (`s`) becomes `s + (t − s)/scale`, for
/// the arrival of every self-arriving request and the onset of every fault. Times up to
/// `s` (a scenario's setup: its pinned requests) stay, so a scenario's premise (an owner
/// already loaded when the load begins) holds at every scale; a fault keeps its place in
/// the load (a restart 20 s into a 90 s load comes 5 s into it at 4x) and its duration (a
/// 5 s disconnect lasts 5 s at any load: how long a failure lasts is not the load's).
/// With `s = 0` this divides every arrival by `scale`.
///
/// # Errors
/// [`ArrivalError::RateScale`] when `scale` is not finite and positive.
pub fn scale_arrivals(w: &mut Workload, scale: f64) -> Result<(), ArrivalError> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(ArrivalError::RateScale(scale));
    }
    let start = w.load_start_s;
    let map = |t: f64| {
        if t > start {
            start + (t - start) / scale
        } else {
            t
        }
    };
    for r in w.requests.iter_mut().filter(|r| r.follows.is_none()) {
        r.arrival_s = map(r.arrival_s);
    }
    for f in &mut w.faults {
        f.at_s = map(f.at_s);
    }
    Ok(())
}

/// Moves every self-arriving request by an independent uniform draw in
/// `[-jitter_s, +jitter_s]` seconds (clamped at 0), seeded by `seed`, then reorders those
/// requests by their new arrival (stably; follow-ups keep their places in the list), so the
/// list stays in arrival order. The mean arrival rate is unchanged; the order of requests
/// that arrive closer than `2·jitter_s` apart is reshuffled. A jitter of 0 changes
/// nothing.
///
/// # Errors
/// [`ArrivalError::Jitter`] when `jitter_s` is not within `0..=`[`MAX_ARRIVAL_JITTER_S`].
pub fn jitter_arrivals(w: &mut Workload, jitter_s: f64, seed: u64) -> Result<(), ArrivalError> {
    if !(jitter_s.is_finite() && (0.0..=MAX_ARRIVAL_JITTER_S).contains(&jitter_s)) {
        return Err(ArrivalError::Jitter(jitter_s));
    }
    if jitter_s == 0.0 {
        return Ok(());
    }
    let mut rng = StdRng::seed_from_u64(seed ^ JITTER_SEED_OFFSET);
    let places: Vec<usize> = (0..w.requests.len())
        .filter(|&i| w.requests[i].follows.is_none())
        .collect();
    let mut moved: Vec<_> = places
        .iter()
        .map(|&i| {
            let mut r = w.requests[i].clone();
            let shift = rng.random_range(-jitter_s..=jitter_s);
            r.arrival_s = (r.arrival_s + shift).max(0.0);
            r
        })
        .collect();
    moved.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    for (place, r) in places.into_iter().zip(moved) {
        w.requests[place] = r;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::FollowUp;
    use crate::workload::synth::request;
    use crate::workload::{FleetSpec, Workload};

    fn workload(arrivals: &[f64]) -> Workload {
        Workload {
            name: "t".into(),
            description: String::new(),
            requests: arrivals
                .iter()
                .enumerate()
                .map(|(i, &t)| request(i as u64, t, vec![i as u32 + 1].into(), 1))
                .collect(),
            fleet: FleetSpec {
                engines: 1,
                engine: Default::default(),
                channels: Default::default(),
            },
            faults: Vec::new(),
            load_start_s: 0.0,
        }
    }

    /// A setup of 1 s: a pinned-time arrival at 0.5 s stays, 3 s becomes 1 + 2/4 = 1.5 s; a
    /// fault at 9 s moves to 1 + 8/4 = 3 s and keeps its 5 s; one at 0.25 s stays.
    #[test]
    fn scaling_keeps_the_setup_and_moves_fault_onsets_with_the_load() {
        use crate::fault::{Fault, FaultKind};
        let mut w = workload(&[0.5, 1.0, 3.0]);
        w.load_start_s = 1.0;
        let disconnect = FaultKind::Disconnect { duration_s: 5.0 };
        w.faults = vec![
            Fault {
                at_s: 9.0,
                engine: 0,
                kind: disconnect,
            },
            Fault {
                at_s: 0.25,
                engine: 0,
                kind: FaultKind::Restart,
            },
        ];
        scale_arrivals(&mut w, 4.0).unwrap();
        let arrivals: Vec<f64> = w.requests.iter().map(|r| r.arrival_s).collect();
        assert_eq!(arrivals, [0.5, 1.0, 1.5]);
        assert_eq!(w.faults[0].at_s, 3.0);
        assert_eq!(w.faults[0].kind, disconnect);
        assert_eq!(w.faults[1].at_s, 0.25);
        // Without a setup every onset is divided: 9 s / 4.
        let mut v = workload(&[]);
        v.faults = vec![Fault {
            at_s: 9.0,
            engine: 0,
            kind: FaultKind::Restart,
        }];
        scale_arrivals(&mut v, 4.0).unwrap();
        assert_eq!(v.faults[0].at_s, 2.25);
    }

    #[test]
    fn scaling_divides_arrivals_and_leaves_follow_ups() {
        let mut w = workload(&[0.0, 3.0, 6.0]);
        w.requests[2].follows = Some(FollowUp {
            parent: 0,
            think_s: 1.5,
        });
        scale_arrivals(&mut w, 4.0).unwrap();
        // 3 s / 4 = 0.75 s; the follow-up's arrival and think time are untouched.
        assert_eq!(w.requests[1].arrival_s, 0.75);
        assert_eq!(w.requests[2].arrival_s, 6.0);
        assert_eq!(w.requests[2].follows.unwrap().think_s, 1.5);
        assert_eq!(
            scale_arrivals(&mut w, 0.0),
            Err(ArrivalError::RateScale(0.0))
        );
        assert!(scale_arrivals(&mut w, f64::NAN).is_err());
    }

    #[test]
    fn jitter_stays_within_its_bound_keeps_order_and_is_seeded() {
        let base: Vec<f64> = (0..200).map(|i| f64::from(i) * 0.1).collect();
        let mut a = workload(&base);
        jitter_arrivals(&mut a, 0.5, 3).unwrap();
        let mut b = workload(&base);
        jitter_arrivals(&mut b, 0.5, 3).unwrap();
        assert_eq!(a, b, "same seed, same arrivals");
        let mut c = workload(&base);
        jitter_arrivals(&mut c, 0.5, 4).unwrap();
        assert_ne!(a, c, "another seed, other arrivals");
        for r in &a.requests {
            // Request i arrived at i · 0.1 s; it moves by at most 0.5 s, never below 0.
            let was = r.id as f64 * 0.1;
            assert!(r.arrival_s >= 0.0 && (r.arrival_s - was).abs() <= 0.5 + 1e-12);
        }
        assert!(
            a.requests
                .windows(2)
                .all(|p| p[0].arrival_s <= p[1].arrival_s)
        );
        assert!(a.requests.iter().map(|r| r.id).ne(0..200), "reordered");
    }

    #[test]
    fn zero_jitter_changes_nothing_and_bad_jitter_is_refused() {
        let mut w = workload(&[1.0, 2.0]);
        let before = w.clone();
        jitter_arrivals(&mut w, 0.0, 9).unwrap();
        assert_eq!(w, before);
        for bad in [-1.0, f64::INFINITY, MAX_ARRIVAL_JITTER_S + 1.0] {
            assert_eq!(
                jitter_arrivals(&mut w, bad, 9),
                Err(ArrivalError::Jitter(bad))
            );
        }
        assert_eq!(w, before);
    }
}
