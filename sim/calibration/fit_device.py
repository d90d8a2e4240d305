"""The device profile's terms fitted to timed gradients, from microbenchmarks
(:mod:`sim.calibration.measure_device`) or from real runs (:mod:`sim.calibration.from_runs`).

``time = overhead_s + FLOPs / flops_per_s + weight traffic / memory_Bps`` is fitted by
non-negative least squares on relative errors (:mod:`sim.training.compute_model`; a term
whose coefficient would be negative is left out); the layers' inputs and outputs (activation
traffic) add ``activations / activation_Bps``, and a workload that reads ids by index (an
embedding model) ``ids x lookup_s``. The result is written as a device profile by
:func:`sim.calibration.profiles.write_device` for ``compute.device = "calibrated:PATH"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.calibration.least_squares import least_squares, on_relative_errors

#: The device fit's terms beyond the overhead and FLOPs (a point without one has 0 of it).
EXTRAS = ("traffic", "activations", "lookups")

@dataclass
class DeviceFit:
    flops_per_s: float
    overhead_s: float
    memory_Bps: float | None  # None: the traffic term left out (no bandwidth found)
    errors: list[float]  # (predicted - measured) / measured, per point
    lookup_s: float | None = None  # None: no point reads ids, or the term left out
    activation_Bps: float | None = None  # None: no activations, or the term left out

    @classmethod
    def of(cls, coef: dict[str, float], errors: list[float]) -> DeviceFit:
        """From each term's coefficient (s per unit; a term absent or 0: left out)."""
        def rate(term: str) -> float | None:
            return 1.0 / coef[term] if coef.get(term, 0.0) > 0 else None

        return cls(1.0 / coef["flops"], coef.get("overhead", 0.0), rate("traffic"), errors,
                   coef.get("lookups") or None, rate("activations"))

    def rates(self) -> dict[str, float | None]:
        """The device profile's numbers, by their keys."""
        return {"flops_per_s": self.flops_per_s, "overhead_s": self.overhead_s,
                "memory_Bps": self.memory_Bps, "activation_Bps": self.activation_Bps,
                "lookup_s": self.lookup_s}


def device_columns(points: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each term's value at each point: 1 (the overhead), FLOPs, weight bytes, activation
    bytes, ids."""
    def column(key: str) -> np.ndarray:
        return np.array([p.get(key, 0.0) for p in points], float)

    return {"overhead": np.ones(len(points)), "flops": column("flops"),
            "traffic": column("traffic"), "activations": column("activations"),
            "lookups": column("lookups")}


def present_terms(named: dict[str, np.ndarray]) -> list[str]:
    """The overhead, FLOPs and each of the :data:`EXTRAS` some point has."""
    return ["overhead", "flops"] + [t for t in EXTRAS if named[t].any()]


def fit_device(points: list[dict[str, Any]]) -> DeviceFit:
    """time = overhead + FLOPs / flops_per_s + traffic / memory_Bps + activations /
    activation_Bps + ids x lookup_s by non-negative least squares on relative errors
    (Lawson and Hanson's NNLS): a term whose coefficient would be negative is left out (0),
    and so is one that no point has. Where that leaves no FLOP rate (points too few or of
    one shape), the overhead and FLOPs alone, else a pure rate through the origin."""
    seconds = np.array([p["seconds"] for p in points])
    named = device_columns(points)
    for terms in (present_terms(named), ["overhead", "flops"]):
        x = on_relative_errors([named[t] for t in terms], seconds, nonnegative=True)
        coef = dict(zip(terms, x.tolist(), strict=True))
        if coef["flops"] > 0:
            break
    else:
        coef = {"flops": float(np.median(seconds / named["flops"]))}
    predicted = sum(coef[t] * named[t] for t in coef)
    return DeviceFit.of(coef, (predicted / seconds - 1).tolist())

PRIOR_WEIGHT = 1e-4  # the squared relative error a term the size of a whole gradient off
# its prior weighs (fit_device_near)

def fit_device_near(points: list[dict[str, Any]], prior: dict[str, Any]) -> DeviceFit:
    """:func:`fit_device`'s terms by non-negative least squares on relative errors, pulled
    weakly (:data:`PRIOR_WEIGHT`) towards a prior device's (``prior``: a device profile's
    JSON): where the points leave a term free (fewer workloads than terms, or workloads of
    one shape) it keeps the prior's value, and elsewhere the points decide (Tikhonov
    regularisation towards a prior). A term no point has (weights, activations, ids) keeps
    the prior's value as it is."""
    seconds = np.array([p["seconds"] for p in points])
    named = device_columns(points)
    known = {"overhead": prior.get("overhead_s", 0.0), "flops": 1.0 / prior["flops_per_s"],
             "traffic": per_unit(prior.get("memory_Bps")),
             "activations": per_unit(prior.get("activation_Bps")),
             "lookups": prior.get("lookup_s") or 0.0}
    terms = present_terms(named)
    columns = np.column_stack([named[t] for t in terms])
    start = np.array([known[t] for t in terms])
    # a unit of each coefficient's prior row: what the term adds to a typical gradient
    # (of the points that have the term), over that gradient's time
    typical = np.array([np.median(c[c > 0]) if c.any() else 0.0 for c in columns.T]) \
        / float(np.median(seconds))
    rows = np.sqrt(PRIOR_WEIGHT) * np.diag(typical)
    A = np.vstack([columns / seconds[:, None], rows])
    b = np.concatenate([np.ones_like(seconds), rows @ start])
    x = least_squares(A, b, nonnegative=True)
    predicted = columns @ x
    coef = known | dict(zip(terms, x.tolist(), strict=True))
    if coef["flops"] <= 0:  # no FLOPs at all: the prior's rate
        coef["flops"] = known["flops"]
    return DeviceFit.of(coef, (predicted / seconds - 1).tolist())


def per_unit(rate: float | None) -> float:
    """Seconds per unit of a rate (0 for none)."""
    return 1.0 / rate if rate else 0.0

