"""The command line: one module per command group, the demo and the benchmarks."""
