"""CPU costs of a rank's activities besides its gradient: host profiles and their presets.

A real rank does more than compute gradients (Li et al., OSDI 2014, size parameter servers
by CPU for this reason): it gathers its mini-batch rows, applies updates, copies messages in
and out of buffers, runs its framework's code around every message and every step, and a
server sums and applies every push it receives. Each costs CPU time on the rank's core:

    data     = rows x copy_row_s + batch bytes gathered / copy_Bps
    table    = table_call_s + rows x table_row_s + bytes / table_Bps   (an embedding
               table's rows gathered into or scattered out of a message by their ids)
    row step = table_step_call_s + rows x table_step_row_s + bytes / table_step_Bps
               (a sparse step: the mean of the pushes' rows and the rows' optimizer step)
    unique   = unique_call_s + ids x unique_id_s   (a batch's distinct ids, before a pull)
    update   = parameter bytes / update_Bps            (an SGD step over those parameters)
    reduce   = bytes summed / reduce_Bps               (gamma of Thakur, Rabenseifner and
                                                        Gropp 2005: gamma = 1 / reduce_Bps)
    message  = :mod:`sim.network.message_cost` (with the host's message_s and
               message_Bps at each end)
    step     = step_s                                  (the framework, once per update)

``message_s`` and ``message_Bps`` are the host's (Python, MPI library, buffer copies beyond
what the wire's bandwidth already charges); data, update and reduce also have a constant per
call (``*_call_s``: Python around the kernel);
``stack_s`` and ``stack_Bps`` are the network stack on the CPU (LogGP's o: Alexandrov et
al. 1995): a TCP socket costs a system call per message and a kernel copy per byte, RDMA
verbs post a work request and copy nothing. They are the fabric's under the ``mpi``
transport and the transport's own otherwise, which also adds its per-message work
(``rpc_s``) and (de)serialisation (:mod:`sim.network.transports`). Every formula of a message,
its CPU at each end and its wire, is :mod:`sim.network.message_cost`'s: :func:`cpu_costs`
hands it the host's two numbers.

A host profile is a preset name or ``calibrated:PATH`` (JSON written by ``sim calibrate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import load_profile, write_profile
from sim.network.fabrics import Fabric, get_fabric
from sim.network.message_cost import MessageCpu, message_cpu, parts
from sim.network.transports import Transport, get_transport

PROFILE_FORMAT = "sgd-lab.host-profile/1"


@dataclass(frozen=True)
class HostProfile:
    """CPU rates and constants of one core of a host. Raises ValueError when out of range."""

    name: str
    copy_Bps: float  # memcpy of a message or of batch rows, bytes/s
    update_Bps: float  # an SGD step over parameters, parameter bytes/s
    reduce_Bps: float  # a += b over gradients, bytes of b/s (1 / gamma)
    message_s: float  # framework and MPI-library code per message, at each end
    step_s: float  # framework code per update (loop, bookkeeping)
    slice_s: float  # the scheduler's time slice when ranks share a core
    # a sleeping waiter (sim real --wait sleep) spins poll_spin_s, then naps: it notices what
    # it waits for at the end of a nap, every poll_s (the nap and the wake-up after it)
    poll_spin_s: float = 0.0
    poll_s: float = 0.0
    message_Bps: float = math.inf  # a message's bytes on each end's CPU, beyond the wire
    copy_call_s: float = 0.0  # the constant of each gather (a call into numpy)
    copy_row_s: float = 0.0  # each row a gather fetches (a random access into the data set)
    update_call_s: float = 0.0  # the constant of each SGD step (Python around the kernel)
    reduce_call_s: float = 0.0  # the constant of each sum
    source: str = ""
    # a sleeping rank on a host whose ranks outnumber its cores notices a message
    # notice_base_s + notice_s per rank beyond the cores after it arrives (its nap, then a
    # core); a message over
    # rendezvous_bytes (the MPI library's eager limit) needs a handshake first (LogGPS's
    # synchronisation: Ino, Fujimoto and Hagihara 2001): rendezvous_base_s +
    # rendezvous_s per rank beyond the cores longer, for such sleeping ranks
    notice_s: float = 0.0
    rendezvous_bytes: float = math.inf
    rendezvous_s: float = 0.0
    # ranks waiting for messages take CPU from work on their core: beside k waiters per
    # core work runs 1 + k x spin_share (spinning in MPI) or nap_share (napping) times
    # slower, measured
    spin_share: float = 0.0
    nap_share: float = 0.0
    notice_base_s: float = 0.0
    # a rank's first CPU work after a gap of t > 0 in its CPU activity (a sleep, a nap)
    # reloads what the gap displaced from its caches: reload_base_s + reload_s x (1 -
    # exp(-t / reload_tau_s)) longer (Thiebaut and Stone 1987's reload transient), measured
    reload_s: float = 0.0
    reload_tau_s: float = 0.0
    reload_base_s: float = 0.0
    rendezvous_base_s: float = 0.0  # see rendezvous_s; fitted to real runs (--fit-on)
    # a spinning wait is a gap too (a VM's physical core serves other tenants meanwhile):
    # the first work after one takes reload_spin_base_s + reload_s x (1 - exp(-t /
    # reload_tau_s)) longer, measured; None: a spin is no gap (not measured)
    reload_spin_base_s: float | None = None
    # a rank's first message task (the CPU at its end of a message) after t seconds of its
    # own other work (a gradient, a batch, an update) refetches the message path that work
    # displaced: message_reload_s x (1 - exp(-t / message_reload_tau_s)) longer, measured
    # by sim.calibration.message_reload_bench; 0: not measured, not charged
    message_reload_s: float = 0.0
    message_reload_tau_s: float = 0.0
    # an embedding table's rows gathered into or scattered out of a message by index
    # (table_*), and a sparse step of rows: the mean of the pushes' rows and the rows'
    # optimizer step (table_step_*), each constant + rows x row + bytes / rate, measured
    # through the real runner's code (sim.real.executors.table_shards); None: not
    # measured (a profile from before them): charged as a batch gather, and as a sum and
    # an SGD step over the bytes plus a gather
    table_call_s: float | None = None
    table_row_s: float | None = None
    table_Bps: float | None = None
    table_step_call_s: float | None = None
    table_step_row_s: float | None = None
    table_step_Bps: float | None = None
    # finding the distinct ids of a batch before a pull (a sort: numpy's unique, as
    # TensorFlow's sparse lookups run tf.unique), unique_call_s + ids x unique_id_s; None:
    # not measured, not charged
    unique_call_s: float | None = None
    unique_id_s: float | None = None
    # a parameter server's own code (its rules' bookkeeping and log, Python around its
    # kernels) per push it applies at once (asp, ssp), per push it keeps for a synchronous
    # step (bsp-ps, backup), per step it closes and per pull it answers; measured through
    # the real runner's ServerProtocol (sim.calibration.serve_bench); 0: not measured
    serve_apply_s: float = 0.0
    serve_push_s: float = 0.0
    serve_step_s: float = 0.0
    serve_pull_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("copy_Bps", "update_Bps", "reduce_Bps", "slice_s", "message_Bps",
                     "rendezvous_bytes"):
            value = getattr(self, name)
            if not value > 0:  # also refuses NaN; inf: free
                raise ValueError(f"host profile {self.name!r}: {name} must be > 0, got {value}")
        for name in ("message_s", "step_s", "poll_spin_s", "poll_s", "copy_call_s",
                     "copy_row_s", "update_call_s", "reduce_call_s", "notice_s",
                     "rendezvous_s", "spin_share", "nap_share", "notice_base_s",
                     "reload_s", "reload_tau_s", "reload_base_s", "rendezvous_base_s",
                     "serve_apply_s", "serve_push_s", "serve_step_s", "serve_pull_s",
                     "message_reload_s", "message_reload_tau_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"host profile {self.name!r}: {name} must be >= 0, "
                                 f"got {value}")
        for name in ("table_call_s", "table_row_s", "table_step_call_s", "table_step_row_s",
                     "unique_call_s", "unique_id_s", "reload_spin_base_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"host profile {self.name!r}: {name} must be >= 0, "
                                 f"got {value}")
        for name in ("table_Bps", "table_step_Bps"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"host profile {self.name!r}: {name} must be > 0, "
                                 f"got {value}")
        for amount, tau in (("reload_s", "reload_tau_s"),
                            ("message_reload_s", "message_reload_tau_s")):
            if getattr(self, amount) > 0 and not getattr(self, tau) > 0:
                raise ValueError(f"host profile {self.name!r}: {tau} must be > 0 when "
                                 f"{amount} is, got {getattr(self, tau)}")


INF = math.inf
HOSTS: dict[str, HostProfile] = {
    # No CPU costs and a core for every rank: the model before hosts existed. Closed-form
    # network and strategy tests use it.
    "ideal": HostProfile("ideal", INF, INF, INF, 0.0, 0.0, 3e-3, source="no CPU costs"),
    # One core of the lab's machine by `sim calibrate --concurrency 2`, through the real
    # runner's code paths; a message's cost is what is left beyond the shared-memory
    # fabric's o and bandwidth. The fits, their errors, how they vary between runs and the
    # time-slice measurements: docs/measurements/hosts.md.
    "epyc-core": HostProfile("epyc-core", copy_Bps=13.1e9, update_Bps=37.6e9,
                             reduce_Bps=44.4e9, message_s=1.76e-6, step_s=9.1e-6,
                             slice_s=3e-3, poll_spin_s=50e-6, poll_s=41e-6,
                             message_Bps=15.9e9, copy_call_s=1.6e-6, copy_row_s=0.25e-6,
                             update_call_s=5.9e-6, reduce_call_s=1.8e-6,
                             serve_apply_s=11.1e-6, serve_push_s=1.8e-6,
                             serve_step_s=69.4e-6, serve_pull_s=10.7e-6,
                             source="measured here (sim calibrate, 2026-11-23, 2-core EPYC "
                                    "VM; the serve_* costs 2026-11-27)"),
}


# fields a profile may leave out (written by later versions of `sim calibrate`)
OPTIONAL = ("table_call_s", "table_row_s", "table_Bps", "table_step_call_s",
            "table_step_row_s", "table_step_Bps", "unique_call_s", "unique_id_s",
            "rendezvous_base_s", "serve_apply_s", "serve_push_s", "serve_step_s",
            "serve_pull_s", "reload_spin_base_s", "message_reload_s", "message_reload_tau_s")

# what `sim calibrate` records beside the fields: fits, samples and how they were measured
MEASUREMENTS = {"fits", "step", "poll", "rendezvous", "share", "reload", "message_reload",
                "serving",
                "measured_through", "repeats", "serving_from_runs",
                "load_average", "cpu_fraction", "fabric_overhead_s", "fabric_Bps", "quick",
                "concurrency"}


def load_host(spec: str) -> HostProfile:
    """A preset name or ``calibrated:PATH``, which has every number of :class:`HostProfile`.
    Raises ValueError naming the missing key."""
    return load_profile(spec, HOSTS, HostProfile, PROFILE_FORMAT, what="host profile",
                        measurements=MEASUREMENTS,
                        required=[f.name for f in fields(HostProfile)
                                  if f.name not in ("name", "source", *OPTIONAL)],
                        defaults=lambda path: {"name": path.stem, "source": str(path)})


def save_host_profile(path: str | Path, profile: HostProfile, **extra: Any) -> None:
    """Write a profile that ``cluster.host = "calibrated:PATH"`` reads (``extra``: how it was
    measured: fits, errors, samples; its keys are :data:`MEASUREMENTS`)."""
    write_profile(Path(path), profile, PROFILE_FORMAT, **extra)


def cpu_costs(host: HostProfile, fabric: Fabric, transport: Transport | None = None) -> CpuCosts:
    """The costs of ``host`` with a message's CPU from :func:`sim.network.message_cost.
    message_cpu` (``transport``'s network stack, or MPI's on ``fabric`` where None); the
    ideal host pays nothing under MPI."""
    return CpuCosts(host, message_cpu(host.message_s, host.message_Bps, fabric, transport,
                                      free_host=host is HOSTS["ideal"]))


@dataclass(frozen=True)
class CpuCosts:
    """Seconds of CPU per activity for a host profile; a message's are ``message``'s
    (:func:`cpu_costs` builds them)."""

    host: HostProfile
    # a message's CPU at each end (the host's, the network stack's and the transport's)
    message: MessageCpu

    def data_s(self, nbytes: float, rows: float = 0) -> float:
        """Gathering ``rows`` mini-batch rows of ``nbytes`` in all."""
        return self.host.copy_call_s + rows * self.host.copy_row_s + nbytes / self.host.copy_Bps

    def table_rows_s(self, nbytes: float, rows: float) -> float:
        """Gathering an embedding table's ``rows`` (``nbytes`` of values) into a message, or
        scattering them out of one, by their ids (a batch gather's costs where the profile
        has none of its own)."""
        h = self.host
        if h.table_row_s is None:
            return self.data_s(nbytes, rows)
        return h.table_call_s + rows * h.table_row_s + nbytes / h.table_Bps

    def unique_s(self, ids: float) -> float:
        """Finding the distinct ones among a batch's ``ids`` (0 where not measured)."""
        h = self.host
        if h.unique_id_s is None:
            return 0.0
        return h.unique_call_s + ids * h.unique_id_s

    def table_step_s(self, nbytes: float, rows: float) -> float:
        """A sparse step of ``rows`` table rows (``nbytes`` of values): the mean of the
        pushes' rows and the rows' optimizer step (where the profile has no such costs: a
        sum and an SGD step over the bytes, and a gather of the rows)."""
        h = self.host
        if h.table_step_row_s is None:
            return self.reduce_s(nbytes) + self.update_s(nbytes) + self.data_s(nbytes, rows)
        return h.table_step_call_s + rows * h.table_step_row_s + nbytes / h.table_step_Bps

    def update_s(self, nbytes: float) -> float:
        """An SGD step over ``nbytes`` of parameters."""
        return self.host.update_call_s + nbytes / self.host.update_Bps

    def reduce_s(self, nbytes: float) -> float:
        """Summing ``nbytes`` of gradient into an accumulator (gamma * n, plus the call)."""
        return self.host.reduce_call_s + nbytes / self.host.reduce_Bps

    def applied_push_s(self, nbytes: float) -> float:
        """A server applying a push of ``nbytes`` at once (asp, ssp): its rules' code and
        the SGD step."""
        return self.host.serve_apply_s + self.update_s(nbytes)

    def kept_push_s(self, nbytes: float) -> float:
        """A server keeping a push of ``nbytes`` for a synchronous step: its rules' code
        and the sum into the step."""
        return self.host.serve_push_s + self.reduce_s(nbytes)

    def closed_step_s(self, nbytes: float) -> float:
        """A server closing a synchronous step over ``nbytes`` of parameters: its rules'
        code, the mean's pass and the SGD step."""
        return self.host.serve_step_s + self.reduce_s(nbytes) + self.update_s(nbytes)

    def round_s(self, rnd: Any, endpoints: int,
                itemsize: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """CPU seconds of each endpoint in one round of a collective (a
        :class:`sim.network.schedule.Round` of ``itemsize``-byte elements): posting what it
        sends, and receiving what it gets, plus summing it in ``SUM`` rounds (Thakur et
        al.'s gamma term)."""
        nbytes = rnd.count * itemsize
        message = self.message
        received = message.receive_s(nbytes) + (self.reduce_s(nbytes) if rnd.op == "sum"
                                                else 0.0)
        return (np.bincount(rnd.src, message.send_s(nbytes), endpoints),
                np.bincount(rnd.dst, received, endpoints))

    def collective_s(self, schedule: Any, itemsize: float) -> float:
        """CPU seconds of a collective on its busiest path: a round ends with its slowest
        endpoint (:meth:`round_s`; (p - 1) / p n gamma of summing for the ring).
        ``schedule``: :class:`sim.network.schedule.Schedule`, ``itemsize``: bytes per
        element on the wire."""
        if not self.charged:
            return 0.0
        total = 0.0
        for r in range(schedule.n_rounds):
            rnd = schedule.round(r)
            if len(rnd):
                sent, received = self.round_s(rnd, schedule.n_endpoints, itemsize)
                total += float((sent + received).max())
        return total

    @property
    def step_s(self) -> float:
        return self.host.step_s

    @property
    def charged(self) -> bool:
        """True: ranks pay CPU costs (any host but the ideal one, or a transport with
        costs of its own); LogGP o is then paid on the CPU, so the wire must not charge it
        again."""
        return self.host is not HOSTS["ideal"] or self.message.transport_charged


def message_parts(transport: str | Transport, fabric: str | Fabric, nbytes: float,
                  host: str = "ideal") -> dict[str, float]:
    """Seconds of one message of ``nbytes`` payload bytes alone on idle links through one
    switch, both ends summed, by part (:func:`sim.network.message_cost.parts`), for presets
    or profiles by name. Raises ValueError for an unknown transport, fabric or host."""
    transport, fabric = get_transport(transport), get_fabric(fabric)
    costs = cpu_costs(load_host(host), fabric, transport)
    return parts(costs.message, fabric, transport, nbytes, costs.charged)
