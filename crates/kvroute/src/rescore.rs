//! The optimistic re-score loop of a decision (module docs of `route`): each attempt reads
//! the reservations, picks a slot and claims it with a checked reservation
//! ([`ReservationTable::reserve_at_most`] bounded by the reserved requests the attempt read
//! there); a refusal means a concurrent decision reserved that slot in between, and the
//! next attempt reads again. The last attempt reserves with its own bound (admission), or
//! unconditionally.
//!
//! `route` runs its scoring inside this loop; the loom models below run a two-slot
//! least-reserved pick inside the same loop, on the real reservation table.

use kvroute_core::Nanos;
use kvroute_core::{Slot, SlotGeneration};
use kvroute_load::{Reservation, ReserveError, TableLease, Work};

/// What one attempt of a decision claims.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Claim {
    /// The chosen slot.
    pub slot: Slot,
    /// The tenancy the attempt read in that slot.
    pub generation: SlotGeneration,
    /// The work to reserve (tokens).
    pub work: Work,
    /// Reserved requests the attempt read on `slot` (what its score counted).
    pub seen: u64,
    /// The last attempt's bound on the slot's reserved requests (admission), or `None` to
    /// reserve unconditionally.
    pub last_limit: Option<u64>,
}

/// How a decision's claims ended; `T` is what the winning (or saturated) attempt picked.
#[derive(Debug)]
pub(crate) enum Claimed<T> {
    /// Attempt `attempt` (0-based: `attempt` re-scores before it) reserved its slot.
    Won {
        /// The reservation guard.
        reservation: Reservation,
        /// The attempt that won.
        attempt: u32,
        /// Whether the reservation was bounded (`false`: the last attempt's unconditional
        /// reserve).
        checked: bool,
        /// The attempt's pick.
        pick: T,
    },
    /// Attempt `attempt`'s reservation would overflow a counter of its slot.
    Saturated {
        /// The attempt.
        attempt: u32,
        /// The attempt's pick.
        pick: T,
    },
    /// Every attempt's slot was taken (or its tenancy replaced) before it reserved.
    Contended,
}

/// Runs up to `max_rescores + 1` attempts: `attempt(n)` reads and picks (its error ends the
/// loop at once), then the claim is reserved through `lease` (its table, the guard counted
/// on the lease's reference count) at `now`, bounded by `seen` on every attempt but the
/// last, which is bounded by `last_limit`. A refusal as contended, stale or unknown slot
/// starts the next attempt.
///
/// # Errors
/// Whatever `attempt` returns.
#[inline(always)]
pub(crate) fn claim_rescoring<T, E>(
    lease: &TableLease,
    max_rescores: u32,
    now: Nanos,
    mut attempt: impl FnMut(u32) -> Result<(Claim, T), E>,
) -> Result<Claimed<T>, E> {
    for n in 0..=max_rescores {
        let (claim, pick) = attempt(n)?;
        let limit = if n == max_rescores {
            claim.last_limit
        } else {
            Some(claim.seen)
        };
        let (slot, generation, work) = (claim.slot, claim.generation, claim.work);
        let reserved = match limit {
            Some(l) => lease.reserve_at_most(slot, generation, work, now, l),
            None => lease.reserve(slot, generation, work, now),
        };
        match reserved {
            Ok(reservation) => {
                return Ok(Claimed::Won {
                    reservation,
                    attempt: n,
                    checked: limit.is_some(),
                    pick,
                });
            }
            Err(ReserveError::Saturated { .. }) => {
                return Ok(Claimed::Saturated { attempt: n, pick });
            }
            Err(
                ReserveError::Contended { .. }
                | ReserveError::StaleSlot { .. }
                | ReserveError::UnknownSlot(_)
                | _,
            ) => {}
        }
    }
    Ok(Claimed::Contended)
}
