"""The scheduling discipline of a host's cores (``cluster.sched``): its cross-key rules.

``default`` is Linux's scheduler, which :class:`sim.simulated.hosts.Hosts` follows in time
slices; ``fifo`` is the fixed discipline that ``sim real --sched fifo`` gives real ranks
(:mod:`sim.real.executors.rank_sched`): pinned ranks, each holding its core until it waits,
every wait napping.
"""

from __future__ import annotations

from sim.config import Config

SCHEDS = ("default", "fifo")  # the disciplines, both of real ranks and of the model


def check_sched(c: Config) -> None:
    """Raises ValueError("cluster.wait: ...") where a fifo host's ranks would spin: a
    real-time rank that spins keeps its core from the ranks pinned beside it."""
    if c.cluster.sched == "fifo" and c.cluster.wait == "spin":
        raise ValueError("cluster.wait: 'spin' is not a wait under cluster.sched = 'fifo' "
                         "(its ranks nap while they wait); use 'auto' or 'sleep'")
