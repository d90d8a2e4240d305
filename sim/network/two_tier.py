"""A fabric between hosts and a host link inside each: every message takes one of the two.

The network's endpoints are ranks, each with its own NIC on the fabric (what
:func:`sim.network.network_builder.build_network` builds), or sharing one of its machine's
``cluster.nics_per_host`` NICs (:func:`sim.network.network_builder.nic_ports`). Endpoints
also belong to machines (``cluster.ranks_per_host`` or ``cluster.rank_hosts``); with a host
link (:mod:`sim.network.host_links`) a message between two endpoints of one machine goes
over it instead: the inner network is a second network of the same model (flow or analytical)
on a star of the host link's rate, one port a rank each way (an NVSwitch), with the host
link's latency and overheads. A message across machines, or from an endpoint to itself,
takes the fabric exactly as it would without a host link. The two share no link (GPUDirect
traffic to the NIC does not cross NVLink), so they are simulated apart on one clock.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim.network.schedule_runner import Execution

if TYPE_CHECKING:
    from sim.network.collectives import Plan
    from sim.network.flow import Delivered


class TwoTierNetwork:
    """The fabric network ``outside`` and the host links ``inside``, sharing one clock;
    ``machine[e]`` is endpoint e's machine. Offers the flow model's API (send, send_all,
    send_many, run_plan); the trace's link tracks are the fabric's."""

    def __init__(self, outside: Any, inside: Any, machine: np.ndarray) -> None:
        self.outside, self.inside = outside, inside
        self.env, self.fabric, self.topology = outside.env, outside.fabric, outside.topology
        self.transport = outside.transport
        self.model = outside.model
        self.host_link = inside.fabric
        self.machine = np.asarray(machine, np.int64)
        self._machine = self.machine.tolist()  # for messages sent one at a time

    # what the strategies and the trace read of a network: the fabric's sends carry the
    # flow ids the trace links to (the host links' flows are not logged)
    @property
    def sent(self) -> int:
        return self.outside.sent

    @property
    def flow_log(self) -> Any:
        return self.outside.flow_log

    @property
    def messages_delivered(self) -> int:
        return self.outside.messages_delivered + self.inside.messages_delivered

    @property
    def flows_started(self) -> int:
        return getattr(self.outside, "flows_started", 0) + getattr(self.inside,
                                                                   "flows_started", 0)

    def start_log(self, *args: Any, **kwargs: Any) -> None:
        """Log the fabric's flows (see :meth:`sim.network.flow.FlowNetwork.start_log`)."""
        self.outside.start_log(*args, **kwargs)

    # ---- sending ---------------------------------------------------------------------

    def _local(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Which messages stay inside a machine (endpoints outside the network go to the
        fabric, which raises ValueError for them)."""
        n = len(self._machine)
        inside = (src >= 0) & (src < n) & (dst >= 0) & (dst < n) & (src != dst)
        inside[inside] = self.machine[src[inside]] == self.machine[dst[inside]]
        return inside

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        """One message, as :meth:`sim.network.flow.FlowNetwork.send`."""
        machine, n = self._machine, len(self._machine)
        local = 0 <= src < n and 0 <= dst < n and src != dst and machine[src] == machine[dst]
        return (self.inside if local else self.outside).send(src, dst, nbytes)

    def send_all(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> simpy.Event:
        """Messages as :meth:`sim.network.flow.FlowNetwork.send_all`: the event fires when
        the last has arrived, with that time as value."""
        src, dst, nbytes = np.asarray(src), np.asarray(dst), np.asarray(nbytes)
        local = self._local(src, dst)
        if not local.any():
            return self.outside.send_all(src, dst, nbytes)
        if local.all():
            return self.inside.send_all(src, dst, nbytes)
        parts = [self.outside.send_all(src[~local], dst[~local], nbytes[~local]),
                 self.inside.send_all(src[local], dst[local], nbytes[local])]
        done = self.env.event()
        self.env.all_of(parts).callbacks.append(lambda _: done.succeed(self.env.now))
        return done

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Delivered) -> None:
        """Messages as :meth:`sim.network.flow.FlowNetwork.send_many`; ``on_delivered``
        gets indices into these arrays, whichever tier carried them."""
        src, dst, nbytes = np.asarray(src), np.asarray(dst), np.asarray(nbytes)
        local = self._local(src, dst)
        if not local.any():
            self.outside.send_many(src, dst, nbytes, on_delivered)
            return
        if local.all():
            self.inside.send_many(src, dst, nbytes, on_delivered)
            return
        for tier, which in ((self.outside, np.flatnonzero(~local)),
                            (self.inside, np.flatnonzero(local))):
            tier.send_many(src[which], dst[which], nbytes[which],
                           lambda got, which=which: on_delivered(which[got]))

    def run_plan(self, plan: Plan) -> Generator[simpy.Event, Any, float]:
        """A collective: on one tier's own model when all its messages take that tier
        (every endpoint on its own machine, or all on one), else round by round with each
        message on its tier (:mod:`sim.network.schedule_runner`). Elapsed s."""
        machines = self.machine[plan.hosts]
        if len(np.unique(machines)) == len(plan.hosts):
            return (yield from self.outside.run_plan(plan))
        if len(np.unique(plan.hosts)) == len(plan.hosts) and (machines == machines[0]).all():
            return (yield from self.inside.run_plan(plan))
        started = self.env.now
        yield Execution(self, plan).done
        return self.env.now - started
