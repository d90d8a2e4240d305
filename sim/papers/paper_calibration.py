"""Fitting a paper's one calibrated parameter to its own baseline row, and nothing else.

The parameter ``p`` (a config key, e.g. ``compute.gemm_efficiency``) is the root of
``lab(p) - published`` for the baseline row only, found by Brent's method
(:func:`scipy.optimize.brentq`) over the file's ``bracket``; every evaluation is one
simulated run of that row. The other rows are never run here, so no predicted figure can
leak into the fit.

:func:`explain_row` is the same search for a row the lab misses by more than
:data:`sim.papers.reproduce.EXPLAIN_OVER`, over the parameter that stands for the mechanism
the lab lacks: the value at which the row would match measures how large that mechanism
must be. It never changes the row's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scipy.optimize import brentq

from sim.errors import UserError
from sim.papers.paper_file import Figure, Paper
from sim.papers.quantities import QUANTITIES
from sim.papers.row_run import RowRun, row_config, run_row

XTOL = 1e-10  # absolute tolerance on the parameter (efficiencies, seconds: ~1e-8 relative)
RTOL = 1e-10


@dataclass(frozen=True)
class Calibrated:
    parameter: str
    value: float
    row: str           # the baseline row's id
    published: float   # the baseline's published value
    lab: float         # the lab's value of the baseline row at ``value``
    source: str
    runs: int          # simulated runs the fit took
    wall_s: float


@dataclass(frozen=True)
class Explained:
    """What a row's explanation parameter must be for the row to match the paper."""

    parameter: str
    value: float | None    # None: no value in the bracket matches
    reach: tuple[float, float]  # the row's lab values at the bracket's ends
    mechanism: str
    runs: int

    def text(self, given: Any) -> str:
        """One line: the matching value against the one the row ran with."""
        if self.value is None:
            return (f"no {self.parameter} matches (the row spans {self.reach[0]:.4g} to "
                    f"{self.reach[1]:.4g} over its bracket): {self.mechanism}")
        ran = f"{given:.3g}" if isinstance(given, float) else given
        return (f"matches at {self.parameter} = {self.value:.3g} (ran with {ran}): "
                f"{self.mechanism}")


def explain_row(paper: Paper, figure: Figure, fitted: dict[str, Any], reference: Any,
                run: Callable = run_row) -> Explained:
    """Solve ``figure.explain.parameter`` (over its bracket) so that the row's lab value
    equals its published one, the rest of the row as it ran (``fitted``: the calibration;
    ``reference``: the measure of the row a ratio is taken against, which is not varied)."""
    explain = figure.explain
    assert explain is not None and figure.published is not None
    quantity = QUANTITIES[figure.quantity]
    source = f"{paper.path.name}: explanation of row {figure.id}"
    runs: list[RowRun] = []

    def lab(value: float) -> float:
        config = row_config(paper.base, {**figure.overrides, **fitted,
                                         explain.parameter: value}, source)
        runs.append(run(config))
        return quantity.value(runs[-1].measure, reference)

    lo, hi = explain.bracket
    reach = (lab(lo), lab(hi))
    if (reach[0] - figure.published) * (reach[1] - figure.published) > 0:
        return Explained(explain.parameter, None, reach, explain.mechanism, len(runs))
    value = brentq(lambda p: lab(p) - figure.published, lo, hi, xtol=1e-6, rtol=1e-6)
    return Explained(explain.parameter, float(value), reach, explain.mechanism, len(runs))


def fit_baseline(paper: Paper, run: Callable = run_row) -> Calibrated:
    """The calibrated parameter of ``paper`` (which must have a ``[calibration]``). Raises
    UserError if a run fails or the published baseline is out of the bracket's reach."""
    cal = paper.calibration
    assert cal is not None
    figure = paper.figure(cal.row)
    quantity = QUANTITIES[figure.quantity]
    source = f"{paper.path.name}: calibration of {cal.parameter} on row {figure.id}"
    runs: list[RowRun] = []

    def lab(value: float) -> float:
        config = row_config(paper.base, {**figure.overrides, cal.parameter: value}, source)
        runs.append(run(config))
        return quantity.value(runs[-1].measure)

    lo, hi = cal.bracket
    at_lo, at_hi = lab(lo), lab(hi)
    if (at_lo - figure.published) * (at_hi - figure.published) > 0:
        raise UserError(f"{source}: the published {figure.published:g} is outside what "
                        f"{cal.parameter} in [{lo:g}, {hi:g}] gives ({at_lo:.4g} to "
                        f"{at_hi:.4g})")
    value = brentq(lambda p: lab(p) - figure.published, lo, hi, xtol=XTOL, rtol=RTOL)
    final = lab(value)
    return Calibrated(cal.parameter, float(value), figure.id, figure.published, final,
                      cal.source, len(runs), sum(r.wall_s for r in runs))
