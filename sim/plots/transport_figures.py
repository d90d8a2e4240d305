"""Transport figures: where one message's time goes, and what a transport does to a step.

:func:`message_parts` is the closed form of one message alone on idle links under a
transport (:mod:`sim.network.transports`), split into the parts a user can act on: the
per-message calls at both ends (a socket call, gRPC's own work, the host's framework), the
copies of every byte (the kernel's and the host's), serialisation and deserialisation, and
the wire (alpha and the framed bytes at the link's rate or, when flow control binds, at
window / RTT). :func:`message_parts_figure` draws those parts against message size, a panel
per transport; :func:`transport_rows` and :func:`transport_steps_figure` read a sweep of
``cluster.transport`` (``experiments/transports.toml``) for each step's time and the share
of it spent in message overhead (CPU) and on the wire.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from sim.errors import UserError
from sim.network.fabrics import SWITCH_HOPS, Fabric, get_fabric
from sim.network.transports import Transport, get_transport
from sim.plots.style import colour, figure, save, time_unit
from sim.results import Sweep
from sim.training.host_costs import cpu_costs, load_host

PARTS = ("calls", "copies", "serialisation", "wire")
TRANSPORT = "cluster.transport"


def message_parts(transport: str | Transport, fabric: str | Fabric, nbytes: float,
                  host: str = "ideal") -> dict[str, float]:
    """Seconds of one message of ``nbytes`` payload bytes alone on idle links through one
    switch, both ends summed, by part (:data:`PARTS`). Their sum is the message's time:
    the sender's CPU, then the wire, then the receiver's CPU. Raises ValueError for an
    unknown transport, fabric or host."""
    transport, fabric = get_transport(transport), get_fabric(fabric)
    costs = cpu_costs(load_host(host), fabric, transport)
    wire_fabric = dataclasses.replace(fabric, overhead_s=0.0) if costs.charged else fabric
    rtt = transport.rtt_s(SWITCH_HOPS, fabric.latency_s, wire_fabric.overhead_s)
    rate = min(fabric.bandwidth_Bps, transport.window_Bps(rtt))
    h = costs.host
    return {
        "calls": 2 * (h.message_s + costs.stack_s + costs.rpc_s),
        "copies": 2 * nbytes * (1 / h.message_Bps + 1 / costs.stack_Bps),
        "serialisation": nbytes * (1 / costs.serialize_Bps + 1 / costs.deserialize_Bps),
        "wire": wire_fabric.alpha_s() + transport.wire_bytes(float(nbytes)) / rate,
    }


def message_parts_figure(cases: Sequence[tuple[str, str | Transport, str | Fabric]],
                         sizes: Sequence[float], host: str = "ideal") -> Figure:
    """A panel per ``(label, transport, fabric)`` case: each part of one message's time
    (stacked) against its size (log-log axes: the parts span decades)."""
    with figure(4.2 * len(cases), 4.4) as fig:
        axes = np.atleast_1d(fig.subplots(1, len(cases), sharey=True))
        for ax, (label, transport, fabric) in zip(axes, cases, strict=True):
            parts = [message_parts(transport, fabric, n, host) for n in sizes]
            below = np.zeros(len(sizes))
            for i, part in enumerate(PARTS):
                values = np.array([p[part] for p in parts]) * 1e6
                ax.fill_between(sizes, below, below + values, color=colour(i), alpha=0.85,
                                label=part, linewidth=0)
                below = below + values
            ax.set(xscale="log", yscale="log", xlabel="message payload (bytes)",
                   title=label)
        axes[0].set_ylabel("time of one message, both ends (us)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(PARTS),
                   frameon=False)
    return fig


def plot_message_parts(cases: Sequence[tuple[str, str | Transport, str | Fabric]],
                       sizes: Sequence[float], out_dir: Path | str,
                       stem: str = "message-parts", host: str = "ideal") -> list[Path]:
    """:func:`message_parts_figure` saved as ``stem``.png/.svg/.pdf in ``out_dir``."""
    return save(message_parts_figure(cases, sizes, host), Path(out_dir), stem)


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def transport_rows(sweep_dir: Path | str) -> list[dict[str, Any]]:
    """One row per finished run of a sweep over ``cluster.transport``: run, transport (its
    name), fabric, strategy, model (and hidden layers), step_s (simulated s per update),
    overhead_share and wire_share (of the workers' time). Raises UserError when no run
    records its transport."""
    sweep = Sweep(Path(sweep_dir))
    rows = []
    for row in sweep.rows:
        transport = row.get("transport")
        iterations = _num(row.get("iterations"))
        if not transport or not iterations:
            continue
        busy = sum(_num(row.get(f"{k}_s")) for k in ("compute", "data", "update", "overhead",
                                                        "wire", "wait"))
        model = str(row.get("workload.model", ""))
        hidden = row.get("workload.hidden")
        rows.append({"run": str(row["run"]), "transport": str(transport),
                     "fabric": str(row.get("fabric") or row.get("cluster.fabric")),
                     "strategy": str(row.get("strategy") or row.get("strategy.kind")),
                     "model": model if model != "mlp" or not hidden else f"mlp {hidden}",
                     "step_s": _num(row.get("sim_time_s")) / iterations,
                     "overhead_share": _num(row.get("overhead_s")) / busy if busy else math.nan,
                     "wire_share": _num(row.get("wire_s")) / busy if busy else math.nan})
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
