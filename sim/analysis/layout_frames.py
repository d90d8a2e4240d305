"""Where a model and its tables are placed, as DataFrames: the pipeline bubble of each run,
D x p x t layouts and the fastest that fits, embedding placements (the values the
model-parallel and embedding figures of :mod:`sim.plots` draw)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.analysis.frames import PathLike

# ---- model parallelism ---------------------------------------------------------------------

def pipeline_bubble(sweep_dir: PathLike, reference: bool = True) -> pd.DataFrame:
    """A pipeline sweep's runs: run, pipeline, microbatches, schedule, bubble_fraction, the
    closed form (p - 1)/(m + p - 1), their difference ``excess`` and peak_memory_bytes (the
    values :func:`sim.plots.plot_bubble` draws). With ``reference``, also the bubble
    :func:`sim.training.stage_schedule.evaluate` gives for each stage's own mean forward
    and backward pass times in the run's first step (from trace.json; free messages): what
    is left of the excess beyond it is communication. Raises UserError when no run reports
    a bubble."""
    from sim.plots.parallel_figures import bubble_rows

    rows = pd.DataFrame(bubble_rows(Path(sweep_dir)))
    rows["excess"] = rows["bubble_fraction"] - rows["closed_form"]
    if reference:
        rows["reference"] = [_reference_bubble(Path(sweep_dir) / "runs" / r.run, r.schedule,
                                               r.pipeline, r.microbatches)
                             for r in rows.itertuples()]
    return rows


def _reference_bubble(run_dir: Path, schedule: str, p: int, m: int) -> float:
    """The schedule's bubble for the stages' measured pass times (replica 0, shard 0)."""
    from sim.plots.parallel_figures import first_step, schedule_slices
    from sim.training.stage_schedule import evaluate, schedule_ops

    if not (run_dir / "trace.json").is_file():
        return math.nan
    passes = first_step(schedule_slices(run_dir), m)
    times: dict[tuple[int, str], list[float]] = {}
    for rank, kind, _k, start, end in passes:
        times.setdefault((rank, kind), []).append(end - start)
    try:
        forward = [float(np.mean(times[(s, "F")])) for s in range(p)]
        backward = [float(np.mean(times[(s, "B")])) for s in range(p)]
    except KeyError:
        return math.nan
    return evaluate(schedule_ops(schedule, p, m), forward, backward).bubble_fraction


def layouts(sweep_dir: PathLike) -> pd.DataFrame:
    """A sweep of D x p x t layouts: layout, replicas, pipeline, tensor, fabric, width,
    time_per_sample_s, peak_memory_bytes, device_memory_bytes, memory_fits (the values
    :func:`sim.plots.plot_memory_time` draws)."""
    from sim.plots.parallel_figures import layout_rows

    return pd.DataFrame(layout_rows(Path(sweep_dir)))


def fastest_layouts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per width and fabric, the layout with the least time per sample among those that fit
    in the device's memory (``memory_fits`` not False), and the runner-up's time: where the
    winner changes along a row or column is the crossover."""
    fits = rows[rows["memory_fits"].map(lambda v: v is not False)]
    out = []
    for (width, fabric), group in fits.groupby(["width", "fabric"], sort=True):
        ranked = group.sort_values("time_per_sample_s")
        first = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        out.append({"width": width, "fabric": fabric, "fastest": first["layout"],
                    "time_per_sample_s": first["time_per_sample_s"],
                    "runner_up": None if second is None else second["layout"],
                    "runner_up_s": math.nan if second is None else second["time_per_sample_s"]})
    return pd.DataFrame(out)


# ---- embedding tables ------------------------------------------------------------------------

def placements(sweep_dir: PathLike) -> pd.DataFrame:
    """A sweep of embedding placements (``embeddings.placement`` and its options): one row
    per run with its layout name, zipf, fabric, step_s, bytes per step, shard load, cache
    hit rate and time to target (the values :func:`sim.plots.plot_placements` draws)."""
    from sim.plots.embedding_figures import placement_rows

    return pd.DataFrame(placement_rows(Path(sweep_dir)))
