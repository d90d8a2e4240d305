"""Time on a rank: one clock for every rank, precise sleeps, waits that can yield the CPU.

All ranks of a run live on one machine, so ``time.perf_counter`` (CLOCK_MONOTONIC) is one
clock for all of them: rank 0 broadcasts the instant training starts and every rank logs
times relative to it. Waits either spin in MPI (lowest latency, when every rank has a core)
or poll and sleep (when ranks outnumber cores, so that a waiting rank does not steal the
CPU of a computing one).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PR_SET_TIMERSLACK = 29  # linux/prctl.h
SPIN_BEFORE_NAP_S = 50e-6  # a sleeping wait spins this long first (longer takes CPU from work)
POLL_SLEEP_S = 20e-6  # then naps this long between polls (a nap also wakes late)
SPIN_S = 60e-6  # the end of a modelled compute time is spun, not slept
# a sleep asks for this share of what is left (less SPIN_S), then sleeps again: a sleep ends
# late in proportion to its length, so one sleep of the whole pad would overrun a modelled
# gradient; the sleeps' lateness is on docs/measurements/hosts.md
SLEEP_SHARE = 0.95
WAIT_MODES = ("spin", "sleep")


def tighten_timer_slack(slack_ns: int = 1000) -> None:
    """Ask Linux to wake sleeps within ``slack_ns`` (default slack is 50 us)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: sleeps are just less precise
        pass


def sleep_until(deadline: float, check: Callable[[], bool] | None = None,
                slice_s: float = 200e-6) -> bool:
    """Sleep until ``time.perf_counter() >= deadline``; True if ``check()`` cut it short.

    With ``check`` the sleep is taken in slices and ``check`` is called between them. Each
    sleep asks for ``SLEEP_SHARE`` of what is left, and the last ``SPIN_S`` are spun, not
    slept: a wake-up comes late, the later the longer the sleep.
    """
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return False
        if check is not None and check():
            return True
        if left > SPIN_S:
            nap = left * SLEEP_SHARE - SPIN_S
            nap = nap if nap > 0 else left - SPIN_S
            time.sleep(min(nap, slice_s) if check is not None else nap)


class Waiter:
    """Completes MPI requests by spinning in MPI, or by polling: spin ``spin_s``, then nap.

    ``yields``: the polling spin calls sched_yield between tests, so that a rank pinned to
    the same core at the same real-time priority (:mod:`sim.real.executors.rank_sched`'s
    fifo) runs at once instead of after the spin. Raises ValueError for an unknown mode,
    or for ``yields`` with MPI's spinning waits (they would keep the core)."""

    def __init__(self, mode: str, spin_s: float = SPIN_BEFORE_NAP_S,
                 yields: bool = False) -> None:
        if mode not in WAIT_MODES:
            raise ValueError(f"wait mode {mode!r}: expected one of {', '.join(WAIT_MODES)}")
        if yields and mode == "spin":
            raise ValueError("a yielding waiter polls: wait mode 'sleep', not 'spin'")
        self.mode, self.spin_s, self.yields = mode, spin_s, yields

    def all(self, requests: Sequence[Any]) -> None:
        """Wait for every request."""
        from mpi4py import MPI

        if not requests:
            return
        requests = list(requests)
        if self.mode == "spin":
            MPI.Request.Waitall(requests)
            return
        self._poll(lambda: MPI.Request.Testall(requests))

    def one(self, request: Any, status: Any = None) -> None:
        """Wait for one request (``status`` filled in for a receive)."""
        if self.mode == "spin":
            request.Wait(status)
            return
        self._poll(lambda: request.Test(status))

    def _poll(self, done: Callable[[], bool]) -> None:
        if done():
            return
        naps_from = time.perf_counter() + self.spin_s
        while not done():
            if time.perf_counter() > naps_from:
                time.sleep(POLL_SLEEP_S)
            elif self.yields:
                os.sched_yield()


class Heartbeat:
    """Touches a file at most every ``every_s`` so the launcher can tell a hung rank."""

    def __init__(self, path: Path | None, every_s: float = 0.5) -> None:
        self.path, self.every_s, self.last = path, every_s, 0.0
        if path is not None:
            path.touch()

    def beat(self) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            os.utime(self.path)
