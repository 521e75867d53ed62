"""Reproducible benchmarks: ``python -m benchmarks.<name>``; results in docs/benchmarks.md."""
