"""Analytical network: closed-form alpha-beta costs, no contention, the flow model's API.

Every message costs alpha + n beta with alpha = 2 o + 2 L (one non-blocking switch, see
:mod:`sim.network.fabrics`), whatever else is in flight; a collective costs its textbook
closed form (Thakur, Rabenseifner and Gropp 2005), computed in O(1). The data still
moves: the schedule's rounds are applied in order, so the results are bit-for-bit those
of the flow model. The topology is kept only so placements work the same way.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim.network.fabrics import Fabric
from sim.network.flow import Delivered, FlowNetwork
from sim.network.topology import Topology

if TYPE_CHECKING:
    from sim.network.collectives import Plan


class AnalyticalNetwork:
    """Hosts exchanging messages at alpha + n beta each, independently of one another."""

    model = "analytical"

    def __init__(self, env: simpy.Environment, fabric: Fabric, topology: Topology) -> None:
        self.env, self.fabric, self.topology = env, fabric, topology
        self.alpha_s = fabric.alpha_s()
        self.beta_s = fabric.beta_s_per_byte
        self.messages_delivered = 0
        self.flow_log = None  # no flows to log: messages do not share links here

    def message_s(self, nbytes: float) -> float:
        """Time of one message of nbytes bytes (s)."""
        return self.alpha_s + nbytes * self.beta_s

    def start_log(self, limit: int, window_s: tuple[float, float] = (0.0, math.inf)) -> None:
        """Nothing to log (see :meth:`FlowNetwork.start_log`)."""

    send = FlowNetwork.send  # one message through send_many: the same for both models

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Delivered) -> None:
        """Messages src[i] -> dst[i]; ``on_delivered(indices)`` at each arrival instant."""
        first = nbytes[0]
        if (nbytes == first).all():  # the common case (a push or pull to equal shards)
            timer = self.env.timeout(self.message_s(float(first)))
            every = np.arange(len(nbytes))
            timer.callbacks.append(lambda _: self._deliver(every, on_delivered))
            return
        for size in np.unique(nbytes):
            which = np.flatnonzero(nbytes == size)
            timer = self.env.timeout(self.message_s(float(size)))
            timer.callbacks.append(lambda _, which=which: self._deliver(which, on_delivered))

    def _deliver(self, which: np.ndarray, on_delivered: Delivered) -> None:
        self.messages_delivered += len(which)
        on_delivered(which)

    def run_plan(self, plan: Plan) -> Generator[simpy.Event, Any, float]:
        """Apply the schedule's data, then wait the collective's closed-form time (s)."""
        if plan.buffers is not None:
            for r in range(plan.schedule.n_rounds):
                plan.buffers.run_round(plan.schedule.round(r))
        elapsed = plan.collective.closed_form_s(plan.p, plan.nbytes, self.alpha_s, self.beta_s)
        yield self.env.timeout(elapsed)
        return elapsed
