//! Shared workload builders for the benchmarks.
