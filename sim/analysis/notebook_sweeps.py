"""Running a sweep from a notebook: ``--set`` text, and a sweep run once per overrides."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim.analysis.frames import PathLike
from sim.errors import UserError


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | np.integer | np.floating):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise UserError(f"override: cannot write {value!r} ({type(value).__name__}) as TOML")


def override(key: str, value: Any) -> str:
    """The ``--set`` text ``key=value`` with ``value`` (bool, number, string or a list of
    them) written as TOML, e.g. ``override("sweep.cluster.workers", [1, 4])`` ->
    ``'sweep.cluster.workers=[1, 4]'``. Raises UserError for other types."""
    return f"{key}={_toml(value)}"


def cached_sweep(config: PathLike, out: PathLike, overrides: Sequence[str] = (),
                 quiet: bool = False, jobs: int | None = None) -> Path:
    """Run (or resume) the ``[sweep]`` of ``config`` with ``--set`` ``overrides`` into
    ``OUT-<hash of the overrides>`` and return that directory.

    Changed overrides get a fresh directory; unchanged ones reuse the finished runs (the
    sweep is resumable). ``jobs``: local worker processes (default: one per core; 1 runs
    the points in this process). Prints one line (runs made, reused, where) unless ``quiet``.
    Raises UserError for a bad config or override, or naming the points that failed.
    """
    from sim.sweep import run_sweep

    tag = hashlib.sha256(json.dumps(list(overrides)).encode()).hexdigest()[:8]
    target = Path(out)
    report = run_sweep(config, target.with_name(f"{target.name}-{tag}"), list(overrides),
                       jobs=jobs, plots=False, progress=False)
    if report.failed:
        raise UserError(f"{config}: failed runs: {report.failed}")
    if not quiet:
        print(f"{Path(config).stem}: {len(report.ran)} runs, {len(report.skipped)} reused "
              f"-> {report.out}")
    return Path(report.out)
