//! Property test of a run-index match's output layout (`Overlaps`: a depth per word of 64
//! slots, the slots that differ as entries) on fleets large enough that whole words of
//! workers drop out together, against overlaps computed here by hand from what each worker
//! holds.
//!
//! Two chains share their first `s` blocks. Worker `w` stores the first `h_w` blocks of
//! chain `c_w` and may then remove one of them, at `r_w` (a hole). The depths come from a
//! small set, so most words have many workers at one depth. A match of the first `q`
//! blocks of chain `x` must give worker `w` the overlap `min(q, h_w, r_w, s if c_w != x)`
//! (the first block of the query it does not hold). One `Overlaps` buffer is reused for
//! every match, and between matches a raise, a zeroed set of slots or a buffer made with
//! `from_blocks` edits it; after each step the buffer reads the model exactly (`get`,
//! `iter`, `to_vec`, `deepest`), its tail bounds every slot outside it, and its deepest
//! slot (when given) holds the deepest overlap.
//!
//! Cases: `PROPTEST_CASES` (default 256).

use kvroute_core::{EngineHash, SequenceHash, Slot};
use kvroute_index::index::{IndexConfig, Overlaps};
use kvroute_index::runs::RunIndex;
use proptest::prelude::*;

/// Blocks per chain.
const LEN: u32 = 24;

/// One worker's holding: chain, blocks stored, and the removed block (if any).
#[derive(Clone, Debug)]
struct Holding {
    chain: u32,
    held: u32,
    hole: Option<u32>,
}

/// Block `j` of chain `c` (chains agree on their first `shared` blocks): its engine hash
/// and chained hash.
fn block(c: u32, j: u32, shared: u32) -> (EngineHash, SequenceHash) {
    let id = if j < shared {
        u64::from(j)
    } else {
        u64::from(c + 1) * 1_000 + u64::from(j)
    };
    (EngineHash(id + 7), SequenceHash(id * 31 + 5))
}

/// The overlap of a worker with the first `q` blocks of chain `x`, by hand.
fn expected(h: &Holding, x: u32, q: u32, shared: u32) -> u32 {
    let mut k = q.min(h.held);
    if let Some(r) = h.hole {
        k = k.min(r);
    }
    if h.chain != x {
        k = k.min(shared);
    }
    k
}

/// Checks `o` against `want` in every reading, and the tail and deepest slot's claims.
fn check(o: &Overlaps, want: &[u32], what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(o.len(), want.len(), "{}", what);
    prop_assert_eq!(o.to_vec(), want.to_vec(), "{}", what);
    for (i, &w) in want.iter().enumerate() {
        prop_assert_eq!(o.get(Slot(i as u32)), w, "{} slot {}", what, i);
    }
    prop_assert_eq!(o.get(Slot(want.len() as u32)), 0, "{} past the slots", what);
    let deepest = want.iter().copied().max().unwrap_or(0);
    prop_assert_eq!(o.deepest(), deepest, "{}", what);
    let (tail, bound) = o.tail();
    for (i, &w) in want.iter().enumerate() {
        if !tail.contains(&(i as u32)) {
            prop_assert!(
                w <= bound,
                "{}: slot {} holds {} past the bound {}",
                what,
                i,
                w,
                bound
            );
        }
    }
    if let Some(s) = o.deepest_slot() {
        prop_assert_eq!(want[s.index()], deepest, "{} deepest slot", what);
    }
    Ok(())
}

/// A fleet: worker count, the shared prefix, and each worker's holding drawn from a few
/// depths (so that words of workers share one).
fn fleet() -> impl Strategy<Value = (u32, Vec<Holding>)> {
    (1usize..=300, 0..=LEN, prop::collection::vec(0..=LEN, 1..=3)).prop_flat_map(
        |(n, shared, depths)| {
            let holding = (
                0..2u32,
                0..depths.len(),
                prop::option::weighted(0.1, 0..LEN),
            )
                .prop_map(move |(chain, d, hole)| {
                    let held = depths[d];
                    Holding {
                        chain,
                        held,
                        hole: hole.filter(|&r| r < held),
                    }
                });
            (Just(shared), prop::collection::vec(holding, n))
        },
    )
}

/// An edit between matches.
#[derive(Clone, Debug)]
enum Edit {
    None,
    Raise(u32, u32),
    Zero(u32, u32),
    Replace(u32),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        Just(Edit::None),
        (0..320u32, 0..40u32).prop_map(|(s, b)| Edit::Raise(s, b)),
        (1..5u32, 0..5u32).prop_map(|(m, r)| Edit::Zero(m, r)),
        (0..30u32).prop_map(Edit::Replace),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    #[test]
    fn a_reused_buffer_reads_every_match_and_edit_exactly(
        (shared, holdings) in fleet(),
        steps in prop::collection::vec((0..2u32, 0..=LEN, edit()), 1..8),
    ) {
        let n = holdings.len();
        let index = RunIndex::new(IndexConfig::new(n, 16)).expect("valid config");
        for (w, h) in holdings.iter().enumerate() {
            let pairs: Vec<_> = (0..h.held).map(|j| block(h.chain, j, shared)).collect();
            index.store_hashes(Slot(w as u32), None, &pairs).expect("valid slot");
            if let Some(r) = h.hole {
                index
                    .remove(Slot(w as u32), &[block(h.chain, r, shared).0])
                    .expect("valid slot");
            }
        }
        let mut o = Overlaps::default();
        for (k, (x, q, e)) in steps.into_iter().enumerate() {
            let query: Vec<SequenceHash> = (0..q).map(|j| block(x, j, shared).1).collect();
            index.match_prefix(&query, &mut o);
            let mut want: Vec<u32> =
                holdings.iter().map(|h| expected(h, x, q, shared)).collect();
            check(&o, &want, &format!("step {k}: match of {q} blocks of chain {x}"))?;
            match e {
                Edit::None => {}
                Edit::Raise(s, b) => {
                    let before = o.raise(Slot(s), b);
                    let i = s as usize;
                    if i < n {
                        prop_assert_eq!(before, want[i]);
                        want[i] = want[i].max(b);
                    } else {
                        prop_assert_eq!(before, 0);
                    }
                }
                Edit::Zero(m, r) => {
                    o.zero_where(|s| s.0 % m == r);
                    for (i, v) in want.iter_mut().enumerate() {
                        if i as u32 % m == r {
                            *v = 0;
                        }
                    }
                }
                Edit::Replace(v) => {
                    want = (0..n as u32).map(|i| (i * 7 + v) % 29).collect();
                    o = Overlaps::from_blocks(want.clone());
                }
            }
            check(&o, &want, &format!("step {k}: after {e:?}"))?;
        }
    }
}
