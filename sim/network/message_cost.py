"""A message's cost, in one place: CPU at each end, bytes on the wire, time on the wire.

A message of n payload bytes from one rank to another, alone on idle links, costs

    sender CPU   = send_s(n)    = m + s + r + n / M + n / S + n / Z
    wire         = alpha + wire_bytes(n) beta,  alpha = 2 o + hops L,  beta = 1 / B
    receiver CPU = receive_s(n) = m + s + r + n / M + n / S + n / D

- ``m``, ``M``: the host's framework and MPI-library code per message and its per-byte
  copies beyond the wire (:class:`sim.training.host_costs.HostProfile`'s ``message_s``,
  ``message_Bps``);
- ``s``, ``S``: the network stack on the CPU (LogGP's o and a kernel copy per byte:
  Alexandrov et al. 1995): the transport's own, or the fabric's where the transport names
  none (``mpi``), see :func:`message_cpu`;
- ``r``, ``Z``, ``D``: the transport's RPC work per message and its (de)serialisation rates
  (:mod:`sim.network.transports`);
- ``o``, ``L``, ``B``: the fabric's per-message overhead at each end, per-hop latency and
  achievable bandwidth (:mod:`sim.network.fabrics`); a path on one switch has
  :data:`~sim.network.fabrics.SWITCH_HOPS` hops. Where the ranks pay o on their cores (a
  host with CPU costs, or a transport with costs of its own) the wire does not pay it again
  (:func:`wire_fabric`);
- ``wire_bytes(n)``: the payload with the transport's headers and frames; a transport with
  flow control moves at most window / RTT (:func:`window_Bps`).

The flow model (:mod:`sim.network.flow`) shares links max-min rather than charging
``wire_bytes(n) beta`` alone, but pays alpha the same way: o before the first byte
(:func:`posted_s`), hops L + o after the last (:func:`arrival_s`). The analytical model
(:mod:`sim.network.analytical`) charges alpha + n beta on each host's link, and the
collectives' closed forms (:mod:`sim.network.collectives`) are written in alpha and beta.
A parameter server's pulls and pushes are such messages to each shard that owns a part
(:func:`shard_costs`), a pull preceded by a :data:`REQUEST_BYTES` request. What a message
carries (which layers leave together: :mod:`sim.training.messages`; which table rows:
:mod:`sim.training.embedding_traffic`) is the method's; what it costs is here.

Why here, in the network package: the network models need the wire part (framing, the
window's bound, alpha and beta), and ``sim.network`` sits below ``sim.training``, which must
not be imported from here. The CPU side needs only two numbers of a host profile (``m`` and
``M``), which :func:`sim.training.host_costs.cpu_costs` passes in as plain values, so every
formula of a message lives in this module and nothing from a higher layer is needed.
Fabrics and transports keep only their parameters and presets with sources.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from sim.network.fabrics import SWITCH_HOPS, Fabric
from sim.network.transports import Transport

INF = math.inf
REQUEST_BYTES = 64  # a pull request: its header and key range (or table names)
PARTS = ("calls", "copies", "serialisation", "wire")  # of one message, :func:`parts`


# ---- the wire ---------------------------------------------------------------------------

def alpha_s(fabric: Fabric, hops: int = SWITCH_HOPS) -> float:
    """End-to-end cost of an empty message over ``hops`` links: 2 o + hops L (s)."""
    return 2 * fabric.overhead_s + hops * fabric.latency_s


def beta_s(fabric: Fabric) -> float:
    """Seconds per byte on one uncontended link: 1 / B."""
    return 1.0 / fabric.bandwidth_Bps


def idle_s(fabric: Fabric, nbytes: float, hops: int = SWITCH_HOPS) -> float:
    """A message of ``nbytes`` wire bytes alone over ``hops`` links: alpha + n beta (s)."""
    return alpha_s(fabric, hops) + nbytes * beta_s(fabric)


def half_bytes(fabric: Fabric) -> float:
    """Hockney's n_1/2: the message size whose wire time equals alpha, where a message
    reaches half the link's bandwidth: alpha B (bytes, one switch)."""
    return alpha_s(fabric) * fabric.bandwidth_Bps


def posted_s(fabric: Fabric) -> float:
    """What passes before a message's first byte leaves: the sender's o (s)."""
    return fabric.overhead_s


def arrival_s(fabric: Fabric, hops: Any) -> Any:
    """What passes after a message's last byte leaves until it is received over ``hops``
    links (a number or an array): hops L + the receiver's o (s)."""
    return hops * fabric.latency_s + fabric.overhead_s


def wire_fabric(fabric: Fabric, on_cpu: bool) -> Fabric:
    """The fabric the wire is charged on: without o where the ranks' cores pay it
    (``on_cpu``), so it is not paid twice."""
    return dataclasses.replace(fabric, overhead_s=0.0) if on_cpu else fabric


def wire_bytes(transport: Transport, nbytes: Any) -> Any:
    """Bytes on the wire for messages of ``nbytes`` of payload (a number or an array): the
    payload, the transport's per-message header and a frame header per (partly) filled
    frame. An empty message stays empty: it is a signal the simulator sends no flow for."""
    if not transport.framed:
        return nbytes
    frames = 1.0 if not math.isfinite(transport.frame_payload_bytes) else np.maximum(
        1.0, np.ceil(np.divide(nbytes, transport.frame_payload_bytes)))
    wire = np.where(np.greater(nbytes, 0),
                    np.add(nbytes, transport.header_bytes + frames * transport.frame_bytes),
                    nbytes)
    return float(wire) if np.ndim(wire) == 0 else wire


def rtt_s(transport: Transport, hops: int, latency_s: float, overhead_s: float) -> float:
    """A round trip of an empty frame over ``hops`` links each way: 2 (hops L + 2 o), o the
    transport's per-message overhead or, where it has none, ``overhead_s`` (the fabric's)."""
    o = overhead_s if transport.overhead_s is None else transport.overhead_s
    return 2 * (hops * latency_s + 2 * o)


def window_Bps(transport: Transport, rtt: float) -> float:
    """The most a connection carries with a round-trip time of ``rtt`` s: window / RTT
    (bytes/s; inf without flow control or with no delay)."""
    if not transport.windowed or rtt <= 0:
        return INF
    return transport.window_bytes / rtt


def path_window_Bps(transport: Transport, fabric: Fabric, hops: int = SWITCH_HOPS) -> float:
    """The transport's window bound on a path of ``hops`` links of ``fabric`` (bytes/s)."""
    return window_Bps(transport, rtt_s(transport, hops, fabric.latency_s, fabric.overhead_s))


# ---- the CPU at each end ----------------------------------------------------------------

@dataclass(frozen=True)
class MessageCpu:
    """Seconds of CPU one message costs at each end (module docstring's m, M, s, S, r, Z,
    D), and how the transport's calls behave."""

    host_s: float = 0.0  # m: the host's framework and MPI-library code per message
    host_Bps: float = INF  # M: the host's copies per byte beyond the wire, as a rate
    stack_s: float = 0.0  # s: the network stack's per-message CPU cost
    stack_Bps: float = INF  # S: the network stack's per-byte CPU cost, as a rate
    rpc_s: float = 0.0  # r: the transport's work per message
    serialize_Bps: float = INF  # Z: the sender encoding a message's bytes
    deserialize_Bps: float = INF  # D: the receiver decoding them
    one_sided_pulls: bool = False  # a pull reads the servers' memory without their CPU
    transport_charged: bool = False  # the transport's costs are paid even on a free host
    answered_calls: bool = False  # a push is a call: a handler takes it and answers at once
    # the transport's own reload of its path after a rank's work (Transport.reload_s),
    # replacing the host's message reload; 0: the host's
    reload_s: float = 0.0
    reload_tau_s: float = 0.0

    def message_s(self, nbytes: Any) -> Any:
        """What both ends of one message of ``nbytes`` pay, each (:meth:`send_s` and
        :meth:`receive_s` add the (de)serialisation)."""
        return (self.host_s + self.stack_s + self.rpc_s
                + nbytes / self.host_Bps + nbytes / self.stack_Bps)

    def send_s(self, nbytes: Any) -> Any:
        """Sending one message of ``nbytes``: posting it and serialising its payload."""
        return self.message_s(nbytes) + nbytes / self.serialize_Bps

    def receive_s(self, nbytes: Any) -> Any:
        """Receiving one message of ``nbytes``: completing it and deserialising."""
        return self.message_s(nbytes) + nbytes / self.deserialize_Bps

    def handled_s(self, nbytes: Any) -> Any:
        """A call's handler taking a push of ``nbytes`` and sending its empty response (0
        without answered calls)."""
        if not self.answered_calls:
            return 0.0
        return self.message_s(nbytes) + self.send_s(0.0)

    def unpacked_s(self, nbytes: Any) -> Any:
        """A shard's main loop taking a push of ``nbytes``: the whole receipt, or, when a
        handler took it (:meth:`handled_s`), its deserialisation only."""
        if self.answered_calls:
            return nbytes / self.deserialize_Bps
        return self.receive_s(nbytes)

    def requests_s(self, shards: int) -> float:
        """A worker posting a pull request (:data:`REQUEST_BYTES`) to each of ``shards``."""
        return shards * self.send_s(REQUEST_BYTES)

    def answer_s(self, nbytes: Any, admit_s: float) -> Any:
        """A shard answering a pull of ``nbytes`` from it: receiving the request, admitting
        it (``admit_s``, its rules' code), then copying out and sending its part."""
        return self.receive_s(REQUEST_BYTES) + admit_s + self.send_s(nbytes)


def message_cpu(host_s: float, host_Bps: float, fabric: Fabric,
                transport: Transport | None = None, free_host: bool = False) -> MessageCpu:
    """The CPU of a message on a host that pays ``host_s`` per message and copies at
    ``host_Bps``, with the network stack moved onto the CPU: ``transport``'s (None: MPI's),
    which is ``fabric``'s o per message and per-byte copies where the transport names none
    of its own. A ``free_host`` (the ideal one) pays nothing under MPI; a transport with
    costs of its own charges them on any host."""
    if transport is None or not transport.on_cpu:
        if free_host:
            return MessageCpu(host_s, host_Bps)
        return MessageCpu(host_s, host_Bps, fabric.overhead_s, fabric.stack_Bps)
    stack_s = fabric.overhead_s if transport.overhead_s is None else transport.overhead_s
    stack_Bps = fabric.stack_Bps if transport.copy_Bps is None else transport.copy_Bps
    return MessageCpu(host_s, host_Bps, stack_s, stack_Bps, transport.rpc_s,
                      transport.serialize_Bps, transport.deserialize_Bps,
                      transport.one_sided_pulls, True, transport.answered_calls,
                      transport.reload_s, transport.reload_tau_s)


# ---- a message and the shards of a parameter server -------------------------------------

class ShardCosts(NamedTuple):
    """The CPU side of one kind of message between a worker and a parameter server's
    shards, its bytes split over them (:func:`shard_costs`)."""

    parts: np.ndarray  # bytes per shard (read-only)
    owners: np.ndarray  # the shards that take part
    owned: np.ndarray  # their bytes
    sender_s: float  # the worker's CPU for its messages to (a push) or from (a pull) the owners
    request_s: float  # a pull: the worker's CPU for its requests
    shard_s: np.ndarray  # each owner's CPU: receiving and applying, or answering a pull
    shards_busy: bool  # whether any owner spends CPU at all


def shard_costs(cpu: MessageCpu, parts: np.ndarray, apply_s: Callable[[Any], Any] | None,
                admit_s: float) -> ShardCosts:
    """The costs of a message of ``parts`` bytes per shard: a push when ``apply_s`` (a
    shard's CPU to apply its part of n bytes) is given (the worker sends, each owner
    receives and applies), else a pull (each owner answers, :meth:`MessageCpu.answer_s`
    with ``admit_s`` its rules' code, none for a one-sided read; the worker receives)."""
    owners = parts > 0
    owned = parts[owners]
    if apply_s is not None:
        shard_s = np.array([cpu.unpacked_s(p) + apply_s(p) for p in owned])
        worker_s = cpu.send_s(owned)
    else:
        shard_s = (np.zeros(len(owned)) if cpu.one_sided_pulls
                   else cpu.answer_s(owned, admit_s))
        worker_s = cpu.receive_s(owned)
    return ShardCosts(parts, owners, owned, float(worker_s.sum()),
                      cpu.requests_s(int(owners.sum())), shard_s, bool(np.any(shard_s > 0)))


# ---- one message, whole -----------------------------------------------------------------

def parts(cpu: MessageCpu, fabric: Fabric, transport: Transport, nbytes: float,
          on_cpu: bool) -> dict[str, float]:
    """Seconds of one message of ``nbytes`` payload bytes alone on idle links through one
    switch, both ends summed, by part (:data:`PARTS`); ``on_cpu``: the ranks pay o on their
    cores (:func:`wire_fabric`). Their sum is the message's time: the sender's CPU, then
    the wire, then the receiver's CPU."""
    wire = wire_fabric(fabric, on_cpu)
    rtt = rtt_s(transport, SWITCH_HOPS, fabric.latency_s, wire.overhead_s)
    rate = min(fabric.bandwidth_Bps, window_Bps(transport, rtt))
    return {
        "calls": 2 * (cpu.host_s + cpu.stack_s + cpu.rpc_s),
        "copies": 2 * nbytes * (1 / cpu.host_Bps + 1 / cpu.stack_Bps),
        "serialisation": nbytes * (1 / cpu.serialize_Bps + 1 / cpu.deserialize_Bps),
        "wire": alpha_s(wire) + wire_bytes(transport, float(nbytes)) / rate,
    }


def describe_fabric(fabric: Fabric) -> dict[str, Any]:
    """JSON-ready fields of a fabric, with its bandwidth and one-switch alpha."""
    return {**dataclasses.asdict(fabric), "bandwidth_Bps": fabric.bandwidth_Bps,
            "alpha_s": alpha_s(fabric)}
