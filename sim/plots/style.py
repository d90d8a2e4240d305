"""Figure style, units, colours, and deterministic atomic PNG + SVG output.

Figures are plain :class:`matplotlib.figure.Figure` objects on an Agg canvas (no pyplot,
no global backend switch), drawn under :data:`STYLE`. The SVG hash salt is fixed and dates
are left out, so the same data always renders to the same bytes.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sim.errors import UserError
from sim.record import write_atomic

STYLE: dict[str, Any] = {
    "svg.hashsalt": "sgd-lab",  # fixed ids: identical SVG bytes for identical data
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyphs everywhere
    "font.size": 9.5,
    "axes.titlesize": 9,
    "axes.labelsize": 9.5,
    "figure.titlesize": 11,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.axisbelow": True,
    "lines.linewidth": 1.6,
    "savefig.dpi": 150,
}
SAVE = {"png": {"metadata": {"Software": None}},
        "svg": {"metadata": {"Date": None, "Creator": None}}}
KIND_COLOURS = {"compute": "#4878d0", "data": "#6acc64", "update": "#956cb4",
                "overhead": "#d65f5f", "wire": "#ee854a", "wait": "#a0a0a0"}
KIND_NAMES = {"compute": "compute", "data": "batch gather", "update": "update",
              "overhead": "message CPU", "wire": "network", "wait": "wait"}
_CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf"]  # tab10
_DASHES = ["-", "--", ":", "-."]


def line_style(colour: int, dash: int = 0) -> dict[str, Any]:
    """Colour and dash pattern by index (see :func:`sim.plots.labels.style_indices`)."""
    return {"color": _CYCLE[colour % len(_CYCLE)],
            "linestyle": _DASHES[(dash + colour // len(_CYCLE)) % len(_DASHES)]}


def time_unit(max_s: float) -> tuple[float, str]:
    """(factor, unit) that shows times up to ``max_s`` seconds with readable numbers."""
    for factor, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs")):
        if max_s >= 1.0 / factor:
            return factor, unit
    return 1e9, "ns"


def wrap(label: str, width: int = 38) -> str:
    """A long label broken after its commas into lines of at most ~``width`` characters."""
    lines: list[str] = []
    for part in label.split(", "):
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        else:
            if lines:
                lines[-1] += ","
            lines.append(part)
    return "\n".join(lines)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


@contextmanager
def figure(width: float, height: float) -> Iterator[Figure]:
    """A new figure drawn under STYLE (keep saving inside the ``with``)."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasAgg(fig)
        yield fig


def titles(fig: Figure, title: str, subtitle: str = "") -> None:
    fig.suptitle(title, fontweight="bold")
    if subtitle:
        fig.axes[0].set_title(subtitle, color="0.3")


def outside(labels: list[str]) -> bool:
    """Whether a legend of ``labels`` goes outside the axes (many or long entries)."""
    return len(labels) > 5 or sum(wrap(label).count("\n") + 1 for label in labels) > 6


def width_for(labels: list[str], base: float = 6.4) -> float:
    """Figure width that leaves room for the legend when it goes outside the axes."""
    return base + 3.0 if outside(labels) else base


def legend(fig: Figure, ax: Any, labels: list[str]) -> None:
    """The legend: inside the axes for a few short entries, else outside on the right."""
    if not outside(labels):
        ax.legend(loc="best")
    else:
        fig.legend(loc="outside right upper", fontsize=8 if len(labels) <= 12 else 7)


def fmt_time(seconds: float) -> str:
    factor, unit = time_unit(seconds)
    return f"{seconds * factor:.3g} {unit}"


def out_dir_ready(out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: output path exists and is not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create the output directory: {exc}") from None
    return out_dir


def save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``stem.png`` and ``stem.svg`` into ``out_dir`` atomically; their paths."""
    out_dir = out_dir_ready(out_dir)
    written = []
    for fmt, options in SAVE.items():
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, **options)
        path = out_dir / f"{stem}.{fmt}"
        write_atomic(path, buffer.getvalue())
        written.append(path)
    return written
