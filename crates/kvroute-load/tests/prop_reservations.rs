//! Property test: the reservation lifecycle (reserve, first token, commit, drop, sweep,
//! reconcile, remove, re-add) against a sequential model written independently of the
//! implementation: each guard's share of each field carries the cohort ("epoch") it was
//! made in; ageing advances a field's epoch by one, clearing by two, and a share is alive
//! while the field's epoch is less than its own epoch plus two. The ended-request count: a
//! guard remembers how many reconciliations of the requests field (and removals) its slot
//! had when it reserved; dropped with its request share dead, it counts once if a
//! reconciliation came since and no removal did; a reconciliation of the requests field or
//! a removal resets the count.
#![cfg(not(kvroute_loom))]

use kvroute_core::{Fields, Nanos};
use kvroute_core::{Slot, SlotGeneration};
use kvroute_load::{Reservation, ReservationTable, ReserveError, Reserved, Work};
use proptest::prelude::*;

const SLOTS: usize = 2;
const TTL: u64 = 10;

#[derive(Clone, Debug)]
enum Op {
    Reserve {
        slot: usize,
        prefill: u32,
        decode: u32,
        stale: bool,
    },
    FirstToken(usize),
    Commit(usize),
    Drop(usize),
    Sweep,
    Reconcile {
        slot: usize,
        mask: u8,
    },
    Remove(usize),
    Add(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..SLOTS, 0u32..1000, 0u32..1000, prop::bool::weighted(0.1)).prop_map(
            |(slot, prefill, decode, stale)| Op::Reserve { slot, prefill, decode, stale }
        ),
        3 => any::<usize>().prop_map(Op::FirstToken),
        2 => any::<usize>().prop_map(Op::Commit),
        3 => any::<usize>().prop_map(Op::Drop),
        2 => Just(Op::Sweep),
        2 => (0..SLOTS, 1u8..8).prop_map(|(slot, mask)| Op::Reconcile { slot, mask }),
        1 => (0..SLOTS).prop_map(Op::Remove),
        1 => (0..SLOTS).prop_map(Op::Add),
    ]
}

/// A share of one field: (epoch made in, amount).
type Share = Option<(u64, u64)>;

struct ModelGuard {
    slot: usize,
    shares: [Share; 3],
    decoding: bool,
    /// The slot's (reconciliations of the requests field, removals) when it reserved.
    seen: (u64, u64),
}

#[derive(Clone, Copy, Default)]
struct ModelSlot {
    generation: u64,
    epoch: [u64; 3],
    last_aged: u64,
    /// Reconciliations of the requests field, removals, the ended-request count, and the
    /// request reservations the last reconciliation of the requests field dropped (which
    /// offset the ended count: `Reserved::finished` is `finished − absorbed`, at least 0).
    reconciles: u64,
    removals: u64,
    finished: u64,
    absorbed: u64,
}

impl ModelSlot {
    fn net_finished(&self) -> u64 {
        self.finished.saturating_sub(self.absorbed.min(4_095))
    }
}

struct Model {
    slots: [ModelSlot; SLOTS],
    next_generation: [u64; SLOTS],
    now: u64,
    swept: [u64; 3],
    reconciled: [u64; 3],
    removed: [u64; 3],
}

impl Model {
    fn alive(&self, slot: usize, f: usize, share: Share) -> Option<u64> {
        share.and_then(|(e, a)| (self.slots[slot].epoch[f] < e + 2).then_some(a))
    }

    /// A guard ends (dropped, not committed): counted if a report absorbed it.
    fn end(&mut self, g: &ModelGuard) {
        let m = self.slots[g.slot];
        if self.alive(g.slot, 0, g.shares[0]).is_none()
            && m.reconciles != g.seen.0
            && m.removals == g.seen.1
        {
            self.slots[g.slot].finished += 1;
        }
    }

    fn totals(&self, guards: &[ModelGuard], slot: usize) -> [u64; 3] {
        let mut t = [0; 3];
        for g in guards.iter().filter(|g| g.slot == slot) {
            for (f, total) in t.iter_mut().enumerate() {
                *total += self.alive(slot, f, g.shares[f]).unwrap_or(0);
            }
        }
        t
    }

    /// Advances `fields` of `slot` by `by` epochs; returns what died, per field.
    fn advance(
        &mut self,
        guards: &[ModelGuard],
        slot: usize,
        fields: [bool; 3],
        by: u64,
    ) -> [u64; 3] {
        let before = self.totals(guards, slot);
        for (f, on) in fields.iter().enumerate() {
            if *on {
                self.slots[slot].epoch[f] += by;
            }
        }
        let after = self.totals(guards, slot);
        [0, 1, 2].map(|f| before[f] - after[f])
    }
}

fn add3(a: &mut [u64; 3], d: [u64; 3]) {
    for f in 0..3 {
        a[f] += d[f];
    }
}

fn reserved(t: [u64; 3]) -> Reserved {
    Reserved {
        requests: t[0],
        prefill_tokens: t[1],
        decode_tokens: t[2],
        finished: 0,
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let table = ReservationTable::new(SLOTS, Nanos(TTL)).unwrap();
    let mut model = Model {
        slots: [ModelSlot::default(); SLOTS],
        next_generation: [1; SLOTS],
        now: 0,
        swept: [0; 3],
        reconciled: [0; 3],
        removed: [0; 3],
    };
    let mut guards: Vec<(Reservation, ModelGuard)> = Vec::new();
    // Both slots start occupied.
    for s in 0..SLOTS {
        table
            .add_worker(Slot(s as u32), SlotGeneration(1), Nanos(0))
            .unwrap();
        model.slots[s].generation = 1;
        model.next_generation[s] = 2;
    }
    for op in ops {
        match op {
            Op::Reserve {
                slot,
                prefill,
                decode,
                stale,
            } => {
                let m = model.slots[slot];
                let generation = if stale {
                    m.generation.wrapping_sub(1)
                } else {
                    m.generation
                };
                let res = table.reserve(
                    Slot(slot as u32),
                    SlotGeneration(generation),
                    Work {
                        prefill_tokens: prefill,
                        decode_tokens: decode,
                    },
                    Nanos(model.now),
                );
                if m.generation == 0 || stale {
                    prop_assert!(
                        matches!(res, Err(ReserveError::StaleSlot { .. })),
                        "stale reserve must be refused"
                    );
                } else {
                    let g = res.expect("live slot accepts");
                    let model_guards: Vec<&ModelGuard> = guards.iter().map(|(_, m)| m).collect();
                    let prior = totals_of(&model, &model_guards, slot);
                    prop_assert_eq!(g.prior(), reserved(prior));
                    let e = m.epoch;
                    guards.push((
                        g,
                        ModelGuard {
                            slot,
                            shares: [
                                Some((e[0], 1)),
                                Some((e[1], u64::from(prefill))),
                                Some((e[2], u64::from(decode))),
                            ],
                            decoding: false,
                            seen: (m.reconciles, m.removals),
                        },
                    ));
                }
            }
            Op::FirstToken(i) if !guards.is_empty() => {
                let i = i % guards.len();
                let slot = guards[i].1.slot;
                let pre = model.alive(slot, 1, guards[i].1.shares[1]);
                let dec_alive = model.alive(slot, 2, guards[i].1.shares[2]).is_some();
                let (real, mg) = &mut guards[i];
                let moved = real.first_token();
                let expect = if mg.decoding {
                    false
                } else {
                    mg.decoding = true;
                    mg.shares[1] = None;
                    match pre {
                        None => false,
                        Some(p) => {
                            if p > 0 {
                                if dec_alive {
                                    let (e, a) = mg.shares[2].unwrap();
                                    mg.shares[2] = Some((e, a + p));
                                } else {
                                    mg.shares[2] = None;
                                }
                            }
                            true
                        }
                    }
                };
                prop_assert_eq!(moved, expect);
            }
            Op::Commit(i) | Op::Drop(i) if !guards.is_empty() => {
                let i = i % guards.len();
                let (real, mg) = guards.swap_remove(i);
                let mut live = [0; 3];
                for (f, l) in live.iter_mut().enumerate() {
                    *l = model.alive(mg.slot, f, mg.shares[f]).unwrap_or(0);
                }
                if matches!(op, Op::Commit(_)) {
                    prop_assert_eq!(real.commit(), reserved(live));
                } else {
                    model.end(&mg);
                    drop(real);
                }
            }
            Op::Sweep => {
                model.now += TTL;
                let mg: Vec<ModelGuard> = guards.iter().map(|(_, m)| clone_mg(m)).collect();
                let mut d = [0; 3];
                for s in 0..SLOTS {
                    if model.slots[s].generation != 0 && model.now - model.slots[s].last_aged >= TTL
                    {
                        add3(&mut d, model.advance(&mg, s, [true; 3], 1));
                        model.slots[s].last_aged = model.now;
                    }
                }
                add3(&mut model.swept, d);
                let rep = table.sweep(Nanos(model.now));
                prop_assert_eq!(rep.released, reserved(d));
            }
            Op::Reconcile { slot, mask } => {
                let fields = Fields(mask);
                let mg: Vec<ModelGuard> = guards.iter().map(|(_, m)| clone_mg(m)).collect();
                let gen_now = model.slots[slot].generation;
                let got = table.reconcile(Slot(slot as u32), SlotGeneration(gen_now), fields);
                let mut d = [0; 3];
                if gen_now != 0 {
                    let on = [0, 1, 2].map(|f| mask & (1 << f) != 0);
                    d = model.advance(&mg, slot, on, 2);
                    if on[0] {
                        model.slots[slot].reconciles += 1;
                        model.slots[slot].finished = 0;
                        model.slots[slot].absorbed = d[0];
                    }
                }
                add3(&mut model.reconciled, d);
                prop_assert_eq!(got, reserved(d));
            }
            Op::Remove(slot) => {
                let gen_now = model.slots[slot].generation;
                let res = table.remove_worker(Slot(slot as u32), SlotGeneration(gen_now));
                if gen_now == 0 {
                    prop_assert!(res.is_err());
                } else {
                    let mg: Vec<ModelGuard> = guards.iter().map(|(_, m)| clone_mg(m)).collect();
                    let d = model.advance(&mg, slot, [true; 3], 2);
                    add3(&mut model.removed, d);
                    model.slots[slot].generation = 0;
                    model.slots[slot].removals += 1;
                    model.slots[slot].finished = 0;
                    model.slots[slot].absorbed = 0;
                    prop_assert_eq!(res.unwrap(), reserved(d));
                }
            }
            Op::Add(slot) => {
                let g = model.next_generation[slot];
                let res = table.add_worker(Slot(slot as u32), SlotGeneration(g), Nanos(model.now));
                if model.slots[slot].generation != 0 {
                    prop_assert!(res.is_err());
                } else {
                    res.unwrap();
                    let mg: Vec<ModelGuard> = guards.iter().map(|(_, m)| clone_mg(m)).collect();
                    // Nothing of the old tenancy is alive any more; clearing again drops nothing.
                    prop_assert_eq!(model.advance(&mg, slot, [true; 3], 2), [0; 3]);
                    model.slots[slot].generation = g;
                    model.slots[slot].last_aged = model.now;
                    model.next_generation[slot] += 1;
                }
            }
            _ => {}
        }
        // After every step the table's totals equal the model's.
        let model_guards: Vec<&ModelGuard> = guards.iter().map(|(_, m)| m).collect();
        for s in 0..SLOTS {
            prop_assert_eq!(
                table.reserved(Slot(s as u32)),
                Reserved {
                    finished: model.slots[s].net_finished(),
                    ..reserved(totals_of(&model, &model_guards, s))
                }
            );
        }
    }
    let stats = table.stats();
    prop_assert_eq!(stats.swept, reserved(model.swept));
    prop_assert_eq!(stats.reconciled, reserved(model.reconciled));
    prop_assert_eq!(stats.removed, reserved(model.removed));
    prop_assert_eq!(stats.underflow_clamped, 0);
    // Dropping every guard returns every reserved amount to zero; what is left is the
    // ended-request count.
    for (real, mg) in guards {
        model.end(&mg);
        drop(real);
    }
    for s in 0..SLOTS {
        prop_assert_eq!(
            table.reserved(Slot(s as u32)),
            Reserved {
                finished: model.slots[s].net_finished(),
                ..Reserved::default()
            }
        );
    }
    Ok(())
}

fn clone_mg(m: &ModelGuard) -> ModelGuard {
    ModelGuard {
        slot: m.slot,
        shares: m.shares,
        decoding: m.decoding,
        seen: m.seen,
    }
}

fn totals_of(model: &Model, guards: &[&ModelGuard], slot: usize) -> [u64; 3] {
    let owned: Vec<ModelGuard> = guards.iter().map(|m| clone_mg(m)).collect();
    model.totals(&owned, slot)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn lifecycle_matches_the_sequential_model(ops in prop::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}
