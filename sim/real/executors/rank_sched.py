"""How real ranks share this machine's cores: Linux's default scheduler, or a fixed discipline.

``default``: the kernel's own (EEVDF time slices, ranks migrate between cores), which the
simulator's host model follows statistically. ``fifo``: each rank pins itself to one core
(rank i on the i-th allowed core modulo their number) and runs SCHED_FIFO at one priority,
so it keeps its core from the moment it runs until it waits, and a rank woken while its
core is held queues behind the holder (first in, first out). Every wait must then give the
core up: the ranks' waits poll and nap (:class:`sim.real.executors.rank_clock.Waiter` with
``yields``), never MPI's blocking waits, which spin calling sched_yield and so would hand
the core only to other real-time ranks, starving the launcher and everything else on it
(the kernel's RT throttling, 950 of every 1000 ms, is a safety net the runs do not lean on).

Priority 1, the lowest real-time one: kernel threads at higher priorities still preempt.
"""

from __future__ import annotations

import os

from sim.training.host_sched import SCHEDS

__all__ = ["SCHEDS", "core_of", "enter", "fifo_refused", "leave"]
FIFO_PRIORITY = 1


def fifo_refused() -> str | None:
    """Why this process may not run SCHED_FIFO (None: it may). Tries it on itself and
    restores its policy at once (no work runs meanwhile)."""
    if not hasattr(os, "sched_setscheduler"):
        return "the platform has no sched_setscheduler"
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
    except OSError as exc:  # EPERM: no CAP_SYS_NICE / RLIMIT_RTPRIO, or no RT budget
        return f"SCHED_FIFO refused ({os.strerror(exc.errno) if exc.errno else exc})"
    os.sched_setscheduler(0, policy, param)
    return None


def core_of(rank: int, cores: list[int]) -> int:
    """The core ``rank`` is pinned to: the ``rank mod len(cores)``-th of ``cores``."""
    return sorted(cores)[rank % len(cores)]


def enter(sched: str, rank: int) -> None:
    """Put this process (rank ``rank``) under ``sched``: for ``fifo`` pin it to its core
    and make it SCHED_FIFO; nothing for ``default``. Raises OSError where refused (the
    launcher checked first: :func:`fifo_refused`), ValueError for an unknown name."""
    if sched not in SCHEDS:
        raise ValueError(f"scheduling discipline {sched!r}: expected one of {SCHEDS}")
    if sched == "default":
        return
    os.sched_setaffinity(0, {core_of(rank, list(os.sched_getaffinity(0)))})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))


def leave(sched: str) -> None:
    """Back to the default policy (the rank keeps its core): for what follows training,
    whose blocking MPI calls (the logs' gather) spin."""
    if sched != "default":
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
