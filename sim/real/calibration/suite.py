"""Calibration: this machine's kernel rates and network, as profiles the simulator reads.

Compute: the gradient kernel of each workload (``model.loss_grad`` on a batch from
``worker.next_batch``, the call real runs time as ``compute``; gathering the batch is
``data``, a host cost: :mod:`sim.real.calibration.host`) is timed, optionally in
``concurrency`` processes at once (all cores busy, as during a real run), at its batch and
at a quarter of it (a microbatch's rows: fewer FLOPs for the same weights), and
``time = overhead_s + FLOPs / flops_per_s + weight traffic / memory_Bps`` is fitted by
non-negative least squares on relative errors (:mod:`sim.training.compute_model`; a term
whose coefficient would be negative is left out); the layers' inputs and outputs (activation
traffic) add ``activations / activation_Bps``, and a workload that reads ids by index (an
embedding model) ``ids x lookup_s``.
The result is a device profile (:func:`sim.training.compute_model.save_device_profile`) for
``compute.device = "calibrated:PATH"``.

Network: on the network being calibrated (shared memory or ``emulate:RATE``) and waiting as
real runs wait, :mod:`sim.real.calibration.netbench` measures ping-pong times, back-to-back small
messages (the per-message overhead o) and allreduce times through the simulator's schedule
on p ranks. One (alpha, beta) is fitted to all of them, ping-pong as
``alpha + n beta`` and the allreduce as the algorithm's closed form (the simulator's own),
minimising squared log ratios (a 2x error counts the same for small and large messages);
with o measured, the per-hop latency is ``(alpha - 2 o) / 2`` on the two hops of one switch.
Allreduces on more ranks than cores are measured and reported but left out of the fit: their
time is CPU scheduling (ranks waiting for a core), which no fabric parameter describes.
The result is a fabric profile (:func:`sim.network.fabrics.save_profile`) for
``cluster.fabric = "calibrated:PATH"``. Every raw sample and the fit errors are kept in it.

Host: :func:`sim.real.calibration.host.calibrate_host` writes ``host.json`` for
``cluster.host = "calibrated:PATH"``.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import Config
from sim.network.collectives import get_collective
from sim.network.fabrics import Fabric, save_profile
from sim.real.launch.emulate import Emulation
from sim.real.launch.launcher import Job, launch
from sim.training.compute_model import save_device_profile
from sim.training.validator import validate

SIZES = [8, 512, 4096, 32768, 262144, 1 << 20, 4 << 20]
QUICK_SIZES = [8, 4096, 262144]
# Workloads timed by default: small fused kernels to larger GEMM-bound MLPs.
DEFAULT_WORKLOADS: list[dict[str, Any]] = [
    {"workload": {"model": "logreg", "features": 64, "batch": 32}},
    {"workload": {"model": "logreg", "features": 256, "batch": 64}},
    {"workload": {"model": "softmax", "features": 256, "classes": 10, "batch": 64}},
    {"workload": {"model": "mlp", "features": 64, "classes": 10, "hidden": [128],
                  "batch": 64}},
    {"workload": {"model": "mlp", "features": 256, "classes": 10, "hidden": [512],
                  "batch": 64, "samples": 8192}},
]


def default_workloads() -> list[Config]:
    return [validate({**w, "cluster": {"workers": 1}}, "default workload")
            for w in DEFAULT_WORKLOADS]


def _describe(config: Config) -> str:
    w = config.workload
    shape = f"{w.features}" + (f"-{'-'.join(map(str, w.hidden))}" if w.model == "mlp" else "")
    return f"{w.model} {shape} x{w.classes} batch {w.batch}"


# ---- compute -----------------------------------------------------------------------------

def time_kernels(configs: list[Config], min_time_s: float = 0.2) -> list[float]:
    """Median seconds of one gradient (worker 0 of each config)."""
    from sim.training.workload import build_workload

    medians = []
    for config in configs:
        workload = build_workload(config)
        worker, params = workload.workers[0], workload.params
        for _ in range(5):
            worker.gradient(params)
        samples, spent = [], 0.0
        while spent < min_time_s or len(samples) < 20:
            X, y = worker.next_batch()  # data, not compute
            start = time.perf_counter()
            worker.model.loss_grad(params, X, y, out=worker.grad)
            samples.append(time.perf_counter() - start)
            spent += samples[-1]
        medians.append(float(np.median(samples)))
    return medians


def _time_kernels_child(args: tuple[list[dict], float]) -> list[float]:
    dumps, min_time_s = args
    return time_kernels([validate(d) for d in dumps], min_time_s)


def with_microbatches(configs: list[Config]) -> list[Config]:
    """Each config, and the same at a quarter of its batch (when that is >= 1 row)."""
    out = []
    for config in configs:
        out.append(config)
        if config.workload.batch >= 4:
            dump = config.model_dump(mode="json", exclude_none=True)
            dump["workload"]["batch"] = config.workload.batch // 4
            out.append(validate(dump, "a quarter batch"))
    return out


def work_of(layers: Any, batch: int) -> dict[str, float]:
    """A gradient's work on a batch of ``batch`` rows through ``layers``
    (:class:`sim.training.messages.LayerCosts`): FLOPs, weight bytes, activation bytes and
    ids read by index, the device fit's terms."""
    return {"flops": layers.flops(batch), "traffic": layers.traffic(),
            "activations": layers.activations(batch), "lookups": layers.lookups(batch)}


def measure_kernels(configs: list[Config], concurrency: int = 1,
                    min_time_s: float = 0.2) -> list[dict[str, Any]]:
    """Points of each config at its batch and a quarter of it (:func:`with_microbatches`):
    :func:`work_of` and the median gradient time (mean over processes)."""
    from sim.training.workload import build_workload

    configs = with_microbatches(configs)
    if concurrency <= 1:
        seconds = time_kernels(configs, min_time_s)
    else:
        dumps = [c.model_dump(mode="json", exclude_none=True) for c in configs]
        # spawned, not forked (see sim.real.calibration.host.measure_vectors_together)
        with multiprocessing.get_context("spawn").Pool(concurrency) as pool:
            per_process = pool.map(_time_kernels_child, [(dumps, min_time_s)] * concurrency)
        seconds = np.mean(per_process, axis=0).tolist()
    points = []
    for config, s in zip(configs, seconds, strict=True):
        workload = build_workload(config)
        layers, batch = workload.layers, config.workload.batch
        points.append({"workload": _describe(config), **work_of(layers, batch), "seconds": s})
    return points


#: The device fit's terms beyond the overhead and FLOPs (a point without one has 0 of it).
EXTRAS = ("traffic", "activations", "lookups")


@dataclass
class DeviceFit:
    flops_per_s: float
    overhead_s: float
    memory_Bps: float | None  # None: the traffic term left out (no bandwidth found)
    errors: list[float]  # (predicted - measured) / measured, per point
    lookup_s: float | None = None  # None: no point reads ids, or the term left out
    activation_Bps: float | None = None  # None: no activations, or the term left out

    @classmethod
    def of(cls, coef: dict[str, float], errors: list[float]) -> DeviceFit:
        """From each term's coefficient (s per unit; a term absent or 0: left out)."""
        def rate(term: str) -> float | None:
            return 1.0 / coef[term] if coef.get(term, 0.0) > 0 else None

        return cls(1.0 / coef["flops"], coef.get("overhead", 0.0), rate("traffic"), errors,
                   coef.get("lookups") or None, rate("activations"))

    def rates(self) -> dict[str, float | None]:
        """The device profile's numbers, by their keys."""
        return {"flops_per_s": self.flops_per_s, "overhead_s": self.overhead_s,
                "memory_Bps": self.memory_Bps, "activation_Bps": self.activation_Bps,
                "lookup_s": self.lookup_s}


def device_columns(points: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each term's value at each point: 1 (the overhead), FLOPs, weight bytes, activation
    bytes, ids."""
    def column(key: str) -> np.ndarray:
        return np.array([p.get(key, 0.0) for p in points], float)

    return {"overhead": np.ones(len(points)), "flops": column("flops"),
            "traffic": column("traffic"), "activations": column("activations"),
            "lookups": column("lookups")}


def present_terms(named: dict[str, np.ndarray]) -> list[str]:
    """The overhead, FLOPs and each of the :data:`EXTRAS` some point has."""
    return ["overhead", "flops"] + [t for t in EXTRAS if named[t].any()]


def fit_device(points: list[dict[str, Any]]) -> DeviceFit:
    """time = overhead + FLOPs / flops_per_s + traffic / memory_Bps + activations /
    activation_Bps + ids x lookup_s by non-negative least squares on relative errors
    (Lawson and Hanson's NNLS): a term whose coefficient would be negative is left out (0),
    and so is one that no point has. Where that leaves no FLOP rate (points too few or of
    one shape), the overhead and FLOPs alone, else a pure rate through the origin."""
    from scipy.optimize import nnls

    seconds = np.array([p["seconds"] for p in points])
    named = device_columns(points)
    for terms in (present_terms(named), ["overhead", "flops"]):
        A = np.column_stack([named[t] for t in terms]) / seconds[:, None]
        x, _ = nnls(A, np.ones_like(seconds))
        coef = dict(zip(terms, x.tolist(), strict=True))
        if coef["flops"] > 0:
            break
    else:
        coef = {"flops": float(np.median(seconds / named["flops"]))}
    predicted = sum(coef[t] * named[t] for t in coef)
    return DeviceFit.of(coef, (predicted / seconds - 1).tolist())


PRIOR_WEIGHT = 1e-4  # the squared relative error a term the size of a whole gradient off
# its prior weighs (fit_device_near)


def fit_device_near(points: list[dict[str, Any]], prior: dict[str, Any]) -> DeviceFit:
    """:func:`fit_device`'s terms by non-negative least squares on relative errors, pulled
    weakly (:data:`PRIOR_WEIGHT`) towards a prior device's (``prior``: a device profile's
    JSON): where the points leave a term free (fewer workloads than terms, or workloads of
    one shape) it keeps the prior's value, and elsewhere the points decide (Tikhonov
    regularisation towards a prior). A term no point has (weights, activations, ids) keeps
    the prior's value as it is."""
    from scipy.optimize import nnls

    seconds = np.array([p["seconds"] for p in points])
    named = device_columns(points)
    known = {"overhead": prior.get("overhead_s", 0.0), "flops": 1.0 / prior["flops_per_s"],
             "traffic": per_unit(prior.get("memory_Bps")),
             "activations": per_unit(prior.get("activation_Bps")),
             "lookups": prior.get("lookup_s") or 0.0}
    terms = present_terms(named)
    columns = np.column_stack([named[t] for t in terms])
    start = np.array([known[t] for t in terms])
    # a unit of each coefficient's prior row: what the term adds to a typical gradient
    # (of the points that have the term), over that gradient's time
    typical = np.array([np.median(c[c > 0]) if c.any() else 0.0 for c in columns.T]) \
        / float(np.median(seconds))
    rows = np.sqrt(PRIOR_WEIGHT) * np.diag(typical)
    A = np.vstack([columns / seconds[:, None], rows])
    b = np.concatenate([np.ones_like(seconds), rows @ start])
    x, _ = nnls(A, b)
    predicted = columns @ x
    coef = known | dict(zip(terms, x.tolist(), strict=True))
    if coef["flops"] <= 0:  # no FLOPs at all: the prior's rate
        coef["flops"] = known["flops"]
    return DeviceFit.of(coef, (predicted / seconds - 1).tolist())


def per_unit(rate: float | None) -> float:
    """Seconds per unit of a rate (0 for none)."""
    return 1.0 / rate if rate else 0.0


# ---- network -----------------------------------------------------------------------------

def netbench(spec: dict[str, Any], ranks: int, emulation: Emulation | None,
             timeout_s: float = 600.0) -> dict[str, Any]:
    """Run :mod:`sim.real.calibration.netbench` on ``ranks`` ranks; its result."""
    with tempfile.TemporaryDirectory(prefix="sgd-calibrate-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        spec = {**spec, "result": str(work / "result.json")}
        (work / "spec.json").write_text(json.dumps(spec))
        launch(Job([sys.executable, "-m", "sim.real.calibration.netbench", "--spec",
                    str(work / "spec.json")], ranks, work,
                   env=emulation.env if emulation else {},
                   prefix=emulation.prefix if emulation else None, timeout_s=timeout_s))
        return json.loads((work / "result.json").read_text())


def measure_network(emulation: Emulation | None, ranks: list[int], wait: str,
                    algorithm: str = "ring", quick: bool = False) -> dict[str, Any]:
    """Ping-pong, stream and allreduce measurements (see :mod:`sim.real.calibration.netbench`)."""
    from sim.real.launch.real_run import wait_mode

    sizes, reps = (QUICK_SIZES, 20) if quick else (SIZES, 100)
    out = {"pingpong": netbench({"mode": "pingpong", "sizes": sizes, "reps": reps,
                                 "wait": wait_mode(wait, 2)}, 2, emulation),
           "stream": netbench({"mode": "stream", "reps": reps, "wait": wait_mode(wait, 2)},
                              2, emulation),
           "allreduce": [netbench({"mode": "allreduce", "sizes": sizes, "reps": reps,
                                   "algorithm": algorithm, "wait": wait_mode(wait, p)},
                                  p, emulation) for p in ranks]}
    out["algorithm"] = algorithm
    return out


def fit_log(A: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Non-negative (alpha, beta) minimising the squared log ratios of ``A @ x`` to ``t``.

    Log ratios weigh a 2x over- and under-estimate alike, so small messages (alpha) and
    large ones (beta) both count, whatever their absolute times.
    """
    start, *_ = np.linalg.lstsq(A / t[:, None], np.ones_like(t), rcond=None)
    floor = np.log([1e-12, 1e-16])  # x = exp(u) > 0: a step may not drive a term to 0
    u = np.maximum(np.log(np.maximum(start, [1e-9, 1e-13])), floor)
    damping = 1e-3

    def cost(u: np.ndarray) -> float:
        return float(np.sum(np.log(A @ np.exp(u) / t) ** 2))

    for _ in range(200):  # Levenberg-Marquardt on two parameters
        x = np.exp(u)
        predicted = A @ x
        r = np.log(predicted / t)
        J = A * x / predicted[:, None]
        step = np.maximum(u + np.linalg.solve(J.T @ J + damping * np.eye(2), -J.T @ r),
                          floor) - u
        if cost(u + step) < cost(u):
            u, damping = u + step, damping / 3
            if np.abs(step).max() < 1e-10:
                break
        else:
            damping *= 5
    x = np.exp(u)
    return float(x[0]), float(x[1])


def fit_network(measured: dict[str, Any]) -> dict[str, Any]:
    """alpha, beta, o and per-hop latency from the measurements, with each point's error."""
    algo = get_collective(measured["algorithm"])
    rows, times, labels = [], [], []
    pp = measured["pingpong"]
    for n, t in zip(pp["sizes"], pp["seconds"], strict=True):
        rows.append((1.0, float(n)))
        times.append(t)
        labels.append(f"pingpong {n} B")
    cores = os.cpu_count() or 1
    for ar in (ar for ar in measured["allreduce"] if ar["ranks"] > 1):  # one rank sends nothing
        p = ar["ranks"]
        a1, b1 = algo.closed_form_s(p, 0, 1.0, 0.0), algo.closed_form_s(p, 1.0, 0.0, 1.0)
        for n, t in zip(ar["sizes"], ar["seconds"], strict=True):
            rows.append((a1, b1 * n))
            times.append(t)
            labels.append(f"allreduce p={p} {n} B" + (" (not fitted)" if p > cores else ""))
    A, t = np.array(rows), np.array(times)
    fitted = np.array(["not fitted" not in label for label in labels])
    alpha, beta = fit_log(A[fitted], t[fitted])
    overhead = min(float(measured["stream"]["seconds"][0]), alpha / 2)
    errors = (A @ np.array([alpha, beta]) / t - 1).tolist()
    return {"alpha_s": float(alpha), "beta_s_per_byte": float(beta),
            "bandwidth_Bps": 1.0 / float(beta), "overhead_s": overhead,
            "latency_s": max(0.0, (float(alpha) - 2 * overhead) / 2),
            "points": [{"what": w, "measured_s": m, "error": e}
                       for w, m, e in zip(labels, times, errors, strict=True)]}


# ---- profiles ----------------------------------------------------------------------------

def stamp() -> str:
    return f"{dt.date.today().isoformat()}, {platform.node()}, {os.cpu_count()} CPUs"


def write_fabric(path: Path, net: str, measured: dict[str, Any],
                 fit: dict[str, Any]) -> Fabric:
    fabric = Fabric(f"calibrated-{net}", 8 * fit["bandwidth_Bps"], fit["latency_s"],
                    fit["overhead_s"], source=f"sim calibrate --net {net}: ping-pong, stream "
                    f"and {measured['algorithm']} allreduce fits; {stamp()}")
    save_profile(path, fabric, source=fabric.source,
                 measurements={"raw": measured, "fit": fit})
    return fabric


def write_device(path: Path, points: list[dict[str, Any]], concurrency: int) -> dict:
    fit = fit_device(points)
    for point, error in zip(points, fit.errors, strict=True):
        point["error"] = error
    save_device_profile(path, fit.flops_per_s, fit.overhead_s,
                        f"sim calibrate: gradient times of {len(points)} workloads, "
                        f"{concurrency} process(es) at once; {stamp()}", fit.memory_Bps,
                        fit.lookup_s, fit.activation_Bps,
                        name=f"calibrated-{platform.node()}", points=points,
                        concurrency=concurrency)
    return fit.rates() | {"errors": fit.errors}
