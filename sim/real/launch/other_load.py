"""Other processes' load on this machine, so real timings can be taken when it is quiet.

A real run is timed on the machine it shares: other processes' CPU time is time its ranks
do not get. :func:`cpu_busy` measures the busy share of the CPUs while this process idles;
:class:`OtherLoad` measures, around a block that runs MPI jobs, the CPU share of everything
that is not this process or its children (from ``/proc/stat`` minus ``os.times``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
MAX_OTHER_LOAD = 0.10  # other processes' CPU share above which timings get a warning

T = TypeVar("T")


def _stat() -> tuple[int, int]:
    """(busy ticks: user + nice + system, all ticks) of all CPUs so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return fields[0] + fields[1] + fields[2], sum(fields)


def cpu_busy(window_s: float = 0.5) -> float:
    """Busy share of all CPUs over the next ``window_s`` (this process sleeps meanwhile)."""
    busy0, total0 = _stat()
    time.sleep(window_s)
    busy1, total1 = _stat()
    return (busy1 - busy0) / max(total1 - total0, 1)


def wait_for_quiet(max_busy: float, max_wait_s: float) -> float:
    """Wait until other load uses at most ``max_busy`` of the CPUs; the last level seen
    (none measured, 0.0, when ``max_wait_s`` is 0)."""
    if max_wait_s <= 0:
        return 0.0
    deadline = time.monotonic() + max_wait_s
    busy = cpu_busy()
    while busy > max_busy and time.monotonic() < deadline:
        busy = cpu_busy(1.0)
    return busy


def _mine_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OtherLoad:
    """``with OtherLoad() as load: ...`` then ``load.fraction``: the CPU share that other
    processes used meanwhile (children count as ours once they have been waited for)."""

    fraction = 0.0

    def __enter__(self) -> OtherLoad:
        self.started, self.stat, self.mine = time.monotonic(), _stat()[0], _mine_s()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        elapsed = time.monotonic() - self.started
        busy_s = (_stat()[0] - self.stat) * TICK_S
        others = busy_s - (_mine_s() - self.mine)
        self.fraction = max(0.0, others / (max(elapsed, 1e-9) * (os.cpu_count() or 1)))


def quietly(measure: Callable[[], T], quiet: tuple[float, float],
            retries: int) -> tuple[T, float]:
    """``measure()`` on a quiet machine: waited for (:func:`wait_for_quiet` with ``quiet``:
    the busy share, the longest wait in s), and taken again, up to ``retries`` times, when
    other processes took more than ``quiet[0]`` of the CPUs meanwhile; the least disturbed
    result, and that share."""
    best: tuple[float, T] | None = None
    for _ in range(1 + retries):
        wait_for_quiet(*quiet)
        with OtherLoad() as load:
            result = measure()
        if best is None or load.fraction < best[0]:
            best = (load.fraction, result)
        if load.fraction <= quiet[0]:
            break
    assert best is not None  # 1 + retries >= 1 attempts
    return best[1], best[0]
