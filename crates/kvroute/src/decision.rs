//! What `route` returns: the chosen worker, why, and the reservation guard.

use core::fmt;

use kvroute_core::{Slot, SlotGeneration, WorkerId};
use kvroute_load::Reservation;
use kvroute_score::{FallbackCause, Policy, Reason};

/// What `projected_time` in enforce mode would have chosen, recorded in shadow mode, and
/// what that would gain ([`gain`](Self::gain)).
///
/// Both costs are under the model that chose the counterfactual: enforce's projected
/// seconds (the latency the request adds to the worker); on a KV-bound fleet
/// ([`Reason::KvBound`] as its reason, `ScoreConfig::kv_bound_usage`) the blocks cost, so
/// that both costs and the gain are blocks of KV work then; or, when enforce itself fell back
/// on telemetry ([`Reason::Fallback`] as its reason), the fallback's `least_load` seconds
/// over the workers with trusted telemetry (+inf for the others). See
/// `kvroute_score::Counterfactual`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shadow {
    /// The worker it would have chosen (`None` when it found none).
    pub worker: Option<WorkerId>,
    /// Its reason.
    pub reason: Reason,
    /// Its cost under the model (seconds; blocks when the reason is [`Reason::KvBound`];
    /// NaN when none).
    pub cost: f32,
    /// Leading blocks of the prompt it holds (blocks; 0 when none), any predicted-residency
    /// credit included (unlike [`Decision::overlap_blocks`], the index's alone).
    pub overlap_blocks: u32,
    /// The dispatched worker's cost under the same model (the unit of `cost`; NaN when admission
    /// redirected the decision, whose worker the scorer did not cost; may be non-finite
    /// for a worker the model cannot cost).
    pub dispatched_cost: f32,
}

impl Shadow {
    /// What enforce expects to save on this request, `dispatched_cost − cost`, in the
    /// model's unit (seconds; blocks when the reason is [`Reason::KvBound`]): positive when the counterfactual is cheaper, 0 when it is the dispatched worker, NaN
    /// or infinite when either cost is.
    pub fn gain(&self) -> f32 {
        self.dispatched_cost - self.cost
    }
}

/// Admission moved the request off the scorer's pick (see
/// [`AdmissionConfig`](crate::AdmissionConfig)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionRedirect {
    /// The scorer's pick, over the bound.
    pub from: WorkerId,
    /// Its outstanding requests as scored (requests).
    pub from_outstanding: u64,
}

/// A routing decision. Holds the [`Reservation`]: dropping the decision (or the guard
/// taken out of it) releases the reserved work, so keep it for the request's lifetime.
#[derive(Debug)]
#[must_use = "dropping a decision releases its reservation at once"]
pub struct Decision {
    /// The chosen worker.
    pub worker: WorkerId,
    /// Its slot (scoring lane).
    pub slot: Slot,
    /// The tenancy the reservation was made under.
    pub generation: SlotGeneration,
    /// Leading blocks of the prompt the worker holds, as the index knows it (blocks).
    pub overlap_blocks: u32,
    /// Leading blocks the decision credited the worker with from predicted residency
    /// (prompts routed there whose KV events have not arrived), when deeper than
    /// `overlap_blocks`; 0 otherwise (blocks). The cost and the reserved prefill used
    /// `max(overlap_blocks, predicted_blocks)`.
    pub predicted_blocks: u32,
    /// The chosen worker's cost under the policy that decided (the policy's unit: seconds
    /// for `projected_time` and `least_load`, blocks for `dynamo_cost` and for
    /// `projected_time` on a KV-bound fleet, [`Reason::KvBound`]; see `kvroute_score`'s
    /// policy docs).
    pub cost: f32,
    /// The policy in force for this decision.
    pub policy: Policy,
    /// Why this worker ([`Reason::LoadEscape`] when admission redirected it).
    pub reason: Reason,
    /// Which telemetry forced a fallback, if any.
    pub fallback: Option<FallbackCause>,
    /// Shadow mode's counterfactual, if any.
    pub shadow: Option<Shadow>,
    /// Set when admission moved the request off the scorer's pick.
    pub redirect: Option<AdmissionRedirect>,
    /// Re-scores this decision needed (concurrent siblings or a removed worker).
    pub rescores: u32,
    /// The work reserved on the worker (one request, uncached prefill tokens, expected
    /// output tokens).
    pub reservation: Reservation,
}

impl Decision {
    /// Takes the reservation guard out (to keep it while discarding the rest).
    pub fn into_reservation(self) -> Reservation {
        self.reservation
    }
}

impl fmt::Display for Decision {
    /// One line for a gateway's log: the worker and its slot, the overlap, the cost under
    /// the policy, the reason, then only what applies: the telemetry fallback, the
    /// admission redirect, the re-scores and the shadow counterfactual. For example
    /// `worker 3:0 (slot 2), overlap 12 blocks, cost 0.776 (projected_time), spill,
    /// 1 rescore`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "worker {} (slot {}), overlap {} blocks, cost {} ({}), {}",
            self.worker, self.slot.0, self.overlap_blocks, self.cost, self.policy, self.reason
        )?;
        if let Some(cause) = self.fallback {
            write!(f, ", fallback {}", cause.name())?;
        }
        if let Some(r) = &self.redirect {
            write!(
                f,
                ", redirected from {} ({} outstanding)",
                r.from, r.from_outstanding
            )?;
        }
        match self.rescores {
            0 => {}
            1 => f.write_str(", 1 rescore")?,
            n => write!(f, ", {n} rescores")?,
        }
        if let Some(sh) = &self.shadow {
            match sh.worker {
                Some(w) => write!(f, ", shadow {w} cost {} ({})", sh.cost, sh.reason)?,
                None => write!(f, ", shadow none ({})", sh.reason)?,
            }
        }
        Ok(())
    }
}
