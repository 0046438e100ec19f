//! Admission coupled to the decision (a gate in front of it would keep an idle peer from
//! ever receiving a cached prefix): a request is rejected only when no occupied worker,
//! cached or not, can take it within the bound.
//!
//! A worker's *outstanding* requests are the figure the decision scored: reported running +
//! waiting plus live reservations ([`Fleet::requests`]). The scorer's pick is kept when it
//! is below the bound. Otherwise the request goes to the worker below the bound with the
//! deepest overlap, then the fewest outstanding requests, then the first at or after the
//! decision's rotating cursor; that is what lets an idle peer take its first copy of a hot
//! prefix while the owner is saturated, instead of a 429.

use kvroute_core::{Slot, WorkerId};
use kvroute_load::LoadSnapshot;
use kvroute_score::Fleet;

use crate::decision::AdmissionRedirect;
use crate::error::RouteError;

/// Outstanding requests of lane `i` as scored (requests).
pub(crate) fn outstanding(fleet: &Fleet, i: usize) -> u64 {
    let r = fleet.requests(i);
    if r.is_finite() && r > 0.0 {
        r as u64
    } else {
        0
    }
}

/// The slot that takes the request, and the redirect when it is not `picked` (whose
/// worker is `from`).
///
/// # Errors
/// [`RouteError::Rejected`] when every occupied worker is at or over `bound`.
pub(crate) fn admit(
    snap: &LoadSnapshot,
    fleet: &Fleet,
    picked: Slot,
    from: WorkerId,
    bound: u32,
    cursor: u32,
) -> Result<(Slot, Option<AdmissionRedirect>), RouteError> {
    let bound64 = u64::from(bound);
    let from_outstanding = outstanding(fleet, picked.index());
    if from_outstanding < bound64 {
        return Ok((picked, None));
    }
    let n = snap.len();
    let start = cursor as usize % n.max(1);
    let mut best: Option<(usize, (u32, u64))> = None;
    let mut least = u64::MAX;
    // Visiting slots from the cursor, a later slot replaces the best only when strictly
    // better, so equal keys keep the first at or after the cursor.
    for i in (start..n).chain(0..start) {
        if !fleet.is_candidate(i) {
            continue;
        }
        let out = outstanding(fleet, i);
        least = least.min(out);
        if out >= bound64 {
            continue;
        }
        let overlap = fleet.overlap(i);
        let overlap = if overlap.is_finite() && overlap > 0.0 {
            overlap as u32
        } else {
            0
        };
        let better = match best {
            None => true,
            Some((_, (o, r))) => overlap > o || (overlap == o && out < r),
        };
        if better {
            best = Some((i, (overlap, out)));
        }
    }
    match best {
        Some((i, _)) => Ok((
            Slot(i as u32),
            Some(AdmissionRedirect {
                from,
                from_outstanding,
            }),
        )),
        None => Err(RouteError::Rejected {
            bound,
            least_outstanding: if least == u64::MAX {
                from_outstanding
            } else {
                least
            },
        }),
    }
}
