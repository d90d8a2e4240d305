"""Calibration from real runs: the device profile fitted to the gradient times that real
runs recorded, instead of a warm-loop microbenchmark (``sim calibrate --from-runs``).

The workflow of trace-driven predictors (Daydream, Zhu et al. 2020; dPRO, Hu et al. 2022):
measure a few real runs, fit the model's parameters to them, then ask the simulator
what-ifs. A gradient kernel inside a run takes longer than the same kernel in a warm loop
(its caches are shared with the rest of the rank's work; docs/measurements/validation.md),
so the device fitted to in-run times is the one those runs saw.

Each real run whose gradients are the model's own kernels (no ``compute.time_s``, no
pipelining, no model split) gives its median kernel time (``compute_time_s`` in its
summary, the median over its ranks and gradients); runs of one workload give one point,
the median of theirs. ``time = overhead + FLOPs / rate + traffic / bandwidth`` is then fitted
as :func:`~sim.calibration.fit_device.fit_device` fits microbenchmarks, each point's
residual kept in the profile. The host and fabric profiles are not fitted here.

The same runs' single gradients (their traces' ``compute`` spans) give the spread a
simulation can draw (``compute.distribution = "lognormal"``): ``in_run_sigma``, the standard
deviation of log(time / the run's median), pooled over the runs, kept in the profile.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.calibrated import CALIBRATED, read_profile
from sim.errors import UserError
from sim.results import load_repeats

if TYPE_CHECKING:
    from sim.config import Config


def real_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """The real run directories in ``paths``: each a run, a ``--repeat`` directory, or a
    ``sim validate --out`` (every ``cases/*/real``). Raises UserError for anything else."""
    found: list[Path] = []
    for path in map(Path, paths):
        cases = sorted(p for p in (path / "cases").glob("*/real") if p.is_dir()) \
            if (path / "cases").is_dir() else [path]
        found += [run.path for case in cases for run in load_repeats(case)]
    return found


def kernel_workload(config: Config) -> bool:
    """Whether a run's gradient time is its device's: real kernels, one model per rank."""
    from sim.training.parallel_plan import split_key

    return (config.compute.time_s is None and config.workload.numerics
            and config.strategy.pipelining == "none" and split_key(config) is None)


def device_points(run_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """One point per workload among the real runs with real kernels: its FLOPs and weight
    traffic per gradient and the median of the runs' median kernel times (s)."""
    from sim.calibration.measure_device import describe_workload, work_of
    from sim.config import parse, read_toml
    from sim.training.workload import build_workload

    seconds: dict[str, list[float]] = {}
    configs: dict[str, Any] = {}
    for path in run_dirs:
        summary = json.loads((path / "summary.json").read_text())
        if summary.get("kind") != "real" or summary.get("compute_time_s") is None:
            continue
        config = parse(read_toml(path / "config.toml"), str(path / "config.toml"))
        if not kernel_workload(config):
            continue
        key = config.workload.model_dump_json()
        configs.setdefault(key, config)
        seconds.setdefault(key, []).append(float(summary["compute_time_s"]))
    points = []
    for key, config in configs.items():
        layers = build_workload(config).layers
        points.append({"workload": describe_workload(config), "runs": len(seconds[key]),
                       **work_of(layers, config.workload.batch),
                       "seconds": statistics.median(seconds[key])})
    return points


def in_run_sigma(run_dirs: Iterable[Path]) -> float | None:
    """The lognormal shape of single gradients inside the real runs with real kernels: the
    standard deviation of log(span / the run's median span) over every worker's
    ``compute`` spans, pooled; None without such a run or trace."""
    from sim.config import parse, read_toml

    logs: list[np.ndarray] = []
    for path in run_dirs:
        trace = path / "trace.json"
        if not trace.exists():
            continue
        config = parse(read_toml(path / "config.toml"), str(path / "config.toml"))
        if not kernel_workload(config):
            continue
        events = json.loads(trace.read_text())
        events = events.get("traceEvents", []) if isinstance(events, dict) else events
        spans = np.array([e["dur"] for e in events if e.get("ph") == "X"
                          and e.get("name") == "compute" and e.get("pid") == 0
                          and e.get("dur", 0) > 0], float)
        if len(spans) > 1:
            logs.append(np.log(spans / np.median(spans)))
    return float(np.std(np.concatenate(logs))) if logs else None


def named_profile(configs: Iterable[Path], table: str, key: str) -> Path | None:
    """The calibrated profile that every config in ``configs`` names at ``[table] key``
    (``"calibrated:PATH"``, as ``sim real --twin`` and ``sim validate`` write them) if it
    exists; None otherwise (none, a preset, or several)."""
    from sim.config import read_toml

    named = {str(read_toml(path).get(table, {}).get(key, "")) for path in configs}
    if len(named) != 1 or not (name := named.pop()).startswith(CALIBRATED):
        return None
    path = Path(name.removeprefix(CALIBRATED))
    return path if path.is_file() else None


def runs_device(run_dirs: Iterable[Path]) -> Path | None:
    """The calibrated device profile every run in ``run_dirs`` names, if it exists: a prior
    for the fit; None otherwise."""
    return named_profile((path / "config.toml" for path in run_dirs), "compute", "device")


def write_device_from_runs(path: Path, paths: Iterable[Path],
                           prior: Path | None = None) -> dict[str, Any]:
    """Fit the device to the real runs in ``paths`` and write it to ``path``; the fit (its
    rates and each point with its error). With ``prior`` (a device profile's JSON) the fit
    is pulled weakly towards it (:func:`~sim.calibration.fit_device.fit_device_near`), so
    that runs of one or two workloads leave the terms they cannot fix at the prior's
    values. Raises UserError without a run to fit, ValueError for an unreadable prior."""
    from sim.calibration.fit_device import fit_device, fit_device_near
    from sim.calibration.profiles import stamp, write_device
    from sim.training.compute_model import PROFILE_FORMAT

    dirs = real_run_dirs(paths)
    points = device_points(dirs)
    if not points:
        raise UserError(f"--from-runs: none of the {len(dirs)} real run(s) computed "
                        "gradients with real kernels (they all set compute.time_s, "
                        "pipelining or a model split); nothing to fit the device to")
    if prior is None:
        fit = fit_device(points)
    else:
        fit = fit_device_near(points, read_profile(Path(prior), PROFILE_FORMAT,
                                                   "device profile"))
    sigma = in_run_sigma(dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_device(path, fit, points,
                 f"sim calibrate --from-runs: in-run gradient times of {len(points)} "
                 f"workload(s) from {len(dirs)} real run(s)"
                 + (f", near {prior}" if prior else "") + f"; {stamp()}",
                 name="from-runs", concurrency=1, in_run_sigma=sigma)
    return fit.rates() | {"points": points, "in_run_sigma": sigma}
