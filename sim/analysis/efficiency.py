"""Hardware against statistical efficiency: seconds per sample, and samples to a target loss.

Their product is the time to the target (simulated seconds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.analysis.frames import Source, _as_table, curves
from sim.errors import UserError


def samples_to_target(samples: Sequence[float] | np.ndarray,
                      loss: Sequence[float] | np.ndarray, target: float) -> float:
    """Samples processed when ``loss`` first reached ``target`` (loss <= target),
    interpolated linearly between the two evaluations around the crossing; the first
    point's samples if it already met it, NaN if the loss never did. ``samples`` and
    ``loss`` are parallel, in evaluation order. Raises UserError if their lengths differ."""
    x, y = np.asarray(samples, dtype=float), np.asarray(loss, dtype=float)
    if x.shape != y.shape:
        raise UserError(f"samples_to_target: {x.size} samples but {y.size} losses")
    reached = np.flatnonzero(y <= target)
    if not reached.size:
        return math.nan
    k = int(reached[0])
    if k == 0:
        return float(x[0])
    share = (y[k - 1] - target) / (y[k - 1] - y[k])
    return float(x[k - 1] + share * (x[k] - x[k - 1]))


def efficiency(source: Source, slack: float = 1.05,
               target: float | None = None) -> pd.DataFrame:
    """Hardware and statistical efficiency of each run (one row per run, in order).

    Columns: ``path``, ``run``, ``label``, ``run.seed``, ``s_per_sample`` (simulated
    seconds per sample, 1 / samples_per_s: hardware efficiency), ``target_loss`` and
    ``samples_to_target`` (samples processed until the held-out loss first reached it,
    interpolated: statistical efficiency; NaN if never). Their product is the time to the
    target. The target is ``target`` if given, else per seed ``slack`` x the worst
    best-loss among that seed's runs, so that with slack >= 1 every run reaches it.
    Raises UserError for slack < 1 or for what :func:`curves` raises.
    """
    if not slack >= 1:
        raise UserError(f"efficiency: slack must be at least 1, got {slack}")
    runs = _as_table(source, ["run", "label", "run.seed", "samples_per_s",
                              "samples_per_update"])
    evals = curves(runs, "eval", columns=())
    best = evals.groupby("path", sort=False)["loss"].min()
    out = runs[["path", "run", "label", "run.seed"]].reset_index(drop=True)
    out["s_per_sample"] = 1.0 / runs["samples_per_s"].to_numpy(dtype=float)
    if target is None:
        worst_best = out["path"].map(best).groupby(out["run.seed"]).transform(
            lambda s: s.max(skipna=False))
        out["target_loss"] = slack * worst_best
    else:
        out["target_loss"] = float(target)
    by_path = dict(tuple(evals.groupby("path", sort=False)))
    out["samples_to_target"] = [
        samples_to_target(by_path[p]["samples"], by_path[p]["loss"], goal) if p in by_path
        else math.nan for p, goal in zip(out["path"], out["target_loss"], strict=True)]
    return out


def tradeoff(points: pd.DataFrame) -> pd.DataFrame:
    """One point per strategy label for the hardware vs statistical efficiency picture:
    the means over runs (seeds) of :func:`efficiency`'s ``s_per_sample`` and
    ``samples_to_target`` (NaN if any run's is), ``time_to_target_s`` (their product,
    simulated s) and ``runs`` (how many), labels in order of first appearance.
    Raises UserError if ``points`` lacks those columns."""
    needed = ["label", "s_per_sample", "samples_to_target"]
    missing = [c for c in needed if c not in points.columns]
    if missing:
        raise UserError(f"tradeoff: expected a table from efficiency (missing columns: "
                        f"{', '.join(missing)})")
    groups = points.groupby("label", sort=False)
    out = groups[needed[1:]].agg(lambda s: s.mean(skipna=False))
    out["time_to_target_s"] = out["s_per_sample"] * out["samples_to_target"]
    out["runs"] = groups.size()
    return out.reset_index()
