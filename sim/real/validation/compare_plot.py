"""The comparison figure: loss over time, iteration time, staleness, per-worker breakdown."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from sim.record import write_atomic
from sim.results import load_repeats

SIM_COLOR, REAL_COLOR = "tab:blue", "tab:orange"


def plot_report(report: dict[str, Any], path: Path) -> None:
    """Write the 2 x 2 figure of ``report`` (from
    :func:`sim.real.validation.compare.compare`) to ``path``, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = load_repeats(Path(report["sim_dir"]))[0]
    reals = load_repeats(Path(report["real_dir"]))
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0, 0]
    ax.plot(sim.evals[:, 0], sim.evals[:, 2], color=SIM_COLOR, lw=2, label="simulated")
    for i, run in enumerate(reals):
        ax.plot(run.evals[:, 0], run.evals[:, 2], color=REAL_COLOR, alpha=0.7,
                label="real" if i == 0 else None)
    ax.set(xlabel="time (s)", ylabel="held-out loss", title="loss over time")
    ax.legend()

    ax = axes[0, 1]
    it = report["iteration_s"]
    ax.scatter(np.full(len(reals), 1.0), [r.iteration_s * 1e3 for r in reals],
               color=REAL_COLOR, label="real repeats")
    ax.scatter([0.0], [it["sim"] * 1e3], color=SIM_COLOR, marker="D", s=60, label="simulated")
    ax.set(xticks=[0, 1], xticklabels=["sim", "real"], xlim=(-0.5, 1.5),
           ylabel="ms per update", title=f"iteration time (error {it['error']:+.1%})")
    ax.set_ylim(bottom=0)
    ax.legend()

    ax = axes[1, 0]
    st = report["staleness"]
    values = sorted(set(st["sim"]) | set(st["real"]))
    x = np.arange(len(values))
    ax.bar(x - 0.2, [st["sim"].get(v, 0) for v in values], 0.4, color=SIM_COLOR,
           label="simulated")
    ax.bar(x + 0.2, [st["real"].get(v, 0) for v in values], 0.4, color=REAL_COLOR,
           label="real")
    ax.set(xticks=x, xticklabels=[str(v) for v in values], xlabel="staleness (updates)",
           ylabel="fraction of updates", title="staleness")
    ax.legend()

    ax = axes[1, 1]
    b = report["breakdown"]
    kinds = len(b["kinds"])
    sim_w, real_w = (np.array(b["sim"]).reshape(-1, kinds),
                     np.array(b["real"]).reshape(-1, kinds))
    n = len(sim_w)
    hatches = {"compute": "", "data": "xx", "update": "++", "overhead": "\\\\",
               "wire": "//", "wait": ".."}
    for offset, data, color in ((-0.2, sim_w, SIM_COLOR), (0.2, real_w, REAL_COLOR)):
        bottom = np.zeros(n)
        for j, kind in enumerate(b["kinds"]):
            if len(data):
                ax.bar(np.arange(n) + offset, data[:, j], 0.38, bottom=bottom, color=color,
                       hatch=hatches[kind], edgecolor="black", lw=0.3)
                bottom += data[:, j]
    ax.set(xticks=np.arange(n), xlabel="worker (left: simulated, right: real)",
           ylabel="seconds",
           title="compute / data (xx) / update (++) / overhead (\\\\) / wire (//) / wait (..)")
    fig.suptitle(f"{report['strategy']}, {report['workers']} workers: simulated "
                 f"({report['fabric']}) vs real ({report['net']})")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", dpi=110)
    write_atomic(path, buffer.getvalue())
    plt.close(fig)
