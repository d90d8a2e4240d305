"""This machine's gRPC as a transport profile (``sim calibrate --only transport``).

``cluster.transport = "calibrated:PATH"`` reads the profile
(:func:`sim.network.transports.get_transport`). The transport model charges each end of an
n-byte message::

    send    = overhead_s + rpc_s + n / copy_Bps + n / serialize_Bps
    receive = overhead_s + rpc_s + n / copy_Bps + n / deserialize_Bps

What is measured, on this machine:

* ping-pong: gRPC (grpcio, Python) over loopback between two processes. A server process
  (``python -m sim.calibration.transport_bench --serve``: a generic unary handler that
  hands each request to the main thread, which answers with the request's own bytes, as the
  real parameter server's main loop answers its handlers; no (de)serialiser) and this
  process, the client, which sends ``bytes`` of each size and waits for the echo. The
  connection is warmed first with round trips of the largest size (HTTP/2's BDP probing
  grows the flow-control window from its initial 64 KiB; the first large messages wait on
  it), then the sizes are timed in rounds, one round trip of each size a round (so a burst
  of other load touches every size alike), and each size's median is kept.
* a call after the rank's own work: the same echo of 24 KB after the client has summed a
  4 MiB array for 0, 0.1, 0.3, 1 and 3 ms (the works interleaved round by round), each
  work's median. In a run a push follows a gradient and a batch, and its call finds gRPC's
  path cold: on this machine 64-287 us slower than back to back (2026-11-29).
* serialisation, in this process: a float64 array to bytes (``ndarray.tobytes``, what the
  sender encodes) and bytes to an array (``np.frombuffer(data, np.float64).copy()``, what
  the receiver decodes; copying into a preallocated array is timed too and kept in the
  file), for large arrays, each size's median.

The fits, by :func:`sim.calibration.fit_fabric.fit_log` (least squares on log ratios: a 2x
error counts the same for 8 B and 4 MiB):

* ``RTT(n) = 2 (2 c + n p)``: a request and its echo, each paying a per-message constant
  ``c`` at both ends and ``p`` per byte (both ends' copies: gRPC's into and out of its
  buffers, the kernel's through the socket). Then ``rpc_s = c`` with ``overhead_s = 0``
  (gRPC's whole per-message cost on loopback, the socket calls included: they cannot be
  told apart from outside), and ``copy_Bps = 2 / p`` (each end half of the per-byte time).
  The echoed payload is serialised before it is timed, so nothing of the serialisation is
  inside ``p`` and nothing is taken out of it. The loopback's kernel path is inside both:
  used with a fabric, the fabric's alpha and bandwidth are added on top.
* ``t(n) = constant + n / rate`` for serialisation and deserialisation: ``serialize_Bps``
  and ``deserialize_Bps`` are the rates (the constant is Python's call, kept in the file).
* ``extra(t) = reload_s x (1 - exp(-t / reload_tau_s))`` for the calls after t of work
  less the one back to back (:func:`fit_reload`, the MPI message reload's curve): the
  simulator charges it to a rank's first message task after its own work, in place of the
  host profile's message reload, which MPI's path measured
  (:func:`sim.simulated.engine.build_hosts`).

Framing and flow control keep the ``grpc`` preset's values (60 B a message, a 9-byte header
per 16 KiB DATA frame, a 65,535-byte initial window: grpcio's HTTP/2 default, which BDP
probing grows during a run; not measured here). The profile keeps every raw sample and each
fit's errors. A full calibration measures :data:`REPEATS` times and fits each size's median
over them (:func:`median_measurement`): one measurement here had the round trip 1.5 to 3
times slower than the one an hour before, while real gRPC runs were 10% slower.
"""

from __future__ import annotations

import argparse
import os
import platform
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.machine import cpu_model
from sim.network.transports import REGISTRY, Transport

REPEATS = 3  # a full calibration's repeats, each size's median kept (--quick: 1)
# Ping-pong payloads: 8 B, then powers of 4 from 64 B to 4 MiB.
SIZES = [8] + [4**k for k in range(3, 12)]
QUICK_SIZES = [8, 1024, 65536, 1 << 20, 4 << 20]
REPS, QUICK_REPS = 200, 30  # round trips of a small message; fewer of a large one
# Serialised arrays (bytes): the ping-pong's large sizes (warm in the caches, as its
# payloads are; beyond the last level cache the rates are lower).
SERIALIZE_SIZES = [1 << 18, 1 << 20, 4 << 20]
QUICK_SERIALIZE_SIZES = [1 << 20, 4 << 20]
WARMUP = 3  # untimed round trips of each size, and of each serialisation
# the client's own work before a call (s), as a rank's gradient or batch comes before its
# push: how much slower a call after it is (the RPC path's reload); a 24 KB payload
RELOAD_WORKS = [0.0, 1e-4, 3e-4, 1e-3, 3e-3]
QUICK_RELOAD_WORKS = [0.0, 3e-4, 3e-3]
RELOAD_BYTES = 24_000
RELOAD_ARRAY = 1 << 19  # float64s the client sums while it works (4 MiB: beyond L2)
WINDOW_WARMUP = 10  # untimed round trips of the largest size first (the window grows)
SERVER_START_S = 30.0
METHOD = "/sgdlab.Echo/Echo"
# Payloads up to 4 MiB and more: gRPC refuses messages over 4 MiB by default.
OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


# ---- the echo server -------------------------------------------------------------------

def serve() -> int:
    """The echo server: binds 127.0.0.1 on a free port, prints the port on stdout, answers
    every call of :data:`METHOD` with its request's bytes until stdin closes. As the real
    parameter server's (:class:`sim.real.executors.ps_grpc.GrpcServerLink`), a call's
    handler thread hands the request to the main thread and waits for its answer, so the
    hand-over's thread switches are measured with the call."""
    import queue
    import threading
    from concurrent import futures

    import grpc

    arrivals: queue.Queue[tuple[bytes, queue.Queue[bytes]] | None] = queue.Queue()

    def handle(request: bytes, _: Any) -> bytes:
        slot: queue.Queue[bytes] = queue.Queue(maxsize=1)
        arrivals.put((request, slot))
        return slot.get()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=OPTIONS)
    service, _, method = METHOD.strip("/").partition("/")
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(handle)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    # until the client closes our stdin (or exits)
    threading.Thread(target=lambda: (sys.stdin.read(), arrivals.put(None)), daemon=True).start()
    while (item := arrivals.get()) is not None:  # the main loop answers
        request, slot = item
        slot.put(request)
    server.stop(None)
    return 0


@contextmanager
def echo_server(timeout_s: float = SERVER_START_S) -> Iterator[int]:
    """A running echo server process (:func:`serve`); its port. Raises RuntimeError when it
    does not start."""
    err = tempfile.TemporaryFile("w+")  # a file, not a pipe: no one reads it meanwhile
    proc = subprocess.Popen([sys.executable, "-m", "sim.calibration.transport_bench",
                             "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=err, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        line = proc.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            proc.kill()
            proc.wait()
            err.seek(0)
            last = err.read().strip().splitlines()[-1:]
            raise RuntimeError(f"the gRPC echo server did not start in {timeout_s:.0f} s"
                               + (f": {last[0]}" if last else ""))
        yield int(line)
    finally:
        if proc.poll() is None:
            proc.stdin.close()  # type: ignore[union-attr]
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        err.close()


# ---- measurements ----------------------------------------------------------------------

def _reps(nbytes: int, reps: int) -> int:
    """Timings of ``nbytes``: ``reps`` up to 64 KiB, fewer beyond (at least 10)."""
    return max(10, min(reps, int(reps * 65536 / max(nbytes, 65536))))


@contextmanager
def _echo_calls(port: int, what: str) -> Iterator[Any]:
    """The echo method of the server on ``port``, on a ready channel; a failed call
    inside raises RuntimeError naming ``what`` was measured."""
    import grpc

    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
            grpc.channel_ready_future(channel).result(timeout=SERVER_START_S)
            yield channel.unary_unary(METHOD)
    except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
        details = exc.details() if isinstance(exc, grpc.Call) else type(exc).__name__
        raise RuntimeError(f"the gRPC {what} on 127.0.0.1:{port} failed: "
                           f"{details}") from None


def pingpong(port: int, sizes: list[int], reps: int) -> dict[str, Any]:
    """Round-trip times of each size through the echo server on ``port``: every sample
    (seconds) and each size's median. Raises RuntimeError when a call fails."""
    samples: list[list[float]] = [[] for _ in sizes]
    with _echo_calls(port, "ping-pong") as call:
        payloads = [bytes(n) for n in sizes]
        for _ in range(WINDOW_WARMUP):
            call(payloads[sizes.index(max(sizes))])
        for payload in payloads:
            for _ in range(WARMUP):
                call(payload)
        counts = [_reps(n, reps) for n in sizes]
        for round_ in range(max(counts)):
            for i, payload in enumerate(payloads):
                if round_ < counts[i]:
                    start = time.perf_counter()
                    answer = call(payload)
                    samples[i].append(time.perf_counter() - start)
                    if len(answer) != len(payload):
                        raise RuntimeError(f"the echo of {len(payload)} B came back "
                                           f"{len(answer)} B long")
    return {"sizes": list(sizes), "samples": samples,
            "seconds": [float(np.median(s)) for s in samples]}


def after_work(port: int, works: list[float], reps: int) -> dict[str, Any]:
    """Round trips of a :data:`RELOAD_BYTES` echo, each after the client has summed a
    :data:`RELOAD_ARRAY`-value array for each of ``works`` seconds (0: back to back), the
    works interleaved round by round: every sample (seconds) and each work's median.
    Raises RuntimeError when a call fails."""
    data = np.random.default_rng(0).random(RELOAD_ARRAY)
    payload = bytes(RELOAD_BYTES)
    samples: list[list[float]] = [[] for _ in works]
    with _echo_calls(port, "calls after work") as call:
        for _ in range(WINDOW_WARMUP):
            call(payload)
        for _ in range(reps):
            for i, work in enumerate(works):
                began = time.perf_counter()
                while time.perf_counter() - began < work:
                    data.sum()
                start = time.perf_counter()
                call(payload)
                samples[i].append(time.perf_counter() - start)
    return {"works_s": list(works), "bytes": RELOAD_BYTES, "samples": samples,
            "seconds": [float(np.median(s)) for s in samples]}


def time_serialization(sizes: list[int], reps: int) -> dict[str, Any]:
    """Seconds to serialise float64 arrays of each size (bytes) and to deserialise them:
    ``serialize`` (``tobytes``), ``deserialize`` (``np.frombuffer(...).copy()``) and
    ``deserialize_into`` (``np.copyto`` into a preallocated array), each with every sample
    and each size's median."""
    out: dict[str, Any] = {"sizes": list(sizes)}
    kinds = {"serialize": "ndarray.tobytes()",
             "deserialize": "np.frombuffer(data, np.float64).copy()",
             "deserialize_into": "np.copyto(out, np.frombuffer(data, np.float64))"}
    times: dict[str, list[list[float]]] = {k: [] for k in kinds}
    rng = np.random.default_rng(0)
    for n in sizes:
        array = rng.random(n // 8)
        data, into = array.tobytes(), np.empty_like(array)
        calls = {"serialize": array.tobytes,
                 "deserialize": lambda d=data: np.frombuffer(d, np.float64).copy(),
                 "deserialize_into": lambda d=data, o=into: np.copyto(
                     o, np.frombuffer(d, np.float64))}
        count = _reps(n, reps)
        for kind, fn in calls.items():
            samples = []
            for i in range(WARMUP + count):
                start = time.perf_counter()
                fn()
                if i >= WARMUP:
                    samples.append(time.perf_counter() - start)
            times[kind].append(samples)
    for kind, how in kinds.items():
        out[kind] = {"how": how, "samples": times[kind],
                     "seconds": [float(np.median(s)) for s in times[kind]]}
    return out


# ---- fits -------------------------------------------------------------------------------

def _points(labels: list[str], measured: np.ndarray,
            predicted: np.ndarray) -> dict[str, Any]:
    errors = predicted / measured - 1
    return {"points": [{"what": w, "measured_s": float(m), "predicted_s": float(p),
                        "error": float(e)}
                       for w, m, p, e in zip(labels, measured, predicted, errors, strict=True)],
            "max_error": float(np.max(np.abs(errors))),
            "rms_log_error": float(np.sqrt(np.mean(np.log(predicted / measured) ** 2)))}


def fit_rtt(sizes: list[int], seconds: list[float]) -> dict[str, Any]:
    """``RTT(n) = 2 (2 c + n p)`` fitted to round-trip times of n-byte echoes: the
    per-message constant at each end ``rpc_s`` (c), the per-byte time of a message (p, both
    ends) and ``copy_Bps = 2 / p`` (each end's), with each size's error."""
    from sim.calibration.fit_fabric import fit_log  # not at the top: the echo server
    # process imports this module and needs none of the suite's imports

    n, t = np.asarray(sizes, float), np.asarray(seconds, float)
    A = np.column_stack([np.full_like(n, 4.0), 2.0 * n])
    c, p = fit_log(A, t)
    return {"rpc_s": c, "per_byte_s": p, "copy_Bps": 2.0 / p,
            **_points([f"round trip {int(s)} B" for s in n], t, A @ np.array([c, p]))}


def fit_rate(sizes: list[int], seconds: list[float], what: str) -> dict[str, Any]:
    """``t(n) = constant + n / rate`` fitted to ``what``'s times of n bytes: ``constant_s``,
    ``rate_Bps``, with each size's error."""
    from sim.calibration.fit_fabric import fit_log  # see fit_rtt

    n, t = np.asarray(sizes, float), np.asarray(seconds, float)
    A = np.column_stack([np.ones_like(n), n])
    constant, per_byte = fit_log(A, t)
    return {"constant_s": constant, "rate_Bps": 1.0 / per_byte,
            **_points([f"{what} {int(s)} B" for s in n], t, A @ np.array([constant, per_byte]))}


def fit_reload(works_s: list[float], seconds: list[float]) -> dict[str, Any]:
    """``extra = reload_s x (1 - exp(-work / reload_tau_s))`` fitted to the round trips
    after work less the one back to back (work 0, which must be measured): the message
    reload's curve (:func:`sim.calibration.message_reload_bench.fit_message_reload`), as
    ``reload_s`` and ``reload_tau_s`` with each work's extra. Raises ValueError without
    a work of 0."""
    from sim.calibration.message_reload_bench import fit_message_reload  # see fit_rtt

    if 0.0 not in works_s:
        raise ValueError("the reload fit needs round trips back to back (a work of 0)")
    base = seconds[works_s.index(0.0)]
    works = [w for w in works_s if w > 0]
    extra = [t - base for w, t in zip(works_s, seconds, strict=True) if w > 0]
    fit = fit_message_reload(works, extra)
    return {"reload_s": fit["message_reload_s"], "reload_tau_s": fit["message_reload_tau_s"],
            "works_s": works, "extra_s": extra, "errors": fit["errors"]}


def transport_profile(rtt: dict[str, Any], serialize: dict[str, Any],
                      deserialize: dict[str, Any], source: str,
                      reload: dict[str, Any] | None = None) -> Transport:
    """The ``grpc`` preset with the fitted costs: ``overhead_s`` 0, ``rpc_s``,
    ``copy_Bps``, ``serialize_Bps``, ``deserialize_Bps`` and, where measured, the call's
    reload after work; framing and window kept."""
    reloads = {} if reload is None else {"reload_s": reload["reload_s"],
                                         "reload_tau_s": reload["reload_tau_s"]}
    return replace(REGISTRY["grpc"], name="grpc", overhead_s=0.0, rpc_s=rtt["rpc_s"],
                   copy_Bps=rtt["copy_Bps"], serialize_Bps=serialize["rate_Bps"],
                   deserialize_Bps=deserialize["rate_Bps"], source=source, **reloads)


# ---- the whole calibration ---------------------------------------------------------------

def measure_transport(quick: bool = False) -> dict[str, Any]:
    """The ping-pong and the serialisation timings (see the module's doc)."""
    import grpc

    sizes, reps = (QUICK_SIZES, QUICK_REPS) if quick else (SIZES, REPS)
    began = time.perf_counter()
    with echo_server() as port:
        rtt = pingpong(port, sizes, reps)
        reload = after_work(port, QUICK_RELOAD_WORKS if quick else RELOAD_WORKS,
                            QUICK_REPS if quick else REPS // 2)
    serial = time_serialization(QUICK_SERIALIZE_SIZES if quick else SERIALIZE_SIZES,
                                QUICK_REPS if quick else REPS)
    return {"pingpong": rtt, "reload": reload, "serialization": serial,
            "grpcio": grpc.__version__,
            "python": platform.python_version(), "cpu": cpu_model(),
            "cpus": os.cpu_count(), "quick": quick,
            "wall_s": time.perf_counter() - began}


def fit_transport(measured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every fit of :func:`measure_transport`'s measurements: ``rtt``, ``reload`` (where
    measured), ``serialize``, ``deserialize`` and ``deserialize_into``."""
    pp, serial = measured["pingpong"], measured["serialization"]
    reload = measured.get("reload")
    return {"rtt": fit_rtt(pp["sizes"], pp["seconds"]),
            **({"reload": fit_reload(reload["works_s"], reload["seconds"])} if reload else {}),
            **{kind: fit_rate(serial["sizes"], serial[kind]["seconds"], kind)
               for kind in ("serialize", "deserialize", "deserialize_into")}}


def median_measurement(taken: list[dict[str, Any]]) -> dict[str, Any]:
    """One measurement of :func:`measure_transport`'s shape whose every size's time (the
    ping-pong's, each serialisation's) is the median of ``taken``'s, with their samples
    pooled; a single measurement is returned as it is."""
    if len(taken) == 1:
        return taken[0]
    first = taken[0]

    def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
        return {**parts[0], "samples": [sum(each, []) for each in zip(
                    *(p["samples"] for p in parts), strict=True)],
                "seconds": np.median([p["seconds"] for p in parts], axis=0).tolist()}

    serial = {**first["serialization"], **{
        kind: merged([t["serialization"][kind] for t in taken])
        for kind in ("serialize", "deserialize", "deserialize_into")}}
    reloads = {"reload": merged([t["reload"] for t in taken])} if "reload" in first else {}
    return {**first, "pingpong": merged([t["pingpong"] for t in taken]), **reloads,
            "serialization": serial, "repeats": len(taken),
            "wall_s": sum(t["wall_s"] for t in taken)}


def calibrate_transport(path: Path, quick: bool = False, repeats: int | None = None
                        ) -> tuple[Transport, list[str], list[tuple[str, float]]]:
    """Measure, fit and write the transport profile to ``path``: the transport, the lines
    to print (each fitted value, each point's error, the config line) and the fitted points'
    errors (label, relative error). ``repeats``: measured this many times, one after
    another, and fitted to each size's median over them (:func:`median_measurement`);
    None: :data:`REPEATS`, 1 when ``quick``. Raises RuntimeError when the echo server
    fails, ValueError for ``repeats`` < 1."""
    if repeats is None:
        repeats = 1 if quick else REPEATS
    if repeats < 1:
        raise ValueError(f"transport calibration: repeats must be >= 1, got {repeats}")
    from sim.calibration.profiles import write_transport  # not at the top: the echo server

    path.parent.mkdir(parents=True, exist_ok=True)
    measured = median_measurement([measure_transport(quick) for _ in range(repeats)])
    fits = fit_transport(measured)
    source = (f"measured here (sim calibrate --only transport, "
              f"{time.strftime('%Y-%m-%d')}, {measured['cpu']})")
    transport = transport_profile(fits["rtt"], fits["serialize"], fits["deserialize"], source,
                                  fits.get("reload"))
    write_transport(path, transport, measured, fits)
    rtt = fits["rtt"]
    lines = [f"transport (grpcio {measured['grpcio']}, loopback, {measured['cpu']}"
             + (f"; each size's median over {repeats} repeats" if repeats > 1 else "")
             + "):",
             f"  rpc_s            {transport.rpc_s * 1e6:9.1f} us  per message at each end "
             f"(overhead_s 0: the socket calls are inside it)",
             f"  copy_Bps         {transport.copy_Bps / 1e9:9.3f} GB/s at each end "
             f"(round-trip fit errors {_span(rtt)})",
             f"  serialize_Bps    {transport.serialize_Bps / 1e9:9.3f} GB/s  tobytes "
             f"(fit errors {_span(fits['serialize'])})",
             f"  deserialize_Bps  {transport.deserialize_Bps / 1e9:9.3f} GB/s  "
             f"frombuffer().copy() (fit errors {_span(fits['deserialize'])})"]
    lines += [f"  {p['what']:<28} {p['measured_s'] * 1e6:10.1f} us  {p['error']:+.0%}"
              for p in rtt["points"]]
    if "reload" in fits:
        reload = fits["reload"]
        lines += [f"  reload_s         {transport.reload_s * 1e6:9.1f} us, tau "
                  f"{transport.reload_tau_s * 1e3:.2f} ms: a call after the rank's own work "
                  "(extra after " + ", ".join(
                      f"{w * 1e3:g} ms: {e * 1e6:+.0f} us"
                      for w, e in zip(reload["works_s"], reload["extra_s"], strict=True))
                  + ")"]
    lines += [f"  wrote {path} (framing and window: the grpc preset's)",
              f'  cluster.transport = "calibrated:{path}"']
    errors = [(p["what"], p["error"]) for name in ("rtt", "serialize", "deserialize")
              for p in fits[name]["points"]]
    return transport, lines, errors


def _span(fit: dict[str, Any]) -> str:
    errors = [p["error"] for p in fit["points"]]
    return f"{min(errors):+.0%} .. {max(errors):+.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.calibration.transport_bench")
    parser.add_argument("--serve", action="store_true", required=True,
                        help="run the echo server (prints its port, stops when stdin closes)")
    parser.parse_args(argv)
    return serve()


if __name__ == "__main__":
    raise SystemExit(main())
