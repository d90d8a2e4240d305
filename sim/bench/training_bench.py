"""``python -m sim bench training``: how fast the simulator trains, and where the time goes.

For bsp, asp and ssp on 8 and 64 workers (logistic regression, d = 1000, batch 32) it
reports simulated updates per second of wall time and splits that wall time three ways:

- kernels: inside :mod:`sim.kernels` calls (argument checks, cffi and the C itself; the C
  alone is shown in brackets),
- batches: gathering each mini-batch's rows from the data set (numpy fancy indexing, bound
  by memory bandwidth: 32 random rows of 8 KB),
- simulator: everything else: SimPy, the network model, strategies, recorder.

Kernel and batch time are measured by wrapping every public function of
:mod:`sim.kernels` (and its internal ``_call``, the C call, in each of its modules that
calls it), and ``Worker.next_batch``, with ``perf_counter`` accumulators for the length of
the run, so the shares come from the same run as the rate (the timers' own cost, ~0.1 us a
call, is in the run too). Each case runs on both network models, ``flow`` (the default,
max-min sharing) and ``analytical`` (closed forms), which shows what the network model
costs. Each case runs ``repeats`` times; the fastest run is reported (the machine may be
shared). The target: the simulator is the smaller share of the wall time (< 50%).
"""

from __future__ import annotations

import argparse
import inspect
import platform
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from sim import kernels as K
from sim.training.strategies import STRATEGIES
from sim.training.validator import validate

KINDS = ("bsp", "asp", "ssp")
WORKERS = (8, 64)
NETWORKS = ("flow", "analytical")
FEATURES, BATCH = 1000, 32


def config(kind: str, workers: int, network: str, iterations: int) -> Any:
    """The benchmark's experiment: logreg on a d = 1000 Gaussian mixture, one final eval."""
    return validate({
        "cluster": {"workers": workers, "network": network},
        "workload": {"model": "logreg", "features": FEATURES, "samples": 4096,
                     "batch": BATCH},
        "strategy": {"kind": kind},
        "run": {"iterations": iterations, "eval_every": iterations},
    })


def _public_kernels() -> dict[str, Callable[..., Any]]:
    """The functions :mod:`sim.kernels` exports (every call site goes through ``K.name``)."""
    return {name: getattr(K, name) for name in K.__all__ if inspect.isfunction(getattr(K, name))}


def _c_callers() -> list[ModuleType]:
    """The modules of :mod:`sim.kernels` that call C through their own ``_call`` binding."""
    return [module for name, module in sorted(sys.modules.items())
            if name.startswith(K.__name__ + ".") and "_call" in vars(module)]


def _timed(fn: Callable[..., Any], totals: dict[str, float], key: str) -> Callable[..., Any]:
    clock = time.perf_counter

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[key] += clock() - start

    return timed


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """Accumulate seconds spent meanwhile in kernel calls (``kernels_s``), in C (``c_s``, part
    of ``kernels_s``) and in gathering mini-batches (``data_s``).

    Public kernel functions never call one another, nor does ``next_batch`` call a kernel, so
    nothing is counted twice.
    """
    from sim.training.workload import Worker

    totals = {"kernels_s": 0.0, "c_s": 0.0, "data_s": 0.0}
    patched = [(K, name, fn, "kernels_s") for name, fn in _public_kernels().items()]
    patched += [(module, "_call", module._call, "c_s") for module in _c_callers()]
    patched += [(Worker, "next_batch", Worker.next_batch, "data_s")]
    for owner, name, fn, key in patched:
        setattr(owner, name, _timed(fn, totals, key))
    try:
        yield totals
    finally:
        for owner, name, fn, _ in patched:
            setattr(owner, name, fn)


def measure_case(kind: str, workers: int, network: str, iterations: int) -> dict[str, Any]:
    """Run one case (build excluded from the timing) and split its wall time."""
    from sim.simulated.engine import build_simulation

    env, ctx, strategy = build_simulation(config(kind, workers, network, iterations))
    with stopwatch() as totals:
        start = time.perf_counter()
        strategy.start()
        env.run(until=ctx.done)
        wall_s = time.perf_counter() - start
    gradients = sum(w.clock for w in ctx.workers)
    return {"strategy": kind, "workers": workers, "network": network,
            "updates": ctx.recorder.iteration, "gradients": gradients, "wall_s": wall_s,
            "updates_per_s": ctx.recorder.iteration / wall_s,
            "gradients_per_s": gradients / wall_s, "events": env.events_processed,
            "kernel_share": totals["kernels_s"] / wall_s, "c_share": totals["c_s"] / wall_s,
            "data_share": totals["data_s"] / wall_s,
            "simulator_share": 1 - (totals["kernels_s"] + totals["data_s"]) / wall_s}


def iterations_for(kind: str, workers: int, quick: bool) -> int:
    """Enough updates for a stable rate; a bsp update costs one gradient per worker."""
    budget = 300 if quick else 2000  # asp / ssp updates; bsp gets a comparable wall time
    synchronous = STRATEGIES[kind].synchronous  # one update costs a gradient per worker
    return max(20, budget * 2 // workers) if synchronous else budget


def measure(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    repeats = 1 if quick else 3
    rows = []
    for net in NETWORKS:
        for kind in KINDS:
            for n in WORKERS:
                runs = [measure_case(kind, n, net, iterations_for(kind, n, quick))
                        for _ in range(repeats)]
                rows.append(max(runs, key=lambda r: r["updates_per_s"]))
    return {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
            "model": f"logreg d={FEATURES} batch={BATCH}", "repeats": repeats, "rows": rows,
            "target_met": all(r["simulator_share"] < 0.5 for r in rows)}


def render(result: dict[str, Any]) -> str:
    head = (f"{'network':<11}{'strategy':<9}{'workers':>8}{'updates':>9}{'updates/s':>11}"
            f"{'grads/s':>10}{'us/grad':>9}{'kernels':>9}{'(C)':>6}{'batches':>9}"
            f"{'simulator':>11}")
    lines = [f"training throughput, {result['model']} ({result['machine']}), "
             f"fastest of {result['repeats']}", "", head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['network']:<11}{r['strategy']:<9}{r['workers']:>8}{r['updates']:>9}"
                     f"{r['updates_per_s']:>11.0f}{r['gradients_per_s']:>10.0f}"
                     f"{1e6 / r['gradients_per_s']:>9.1f}{100 * r['kernel_share']:>8.0f}%"
                     f"{100 * r['c_share']:>5.0f}%{100 * r['data_share']:>8.0f}%"
                     f"{100 * r['simulator_share']:>10.0f}%"
                     + ("" if r["simulator_share"] < 0.5 else "  <- simulator > 50%"))
    lines += ["", "Shares of wall time: kernels = inside sim.kernels calls (in C alone);",
              "batches = gathering mini-batch rows; simulator = the rest (SimPy, network",
              "model, strategies, recorder). A bsp update is one step of every worker's",
              "gradient. Target: the simulator under 50% in every row: "
              + ("met" if result["target_met"] else "MISSED")]
    return "\n".join(lines)
