"""A run's machine speed: the factor by which all of one run's CPU work is slower or faster
than another's of the same config, drawn once per simulated run for a predicted interval.

Repeats of one case minutes apart differ by more than their gradients' noise: on this 2-vCPU
VM three repeats of the one-worker asp kernel case spent 110, 122 and 163 us an update
gathering batches, 50, 57 and 71 us on each gradient and 42, 52 and 71 us in overhead, every
CPU activity of a run slower or faster together (docs/measurements/validation.md). Noise drawn
gradient by gradient averages out over a run's hundred updates; noise by run does not, and the
predicted intervals drawn gradient by gradient covered the real mean in 1 case of 14. So each
simulated run of an interval draws one factor ``f = exp(sigma z)`` (z standard normal: the
calibrated machine is the median run) and runs on a host and device ``f`` times slower:
the host's CPU costs (:data:`CPU_SECONDS`) times ``f``, its CPU rates (:data:`CPU_RATES`) and
the device's rates over ``f``. Scheduler constants (slices, polls, wake-ups) and the reload
transient are the kernel's and the caches', not the core's speed, and stay.

``sigma`` is measured on the real runs (:func:`run_sigma`): the pooled standard deviation of
the log of each run's CPU time per update around its case's mean.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import read_profile, write_profile_data

CPU_SECONDS = ("message_s", "step_s", "copy_call_s", "copy_row_s", "update_call_s",
               "reduce_call_s", "table_call_s", "table_row_s", "table_step_call_s",
               "table_step_row_s", "unique_call_s", "unique_id_s", "serve_apply_s",
               "serve_push_s", "serve_step_s", "serve_pull_s")
CPU_RATES = ("copy_Bps", "update_Bps", "reduce_Bps", "message_Bps", "table_Bps",
             "table_step_Bps")
CPU_ACTIVITIES = ("data_s", "compute_s", "update_s", "overhead_s")  # a worker's own CPU work


def run_cpu_s(summary: dict[str, Any]) -> float | None:
    """A real run's mean worker CPU time per update (s; data, compute, update, overhead);
    None where its ranks outnumbered its cores (its spans then include waiting for one)."""
    if (summary.get("kind") != "real" or not summary.get("iterations")
            or int(summary.get("ranks", 0)) > int(summary.get("cpus", 0))):
        return None
    total = sum(float(summary.get(a) or 0.0) for a in CPU_ACTIVITIES)
    return total / summary["iterations"] if total > 0 else None


def run_sigma(run_dirs: Iterable[Path]) -> float | None:
    """The lognormal shape of run-to-run speed: the standard deviation of log(a run's CPU
    time per update) around its case's mean log, pooled over the cases with two or more
    qualifying repeats (each case loses a degree of freedom); None without such a case."""
    cases: dict[Path, list[float]] = {}
    for path in run_dirs:
        cpu = run_cpu_s(json.loads((Path(path) / "summary.json").read_text()))
        if cpu is not None:
            cases.setdefault(Path(path).parent, []).append(math.log(cpu))
    groups = [np.array(logs) for logs in cases.values() if len(logs) > 1]
    if not groups:
        return None
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    return math.sqrt(squares / sum(len(g) - 1 for g in groups))


def scaled_host(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """A host profile's JSON ``data`` on a core ``factor`` times slower."""
    out = dict(data)
    for name in CPU_SECONDS:
        if out.get(name) is not None:
            out[name] = out[name] * factor
    for name in CPU_RATES:
        if out.get(name) is not None:
            out[name] = out[name] / factor
    return out


def scaled_device(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """A device profile's JSON ``data`` ``factor`` times slower (its rates and constant)."""
    out = dict(data, flops_per_s=data["flops_per_s"] / factor,
               overhead_s=data["overhead_s"] * factor)
    for rate in ("memory_Bps", "activation_Bps"):
        if out.get(rate):
            out[rate] = out[rate] / factor
    if out.get("lookup_s"):
        out["lookup_s"] = out["lookup_s"] * factor
    return out


def draw(seed: int, sigma: float) -> float:
    """Run ``seed``'s speed factor: ``exp(sigma z)``, z standard normal from the seed."""
    return math.exp(sigma * float(np.random.default_rng(seed).standard_normal()))


def slower_profiles(host: Path, device: Path, factor: float, out: Path) -> tuple[Path, Path]:
    """Copies of the host and device profiles ``factor`` times slower, in ``out``. Raises
    ValueError for an unreadable profile, OSError."""
    from sim.training import compute_model, host_costs

    out.mkdir(parents=True, exist_ok=True)
    return (write_profile_data(out / "host.json", scaled_host(
                read_profile(host, host_costs.PROFILE_FORMAT, "host profile"), factor)),
            write_profile_data(out / "device.json", scaled_device(
                read_profile(device, compute_model.PROFILE_FORMAT, "device profile"), factor)))
