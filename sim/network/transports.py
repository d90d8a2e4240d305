"""Transports: how a message gets from one process to another over a fabric, with presets.

A fabric (:mod:`sim.network.fabrics`) is the wire and the NIC's own stack; a transport is the
software on each end. ``cluster.transport`` picks one:

* ``mpi``: today's behaviour. The MPI library drives the fabric's native stack: the
  fabric's per-message overhead ``o`` (LogGP) and its kernel copies per byte
  (``stack_Bps``: TCP fabrics; none on RDMA fabrics).
* ``grpc``: a remote procedure call over HTTP/2 over kernel TCP, as TensorFlow's distributed
  runtime sends tensors. Each end pays a socket call (``overhead_s``), gRPC's per-call work
  (``rpc_s``: the call object, the completion queue, HPACK headers), a kernel copy per byte
  (``copy_Bps``), and the sender serialises (``serialize_Bps``), the receiver deserialises
  (``deserialize_Bps``). On the wire every message carries its HEADERS frames and gRPC's
  length prefix (``header_bytes``) and each 16 KiB DATA frame a 9-byte header; HTTP/2 flow
  control lets at most ``window_bytes`` be in flight on a connection, so a stream runs at
  no more than window / RTT (the bound SimGrid puts on a TCP flow: gamma / RTT).
  A push is a unary call too: its sender waits for the response, which the shard's handler
  sends once it has received the push (``answered_calls``); the shard's main loop then
  deserialises and applies it.
* ``rdma``: verbs on registered buffers. Posting a work request and polling its completion
  is the whole per-message cost, nothing is copied, and a pull is a one-sided RDMA read that
  the server's CPU never sees (``one_sided_pulls``).

What a message costs with these numbers (the CPU at each end, its bytes on the wire with
the frames, the window's bound on the rate) is :mod:`sim.network.message_cost`'s. So a single
RPC on idle links takes ``send + alpha + wire_bytes(n) beta + receive``.

A transport is a preset name, ``calibrated:PATH`` (``sim calibrate --only transport``), or a
table ``{base = "grpc", rpc_s = 40e-6, ...}`` of :class:`Transport`'s fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sim.calibrated import CALIBRATED, load_profile, write_profile

PROFILE_FORMAT = "sgd-lab.transport-profile/1"
INF = math.inf


@dataclass(frozen=True)
class Transport:
    """One transport's costs. Raises ValueError naming a field that is out of range."""

    name: str
    # per message at each end, s: a socket call (gRPC), posting a work request and polling
    # its completion (RDMA); None: the fabric's overhead_s (the MPI library on its stack)
    overhead_s: float | None = None
    # kernel copies per payload byte at each end, bytes/s; None: the fabric's stack_Bps
    copy_Bps: float | None = None
    rpc_s: float = 0.0  # the RPC framework's work per message at each end, s
    serialize_Bps: float = INF  # the sender encoding the payload, bytes/s
    deserialize_Bps: float = INF  # the receiver decoding it, bytes/s
    header_bytes: float = 0.0  # bytes on the wire per message beyond payload and frames
    frame_bytes: float = 0.0  # bytes of header per frame
    frame_payload_bytes: float = INF  # payload bytes per frame
    window_bytes: float = INF  # flow control: bytes in flight on a connection
    one_sided_pulls: bool = False  # a pull reads the server's memory without its CPU
    # every message is a call with a response: a push's sender waits for the shard's
    # handler to take it and answer (gRPC's unary call); the shard's main loop then unpacks it
    answered_calls: bool = False
    source: str = ""
    # a call after t s of the rank's own work takes reload_s x (1 - exp(-t / reload_tau_s))
    # longer: its RPC path went cold (sim.calibration.transport_bench measures it). It
    # replaces the host's message reload, which MPI's path measured; 0: the host's
    reload_s: float = 0.0
    reload_tau_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("rpc_s", "header_bytes", "frame_bytes", "reload_s", "reload_tau_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"transport {self.name!r}: {name} must be >= 0, got {value}")
        if self.reload_s > 0 and not self.reload_tau_s > 0:
            raise ValueError(f"transport {self.name!r}: a reload_s needs reload_tau_s > 0, "
                             f"got {self.reload_tau_s}")
        if self.overhead_s is not None and not (math.isfinite(self.overhead_s)
                                                and self.overhead_s >= 0):
            raise ValueError(f"transport {self.name!r}: overhead_s must be >= 0 (or null: "
                             f"the fabric's), got {self.overhead_s}")
        for name in ("copy_Bps", "serialize_Bps", "deserialize_Bps", "frame_payload_bytes",
                     "window_bytes"):
            value = getattr(self, name)
            if value is not None and not value > 0:  # also refuses NaN; inf: free
                raise ValueError(f"transport {self.name!r}: {name} must be > 0, got {value}")

    @property
    def on_cpu(self) -> bool:
        """Whether the transport names CPU costs of its own (then they are charged even
        on the ideal host: they are the transport's, not the host's)."""
        return (self.overhead_s is not None or self.copy_Bps is not None or self.rpc_s > 0
                or math.isfinite(self.serialize_Bps) or math.isfinite(self.deserialize_Bps))

    @property
    def windowed(self) -> bool:
        """Whether flow control bounds a connection's rate."""
        return math.isfinite(self.window_bytes)

    @property
    def framed(self) -> bool:
        """Whether messages carry bytes beyond their payload on the wire."""
        return self.header_bytes > 0 or self.frame_bytes > 0


# Every number is approximate and cited; `sim calibrate --only transport` measures this
# machine's gRPC.
REGISTRY: dict[str, Transport] = {
    "mpi": Transport("mpi", source="the fabric's own stack (LogGP o, stack_Bps)"),
    # gRPC over HTTP/2 over kernel TCP. A socket send or receive ~8 us (netperf TCP_RR, as
    # the eth-25g preset); the kernel copies each byte at ~5 GB/s a core (ESnet fasterdata,
    # 100G host tuning, as the TCP fabrics). gRPC's C++ unary ping-pong takes ~100 us a round
    # trip between two VMs (grpc.io "Benchmarking" dashboard, insecure, 1 channel): less
    # 2 x 2 socket calls and a ~20 us wire, ~20 us per end of gRPC's own (rpc_s). A tensor
    # travels as a protobuf bytes field (TensorProto.tensor_content): a copy on each side,
    # ~3 GB/s beyond the caches. Frames: a 9-byte header per DATA frame of at most 16 KiB
    # (RFC 7540 4.1, SETTINGS_MAX_FRAME_SIZE 2^14); per message a request HEADERS frame
    # (~40 B with HPACK's indexed fields), gRPC's 5-byte length prefix and a trailers
    # HEADERS frame (~15 B): 60 B. Flow control: 65,535 B initial window (RFC 7540 6.9.2);
    # gRPC's BDP probing can grow it, which a table's window_bytes models.
    "grpc": Transport("grpc", overhead_s=8e-6, copy_Bps=5e9, rpc_s=20e-6, serialize_Bps=3e9,
                      deserialize_Bps=3e9, header_bytes=60.0, frame_bytes=9.0,
                      frame_payload_bytes=16384.0, window_bytes=65535.0, answered_calls=True,
                      source="grpc.io benchmarking dashboard; RFC 7540; netperf TCP_RR; "
                             "ESnet fasterdata"),
    # RDMA verbs: ~0.5 us per end to post a work request and poll its completion (as the
    # roce-100g preset; Hoefler et al., "LogGP in theory and practice", 2009, ~0.35 us on
    # InfiniBand), zero copy from registered buffers, one-sided reads for pulls (as
    # TensorFlow's verbs transport reads tensors: Jia et al., "Improving the performance of
    # distributed TensorFlow with RDMA", 2018).
    "rdma": Transport("rdma", overhead_s=0.5e-6, copy_Bps=INF, one_sided_pulls=True,
                      source="ConnectX-5 datasheet; Hoefler et al. 2009; Jia et al. 2018"),
}

FIELDS = tuple(f.name for f in fields(Transport))
_CUSTOM_KEYS = {*FIELDS, "base"}


def get_transport(spec: str | Mapping[str, Any] | Transport) -> Transport:
    """A transport from a preset name, ``calibrated:PATH``, a table or a Transport.
    Raises ValueError naming what is wrong (unknown preset or key, unreadable profile)."""
    if isinstance(spec, Transport):
        return spec
    if isinstance(spec, Mapping):
        return transport_from_dict(spec)
    return load_profile(spec, REGISTRY, Transport, PROFILE_FORMAT, what="transport profile",
                        preset="transport", measurements={"measurements", "fits"},
                        defaults=lambda path: {
                            "name": spec,
                            "source": f"calibrated profile {spec.removeprefix(CALIBRATED)}"})


def transport_from_dict(spec: Mapping[str, Any]) -> Transport:
    """A custom transport, e.g. ``{"base": "grpc", "window_bytes": 4194304}``: a preset's
    fields with some replaced, or every field given (``name`` defaults to "custom").
    Raises ValueError naming the key."""
    unknown = set(spec) - _CUSTOM_KEYS
    if unknown:
        raise ValueError(f"custom transport: unknown key(s) {sorted(unknown)}; "
                         f"expected some of {sorted(_CUSTOM_KEYS)}")
    values = {k: _value(k, v) for k, v in spec.items() if k != "base"}
    if "base" in spec:
        base = spec["base"]
        if not isinstance(base, str):
            raise ValueError(f"custom transport: base must be a preset name, got {base!r}")
        found = get_transport(base)
        return replace(found, **{"name": f"{found.name}+custom", **values})
    return Transport(**{"name": "custom", **values})


def _value(key: str, value: Any) -> Any:
    """A table's value as the field takes it. Raises ValueError naming the key."""
    if key in ("name", "source"):
        if not isinstance(value, str):
            raise ValueError(f"custom transport: {key} must be a string, got {value!r}")
        return value
    if key in ("one_sided_pulls", "answered_calls"):
        if not isinstance(value, bool):
            raise ValueError(f"custom transport: {key} must be true or false, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"custom transport: {key} must be a number, got {value!r}")
    return float(value)


def save_transport(path: str | Path, transport: Transport, **extra: Any) -> Path:
    """Write ``transport`` as a profile ``cluster.transport = "calibrated:PATH"`` reads
    (``extra``: ``measurements``, ``fits``)."""
    return write_profile(Path(path), transport, PROFILE_FORMAT, **extra)
