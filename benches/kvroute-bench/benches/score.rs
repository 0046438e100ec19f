//! The scorer pass alone: every worker slot scored and the winner selected, with the SIMD
//! pass `Scorer::score` runs (`simd`: the path `SimdPath::active` chose, AVX2 on a CPU
//! with it, printed at the start), the portable `wide` pass (`portable`,
//! `Scorer::score_with(SimdPath::Portable, ..)`: SSE2 on a default x86_64 build) and, side
//! by side in the same run, the scalar reference (`Scorer::score_reference`), at 16, 128,
//! 512 and 1,024 workers, for `least_load` and `projected_time` enforce (the default). The fleet is fixed (`kvroute_bench::score`): varied
//! loads, a few cache owners, every slot fresh, so no fallback shortcut applies.
//!
//! Run: `cargo bench -p kvroute-bench --bench score -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvroute_bench::score::{SCORE_REQUEST, fleet};
use kvroute_score::{Policy, ScoreConfig, Scorer, SimdPath, TieInput};

const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];

fn score(c: &mut Criterion) {
    eprintln!("Scorer::score runs the {} path", SimdPath::active());
    let mut group = c.benchmark_group("score");
    let req = SCORE_REQUEST;
    for policy in [ScoreConfig::default().policy, Policy::LeastLoad] {
        let name = policy.label();
        let cfg = ScoreConfig::with_policy(policy);
        for &workers in &WORKER_COUNTS {
            let f = fleet(workers);
            let mut scorer = Scorer::new();
            let mut cursor = 0u32;
            group.bench_function(BenchmarkId::new(format!("{name}/simd"), workers), |b| {
                b.iter(|| {
                    cursor = cursor.wrapping_add(1);
                    let tie = TieInput {
                        cursor,
                        random: None,
                    };
                    black_box(scorer.score(black_box(&f), req, &cfg, tie))
                });
            });
            group.bench_function(BenchmarkId::new(format!("{name}/portable"), workers), |b| {
                b.iter(|| {
                    cursor = cursor.wrapping_add(1);
                    let tie = TieInput {
                        cursor,
                        random: None,
                    };
                    black_box(scorer.score_with(SimdPath::Portable, black_box(&f), req, &cfg, tie))
                });
            });
            group.bench_function(BenchmarkId::new(format!("{name}/scalar"), workers), |b| {
                b.iter(|| {
                    cursor = cursor.wrapping_add(1);
                    let tie = TieInput {
                        cursor,
                        random: None,
                    };
                    black_box(scorer.score_reference(black_box(&f), req, &cfg, tie))
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, score);
criterion_main!(benches);
