"""``python -m sim bench scale``: how the simulator's cost grows with the number of workers.

For bsp and asp on the flow and analytical networks, at p = 64 to 4,096 workers (a large
asynchronous case: eth-25g, a leaf-spine with oversubscription 3, logistic regression with
d = 1000, exponential compute times), each worker computes the same number of gradients
(:data:`GRADIENTS_PER_WORKER`), so the work grows as p: a wall time growing as p^1 is a
constant cost per gradient. Each case reports its wall time (the run; building the data and
the cluster is left out), SimPy events and events per second of wall time, and the memory
it took: the growth of the process's peak resident set over the run and the build, the data
set's share of it, and the rest per worker (shards are index lists into the one copy of the
data set, so that rest is what a worker really costs).

Every case runs in a child process of its own (forked where the platform can), so its peak
memory is its own. The fitted exponent k of wall ~ p^k comes from all the sizes of a
series; a bare SimPy loop's event rate, measured in the same run, is the floor events per
second are compared with.

Then parallelism plans (timing only, A100s 8 to a host on NVLink 3, IB HDR, 1F1B; issue
46), each on both engines side by side where the event engine finishes in reasonable time:
``run.engine = "events"`` (every rank a process, every tensor allreduce flow by flow) and
``"steady"`` (:mod:`sim.simulated.steady_state`), with their simulated step (which must
agree), SimPy events, wall time of the whole simulation (build, run, results; and the CPU
seconds, which other processes on the machine do not inflate) and peak memory, and the
ratios. The largest is experiments/scale/3072-gpus.toml's layout (Narayanan et al. 2021's
1 T run: 6 x 64 x 8 = 3,072 GPUs, 512 microbatches; an MLP of 128 layers of width 25,600
where the experiment plans the gpt-1t profile), steady only.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim.bench.network_bench import _bare_simpy
from sim.simulated.engine import build_simulation  # here: its imports are no case's memory
from sim.training.strategies import STRATEGIES
from sim.training.validator import validate

KINDS = ("bsp", "asp")
NETWORKS = ("flow", "analytical")
WORKERS = (64, 256, 1024, 4096)
QUICK_WORKERS = (16, 32, 64)
GRADIENTS_PER_WORKER = 4
FEATURES, QUICK_FEATURES, BATCH = 1000, 100, 16
TARGET_EXPONENT = 1.2  # the target: wall time growing at most ~p^1.2


def config(kind: str, network: str, workers: int, features: int) -> Any:
    """One case: enough rows for two batches per shard, one evaluation at the end."""
    samples = max(4096, int(np.ceil(2 * workers * BATCH / 0.8)))
    updates = GRADIENTS_PER_WORKER * (1 if STRATEGIES[kind].synchronous else workers)
    return validate({
        "cluster": {"workers": workers, "network": network, "fabric": "eth-25g",
                    "topology": "leaf-spine", "oversubscription": 3.0},
        "workload": {"model": "logreg", "features": features, "samples": samples,
                     "batch": BATCH},
        "strategy": {"kind": kind},
        "compute": {"distribution": "exponential"},
        "run": {"iterations": updates, "eval_every": updates},
    })


def measure_case(kind: str, network: str, workers: int, features: int) -> dict[str, Any]:
    """Build and run one case here; its wall time, events and memory (bytes)."""
    start_rss = _reset_peak_rss()
    env, ctx, strategy = build_simulation(config(kind, network, workers, features))
    data = ctx.workload.data
    data_bytes = int(data.X_train.nbytes + data.X_test.nbytes)
    start = time.perf_counter()
    strategy.start()
    env.run(until=ctx.done)
    wall_s = time.perf_counter() - start
    growth = max(_peak_rss() - start_rss, 0)
    return {"strategy": kind, "network": network, "workers": workers,
            "updates": ctx.recorder.iteration, "gradients": sum(w.clock for w in ctx.workers),
            "wall_s": wall_s, "events": env.events_processed,
            "events_per_s": env.events_processed / wall_s, "sim_time_s": float(env.now),
            "peak_bytes": growth, "data_bytes": data_bytes,
            "per_worker_bytes": max(growth - data_bytes, 0) / workers}


def _in_child(queue: Any, args: tuple[Any, ...]) -> None:
    queue.put(measure_case(*args))


def run_isolated(*args: Any, target: Any = _in_child) -> dict[str, Any]:
    """:func:`measure_case` (or what ``target`` measures) in a child process, so that its
    peak memory is its own."""
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    queue = context.Queue()
    child = context.Process(target=target, args=(queue, args))
    child.start()
    result = queue.get()
    child.join()
    return result


def exponent(workers: list[int], wall_s: list[float]) -> float:
    """k of the least-squares fit wall ~ p^k."""
    return float(np.polyfit(np.log(workers), np.log(wall_s), 1)[0])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    sizes = QUICK_WORKERS if quick else WORKERS
    features = QUICK_FEATURES if quick else FEATURES
    rows = [run_isolated(kind, network, p, features)
            for kind in KINDS for network in NETWORKS for p in sizes]
    series = []
    for kind in KINDS:
        for network in NETWORKS:
            mine = [r for r in rows if r["strategy"] == kind and r["network"] == network]
            series.append({"strategy": kind, "network": network,
                           "exponent": exponent([r["workers"] for r in mine],
                                                [r["wall_s"] for r in mine])})
    return {"model": f"logreg d={features} batch={BATCH}, eth-25g leaf-spine 3:1, "
                     f"{GRADIENTS_PER_WORKER} gradients per worker",
            "rows": rows, "series": series,
            "bare_simpy": _bare_simpy(20_000 if quick else 200_000),
            "target_exponent": TARGET_EXPONENT,
            "target_met": all(s["exponent"] <= TARGET_EXPONENT for s in series),
            "plans": measure_plans(quick)}


def render(result: dict[str, Any]) -> str:
    bare = result["bare_simpy"]["events_per_s"]
    head = (f"{'network':<11}{'strategy':<9}{'workers':>8}{'updates':>9}{'wall s':>9}"
            f"{'events':>10}{'events/s':>11}{'x bare':>8}{'peak MB':>9}{'data MB':>9}"
            f"{'KB/worker':>11}")
    lines = [f"simulator scaling: {result['model']}", "", head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(f"{r['network']:<11}{r['strategy']:<9}{r['workers']:>8}{r['updates']:>9}"
                     f"{r['wall_s']:>9.3f}{r['events']:>10}{r['events_per_s']:>11,.0f}"
                     f"{r['events_per_s'] / bare:>8.2f}{r['peak_bytes'] / 2**20:>9.1f}"
                     f"{r['data_bytes'] / 2**20:>9.1f}{r['per_worker_bytes'] / 2**10:>11.1f}")
    lines += ["", f"bare SimPy (one process of timeouts, this run): {bare:,.0f} events/s", "",
              "fitted exponent k of wall ~ p^k (the work grows as p):"]
    for s in result["series"]:
        lines.append(f"  {s['network']:<11}{s['strategy']:<5} k = {s['exponent']:.2f}")
    lines += [f"target: k <= {result['target_exponent']} in every series: "
              + ("met" if result["target_met"] else "MISSED"),
              "peak MB: growth of the peak resident set over the build and the run; "
              "KB/worker: that growth less the data set, per worker"]
    lines += render_plans(result.get("plans", []))
    return "\n".join(lines)


# (replicas, stages, shards, microbatches, layers, width, batch per replica, engines)
PLANS = (
    (2, 4, 4, 16, 16, 4096, 256, ("events", "steady")),
    (6, 8, 8, 64, 64, 4096, 512, ("events", "steady")),  # issue 46's 384 ranks
    # experiments/scale/3072-gpus.toml's layout, with an MLP of that model's widths
    (6, 64, 8, 512, 128, 25600, 512, ("steady",)),
)
# batches of 512: at 64, the 2x4x4 plan's 0.45 ms step had flows of other hosts due within
# the flow model's 1 ns precision of its tensor allreduces' (sim.network.flow), which the
# event engine finishes together: the engines 1.5 ns (3.4e-6) apart, 1.6e-15 at a precision
# of 0 (tests/simulated/test_steady_state.py::test_the_engines_part_only_by_the_flow_precision)
QUICK_PLANS = ((2, 4, 2, 8, 8, 512, 512, ("events", "steady")),
               (2, 4, 4, 8, 8, 1024, 512, ("events", "steady")))


def plan_config(replicas: int, stages: int, shards: int, microbatches: int, layers: int,
                width: int, batch: int, engine: str) -> Any:
    """One step of an MLP of ``layers`` dense layers of ``width``, timing only, on DGX
    A100-like hosts (a tensor group a host), as experiments/scale/3072-gpus.toml's."""
    return validate({
        "cluster": {"workers": replicas, "fabric": "ib-hdr", "ranks_per_host": shards,
                    "host_link": "nvlink3-a100"},
        "workload": {"model": "mlp", "dataset": "gaussian", "features": width, "classes": 8,
                     "samples": 16384, "hidden": [width] * (layers - 1), "batch": batch,
                     "numerics": False},
        "strategy": {"kind": "bsp", "collective": "ring"},
        "parallel": {"pipeline": stages, "tensor": shards, "microbatches": microbatches,
                     "schedule": "1f1b"},
        "compute": {"device": "a100"},
        "run": {"iterations": 1, "eval_every": 1, "memory": "report", "engine": engine},
    })


def measure_plan(case: tuple[Any, ...], engine: str) -> dict[str, Any]:
    """Simulate one plan on ``engine`` here: build, run and results (trace included)."""
    from sim.simulated.engine import simulate

    replicas, stages, shards, microbatches, layers, width, batch, _ = case
    config = plan_config(replicas, stages, shards, microbatches, layers, width, batch, engine)
    start_rss = _reset_peak_rss()
    wall, cpu = time.perf_counter(), time.process_time()
    summary = simulate(config).summary
    return {"engine": engine, "ranks": replicas * stages * shards,
            "layout": f"{replicas}x{stages}x{shards}, m={microbatches}, {layers}x{width}",
            "sim_time_s": summary["sim_time_s"], "events": summary["events"],
            "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "peak_bytes": max(_peak_rss() - start_rss, 0)}


def _plan_in_child(queue: Any, args: tuple[Any, ...]) -> None:
    queue.put(measure_plan(*args))


def measure_plans(quick: bool) -> list[dict[str, Any]]:
    """Each plan on its engines, each in a child process; the ratios events / steady."""
    rows = []
    for case in (QUICK_PLANS if quick else PLANS):
        runs = {engine: run_isolated(case, engine, target=_plan_in_child)
                for engine in case[-1]}
        steady, events = runs["steady"], runs.get("events")
        row = {"layout": steady["layout"], "ranks": steady["ranks"], "runs": runs}
        if events is not None:
            row["step_rel_diff"] = abs(events["sim_time_s"] - steady["sim_time_s"]) \
                / events["sim_time_s"]
            row["ratios"] = {key: events[key] / steady[key] if steady[key] else None
                             for key in ("events", "wall_s", "cpu_s", "peak_bytes")}
        rows.append(row)
    return rows


def render_plans(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'plan':<34}{'ranks':>6}{'engine':>8}{'step s':>12}{'events':>10}"
            f"{'wall s':>9}{'cpu s':>8}{'peak MB':>9}")
    lines = ["", "parallelism plans, one step (timing only): run.engine events vs steady",
             "", head, "-" * len(head)]
    for row in rows:
        for engine, r in row["runs"].items():
            lines.append(f"{row['layout']:<34}{row['ranks']:>6}{engine:>8}"
                         f"{r['sim_time_s']:>12.6g}{r['events']:>10}{r['wall_s']:>9.2f}"
                         f"{r['cpu_s']:>8.2f}{r['peak_bytes'] / 2**20:>9.1f}")
        if "ratios" in row:
            q = row["ratios"]
            lines.append(f"{'':<34}{'':>6}{'ratio':>8}{'':>12}{q['events']:>10.1f}"
                         f"{q['wall_s']:>9.1f}{q['cpu_s']:>8.1f}"
                         f"{(q['peak_bytes'] or 0):>9.1f}"
                         f"   steps differ by {row['step_rel_diff']:.1e} relative")
    lines.append("ratio: events engine / steady engine; wall and cpu: the whole simulation "
                 "(build, run, results)")
    return lines


def _peak_rss() -> int:
    """The process's peak resident set (bytes): VmHWM, or getrusage where there is no /proc."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, else KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _reset_peak_rss() -> int:
    """Reset the peak to the current resident set where Linux allows it; returns it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # not Linux, or not allowed: the peak then includes what came before
    return _peak_rss()
