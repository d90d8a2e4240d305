"""Benchmark suites (``python -m sim bench SUITE``): each module has ``measure(args) -> dict``
and ``render(result) -> str``, and prints ratios measured side by side in one run."""
