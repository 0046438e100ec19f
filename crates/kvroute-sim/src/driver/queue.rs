//! The event queue of the discrete-event loop: a binary heap ordered by time, then by a
//! class (so that, at one instant, deliveries reach the router before arrivals are routed,
//! and arrivals reach the engines before those schedule their next step), then by insertion
//! order, which makes every run deterministic.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::rc::Rc;

use kvroute::LoadSample;

/// Order of events at the same instant (lower first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    /// Something reaches the router (events, replays, telemetry).
    Deliver = 0,
    /// A scheduled fault.
    Fault = 1,
    /// A request reaches the gateway.
    Arrive = 2,
    /// An engine step ends or an idle engine wakes.
    Engine = 3,
    /// Periodic work: telemetry observation, samples, sweeps.
    Tick = 4,
}

/// What happens.
#[derive(Debug)]
pub(crate) enum Kind {
    /// Request (catalog index) reaches the gateway.
    Arrive(u32),
    /// An idle engine with queued work starts a step.
    Wake(u32),
    /// The engine's step of incarnation `epoch` ends.
    StepEnd { engine: u32, epoch: u64 },
    /// A live event batch reaches the router.
    Batch {
        engine: u32,
        seq: u64,
        payload: Rc<Vec<u8>>,
    },
    /// A replay request reaches the engine.
    ReplayAsk { engine: u32, from_seq: u64 },
    /// The engine's replay answer reaches the router (batches, then the end marker).
    ReplayAnswer {
        engine: u32,
        batches: Vec<(u64, Rc<Vec<u8>>)>,
    },
    /// Ask again for a replay the engine could not answer.
    ReplayRetry(u32),
    /// A load report (observed at `observed` ns) reaches the router.
    Load {
        engine: u32,
        sample: Box<LoadSample>,
        observed: u64,
    },
    /// Fault number `i` of the workload starts.
    Fault(usize),
    /// Every engine's load is observed.
    Telemetry(u32),
    /// Every engine is sampled.
    Sample,
    /// The reservation sweeper runs.
    Sweep,
    /// Every engine's cache is compared with the router's index.
    Probe,
}

#[derive(Debug)]
struct Item {
    t: u64,
    class: Class,
    n: u64,
    kind: Kind,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.class, self.n) == (o.t, o.class, o.n)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (o.t, o.class, o.n).cmp(&(self.t, self.class, self.n))
    }
}

impl Kind {
    /// Periodic work that reschedules itself (it alone cannot finish a run).
    fn periodic(&self) -> bool {
        matches!(
            self,
            Kind::Telemetry(_) | Kind::Sample | Kind::Sweep | Kind::Probe
        )
    }
}

/// The queue.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    heap: BinaryHeap<Item>,
    n: u64,
    /// Events queued that are not periodic.
    live: usize,
}

impl Queue {
    /// Schedules `kind` at `t` (ns).
    pub(crate) fn push(&mut self, t: u64, class: Class, kind: Kind) {
        self.n += 1;
        if !kind.periodic() {
            self.live += 1;
        }
        self.heap.push(Item {
            t,
            class,
            n: self.n,
            kind,
        });
    }

    /// The next event and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, Kind)> {
        let i = self.heap.pop()?;
        if !i.kind.periodic() {
            self.live -= 1;
        }
        Some((i.t, i.kind))
    }

    /// Whether any non-periodic event is queued.
    pub(crate) fn has_live(&self) -> bool {
        self.live > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_then_class_then_insertion() {
        let mut q = Queue::default();
        q.push(5, Class::Engine, Kind::Wake(1));
        q.push(5, Class::Arrive, Kind::Arrive(7));
        q.push(3, Class::Tick, Kind::Sample);
        q.push(5, Class::Engine, Kind::Wake(2));
        let order: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|(t, k)| format!("{t}:{k:?}"))
            .collect();
        assert_eq!(order, ["3:Sample", "5:Arrive(7)", "5:Wake(1)", "5:Wake(2)"]);
        // Heap items stay small (payloads are out of line).
        assert!(core::mem::size_of::<Item>() <= 56);
    }
}
