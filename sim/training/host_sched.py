"""The scheduling disciplines of a host's cores (``cluster.sched``, ``sim real --sched``).

``default`` is Linux's scheduler, which :class:`sim.simulated.hosts.Hosts` follows in time
slices; ``fifo`` is the fixed discipline that ``sim real --sched fifo`` gives real ranks
(:mod:`sim.real.executors.rank_sched`): pinned ranks, each holding its core until it waits,
every wait napping. Its cross-key rule lives with the validator's
(:func:`sim.training.real_checks.check_rt`).
"""

from __future__ import annotations

SCHEDS = ("default", "fifo")  # the disciplines, both of real ranks and of the model

