"""The comparison figure: loss over time, iteration time, staleness, per-worker breakdown.

Drawn in the style of every other figure (:mod:`sim.plots.style`): the simulated run solid
(bars filled), the real run dashed (bars hatched) in the same colour, real repeats as their
mean and 95% band (none for one run); one legend under the panels, never over the bars.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sim.plots import style as st
from sim.plots.legends import fabric_name, strategy_name, time_name
from sim.plots.loss import eval_curve, mean_band
from sim.results import Run, load_repeats
from sim.stats import mean_ci

SIM = st.line_style(0, 0)  # solid
REAL = st.line_style(0, 1)  # dashed, same colour


def _loss(ax: Any, sim: Run, reals: list[Run]) -> None:
    xs, ys = eval_curve(sim, "time")
    curves = [c for c in (eval_curve(r, "time") for r in reals) if c[0].size]
    spans = [float(xs.max(initial=0))] + [float(c[0].max()) for c in curves]
    factor, unit = st.time_unit(max(spans))
    ax.plot(xs * factor, ys, **SIM)
    band = mean_band(curves) if len(curves) > 1 else None
    if band is not None:
        ax.plot(band[0] * factor, band[1], **REAL)
        ax.fill_between(band[0] * factor, band[2], band[3], color=REAL["color"],
                        alpha=st.BAND_ALPHA, linewidth=0)
    for c in curves if band is None else ():
        ax.plot(c[0] * factor, c[1], **REAL)
    if st.spans_differ(spans):
        ax.set_xscale("log")
        st.log_ticks(ax.xaxis)
    ax.set(xlabel=f"{time_name([sim.summary, *(r.summary for r in reals)])} ({unit})",
           ylabel="held-out loss", title="Loss over time")


def _iteration(ax: Any, report: dict[str, Any], reals: list[Run]) -> None:
    it = report["iteration_s"]
    real = mean_ci(r.iteration_s for r in reals)
    factor, unit = st.time_unit(max(it["sim"], real.mean))
    ax.bar([0], [it["sim"] * factor], 0.6, **st.bar_look(SIM))
    ax.bar([1], [real.mean * factor], 0.6, **st.bar_look(REAL),
           yerr=None if real.n < 2 else [[real.half_width * factor]], capsize=4)
    ax.scatter(np.ones(len(reals)), [r.iteration_s * factor for r in reals], s=10,
               color="black", zorder=3, label="one real run")
    real_label = f"real (mean of {real.n}, 95% CI)" if real.n > 1 else "real (one run)"
    ax.set(xticks=[0, 1], xticklabels=["sim", real_label],
           xlim=(-0.6, 1.6), ylabel=f"time per update ({unit})",
           title=f"Iteration time (error {it['error']:+.1%})")
    ax.grid(axis="x", visible=False)


def _staleness(ax: Any, report: dict[str, Any]) -> None:
    shares = report["staleness"]
    values = sorted({int(v) for v in shares["sim"]} | {int(v) for v in shares["real"]})
    x = np.arange(len(values))
    for offset, side, look in ((-0.2, "sim", SIM), (0.2, "real", REAL)):
        fractions = {int(k): v for k, v in shares[side].items()}
        ax.bar(x + offset, [100 * fractions.get(v, 0.0) for v in values], 0.4,
               **st.bar_look(look))
    ax.set(xticks=x, xticklabels=[str(v) for v in values], xlim=(-0.8, len(values) - 0.2),
           xlabel="staleness (versions behind)", ylabel="updates (%)",
           title="Staleness of applied updates")
    ax.grid(axis="x", visible=False)


def _breakdown(ax: Any, report: dict[str, Any]) -> None:
    b = report["breakdown"]
    kinds = b["kinds"]
    sides = {side: np.array(b[side], dtype=float).reshape(-1, len(kinds))
             for side in ("sim", "real")}
    factor, unit = st.time_unit(max(float(d.sum(axis=1).max(initial=0)) for d in sides.values())
                                or 1.0)
    for offset, side in ((-0.2, "sim"), (0.2, "real")):
        data = sides[side] * factor
        bottom = np.zeros(len(data))
        for j, kind in enumerate(kinds):
            look = {"color": st.KIND_COLOURS[kind]} if side == "sim" else {
                "facecolor": st.KIND_COLOURS[kind], "edgecolor": "white", "hatch": "////",
                "linewidth": 0.3}
            ax.bar(np.arange(len(data)) + offset, data[:, j], 0.38, bottom=bottom, **look)
            bottom += data[:, j]
    workers = len(b["sim"])
    ax.set(xticks=np.arange(workers), xticklabels=[str(w) for w in range(workers)],
           xlabel="worker (left: sim, right: real, hatched)", ylabel=f"time ({unit})",
           title="Where workers' time goes")
    ax.grid(axis="x", visible=False)


def report_figure(report: dict[str, Any]) -> Figure:
    """The 2 x 2 figure of ``report`` (from :func:`sim.validation.sim_vs_real.compare`);
    reads the runs it names. Raises UserError if they are gone."""
    sim = load_repeats(Path(report["sim_dir"]))[0]
    reals = load_repeats(Path(report["real_dir"]))
    with st.figure(10.0, 7.6) as fig:
        axes = fig.subplots(2, 2)
        _loss(axes[0, 0], sim, reals)
        _iteration(axes[0, 1], report, reals)
        _staleness(axes[1, 0], report)
        _breakdown(axes[1, 1], report)
        for ax in (axes[0, 1], axes[1, 0], axes[1, 1]):
            st.headroom(ax)
        sides = [(Line2D([], [], **look), Patch(**st.bar_look(look))) for look in (SIM, REAL)]
        kinds = [Patch(color=st.KIND_COLOURS[k], label=st.KIND_NAMES[k])
                 for k in report["breakdown"]["kinds"]]
        fig.legend([*sides, *kinds], ["sim", "real", *(p.get_label() for p in kinds)],
                   handler_map={tuple: HandlerTuple(ndivide=None)}, loc="outside lower center",
                   ncols=4)
        strategy = strategy_name({"strategy.kind": report.get("strategy")})
        net = f" ({report['net']})" if report.get("net") else ""
        fig.suptitle(f"{strategy}, {report['workers']} workers: simulated "
                     f"({fabric_name(report.get('fabric'))}) vs real{net}", fontweight="bold")
    return fig


def plot_report(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """``report.png``, ``report.svg`` and ``report.pdf`` in ``out_dir``, atomically; their
    paths."""
    return st.save(report_figure(report), Path(out_dir), "report")
