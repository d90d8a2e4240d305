"""Checkpoint-restart on this machine, as profiles the simulator reads.

Both are measured through the real runner's own code paths:

* storage (``storage.json``, for ``checkpoint.storage = "calibrated:PATH"``): a checkpoint
  of each of several sizes is written with :func:`sim.real.executors.checkpoint.save` (the
  npz payload, then ``write_file``: write, fsync, rename, directory fsync) and read back
  with :func:`~sim.real.executors.checkpoint.load_latest` (glob, read, sha256, npz parse),
  as rank 0 and the runner do, in a directory of the file system real runs write to; the
  medians are fitted as ``latency_s + bytes / rate`` (write and read apart) by least
  squares on relative errors.
* restart (``recovery.json``, for ``faults.restart_s``): a short real bsp job of each
  config (3 updates, a checkpoint after every one, its last rank SIGKILLed after update 2)
  runs through :func:`sim.real.launch.real_run.run_faulty`, which starts it again from the
  checkpoint of update 1 and measures the restart as every real run does: from the kill to
  the new job's clock start (mpiexec, imports, building the workload, reading the
  checkpoint, the warm-up). ``restart_s`` is that, minus the checkpoint's read as the
  storage fit gives it (the simulator adds the read itself). Building the workload is part
  of it, so each config is measured apart (:func:`restart_for` picks a config's own).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim.calibrated import read_profile
from sim.config import Config
from sim.faults.storage import Storage, get_storage, save_storage_profile
from sim.real.calibration.host import MAX_ERROR
from sim.real.executors import checkpoint as ckpt
from sim.rundir import write_atomic
from sim.training.validator import validate

SIZES = [1_000, 8_000, 64_000, 512_000, 2_000_000, 8_000_000]  # payload bytes
QUICK_SIZES = [1_000, 64_000, 1_000_000]
RECOVERY_FORMAT = "sgd-lab.recovery-profile/1"


# ---- storage: the checkpoint files' write and read ----------------------------------------

def time_checkpoint(directory: Path, nbytes: int) -> tuple[int, float, float]:
    """(file bytes, write s, read s) of one checkpoint holding ``nbytes`` of parameters,
    written and read back in the empty ``directory`` (the file is removed after)."""
    params = np.random.default_rng(nbytes).random(max(nbytes // 8, 1))
    saved = ckpt.Saved(1, params, None, [1, 1], {"taken_s": 0.0})
    start = time.perf_counter()
    path = ckpt.save(directory, saved)
    written = time.perf_counter()
    back, _ = ckpt.load_latest(directory)
    read = time.perf_counter()
    size = path.stat().st_size
    path.unlink()
    if back is None or back.params.size != params.size:
        raise OSError(f"{path}: the checkpoint just written did not read back")
    return size, written - start, read - written


def measure_storage(directory: Path, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    """Each size's file bytes and median write and read times (s), with every sample."""
    directory.mkdir(parents=True, exist_ok=True)
    points = []
    for nbytes in sizes:
        samples = [time_checkpoint(directory, nbytes) for _ in range(repeats)]
        writes, reads = [s[1] for s in samples], [s[2] for s in samples]
        points.append({"bytes": samples[0][0], "write_s": statistics.median(writes),
                       "read_s": statistics.median(reads), "write_samples_s": writes,
                       "read_samples_s": reads})
    return points


def fit_rate(nbytes: list[float], seconds: list[float]) -> dict[str, Any]:
    """``seconds = latency_s + bytes / rate_Bps`` by least squares on relative errors; the
    fit and each point's relative error. A non-positive slope: the rate is infinite."""
    n, t = np.asarray(nbytes, float), np.asarray(seconds, float)
    A = np.column_stack([np.ones_like(n), n]) / t[:, None]
    (latency, per_byte), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    if per_byte <= 0:
        latency, per_byte = float(np.median(t)), 0.0
    if latency < 0:  # through the origin
        latency, per_byte = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    errors = ((latency + n * per_byte) / t - 1).tolist()
    return {"latency_s": float(latency),
            "rate_Bps": 1.0 / float(per_byte) if per_byte > 0 else float("inf"),
            "errors": errors, "max_error": max(abs(e) for e in errors)}


def where(directory: Path) -> str:
    """The file system ``directory`` is on: device, type and mount point (from
    /proc/self/mounts; "unknown file system" without it)."""
    best = None
    try:
        for line in Path("/proc/self/mounts").read_text().splitlines():
            device, mount, kind = line.split()[:3]
            if str(directory.resolve()).startswith(mount.rstrip("/") + "/") or \
                    str(directory.resolve()) == mount:
                if best is None or len(mount) > len(best[1]):
                    best = (device, mount, kind)
    except (OSError, ValueError):
        pass
    return f"{best[0]} ({best[2]}) at {best[1]}" if best else "unknown file system"


def write_storage(path: Path, points: list[dict[str, Any]], directory: Path,
                  repeats: int) -> dict[str, Any]:
    """Fit the points and write the storage profile to ``path``; the two fits. Raises
    ValueError when a fit gives no usable rate (see :class:`~sim.faults.storage.Storage`)."""
    sizes = [p["bytes"] for p in points]
    fits = {kind: fit_rate(sizes, [p[f"{kind}_s"] for p in points])
            for kind in ("write", "read")}
    for kind, fit in fits.items():
        for point, error in zip(points, fit["errors"], strict=True):
            point[f"{kind}_error"] = error
    source = (f"sim calibrate: sim.real.executors.checkpoint.save (npz, write_file: fsync, "
              f"rename, directory fsync) and load_latest (read, sha256, npz), "
              f"{min(sizes)}-{max(sizes)} B files, median of {repeats}, on "
              f"{where(directory)}; {time.strftime('%Y-%m-%d %H:%M')}, {os.uname().nodename}, "
              f"{os.cpu_count()} CPUs")
    storage = Storage("calibrated", write_Bps=fits["write"]["rate_Bps"],
                      read_Bps=fits["read"]["rate_Bps"],
                      latency_s=max(fits["write"]["latency_s"], fits["read"]["latency_s"]),
                      source=source)
    save_storage_profile(path, storage, write_latency_s=fits["write"]["latency_s"],
                         read_latency_s=fits["read"]["latency_s"], points=points)
    return fits


# ---- restart: from a rank's death to the resumed job's start ------------------------------

def restart_job(config: Config) -> Config:
    """``config`` as the short killed-and-restarted bsp job that measures its restart."""
    workers = max(config.cluster.workers, 2)
    data = config.model_dump(mode="json", exclude_none=True)
    data["strategy"].update(kind="bsp", pipelining="none")
    data["run"].update(iterations=3, eval_every=1)
    data["run"].pop("time_limit_s", None)
    data["cluster"]["workers"] = workers
    data["faults"] = {**data.get("faults", {}),
                      "failures": [{"rank": workers - 1, "at_update": 2}]}
    data["faults"].pop("mtbf_s", None)
    data["checkpoint"] = {**data.get("checkpoint", {}), "every_steps": 1, "mode": "blocking"}
    data["checkpoint"].pop("every_s", None)
    return validate(data, "restart calibration")


def config_key(config: Config) -> str:
    """What a restart depends on (the workload built, the ranks started), as a short key.
    Only the workload's keys that differ from their defaults count, so a key that a later
    version of the lab adds (with its default) leaves the profiles measured before valid."""
    text = json.dumps({"workload": config.workload.model_dump(mode="json",
                                                              exclude_defaults=True),
                       "workers": config.cluster.workers}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure_restart(config: Config, directory: Path, storage: Storage,
                    repeats: int) -> dict[str, Any]:
    """The restart of ``config``'s short killed job, ``repeats`` times: the spans (s), the
    checkpoint read back, and ``restart_s`` (the median span minus that read).
    Raises RunFailed or UserError."""
    from sim.real.calibration.suite import _describe
    from sim.real.launch.real_run import RealOptions, run_faulty
    from sim.training.validator import validate_real

    job = restart_job(config)
    real = validate_real(job)
    spans, size = [], 0
    for i in range(repeats):
        place = directory / f"restart-{i}"
        shutil.rmtree(place, ignore_errors=True)
        try:
            files = run_faulty(job, real, RealOptions(hang_s=120), None, i, place)
            size = ckpt.path_for(place, 1).stat().st_size
        finally:
            shutil.rmtree(place, ignore_errors=True)
        spans.append(float(json.loads(files["summary.json"])["restart_time_s"]))
    read_s = storage.read_s(size)
    return {"workload": _describe(config), "ranks": real.ranks, "key": config_key(config),
            "restart_time_s": spans, "checkpoint_bytes": size, "read_s": read_s,
            "restart_s": max(statistics.median(spans) - read_s, 0.0)}


def write_recovery(path: Path, points: list[dict[str, Any]], repeats: int) -> float:
    """Write ``recovery.json``; its ``restart_s`` (the median over the configs measured)."""
    restart_s = statistics.median(p["restart_s"] for p in points)
    source = (f"sim calibrate: real bsp jobs of 3 updates killed after update 2 and started "
              f"again by sim.real.launch.relaunch (kill to the new job's clock start, minus "
              f"the checkpoint's read), median of {repeats}; {time.strftime('%Y-%m-%d %H:%M')}"
              f", {os.uname().nodename}, {os.cpu_count()} CPUs")
    write_atomic(path, json.dumps({"format": RECOVERY_FORMAT, "restart_s": restart_s,
                                   "source": source, "points": points}, indent=2) + "\n")
    return restart_s


def restart_for(path: Path, config: Config) -> float:
    """``config``'s calibrated restart delay (s): its own if measured, else the profile's.
    Raises ValueError for an unreadable profile."""
    from sim.real.calibration.suite import _describe

    data = read_profile(path, RECOVERY_FORMAT, "recovery profile")
    points = data.get("points", [])
    own = [p["restart_s"] for p in points if p.get("key") == config_key(config)]
    if not own:  # keyed otherwise (an older lab): the same workload and ranks by name
        own = [p["restart_s"] for p in points if p.get("workload") == _describe(config)
               and p.get("ranks") == config.cluster.workers]
    return float(own[0] if len(own) == 1 else data["restart_s"])


def simulation_sets(config: Config, place: Path | None) -> list[str]:
    """``--set``s that simulate ``config`` on the profiles in ``place`` (``storage.json``,
    ``recovery.json``) when it has failures or checkpoints; none otherwise, or without
    them. Raises ValueError for an unreadable recovery profile."""
    if not (config.faults.enabled or config.checkpoint.enabled) or place is None or \
            not (place / "storage.json").exists():
        return []
    return [f'checkpoint.storage="calibrated:{place / "storage.json"}"',
            f"faults.restart_s={restart_for(place / 'recovery.json', config)!r}"]


# ---- both, with what to print ----------------------------------------------------------

def calibrate_recovery(out: Path, configs: list[Config], quick: bool = False) -> list[str]:
    """Measure and write ``out/storage.json`` and ``out/recovery.json`` (the files are
    timed in ``out``); the lines to print: fits with their errors, warnings, config lines.
    Raises RunFailed or UserError (a restart job failed), OSError (the files)."""
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".probe"
    sizes, repeats = (QUICK_SIZES, 3) if quick else (SIZES, 7)
    try:
        points = measure_storage(probe, sizes, repeats)
        fits = write_storage(out / "storage.json", points, out, repeats)
        storage = get_storage(f"calibrated:{out / 'storage.json'}")
        restarts = [measure_restart(c, probe, storage, 1 if quick else 3) for c in configs]
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    restart_s = write_recovery(out / "recovery.json", restarts, 1 if quick else 3)
    lines, warnings = ["storage (checkpoint files):"], []
    for kind, fit in fits.items():
        lines.append(f"  {kind:<5} {fit['latency_s'] * 1e6:9.1f} us + bytes / "
                     f"{fit['rate_Bps'] / 1e6:9.1f} MB/s (fit errors {min(fit['errors']):+.1%}"
                     f" .. {max(fit['errors']):+.1%})")
        if fit["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the checkpoint {kind} fit is off by up to "
                            f"{fit['max_error']:.0%} (over {MAX_ERROR:.0%}); its figures are "
                            "rough ones")
    for p in points:
        lines.append(f"    {p['bytes']:>10} B  write {p['write_s'] * 1e3:8.3f} ms "
                     f"{p['write_error']:+6.1%}  read {p['read_s'] * 1e3:8.3f} ms "
                     f"{p['read_error']:+6.1%}")
    lines.append(f"restart: {restart_s:.3f} s (kill to the resumed job's start, minus the read)")
    for p in restarts:
        spans = p["restart_time_s"]
        lines.append(f"  {p['workload']:<34} {p['ranks']} ranks: {p['restart_s']:.3f} s "
                     f"(measured {min(spans):.3f} .. {max(spans):.3f} s, read "
                     f"{p['read_s'] * 1e3:.2f} ms)")
    return lines + warnings + [f'  checkpoint.storage = "calibrated:{out / "storage.json"}"',
                               f"  faults.restart_s = {restart_s:.3f}"]
