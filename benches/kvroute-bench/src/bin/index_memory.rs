//! Live heap bytes of a populated prefix index, per indexed block.
//!
//! Run: `cargo run --release -p kvroute-bench --bin index_memory`.
//!
//! A counting global allocator tracks the bytes of every live allocation (requested sizes,
//! and an estimate of what glibc's malloc really reserves for them: 8 bytes of header,
//! rounded up to 16, at least 32). For each scenario it measures the heap before the index
//! exists, after `PrefixIndex::new` (the empty baseline: node table and per-slot worker
//! state, sized by `IndexConfig::expected_blocks`: the scenario's distinct blocks, or the
//! default where the row says so) and after
//! the data is stored, and prints the bytes per distinct block and per (worker, block)
//! residency, with and without the empty baseline. This is a measurement, not a test: it
//! asserts nothing about the figures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use kvroute_bench::{ConversationFleet, OneOwnerData, REQUEST_BLOCKS};
use kvroute_index::index::{IndexConfig, PrefixIndex};

/// Counts live heap bytes (requested, and glibc-rounded estimate).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static LIVE_MALLOC: AtomicUsize = AtomicUsize::new(0);

/// glibc malloc's chunk size for a request of `size` bytes (64-bit): size plus an 8-byte
/// header, rounded up to 16, at least 32. Over-aligned requests are counted the same way.
fn chunk(size: usize) -> usize {
    ((size + 8 + 15) & !15).max(32)
}

fn add(size: usize) {
    LIVE.fetch_add(size, Ordering::Relaxed);
    LIVE_MALLOC.fetch_add(chunk(size), Ordering::Relaxed);
}

fn sub(size: usize) {
    LIVE.fetch_sub(size, Ordering::Relaxed);
    LIVE_MALLOC.fetch_sub(chunk(size), Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the counters are side bookkeeping only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract of `GlobalAlloc::alloc`.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract of `GlobalAlloc::alloc_zeroed`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract of `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) };
        sub(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract of `GlobalAlloc::realloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            sub(layout.size());
            add(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Heap {
    requested: usize,
    malloc: usize,
}

fn heap() -> Heap {
    Heap {
        requested: LIVE.load(Ordering::Relaxed),
        malloc: LIVE_MALLOC.load(Ordering::Relaxed),
    }
}

struct Row {
    name: String,
    blocks: usize,
    residencies: usize,
    baseline: Heap,
    data: Heap,
    estimate: u64,
}

impl Heap {
    fn since(self, earlier: Heap) -> Heap {
        Heap {
            requested: self.requested - earlier.requested,
            malloc: self.malloc - earlier.malloc,
        }
    }
}

/// Creates an index for `workers` slots and `expected_blocks` blocks, reads the heap, runs
/// `populate`, and reads it again. The workload's own data is built before the call, so only
/// the index is inside the measurement.
fn measure(
    name: String,
    workers: usize,
    expected_blocks: usize,
    populate: impl FnOnce(&PrefixIndex),
) -> Row {
    // Let the epoch collector free what earlier scenarios' indexes retired, so those frees
    // do not land inside this measurement.
    let flusher = PrefixIndex::new(kvroute_bench::config(1, 1)).expect("config");
    let mut last = heap().requested;
    for _ in 0..1000 {
        flusher.collect_garbage();
        let now = heap().requested;
        if now == last {
            break;
        }
        last = now;
    }
    drop(flusher);
    let before = heap();
    let index = PrefixIndex::new(kvroute_bench::config(workers, expected_blocks)).expect("config");
    index.collect_garbage();
    let empty = heap();
    populate(&index);
    index.collect_garbage();
    let full = heap();
    let stats = index.stats();
    Row {
        name,
        blocks: stats.nodes as usize,
        residencies: stats.residencies as usize,
        baseline: empty.since(before),
        data: full.since(empty),
        estimate: stats.heap_bytes,
    }
}

fn main() {
    let mut rows = Vec::new();
    // 512 workers: eight bit words per node (the ingest benches' fleet).
    for workers in [16usize, 64, 512] {
        let fleet = ConversationFleet::new(workers, 0x6b76_726f_7574_6521);
        rows.push(measure(
            format!("conversation fleet, {workers} workers"),
            workers,
            fleet.distinct_blocks(),
            |ix| fleet.populate(ix),
        ));
    }
    for per_worker in [8usize, 32] {
        let workers = 64;
        let data = OneOwnerData::new(workers, per_worker, REQUEST_BLOCKS, 0x6b76_726f_7574_6522);
        rows.push(measure(
            format!(
                "one owner per block, {workers} workers x {per_worker} x {REQUEST_BLOCKS} blocks"
            ),
            workers,
            data.distinct_blocks(),
            |ix| data.populate(ix),
        ));
    }
    // The same data with the default `expected_blocks`: the node table sizes itself.
    let default_expected = IndexConfig::default().expected_blocks;
    let fleet = ConversationFleet::new(64, 0x6b76_726f_7574_6521);
    rows.push(measure(
        format!("conversation fleet, 64 workers, default expected_blocks ({default_expected})"),
        64,
        default_expected,
        |ix| fleet.populate(ix),
    ));
    let data = OneOwnerData::new(64, 32, REQUEST_BLOCKS, 0x6b76_726f_7574_6522);
    rows.push(measure(
        format!(
            "one owner per block, 64 workers x 32 x {REQUEST_BLOCKS} blocks, \
             default expected_blocks ({default_expected})"
        ),
        64,
        default_expected,
        |ix| data.populate(ix),
    ));

    println!(
        "IndexConfig: worker_slots = workers; expected_blocks = the scenario's distinct \
         blocks unless the row says otherwise."
    );
    println!(
        "Bytes are requested sizes of live allocations; 'glibc' adds malloc's chunk rounding.\n"
    );
    println!(
        "| scenario | distinct blocks | residencies | empty index B | data B | \
         B / block | B / residency | data B / block | data B / residency | \
         glibc B / block | index heap_bytes / block |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let per = |bytes: usize, n: usize| bytes as f64 / n as f64;
    for r in &rows {
        let total = r.baseline.requested + r.data.requested;
        let total_malloc = r.baseline.malloc + r.data.malloc;
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.name,
            r.blocks,
            r.residencies,
            r.baseline.requested,
            r.data.requested,
            per(total, r.blocks),
            per(total, r.residencies),
            per(r.data.requested, r.blocks),
            per(r.data.requested, r.residencies),
            per(total_malloc, r.blocks),
            r.estimate as f64 / r.blocks as f64,
        );
    }
}
