"""Transport figures: where one message's time goes, and what a transport does to a step.

:func:`message_parts_figure` draws the parts of one message's time
(:func:`sim.training.host_costs.message_parts`: the calls at both ends, the copies of every
byte, serialisation, the wire) against its size, a panel per transport (from those parts:
figures take data, not the model). :func:`transport_rows` and :func:`transport_steps_figure`
read a sweep of ``cluster.transport`` (``experiments/transports.toml``) for each step's time
and the share of it spent in message overhead (CPU) and on the wire.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sim.errors import UserError
from sim.plots.style import colour, figure, save, time_unit
from sim.results import Sweep, numeric

TRANSPORT = "cluster.transport"


def message_parts_figure(cases: Mapping[str, Sequence[Mapping[str, float]]],
                         sizes: Sequence[float]) -> Figure:
    """A panel per case (label -> one message's parts at each of ``sizes``, seconds, as
    :func:`sim.training.host_costs.message_parts` gives them): each part stacked against the
    message's size (log-log axes: the parts span decades)."""
    with figure(4.2 * len(cases), 4.4) as fig:
        axes = np.atleast_1d(fig.subplots(1, len(cases), sharey=True))
        names = list(next(iter(cases.values()))[0])  # the parts, in the model's order
        for ax, (label, parts) in zip(axes, cases.items(), strict=True):
            below = np.zeros(len(sizes))
            for i, part in enumerate(names):
                values = np.array([p[part] for p in parts]) * 1e6
                ax.fill_between(sizes, below, below + values, color=colour(i), alpha=0.85,
                                label=part, linewidth=0)
                below = below + values
            ax.set(xscale="log", yscale="log", xlabel="message payload (bytes)",
                   title=label)
        axes[0].set_ylabel("time of one message, both ends (us)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(names),
                   frameon=False)
    return fig


def plot_message_parts(cases: Mapping[str, Sequence[Mapping[str, float]]],
                       sizes: Sequence[float], out_dir: Path | str,
                       stem: str = "message-parts") -> list[Path]:
    """:func:`message_parts_figure` saved as ``stem``.png/.svg/.pdf in ``out_dir``."""
    return save(message_parts_figure(cases, sizes), Path(out_dir), stem)


def transport_rows(sweep_dir: Path | str) -> list[dict[str, Any]]:
    """One row per finished run of a sweep over ``cluster.transport``: run, transport (its
    name), fabric, strategy, model (and hidden layers), step_s (simulated s per update),
    overhead_share and wire_share (of the workers' time). Raises UserError when no run
    records its transport."""
    sweep = Sweep(Path(sweep_dir))
    rows = []
    for row in sweep.rows:
        transport = row.get("transport")
        iterations = numeric(row.get("iterations"))
        if not transport or not iterations:
            continue
        busy = sum(numeric(row.get(f"{k}_s")) for k in ("compute", "data", "update", "overhead",
                                                        "wire", "wait"))
        model = str(row.get("workload.model", ""))
        hidden = row.get("workload.hidden")
        rows.append({"run": str(row["run"]), "transport": str(transport),
                     "fabric": str(row.get("fabric") or row.get("cluster.fabric")),
                     "strategy": str(row.get("strategy") or row.get("strategy.kind")),
                     "model": model if model != "mlp" or not hidden else f"mlp {hidden}",
                     "step_s": numeric(row.get("sim_time_s")) / iterations,
                     "overhead_share": numeric(row.get("overhead_s")) / busy if busy else math.nan,
                     "wire_share": numeric(row.get("wire_s")) / busy if busy else math.nan})
    if not rows:
        raise UserError(f"{sweep_dir}: no run records its transport (a sweep of "
                        "cluster.transport, e.g. experiments/transports.toml)")
    return rows


def transport_steps_figure(sweep_dir: Path | str, strategy: str) -> Figure:
    """Time per update of ``strategy`` by model, a bar per transport, a panel per fabric."""
    rows = [r for r in transport_rows(sweep_dir) if r["strategy"] == strategy]
    if not rows:
        raise UserError(f"{sweep_dir}: no run of strategy {strategy!r}")
    fabrics = list(dict.fromkeys(r["fabric"] for r in rows))
    transports = list(dict.fromkeys(r["transport"] for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    scale, unit = time_unit(max(r["step_s"] for r in rows))
    width = 0.8 / len(transports)
    with figure(4.2 * len(fabrics), 4.6) as fig:
        axes = np.atleast_1d(fig.subplots(1, len(fabrics), sharey=True))
        for ax, fabric in zip(axes, fabrics, strict=True):
            for i, transport in enumerate(transports):
                steps = [np.mean([r["step_s"] for r in rows if r["fabric"] == fabric
                                  and r["transport"] == transport and r["model"] == m]
                                 or [math.nan]) * scale for m in models]
                ax.bar(np.arange(len(models)) + (i - (len(transports) - 1) / 2) * width,
                       steps, width, color=colour(i), label=transport)
            ax.set_xticks(range(len(models)), models, rotation=20)
            ax.set(yscale="log", title=f"{strategy}, {fabric}")
        axes[0].set_ylabel(f"simulated time per update ({unit})")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels),
                   frameon=False)
    return fig


def plot_transport_steps(sweep_dir: Path | str, out_dir: Path | str, strategy: str,
                         stem: str | None = None) -> list[Path]:
    """:func:`transport_steps_figure` saved as ``stem`` (default ``transports-STRATEGY``)
    .png/.svg/.pdf in ``out_dir``."""
    return save(transport_steps_figure(sweep_dir, strategy), Path(out_dir),
                stem or f"transports-{strategy}")


def plot_transports(sweep_dir: Path | str, out_dir: Path | str,
                    stem: str = "transports") -> list[Path]:
    """:func:`transport_steps_figure` of every strategy in the sweep, saved as
    ``stem-STRATEGY``.png/.svg/.pdf in ``out_dir`` (a sweep's standard figure)."""
    strategies = dict.fromkeys(r["strategy"] for r in transport_rows(sweep_dir))
    return [path for strategy in strategies
            for path in plot_transport_steps(sweep_dir, out_dir, strategy,
                                             f"{stem}-{strategy}")]
