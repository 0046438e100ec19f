//! `kvroute-sim`: the fleet simulator's command line.
//!
//! ```text
//! kvroute-sim                                  # the demo, every policy
//! kvroute-sim list                             # scenarios and policies
//! kvroute-sim scenario hot-owner-51 --policies kv_aware,projected_time
//! kvroute-sim replay --trace FILE --engines 16 --rate-scale 2 --json out.json --svg plots
//! ```

mod cli;

use clap::Parser;

/// The simulator's allocator. A run indexes and frees millions of small objects (index
/// nodes, event batches, per-request block lists); mimalloc's size-class pages serve them
/// faster than the system allocator (measured in `docs/BENCHMARKS.md`, "Simulator"). The
/// library crates leave the choice of allocator to the program that embeds them.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main(cli::args::Cli::parse())
}
