//! The discrete-event loop: one policy over one workload.
