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

fn main() -> std::process::ExitCode {
    cli::main(cli::args::Cli::parse())
}
