"""Embedding-table figures: where a recommendation model's tables should live.

:func:`placements_figure` reads a sweep of ``embeddings.placement`` (with its strategy,
sharding, cache and allgather options) over ``workload.zipf_exponent`` and
``cluster.fabric`` and draws, a panel each: the bytes one worker moves a step (pulls plus
pushes: what a parameter server saves against an allreduce), the time of a step on each
fabric, and the load of the busiest shard over the mean (what hot rows do to a
range-sharded table). :func:`placement_rows` returns the values drawn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sim.errors import UserError
from sim.plots.style import colour, figure, save, time_unit
from sim.results import RESULTS, Run, Sweep, numeric

PLACEMENT = "embeddings.placement"
_KEYS = {"placement": PLACEMENT, "sharding": "embeddings.sharding",
         "cache_rows": "embeddings.cache_rows", "sparse_allreduce": "embeddings.sparse_allreduce",
         "zipf": "workload.zipf_exponent", "fabric": "cluster.fabric"}


def layout_name(placement: str, sharding: str, cache_rows: int, sparse_allreduce: bool) -> str:
    """How a figure names a placement with its options: "PS row-hash + cache 1600"."""
    if placement == "replicated":
        return "replicated, allgather rows" if sparse_allreduce else "replicated, allreduce"
    name = f"{'PS' if placement == 'ps' else 'all-to-all'} {sharding}"
    return f"{name} + cache {cache_rows}" if cache_rows else name


def _value(row: dict[str, Any], run: Run | None, key: str) -> Any:
    """A row's config value: its results.csv column, else its run's config.toml."""
    if row.get(key) is not None:
        return row[key]
    value: Any = run.config if run is not None else {}
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def placement_rows(sweep_dir: Path | str) -> list[dict[str, Any]]:
    """One row per finished wide-deep run: layout, placement, sharding, cache_rows,
    sparse_allreduce, zipf, fabric, step_s (simulated s per update), bytes_per_step (a
    worker's pull plus push bytes), pull_bytes_per_step, push_bytes_per_step,
    shard_load_max_over_mean, cache_hit_rate, unique_ids_per_step, time_to_target_s,
    final_loss. Raises UserError when no run reports bytes per step."""
    sweep = Sweep(Path(sweep_dir))
    rows = []
    for row in sweep.rows:
        pulled = numeric(row.get("pull_bytes_per_step"))
        pushed = numeric(row.get("push_bytes_per_step"))
        if not math.isfinite(pulled + pushed):
            continue
        run = Run(sweep.path / "runs" / str(row["run"]))
        values = {name: _value(row, run, key) for name, key in _KEYS.items()}
        iterations = numeric(row.get("iterations"))
        rows.append({"run": str(row["run"]),
                     "layout": layout_name(values["placement"], values["sharding"],
                                           int(values["cache_rows"] or 0),
                                           bool(values["sparse_allreduce"])),
                     **values,
                     "step_s": numeric(row.get("sim_time_s")) / iterations if iterations else
                     math.nan,
                     "bytes_per_step": pulled + pushed, "pull_bytes_per_step": pulled,
                     "push_bytes_per_step": pushed,
                     "shard_load_max_over_mean": numeric(row.get("shard_load_max_over_mean")),
                     "cache_hit_rate": numeric(row.get("cache_hit_rate")),
                     "unique_ids_per_step": numeric(row.get("unique_ids_per_step")),
                     "time_to_target_s": numeric(row.get("time_to_target_s")),
                     "final_loss": numeric(row.get("final_loss"))})
    if not rows:
        raise UserError(f"{sweep.path / RESULTS}: no run reports pull_bytes_per_step (runs of "
                        "a model with embedding tables, workload.model = \"wide-deep\", do)")
    return rows


def placements_figure(sweep_dir: Path | str) -> Figure:
    """Bytes per worker and step, time per step per fabric, and shard imbalance, against
    the ids' power-law exponent, a line per layout (module docstring)."""
    rows = placement_rows(sweep_dir)
    layouts = list(dict.fromkeys(r["layout"] for r in rows))
    fabrics = sorted({str(r["fabric"]) for r in rows})
    zipfs = sorted({float(r["zipf"]) for r in rows})
    panels = 2 + len(fabrics)
    with figure(4.2 * panels, 4.6) as fig:
        axes = fig.subplots(1, panels)
        step_max = max((r["step_s"] for r in rows if math.isfinite(r["step_s"])), default=1.0)
        scale, unit = time_unit(step_max)
        markers = "osD^v<>ph*"
        for i, name in enumerate(layouts):
            style = {"color": colour(i), "marker": markers[i % len(markers)], "label": name}
            mine = [r for r in rows if r["layout"] == name]
            axes[0].plot(zipfs, _series(mine, zipfs, "bytes_per_step", fabrics[0]), **style)
            for j, fabric in enumerate(fabrics):
                axes[1 + j].plot(zipfs, [v * scale for v in _series(mine, zipfs, "step_s",
                                                                     fabric)], **style)
            load = _series(mine, zipfs, "shard_load_max_over_mean", fabrics[0])
            if any(math.isfinite(v) for v in load):
                axes[-1].plot(zipfs, load, **style)
        axes[0].set(yscale="log", xlabel="Zipf exponent s of the ids",
                    ylabel="bytes a worker moves a step (pull + push)", title="Traffic")
        for j, fabric in enumerate(fabrics):
            axes[1 + j].set(yscale="log", xlabel="Zipf exponent s of the ids",
                            ylabel=f"simulated time per step ({unit})",
                            title=f"Step time, {fabric}")
        axes[-1].set(xlabel="Zipf exponent s of the ids",
                     ylabel="busiest shard's rows / mean shard's", title="Shard load")
        axes[-1].axhline(1.0, color="0.6", linewidth=0.8, linestyle=":")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=min(5, len(labels)),
                   frameon=False)
    return fig


def _series(rows: list[dict[str, Any]], zipfs: list[float], key: str,
            fabric: str) -> list[float]:
    """``key`` of ``rows`` on ``fabric`` at each Zipf exponent (the mean over seeds)."""
    out = []
    for z in zipfs:
        found = [r[key] for r in rows if float(r["zipf"]) == z and str(r["fabric"]) == fabric]
        out.append(float(np.mean(found)) if found else math.nan)
    return out


def plot_placements(sweep_dir: Path | str, out_dir: Path | str,
                    stem: str = "placements") -> list[Path]:
    """:func:`placements_figure` saved as ``stem``.png/.svg/.pdf in ``out_dir``."""
    return save(placements_figure(sweep_dir), Path(out_dir), stem)
