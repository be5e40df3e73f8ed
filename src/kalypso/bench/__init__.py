"""Benchmarks: the paper's workload shapes run side by side under several policies."""
