"""This machine's gradient kernels, timed as real runs time them (the device profile's
points).

The gradient kernel of each workload (``model.loss_grad`` on a batch from
``worker.next_batch``, the call real runs time as ``compute``; gathering the batch is
``data``, a host cost: :mod:`sim.calibration.measure_host`) is timed, optionally in
``concurrency`` processes at once (all cores busy, as during a real run), at its batch and
at a quarter of it (a microbatch's rows: fewer FLOPs for the same weights). Each point
carries the work the device fit weighs (:func:`work_of`); the fit is
:func:`sim.calibration.fit_device.fit_device`.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import numpy as np

from sim.config import Config
from sim.training.validator import validate

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


def describe_workload(config: Config) -> str:
    """A workload in a few words (model, shape, classes, batch): a device point's name."""
    w = config.workload
    shape = f"{w.features}" + (f"-{'-'.join(map(str, w.hidden))}" if w.model == "mlp" else "")
    return f"{w.model} {shape} x{w.classes} batch {w.batch}"


def timed_workloads(device: dict[str, Any]) -> list[str]:
    """The workloads a device profile's points timed (:func:`describe_workload`'s names, its
    fit's and the runs' it was fitted to), each once, in order: ``device`` is the profile's
    JSON. None recorded: an empty list."""
    return list(dict.fromkeys(str(p["workload"]) for p in device.get("points") or []
                              if isinstance(p, dict) and "workload" in p))


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
        # spawned, not forked (see sim.calibration.measure_host.measure_vectors_together)
        with multiprocessing.get_context("spawn").Pool(concurrency) as pool:
            per_process = pool.map(_time_kernels_child, [(dumps, min_time_s)] * concurrency)
        seconds = np.mean(per_process, axis=0).tolist()
    points = []
    for config, s in zip(configs, seconds, strict=True):
        workload = build_workload(config)
        layers, batch = workload.layers, config.workload.batch
        points.append({"workload": describe_workload(config), **work_of(layers, batch),
                       "seconds": s})
    return points

