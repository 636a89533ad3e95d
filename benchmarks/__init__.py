"""On-demand benchmarks (`make bench`); results are written to docs/benchmarks.md."""
