//! The scorer pass alone: every worker slot scored and the winner selected, with the SIMD
//! pass (`Scorer::score`) and, side by side in the same run, the scalar reference
//! (`Scorer::score_reference`), at 16, 128, 512 and 1,024 workers, for `least_load` and
//! `projected_time` enforce (the default). The fleet is fixed: varied loads, a few cache
//! owners, every slot fresh, so no fallback shortcut applies.
//!
//! Run: `cargo bench -p kvroute-bench --bench score -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvroute_score::{Fleet, Policy, ScoreConfig, ScoreRequest, Scorer, SlotFigures, TieInput};

const WORKER_COUNTS: [usize; 4] = [16, 128, 512, 1024];

/// A fixed fleet: loads cycle with the slot number; every 16th slot holds the prompt.
fn fleet(workers: usize) -> Fleet {
    let slots: Vec<Option<SlotFigures>> = (0..workers)
        .map(|w| {
            let mut f = SlotFigures::idle();
            f.requests = (w % 9) as f32;
            f.queued_tokens = ((w * 37) % 4_000) as f32;
            f.decode_tokens = ((w * 53) % 20_000) as f32;
            f.kv_usage = ((w % 10) as f32) / 12.0;
            f.utilization = ((w % 7) as f32) / 8.0;
            f.occupancy = Some(((w % 9) as f32) / 32.0);
            f.overlap_blocks = if w % 16 == 3 { 128.0 } else { 32.0 };
            Some(f)
        })
        .collect();
    Fleet::from_slots(&slots)
}

fn score(c: &mut Criterion) {
    let mut group = c.benchmark_group("score");
    let req = ScoreRequest {
        prompt_tokens: 2_048,
        block_size: 16,
    };
    for (name, policy) in [
        ("projected_time", ScoreConfig::default().policy),
        ("least_load", Policy::LeastLoad),
    ] {
        let cfg = ScoreConfig {
            policy,
            ..ScoreConfig::default()
        };
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
