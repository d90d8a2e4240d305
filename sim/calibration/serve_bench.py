"""A parameter server's own code per push, per update and per pull, beyond its kernels.

A server rank does more than sum and step (Li et al., OSDI 2014, size parameter servers by
CPU): for every push the strategy's rules check its version, keep or drop it and move the
clocks; for every update they take the mean, step, bump the version and log it; for every
pull they admit it and write the reply's header. Those are the real runner's
:class:`sim.real.executors.ps.ServerProtocol` on :mod:`sim.training.rules`, timed here on
the validation's small logistic regression, with pushes and pulls handed to it without MPI,
for 1, 2 and 4 workers:

* ``asp``: each push is applied at once (``serve_apply_s`` a push; ssp's code path too);
* ``bsp-ps``: n pushes are kept (``serve_push_s`` each), then the step closes
  (``serve_step_s``: the mean of what arrived and its step; backup's code path too);
* a pull of either: ``serve_pull_s``.

What the simulator already charges for the kernels is taken out: ``update_s`` for an
applied push; ``reduce_s`` for a kept push (its sum into the step) and ``reduce_s`` +
``update_s`` for a step (the mean's pass and the step); the copy of the parameters into a
reply (``copy_call_s`` + bytes / ``copy_Bps``). ``serve_apply_s`` and ``serve_pull_s`` are
medians over the worker counts, ``serve_push_s`` and ``serve_step_s`` a least-squares line
of a round's time against its pushes. The six servers' rounds are interleaved in a shuffled
order (:func:`time_rounds`), as the reload bench interleaves its gaps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sim.calibration.least_squares import least_squares

FEATURES = 256  # the validation's small logistic regression: the code, not the kernels
WORKERS = (1, 2, 4)
# each strategy timed, and what its pushes do: applied at once, or kept for a step
APPLIED, KEPT = "applied", "kept"
KINDS = {"asp": APPLIED, "bsp-ps": KEPT}


def server(kind: str, workers: int) -> Any:
    """A :class:`~sim.real.executors.ps.ServerProtocol` of ``kind`` with ``workers``
    workers, for as many updates as any measurement takes."""
    from sim.real.executors.ps import ServerProtocol
    from sim.training.strategies import make_rules
    from sim.training.validator import validate
    from sim.training.workload import build_workload

    config = validate({"cluster": {"workers": workers}, "strategy": {"kind": kind},
                       "workload": {"model": "logreg", "features": FEATURES,
                                    "samples": 1024, "batch": 16},
                       "run": {"iterations": 10 ** 7}}, "host calibration")
    return ServerProtocol(make_rules(config), build_workload(config))


def round_timer(kind: str, workers: int) -> tuple[Callable[[], tuple[float, list[float]]],
                                                 int]:
    """A call that times one round of ``kind`` with ``workers`` workers: a push from every
    worker (s), then each worker's pull answered (admitted, its header written, the
    parameters copied into it; s each); and the parameters' bytes."""
    from sim.real.executors.ps import HEADER

    protocol = server(kind, workers)
    size = protocol.store.params.size
    grad = np.full(size, 1e-6)
    message = np.zeros(HEADER + size)

    def one_round() -> tuple[float, list[float]]:
        start = time.perf_counter()
        for w in range(workers):
            protocol.on_push(w, grad, protocol.store.version, 0.5, 0.0)
        pushed = time.perf_counter() - start
        pulls = []
        for w in range(workers):
            start = time.perf_counter()
            protocol.on_pull(w, 0.0)
            for r in protocol.replies():
                message[:HEADER] = 0
                message[0], message[1], message[5] = r.kind, r.worker, time.perf_counter()
                message[2] = protocol.store.read(message[HEADER:])
            pulls.append(time.perf_counter() - start)
        return pushed, pulls

    return one_round, size * 8


def time_rounds(rounds: int) -> dict[tuple[str, int], tuple[float, float, int]]:
    """For each of :data:`KINDS` x :data:`WORKERS`: the median seconds of a round's pushes
    and of a pull, and the parameters' bytes. The rounds are interleaved, every round
    timing each in a shuffled order, so that the machine's drift (other tenants come and
    go) weighs on all alike: timed in blocks, the split between a kept push and a step
    moved by several times between calibrations."""
    timers = {(kind, n): round_timer(kind, n) for kind in KINDS for n in WORKERS}
    keys = list(timers)
    pushes: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
    pulls: dict[tuple[str, int], list[float]] = {k: [] for k in keys}
    order = np.random.default_rng(0)
    for _ in range(rounds):
        for i in order.permutation(len(keys)):
            pushed, pulled = timers[keys[i]][0]()
            pushes[keys[i]].append(pushed)
            pulls[keys[i]] += pulled
    return {k: (float(np.median(pushes[k])), float(np.median(pulls[k])), timers[k][1])
            for k in keys}


def kernel_s(name: str, nbytes: float, fits: dict[str, Any]) -> float:
    """Seconds the host's ``name`` fit (update, reduce, copy) charges for ``nbytes``."""
    return fits[name]["constant_s"] + nbytes / fits[name]["rate_Bps"]


def round_kernels_s(pushes: str, workers: int, nbytes: float, fits: dict[str, Any]) -> float:
    """The kernels the simulator charges a round of ``workers`` pushes of ``nbytes``:
    an update each when applied at once; a sum each when kept, then the step's mean pass and
    its update."""
    if pushes == APPLIED:
        return workers * kernel_s("update", nbytes, fits)
    return (workers + 1) * kernel_s("reduce", nbytes, fits) + kernel_s("update", nbytes, fits)


def measure_serving(fits: dict[str, Any], quick: bool) -> dict[str, Any]:
    """``serve_apply_s``, ``serve_push_s``, ``serve_step_s`` and ``serve_pull_s`` from
    rounds of :data:`KINDS` x :data:`WORKERS` (``fits``: the host's update, reduce and copy
    fits), with every round's time and the fit's errors (:func:`fit_serving`)."""
    timed = time_rounds(300 if quick else 1500)
    points, pulls = [], []
    for (kind, n), (round_s, pull_s, nbytes) in timed.items():
        pushes = KINDS[kind]
        points.append({"kind": kind, "pushes": pushes, "workers": n, "round_s": round_s,
                       "kernels_s": round_kernels_s(pushes, n, nbytes, fits)})
        pulls.append(pull_s - kernel_s("copy", nbytes, fits))
    return fit_serving(points, pulls)


def fit_serving(points: list[dict[str, Any]], pulls: list[float]) -> dict[str, Any]:
    """The server's code from rounds (``points``: each round's kind of pushes, workers,
    ``round_s`` and the ``kernels_s`` in it) and pulls less their copy (``pulls``, s): a
    median per applied push and per pull, a line of kept rounds against their pushes; each
    round's error."""
    applied = [(p["round_s"] - p["kernels_s"]) / p["workers"] for p in points
               if p["pushes"] == APPLIED]
    apply_s = max(float(np.median(applied)), 0.0)
    push_s, step_s = line([(p["workers"], p["round_s"] - p["kernels_s"]) for p in points
                           if p["pushes"] == KEPT])
    points = [dict(p) for p in points]
    for p in points:
        n = p["workers"]
        extra = n * apply_s if p["pushes"] == APPLIED else n * push_s + step_s
        p["error"] = (p["kernels_s"] + extra) / p["round_s"] - 1
    return {"serve_apply_s": apply_s, "serve_push_s": push_s, "serve_step_s": step_s,
            "serve_pull_s": max(float(np.median(pulls)), 0.0), "points": points,
            "pulls_s": list(pulls), "max_error": max(abs(p["error"]) for p in points)}


def line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of ``seconds = n x slope + intercept`` over (n, seconds), both >= 0:
    (slope, intercept)."""
    n, y = np.array([p[0] for p in points], float), np.array([p[1] for p in points])
    slope, intercept = least_squares(np.column_stack([n, np.ones_like(n)]), y)
    if slope < 0:
        return 0.0, max(float(np.mean(y)), 0.0)
    if intercept < 0:
        return max(float(n @ y / (n @ n)), 0.0), 0.0
    return float(slope), float(intercept)
