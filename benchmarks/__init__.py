"""Measurements; each module runs as ``python -m benchmarks.<name>`` from the project root
and writes its table to ``benchmarks/results/``."""
