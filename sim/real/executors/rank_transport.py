"""Which software carries a real run's messages between ranks: MPI, or gRPC.

``cluster.transport`` names the software between ranks for the simulator
(:mod:`sim.network.transports`); a real run takes it as a choice of message path:

* ``mpi`` (and any transport without RPC work of its own): MPI point-to-point messages,
  as every real strategy sends them;
* ``grpc``, a table based on it, or a calibrated profile of it (a transport whose name
  starts with ``grpc`` or that has a per-call cost ``rpc_s`` > 0): the parameter-server
  strategies' pushes and pulls go over gRPC (:mod:`sim.real.executors.ps_grpc`);
* ``rdma`` (one-sided pulls): refused, this machine has no RDMA hardware.

Pure (no MPI, no gRPC): the parent process checks a config with it before launching.
"""

from __future__ import annotations

from typing import Any

from sim.config import Config
from sim.errors import UserError
from sim.network.transports import get_transport
from sim.training.strategies import make_rules

MPI, GRPC = "mpi", "grpc"


def real_transport(config: Config, source: str = "config") -> str:
    """``"mpi"`` or ``"grpc"``: the message path a real run of ``config`` takes.

    Raises UserError for an RDMA transport (no RDMA hardware here) or a transport that
    cannot be read (an unreadable calibrated profile), one line naming ``cluster.transport``.
    """
    try:
        transport = get_transport(config.cluster.transport)
    except (ValueError, OSError) as exc:  # validated configs never get here; a rank might
        raise UserError(f"{source}: cluster.transport: {exc}") from None
    if transport.one_sided_pulls or transport.name.startswith("rdma"):
        raise UserError(f"{source}: cluster.transport = {transport.name!r}: real runs need "
                        "RDMA hardware, which this machine has none of; simulate it with "
                        "`sim run`")
    if transport.rpc_s > 0 or transport.name.startswith(GRPC):
        return GRPC
    return MPI


def check_transport(config: Config, real: Any, source: str = "config") -> str:
    """The message path of a real run of ``config`` whose strategy's real programs are
    ``real`` (a :class:`~sim.training.strategies.RealProgram`), or UserError naming the key
    that rules it out: a program without that path, cancelled late gradients or failures
    over gRPC. Returns ``"mpi"`` or ``"grpc"``."""
    transport = real_transport(config, source)
    if transport == MPI:
        return transport
    key = f"{source}: cluster.transport = {transport!r}"
    if transport not in real.transports:
        raise UserError(f"{key}: real {config.strategy.kind} runs send their messages over "
                        "MPI only; gRPC carries the parameter-server strategies' pushes and "
                        "pulls (set cluster.transport = \"mpi\")")
    if make_rules(config).cancels_late:
        raise UserError(f"{key} with strategy.late_gradients = \"cancel\": a cancel would "
                        "need a server-to-worker call during the gradient, which the gRPC "
                        "path does not make (use \"drop\", or cluster.transport = \"mpi\")")
    if config.faults.enabled or config.checkpoint.enabled:
        name = "faults.enabled" if config.faults.enabled else "checkpoint.enabled"
        raise UserError(f"{key} with {name}: the gRPC path neither injects failures nor "
                        "keeps checkpoints (use cluster.transport = \"mpi\")")
    return transport


def check_transport_net(transport: str, net: str) -> None:
    """UserError if ``net`` (``--net``) cannot carry ``transport``: gRPC connects over
    127.0.0.1, which an emulated network's namespaces do not share."""
    if transport == GRPC and net != "shm":
        raise UserError(f"--net {net} with cluster.transport = 'grpc': the gRPC path "
                        "connects the ranks over 127.0.0.1, which the emulated network's "
                        "namespaces do not share (use --net shm, or cluster.transport = "
                        "\"mpi\")")
