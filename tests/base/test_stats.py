"""sim.stats: the t-interval against closed forms and the table it extends."""

import math

import numpy as np
import pytest

from sim.stats import MeanCI, mean_ci, t_quantile_975


def test_three_seeds_use_t_with_two_degrees_of_freedom():
    ci = mean_ci([1.0, 2.0, 3.0])  # mean 2, sample sd 1, se 1/sqrt(3)
    assert ci.mean == 2.0 and ci.n == 3
    assert ci.half_width == pytest.approx(4.303 / math.sqrt(3))
    assert (ci.low, ci.high) == pytest.approx((2 - ci.half_width, 2 + ci.half_width))


def test_none_and_nan_are_skipped_and_one_value_has_no_interval():
    ci = mean_ci([None, float("nan"), 5.0])
    assert ci.mean == 5.0 and ci.n == 1 and math.isnan(ci.half_width)
    empty = mean_ci([])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_expansion_continues_the_table():
    # published values: df 40 -> 2.021, 60 -> 2.000, 120 -> 1.980
    for df, table in ((40, 2.021), (60, 2.000), (120, 1.980)):
        assert t_quantile_975(df) == pytest.approx(table, abs=1.5e-3)
    assert t_quantile_975(31) < t_quantile_975(30)
    assert t_quantile_975(10**6) == pytest.approx(1.959964, abs=1e-5)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile_975(0)


def test_coverage_is_95_percent_by_monte_carlo():
    rng = np.random.default_rng(7)
    samples = rng.normal(3.0, 2.0, size=(20_000, 4))
    hits = sum(abs(ci.mean - 3.0) <= ci.half_width
               for ci in (mean_ci(row) for row in samples))
    assert hits / len(samples) == pytest.approx(0.95, abs=0.006)
    assert isinstance(mean_ci([1.0, 1.0]), MeanCI)
