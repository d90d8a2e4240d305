"""When ranks fail: each rank's failures a renewal process (exponential or Weibull times
between failures with mean ``faults.mtbf_s``), merged in time order with the failures a
config lists at given times. Failures at a given update join when the run reaches it.

A failed rank is replaced at once as far as its own failure process goes (its next
lifetime starts at the failure), as a node swapped for a spare is.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

SEED_TAG = 0xFA17  # this stream's branch of the run's seed


class FailureEvent(NamedTuple):
    at_s: float  # the run's time (wall, for a restarting strategy)
    rank: int


def random_ranks(faults: Any, workers: int, servers: int) -> list[int]:
    """The ranks that fail at random (``faults.ranks``; none without ``faults.mtbf_s``)."""
    if faults.mtbf_s is None:
        return []
    chosen = {"all": range(workers + servers), "workers": range(workers),
              "servers": range(workers, workers + servers)}[faults.ranks]
    return list(chosen)


def lifetime_draw(faults: Any) -> Any:
    """A function of a Generator drawing one time between failures (s), mean mtbf_s."""
    mean = faults.mtbf_s
    if faults.distribution == "exponential":
        return lambda rng: float(rng.exponential(mean))
    shape = faults.weibull_shape
    scale = mean / math.gamma(1.0 + 1.0 / shape)  # Weibull's mean is scale * Gamma(1 + 1/k)
    return lambda rng: float(scale * rng.weibull(shape))


class FailureClock:
    """The run's failures in time order: :meth:`peek` the next, :meth:`pop` it (which draws
    that rank's next one), :meth:`add` one more (a failure at an update, once reached)."""

    def __init__(self, faults: Any, ranks: Sequence[int], seed: int) -> None:
        self._heap: list[tuple[float, int, int, bool]] = []  # (time, order, rank, random)
        self._order = 0
        self._rngs: dict[int, np.random.Generator] = {}
        if ranks:
            self._draw = lifetime_draw(faults)
            streams = np.random.SeedSequence([seed, SEED_TAG]).spawn(max(ranks) + 1)
            for rank in ranks:
                self._rngs[rank] = np.random.default_rng(streams[rank])
                self._push(self._draw(self._rngs[rank]), rank, True)
        for failure in faults.failures:
            if failure.at_s is not None:
                self._push(failure.at_s, failure.rank, False)

    def _push(self, at_s: float, rank: int, random: bool) -> None:
        heapq.heappush(self._heap, (at_s, self._order, rank, random))
        self._order += 1

    def add(self, at_s: float, rank: int) -> None:
        """A listed failure of ``rank`` at ``at_s``."""
        self._push(at_s, rank, False)

    def peek(self) -> FailureEvent | None:
        if not self._heap:
            return None
        at_s, _, rank, _ = self._heap[0]
        return FailureEvent(at_s, rank)

    def pop(self) -> FailureEvent:
        at_s, _, rank, random = heapq.heappop(self._heap)
        if random:
            self._push(at_s + self._draw(self._rngs[rank]), rank, True)
        return FailureEvent(at_s, rank)


def at_updates(faults: Any) -> dict[int, list[int]]:
    """The listed failures at an update: update -> the ranks that fail right after it."""
    out: dict[int, list[int]] = {}
    for failure in faults.failures:
        if failure.at_update is not None:
            out.setdefault(failure.at_update, []).append(failure.rank)
    return out
