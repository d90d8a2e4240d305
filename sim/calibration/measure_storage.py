"""Checkpoint files on this machine, written and read as real runs do (the storage profile's
points).

A checkpoint of each of several sizes is written with :func:`sim.real.executors.checkpoint.save`
(the npz payload, then ``write_file``: write, fsync, rename, directory fsync) and read back
with :func:`~sim.real.executors.checkpoint.load_latest` (glob, read, sha256, npz parse), as
rank 0 and the runner do, in a directory of the file system real runs write to. The fit is
:func:`sim.calibration.fit_recovery.fit_storage`.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from sim.real.executors import checkpoint as ckpt

SIZES = [1_000, 8_000, 64_000, 512_000, 2_000_000, 8_000_000]  # payload bytes
QUICK_SIZES = [1_000, 64_000, 1_000_000]

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

