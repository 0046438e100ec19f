//! The generated workloads' shapes: `long-context` (a quarter of the prompts above 32,768
//! tokens, none beyond the engine's context) and `no-sharing` (no two prompts share a
//! block).

use std::collections::HashSet;

use kvroute_sim::engine::EngineConfig;
use kvroute_sim::workload::generated::{self, GENERATED, long_context, no_sharing};
use kvroute_sim::workload::{Workload, find_named, named};

fn tokens(w: &Workload, i: usize) -> Vec<u32> {
    let mut v = Vec::new();
    w.requests[i].prompt.tokens_into(&mut v);
    v
}

#[test]
fn both_are_named_and_deterministic_for_a_seed() {
    assert_eq!(
        GENERATED.iter().map(|s| s.name).collect::<Vec<_>>(),
        ["long-context", "no-sharing"]
    );
    for s in &GENERATED {
        assert_eq!(find_named(s.name).unwrap().name, s.name);
        let w = s.build(3);
        assert_eq!(w.name, s.name);
        assert_eq!(w, s.build(3), "{}", s.name);
        assert_ne!(w.requests, s.build(4).requests, "{}", s.name);
    }
    // The 10 scenarios and the 2 generated workloads, each name once.
    let names: Vec<&str> = named().map(|s| s.name).collect();
    assert_eq!(names.len(), 12);
    assert_eq!(names.iter().collect::<HashSet<_>>().len(), 12);
    assert!(find_named("hot-owner-51").is_some() && find_named("nope").is_none());
}

#[test]
fn long_context_mixes_a_quarter_of_long_prompts_up_to_the_context() {
    let w = long_context::build(1);
    let context = EngineConfig::default().max_model_len;
    assert_eq!(context, 131_072);
    assert_eq!(w.fleet.engines, 8);
    assert_eq!(w.requests.len(), 800);
    let long: Vec<&kvroute_sim::SimRequest> = w
        .requests
        .iter()
        .filter(|r| r.prompt.len() > 32_768)
        .collect();
    // Exactly 800 / 4 = 200 long prompts; the other 600 are chat: 1,024 + at most 1,024.
    assert_eq!(long.len(), 200);
    for r in &w.requests {
        assert!(
            r.prompt.len() + r.output_tokens <= context,
            "request {} fits the context",
            r.id
        );
        assert!(r.prompt.len() > 32_768 || r.prompt.len() <= 2_048);
        assert!((64..=512).contains(&r.output_tokens));
    }
    // The longest document: 131,072 − 512 (question) − 512 (output) = 130,048 tokens.
    assert_eq!(long_context::longest_document(context), 130_048);
    // Long prompts reuse 16 documents: at most 16 distinct first blocks among them, and
    // the 600 chat prompts start with one of 4 system prompts.
    let firsts = |long: bool| -> HashSet<Vec<u32>> {
        (0..w.requests.len())
            .filter(|&i| (w.requests[i].prompt.len() > 32_768) == long)
            .map(|i| tokens(&w, i)[..16].to_vec())
            .collect()
    };
    assert!(firsts(true).len() <= 16);
    assert!(firsts(false).len() <= 4);
    assert!(
        w.requests
            .windows(2)
            .all(|p| p[0].arrival_s <= p[1].arrival_s)
    );
}

#[test]
fn no_sharing_prompts_share_no_block() {
    let w = no_sharing::build(1);
    let block = w.fleet.engine.block_size as usize;
    assert_eq!(block, 16);
    assert_eq!(w.requests.len(), 1_000);
    let mut first_blocks = HashSet::new();
    let mut all = HashSet::new();
    let mut total = 0usize;
    for (i, r) in w.requests.iter().enumerate() {
        assert!((128..=16_384).contains(&r.prompt.len()));
        assert!((32..=1_024).contains(&r.output_tokens));
        let t = tokens(&w, i);
        assert!(first_blocks.insert(t[..block].to_vec()), "request {i}");
        total += t.len();
        all.extend(t);
    }
    // No token appears twice anywhere, so no block can be shared.
    assert_eq!(all.len(), total);
    assert!(
        w.requests
            .windows(2)
            .all(|p| p[0].arrival_s < p[1].arrival_s)
    );
}

/// The log-uniform draw stays within its bounds and is roughly log-uniform: with bounds
/// 128 and 16,384 (2^7 and 2^14) the median is near 2^10.5 ≈ 1,448.
#[test]
fn log_uniform_lengths() {
    let mut rng = kvroute_sim::workload::synth::rng(5);
    let mut v: Vec<u32> = (0..20_001)
        .map(|_| generated::log_uniform(&mut rng, 128, 16_384))
        .collect();
    assert!(v.iter().all(|x| (128..=16_384).contains(x)));
    v.sort_unstable();
    let median = f64::from(v[10_000]);
    assert!((median.log2() - 10.5).abs() < 0.1, "{median}");
    assert_eq!(generated::log_uniform(&mut rng, 9, 9), 9);
}
