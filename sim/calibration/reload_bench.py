"""How much longer a rank's work takes after a gap in it: the reload transient.

A rank's CPU work after it slept for a while runs slower than the same work in a warm loop:
what the gap let other code (other ranks, other tenants of the machine) displace from the
caches and TLBs is fetched again. Thiebaut and Stone (1987, "Footprints in the cache") model
this reload transient; if each cached line survives the foreign references of a gap of t with
probability exp(-t / tau), refetching costs reload_s (the whole footprint) x (1 - exp(-t /
tau)); any gap at all costs reload_base_s more:

    reload(t) = reload_base_s + reload_s x (1 - exp(-t / reload_tau_s))      (t > 0)

:func:`measure_reload` times a step's worth of the real runner's host work
(``Worker.next_batch``, ``SGD.step``, a message's copy) warm and right after sleeps of
several lengths, and :func:`fit_reload` fits the curve to the medians of the extra time.

It also times the work right after spinning as long (a loop polling the clock, as a
spinning waiter polls MPI): on a virtual machine the physical core's caches serve other
tenants while the guest spins, so the same curve applies with a base of its own,

    reload_spin(t) = reload_spin_base_s + reload_s x (1 - exp(-t / reload_tau_s)),

``reload_spin_base_s`` the median over the gaps of the spin's extra time less the curve
(:func:`fit_spin_base`). Here a Python loop and a loop of ``MPI.Request.Test`` left the
same extra time to within their spread (12-13 against 7-11 us after 0.05-0.2 ms, 85 against
98 us after 3 ms).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from sim.calibration.least_squares import least_squares

#: gaps (s) the work is timed after; the runs' gaps are naps (~50 us) to modelled
#: gradients (milliseconds)
GAPS_S = [100e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 20e-3]
GAPS_S_QUICK = [200e-6, 2e-3, 10e-3]
STEPS = 4  # the work after each gap: this many batch gathers, updates and message copies
FEATURES, SAMPLES, BATCH = 256, 8192, 64  # the validation's small logistic regression
TAUS_S = np.geomspace(50e-6, 0.2, 400)  # the time constants tried by the fit


def step_work() -> Any:
    """One step of a worker's host work on the real runner's code paths, as a callable:
    gather a batch, an SGD step, copy a message of the gradient out."""
    from sim import kernels as K
    from sim.training.rules import SGD
    from sim.training.validator import validate
    from sim.training.workload import build_workload

    config = validate({"cluster": {"workers": 1}, "workload": {
        "model": "logreg", "features": FEATURES, "samples": SAMPLES, "batch": BATCH}},
        "host calibration")
    worker = build_workload(config).workers[0]
    sgd = SGD(np.zeros(FEATURES + 1), config)
    grad, message = np.full(FEATURES + 1, 1e-3), np.empty(FEATURES + 1)

    def step() -> None:
        worker.next_batch()
        sgd.step(grad, 1e-3)
        K.copy(message, grad)

    return step


def measure_reload(quick: bool) -> dict[str, Any]:
    """Median seconds of :data:`STEPS` steps of host work warm and after each gap, and the
    fit (:func:`fit_reload`) of the extra time."""
    from sim.real.executors.rank_clock import tighten_timer_slack

    tighten_timer_slack()  # as real ranks: sleeps end when asked
    step = step_work()

    def timed(gap_s: float, spin: bool) -> float:
        if gap_s > 0:
            (spin_for if spin else time.sleep)(gap_s)
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        return time.perf_counter() - start

    for _ in range(200):
        step()
    gaps = GAPS_S_QUICK if quick else GAPS_S
    # every round times each gap once, slept and spun, in a shuffled order, and the warm
    # work: the machine's drift (other tenants come and go) then weighs on every gap alike
    order = np.random.default_rng(0)
    kinds = [(0.0, False)] + [(g, spin) for g in gaps for spin in (False, True)]
    samples: dict[tuple[float, bool], list[float]] = {k: [] for k in kinds}
    for _ in range(60 if quick else 300):
        for i in order.permutation(len(kinds)):
            gap, spin = kinds[i]
            samples[kinds[i]].append(timed(gap, spin))
    warm = float(np.median(samples[(0.0, False)]))
    extra = [float(np.median(samples[(g, False)])) - warm for g in gaps]
    spun = [float(np.median(samples[(g, True)])) - warm for g in gaps]
    return {"warm_s": warm, "steps": STEPS, "rounds": len(samples[(0.0, False)]),
            **fit_both(gaps, extra, spun)}


def fit_both(gaps_s: list[float], extra_s: list[float],
             spin_extra_s: list[float]) -> dict[str, Any]:
    """The reload's fit (:func:`fit_reload`) to the extra time after sleeps of ``gaps_s``
    and the spin's base (:func:`fit_spin_base`) to the extra time after spins as long."""
    fitted = fit_reload(gaps_s, extra_s)
    return {**fitted, "spin_extra_s": list(spin_extra_s),
            **fit_spin_base(gaps_s, spin_extra_s, fitted)}


def spin_for(seconds: float) -> None:
    """Spin ``seconds``, polling the clock."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def fit_spin_base(gaps_s: list[float], spin_extra_s: list[float],
                  fitted: dict[str, Any]) -> dict[str, Any]:
    """``reload_spin_base_s``: the median over the gaps of the spins' extra time less the
    sleeps' curve (``fitted``: :func:`fit_reload`'s), at least 0; with the errors of
    ``reload_spin_base_s + curve`` against each spin's extra time."""
    t, y = np.asarray(gaps_s, float), np.asarray(spin_extra_s, float)
    tau = fitted["reload_tau_s"]
    curve = -fitted["reload_s"] * np.expm1(-t / tau) if tau > 0 else np.zeros_like(t)
    base = max(float(np.median(y - curve)), 0.0)
    errors = [float((base + c) / e - 1) if e > 0 else None
              for c, e in zip(curve, y, strict=True)]
    known = [abs(e) for e in errors if e is not None]
    return {"reload_spin_base_s": base, "spin_errors": errors,
            "spin_max_error": max(known) if known else 0.0}


def fit_reload(gaps_s: list[float], extra_s: list[float]) -> dict[str, Any]:
    """``extra = reload_base_s + reload_s x (1 - exp(-gap / reload_tau_s))`` by least squares
    on relative errors (:func:`fit_curve`). Extras at or below zero (no slowdown measurable)
    are left out; none above zero fits as nothing to reload."""
    t, y = np.asarray(gaps_s, float), np.asarray(extra_s, float)
    fitted = fit_curve(t, y)
    if fitted is None:
        return {"reload_s": 0.0, "reload_tau_s": 0.0, "reload_base_s": 0.0,
                "gaps_s": t.tolist(), "extra_s": y.tolist(), "errors": [None] * len(t),
                "max_error": 0.0}
    base, reload_s, tau, errors = fitted
    return {"reload_s": reload_s, "reload_tau_s": tau if reload_s > 0 else 0.0,
            "reload_base_s": base, "gaps_s": t.tolist(), "extra_s": y.tolist(),
            "errors": errors, "max_error": max(abs(e) for e in errors if e is not None)}


def fit_curve(t: np.ndarray, y: np.ndarray, with_base: bool = True,
              ) -> tuple[float, float, float, list[float | None]] | None:
    """``y ~ base + scale x (1 - exp(-t / tau))`` (base 0 unless ``with_base``) by least
    squares on relative errors over the points with ``y`` > 0: tau by a search over
    :data:`TAUS_S`, base and scale (>= 0) in closed form for each. (base, scale, tau, each
    point's relative error, None where ``y`` <= 0); None if no ``y`` is above zero."""
    kept = y > 0
    if not kept.any():
        return None
    best: tuple[float, float, float, float] | None = None
    for tau in TAUS_S:
        shape = -np.expm1(-t[kept] / tau)  # 1 - exp(-t / tau)
        base, scale = (_base_and_scale(shape, y[kept]) if with_base
                       else (0.0, _scale_only(shape, y[kept])))
        residual = float(np.sum(((base + scale * shape) / y[kept] - 1) ** 2))
        if best is None or residual < best[0]:
            best = (residual, base, scale, float(tau))
    _, base, scale, tau = best
    model = base - scale * np.expm1(-t / tau)
    errors = [float(m / e - 1) if e > 0 else None for m, e in zip(model, y, strict=True)]
    return base, scale, tau, errors


def _scale_only(shape: np.ndarray, y: np.ndarray) -> float:
    """Least squares of ``y ~ scale x shape`` on relative errors."""
    a = shape / y
    return float(np.sum(a) / (a @ a))


def _base_and_scale(shape: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least squares of ``y ~ base + scale x shape`` on relative errors, both >= 0."""
    A = np.column_stack([np.ones_like(shape), shape]) / y[:, None]
    base, scale = least_squares(A, np.ones_like(y))
    if base >= 0 and scale >= 0:
        return float(base), float(scale)
    only_scale, only_base = _scale_only(shape, y), _scale_only(np.ones_like(y), y)
    candidates = [(0.0, only_scale), (only_base, 0.0)]
    return min(candidates, key=lambda c: float(np.sum((A @ np.array(c) - 1) ** 2)))
