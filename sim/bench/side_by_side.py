"""Side-by-side timing: candidates measured in alternating rounds of one run.

Alternating rounds and taking each candidate's best round makes the ratio
robust on a shared, noisy machine (both sides see the same background load).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def loops_for(fn: Callable[[], object], budget_s: float) -> int:
    """Calls per round so that one round lasts about ``budget_s`` seconds."""
    fn()  # warm caches and lazy imports
    loops, elapsed = 1, 0.0
    while True:
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s / 4 or loops >= 1 << 20:
            return max(1, int(loops * budget_s / max(elapsed, 1e-9)))
        loops *= 4


def compare(candidates: dict[str, Callable[[], object]], rounds: int = 5,
            budget_s: float = 0.02) -> dict[str, float]:
    """Best seconds per call of each candidate, measured in alternating rounds."""
    loops = {name: loops_for(fn, budget_s) for name, fn in candidates.items()}
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            best[name] = min(best[name], time_loops(fn, loops[name]))
    return best


def time_loops(fn: Callable[[], object], loops: int) -> float:
    """Seconds per call of ``fn`` over ``loops`` calls in a row."""
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    return (time.perf_counter() - start) / loops
