"""Runs that differ only by their seed, taken together: per configuration, the mean and 95%
confidence interval of a result (:func:`sim.stats.mean_ci`).

Rows are mappings like results.csv's: ``run``, the swept dotted keys, ``run.seed`` and the
summary's scalars (which have no dot). A configuration is the values of the dotted keys
other than ``run.seed``; pure Python, so plots and the command line use it without pandas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sim.stats import MeanCI, mean_ci

SEED = "run.seed"
Row = Mapping[str, Any]


def config_keys(rows: Iterable[Row]) -> list[str]:
    """The dotted keys of ``rows`` other than the seed, in first-seen column order."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(k for k in row if "." in k and k != SEED))
    return list(keys)


def by_config(rows: Sequence[Row], keys: Sequence[str] | None = None
              ) -> dict[tuple[Any, ...], list[Row]]:
    """Configuration (the values of ``keys``, default :func:`config_keys`) -> its rows, in
    first-seen order."""
    keys = config_keys(rows) if keys is None else list(keys)
    out: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        out.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    return out


def number(value: Any) -> float | None:
    """A finite int or float as a float; anything else (None, text, booleans, NaN) None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def summarise(rows: Iterable[Row], column: str) -> MeanCI:
    """Mean and 95% interval of ``column`` over ``rows`` (non-numbers skipped; ``n`` says
    how many were numbers)."""
    return mean_ci(number(row.get(column)) for row in rows)


NO_SPREAD = 1e-9  # a half-width below this fraction of the mean is rounding, not spread


def format_ci(ci: MeanCI, digits: int = 4) -> str:
    """``0.2391 ± 0.0012`` (the mean to ``digits`` significant digits, the half-width to
    two); the mean alone for one value or no spread (a half-width of zero or below
    :data:`NO_SPREAD` of the mean: floating-point rounding); ``-`` for none."""
    if ci.n == 0:
        return "-"
    mean = f"{ci.mean:.{digits}g}"
    if ci.n == 1 or not ci.half_width > NO_SPREAD * abs(ci.mean):
        return mean
    return f"{mean} ± {ci.half_width:.2g}"
