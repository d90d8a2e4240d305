"""Bus bandwidth against size, from the ``collective.csv`` of ``python -m sim collective --out``.

One line per algorithm and fabric (colour: algorithm, dash pattern: fabric) and, per
fabric, a dotted line at what one host can inject: no algorithm's busbw exceeds it, and a
good one approaches it at large sizes. The x axis is log2 with binary ticks (8 B, 1 KiB,
1 MiB, 1 GiB); rows of size 0 (nccl-tests rounds small allgathers down to nothing) have no
place on it and are left out.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from sim.errors import UserError
from sim.plots.style import figure, legend, line_style, save, titles, width_for

# collective.csv columns this figure reads, and how to read each
_COLUMNS = {"fabric": str, "algorithm": str, "collective": str, "workers": int,
            "topology": str, "model": str, "type": str, "size_bytes": int,
            "busbw_GBps": float, "injection_GBps": float}
_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))
_TICK_STEPS = (1, 2, 5, 10)  # powers of two between labelled ticks; each divides 10
_MAX_TICKS = 8


def read_points(path: Path | str) -> list[dict[str, Any]]:
    """The rows of ``collective.csv``, typed. Raises UserError naming the file."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise UserError(f"{path}: cannot read it: {exc.strerror}") from None
    missing = [c for c in _COLUMNS if rows and c not in rows[0]]
    if not rows or missing:
        raise UserError(f"{path}: expected collective.csv rows with columns "
                        f"{', '.join(missing or _COLUMNS)}")
    try:
        return [{c: kind(row[c]) for c, kind in _COLUMNS.items()} for row in rows]
    except ValueError as exc:
        raise UserError(f"{path}: {exc}") from None


def plot_collectives(csv_path: Path | str, out_dir: Path, stem: str = "collective"
                     ) -> list[Path]:
    """Busbw against size from ``csv_path``, saved as ``stem``.* in ``out_dir``; the paths.

    Raises UserError for a file that is not a collective.csv or has no row of size > 0.
    """
    points = read_points(csv_path)
    if not any(p["size_bytes"] > 0 for p in points):
        raise UserError(f"{csv_path}: every size is 0 bytes; a log axis cannot show them")
    with figure(width_for(line_labels(points) + list(_bounds(points))), 4.0) as fig:
        draw(fig, points)
        return save(fig, out_dir, stem)


def line_labels(points: Sequence[dict[str, Any]]) -> list[str]:
    """Legend labels of the algorithm lines: the algorithm, with the fabric when several."""
    several = len({p["fabric"] for p in points}) > 1
    return list(dict.fromkeys(
        f"{p['algorithm']}, {p['fabric']}" if several else p["algorithm"] for p in points))


def draw(fig: Figure, points: Sequence[dict[str, Any]]) -> None:
    """Draw the figure into ``fig`` (empty): lines, bounds, axes, titles, legend."""
    ax = fig.subplots()
    algorithms = list(dict.fromkeys(p["algorithm"] for p in points))
    fabrics = list(dict.fromkeys(p["fabric"] for p in points))
    for label, (fabric, algorithm) in zip(line_labels(points), _lines(points), strict=True):
        line = sorted((p["size_bytes"], p["busbw_GBps"]) for p in points
                      if (p["fabric"], p["algorithm"]) == (fabric, algorithm)
                      and p["size_bytes"] > 0)
        if line:  # an allgather swept only below p x 16 bytes has none
            ax.plot(*zip(*line, strict=True), marker="o", markersize=3, label=label,
                    **line_style(algorithms.index(algorithm), fabrics.index(fabric)))
    for label, bound in _bounds(points).items():
        ax.axhline(bound, color="0.45", linestyle=":", linewidth=1.0, label=label)
    _size_axis(ax, [p["size_bytes"] for p in points if p["size_bytes"] > 0])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("bus bandwidth (GB/s)")
    titles(fig, "Bus bandwidth against size", _context(points))
    legend(fig, ax, ax.get_legend_handles_labels()[1])


def binary_label(size_bytes: float) -> str:
    """8 -> '8 B', 1024 -> '1 KiB', 3 * 2**20 -> '3 MiB', 2**30 -> '1 GiB'."""
    for unit, scale in _BINARY_UNITS:
        if size_bytes >= scale or scale == 1:
            return f"{size_bytes / scale:.4g} {unit}"
    raise AssertionError("unreachable")


def size_ticks(low: int, high: int) -> tuple[list[int], list[int]]:
    """(labelled, unlabelled) tick positions for sizes from ``low`` to ``high`` bytes.

    Powers of two, every one of them when few, else every 2nd, 5th or 10th power, always
    including the powers of 1024 (1 KiB, 1 MiB, ...); with no power of two in the range,
    its two ends.
    """
    powers = list(range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1))
    if not powers:
        return sorted({low, high}), []
    step = next((s for s in _TICK_STEPS if len(powers) / s <= _MAX_TICKS), _TICK_STEPS[-1])
    labelled = [2**e for e in powers if e % step == 0] or [2**powers[0]]
    return labelled, [2**e for e in powers if 2**e not in labelled]


def _lines(points: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((p["fabric"], p["algorithm"]) for p in points))


def _bounds(points: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Legend label -> each fabric's host injection bandwidth (GB/s), the busbw bound."""
    bounds = {p["fabric"]: p["injection_GBps"] for p in points}
    several = len(bounds) > 1
    return {f"{fabric + ' ' if several else ''}host injection ({bound:.3g} GB/s)": bound
            for fabric, bound in bounds.items()}


def _size_axis(ax: Any, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    labelled, minor = size_ticks(min(sizes), max(sizes))
    ax.xaxis.set_major_locator(FixedLocator(labelled))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: binary_label(x)))
    ax.xaxis.set_minor_locator(FixedLocator(minor))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("size S (bytes on one rank, nccl-tests' size)")


def _context(points: Sequence[dict[str, Any]]) -> str:
    """The subtitle: what every line shares (collectives, ranks, topology, model, type)."""
    first = points[0]
    kinds = ", ".join(dict.fromkeys(p["collective"] for p in points))
    return (f"{kinds}; {first['workers']} ranks, {first['topology']} topology, "
            f"{first['model']} model, {first['type']}; busbw = algbw × nccl-tests' factor")
