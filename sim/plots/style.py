"""Figure style, units, colours, axes, and deterministic atomic PNG + SVG + PDF output.

Every figure is a plain :class:`matplotlib.figure.Figure` on an Agg canvas (no pyplot, no
global backend switch), drawn and saved under :data:`STYLE`. Text stays text: SVG keeps
``<text>`` elements and PDF embeds TrueType (Type 42) fonts, so a paper's editor can edit
and search them. The SVG hash salt is fixed and dates are left out, so the same data always
renders to the same bytes.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import Formatter, FuncFormatter, LogLocator, NullLocator

from sim.errors import UserError
from sim.rundir import write_atomic

STYLE: dict[str, Any] = {
    "svg.hashsalt": "sgd-lab",  # fixed ids: identical SVG bytes for identical data
    "svg.fonttype": "none",  # text as <text>, not outlines
    "pdf.fonttype": 42,  # embedded TrueType, not Type 3 bitmaps-as-glyphs
    "ps.fonttype": 42,
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
        "svg": {"metadata": {"Date": None, "Creator": None}},
        "pdf": {"metadata": {"CreationDate": None, "Creator": None, "Producer": None}}}
KIND_COLOURS = {"compute": "#4878d0", "data": "#6acc64", "update": "#956cb4",
                "overhead": "#d65f5f", "wire": "#ee854a", "wait": "#a0a0a0",
                "checkpoint": "#8c613c", "restart": "#dc7ec0", "recompute": "#d5bb67"}
KIND_NAMES = {"compute": "compute", "data": "batch gather", "update": "update",
              "overhead": "message CPU", "wire": "network", "wait": "wait",
              "checkpoint": "checkpoint", "restart": "restart", "recompute": "recomputation"}
FAULT_KINDS = ("checkpoint", "restart", "recompute")  # in a legend only when shown
_CYCLE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf"]  # tab10
_DASHES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
BAND_ALPHA = 0.2  # the shaded 95% confidence band around a mean over seeds
SPAN_RATIO = 10  # series whose x spans differ by more than a decade share a log x axis


def line_style(colour: int, dash: int = 0) -> dict[str, Any]:
    """Colour and dash pattern by index (see :func:`sim.plots.legends.style_indices`)."""
    return {"color": _CYCLE[colour % len(_CYCLE)],
            "linestyle": _DASHES[(dash + colour // len(_CYCLE)) % len(_DASHES)]}


def dash(index: int) -> str:
    return _DASHES[index % len(_DASHES)]


def colour(index: int) -> str:
    return _CYCLE[index % len(_CYCLE)]


def bar_look(line: dict[str, Any]) -> dict[str, Any]:
    """Bars matching a :func:`line_style`: filled for a solid line, hatched outlines for a
    dashed one (a real run beside its simulated twin)."""
    if line["linestyle"] == "-":
        return {"color": line["color"]}
    return {"facecolor": "white", "edgecolor": line["color"], "hatch": "////",
            "linewidth": 0.8}


HEADROOM = 0.1  # of the tallest bar: the top of the axis above every bar and error bar


def headroom(ax: Any) -> None:
    """Start ``ax``'s y axis at 0 and end it a tenth above its tallest bar or error bar, so
    nothing drawn touches the frame."""
    tops = [p.get_y() + p.get_height() for p in ax.patches]
    for line in ax.lines:  # error bars' caps and stems
        ys = np.asarray(line.get_ydata(), dtype=float)
        tops += [float(np.nanmax(ys))] if ys.size and np.isfinite(ys).any() else []
    for collection in ax.collections:  # error bar stems (LineCollection) and scatter points
        for seg in getattr(collection, "get_segments", lambda: [])():
            tops += [float(np.max(seg[:, 1]))] if len(seg) else []
        offsets = collection.get_offsets()
        tops += [float(np.max(offsets[:, 1]))] if len(offsets) else []
    top = max(tops, default=0.0)
    if top > 0:
        ax.set_ylim(0, top * (1 + HEADROOM))


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
    """A new figure drawn under STYLE (draw inside the ``with``; :func:`save` applies STYLE
    again, so a figure returned from the ``with`` saves the same)."""
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


def legend(fig: Figure, ax: Any, labels: list[str], notes: list[str] | None = None) -> None:
    """The legend: inside the axes for a few short entries, else outside on the right;
    ``notes`` (e.g. which lines coincide) are entries of text alone after the lines'."""
    notes = notes or []
    handles, names = ax.get_legend_handles_labels()
    handles += [Line2D([], [], linestyle="none") for _ in notes]
    names += [wrap(note) for note in notes]
    if not outside(labels + notes):
        ax.legend(handles, names, loc="best")
    else:
        fig.legend(handles, names, loc="outside right upper",
                   fontsize=8 if len(labels) + len(notes) <= 12 else 7)


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


def spans_differ(spans: list[float]) -> bool:
    """Whether x spans (positive) differ by more than :data:`SPAN_RATIO`: a log axis then
    shows the short ones, which a linear one squeezes against the y axis."""
    positive = [s for s in spans if s > 0 and math.isfinite(s)]
    return len(positive) > 1 and max(positive) / min(positive) > SPAN_RATIO


def log_ticks(axis: Any, formatter: Formatter | None = None) -> None:
    """Ticks of a log axis at 1, 2, 5 x 10^k, labelled as plain numbers (0.02, 0.5, 10) as
    a paper writes them (or by ``formatter``), so even a short span has a few labels."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(formatter or FuncFormatter(lambda v, _pos: f"{v:g}"))


def save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    """Write ``stem.png``, ``stem.svg`` and ``stem.pdf`` into ``out_dir`` atomically, under
    :data:`STYLE`; their paths. Raises UserError if ``out_dir`` cannot be made."""
    out_dir = out_dir_ready(out_dir)
    written = []
    with matplotlib.rc_context(STYLE):
        for fmt, options in SAVE.items():
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, **options)
            path = out_dir / f"{stem}.{fmt}"
            write_atomic(path, buffer.getvalue())
            written.append(path)
    return written
