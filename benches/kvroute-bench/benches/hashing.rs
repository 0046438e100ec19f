//! Block hashing throughput: chained (sequence) hashes of a long prompt, in blocks/s.
//!
//! Run: `cargo bench -p kvroute-bench --bench hashing -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvroute_bench::SplitMix64;
use kvroute_core::{HashNamespace, SequenceHash};
use kvroute_index::BlockHasher;
use kvroute_index::hash::{chain_hash, local_block_hash};

const TOKENS_SEED: u64 = 0x6b76_726f_7574_6511;
/// Tokens hashed per iteration (64 Ki tokens: 256 KiB of input, L2-resident).
const TOKENS: usize = 64 * 1024;

/// `sequence_hashes_into` at block sizes 16 (the target) and 64 (informative),
/// `local_hashes_into` at 16 (informative: the local hash alone, without the chain step), and
/// at 16 the same chained hashes through the public general-purpose functions
/// (`local_block_hash`, the general XXH3, then `chain_hash`): the baseline that
/// `BlockHasher`'s 16-token path is compared with in the same run.
fn hashing(c: &mut Criterion) {
    let tokens = SplitMix64::new(TOKENS_SEED).tokens(TOKENS);
    let mut group = c.benchmark_group("hashing");
    for block_size in [16usize, 64] {
        let h = BlockHasher::new(block_size, HashNamespace::DEFAULT);
        let blocks = TOKENS / block_size;
        group.throughput(Throughput::Elements(blocks as u64));
        let mut out = Vec::with_capacity(blocks);
        group.bench_function(BenchmarkId::new("sequence", block_size), |b| {
            b.iter(|| {
                out.clear();
                h.sequence_hashes_into(black_box(&tokens), None, &mut out);
                black_box(out.last().copied())
            });
        });
        if block_size == 16 {
            let ns = HashNamespace::DEFAULT;
            group.bench_function(BenchmarkId::new("sequence_general_xxh3", block_size), |b| {
                b.iter(|| {
                    out.clear();
                    let mut prev: Option<SequenceHash> = None;
                    for block in black_box(&tokens).chunks_exact(block_size) {
                        let local = local_block_hash(block, ns);
                        let seq = prev.map_or(SequenceHash(local.0), |p| chain_hash(p, local));
                        out.push(seq);
                        prev = Some(seq);
                    }
                    black_box(out.last().copied())
                });
            });
            let mut local = Vec::with_capacity(blocks);
            group.bench_function(BenchmarkId::new("local_only", block_size), |b| {
                b.iter(|| {
                    local.clear();
                    h.local_hashes_into(black_box(&tokens), &mut local);
                    black_box(local.last().copied())
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, hashing);
criterion_main!(benches);
