//! Heap bytes each index holds for the same fleet, measured by a counting global allocator
//! (live bytes after building the index, minus live bytes before): kvroute's `PrefixIndex`
//! and `RunIndex`, `dynamo-kv-router`'s `RadixTree` and `kv-index`'s `ChainIndex` with the
//! per-worker block maps its writers keep.
//!
//! Two fleets:
//! * the benches' conversation fleet (`ConversationFleet`: a 32-block system prompt on every
//!   worker, 96-block conversations on two workers each) at 16, 128, 512 and 1,024 workers,
//!   in bytes per distinct block;
//! * a fleet where every block is held by exactly one worker (each worker stores 64 chains
//!   of 128 blocks of its own), at 16 and 64 workers, in bytes per block; and the same at
//!   64 workers for chains of 96 to 192 blocks (`RunIndex` alone), since its lane maps'
//!   size steps make its bytes per block depend on the count a worker holds.
//!
//! Run from `benches/peer-dynamo`: `cargo run --release --bin memory`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use kvroute_bench::{ConversationFleet, SplitMix64, hasher};
use kvroute_core::{EngineHash, SequenceHash, Slot};
use kvroute_index::index::PrefixIndex;
use kvroute_index::runs::RunIndex;
use kvroute_peer_dynamo::chain::{ChainFleet, ChainPeer, ChainStore, content_hashes};
use kvroute_peer_dynamo::peer::PeerFleet;
use kvroute_peer_dynamo::{FLEET_SEED, WORKER_COUNTS};

/// Live heap bytes of the process.
static LIVE: AtomicIsize = AtomicIsize::new(0);

struct Counting;

// SAFETY: every call is forwarded to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's pointer, layout and size.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Builds with `f` and returns the value and the live bytes it added.
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    let t = f();
    (t, (LIVE.load(Ordering::Relaxed) - before).max(0) as usize)
}

fn per(bytes: usize, blocks: usize) -> String {
    format!("{:.1}", bytes as f64 / blocks as f64)
}

fn main() {
    println!("Conversation fleet: heap bytes per distinct block (counting allocator)\n");
    println!(
        "| workers | distinct blocks | residencies | kvroute `PrefixIndex` | kvroute `RunIndex` \
         | dynamo-kv-router `RadixTree` | kv-index `ChainIndex` + block maps |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &workers in &WORKER_COUNTS {
        let fleet = ConversationFleet::new(workers, FLEET_SEED);
        let distinct = fleet.distinct_blocks();
        let (index, prefix) = measure(|| {
            let i = fleet.build_index();
            i.collect_garbage();
            i
        });
        drop(index);
        let (runs, run_bytes) = measure(|| {
            let r = fleet.build_run_index();
            r.collect_garbage();
            r
        });
        let gauge = runs.stats().heap_bytes;
        drop(runs);
        let peer = PeerFleet::new(&fleet);
        let (tree, tree_bytes) = measure(|| peer.radix_tree().expect("peer tree builds"));
        drop(tree);
        drop(peer);
        let chain = ChainFleet::new(&fleet);
        let (chain_peer, chain_bytes) = measure(|| chain.build().expect("kv-index builds"));
        drop(chain_peer);
        println!(
            "| {workers} | {distinct} | {} | {} | {} | {} | {} |",
            fleet.residencies(),
            per(prefix, distinct),
            per(run_bytes, distinct),
            per(tree_bytes, distinct),
            per(chain_bytes, distinct),
        );
        eprintln!("{workers} workers: RunIndex gauge {gauge} B, allocator {run_bytes} B");
    }

    println!("\nOne holder per block: heap bytes per block (64 chains of 128 blocks per worker)\n");
    println!(
        "| workers | blocks | kvroute `PrefixIndex` | kvroute `RunIndex` | kv-index `ChainIndex` + block maps |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for workers in [16usize, 64] {
        let (chains, len) = (64, 128);
        let all = one_holder_chains(workers, chains, len);
        let blocks = workers * chains * len;
        let config = kvroute_bench::config(workers, blocks);
        let (index, prefix) = measure(|| {
            let i = PrefixIndex::new(config.clone()).expect("config");
            for (w, pairs, _) in &all {
                i.store_hashes(Slot(*w as u32), pairs).expect("slot");
            }
            i.collect_garbage();
            i
        });
        drop(index);
        let run_bytes = run_index_bytes(&config, &all);
        let stores: Vec<ChainStore> = all
            .iter()
            .map(|(w, pairs, content)| {
                ChainStore::new(
                    *w,
                    None,
                    pairs.iter().map(|&(_, s)| s).zip(content.iter().copied()),
                )
            })
            .collect();
        let (chain_peer, chain_bytes) = measure(|| {
            let mut p = ChainPeer::new(workers);
            for s in &stores {
                p.store(s).expect("kv-index stores");
            }
            p
        });
        drop(chain_peer);
        println!(
            "| {workers} | {blocks} | {} | {} | {} |",
            per(prefix, blocks),
            per(run_bytes, blocks),
            per(chain_bytes, blocks)
        );
    }

    // The lane maps grow in steps of 3/2 and 4/3, so the bytes per block move with where a
    // worker's count falls between two sizes: the same fleet at other chain lengths, from
    // 96 to 192 blocks in steps of 4 (6,144 to 12,288 blocks per worker), and the most.
    println!(
        "\nOne holder per block, `RunIndex`, 64 workers, by blocks per worker (64 chains each)\n"
    );
    println!(
        "| chain length | blocks per worker | lane slots per worker (by the growth rule) | `RunIndex` B per block |"
    );
    println!("|---:|---:|---:|---:|");
    let mut most = (0.0f64, 0usize);
    for len in (96usize..=192).step_by(4) {
        let (workers, chains) = (64, 64);
        let all = one_holder_chains(workers, chains, len);
        let blocks = workers * chains * len;
        let config = kvroute_bench::config(workers, blocks);
        let run_bytes = run_index_bytes(&config, &all);
        let per_worker = chains * len;
        let b = run_bytes as f64 / blocks as f64;
        if b > most.0 {
            most = (b, per_worker);
        }
        println!(
            "| {len} | {per_worker} | {} | {} |",
            lane_slots(per_worker),
            per(run_bytes, blocks)
        );
    }
    println!(
        "\nmost: {:.1} B per block at {} blocks per worker",
        most.0, most.1
    );
}

/// One worker's chain: (worker, engine hash and sequence hash per block, content hashes).
type Chain = (
    usize,
    Vec<(EngineHash, SequenceHash)>,
    Vec<kv_index::ContentHash>,
);

/// A worker's lane slots after `n` inserts from none: 16, then the lane maps' growth
/// (`Growth::Quarters`: a quarter of the power of two at or below) while an insert would
/// pass 3/4 full (`kvroute_index::slots`).
fn lane_slots(n: usize) -> usize {
    let mut slots = 0;
    let mut held = 0;
    while held < n {
        if (held + 1) * 4 > slots * 3 {
            slots = kvroute_index::slots::Growth::Quarters.next(slots);
        }
        held += 1;
    }
    slots
}

/// Each of `workers` workers' `chains` chains of `len` blocks of its own.
fn one_holder_chains(workers: usize, chains: usize, len: usize) -> Vec<Chain> {
    let h = hasher();
    let mut rng = SplitMix64::new(FLEET_SEED ^ workers as u64);
    let mut all = Vec::new();
    for w in 0..workers {
        for c in 0..chains {
            let tokens = rng.tokens(len * 16);
            let mut seq = Vec::new();
            h.sequence_hashes_into(&tokens, None, &mut seq);
            let pairs: Vec<(EngineHash, SequenceHash)> = seq
                .iter()
                .enumerate()
                .map(|(i, &s)| {
                    (
                        EngineHash(((w as u64) << 40) | ((c as u64) << 16) | i as u64),
                        s,
                    )
                })
                .collect();
            all.push((w, pairs, content_hashes(&tokens)));
        }
    }
    all
}

/// Live heap bytes of a `RunIndex` holding `all`.
fn run_index_bytes(config: &kvroute_index::index::IndexConfig, all: &[Chain]) -> usize {
    let (runs, bytes) = measure(|| {
        let r = RunIndex::new(config.clone()).expect("config");
        for (w, pairs, _) in all {
            r.store_hashes(Slot(*w as u32), None, pairs).expect("slot");
        }
        r.collect_garbage();
        r
    });
    drop(runs);
    bytes
}
