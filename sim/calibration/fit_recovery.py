"""The storage and recovery profiles fitted to their measurements
(:mod:`sim.calibration.measure_storage`, :mod:`sim.calibration.measure_recovery`).

Storage: each checkpoint size's median write and read times are fitted as
``latency_s + bytes / rate`` (write and read apart) by least squares on relative errors.
Recovery: ``restart_s`` is the median over the configs measured.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import numpy as np

from sim.calibration.least_squares import on_relative_errors
from sim.calibration.recovery_profile import RecoveryProfile
from sim.faults.storage import Storage


def fit_rate(nbytes: list[float], seconds: list[float]) -> dict[str, Any]:
    """``seconds = latency_s + bytes / rate_Bps`` by least squares on relative errors; the
    fit and each point's relative error. A non-positive slope: the rate is infinite."""
    n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    latency, per_byte = on_relative_errors([np.ones_like(n), n], t)
    if per_byte <= 0:
        latency, per_byte = float(np.median(t)), 0.0
    if latency < 0:  # through the origin
        latency, per_byte = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    errors = ((latency + n * per_byte) / t - 1).tolist()
    return {"latency_s": float(latency),
            "rate_Bps": 1.0 / float(per_byte) if per_byte > 0 else float("inf"),
            "errors": errors, "max_error": max(abs(e) for e in errors)}


def fit_storage(points: list[dict[str, Any]], place: str,
                repeats: int) -> tuple[Storage, dict[str, dict[str, Any]]]:
    """The storage profile of ``points`` (:func:`~sim.calibration.measure_storage.
    measure_storage`'s, measured ``repeats`` times on the file system ``place`` names) and
    its two fits (write, read); each point gets its ``write_error`` and ``read_error``.
    Raises ValueError when a fit gives no usable rate (see
    :class:`~sim.faults.storage.Storage`)."""
    sizes = [p["bytes"] for p in points]
    fits = {kind: fit_rate(sizes, [p[f"{kind}_s"] for p in points])
            for kind in ("write", "read")}
    for kind, fit in fits.items():
        for point, error in zip(points, fit["errors"], strict=True):
            point[f"{kind}_error"] = error
    source = (f"sim calibrate: sim.real.executors.checkpoint.save (npz, write_file: fsync, "
              f"rename, directory fsync) and load_latest (read, sha256, npz), "
              f"{min(sizes)}-{max(sizes)} B files, median of {repeats}, on "
              f"{place}; {time.strftime('%Y-%m-%d %H:%M')}, {os.uname().nodename}, "
              f"{os.cpu_count()} CPUs")
    storage = Storage("calibrated", write_Bps=fits["write"]["rate_Bps"],
                      read_Bps=fits["read"]["rate_Bps"],
                      latency_s=max(fits["write"]["latency_s"], fits["read"]["latency_s"]),
                      source=source)
    return storage, fits


def fit_recovery(points: list[dict[str, Any]], repeats: int) -> RecoveryProfile:
    """The recovery profile of the restarts measured (``points``, each config's
    :func:`~sim.calibration.measure_recovery.measure_restart`, ``repeats`` times): the
    median of their ``restart_s``."""
    restart_s = statistics.median(p["restart_s"] for p in points)
    source = (f"sim calibrate: real bsp jobs of 3 updates killed after update 2 and started "
              f"again by sim.real.launch.relaunch (kill to the new job's clock start, minus "
              f"the checkpoint's read), median of {repeats}; {time.strftime('%Y-%m-%d %H:%M')}"
              f", {os.uname().nodename}, {os.cpu_count()} CPUs")
    return RecoveryProfile(restart_s, source)
