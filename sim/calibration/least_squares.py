"""The one least-squares solver of every calibration fit.

Each fit (a kernel's ``constant + bytes / rate``, the device's terms, a checkpoint file's
latency and rate, the server's code from runs, ...) states its columns and asks here for the
coefficients: plain least squares (LAPACK's ``gelsd`` through :func:`numpy.linalg.lstsq`) or,
where every coefficient must be >= 0, Lawson and Hanson's non-negative least squares
(:func:`scipy.optimize.nnls`). Most fits weigh each point by its own time, so that a 10%
miss counts the same at a microsecond and at a second: :func:`on_relative_errors`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def least_squares(A: np.ndarray, b: np.ndarray, *, nonnegative: bool = False) -> np.ndarray:
    """The ``x`` minimising ``|A x - b|`` (with ``nonnegative``: subject to ``x >= 0``).
    Raises numpy's LinAlgError where the solver does not converge."""
    if nonnegative:
        from scipy.optimize import nnls  # scipy only where a fit needs it (slow import)

        return nnls(A, b)[0]
    return np.linalg.lstsq(A, b, rcond=None)[0]


def on_relative_errors(columns: list[np.ndarray], t: np.ndarray, *,
                       nonnegative: bool = False) -> np.ndarray:
    """The coefficients of ``t ~ sum(x_k columns_k)`` minimising the squared relative errors
    ``(prediction - t) / t`` (``t``: each point's measured time, > 0)."""
    A = np.column_stack(columns) / t[:, None]
    return least_squares(A, np.ones_like(t), nonnegative=nonnegative)


def on_log_ratios(model: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                  t: np.ndarray, spread: float = 1e3) -> np.ndarray:
    """The positive parameters ``x`` minimising the squared log ratios of ``model(x)`` to
    ``t`` (each point's measured time, > 0), from ``x0`` (> 0): a 2x miss counts the same at
    a microsecond and at a second. For models that are neither linear in ``x``
    (:func:`on_relative_errors`) nor smooth (a median over a recurrence with thresholds):
    Nelder and Mead's simplex over log x, within a factor ``spread`` of ``x0`` either way,
    restarted from its best point until a restart gains nothing (a simplex that collapsed
    across a kink gets a fresh one)."""
    from scipy.optimize import minimize

    start = np.log(np.asarray(x0, np.float64))
    low, high = start - np.log(spread), start + np.log(spread)

    def cost(u: np.ndarray) -> float:
        return float(np.sum(np.log(model(np.exp(np.clip(u, low, high))) / t) ** 2))

    best, value = start, cost(start)
    for _ in range(20):
        found = minimize(cost, best, method="Nelder-Mead",
                         options={"xatol": 1e-10, "fatol": 1e-16, "maxfev": 4000})
        if found.fun >= value * (1 - 1e-9):
            break
        best, value = found.x, found.fun
    return np.exp(np.clip(best, low, high))
