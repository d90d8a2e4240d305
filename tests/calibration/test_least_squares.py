"""The one least-squares solver of the calibration fits: exact systems, the non-negative
optimum against every support, and relative errors against a weighted numpy reference."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sim.calibration.least_squares import least_squares, on_relative_errors


def test_an_exact_system_gives_its_coefficients():
    rng = np.random.default_rng(3)
    A = rng.uniform(0.5, 2.0, size=(12, 3))
    x = np.array([2e-6, 3e-10, 5e-9])
    assert least_squares(A, A @ x) == pytest.approx(x, rel=1e-9)
    assert least_squares(A, A @ x, nonnegative=True) == pytest.approx(x, rel=1e-9)


def test_the_nonnegative_fit_is_the_best_over_every_support():
    """Lawson and Hanson's optimum: no set of columns, solved by plain least squares and kept
    where all its coefficients are >= 0, fits better."""
    rng = np.random.default_rng(7)
    A = rng.uniform(0.0, 1.0, size=(10, 4))
    b = A @ np.array([1.0, -2.0, 0.5, 3.0]) + rng.normal(0, 0.05, size=10)
    x = least_squares(A, b, nonnegative=True)
    assert (x >= 0).all() and x[1] == 0.0  # the negative term is dropped
    best = np.inf
    for k in range(1, 5):
        for cols in itertools.combinations(range(4), k):
            sub = np.linalg.lstsq(A[:, cols], b, rcond=None)[0]
            if (sub >= 0).all():
                best = min(best, float(np.linalg.norm(A[:, cols] @ sub - b)))
    assert np.linalg.norm(A @ x - b) == pytest.approx(best, rel=1e-9)


def test_relative_errors_weigh_each_point_by_its_own_time():
    """The same as numpy's least squares on rows divided by each point's time: a 10% miss at
    a microsecond counts as much as one at a second."""
    n = np.array([1e2, 1e4, 1e6, 1e8])
    t = np.array([1.1e-6, 2.2e-6, 1.05e-4, 0.0102])
    columns = [np.ones_like(n), n]
    x = on_relative_errors(columns, t)
    weighted = np.linalg.lstsq(np.column_stack(columns) / t[:, None], np.ones(4), rcond=None)[0]
    assert np.array_equal(x, weighted)
    errors = (np.column_stack(columns) @ x - t) / t
    plain = np.linalg.lstsq(np.column_stack(columns), t, rcond=None)[0]
    plain_errors = (np.column_stack(columns) @ plain - t) / t
    assert np.sum(errors ** 2) < np.sum(plain_errors ** 2)  # the small points are not ignored
