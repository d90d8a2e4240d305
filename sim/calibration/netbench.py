"""Network measurements on real ranks: ``python -m sim.calibration.netbench --spec SPEC.json``.

Run by :mod:`sim.calibration.measure_fabric` through the launcher, on the network being
calibrated, and waiting the way real runs wait (the spec's ``wait``). Modes:

* ``pingpong`` (2 ranks): half the round trip of an n-byte message, for each size; with
  the spec's ``pause_s``, both ranks spin that long before each repetition (on token-bucket
  links, long enough for the buckets to fill again: what a message after idle time sees);
* ``stream`` (2 ranks): the time per message when rank 0 posts many small messages
  back to back (the per-message overhead, LogGP's o or g);
* ``allreduce`` (p ranks): the time of one allreduce of n bytes through the simulator's
  schedule (``strategy.collective``), as bsp runs it;
* ``notice`` (p >= 3 ranks, more than the cores, waiting by napping): every rank but rank 1
  loops as a parameter-server worker does (``work_s`` of CPU, an n-byte message to rank 1,
  then waits for its answer), and rank 1 receives from any of them and answers as the
  server does; the mean time from a message's ``Isend`` to rank 1 having it, for each size
  (a napping receiver on cores busy with the workers' CPU notices it late, and a message
  beyond the eager limit waits for both ends' polls). The workers compete for the cores as
  a run's workers do; an earlier version had one worker and the others alternating CPU and
  sleep, and measured less than half the delay that runs see (2026-11-27);
* ``share`` (p >= 1 ranks, all pinned to one core): rank 0 runs units of CPU work
  (``calls`` in-cache ``sim.kernels.sum_into`` of 16 KB, the kernel a server and an
  allreduce round run) while the other ranks wait for a message from it, as real ranks wait (the
  spec's ``wait``); the mean time of one unit (how much of the core waiting ranks take);
* ``message`` (2 ranks): the time per message when rank 0 sends n-byte messages back to
  back the way a parameter-server worker pushes (:mod:`sim.real.executors.ps`: header,
  ``sim.kernels.copy`` of the payload into the message, ``Isend``, wait) and rank 1
  receives them as the server does (``Irecv``, wait): the CPU cost of a message at an
  end, per message and per byte (both ends run at once; the slower sets the pace).

Each result is the median of ``reps`` timed repetitions after a warm-up; rank 0 writes
``{"mode": ..., "ranks": p, "sizes": [...], "seconds": [...]}`` to the spec's ``result``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibration.reload_bench import spin_for

WARMUP = 3
STREAM_MESSAGES = 200
REPS = 100  # timed repetitions of a small message (sim calibrate's default)


def repetitions(nbytes: int, reps: int) -> int:
    """Timed repetitions of an n-byte measurement: ``reps`` up to 64 KB, then fewer (at
    least 5), so that each size takes about as long."""
    return max(5, min(reps, int(reps * 65536 / max(nbytes, 65536))))


def pingpong(comm: Any, waiter: Any, sizes: list[int], reps: int,
             pause_s: float = 0.0) -> list[float]:
    from mpi4py import MPI

    rank, out = comm.Get_rank(), []
    for nbytes in sizes:
        buf = np.zeros(max(nbytes // 8, 0))
        times = []
        for i in range(WARMUP + repetitions(nbytes, reps)):
            spin_for(pause_s)  # spinning, as a computing rank idles its link: a sleeping
            comm.Barrier()     # rank would wake late (several us on a VM), no cost of the link
            start = time.perf_counter()
            if rank == 0:
                waiter.one(comm.Isend([buf, MPI.DOUBLE], dest=1, tag=1))
                waiter.one(comm.Irecv([buf, MPI.DOUBLE], source=1, tag=1))
            else:
                waiter.one(comm.Irecv([buf, MPI.DOUBLE], source=0, tag=1))
                waiter.one(comm.Isend([buf, MPI.DOUBLE], dest=0, tag=1))
            if i >= WARMUP:
                times.append((time.perf_counter() - start) / 2)
        out.append(float(np.median(times)))
    return out


def stream(comm: Any, waiter: Any, reps: int) -> list[float]:
    from mpi4py import MPI

    buf = np.zeros(1)
    times = []
    for i in range(WARMUP + max(5, reps // 10)):
        comm.Barrier()
        start = time.perf_counter()
        if comm.Get_rank() == 0:
            waiter.all([comm.Isend([buf, MPI.DOUBLE], dest=1, tag=2)
                        for _ in range(STREAM_MESSAGES)])
        else:
            for _ in range(STREAM_MESSAGES):
                waiter.one(comm.Irecv([buf, MPI.DOUBLE], source=0, tag=2))
        comm.Barrier()
        if i >= WARMUP:
            times.append((time.perf_counter() - start) / STREAM_MESSAGES)
    return [float(np.median(times))]


def allreduce(comm: Any, waiter: Any, sizes: list[int], reps: int, algorithm: str,
              impl: str) -> list[float]:
    from sim.real.executors.rank_collectives import make_allreduce

    out = []
    for nbytes in sizes:
        count = max(nbytes // 8, 1)
        buf = np.ones(count)
        reduce = make_allreduce(impl, comm, algorithm, count, waiter)
        times = []
        for i in range(WARMUP + repetitions(nbytes, reps)):
            buf.fill(1.0 / comm.Get_size())
            comm.Barrier()
            start = time.perf_counter()
            reduce(buf)
            elapsed = comm.allreduce(time.perf_counter() - start, op=_max())
            if i >= WARMUP:
                times.append(elapsed)
        out.append(float(np.median(times)))
    return out


def message(comm: Any, waiter: Any, sizes: list[int], reps: int) -> list[float]:
    from mpi4py import MPI

    from sim import kernels as K
    from sim.real.executors.ps import HEADER, PUSH, TAG

    rank, out = comm.Get_rank(), []
    for nbytes in sizes:
        size = max(nbytes // 8 - HEADER, 0)
        message, grad = np.zeros(HEADER + size), np.ones(size)
        count = max(20, min(STREAM_MESSAGES, int(STREAM_MESSAGES * 65536 / max(nbytes, 1))))
        times = []
        for i in range(WARMUP + max(5, repetitions(nbytes, reps) // 4)):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(count):
                if rank == 0:
                    message[:HEADER] = 0
                    message[0], message[1], message[2], message[3] = PUSH, 0, i, 0.5
                    K.copy(message[HEADER:], grad)
                    waiter.one(comm.Isend([message, MPI.DOUBLE], dest=1, tag=TAG))
                else:
                    waiter.one(comm.Irecv([message, MPI.DOUBLE], source=0, tag=TAG))
            elapsed = comm.allreduce(time.perf_counter() - start, op=_max())
            if i >= WARMUP:
                times.append(elapsed / count)
        out.append(float(np.median(times)))
    return out


def notice(comm: Any, waiter: Any, sizes: list[int], reps: int, work_s: float) -> list[float]:
    """Rank 1 serves, napping; every other rank is a worker that computes, sends it a
    message and waits for its answer, as parameter-server workers do."""
    from mpi4py import MPI

    rank, workers = comm.Get_rank(), comm.Get_size() - 1
    data = np.random.default_rng(rank).random(4096)
    ack, out = np.zeros(1), []

    def busy() -> None:  # a gradient's CPU
        began = time.perf_counter()
        while time.perf_counter() - began < work_s:
            data.sum()

    for nbytes in sizes:
        message = np.zeros(max(nbytes // 8, 2))
        count = WARMUP + max(20, reps)
        comm.Barrier()
        if rank == 1:  # the server: naps until a message is there, answers it
            delays, status = [], MPI.Status()
            for i in range(count * workers):
                waiter.one(comm.Irecv([message, MPI.DOUBLE], source=MPI.ANY_SOURCE, tag=3),
                           status)
                if i >= WARMUP * workers:
                    delays.append(time.perf_counter() - message[0])
                waiter.one(comm.Isend([ack, MPI.DOUBLE], dest=status.Get_source(), tag=4))
            out.append(float(np.mean(delays)))
        else:  # a worker: computes, pushes, waits for the answer
            for _ in range(count):
                busy()
                message[0] = time.perf_counter()  # CLOCK_MONOTONIC: one clock for all ranks
                waiter.one(comm.Isend([message, MPI.DOUBLE], dest=1, tag=3))
                waiter.one(comm.Irecv([ack, MPI.DOUBLE], source=1, tag=4))
            out.append(0.0)
        comm.Barrier()
    return out


def share(comm: Any, waiter: Any, reps: int, calls: int) -> list[float]:
    """Rank 0 works on a core shared with the other ranks, which wait for it."""
    import os

    from mpi4py import MPI

    from sim import kernels as K

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rank, done = comm.Get_rank(), np.zeros(1)
    comm.Barrier()
    if rank != 0:
        waiter.one(comm.Irecv([done, MPI.DOUBLE], source=0, tag=6))
        return [0.0]
    total, part = np.zeros(2048), np.ones(2048)  # 16 KB each: in cache
    units = []
    for _ in range(WARMUP + reps):
        began = time.perf_counter()
        for _ in range(calls):
            K.sum_into(total, part)
        units.append(time.perf_counter() - began)
    for other in range(1, comm.Get_size()):
        comm.Send([done, MPI.DOUBLE], dest=other, tag=6)
    return [float(np.mean(units[WARMUP:]))]


def _max() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def _sizes_reps(spec: dict[str, Any]) -> tuple[list[int], int]:
    return spec.get("sizes", []), spec.get("reps", REPS)


# each mode's measurement from the spec (keys as the module docstring names them)
MODES: dict[str, Callable[[Any, Any, dict[str, Any]], list[float]]] = {
    "pingpong": lambda comm, waiter, spec: pingpong(comm, waiter, *_sizes_reps(spec),
                                                    spec.get("pause_s", 0.0)),
    "stream": lambda comm, waiter, spec: stream(comm, waiter, _sizes_reps(spec)[1]),
    "message": lambda comm, waiter, spec: message(comm, waiter, *_sizes_reps(spec)),
    "notice": lambda comm, waiter, spec: notice(comm, waiter, *_sizes_reps(spec),
                                                spec["work_s"]),
    "share": lambda comm, waiter, spec: share(comm, waiter, _sizes_reps(spec)[1],
                                              spec["calls"]),
    "allreduce": lambda comm, waiter, spec: allreduce(
        comm, waiter, *_sizes_reps(spec), spec.get("algorithm", "ring"),
        spec.get("impl", "schedule")),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.calibration.netbench")
    parser.add_argument("--spec", type=Path, required=True)
    spec = json.loads(parser.parse_args(argv).spec.read_text())
    from sim.real.executors.rank_clock import Waiter, tighten_timer_slack
    from sim.rundir import write_atomic

    tighten_timer_slack()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    waiter = Waiter(spec["wait"])
    mode = spec["mode"]
    seconds = MODES[mode](comm, waiter, spec)
    if mode == "notice":  # measured on rank 1
        seconds = comm.bcast(seconds, root=1)
    if comm.Get_rank() == 0:
        write_atomic(Path(spec["result"]), json.dumps(
            {"mode": mode, "ranks": comm.Get_size(), "sizes": _sizes_reps(spec)[0],
             "seconds": seconds, "wait": spec["wait"], "pause_s": spec.get("pause_s", 0.0)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
