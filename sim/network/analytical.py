"""Analytical network: alpha-beta costs, each host's link a queue, the flow model's API.

A message of n bytes from host a to host b takes n beta on a's link to the switch (its
NIC's send side) and n beta on b's link from the switch (the receive side). Each side
serves what it is given in the order it was sent (FIFO), behind what it still has to
carry, and the two sides are booked independently (the switch buffers what the receiver
cannot take yet). The message arrives alpha after both sides are through:

    arrival = now + alpha + max(send backlog + n beta, receive backlog + n beta)

with alpha = 2 o + 2 L (one non-blocking switch, see :mod:`sim.network.message_cost`). This is
LogGP's gap per byte G paid at the sending and at the receiving NIC (Alexandrov, Ionescu,
Schauser and Scheiman 1995), with o and L folded into alpha. So:

* alone, a message costs alpha + n beta; messages that share no host do not interact;
* k messages of n bytes sent at one instant to one host arrive at alpha + i n beta,
  i = 1..k, the last at alpha + k n beta: the incast closed form of
  :class:`sim.network.collectives.ParameterServer` (the flow model shares the link
  fairly and delivers all k at that last instant);
* p workers each sending n / S bytes to each of S servers are through at
  alpha + max(p, S) n / S beta, again its closed form. Booking both sides of a message
  at one start time instead would add a pipeline fill of (S - 1) n / S beta.

Booking the sides independently can be optimistic: a receive side may be booked while the
sender is still busy, so a later message to that host can pass (by at most the sender's
backlog). A batch sent on idle links ends at alpha + beta x the bytes on its busiest link
side, which no schedule can beat. A message from a host to itself queues on that host's
two sides like any other (the flow model uses no link for it).

Hosts that share a NIC (the topology's ``ports``, ``cluster.nics_per_host``) queue on its
port's two sides, so two of them sending at once take twice as long; a collective's closed
form does not see the sharing.

The switch fabric's core is ignored: the topology is kept for placements only, so an
oversubscribed leaf-spine uplink or a ring's multi-hop path costs nothing extra here (the
flow model charges them), and each host has one link of the fabric's rate.

A collective costs its textbook closed form (Thakur, Rabenseifner and Gropp 2005),
computed in O(1): it starts once its hosts' links are free and holds them that long. The
data still moves: the schedule's rounds are applied in order, so the results are
bit-for-bit those of the flow model.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from simpy.events import NORMAL

from sim.network.fabrics import Fabric
from sim.network.flow import Delivered
from sim.network.message_cost import alpha_s, beta_s, path_window_Bps, wire_bytes
from sim.network.topology import Topology
from sim.network.transports import REGISTRY, Transport

if TYPE_CHECKING:
    from sim.network.collectives import Plan


class _Side:
    """One direction of every host's link, a FIFO queue: what it has left to carry.

    A host's queue is kept as the start of its busy period (s) and the bytes booked since,
    not as one finishing time: messages sent at one instant then end at exactly
    now + (total bytes) beta, as the closed forms compute it.
    """

    def __init__(self, n_hosts: int, beta_s: float) -> None:
        self.beta_s = beta_s
        self.since_s = np.zeros(n_hosts)  # start of each host's busy period, s
        self.bytes = np.zeros(n_hosts)  # bytes booked on it since then
        self.latest_s = 0.0  # by then every host's queue is empty, s

    def free_s(self, hosts: np.ndarray, now: float) -> float:
        """When the last of ``hosts`` has carried everything booked on it (s, >= now)."""
        if self.latest_s <= now:  # all idle (as between collectives): skip the O(p) gather
            return now
        return max(float((self.since_s[hosts] + self.bytes[hosts] * self.beta_s).max()), now)

    def hold(self, hosts: np.ndarray, until_s: float) -> None:
        """Nothing else crosses these hosts' links until ``until_s`` (s)."""
        self.since_s[hosts], self.bytes[hosts] = until_s, 0.0
        self.latest_s = max(self.latest_s, until_s)

    def book(self, host: int, nbytes: float, now: float) -> float:
        """Queue one message; seconds from now until its last byte has crossed."""
        since, booked = self.since_s.item(host), self.bytes.item(host)
        if since + booked * self.beta_s <= now:  # idle: a new busy period starts now
            since, booked = now, 0.0
            self.since_s[host] = now
        booked += nbytes
        self.bytes[host] = booked
        self.latest_s = max(self.latest_s, since + booked * self.beta_s)
        return (since - now) + booked * self.beta_s


class AnalyticalNetwork:
    """Hosts exchanging messages at alpha + n beta, queued on each host's own link."""

    model = "analytical"

    def __init__(self, env: simpy.Environment, fabric: Fabric, topology: Topology,
                 transport: Transport | None = None) -> None:
        self.env, self.fabric, self.topology = env, fabric, topology
        # the transport's frames are bytes on the wire; its window is a rate no message
        # beats (on one switch's round trip: the topology's core is ignored here)
        self.transport = transport if transport is not None else REGISTRY["mpi"]
        self.window_Bps = path_window_Bps(self.transport, fabric)
        self.alpha_s = alpha_s(fabric)
        self.beta_s = beta_s(fabric)
        self.sending = _Side(topology.n_hosts, self.beta_s)  # host -> switch
        self.receiving = _Side(topology.n_hosts, self.beta_s)  # switch -> host
        # hosts sharing a NIC queue on its port (the topology's ``ports``)
        self.port = topology.ports.tolist()
        self.messages_delivered = 0
        self.flow_log = None  # no flows to log: the trace's link tracks are the flow model's
        self.sent = 0  # sends that made link flows (FlowNetwork.sent): none here

    def start_log(self, limit: int, window_s: tuple[float, float] = (0.0, math.inf),
                  sample_limit: int = 0) -> None:
        """Nothing to log (see :meth:`FlowNetwork.start_log`)."""

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        """One message; the event fires at delivery with the delivery time as value.
        Raises ValueError for a host outside the topology."""
        return self._all_arrived(self._book([src], [dst], [float(nbytes)]))

    def send_all(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> simpy.Event:
        """Messages as :meth:`send_many`; the event fires when the last has arrived, with
        that time as value. Raises ValueError for a host outside the topology."""
        return self._all_arrived(self._book(np.asarray(src).tolist(), np.asarray(dst).tolist(),
                                            np.asarray(nbytes).tolist()))

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Delivered) -> None:
        """Messages src[i] -> dst[i] (hosts) of nbytes[i] bytes, all sent now, queued in
        array order behind what the links already carry.

        ``on_delivered(indices)`` is called at each instant some of them arrive.
        Raises ValueError for a host outside the topology.
        """
        arrivals = self._book(np.asarray(src).tolist(), np.asarray(dst).tolist(),
                              np.asarray(nbytes).tolist())
        for delay, which in arrivals.items():
            self._deliver_after(delay, np.array(which), on_delivered)

    def _book(self, src: list[int], dst: list[int], nbytes: list[float]) -> dict[float, list[int]]:
        """Queue the messages on their hosts' link sides; delay (s) -> the messages that
        arrive then, in index order. Raises ValueError for a host outside the topology."""
        # plain Python per message: batches here are a few shards, where numpy's per-call
        # cost would dominate (a numpy range check alone costs more than a message)
        if not src:
            return {}
        hosts = self.topology.n_hosts
        if min(min(src), min(dst)) < 0 or max(max(src), max(dst)) >= hosts:
            raise ValueError(f"hosts must be in [0, {hosts}), got src {src} dst {dst}")
        now, alpha = self.env.now, self.alpha_s
        sending, receiving = self.sending.book, self.receiving.book
        wire, window, port = partial(wire_bytes, self.transport), self.window_Bps, self.port
        arrivals: dict[float, list[int]] = {}
        for i, (a, b, payload) in enumerate(zip(src, dst, nbytes, strict=True)):
            size = wire(payload)
            delay = alpha + max(sending(port[a], size, now), receiving(port[b], size, now),
                                size / window)
            arrivals.setdefault(delay, []).append(i)
        return arrivals

    def _all_arrived(self, arrivals: dict[float, list[int]]) -> simpy.Event:
        """An event scheduled for the last arrival (fired now when there are none)."""
        done = self.env.event()
        if not arrivals:
            return done.succeed(self.env.now)
        self.messages_delivered += sum(map(len, arrivals.values()))
        delay = max(arrivals)
        done._ok, done._value = True, self.env.now + delay
        self.env.schedule(done, NORMAL, delay)
        return done

    def _deliver_after(self, delay_s: float, which: np.ndarray, on_delivered: Delivered) -> None:
        timer = self.env.timeout(delay_s)
        timer.callbacks.append(lambda _: self._deliver(which, on_delivered))

    def _deliver(self, which: np.ndarray, on_delivered: Delivered) -> None:
        self.messages_delivered += len(which)
        on_delivered(which)

    def run_plan(self, plan: Plan) -> Generator[simpy.Event, Any, float]:
        """Apply the schedule's data, then wait for the hosts' links and the collective's
        closed-form time; returns both together (s)."""
        if plan.buffers is not None:
            for r in range(plan.schedule.n_rounds):
                plan.buffers.run_round(plan.schedule.round(r))
        now = self.env.now
        # on idle links (as in every allreduce strategy: nothing else is on the network)
        # the wait is 0 and the time is exactly the closed form (which gives every rank a
        # NIC of its own: ranks sharing one are charged as if they did not)
        ports = self.topology.ports[plan.hosts]
        start = max(self.sending.free_s(ports, now), self.receiving.free_s(ports, now))
        elapsed = (start - now) + plan.collective.closed_form_s(plan.p, plan.nbytes,
                                                                 self.alpha_s, self.beta_s)
        self.sending.hold(ports, now + elapsed)
        self.receiving.hold(ports, now + elapsed)
        yield self.env.timeout(elapsed)
        return elapsed
