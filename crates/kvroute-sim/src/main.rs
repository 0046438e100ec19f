//! `kvroute-sim`: the fleet simulator's command line.

fn main() {}
