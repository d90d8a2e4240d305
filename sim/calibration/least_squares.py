"""The one least-squares solver of every calibration fit.

Each fit (a kernel's ``constant + bytes / rate``, the device's terms, a checkpoint file's
latency and rate, the server's code from runs, ...) states its columns and asks here for the
coefficients: plain least squares (LAPACK's ``gelsd`` through :func:`numpy.linalg.lstsq`) or,
where every coefficient must be >= 0, Lawson and Hanson's non-negative least squares
(:func:`scipy.optimize.nnls`). Most fits weigh each point by its own time, so that a 10%
miss counts the same at a microsecond and at a second: :func:`on_relative_errors`.
"""

from __future__ import annotations

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
