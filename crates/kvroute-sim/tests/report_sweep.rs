//! The sweep summary: means, intervals and marks from hand-made per-seed values.

use kvroute_sim::report::sweep::{
    Mark, SWEEP_METRICS, SweepError, SweepMetric, SweepSamples, summarise,
};
use kvroute_sim::report::sweep_table::{cell_text, render};

/// Index of a metric in [`SWEEP_METRICS`].
fn j(m: SweepMetric) -> usize {
    SWEEP_METRICS.iter().position(|&x| x == m).unwrap()
}

/// Three policies at one rate scale over five seeds; every metric of policy `p` on seed
/// `k` is `rows[p][k]` (the same numbers in every column, read with each metric's
/// direction).
fn samples(rows: [[f64; 5]; 3]) -> SweepSamples {
    SweepSamples {
        workload: "w".into(),
        policies: vec!["ref".into(), "a".into(), "b".into()],
        reference: 0,
        rate_scales: vec![4.0],
        seeds: vec![1, 2, 3, 4, 5],
        values: rows
            .iter()
            .flat_map(|r| r.iter().map(|&v| [v; SWEEP_METRICS.len()]))
            .collect(),
    }
}

/// Reference 10, 12, 11, 13, 14; `a` 1 more on seeds 1, 3, 5 and 2 more on 2, 4
/// (differences 1, 2, 1, 2, 1: t = 5.715 > 2.776, significant); `b` differences
/// 1, −1, 2, −2, 0.5 (t = 0.140, tied).
#[test]
fn marks_follow_the_paired_test_and_the_direction() {
    let s = samples([
        [10.0, 12.0, 11.0, 13.0, 14.0],
        [11.0, 14.0, 12.0, 15.0, 15.0],
        [11.0, 11.0, 13.0, 11.0, 14.5],
    ]);
    let sum = summarise(&s).unwrap();
    assert_eq!(sum.reference, "ref");
    let ttft = j(SweepMetric::TtftP50);
    let hit = j(SweepMetric::HitPercent);
    // Higher TTFT is worse; higher hit rate is better and `a` has the best mean (13.4).
    assert_eq!(sum.cells[1][0][ttft].mark, Mark::Worse);
    assert_eq!(sum.cells[1][0][hit].mark, Mark::Best);
    assert_eq!(sum.cells[2][0][ttft].mark, Mark::Tied);
    assert_eq!(sum.cells[2][0][hit].mark, Mark::Tied);
    // On TTFT the reference has the best mean (12) but `b` (12.1) is tied with it.
    assert_eq!(sum.cells[0][0][ttft].mark, Mark::Reference);
    let a = &sum.cells[1][0][hit];
    assert!((a.mean - 13.4).abs() < 1e-9);
    assert!((a.difference.unwrap() - 1.4).abs() < 1e-9);
    assert!((a.t.unwrap() - 5.715_476_1).abs() < 1e-6);
    // a: 11, 14, 12, 15, 15: mean 13.4, Σ(x − 13.4)² = 5.76 + 0.36 + 1.96 + 2.56 + 2.56
    // = 13.2, s = sqrt(3.3) = 1.8165902, half-width 2.776 · 1.8165902 / sqrt(5) = 2.2552.
    assert!((a.half_width.unwrap() - 2.255_243).abs() < 1e-5);
    assert_eq!(cell_text(a, 1), "13.4 ±2.3 best");
}

/// The reference is `best` when every other policy is significantly worse.
#[test]
fn reference_is_best_only_when_it_beats_every_policy() {
    let s = samples([
        [10.0, 12.0, 11.0, 13.0, 14.0],
        [11.0, 14.0, 12.0, 15.0, 15.0],
        [12.0, 14.0, 13.0, 15.0, 16.0],
    ]);
    let sum = summarise(&s).unwrap();
    let ttft = j(SweepMetric::TtftP50);
    assert_eq!(sum.cells[0][0][ttft].mark, Mark::Best);
    assert_eq!(sum.cells[1][0][ttft].mark, Mark::Worse);
    // b is the reference plus 2 on every seed: no spread, a significant difference.
    assert_eq!(sum.cells[2][0][ttft].t, None);
    assert_eq!(sum.cells[2][0][ttft].mark, Mark::Worse);
    let hit = j(SweepMetric::HitPercent);
    assert_eq!(sum.cells[2][0][hit].mark, Mark::Best);
    assert_eq!(sum.cells[1][0][hit].mark, Mark::Better);
}

#[test]
fn an_infinite_value_is_not_comparable() {
    let mut s = samples([[1.0; 5], [2.0; 5], [1.0; 5]]);
    let imb = j(SweepMetric::Imbalance);
    s.values[5][imb] = f64::INFINITY; // policy a, seed 1
    let sum = summarise(&s).unwrap();
    let c = &sum.cells[1][0][imb];
    assert_eq!(c.mark, Mark::NotComparable);
    assert!(c.mean.is_infinite() && c.half_width.is_none());
    assert_eq!(cell_text(c, 2), "inf n/a");
    // Equal on every seed: tied, with a zero-width interval.
    assert_eq!(sum.cells[2][0][imb].mark, Mark::Tied);
    assert_eq!(sum.cells[2][0][imb].half_width, Some(0.0));
    let text = render(&sum);
    assert!(text.contains("rate x4"), "{text}");
    assert!(text.contains("| a |"), "{text}");
}

#[test]
fn malformed_samples_are_errors() {
    let mut s = samples([[1.0; 5]; 3]);
    s.values.pop();
    assert_eq!(summarise(&s), Err(SweepError::Layout(15, 14)));
    let mut s = samples([[1.0; 5]; 3]);
    s.reference = 3;
    assert_eq!(summarise(&s), Err(SweepError::Reference(3, 3)));
    let mut s = samples([[1.0; 5]; 3]);
    s.seeds.clear();
    assert_eq!(summarise(&s), Err(SweepError::Empty));
}

/// With one seed no paired test is possible: every policy but the reference is marked
/// `n/a` (not `tied`), however far its value is from the reference's (20 against 10).
#[test]
fn one_seed_marks_nothing_comparable() {
    let s = SweepSamples {
        workload: "w".into(),
        policies: vec!["ref".into(), "a".into()],
        reference: 0,
        rate_scales: vec![4.0],
        seeds: vec![1],
        values: vec![[10.0; SWEEP_METRICS.len()], [20.0; SWEEP_METRICS.len()]],
    };
    let sum = summarise(&s).unwrap();
    for jm in 0..SWEEP_METRICS.len() {
        assert_eq!(sum.cells[1][0][jm].mark, Mark::NotComparable, "metric {jm}");
        assert_eq!(sum.cells[0][0][jm].mark, Mark::Reference, "metric {jm}");
    }
}
