//! Metrics, the side-by-side table, JSON and SVG output.
