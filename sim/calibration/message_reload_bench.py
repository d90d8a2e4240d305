"""How much longer a rank's messages take right after its own other work: the message path's
reload transient, measured on the real executor's allreduce.

The reload model (:mod:`sim.simulated.core_reload`, calibrated by
:mod:`sim.calibration.reload_bench`) charges a rank's next task for the gaps it slept or
spun through. A rank's own compute is no gap there, so the messages that follow a
gradient are charged the warm costs the fabric and host profiles measured back to back.
This bench measures what that leaves out. Two ranks run the executor's ring allreduce
(:class:`sim.real.executors.rank_collectives.ScheduleAllreduce`, spinning waits) on
``count`` float64 values, either back to back or each after ``work_s`` of their own work
(passes over a ``work_bytes`` array, as a gradient's kernels touch theirs); each logs its
``wire`` and ``overhead`` spans per allreduce as a real run does, and the peer's lateness
(entry times on ``time.perf_counter``, one clock for the ranks of a machine) is taken out
of the wire, so what is left is the message path's own time. Run under MPI:

    mpiexec -n 2 python -m sim.calibration.message_reload_bench [--reps N]

It prints one JSON line per (count, work_ms): the median wire and overhead per allreduce
(us) and their extra over back to back. ``sim calibrate`` runs it (:func:`measure`) and
fits the extra of the two smaller messages, whose message path is the same code, as

    message_reload(t) = message_reload_s x (1 - exp(-t / message_reload_tau_s))

(:func:`fit_message_reload`): what :mod:`sim.simulated.hosts` charges a rank's first
message task after t seconds of its other work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import numpy as np

from sim.calibration.reload_bench import fit_curve

COUNTS = (16, 3000, 71000)  # 128 B, the kernel model's 24 KB, the large MLP's 0.57 MB
FITTED_COUNTS = (16, 3000)  # the message path's own cost (the largest adds its bytes')
WORKS_S = (0.0, 100e-6, 500e-6, 2e-3, 5e-3)
WORK_BYTES = 1 << 20  # 1 MiB: the order of a small model's parameters and batch


def _busy(work: np.ndarray, seconds: float) -> None:
    """Passes over ``work`` for ``seconds``."""
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        work *= 1.0000001


def measure_point(comm, count: int, work_s: float, reps: int) -> dict[str, float] | None:
    """Medians over ``reps`` allreduces after ``work_s`` of work (us; None off rank 0)."""
    from sim.real.executors.rank_clock import Waiter
    from sim.real.executors.rank_collectives import ScheduleAllreduce

    allreduce = ScheduleAllreduce(comm, "ring", count, Waiter("spin"))
    buf, work = np.ones(count), np.ones(WORK_BYTES // 8)
    rows = []
    for _ in range(reps + reps // 10):  # the first tenth warms up
        _busy(work, work_s)
        buf[:] = 1.0
        entry = time.perf_counter()
        allreduce(buf)
        spans = allreduce.take(0.0)
        rows.append((entry, sum(e - s for k, s, e in spans if k == "wire"),
                     sum(e - s for k, s, e in spans if k == "overhead")))
    rows = rows[reps // 10:]
    entries = comm.gather([entry for entry, _, _ in rows], root=0)
    if comm.Get_rank() != 0:
        return None
    late = np.maximum(0.0, np.array(entries[1]) - np.array(entries[0]))
    wire = np.array([w for _, w, _ in rows]) - late
    overhead = np.array([o for _, _, o in rows])
    return {"wire_us": float(np.median(wire) * 1e6),
            "overhead_us": float(np.median(overhead) * 1e6)}


def measure(quick: bool) -> dict[str, Any]:
    """The bench on 2 MPI ranks (the ``mpich`` wheel's mpiexec) and its fit: the extra time
    per allreduce after each ``works_s`` (s; the mean over :data:`FITTED_COUNTS`), every
    printed point, and :func:`fit_message_reload`'s curve. Raises RuntimeError if the bench
    fails."""
    from sim.real.launch.launcher import mpiexec

    run = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", __name__, "--reps",
                          "60" if quick else "300"], capture_output=True, text=True,
                         timeout=600)
    if run.returncode:
        raise RuntimeError(f"message reload bench: {run.stderr.strip()[-500:]}")
    points = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    works = [w for w in WORKS_S if w > 0]
    extra = [float(np.mean([p["extra_us"] * 1e-6 for p in points
                            if p["count"] in FITTED_COUNTS and p["work_ms"] == w * 1e3]))
             for w in works]
    return {"points": points, "works_s": works, "extra_s": extra,
            **fit_message_reload(works, extra)}


def fit_message_reload(works_s: list[float], extra_s: list[float]) -> dict[str, Any]:
    """``extra = message_reload_s x (1 - exp(-work / message_reload_tau_s))``: the reload
    fit without a base (:func:`sim.calibration.reload_bench.fit_curve`). Extras at or below
    zero (nothing measurable) are left out; none above zero fits as nothing to reload."""
    fitted = fit_curve(np.asarray(works_s, float), np.asarray(extra_s, float),
                       with_base=False)
    if fitted is None:
        return {"message_reload_s": 0.0, "message_reload_tau_s": 0.0, "errors": []}
    _, amount, tau, errors = fitted
    return {"message_reload_s": amount, "message_reload_tau_s": tau, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.calibration.message_reload_bench",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=300, help="allreduces per point")
    args = parser.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("run it on 2 ranks: mpiexec -n 2 python -m "
                         "sim.calibration.message_reload_bench")
    for count in COUNTS:
        warm = None
        for work_s in WORKS_S:
            point = measure_point(comm, count, work_s, args.reps)
            if point is None:
                continue
            warm = warm or point
            point["extra_us"] = (point["wire_us"] + point["overhead_us"]
                                 - warm["wire_us"] - warm["overhead_us"])
            print(json.dumps({"count": count, "work_ms": work_s * 1e3,
                              **{k: round(point[k], 2)
                                 for k in ("wire_us", "overhead_us", "extra_us")}}),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
