"""Fitting a paper's one calibrated parameter to its own baseline row, and nothing else.

The parameter ``p`` (a config key, e.g. ``compute.gemm_efficiency``) is the root of
``lab(p) - published`` for the baseline row only, found by Brent's method
(:func:`scipy.optimize.brentq`) over the file's ``bracket``; every evaluation is one
simulated run of that row. The other rows are never run here, so no predicted figure can
leak into the fit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scipy.optimize import brentq

from sim.errors import UserError
from sim.papers.paper_file import Paper
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
