"""Mean and 95% confidence interval of a few seeds' results (Student's t, two-sided).

Seeds are few (3-10), so the interval uses Student's t quantile for n - 1 degrees of
freedom, not the normal 1.96: with 3 seeds the half-width is 4.30 standard errors.
The quantiles are the standard table values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2);
beyond 30 degrees of freedom the Cornish-Fisher expansion is within 1e-4 of the table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

# t_{0.975, df} for df = 1..30 (NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
         2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
         2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959963984540054


class MeanCI(NamedTuple):
    """``mean`` of ``n`` finite values and the half-width of its 95% interval.

    ``half_width`` is NaN when fewer than two values are finite (no spread to estimate);
    ``n`` counts the finite values only.
    """

    mean: float
    half_width: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def t_quantile_975(df: int) -> float:
    """Student's t 97.5% quantile for ``df`` >= 1 degrees of freedom.

    Raises ValueError for ``df`` < 1.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975  # Cornish-Fisher expansion of t in 1/df around the normal quantile
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


def mean_ci(values: Iterable[float | None]) -> MeanCI:
    """Mean and 95% t-interval half-width of the finite ``values`` (None and NaN skipped).

    An empty input gives ``MeanCI(nan, nan, 0)``.
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(finite)
    if n == 0:
        return MeanCI(math.nan, math.nan, 0)
    mean = math.fsum(finite) / n
    if n == 1:
        return MeanCI(mean, math.nan, 1)
    var = math.fsum((v - mean) ** 2 for v in finite) / (n - 1)
    return MeanCI(mean, t_quantile_975(n - 1) * math.sqrt(var / n), n)
